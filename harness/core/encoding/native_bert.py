"""A torch-only BERT encoder for inference: the same function as ``transformers.BertModel`` (and
``RobertaModel`` / ``XLMRobertaModel``) in eval mode, loaded straight from ``model.safetensors`` and
``tokenizer.json``.

Why it exists: importing transformers' model classes costs ~4 s of a ~12 s cold run on 2 CPU cores
(``benchmarks/vs_peers.py``), more than the forward pass itself, and a forward of its own can skip
padding and use kernels fitted to short sentences (:mod:`harness.core.encoding.kernels`). It is
used only when a checkpoint is exactly what it implements
(``harness.core.encoding.backbone.native_supported``), is checked against transformers to 1e-5 on
every hidden state in the tests, and ``--encoder-impl transformers`` turns it off. Training (SimCSE,
DSE) always uses transformers.

Per layer (post-LayerNorm BERT), on the batch's real tokens packed into rows::

    a = LayerNorm(x + W_o · MultiHeadAttention(W_q x, W_k x, W_v x))   per group of equal lengths
    y = LayerNorm(a + W_2 · act(W_1 a))

with the query, key and value projections fused into one (3H × H) matrix product. RoBERTa's
layers are BERT's; its embeddings count positions from ``pad_token_id + 1`` (real tokens only, so
the token at column j of a sentence gets position ``j + pad_token_id + 1``; with RoBERTa's
``pad_token_id`` 1, a sentence's ``<s>`` gets position 2) and it has one token type. Under
``--dtype bf16|fp16`` the whole layer runs in that dtype (LayerNorm statistics and attention
scores in fp32), as sentence-transformers and OpenVINO do in bf16; with bf16 on CPU the products
carry their bias, GELU and residual add as oneDNN epilogues. Embeddings are summed and normalised
in fp32.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.core.encoding.backbone import position_offset
from harness.core.encoding.kernels import (
    ACTIVATIONS,
    LinearKernel,
    PackedStates,
    Packing,
    fused_linear_available,
    packed_attention,
)

__all__ = ["ACTIVATIONS", "NativeBert", "NativeTokenizer", "load_native_bert"]


class _Layer(nn.Module):
    """The weights of one layer (the computation is :meth:`NativeBert.forward`'s)."""

    def __init__(self, hidden: int, heads: int, inner: int, eps: float) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden, eps=eps)
        self.up = nn.Linear(hidden, inner)
        self.down = nn.Linear(inner, hidden)
        self.norm2 = nn.LayerNorm(hidden, eps=eps)


