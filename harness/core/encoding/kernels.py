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
  as separate passes over memory. Those ops are private to torch: :func:`fused_linear_ops` checks
  them once against ``F.linear`` and, if a torch release renamed or changed them, turns the fused
  path off (the public path computes the same vectors, slower). oneDNN compiles a kernel per row
  count, so a batch's rows are padded to a multiple of :data:`ROW_BUCKET` (:func:`bucket_rows`):
  batches near the token budget then share one compiled kernel (MiniLM bf16 on 2,552 STS-B
  sentences: encode 1.48 → 1.09 s).

Relative-position schemes (MPNet, DeBERTa) enter attention as a score bias (:data:`ScoreBias`),
computed per group of equal lengths. This module imports torch; only the native encoders
(:mod:`harness.core.encoding.native_encoder` and its families) use it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.core.machine import mkldnn_supports

log = logging.getLogger("sts_bench.kernels")

# Keys must match harness.core.encoding.families.family.NATIVE_ACTIVATIONS.
ACTIVATIONS = {
    "gelu": F.gelu,
    "relu": F.relu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,  # the decoders' SwiGLU gate (the encoders accept NATIVE_ACTIVATIONS only)
}
# Attention as batched products up to this length; beyond it SDPA's flash kernel is efficient.
SHORT = 64
# oneDNN's names for the activations a fused product can apply: (attr, algorithm).
_FUSED_ACTIVATIONS = {
    "gelu": ("gelu", "none"),
    "gelu_new": ("gelu", "tanh"),
    "silu": ("swish", ""),
    "gelu_pytorch_tanh": ("gelu", "tanh"),
    "relu": ("relu", ""),
}


def fused_linear_available(device: torch.device, dtype: torch.dtype) -> bool:
    """oneDNN fused products: CPU, bf16, and :func:`fused_linear_ops` found torch's private ops
    working (a torch built with oneDNN, a CPU with bf16 instructions: AVX512-BF16, AMX or
    AVX-NE-CONVERT). On an AVX2-only CPU oneDNN refuses bf16 weights, and the plain ``F.linear``
    path runs instead."""
    return device.type == "cpu" and dtype == torch.bfloat16 and fused_linear_ops() is not None


@dataclass(frozen=True)
class FusedOps:
    """torch's private oneDNN ops for a bf16 linear with its epilogue (what ``torch.compile`` emits
    on CPU), each checked by :func:`probe_fused_ops` on this torch; nothing else in the harness
    calls them.

    ``reorder(weight, batch_size)`` packs a weight into oneDNN's blocked layout;
    ``pointwise(x, packed, bias, attr, scalars, algorithm)`` is ``act(x Wᵀ + b)``;
    ``binary(x, other, packed, bias, "add")`` is ``x Wᵀ + b + other``, and with ``"mul"``
    ``(x Wᵀ + b) ⊙ other`` (a SwiGLU's up projection times its gate). A bias may be None.
    """

    reorder: Callable[..., torch.Tensor]
    pointwise: Callable[..., torch.Tensor]
    binary: Callable[..., torch.Tensor]

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        return self.reorder(weight, None)

    def linear(
        self, x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, act: str | None
    ) -> torch.Tensor:
        attr, algorithm = _FUSED_ACTIVATIONS[act] if act else ("none", "")
        return self.pointwise(x, packed, bias, attr, [], algorithm)

    def linear_add(
        self, x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, other: torch.Tensor
    ) -> torch.Tensor:
        return self.binary(x, other, packed, bias, "add")

    def linear_mul(
        self, x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, other: torch.Tensor
    ) -> torch.Tensor:
        return self.binary(x, other, packed, bias, "mul")


@functools.cache
def fused_linear_ops() -> FusedOps | None:
    """torch's oneDNN fused-linear ops when they work here, else None (the public path runs).
    Probed once per process; why they are off is one debug line on ``sts_bench.kernels``."""
    if not torch.backends.mkldnn.is_available():
        log.debug("oneDNN fused linear off: this torch is built without oneDNN")
        return None
    return probe_fused_ops(torch.ops.mkldnn)


