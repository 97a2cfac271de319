"""A sentence-transformers checkpoint's pipeline, read from its files without sentence-transformers.

``modules.json`` lists the modules a checkpoint's ``SentenceTransformer.encode`` runs: a Transformer
(the backbone), a Pooling (``1_Pooling/config.json``), then optionally Dense layers and a Normalize.
The harness runs the Transformer as its shared backbone pass and the Pooling as views of it
(:data:`POOLING_MODES` maps sentence-transformers' modes to the pooling table's names); the Dense
layers (weights from safetensors, never a pickle) and the Normalize are :meth:`Pipeline.transform`,
applied to the pooled vector. A module the harness does not implement makes
:attr:`Pipeline.unsupported` say which, and the method encodes through sentence-transformers.

>>> POOLING_MODES["mean_sqrt_len_tokens"], POOLING_MODES["lasttoken"]
('mean_sqrt_len', 'last')
>>> legacy_modes({"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True})
('mean',)
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import numpy as np

from harness.core.encoding import read_model_json
from harness.core.errors import UserError

# sentence-transformers' pooling mode → the pooling table's name (harness.core.encoding.pooling)
POOLING_MODES = {
    "cls": "cls",
    "max": "max",
    "mean": "mean",
    "mean_sqrt_len_tokens": "mean_sqrt_len",
    "weightedmean": "weightedmean",
    "lasttoken": "last",
}
# The boolean keys older checkpoints write, in the order sentence-transformers concatenates them.
LEGACY_MODE_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
# A Dense layer's activation (its config names the torch class) as a numpy function.
ACTIVATIONS: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    "torch.nn.modules.activation.Tanh": ("tanh", np.tanh),
    "torch.nn.modules.linear.Identity": ("identity", lambda x: x),
    "torch.nn.modules.activation.ReLU": ("relu", lambda x: np.maximum(x, 0)),
    "torch.nn.modules.activation.Sigmoid": ("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
}
DEFAULT_ACTIVATION = "torch.nn.modules.activation.Tanh"  # sentence-transformers' Dense default
# Where a sentence-transformers module reads and writes the pooled vector.
SENTENCE_EMBEDDING = "sentence_embedding"


class Unsupported(Exception):
    """A module (or a setting of one) the harness does not run itself."""


def legacy_modes(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The pooling modes an older config's ``pooling_mode_*`` booleans turn on (mean when none
    is, as sentence-transformers reads it)."""
    return tuple(mode for key, mode in LEGACY_MODE_KEYS.items() if config.get(key)) or ("mean",)


@dataclass(frozen=True)
class Dense:
    """``activation(x @ weight.T + bias)``: sentence-transformers' ``Dense`` module, its weights
    read (and checked against its config) when the pipeline is read."""

    in_features: int
    out_features: int
    activation: str  # the torch class its config names
    digest: str  # sha256 of its weights file
    weight: np.ndarray = field(compare=False, repr=False)  # (out_features, in_features)
    bias: np.ndarray | None = field(compare=False, repr=False)

    def describe(self) -> str:
        return (
            f"dense {self.in_features}→{self.out_features} {ACTIVATIONS[self.activation][0]} "
            f"(sha256 {self.digest[:12]})"
        )

    def apply(self, x: np.ndarray) -> np.ndarray:
        out = x @ self.weight.T
        if self.bias is not None:
            out = out + self.bias
        return np.asarray(ACTIVATIONS[self.activation][1](out), dtype=np.float32)


@dataclass(frozen=True)
class Pipeline:
    """What a checkpoint's ``encode`` computes after its Transformer: the pooling modes
    (concatenated in order), whether the prompt's tokens are pooled, then each step (a
    :class:`Dense` or ``"normalize"``). ``unsupported`` says which module the harness does not
    run ('' when it runs them all)."""

    poolings: tuple[str, ...] = ()
    include_prompt: bool = True
    steps: tuple[Dense | str, ...] = ()
    do_lower_case: bool = False
    default_prompt: str = ""  # the prompt encode() reads unless told otherwise
    unsupported: str = ""

    def describe(self) -> str:
        """The steps after pooling, for the record (``'dense 384→256 tanh (sha256 …) →
        normalize'``); '' when there are none."""
        return " → ".join(
            step.describe() if isinstance(step, Dense) else step for step in self.steps
        )

    def transform(self, x: np.ndarray) -> np.ndarray:
        """The pooled vectors ``x`` (n, d) through every step, in float32."""
        for step in self.steps:
            if isinstance(step, Dense):
                x = step.apply(x)
            else:  # sentence-transformers' Normalize: torch.nn.functional.normalize (eps 1e-12)
                norms = np.linalg.norm(x, axis=1, keepdims=True)
                x = (x / np.maximum(norms, 1e-12)).astype(np.float32)
        return x


class StModule(TypedDict):  # an entry of modules.json: a module's class, folder and place
    type: str
    path: str
    idx: NotRequired[int]


