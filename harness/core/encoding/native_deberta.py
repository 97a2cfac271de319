"""DeBERTa-v2 and -v3 (``transformers.DebertaV2Model`` in eval mode) on the native packed layers.

DeBERTa keeps BERT's layer but attends with *disentangled* relative positions. With δ(i, j) the
bucketed distance from query i to key j, ``r = clamp(δ + s, 0, 2s - 1)`` a row of the shared,
LayerNorm-ed relative embedding table R (2s rows; s = ``position_buckets``, 256 in v3), and
``P_q = R W_q + b_q``, ``P_k = R W_k + b_k`` (with ``share_att_key``, the layer's own query and
key projections; else separate ones), the score of query i for key j is::

    (q_i · k_j  +  q_i · P_k[r(i, j)]  +  k_j · P_q[r'(j, i)]) / sqrt(d · 3)
        content→content   content→position ("c2p")   position→content ("p2c")

where ``r'(j, i) = clamp(-δ(j, i) + s, 0, 2s - 1)`` and the 3 counts the terms present
(``pos_att_type``). δ is exact up to ``s/2`` and log-bucketed beyond it, so for a sentence of L
tokens only the 2L - 1 table rows around s are read: each length group multiplies its queries and
keys by that slice of ``P_k`` / ``P_q`` (precomputed once per layer at load) and gathers the
diagonals, instead of transformers' products against all 2s rows for every sentence.
Worked example (L = 3, s = 256): δ(0, 2) = -2 → ``r`` = 254; δ(2, 0) = 2 → 258.

Embeddings: word (``embedding_size`` wide, projected to the hidden size when it differs),
absolute positions only when ``position_biased_input`` (v3: no), token types only when
``type_vocab_size`` > 0 (v3: none), then LayerNorm. DeBERTa-v2's optional convolution after the
first layer (``conv_kernel_size``, the xlarge models) is not implemented: those checkpoints run
through transformers (:func:`harness.core.encoding.backbone.native_reason`).
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

__all__ = ["NativeDeberta", "attention_terms", "load_native_deberta", "relative_positions"]

DEBERTA_LAYER = {
    "qkv": ("attention.self.query_proj", "attention.self.key_proj", "attention.self.value_proj"),
    "out": "attention.output.dense",
    "norm1": "attention.output.LayerNorm",
    "up": "intermediate.dense",
    "down": "output.dense",
    "norm2": "output.LayerNorm",
}


def attention_terms(config: dict[str, Any]) -> list[str]:
    """Which position terms the config asks for: ``pos_att_type`` as a list or ``"p2c|c2p"``."""
    kinds = config.get("pos_att_type") or []
    if isinstance(kinds, str):
        kinds = kinds.lower().split("|")
    return [k.strip() for k in kinds]


def span(config: dict[str, Any]) -> int:
    """s: rows of the relative table on each side (``position_buckets``, else the largest
    distance)."""
    largest = config.get("max_relative_positions", -1)
    if largest < 1:
        largest = config["max_position_embeddings"]
    buckets = config.get("position_buckets", -1)
    return buckets if buckets > 0 else largest


def relative_positions(
    length: int, config: dict[str, Any], device: torch.device | str = "cpu"
) -> torch.Tensor:
    """(length, length) δ(i, j) = i - j, log-bucketed beyond ``position_buckets / 2`` when set.

    >>> relative_positions(3, {"position_buckets": 256, "max_relative_positions": 512}).tolist()
    [[0, -1, -2], [1, 0, -1], [2, 1, 0]]
    """
    positions = torch.arange(length, dtype=torch.long, device=device)
    delta = positions[:, None] - positions[None, :]
    buckets = config.get("position_buckets", -1)
    largest = config.get("max_relative_positions", -1)
    if largest < 1:
        largest = config["max_position_embeddings"]
    if buckets <= 0:
        return delta
    mid = buckets // 2
    # inside (-mid, mid) δ is kept; beyond, ceil(log(|δ|/mid) / log((largest-1)/mid) · (mid-1)) +
    # mid, signed. The float32 arithmetic is transformers' (ceil decides the boundaries).
    magnitude = torch.where(delta.abs() < mid, torch.full_like(delta, mid - 1), delta.abs())
    logarithmic = (
        torch.ceil(
            torch.log(magnitude / mid) / torch.log(torch.tensor((largest - 1) / mid)) * (mid - 1)
        )
        + mid
    )
    return torch.where(magnitude <= mid, delta.float(), logarithmic * torch.sign(delta)).long()


class NativeDeberta(NativeEncoder):
    """DeBERTa-v2/v3: see the module docstring."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config, with_pooler=False)
        hidden, eps = config["hidden_size"], config.get("layer_norm_eps", 1e-7)
        width = config.get("embedding_size") or hidden
        self.config = config
        self.word = uninitialised.Embedding(config["vocab_size"], width)
        self.position = (
            uninitialised.Embedding(config["max_position_embeddings"], width)
            if config.get("position_biased_input", True)
            else None
        )
        types = config.get("type_vocab_size", 0)
        self.token_type = uninitialised.Embedding(types, width) if types > 0 else None
        self.project = uninitialised.Linear(width, hidden, bias=False) if width != hidden else None
        self.norm = nn.LayerNorm(hidden, eps=eps)
        self.terms = attention_terms(config)
        self.relative = bool(config.get("relative_attention", False))
        self.span = span(config)
        heads = config["num_attention_heads"]
        self.heads, self.head_dim = heads, hidden // heads
        # 1/sqrt(d · (1 + terms)), by pos_att_type even without relative attention, as transformers
        # does
        self.scale = 1.0 / math.sqrt(
            self.head_dim * (1 + sum(t in self.terms for t in ("c2p", "p2c")))
        )
        self.attention_scale = self.scale
        # per layer: P_k and P_q as (heads, 2s, d) fp32 buffers (they move with the module), set by
        # load_native_deberta
        self.position_terms: list[tuple[str | None, str | None]] = []
        self._slices: dict[tuple[int, str], tuple[int, int, torch.Tensor, torch.Tensor]] = {}

    def embed(
        self, packing: Packing, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None
    ) -> torch.Tensor:
        x = self.word(packing.gather(input_ids))
        if self.position is not None:
            x = x + self.position(packing.columns)
        if self.token_type is not None:
            types = (
                packing.gather(token_type_ids)
                if token_type_ids is not None
                else torch.zeros_like(packing.columns)
            )
            x = x + self.token_type(types)
        if self.project is not None:
            x = self.project(x)
        return self.norm(x)

    def score_bias(self, layer: int) -> ScoreBias | None:
        if not self.relative or not self.terms:
            return None
        keys, queries = (
            None if name is None else getattr(self, name) for name in self.position_terms[layer]
        )

        def bias(q: torch.Tensor, k: torch.Tensor, length: int) -> torch.Tensor:
            low, high, c2p_index, p2c_index = self._rows(length, q.device)
            shape = (q.shape[0], self.heads, length, length)
            total = torch.zeros((), device=q.device)
            if keys is not None:  # q_i · P_k[r(i, j)]
                total = total + per_sentence(q, keys[:, low:high]).gather(
                    -1, c2p_index.expand(shape)
                )
            # k_j · P_q[r'(j, i)], gathered per key j then transposed to (i, j)
            if queries is not None:
                by_key = per_sentence(k, queries[:, low:high]).gather(-1, p2c_index.expand(shape))
                total = total + by_key.transpose(-1, -2)
            return total * self.scale

        return bias

    def _rows(
        self, length: int, device: torch.device
    ) -> tuple[int, int, torch.Tensor, torch.Tensor]:
        """For sentences of ``length`` tokens: the table rows read (low..high-1) and, relative to
        low, the row of each (i, j) for c2p and of each (j, i) for p2c."""
        key = (length, str(device))
        if key not in self._slices:
            delta = relative_positions(length, self.config, device)
            c2p = torch.clamp(delta + self.span, 0, 2 * self.span - 1)
            p2c = torch.clamp(-delta + self.span, 0, 2 * self.span - 1)
            low = int(torch.minimum(c2p.min(), p2c.min()))
            high = int(torch.maximum(c2p.max(), p2c.max())) + 1
            self._slices[key] = (low, high, c2p - low, p2c - low)
        return self._slices[key]


