"""A torch-only BERT encoder for inference: the same function as ``transformers.BertModel`` (and
``RobertaModel`` / ``XLMRobertaModel``) in eval mode, loaded straight from ``model.safetensors`` and
``tokenizer.json``.

Why it exists: importing transformers' model classes costs ~4 s of a ~12 s cold run on 2 CPU cores
(``benchmarks/peers/vs_peers.py``), more than the forward pass itself, and a forward of its own can
skip padding and use kernels fitted to short sentences (:mod:`harness.core.encoding.kernels`). The
layers are :class:`harness.core.encoding.native_encoder.NativeEncoder`'s; this module adds BERT's
embeddings. Training (SimCSE, DSE) always uses transformers.

RoBERTa's layers are BERT's; its embeddings count positions from ``pad_token_id + 1`` (real tokens
only, so the token at column j of a sentence gets position ``j + pad_token_id + 1``; with RoBERTa's
``pad_token_id`` 1, a sentence's ``<s>`` gets position 2) and it has one token type.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.core.encoding import uninitialised
from harness.core.encoding.kernels import ACTIVATIONS, Packing
from harness.core.encoding.model_files import model_config
from harness.core.encoding.native_encoder import (
    NativeEncoder,
    NativeTokenizer,
    load_state,
    read_weights,
)

__all__ = ["ACTIVATIONS", "NativeBert", "NativeTokenizer", "load_native_bert"]

BERT_LAYER = {
    "qkv": ("attention.self.query", "attention.self.key", "attention.self.value"),
    "out": "attention.output.dense",
    "norm1": "attention.output.LayerNorm",
    "up": "intermediate.dense",
    "down": "output.dense",
    "norm2": "output.LayerNorm",
}


class NativeBert(NativeEncoder):
    """BERT / RoBERTa: word + absolute position + token type embeddings, LayerNorm."""

    def __init__(self, config: dict[str, Any], with_pooler: bool, position_offset: int = 0) -> None:
        super().__init__(config, with_pooler)
        hidden = config["hidden_size"]
        self.word = uninitialised.Embedding(config["vocab_size"], hidden)
        self.position = uninitialised.Embedding(config["max_position_embeddings"], hidden)
        self.token_type = uninitialised.Embedding(config.get("type_vocab_size", 2), hidden)
        self.norm = nn.LayerNorm(hidden, eps=config.get("layer_norm_eps", 1e-12))
        self.position_offset = position_offset

    def embed(
        self, packing: Packing, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None
    ) -> torch.Tensor:
        types = (
            packing.gather(token_type_ids)
            if token_type_ids is not None
            else torch.zeros_like(packing.columns)
        )
        positions = packing.columns + self.position_offset
        return self.norm(
            self.word(packing.gather(input_ids)) + self.position(positions) + self.token_type(types)
        )


def load_native_bert(folder: Path, position_offset: int = 0) -> NativeBert:
    """Build the module and copy the HF weights in (QKV fused); fails loudly on any missing
    tensor. ``position_offset``: the position id of a sentence's first token (0 for BERT; a
    RoBERTa's ``pad_token_id + 1``, as its family says:
    :mod:`harness.core.encoding.families.roberta`)."""
    config = model_config(folder)
    # checkpoints saved from BertFor* / RobertaFor* heads
    hf = read_weights(folder, ("bert.", "roberta."))
    model = NativeBert(config, "pooler.dense.weight" in hf, position_offset)
    embeddings = {
        "word.weight": "embeddings.word_embeddings.weight",
        "position.weight": "embeddings.position_embeddings.weight",
        "token_type.weight": "embeddings.token_type_embeddings.weight",
        "norm.weight": "embeddings.LayerNorm.weight",
        "norm.bias": "embeddings.LayerNorm.bias",
    }
    load_state(model, hf, embeddings, BERT_LAYER)
    return model.eval()
