"""The native encoder's kernels: padding-free token rows, oneDNN linear epilogues, short attention.

Where the time of a CPU forward went (MiniLM on STS-B, 2 cores, torch profiler): the matrix
products were about half; PyTorch's CPU flash attention another fifth, because sentences are short
(~14 tokens) and its per-(sentence, head) overhead dwarfs 14 × 14 × 32 products; then GELU, dtype
casts, LayerNorm and residual adds, each a full pass over memory; and about a tenth was padding.
What this module does about each:

* **Packed rows.** The tokens of a batch are packed into one (tokens, hidden) matrix without
  padding (:class:`Packing`); matrix products, LayerNorm and GELU never see a pad token. Attention
  runs per group of equal-length sentences, so it needs no mask either.
* **Attention as two batched fp32 products** (:func:`short_attention`) for short sequences:
  scores, exp, row sums, probabilities · values. The exponent is taken without subtracting the row
  maximum (mathematically the same softmax; PyTorch's per-row max over 14 values costs more than
  the products) and the rare row whose sum overflows or vanishes is redone with ``softmax``.
  Longer sequences and GPUs use ``scaled_dot_product_attention``.
* **oneDNN epilogues** (:class:`LinearKernel`): with bf16 on CPU the weights are reordered once
  into oneDNN's blocked layout, and bias + GELU or bias + residual add happen inside the matrix
  product (``torch.ops.mkldnn._linear_pointwise``, what ``torch.compile`` emits on CPU), instead of
  as separate passes over memory.

Relative-position schemes (MPNet, DeBERTa) enter attention as a score bias (:data:`ScoreBias`),
computed per group of equal lengths. This module imports torch; only the native encoders
(:mod:`harness.core.encoding.native_encoder` and its families) use it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

# Keys must match harness.core.encoding.backbone.NATIVE_ACTIVATIONS.
ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu,
               "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
               "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh")}
# Attention as batched products up to this length; beyond it SDPA's flash kernel is efficient.
SHORT = 64
# oneDNN's names for the activations a fused product can apply: (attr, algorithm).
_FUSED_ACTIVATIONS = {"gelu": ("gelu", "none"), "gelu_new": ("gelu", "tanh"), "gelu_pytorch_tanh": ("gelu", "tanh"),
                      "relu": ("relu", "")}


def fused_linear_available(device: torch.device, dtype: torch.dtype) -> bool:
    """oneDNN fused products: CPU, bf16, a torch built with them, and a CPU with bf16 instructions
    (AVX512-BF16, AMX or AVX-NE-CONVERT). On an AVX2-only CPU oneDNN refuses bf16 weights, and the
    plain ``F.linear`` path below runs instead."""
    return (device.type == "cpu" and dtype == torch.bfloat16 and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise") and bf16_native_on_cpu())


def fp16_native_on_cpu() -> bool:
    """Whether this CPU computes fp16 products in hardware (oneDNN's own test)."""
    probe = getattr(torch.ops.mkldnn, "_is_mkldnn_fp16_supported", None)
    return bool(probe()) if probe is not None else False


def bf16_native_on_cpu() -> bool:
    """Whether this CPU computes bf16 products in hardware (oneDNN's own test). Without it torch
    emulates bf16, which is slower than fp32 (measured 4x on an AVX2 Zen 4 at 2 threads)."""
    probe = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return bool(probe()) if probe is not None else False


class LinearKernel:
    """``act(x Wᵀ + b)`` or ``x Wᵀ + b + residual`` for one ``nn.Linear``, fused when possible."""

    def __init__(self, linear: nn.Linear, fused: bool) -> None:
        self.weight, self.bias = linear.weight.detach(), linear.bias.detach()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight, None) if fused else None

    def __call__(self, x: torch.Tensor, act: str | None = None, residual: torch.Tensor | None = None) -> torch.Tensor:
        if self.packed is not None:
            if residual is not None:
                return torch.ops.mkldnn._linear_pointwise.binary(x, residual.to(x.dtype), self.packed, self.bias, "add")
            attr, algorithm = _FUSED_ACTIVATIONS[act] if act else ("none", "")
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, attr, [], algorithm)
        y = F.linear(x, self.weight, self.bias)
        if act:
            # ACTIVATIONS mixes torch functions and lambdas: mypy infers no common callable type for them
            y = ACTIVATIONS[act](y)  # type: ignore[operator]
        return y if residual is None else residual + y.to(residual.dtype)