def probe_fused_ops(namespace: Any) -> FusedOps | None:
    """The fused ops of ``namespace`` (``torch.ops.mkldnn``) if the CPU has bf16 instructions, the
    ops exist, take today's arguments and, on a tiny bf16 product, give what :func:`plain_linear`
    gives for every epilogue the encoder uses, within bf16 rounding; otherwise None. A torch that
    renames or changes them then loses speed, never vectors."""
    if not mkldnn_supports(namespace, "_is_mkldnn_bf16_supported", log):
        log.debug("oneDNN fused linear off: no bf16 instructions on this CPU, by oneDNN's test")
        return None
    try:
        ops = FusedOps(
            reorder=namespace._reorder_linear_weight,
            pointwise=namespace._linear_pointwise,
            binary=namespace._linear_pointwise.binary,
        )
        mismatch = _probe_mismatch(ops)
    except Exception as error:  # renamed, removed, or a changed signature: the public path runs
        log.debug(
            "oneDNN fused linear off: torch %s's ops fail (%s: %s)",
            torch.__version__,
            type(error).__name__,
            error,
        )
        return None
    if mismatch:
        log.debug(
            "oneDNN fused linear off: torch %s's ops differ from F.linear: %s",
            torch.__version__,
            mismatch,
        )
        return None
    return ops


# |fused - plain| <= ATOL + RTOL·|plain| on the probe: a few bf16 ulps (2⁻⁸ relative) of outputs of
# size ~1 pass; a dropped bias, activation or residual (errors of ~1) does not.
PROBE_ATOL, PROBE_RTOL = 0.02, 0.02


def _probe_mismatch(ops: FusedOps) -> str:
    """'' when ``ops`` match :func:`plain_linear` on a tiny bf16 product for every epilogue, else
    which epilogue differs and by how much. A private generator: the global RNG is untouched."""
    generator = torch.Generator().manual_seed(0)

    def sample(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(torch.bfloat16)

    x, weight, bias, residual = sample(8, 24), sample(16, 24) * 0.2, sample(16), sample(8, 16)
    with torch.no_grad():
        packed = ops.pack(weight)
        cases = [
            (act or "none", ops.linear(x, packed, bias, act), plain_linear(x, weight, bias, act))
            for act in (None, *_FUSED_ACTIVATIONS)
        ]
        cases.append(
            (
                "residual add",
                ops.linear_add(x, packed, bias, residual),
                plain_linear(x, weight, bias, residual=residual),
            )
        )
        cases.append(
            (
                "multiply, no bias",
                ops.linear_mul(x, packed, None, residual),
                plain_linear(x, weight, None, multiply=residual),
            )
        )
    for name, got, want in cases:
        if got.shape != want.shape or got.dtype != want.dtype:
            return (
                f"{name}: {got.dtype} {tuple(got.shape)}, expected {want.dtype} {tuple(want.shape)}"
            )
        excess = (got.float() - want.float()).abs() - PROBE_RTOL * want.float().abs()
        if not bool((excess <= PROBE_ATOL).all()):  # NaN fails too
            return f"{name}: off by up to {excess.max().item() + PROBE_ATOL:.3g}"
    return ""


def plain_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    act: str | None = None,
    residual: torch.Tensor | None = None,
    multiply: torch.Tensor | None = None,
) -> torch.Tensor:
    """The public path: ``act(x Wᵀ + b)``, ``residual + (x Wᵀ + b)`` in ``residual``'s dtype, or
    ``(x Wᵀ + b) ⊙ multiply``."""
    y = F.linear(x, weight, bias)
    if act:
        # ACTIVATIONS mixes torch functions and lambdas: mypy infers no common callable type
        # for them
        y = ACTIVATIONS[act](y)  # type: ignore[operator]
    if multiply is not None:
        y = y * multiply
    return y if residual is None else residual + y.to(residual.dtype)


