"""The Llama-style decoders (:mod:`harness.core.encoding.native_llama`): Llama, Mistral (a sliding
window), Qwen2 (a bias on the query/key/value projection) and Qwen3 (an RMSNorm on each head's
queries and keys). Each is pre-norm RMSNorm, rotary positions, grouped-query attention and a SwiGLU
MLP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.encoding.families.family import Family

# What sets each model type apart, as native_llama.DecoderShape takes it.
VARIANTS: dict[str, dict[str, bool]] = {
    "llama": {},
    "mistral": {"sliding_window": True},
    "qwen2": {"qkv_bias": True},
    "qwen3": {"qk_norm": True},
}
LLAMA3_ROPE = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def check(folder: Path, config: dict[str, Any]) -> str:
    """Why the native decoder would not reproduce this checkpoint ('' when it does): another
    activation, rope scaling, biases or sliding-window layers it does not implement, odd head
    sizes."""
    variant = VARIANTS[config["model_type"]]
    heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
    kv_heads = config.get("num_key_value_heads") or heads
    if not (isinstance(heads, int) and isinstance(hidden, int) and isinstance(kv_heads, int)):
        return "no head counts in config.json"
    head_dim = config.get("head_dim") or (hidden // heads if heads else 0)
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    rope_type = (
        rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "?"
    )
    layer_types = config.get("layer_types") or []
    checks = [
        (config.get("hidden_act") == "silu", f"hidden_act {config.get('hidden_act')}"),
        (rope_type in ("default", "llama3"), f"rope type {rope_type}"),
        (
            rope_type != "llama3"
            or (
                all(isinstance(rope.get(key), int | float) for key in LLAMA3_ROPE)
                and rope.get("high_freq_factor") != rope.get("low_freq_factor")
            ),
            "rope type llama3 without its four parameters",
        ),
        (config.get("partial_rotary_factor", 1.0) == 1.0, "partial rotary"),
        (heads > 0 and kv_heads > 0 and heads % kv_heads == 0, "head counts"),
        (isinstance(head_dim, int) and head_dim > 0 and head_dim % 2 == 0, "head size"),
        (
            variant.get("qkv_bias", False) or not config.get("attention_bias", False),
            "attention bias",
        ),
        (not config.get("mlp_bias", False), "MLP bias"),
        (not config.get("use_sliding_window", False), "sliding-window layers"),
        (all(kind == "full_attention" for kind in layer_types), "non-full attention layers"),
        (not config.get("is_encoder_decoder", False), "encoder-decoder"),
    ]
    failed = [why for ok, why in checks if not ok]
    return failed[0] if failed else ""


def load(folder: Path, config: dict[str, Any], dtype: Any = None) -> Any:
    """Every weight in ``dtype`` (fp32 when None), as transformers loads a decoder."""
    import torch

    from harness.core.encoding.native_llama import load_decoder

    return load_decoder(folder, dtype or torch.float32, **VARIANTS[config["model_type"]])


FAMILY = Family(
    name="llama",
    label="Llama/Mistral/Qwen2/Qwen3",
    model_types=tuple(VARIANTS),
    causal=True,
    load=load,
    check=check,
    bidirectional=True,
)
