"""What a backbone family declares (:class:`Family`), and the checks several families share.

A family is the set of checkpoints one implementation runs the same way: which ``config.json``
``model_type`` values (or architecture names) it takes, whether it is a decoder, where its position
ids start, and, for a family the harness runs natively, how to load it and which checkpoints the
native loader reproduces exactly. Everything here reads files and dicts only: no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.encoding.tokenizer import tokenizer_reason

if TYPE_CHECKING:
    import torch

# The files a native loader reads: the weights and the tokenizer.
NATIVE_FILES = ("tokenizer.json", "model.safetensors")
_MISSING = {"model.safetensors": "no single model.safetensors"}  # a sharded or .bin checkpoint

# A native loader: (folder, its config.json, the weights' dtype or None) -> the model in eval mode.
# It imports torch and its implementation module inside, so declaring a family costs nothing.
Loader = Callable[[Path, dict[str, Any], "torch.dtype | None"], Any]


def no_offset(config: dict[str, Any]) -> int:
    return 0


def no_check(folder: Path, config: dict[str, Any]) -> str:
    return ""


@dataclass(frozen=True)
class Family:
    """One backbone family: one registration in :mod:`harness.core.encoding.families`.

    ``name``: the registry's key. ``label``: how messages name it ("DeBERTa-v2/v3").
    ``model_types``: the ``config.json`` ``model_type`` values it takes. ``architectures``: suffixes
    of ``config.json``'s architecture names it takes when no family takes the model type
    ("ForCausalLM"). ``decoder_flag``: it also takes such configs saying ``is_decoder``.
    ``causal``: a decoder (token ``i`` sees tokens ``<= i``). ``offset(config)``: the position id of
    a sequence's first token. ``load``: its native loader (None: it runs through transformers
    only); ``native_types``: the model types ``load`` runs (empty: all of ``model_types``).
    ``check(folder, config)``: why ``load`` would not reproduce the checkpoint ('' when it
    does), once ``files`` are there and before the tokenizer is checked. ``bidirectional``: a
    decoder both engines also run without its causal mask (a view's ``attention=bidirectional``,
    LLM2Vec's models), checked against transformers' forward with a non-causal mask.
    """

    name: str
    label: str
    model_types: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    decoder_flag: bool = False
    causal: bool = False
    offset: Callable[[dict[str, Any]], int] = no_offset
    load: Loader | None = None
    native_types: tuple[str, ...] = ()
    check: Callable[[Path, dict[str, Any]], str] = no_check
    files: tuple[str, ...] = NATIVE_FILES
    bidirectional: bool = False

    def takes_architecture(self, config: dict[str, Any]) -> bool:
        """Whether it takes ``config`` by its architecture names (or ``is_decoder``)."""
        names = [str(name) for name in config.get("architectures") or []]
        by_name = bool(self.architectures) and any(n.endswith(self.architectures) for n in names)
        return by_name or (self.decoder_flag and bool(config.get("is_decoder")))

    def reason_not(self, folder: Path, config: dict[str, Any]) -> str:
        """'' when this family's native loader reproduces the checkpoint in ``folder`` exactly;
        otherwise why not, in a few words."""
        model_type = config.get("model_type")
        if self.load is None or (self.native_types and model_type not in self.native_types):
            return f"no native {model_type}"
        for name in self.files:
            if not (folder / name).is_file():
                return _MISSING.get(name, f"no {name}")
        return self.check(folder, config) or tokenizer_reason(folder)

    @property
    def code(self) -> tuple[str, ...]:
        """The modules declaring its functions: what vectors key on besides the engine."""
        functions = (self.offset, self.load, self.check)
        return tuple(sorted({f.__module__ for f in functions if f is not None}))


# The activations the native encoders implement (harness.core.encoding.kernels.ACTIVATIONS).
NATIVE_ACTIVATIONS = ("gelu", "relu", "gelu_new", "gelu_pytorch_tanh")


def encoder_reason(config: dict[str, Any]) -> str:
    """'' for a post-LayerNorm encoder the native layers implement (an activation they have, not a
    decoder, a head count dividing the width); otherwise why not."""
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    plain = (
        config.get("hidden_act") in NATIVE_ACTIVATIONS
        and not config.get("is_decoder", False)
        and isinstance(heads, int)
        and isinstance(hidden, int)
        and heads > 0
        and hidden % heads == 0
    )
    return "" if plain else f"an unusual {config.get('model_type')} configuration"
