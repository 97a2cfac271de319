"""MPNet: BERT-like layers plus a bucketed relative-position bias per head; positions from 2 (its
embedding fixes its padding row at 1) (:mod:`harness.core.encoding.native_mpnet`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.encoding.families.family import Family, encoder_reason


def offset(config: dict[str, Any]) -> int:
    return 2


def check(folder: Path, config: dict[str, Any]) -> str:
    if encoder_reason(config):
        return encoder_reason(config)
    # transformers buckets distances into 32 whatever the table's size
    return "" if config.get("relative_attention_num_buckets", 32) == 32 else "bucket count"


def load(folder: Path, config: dict[str, Any], dtype: Any = None) -> Any:
    """fp32 weights (the engine sets the compute dtype)."""
    from harness.core.encoding.native_mpnet import load_native_mpnet

    return load_native_mpnet(folder)


FAMILY = Family(
    name="mpnet", label="MPNet", model_types=("mpnet",), offset=offset, load=load, check=check
)
