"""The JSON files of a model's or an adapter's folder, each held to its one declaration here
(:func:`harness.core.hashing.read_json`, issue 51): only the fields sts-bench reads itself are
declared (transformers reads the rest); one that breaks it is one ``error:`` line, exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NotRequired, TypedDict

from harness.core.hashing import JSON_BYTES, TOKENIZER_BYTES, read_json

FIX = "download or copy the model again so that the file is whole, or correct the field"


# config.json: the sizes the native engines build with (resolve_backbone checks a layer count and
# a width under their other names), positions and family; a multimodal one nests its decoder's
class ModelConfig(TypedDict, total=False):
    model_type: str
    architectures: list[str] | None
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int | None
    head_dim: int | None
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    n_positions: int
    pad_token_id: int | None
    layer_norm_eps: float
    rms_norm_eps: float
    rope_theta: float
    text_config: ModelConfig


class TokenizerConfig(TypedDict, total=False):  # model_max_length: 10**30 for none, a float
    add_bos_token: bool | None
    add_eos_token: bool | None
    bos_token: str | dict[str, Any] | None
    eos_token: str | dict[str, Any] | None
    pad_token: str | dict[str, Any] | None
    model_max_length: float


class TokenizerFile(TypedDict, total=False):  # the tokenizers library reads the rest
    post_processor: PostProcessor | None


# A template (pieces {"SpecialToken": {"id": ...}}), a Sequence of processors, or cls/sep pairs
class PostProcessor(TypedDict, total=False):
    type: str
    single: list[dict[str, TemplatePiece]]
    processors: list[PostProcessor]
    cls: list[str | int]
    sep: list[str | int]


class TemplatePiece(TypedDict):
    id: str


class WeightIndex(TypedDict):  # model.safetensors.index.json: the shard holding each tensor
    weight_map: dict[str, str]


class TensorEntry(TypedDict):  # a tensor's entry in a safetensors file's header
    dtype: str
    shape: list[int]
    data_offsets: list[int]


class AdapterConfig(TypedDict):  # peft's fields checked before a LoRA is merged
    peft_type: str
    r: int
    lora_alpha: float
    use_rslora: NotRequired[bool]
    rank_pattern: NotRequired[dict[str, int]]
    modules_to_save: NotRequired[list[str] | None]


def read_model_json(path: Path, schema: Any = None) -> Any:
    """``path``, a file of a model's folder, held to ``schema`` (by default the one its name
    declares: ``config.json`` to :class:`ModelConfig`): one ``error:`` line otherwise."""
    limit = TOKENIZER_BYTES if path.name == "tokenizer.json" else JSON_BYTES
    declared = {"config.json": ModelConfig, "adapter_config.json": AdapterConfig}
    return read_json(path, schema or declared.get(path.name, dict[str, Any]), FIX, limit)


def model_config(folder: str | Path) -> dict[str, Any]:
    return dict(read_model_json(Path(folder) / "config.json", ModelConfig))
