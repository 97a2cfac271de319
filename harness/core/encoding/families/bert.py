"""BERT: absolute positions from 0, token types, post-LayerNorm layers
(:mod:`harness.core.encoding.native_bert`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.encoding.families.family import Family, encoder_reason


def check(folder: Path, config: dict[str, Any]) -> str:
    if encoder_reason(config):
        return encoder_reason(config)
    absolute = config.get("position_embedding_type", "absolute") == "absolute"
    return "" if absolute else "relative position embeddings"


def load(folder: Path, config: dict[str, Any], dtype: Any = None) -> Any:
    """fp32 weights (the engine sets the compute dtype)."""
    from harness.core.encoding.native_bert import load_native_bert

    return load_native_bert(folder)


FAMILY = Family(name="bert", label="BERT", model_types=("bert",), load=load, check=check)
