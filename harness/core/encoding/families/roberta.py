"""RoBERTa, XLM-R and CamemBERT: BERT's layers with positions counted from ``pad_token_id + 1``
(the position table keeps its first rows for padding: roberta-base has 514 rows, offset 2, so 512
tokens at most) and one token type. CamemBERT runs through transformers (its layers are RoBERTa's,
but no fixture here checks the native path on it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.encoding.families.family import Family, encoder_reason


def offset(config: dict[str, Any]) -> int:
    return config["pad_token_id"] + 1


def check(folder: Path, config: dict[str, Any]) -> str:
    if encoder_reason(config):
        return encoder_reason(config)
    if not isinstance(config.get("pad_token_id"), int):
        return "no pad_token_id"  # its positions start after its padding id
    absolute = config.get("position_embedding_type", "absolute") == "absolute"
    return "" if absolute else "relative position embeddings"


def load(folder: Path, config: dict[str, Any], dtype: Any = None) -> Any:
    """fp32 weights (the engine sets the compute dtype)."""
    from harness.core.encoding.native_bert import load_native_bert

    return load_native_bert(folder, position_offset=offset(config))


FAMILY = Family(
    name="roberta",
    label="RoBERTa",
    model_types=("roberta", "xlm-roberta", "camembert"),
    native_types=("roberta", "xlm-roberta"),
    offset=offset,
    load=load,
    check=check,
)