class LinearKernel:
    """``act(x Wᵀ + b)``, ``x Wᵀ + b + residual`` or ``(x Wᵀ + b) ⊙ multiply`` for one weight
    (:meth:`of` an ``nn.Linear``): with ``fused`` and working oneDNN ops
    (:func:`fused_linear_ops`) in one fused product on a reordered weight, otherwise through
    :func:`plain_linear`. ``keep_weight=False`` (fused only) keeps just the reordered copy, for
    models whose weights are most of the memory."""

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        fused: bool,
        keep_weight: bool = True,
    ) -> None:
        self.bias = None if bias is None else bias.detach()
        ops = fused_linear_ops() if fused else None
        # the ops and the weight reordered once for them; None: the public path
        self.fused = None if ops is None else (ops, ops.pack(weight.detach()))
        self.weight = weight.detach() if keep_weight or self.fused is None else None

    @classmethod
    def of(cls, linear: nn.Linear, fused: bool, keep_weight: bool = True) -> LinearKernel:
        """The kernel of ``linear``'s weight and bias."""
        return cls(linear.weight, linear.bias, fused, keep_weight)

    def __call__(
        self,
        x: torch.Tensor,
        act: str | None = None,
        residual: torch.Tensor | None = None,
        multiply: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if self.fused is not None:
            ops, packed = self.fused
            if residual is not None:
                return ops.linear_add(x, packed, self.bias, residual.to(x.dtype))
            if multiply is not None:
                return ops.linear_mul(x, packed, self.bias, multiply)
            return ops.linear(x, packed, self.bias, act)
        assert self.weight is not None
        return plain_linear(x, self.weight, self.bias, act, residual, multiply)


# oneDNN compiles a fused product's kernel for each row count it meets (measured: 11-15 ms for a
# 4000 x 384 x 1536 bf16 product with GELU, then 3 ms per call), and every batch of packed tokens
# has its own count (4083, 4086, 4093, ... under a 4096-token budget): padded up to a multiple of
# this, full batches share one count and one kernel per product. At most 63 rows computed for
# nothing, about 1.5 % of a full batch; a compile costs what ~1,500 MiniLM rows do.
ROW_BUCKET = 64


def bucket_rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` (tokens, hidden) with zero rows appended up to a multiple of :data:`ROW_BUCKET`
    (``x`` itself when it is one). Every operation of a layer outside attention is row by row, and
    attention reads only the groups' rows, so the added rows change no real row; callers drop
    them (``[:tokens]``) before anything reads the states.

    >>> bucket_rows(torch.ones(70, 2)).shape
    torch.Size([128, 2])
    """
    extra = -x.shape[0] % ROW_BUCKET
    return x if not extra else torch.cat([x, x.new_zeros(extra, *x.shape[1:])])


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
        # packed row → flat (row, column) of the padded batch
        self.flat = positions[order][mask[order]]
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
        self.tokens = len(self.flat)

    def gather(self, padded: torch.Tensor) -> torch.Tensor:
        """(batch, length, ...) → (tokens, ...): the real tokens of a padded tensor, packed."""
        return padded.reshape(self.batch * self.width, *padded.shape[2:])[self.flat]

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """(tokens, hidden) → (batch, length, hidden), zeros at padding."""
        out = packed.new_zeros(self.batch * self.width, packed.shape[-1])
        return out.index_copy_(0, self.flat, packed).view(self.batch, self.width, -1)


class PackedStates(Sequence):
    """Hidden states kept packed; a layer is unpacked to (batch, length, hidden) when a view reads
    it (usually 1-2 of 7-25 layers), and only once."""

    def __init__(self, packing: Any, packed: list[torch.Tensor]) -> None:
        # _unpacked: layer index → its unpacked (batch, length, hidden) tensor; a tuple assignment
        # takes no annotation
        self._packing, self._packed, self._unpacked = packing, packed, {}  # type: ignore[var-annotated]

    def unpack(self, index: int) -> torch.Tensor:
        """Layer ``index`` unpacked (a subclass adds what its packing left out)."""
        return self._packing.unpack(self._packed[index])

    def __len__(self) -> int:
        return len(self._packed)

    def __getitem__(self, index: int | slice):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):  # ends iteration (Sequence.__iter__ stops here)
            raise IndexError(index)
        index = index % len(self)
        if index not in self._unpacked:
            self._unpacked[index] = self.unpack(index)
        return self._unpacked[index]


# A relative-position term of the attention scores (MPNet's bucketed bias, DeBERTa's disentangled
# content↔position terms): given the fp32 queries and keys of one length group, (count, heads, L, d)
# each, and L, it returns what to add to the scaled scores, broadcastable to (count, heads, L, L).
ScoreBias = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]


def short_attention(
    qkv: torch.Tensor,
    count: int,
    length: int,
    heads: int,
    scale: float | None = None,
    bias: ScoreBias | None = None,
) -> torch.Tensor:
    """Self-attention of ``count`` sentences of ``length`` tokens, no padding: (count·length, 3H) →
    (count·length, H), computed in fp32 as two batched products (see the module docstring).
    Scores are ``q·kᵀ · scale`` (default ``1/sqrt(d)``) plus ``bias(q, k, length)`` when given."""
    hidden = qkv.shape[-1] // 3
    d = hidden // heads
    x = torch.empty((3, count, heads, length, d), dtype=torch.float32, device=qkv.device)
    # one pass: split heads and cast
    x.copy_(qkv.view(count, length, 3, heads, d).permute(2, 0, 3, 1, 4))
    q, k, v = x.view(3, count * heads, length, d).unbind(0)
    scores = torch.bmm(q, k.transpose(1, 2)).mul_(d**-0.5 if scale is None else scale)
    if bias is not None:
        scores.view(count, heads, length, length).add_(bias(x[0], x[1], length))
    weights = torch.exp(scores)
    sums = weights.sum(-1, keepdim=True)
    low, high = torch.aminmax(sums)
    weights.div_(sums)
    if not (low > 0 and high < float("inf")):
        # A score above ~88 or a row far below 0: those rows (only those, so a sentence's result
        # never depends on its group-mates) take the max-subtracted softmax.
        bad = ~((sums > 0) & (sums < float("inf")))
        weights = torch.where(bad, torch.softmax(scores, -1), weights)
    out = torch.bmm(weights, v)
    result = torch.empty((count, length, heads, d), dtype=qkv.dtype, device=qkv.device)
    return result.copy_(out.view(count, heads, length, d).transpose(1, 2)).view(
        count * length, hidden
    )


def packed_attention(
    qkv: torch.Tensor,
    packing: Packing,
    heads: int,
    scale: float | None = None,
    bias: ScoreBias | None = None,
) -> torch.Tensor:
    """Self-attention over packed rows, one group of equal-length sentences at a time (``scale`` and
    ``bias`` as in :func:`short_attention`)."""
    hidden = qkv.shape[-1] // 3
    out = torch.empty((qkv.shape[0], hidden), dtype=qkv.dtype, device=qkv.device)
    out[packing.tokens :] = 0  # rows added by bucket_rows: in no group
    for count, length, start in packing.groups:
        if length == 0:  # an empty row (no [CLS] even): nothing to attend
            continue
        rows = slice(start, start + count * length)
        if qkv.device.type == "cpu" and length <= SHORT:
            out[rows] = short_attention(qkv[rows], count, length, heads, scale, bias)
        else:
            q, k, v = (
                qkv[rows].view(count, length, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)
            )
            # the bias as an additive mask in the products' dtype (SDPA's rule), computed in fp32
            mask = None if bias is None else bias(q.float(), k.float(), length).to(q.dtype)
            out[rows] = (
                F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
                .transpose(1, 2)
                .reshape(count * length, hidden)
            )
    return out