class Packing:
    """Where each real token of a padded (batch, length) batch sits in the packed (tokens, ·) rows.

    Rows are ordered by sentence length (longest first, stable), so sentences of equal length are
    contiguous: ``groups`` lists (count, length, first packed row) for each length.
    """

    def __init__(self, attention_mask: torch.Tensor) -> None:
        batch, width = attention_mask.shape
        mask = attention_mask.bool()
        lengths = mask.sum(1)
        order = torch.argsort(lengths, descending=True, stable=True)
        positions = torch.arange(batch * width, device=mask.device).view(batch, width)
        self.flat = positions[order][mask[order]]  # packed row → flat (row, column) of the padded batch
        self.columns = self.flat % width
        self.batch, self.width = batch, width
        counts = torch.unique_consecutive(lengths[order], return_counts=True)
        self.groups: list[tuple[int, int, int]] = []
        start = 0
        for length, count in zip(*(t.tolist() for t in counts)):
            self.groups.append((count, length, start))
            start += count * length
        # packed row of each sentence's first token ([CLS]), in the batch's own row order
        firsts = torch.cumsum(lengths[order], 0) - lengths[order]
        self.cls_rows = torch.empty_like(firsts).scatter_(0, order, firsts)

    def gather(self, padded: torch.Tensor) -> torch.Tensor:
        """(batch, length, ...) → (tokens, ...): the real tokens of a padded tensor, packed."""
        return padded.reshape(self.batch * self.width, *padded.shape[2:])[self.flat]

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """(tokens, hidden) → (batch, length, hidden), zeros at padding."""
        out = packed.new_zeros(self.batch * self.width, packed.shape[-1])
        return out.index_copy_(0, self.flat, packed).view(self.batch, self.width, -1)


class PackedStates(Sequence):
    """Hidden states kept packed; a layer is unpacked to (batch, length, hidden) when a view reads it
    (usually 1-2 of 7-25 layers), and only once."""

    def __init__(self, packing: Packing, packed: list[torch.Tensor]) -> None:
        # _unpacked: layer index → its unpacked (batch, length, hidden) tensor; a tuple assignment takes no annotation
        self._packing, self._packed, self._unpacked = packing, packed, {}  # type: ignore[var-annotated]

    def __len__(self) -> int:
        return len(self._packed)

    def __getitem__(self, index: int | slice):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = index % len(self)
        if index not in self._unpacked:
            self._unpacked[index] = self._packing.unpack(self._packed[index])
        return self._unpacked[index]


# A relative-position term of the attention scores (MPNet's bucketed bias, DeBERTa's disentangled
# content↔position terms): given the fp32 queries and keys of one length group, (count, heads, L, d)
# each, and L, it returns what to add to the scaled scores, broadcastable to (count, heads, L, L).
ScoreBias = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]


def short_attention(qkv: torch.Tensor, count: int, length: int, heads: int, scale: float | None = None,
                    bias: ScoreBias | None = None) -> torch.Tensor:
    """Self-attention of ``count`` sentences of ``length`` tokens, no padding: (count·length, 3H) →
    (count·length, H), computed in fp32 as two batched products (see the module docstring).
    Scores are ``q·kᵀ · scale`` (default ``1/sqrt(d)``) plus ``bias(q, k, length)`` when given."""
    hidden = qkv.shape[-1] // 3
    d = hidden // heads
    x = torch.empty((3, count, heads, length, d), dtype=torch.float32, device=qkv.device)
    x.copy_(qkv.view(count, length, 3, heads, d).permute(2, 0, 3, 1, 4))  # one pass: split heads and cast
    q, k, v = x.view(3, count * heads, length, d).unbind(0)
    scores = torch.bmm(q, k.transpose(1, 2)).mul_(d ** -0.5 if scale is None else scale)
    if bias is not None:
        scores.view(count, heads, length, length).add_(bias(x[0], x[1], length))
    weights = torch.exp(scores)
    sums = weights.sum(-1, keepdim=True)
    low, high = torch.aminmax(sums)
    weights.div_(sums)
    if not (low > 0 and high < float("inf")):
        # A score above ~88 or a row far below 0: those rows (only those, so a sentence's result never
        # depends on its group-mates) take the max-subtracted softmax.
        bad = ~((sums > 0) & (sums < float("inf")))
        weights = torch.where(bad, torch.softmax(scores, -1), weights)
    out = torch.bmm(weights, v)
    result = torch.empty((count, length, heads, d), dtype=qkv.dtype, device=qkv.device)
    return result.copy_(out.view(count, heads, length, d).transpose(1, 2)).view(count * length, hidden)


def packed_attention(qkv: torch.Tensor, packing: Packing, heads: int, scale: float | None = None,
                     bias: ScoreBias | None = None) -> torch.Tensor:
    """Self-attention over packed rows, one group of equal-length sentences at a time (``scale`` and
    ``bias`` as in :func:`short_attention`)."""
    hidden = qkv.shape[-1] // 3
    out = torch.empty((qkv.shape[0], hidden), dtype=qkv.dtype, device=qkv.device)
    for count, length, start in packing.groups:
        if length == 0:  # an empty row (no [CLS] even): nothing to attend
            continue
        rows = slice(start, start + count * length)
        if qkv.device.type == "cpu" and length <= SHORT:
            out[rows] = short_attention(qkv[rows], count, length, heads, scale, bias)
        else:
            q, k, v = qkv[rows].view(count, length, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)
            # the bias as an additive mask in the products' dtype (SDPA's rule), computed in fp32
            mask = None if bias is None else bias(q.float(), k.float(), length).to(q.dtype)
            out[rows] = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale).transpose(1, 2).reshape(
                count * length, hidden)
    return out
