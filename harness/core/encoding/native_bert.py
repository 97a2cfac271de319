"""A torch-only BERT encoder for inference: the same function as ``transformers.BertModel`` in eval
mode, loaded straight from ``model.safetensors`` and ``tokenizer.json``.

Why it exists: importing transformers' model classes costs ~4 s of a ~12 s cold run on 2 CPU cores
(``benchmarks/vs_peers.py``), more than the forward pass itself. Inference of a plain BERT needs
none of it. It is used only when a checkpoint is exactly what it implements
(``harness.core.encoding.backbone.native_supported``), is checked against transformers to 1e-5 on
every hidden state in the tests, and ``--encoder-impl transformers`` turns it off. Training (SimCSE,
DSE) always uses transformers.

Per layer (post-LayerNorm BERT)::

    a = LayerNorm(x + W_o · MultiHeadAttention(W_q x, W_k x, W_v x, padding mask))
    y = LayerNorm(a + W_2 · act(W_1 a))

with the query, key and value projections fused into one (3H × H) matrix product. Under
``--dtype bf16|fp16`` the matrix products run in that dtype and everything else in fp32, exactly
the split autocast makes (:meth:`NativeBert.set_compute_dtype`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# Keys must match harness.core.encoding.backbone.NATIVE_ACTIVATIONS.
ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu,
               "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
               "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh")}


class _Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, inner: int, eps: float, act: str) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden, eps=eps)
        self.up = nn.Linear(hidden, inner)
        self.down = nn.Linear(inner, hidden)
        self.norm2 = nn.LayerNorm(hidden, eps=eps)
        self.act = ACTIVATIONS[act]

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        dtype = self.qkv.weight.dtype  # fp32, or bf16/fp16 after set_compute_dtype
        q, k, v = self.qkv(x.to(dtype)).view(batch, length, 3, self.heads, hidden // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = self.norm1(x + self.out(attended.transpose(1, 2).reshape(batch, length, hidden)).float())
        return self.norm2(x + self.down(self.act(self.up(x.to(dtype)))).float())


class NativeBert(nn.Module):
    """BERT encoder returning every hidden state (index 0 = embeddings) and the pooler output."""

    def __init__(self, config: dict[str, Any], with_pooler: bool) -> None:
        super().__init__()
        hidden, eps = config["hidden_size"], config.get("layer_norm_eps", 1e-12)
        self.word = nn.Embedding(config["vocab_size"], hidden)
        self.position = nn.Embedding(config["max_position_embeddings"], hidden)
        self.token_type = nn.Embedding(config.get("type_vocab_size", 2), hidden)
        self.norm = nn.LayerNorm(hidden, eps=eps)
        self.layers = nn.ModuleList(
            _Layer(hidden, config["num_attention_heads"], config["intermediate_size"], eps, config["hidden_act"])
            for _ in range(config["num_hidden_layers"]))
        self.pooler = nn.Linear(hidden, hidden) if with_pooler else None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        types = token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids)
        x = self.norm(self.word(input_ids) + self.position(positions)[None] + self.token_type(types))
        # Boolean mask, broadcast over heads and query positions: True = attend to this key.
        mask = attention_mask.bool()[:, None, None, :]
        states = [x]
        for layer in self.layers:
            x = layer(x, mask)
            states.append(x)
        pooled = None
        if self.pooler is not None:
            pooled = torch.tanh(self.pooler(x[:, 0].to(self.pooler.weight.dtype))).float()
        return states, pooled

    def set_compute_dtype(self, dtype: torch.dtype) -> NativeBert:
        """Run the matrix products in ``dtype`` (bf16/fp16) with the residual stream, LayerNorm and
        embeddings in fp32 — what autocast does, without autocast's per-call weight casts (~20 % of
        a CPU forward in bf16). Results match the autocast path of the same model."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                module.to(dtype)
        return self


def _hf_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    weights = load_file(str(folder / "model.safetensors"))
    if any(k.startswith("bert.") for k in weights):  # checkpoints saved from BertFor* heads
        weights = {k.removeprefix("bert."): v for k, v in weights.items() if k.startswith("bert.")}
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
        length = max(len(ids) for ids, _ in items)
        ids = torch.full((len(items), length), self.pad_id, dtype=torch.long)
        types = torch.zeros((len(items), length), dtype=torch.long)
        mask = torch.zeros((len(items), length), dtype=torch.long)
        for row, (token_ids, type_ids) in enumerate(items):
            ids[row, :len(token_ids)] = torch.tensor(token_ids)
            types[row, :len(type_ids)] = torch.tensor(type_ids)
            mask[row, :len(token_ids)] = 1
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
