"""DeBERTa-v2 and v3 (``deberta-v2`` in config.json): content→position and position→content
attention terms (:mod:`harness.core.encoding.native_deberta`). DeBERTa v1 (``deberta``) has
another attention and runs through transformers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.encoding.families.family import Family, encoder_reason


def check(folder: Path, config: dict[str, Any]) -> str:
    """Also refused: the xlarge models' convolution, other attention terms than c2p/p2c, another
    head size, a relative table normalised otherwise than by LayerNorm."""
    if encoder_reason(config):
        return encoder_reason(config)
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    kinds = config.get("pos_att_type") or []
    kinds = kinds.lower().split("|") if isinstance(kinds, str) else kinds
    norms = str(config.get("norm_rel_ebd", "none")).lower().split("|")
    plain = (
        config.get("conv_kernel_size", 0) <= 0
        and config.get("attention_head_size", head_dim) == head_dim
        and all(str(k).strip() in ("c2p", "p2c") for k in kinds)
        and all(n.strip() in ("none", "layer_norm") for n in norms)
    )
    return "" if plain else "a DeBERTa variant"


def load(folder: Path, config: dict[str, Any], dtype: Any = None) -> Any:
    """fp32 weights (the engine sets the compute dtype)."""
    from harness.core.encoding.native_deberta import load_native_deberta

    return load_native_deberta(folder)


FAMILY = Family(
    name="deberta-v2",
    label="DeBERTa-v2/v3",
    model_types=("deberta-v2",),
    load=load,
    check=check,
)