class NativeBert(nn.Module):
    """BERT encoder returning every hidden state (index 0 = embeddings) and the pooler output."""

    def __init__(self, config: dict[str, Any], with_pooler: bool) -> None:
        super().__init__()
        hidden, eps = config["hidden_size"], config.get("layer_norm_eps", 1e-12)
        self.act = config["hidden_act"]
        self.word = nn.Embedding(config["vocab_size"], hidden)
        self.position = nn.Embedding(config["max_position_embeddings"], hidden)
        self.token_type = nn.Embedding(config.get("type_vocab_size", 2), hidden)
        self.norm = nn.LayerNorm(hidden, eps=eps)
        self.layers = nn.ModuleList(
            _Layer(hidden, config["num_attention_heads"], config["intermediate_size"], eps)
            for _ in range(config["num_hidden_layers"]))
        self.pooler = nn.Linear(hidden, hidden) if with_pooler else None
        self.position_offset = position_offset(config)
        self.compute_dtype = torch.float32
        self._kernels: list[dict[str, LinearKernel]] | None = None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> tuple[PackedStates, torch.Tensor | None]:
        packing = Packing(attention_mask)
        types = packing.gather(token_type_ids) if token_type_ids is not None else torch.zeros_like(packing.columns)
        positions = packing.columns + self.position_offset
        x = self.norm(self.word(packing.gather(input_ids)) + self.position(positions) + self.token_type(types))
        x = x.to(self.compute_dtype)
        states = [x]
        # layer is a _Layer, but nn.ModuleList types its items as Module, whose attributes are Tensor | Module
        for layer, kernel in zip(self.layers, self._layer_kernels(x.device)):
            attended = packed_attention(kernel["qkv"](x), packing, layer.heads)  # type: ignore[arg-type]
            x = _norm(kernel["out"](attended, residual=x), layer.norm1)  # type: ignore[arg-type]
            x = _norm(kernel["down"](kernel["up"](x, act=self.act), residual=x), layer.norm2)  # type: ignore[arg-type]
            states.append(x)
        pooled = None
        if self.pooler is not None:
            pooled = torch.tanh(self.pooler(x[packing.cls_rows].to(self.pooler.weight.dtype))).float()
        return PackedStates(packing, states), pooled

    def _layer_kernels(self, device: torch.device) -> list[dict[str, LinearKernel]]:
        if self._kernels is None:
            fused = fused_linear_available(device, self.compute_dtype)
            self._kernels = [{name: LinearKernel(getattr(layer, name), fused) for name in ("qkv", "out", "up", "down")}
                             for layer in self.layers]
        return self._kernels

    def set_compute_dtype(self, dtype: torch.dtype) -> NativeBert:
        """Run the layers in ``dtype`` (bf16/fp16): matrix weights in that dtype, LayerNorm weights and
        embeddings in fp32. Call before the first forward (and after moving the module)."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                module.to(dtype)
        self.compute_dtype = dtype
        self._kernels = None
        return self


def _norm(x: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
    """LayerNorm with fp32 weights: on CPU straight on a bf16/fp16 input (the kernel accumulates in
    fp32), elsewhere through an fp32 copy, which every backend supports."""
    if x.device.type == "cpu" or x.dtype == torch.float32:
        return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
    return F.layer_norm(x.float(), norm.normalized_shape, norm.weight, norm.bias, norm.eps).to(x.dtype)


def _hf_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    weights = load_file(str(folder / "model.safetensors"))
    for prefix in ("bert.", "roberta."):  # checkpoints saved from BertFor* / RobertaFor* heads
        if any(k.startswith(prefix) for k in weights):
            weights = {k.removeprefix(prefix): v for k, v in weights.items() if k.startswith(prefix)}
            break
    # Old TF conversions name LayerNorm parameters gamma/beta.
    return {k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): v
            for k, v in weights.items()}


def load_native_bert(folder: Path) -> NativeBert:
    """Build the module and copy the HF weights in (QKV fused); fails loudly on any missing tensor."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    hf = _hf_weights(folder)
    model = NativeBert(config, with_pooler="pooler.dense.weight" in hf)
    mapping = {"word.weight": "embeddings.word_embeddings.weight",
               "position.weight": "embeddings.position_embeddings.weight",
               "token_type.weight": "embeddings.token_type_embeddings.weight",
               "norm.weight": "embeddings.LayerNorm.weight", "norm.bias": "embeddings.LayerNorm.bias",
               "pooler.weight": "pooler.dense.weight", "pooler.bias": "pooler.dense.bias"}
    state: dict[str, torch.Tensor] = {}
    for ours, theirs in mapping.items():
        if ours.startswith("pooler") and model.pooler is None:
            continue
        state[ours] = hf[theirs]
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        for kind in ("weight", "bias"):
            state[f"layers.{i}.qkv.{kind}"] = torch.cat(
                [hf[f"{p}attention.self.{name}.{kind}"] for name in ("query", "key", "value")])
            state[f"layers.{i}.out.{kind}"] = hf[f"{p}attention.output.dense.{kind}"]
            state[f"layers.{i}.norm1.{kind}"] = hf[f"{p}attention.output.LayerNorm.{kind}"]
            state[f"layers.{i}.up.{kind}"] = hf[f"{p}intermediate.dense.{kind}"]
            state[f"layers.{i}.down.{kind}"] = hf[f"{p}output.dense.{kind}"]
            state[f"layers.{i}.norm2.{kind}"] = hf[f"{p}output.LayerNorm.{kind}"]
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    return model.eval()


class NativeTokenizer:
    """``tokenizer.json`` through the ``tokenizers`` library: truncation only, padding per batch."""

    def __init__(self, folder: Path, max_length: int) -> None:
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tok.no_padding()  # checkpoints often ship a fixed-length padding setting
        self._tok.enable_truncation(max_length)
        self.pad_id = self._tok.padding["pad_id"] if self._tok.padding else 0
        config = folder / "tokenizer_config.json"
        if config.is_file():
            pad_token = json.loads(config.read_text(encoding="utf-8")).get("pad_token")
            if isinstance(pad_token, str) and self._tok.token_to_id(pad_token) is not None:
                self.pad_id = self._tok.token_to_id(pad_token)

    def encode(self, texts: list[str]) -> list[tuple[list[int], list[int]]]:
        """(ids, type_ids) per text, special tokens included."""
        return [(e.ids, e.type_ids) for e in self._tok.encode_batch(texts)]

    def pad(self, items: list[tuple[list[int], list[int]]]) -> dict[str, torch.Tensor]:
        import numpy as np

        length = max(len(ids) for ids, _ in items)
        ids = np.full((len(items), length), self.pad_id, dtype=np.int64)
        types = np.zeros((len(items), length), dtype=np.int64)
        mask = np.zeros((len(items), length), dtype=np.int64)
        for row, (token_ids, type_ids) in enumerate(items):  # numpy rows: no tensor per sentence
            ids[row, :len(token_ids)] = token_ids
            types[row, :len(type_ids)] = type_ids
            mask[row, :len(token_ids)] = 1
        return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
                "token_type_ids": torch.from_numpy(types)}
