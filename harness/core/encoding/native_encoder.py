"""What every native encoder family shares: packed post-LayerNorm transformer layers, mixed
precision and checkpoint reading. (Their tokenizer, :class:`NativeTokenizer`, is
:class:`harness.core.encoding.tokenizer.BackboneTokenizer`, the one every engine uses.)

BERT, RoBERTa, MPNet and DeBERTa-v2/v3 run the same layer on a batch's real tokens packed into
rows (:class:`harness.core.encoding.kernels.Packing`)::

    a = LayerNorm(x + W_o · Attention(W_q x, W_k x, W_v x))     per group of equal lengths
    y = LayerNorm(a + W_2 · act(W_1 a))

with the query, key and value projections fused into one (3H × H) product. The families differ
in their embeddings (:meth:`NativeEncoder.embed`) and in a relative-position term added to the
attention scores (:meth:`NativeEncoder.score_bias`, with its own scale): none for BERT,
a bucketed per-head bias for MPNet, DeBERTa's content→position and position→content products.
Under ``--dtype bf16|fp16`` the layers run in that dtype (LayerNorm statistics and attention
scores in fp32), as sentence-transformers and OpenVINO do in bf16; with bf16 on CPU the products
carry their bias, GELU and residual add as oneDNN epilogues. Embeddings are computed in fp32.

Each family is checked against transformers' own model on every hidden state in the tests
(1e-5 in fp32), and is used only for checkpoints it reproduces exactly
(:func:`harness.core.encoding.backbone.native_reason`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.core.encoding import uninitialised
from harness.core.encoding.kernels import (
    LinearKernel,
    PackedStates,
    Packing,
    ScoreBias,
    bucket_rows,
    fused_linear_available,
    packed_attention,
)
from harness.core.encoding.tokenizer import BackboneTokenizer as NativeTokenizer

__all__ = ["NativeEncoder", "NativeLayer", "NativeTokenizer", "load_state", "read_weights"]

# One layer's tensors in a transformers checkpoint, per family: ours → theirs (under
# ``encoder.layer.{i}.``); "qkv" lists the three projections fused, in that order.
LayerNames = dict[str, Any]


class NativeLayer(nn.Module):
    """The weights of one layer (the computation is :meth:`NativeEncoder.forward`'s)."""

    def __init__(self, hidden: int, heads: int, inner: int, eps: float) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = uninitialised.Linear(hidden, 3 * hidden)
        self.out = uninitialised.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden, eps=eps)
        self.up = uninitialised.Linear(hidden, inner)
        self.down = uninitialised.Linear(inner, hidden)
        self.norm2 = nn.LayerNorm(hidden, eps=eps)


class NativeEncoder(nn.Module):
    """A packed encoder returning every hidden state (index 0 = embeddings) and the pooler output
    (None without a pooler). Families override :meth:`embed` and, for relative positions,
    :meth:`score_bias` / ``attention_scale``."""

    attention_scale: float | None = None  # None: 1/sqrt(head dim)

    def __init__(self, config: dict[str, Any], with_pooler: bool) -> None:
        super().__init__()
        hidden, eps = config["hidden_size"], config.get("layer_norm_eps", 1e-12)
        self.act = config["hidden_act"]
        self.layers = nn.ModuleList(
            NativeLayer(hidden, config["num_attention_heads"], config["intermediate_size"], eps)
            for _ in range(config["num_hidden_layers"])
        )
        self.pooler = uninitialised.Linear(hidden, hidden) if with_pooler else None
        self.compute_dtype = torch.float32
        self._kernels: list[dict[str, LinearKernel]] | None = None

    def embed(
        self, packing: Packing, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None
    ) -> torch.Tensor:
        """The packed (tokens, hidden) fp32 input of the first layer."""
        raise NotImplementedError

    def score_bias(self, layer: int) -> ScoreBias | None:
        """The relative-position term of layer ``layer``'s attention scores (None: plain
        attention)."""
        return None

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> tuple[PackedStates, torch.Tensor | None]:
        packing = Packing(attention_mask)
        x = self.embed(packing, input_ids, token_type_ids).to(self.compute_dtype)
        states = [x]
        kernels = self._layer_kernels(x.device)
        if kernels and kernels[0]["qkv"].fused is not None:
            x = bucket_rows(x)  # a row count oneDNN has compiled for already
        # layer is a NativeLayer, but nn.ModuleList types its items as Module, whose attributes are
        # Tensor | Module
        for index, (layer, kernel) in enumerate(zip(self.layers, kernels)):
            attended = packed_attention(
                kernel["qkv"](x),
                packing,
                layer.heads,  # type: ignore[arg-type]
                self.attention_scale,
                self.score_bias(index),
            )
            x = norm(kernel["out"](attended, residual=x), layer.norm1)  # type: ignore[arg-type]
            x = norm(kernel["down"](kernel["up"](x, act=self.act), residual=x), layer.norm2)  # type: ignore[arg-type]
            states.append(x[: packing.tokens])
        pooled = None
        if self.pooler is not None:
            pooled = torch.tanh(
                self.pooler(x[packing.cls_rows].to(self.pooler.weight.dtype))
            ).float()
        return PackedStates(packing, states), pooled

    def _layer_kernels(self, device: torch.device) -> list[dict[str, LinearKernel]]:
        if self._kernels is None:
            fused = fused_linear_available(device, self.compute_dtype)
            self._kernels = [
                {
                    name: LinearKernel.of(getattr(layer, name), fused)
                    for name in ("qkv", "out", "up", "down")
                }
                for layer in self.layers
            ]
        return self._kernels

    def set_compute_dtype(self, dtype: torch.dtype) -> NativeEncoder:
        """Run the layers in ``dtype`` (bf16/fp16): the layers' matrix weights and the pooler in
        that dtype; embeddings, LayerNorm and precomputed position terms stay fp32. Call before the
        first forward (and after moving the module)."""
        linears = [m for layer in self.layers for m in layer.modules() if isinstance(m, nn.Linear)]
        for linear in [*linears, *([self.pooler] if self.pooler is not None else [])]:
            linear.to(dtype)
        self.compute_dtype = dtype
        self._kernels = None
        return self