def _json(path: Path) -> dict[str, Any]:
    return read_model_json(path, dict[str, Any]) if path.exists() else {}


def _transformer(folder: Path, entry: Mapping[str, Any]) -> bool:
    """Check the Transformer module is the backbone the harness runs; its do_lower_case."""
    if entry.get("path", ""):
        raise Unsupported(f"its Transformer module is in a subfolder ({entry['path']})")
    config = _json(folder / "sentence_bert_config.json")
    for key in ("model_args", "tokenizer_args", "config_args", "processor_kwargs"):
        if config.get(key):
            raise Unsupported(f"its Transformer sets {key} {config[key]}")
    task = config.get("transformer_task", "feature-extraction")
    text = config.get("modality_config", {}).get("text", {})
    output = text.get("method_output_name", "last_hidden_state")
    if task != "feature-extraction" or output != "last_hidden_state":
        raise Unsupported(f"its Transformer reads {task} / {output}, not the last hidden state")
    return bool(config.get("do_lower_case", False))


def _pooling(folder: Path) -> tuple[tuple[str, ...], bool]:
    config = _json(folder / "config.json")
    modes = config.get("pooling_mode")
    if modes is None:
        modes = legacy_modes(config)
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    unknown = [mode for mode in modes if mode not in POOLING_MODES]
    if unknown:
        raise Unsupported(f"its Pooling mode {', '.join(unknown)} is not one the harness has")
    return tuple(POOLING_MODES[mode] for mode in modes), bool(config.get("include_prompt", True))


def _dense(folder: Path) -> Dense:
    config = _json(folder / "config.json")
    activation = config.get("activation_function", DEFAULT_ACTIVATION)
    if activation not in ACTIVATIONS:
        raise Unsupported(f"its Dense activation {activation} is not one the harness has")
    if config.get("use_residual"):
        raise Unsupported("its Dense has a residual connection")
    for key in ("module_input_name", "module_output_name"):
        if config.get(key, SENTENCE_EMBEDDING) != SENTENCE_EMBEDDING:
            raise Unsupported(f"its Dense {key} is {config[key]}")
    path = folder / "model.safetensors"
    if not path.is_file():
        # a pickle (pytorch_model.bin) the harness never loads: sentence-transformers does
        raise Unsupported(f"its Dense weights in {folder.name} are not in safetensors (a pickle)")
    from safetensors import SafetensorError
    from safetensors.numpy import load

    data = path.read_bytes()
    shape = (int(config["out_features"]), int(config["in_features"]))
    try:
        arrays = load(data)
    except SafetensorError:  # damaged: said below, with what was expected
        arrays = {}
    weight, bias = arrays.get("linear.weight"), arrays.get("linear.bias")
    if weight is None or weight.shape != shape or (bias is not None and bias.shape != shape[:1]):
        raise UserError(
            f"sbert: {path} holds no Dense weights of its config's shape {shape} (a damaged or "
            "foreign file); fetch the checkpoint again"
        )
    return Dense(
        shape[1],
        shape[0],
        activation,
        hashlib.sha256(data).hexdigest(),
        weight.astype(np.float32),
        None if bias is None else bias.astype(np.float32),
    )


def read_pipeline(folder: Path) -> Pipeline:
    """The pipeline of the checkpoint in ``folder`` (its ``modules.json``); a module the harness
    does not run gives a pipeline whose ``unsupported`` names it."""
    try:
        return _read(folder)
    except Unsupported as why:
        return Pipeline(unsupported=str(why))
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        return Pipeline(unsupported=f"its module files could not be read ({type(err).__name__})")


def _read(folder: Path) -> Pipeline:
    entries = read_model_json(folder / "modules.json", list[StModule])
    entries.sort(key=lambda entry: entry.get("idx", 0))
    kinds = [entry["type"] for entry in entries]
    for kind in kinds:
        if not kind.startswith("sentence_transformers."):
            raise Unsupported(f"module {kind} is not sentence-transformers' own")
    names = [kind.rsplit(".", 1)[-1] for kind in kinds]
    if names[:2] != ["Transformer", "Pooling"]:
        raise Unsupported(f"its modules are {' → '.join(names)}, not Transformer → Pooling → …")
    lower = _transformer(folder, entries[0])
    poolings, include_prompt = _pooling(folder / entries[1]["path"])
    steps: list[Dense | str] = []
    for entry, name in zip(entries[2:], names[2:]):
        if name == "Dense":
            steps.append(_dense(folder / entry["path"]))
        elif name == "Normalize":
            steps.append("normalize")
        elif name != "Dropout":  # dropout does nothing at inference
            raise Unsupported(f"module {name} is not one the harness runs")
    settings = _json(folder / "config_sentence_transformers.json")
    prompts, default = settings.get("prompts") or {}, settings.get("default_prompt_name")
    return Pipeline(
        poolings,
        include_prompt,
        tuple(steps),
        lower,
        str(prompts.get(default, "") if default else ""),
    )
