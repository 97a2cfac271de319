"""PEFT/LoRA adapters on a backbone: found, checked and fingerprinted without torch; merged into
the weights when the model loads.

An adapter is a folder saved by peft (``adapter_config.json`` + ``adapter_model.safetensors``), as
LLM2Vec publishes its MNTP and SimCSE stages. A backbone with an adapter is another backbone:
:class:`AdapterRef` (its folder and the sha256 of its two files) is part of the
:class:`~harness.core.encoding.backbone.BackboneRef`, so of every vector's cache key and of the
record. A LoRA's update of a weight ``W`` (out × in) is ``W + s · B A`` with ``A`` (r × in), ``B``
(out × r) and ``s = lora_alpha / r`` (``lora_alpha / √r`` with ``use_rslora``); merged once at load,
the forward pass is the backbone's own. For example r = 2, alpha = 4: s = 2, and a row of ``B``
(1, 0) with ``A``'s first row (0.5, 0.5, 0, …) adds 1 to that row's first two weights.

Traps, both silent in peft itself:

* An adapter saved from a ``*ForCausalLM`` model names its tensors ``base_model.model.model.…``;
  loaded onto the base model (``AutoModel``, what the harness reads hidden states from) none of
  them matches and peft only warns ("Found missing adapter keys"): the vectors would be the
  backbone's. The keys are matched on the base model's own module names here
  (:func:`adapter_module_names`), and an adapter whose tensors do not all land is refused.
* ``lora_B`` starts at zero: an adapter saved before training changes nothing. That is not an
  error, but the digest in the record tells such an adapter from a trained one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.encoding.model_files import AdapterConfig
from harness.core.errors import UserError
from harness.core.hashing import fingerprint_dir, read_json

CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."
# The LoRA targets the native decoder merges into its fused weights (native_llama.merge_lora).
NATIVE_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class AdapterRef:
    """A checked adapter folder: ``path`` (resolved), ``digest`` (sha256 of its config and
    weights), its LoRA rank, alpha and whether it uses rsLoRA's scale, the base model it names
    (``base``, as peft saved it: informative only) and ``native_reason`` ('' when the native
    decoder merges it itself)."""

    path: str
    digest: str
    rank: int
    alpha: float
    rslora: bool
    base: str | None
    native_reason: str

    @property
    def scale(self) -> float:
        """``s`` of ``W + s · B A``: alpha / r, or alpha / √r under rsLoRA."""
        return self.alpha / (self.rank**0.5 if self.rslora else self.rank)

    def key(self) -> dict[str, str]:
        """The adapter in cache keys: its content's digest (the path is where it lay)."""
        return {"adapter": self.digest}

    def record(self) -> dict[str, Any]:
        """The adapter in a record's ``backbone``."""
        return {
            "path": self.path,
            "sha256": self.digest,
            "r": self.rank,
            "lora_alpha": self.alpha,
            "use_rslora": self.rslora,
            "base_model_name_or_path": self.base,
        }


FIX = f"pass a folder saved by peft ({CONFIG} and {WEIGHTS}) with --set METHOD.adapter=DIR"


def _refuse(folder: str, problem: str) -> UserError:
    return UserError(f"adapter {folder}: {problem}; {FIX}")


def resolve_adapter(
    folder: str, header: Callable[[Path], dict[str, Any]], memo: Path | None = None
) -> AdapterRef:
    """Check the adapter folder ``folder`` and fingerprint it; one :class:`UserError` line when it
    is missing, not a LoRA, or its files are broken. ``header`` reads and checks a safetensors
    file's header, no tensor (the backbone's own check, passed in: this module sits below it)."""
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise _refuse(folder, "no such directory")
    for name in (CONFIG, WEIGHTS):
        if not (path / name).exists():
            raise _refuse(folder, f"has no {name}")
    config = read_json(path / CONFIG, AdapterConfig, FIX)
    if config["peft_type"] != "LORA":
        raise _refuse(folder, f"is a {config['peft_type']} adapter, not a LoRA (peft_type LORA)")
    rank, alpha, rslora = config["r"], config["lora_alpha"], config.get("use_rslora", False)
    fields = {  # each value as peft means it (the types: AdapterConfig, held to at the read)
        "r": (rank > 0, "a positive whole number"),
        "lora_alpha": (alpha > 0, "a positive number"),
        "modules_to_save": (not config.get("modules_to_save"), "absent (not supported)"),
    }
    for field, (ok, wanted) in fields.items():
        if not ok:
            raise _refuse(folder, f"{CONFIG} gives {field}={config.get(field)!r}, not {wanted}")
    try:
        entries = header(path / WEIGHTS)
    except (OSError, ValueError) as err:
        raise _refuse(folder, f"{WEIGHTS} {err}") from None
    ranks = {rank, *config.get("rank_pattern", {}).values()}
    for key, entry in entries.items():  # lora_A is (r, in, …), lora_B (out, r, …)
        side, shape = (0 if ".lora_A." in key else 1 if ".lora_B." in key else -1), entry["shape"]
        if side >= 0 and key.endswith(".weight") and [*shape, 0, 0][side] not in ranks:
            raise _refuse(folder, f"{WEIGHTS} holds {key} of shape {shape}, not of rank r={rank}")
    if not any(".lora_A." in key for key in entries):
        raise _refuse(folder, f"{WEIGHTS} holds no lora_A/lora_B tensors")
    base = config.get("base_model_name_or_path")
    return AdapterRef(
        path=str(path.resolve()),
        digest=fingerprint_dir(path, memo),
        rank=rank,
        alpha=float(alpha),
        rslora=rslora,
        base=base if isinstance(base, str) else None,
        native_reason=native_reason(config, list(entries)),
    )


def adapter_module_names(keys: list[str], prefix: str) -> dict[str, str]:
    """Each LoRA tensor's name in the file → the module it updates, named as in the base model
    (``AutoModel``): peft's ``base_model.model.`` removed, and the causal-LM head's ``prefix``
    (``model.``) too when the adapter was saved from a ``*ForCausalLM``.

    >>> adapter_module_names(["base_model.model.model.layers.0.mlp.up_proj.lora_A.weight"], "model")
    {'base_model.model.model.layers.0.mlp.up_proj.lora_A.weight': 'layers.0.mlp.up_proj'}
    """
    out = {}
    for key in keys:
        name = key.removeprefix(PEFT_PREFIX)
        if prefix and name.startswith(prefix + "."):
            name = name.removeprefix(prefix + ".")
        out[key] = name.rsplit(".lora_", 1)[0]
    return out


def native_reason(config: dict[str, Any], keys: list[str]) -> str:
    """'' when the native decoder merges this LoRA itself (plain LoRA on the projections it
    fuses); otherwise why not (it then runs through transformers and peft)."""
    checks = [
        (not config.get("use_dora"), "DoRA"),
        (not config.get("rank_pattern") and not config.get("alpha_pattern"), "per-layer ranks"),
        (not config.get("fan_in_fan_out"), "fan_in_fan_out"),
        (config.get("bias", "none") == "none" and not config.get("lora_bias"), "LoRA biases"),
        (
            all(".lora_A.weight" in k or ".lora_B.weight" in k for k in keys),
            "tensors other than lora_A/lora_B weights",
        ),
        (
            all(name.rsplit(".", 1)[-1] in NATIVE_TARGETS for name in adapter_module_names(
                keys, "model").values()),
            f"targets beyond {', '.join(NATIVE_TARGETS)}",
        ),
    ]  # fmt: skip
    failed = [why for ok, why in checks if not ok]
    return f"an adapter with {failed[0]}" if failed else ""