def per_sentence(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """(count, heads, L, d) × (heads, R, d)ᵀ → (count, heads, L, R) as one ``bmm`` of count·heads
    equal products on contiguous operands: each sentence's result is then the same bits whatever
    its group's count. (A broadcast ``matmul``, or a transposed view of the table, which a count of
    1 leaves uncopied, reaches other BLAS kernels and differed in the last bit.)"""
    count, heads, length, d = x.shape
    table = (
        rows.transpose(1, 2)
        .expand(count, heads, d, rows.shape[1])
        .reshape(count * heads, d, rows.shape[1])
    )
    table = table.contiguous()
    return torch.bmm(x.reshape(count * heads, length, d), table).view(
        count, heads, length, rows.shape[1]
    )


def _position_terms(
    hf: dict[str, torch.Tensor], config: dict[str, Any], model: NativeDeberta
) -> None:
    """P_k and P_q per layer from the LayerNorm-ed relative table (fp32, heads split)."""
    table = hf["encoder.rel_embeddings.weight"].float()[: 2 * model.span]
    if "layer_norm" in [
        x.strip() for x in str(config.get("norm_rel_ebd", "none")).lower().split("|")
    ]:
        table = torch.nn.functional.layer_norm(
            table,
            table.shape[-1:],
            hf["encoder.LayerNorm.weight"].float(),
            hf["encoder.LayerNorm.bias"].float(),
            config.get("layer_norm_eps", 1e-7),
        )
    shared = config.get("share_att_key", False)

    def project(i: int, kind: str, own: str) -> torch.Tensor:
        name = f"encoder.layer.{i}.attention.self.{own if shared else kind}"
        rows = table @ hf[f"{name}.weight"].float().T + hf[f"{name}.bias"].float()
        return rows.view(rows.shape[0], model.heads, model.head_dim).transpose(0, 1).contiguous()

    for i in range(config["num_hidden_layers"]):
        names: list[str | None] = []
        for term, kind, own in (
            ("c2p", "pos_key_proj", "key_proj"),
            ("p2c", "pos_query_proj", "query_proj"),
        ):
            names.append(f"{term}_rows_{i}" if term in model.terms else None)
            if term in model.terms:
                model.register_buffer(f"{term}_rows_{i}", project(i, kind, own), persistent=False)
        model.position_terms.append((names[0], names[1]))


def load_native_deberta(folder: Path) -> NativeDeberta:
    """Build the module and copy the HF weights in (QKV fused, position terms precomputed); fails
    loudly on any missing tensor."""
    config = model_config(folder)
    hf = read_weights(folder, ("deberta.",))  # checkpoints saved from DebertaV2For* heads
    model = NativeDeberta(config)
    mapping = {
        "word.weight": "embeddings.word_embeddings.weight",
        "norm.weight": "embeddings.LayerNorm.weight",
        "norm.bias": "embeddings.LayerNorm.bias",
    }
    if model.position is not None:
        mapping["position.weight"] = "embeddings.position_embeddings.weight"
    if model.token_type is not None:
        mapping["token_type.weight"] = "embeddings.token_type_embeddings.weight"
    if model.project is not None:
        mapping["project.weight"] = "embeddings.embed_proj.weight"
    load_state(model, hf, mapping, DEBERTA_LAYER)
    if model.relative:
        _position_terms(hf, config, model)
    return model.eval()
