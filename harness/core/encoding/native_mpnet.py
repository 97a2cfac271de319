"""MPNet (``transformers.MPNetModel`` in eval mode) on the native packed layers: the base of
sentence-transformers' most used model, all-mpnet-base-v2.

Its layers are BERT's (separate q/k/v/o projections, fused here); it differs in two places:

* **Embeddings**: word + absolute position, no token types. Positions count from 2 (MPNet's
  embedding keeps row 1, its ``<pad>``, for padding, as RoBERTa does): column j → position j + 2.
* **A relative-position bias**, T5-style, added to every layer's scaled scores: one learned
  scalar per (bucket, head) for the signed distance ``j - i`` from query i to key j, shared by all
  layers. Distances below 8 get a bucket each (per sign); longer ones share log-spaced buckets up
  to distance 128, and all beyond it the last one; the sign doubles the 16 buckets to 32.
  Worked example: ``j - i = -3`` → bucket 3, ``+3`` → 16 + 3 = 19, ``+20`` → 16 + 8 +
  int(log(20/8) / log(128/8) · 8) = 16 + 8 + 2 = 26, ``-200`` → 15.

The bias depends only on the length, so each length group computes it once per forward
(:meth:`NativeMPNet.score_bias`), and every sentence of a group shares it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.core.encoding import uninitialised
from harness.core.encoding.kernels import Packing, ScoreBias
from harness.core.encoding.model_files import model_config
from harness.core.encoding.native_encoder import (
    NativeEncoder,
    load_state,
    read_weights,
)

__all__ = ["NativeMPNet", "load_native_mpnet", "relative_buckets"]

MPNET_LAYER = {
    "qkv": ("attention.attn.q", "attention.attn.k", "attention.attn.v"),
    "out": "attention.attn.o",
    "norm1": "attention.LayerNorm",
    "up": "intermediate.dense",
    "down": "output.dense",
    "norm2": "output.LayerNorm",
}
# transformers' MPNetEncoder buckets with these whatever the config says (its bias table has
# ``relative_attention_num_buckets`` rows; native_reason requires 32).
BUCKETS, MAX_DISTANCE = 32, 128
POSITION_OFFSET = 2  # MPNetEmbeddings' padding_idx is 1 whatever pad_token_id says


def relative_buckets(length: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(length, length) bucket of the distance from query i (row) to key j (column).

    >>> relative_buckets(3).tolist()
    [[0, 17, 18], [1, 0, 17], [2, 1, 0]]
    """
    positions = torch.arange(length, dtype=torch.long, device=device)
    distance = positions[None, :] - positions[:, None]  # j - i
    half = BUCKETS // 2
    exact = half // 2
    magnitude = distance.abs()
    # log-spaced beyond ``exact``, in float32 as transformers computes it (the truncation decides
    # bucket boundaries, so the arithmetic must be the same)
    logarithmic = exact + (
        torch.log(magnitude.float() / exact) / math.log(MAX_DISTANCE / exact) * (half - exact)
    ).to(torch.long)
    logarithmic = torch.clamp(logarithmic, max=half - 1)
    return (distance > 0).long() * half + torch.where(magnitude < exact, magnitude, logarithmic)


class NativeMPNet(NativeEncoder):
    """MPNet: see the module docstring."""

    def __init__(self, config: dict[str, Any], with_pooler: bool) -> None:
        super().__init__(config, with_pooler)
        hidden = config["hidden_size"]
        self.word = uninitialised.Embedding(config["vocab_size"], hidden)
        self.position = uninitialised.Embedding(config["max_position_embeddings"], hidden)
        self.norm = nn.LayerNorm(hidden, eps=config.get("layer_norm_eps", 1e-12))
        self.relative_bias = uninitialised.Embedding(
            config.get("relative_attention_num_buckets", BUCKETS), config["num_attention_heads"]
        )
        self._bias_by_length: dict[int, torch.Tensor] = {}

    def embed(
        self, packing: Packing, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None
    ) -> torch.Tensor:
        self._bias_by_length = {}  # weights may have moved or changed since the last batch
        return self.norm(
            self.word(packing.gather(input_ids)) + self.position(packing.columns + POSITION_OFFSET)
        )

    def score_bias(self, layer: int) -> ScoreBias:
        return self._length_bias

    def _length_bias(self, q: torch.Tensor, k: torch.Tensor, length: int) -> torch.Tensor:
        """(heads, L, L): the same for every layer and sentence of this length."""
        if length not in self._bias_by_length:
            buckets = relative_buckets(length, q.device)
            self._bias_by_length[length] = (
                self.relative_bias(buckets).permute(2, 0, 1).float().contiguous()
            )
        return self._bias_by_length[length]


def load_native_mpnet(folder: Path) -> NativeMPNet:
    """Build the module and copy the HF weights in (QKV fused); fails loudly on any missing
    tensor."""
    config = model_config(folder)
    hf = read_weights(folder, ("mpnet.",))  # checkpoints saved from MPNetFor* heads
    model = NativeMPNet(config, with_pooler="pooler.dense.weight" in hf)
    embeddings = {
        "word.weight": "embeddings.word_embeddings.weight",
        "position.weight": "embeddings.position_embeddings.weight",
        "norm.weight": "embeddings.LayerNorm.weight",
        "norm.bias": "embeddings.LayerNorm.bias",
        "relative_bias.weight": "encoder.relative_attention_bias.weight",
    }
    load_state(model, hf, embeddings, MPNET_LAYER)
    return model.eval()