def norm(x: torch.Tensor, layer_norm: nn.LayerNorm) -> torch.Tensor:
    """LayerNorm with fp32 weights: on CPU straight on a bf16/fp16 input (the kernel accumulates in
    fp32), elsewhere through an fp32 copy, which every backend supports."""
    if x.device.type == "cpu" or x.dtype == torch.float32:
        return F.layer_norm(
            x, layer_norm.normalized_shape, layer_norm.weight, layer_norm.bias, layer_norm.eps
        )
    return F.layer_norm(
        x.float(), layer_norm.normalized_shape, layer_norm.weight, layer_norm.bias, layer_norm.eps
    ).to(x.dtype)


def read_weights(folder: Path, prefixes: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """``model.safetensors`` as a dict, with a task head's prefix (``bert.``, ``deberta.``…)
    removed when the checkpoint was saved from a ``*For*`` class."""
    from safetensors.torch import load_file

    weights = load_file(str(folder / "model.safetensors"))
    for prefix in prefixes:
        if any(k.startswith(prefix) for k in weights):
            weights = {
                k.removeprefix(prefix): v for k, v in weights.items() if k.startswith(prefix)
            }
            break
    # Old TF conversions name LayerNorm parameters gamma/beta.
    return {
        k.replace("LayerNorm.gamma", "LayerNorm.weight").replace(
            "LayerNorm.beta", "LayerNorm.bias"
        ): v
        for k, v in weights.items()
    }


def load_state(
    model: NativeEncoder, hf: dict[str, torch.Tensor], embeddings: dict[str, str], names: LayerNames
) -> None:
    """Copy a checkpoint's tensors into ``model`` as fp32, strictly (a missing tensor raises
    KeyError, one of another shape RuntimeError): ``embeddings`` maps our embedding tensors to
    theirs; the pooler's are ``pooler.dense.*`` when the model has one; each layer's, under
    ``encoder.layer.{i}.``, are named by ``names``: ``qkv`` the three projections, concatenated,
    and ``out``, ``norm1``, ``up``, ``down``, ``norm2`` one each.
    """
    mapping = dict(embeddings)
    if model.pooler is not None:
        mapping |= {"pooler.weight": "pooler.dense.weight", "pooler.bias": "pooler.dense.bias"}
    state = {ours: hf[theirs] for ours, theirs in mapping.items()}
    for i in range(len(model.layers)):
        p = f"encoder.layer.{i}."
        for kind in ("weight", "bias"):
            state[f"layers.{i}.qkv.{kind}"] = torch.cat(
                [hf[f"{p}{name}.{kind}"] for name in names["qkv"]]
            )
            for ours in ("out", "norm1", "up", "down", "norm2"):
                state[f"layers.{i}.{ours}.{kind}"] = hf[f"{p}{names[ours]}.{kind}"]
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
