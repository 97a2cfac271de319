"""A torch-only decoder for inference: the Llama-style families (Llama, Mistral, Qwen2 and Qwen3)
as transformers' base models compute them in eval mode, on a batch's real tokens packed without
padding. (Named for Llama as ``native_bert`` is for BERT: the other three are its variants.)

Every layer is pre-norm (RMSNorm) with grouped-query attention and a SwiGLU MLP::

    a = x + W_o · CausalAttention(rope(W_q n), rope(W_k n), W_v n)     n = RMSNorm₁(x)
    y = a + W_down · (silu(W_gate m) ⊙ W_up m)                         m = RMSNorm₂(a)

with the query, key and value projections fused into one product and gate and up into another.
Qwen2 adds a bias to the query/key/value projection; Qwen3 RMS-normalises each head's queries and
keys before the rotation. ``hidden_states`` are transformers' ``output_hidden_states``: index 0 the
embeddings, then every layer's output, except that the last entry is the final RMSNorm of the last
layer (transformers overwrites it with ``last_hidden_state``).

Packing (:class:`DecoderPacking`): a batch's sentences are packed into (tokens, hidden) rows, sorted
by length; attention runs per group of sentences of one length, each sentence attending only to its
own earlier tokens (a causal mask within the sentence, never a batch-mate's token). A sentence may
start after a **shared prefix** (:mod:`harness.core.encoding.shared_prefix`): the keys and values
of a prompt's fixed prefix, computed once, which every sentence of the group attends to as its own
first ``s`` positions; its own tokens then get positions ``s, s+1, …``. Causality makes this
exact: the prefix's states do not depend on what follows it.

Kernels (:class:`DecoderKernels`): in bf16 on CPU the products are oneDNN's fused ones on weights
reordered once (the module's copies then released), with the SwiGLU's SiLU and gate product and
both residual adds inside them, and a batch's rows padded to a row count already compiled for
(:func:`harness.core.encoding.kernels.bucket_rows`); otherwise ``F.linear`` on the fused QKV and
gate/up weights, as transformers computes. A Qwen3 head norm is folded into the rotation
(:func:`rotate`). Attention is ``scaled_dot_product_attention`` per group, its own grouped-query
heads (``enable_gqa``) and, for a group without a prefix or window, its causal kernel
(:func:`causal_attention`).

Mixed precision: under ``--dtype bf16|fp16`` every weight is held in that dtype (as transformers
loads a decoder), RMSNorm statistics, the rotation angles and attention scores are fp32.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.core.encoding import uninitialised
from harness.core.encoding.kernels import (
    LinearKernel,
    PackedStates,
    bucket_rows,
    fused_linear_available,
)
from harness.core.encoding.model_files import model_config
from harness.core.encoding.native_encoder import read_weights
from harness.core.encoding.tokenizer import BackboneTokenizer

__all__ = ["DecoderPacking", "DecoderShape", "DecoderTokenizer", "NativeDecoder", "load_decoder"]


@dataclass(frozen=True)
class DecoderShape:
    """The sizes and options of a checkpoint's ``config.json`` the computation needs."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    inner: int
    layers: int
    vocab: int
    eps: float
    theta: float
    qkv_bias: bool  # Qwen2
    qk_norm: bool  # Qwen3
    window: int | None  # Mistral's sliding window (None: full causal attention)
    # Llama 3.x's rope scaling (factor, low_freq_factor, high_freq_factor, original context)
    llama3: tuple[float, float, float, float] | None = None

    @classmethod
    def from_config(
        cls,
        config: dict[str, Any],
        qkv_bias: bool = False,
        qk_norm: bool = False,
        sliding_window: bool = False,
    ) -> DecoderShape:
        """The shape ``config`` gives, with the variant's parts (as its family,
        :mod:`harness.core.encoding.families.llama`, says): a query/key/value bias (Qwen2), a
        per-head query/key norm (Qwen3), the config's sliding window (Mistral)."""
        heads = config["num_attention_heads"]
        rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
        theta = rope.get("rope_theta", config.get("rope_theta", 10000.0))
        llama3 = None
        if rope.get("rope_type", rope.get("type")) == "llama3":
            llama3 = tuple(
                float(rope[key])
                for key in (
                    "factor",
                    "low_freq_factor",
                    "high_freq_factor",
                    "original_max_position_embeddings",
                )
            )
        window = config.get("sliding_window") if sliding_window else None
        return cls(
            hidden=config["hidden_size"],
            heads=heads,
            kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            inner=config["intermediate_size"],
            layers=config["num_hidden_layers"],
            vocab=config["vocab_size"],
            eps=config.get("rms_norm_eps", 1e-6),
            theta=float(theta),
            qkv_bias=qkv_bias,
            qk_norm=qk_norm,
            window=window if isinstance(window, int) else None,
            llama3=llama3,  # type: ignore[arg-type]
        )


class DecoderLayer(nn.Module):
    """One layer's weights (the computation is :meth:`NativeDecoder.layer`'s)."""

    def __init__(self, shape: DecoderShape) -> None:
        super().__init__()
        width = (shape.heads + 2 * shape.kv_heads) * shape.head_dim
        self.qkv = uninitialised.Linear(shape.hidden, width, bias=shape.qkv_bias)
        self.out = uninitialised.Linear(shape.heads * shape.head_dim, shape.hidden, bias=False)
        self.gate_up = uninitialised.Linear(shape.hidden, 2 * shape.inner, bias=False)
        self.down = uninitialised.Linear(shape.inner, shape.hidden, bias=False)
        self.norm1 = nn.Parameter(torch.ones(shape.hidden))
        self.norm2 = nn.Parameter(torch.ones(shape.hidden))
        self.q_norm = nn.Parameter(torch.ones(shape.head_dim)) if shape.qk_norm else None
        self.k_norm = nn.Parameter(torch.ones(shape.head_dim)) if shape.qk_norm else None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' RMSNorm: statistics in fp32, ``x / rms(x)`` rounded to ``x``'s dtype, then
    the weight applied in that dtype. Fewer passes than its steps written out (the mean square as
    a norm, the fp32 copy scaled in place; one bf16 pass with an fp32 operand is 5x slower on CPU
    than this), equal to them within fp32 rounding. (``F.rms_norm`` is those very steps as a
    composite on CPU.)"""
    h = x.float()
    scale = torch.linalg.vector_norm(h, 2, -1, keepdim=True)
    scale = scale.square_().div_(h.shape[-1]).add_(eps).rsqrt_()
    h = h * scale if h is x else h.mul_(scale)  # x.float() is x itself in fp32: not overwritten
    return h.to(x.dtype).mul_(weight)


def rotate(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 0.0,
) -> torch.Tensor:
    """Rotary positions on (tokens, heads, d): transformers' ``x·cos + rotate_half(x)·sin``, and
    with ``weight`` of a Qwen3-style head norm, of ``RMSNorm(x)·weight`` instead.

    ``rotate_half(x)`` is ``(-x₂, x₁)`` for the halves ``x = (x₁, x₂)``, and ``cos``/``sin`` repeat
    their first half (c, s), so the result is ``(x₁c - x₂s, x₂c + x₁s)``: ``x·cos`` plus one
    multiply-add per half, in place. A norm's weight w = (w₁, w₂) is folded into those tables
    (``x₁·w₁c - x₂·w₂s``, ``x₂·w₂c + x₁·w₁s``) and its per-head scale ``1/rms(x)`` applied last:
    the rotation is linear, so this is the norm then the rotation, in four passes over ``x``
    instead of eleven. (For example d = 2, x = (3, 4), w = (1, 2), angle 0: rms = 3.54, and both
    orders give (0.85, 2.26).) Statistics are fp32; the scale is rounded to ``x``'s dtype, as
    transformers rounds the normed values."""
    half = x.shape[-1] // 2
    c, s = cos[..., :half], sin[..., :half]
    if weight is None:
        out = x * cos
        first, second = s, s
    else:
        out = x * torch.cat((c * weight[:half], c * weight[half:]), -1)
        first, second = s * weight[half:], s * weight[:half]
    halves, out_halves = x.unflatten(-1, (2, half)), out.unflatten(-1, (2, half))
    out_halves[..., 0, :].addcmul_(halves[..., 1, :], first, value=-1)
    out_halves[..., 1, :].addcmul_(halves[..., 0, :], second)
    if weight is not None:
        # not x.float(): on this strided view (a slice of the q/k/v product) its layout-keeping
        # copy is 4x slower on CPU than a plain contiguous one
        h = x.to(torch.float32, memory_format=torch.contiguous_format)
        scale = torch.linalg.vector_norm(h, 2, -1, keepdim=True)
        out.mul_(scale.square_().div_(h.shape[-1]).add_(eps).rsqrt_().to(x.dtype))
    return out


def rope_frequencies(shape: DecoderShape) -> torch.Tensor:
    """transformers' rope frequencies, computed the same way (fp32): the default ones, and for
    Llama 3.x (``rope_type: llama3``) those rescaled by wavelength. With ``factor`` f, context C,
    low and high factors l < h: a frequency whose wavelength ``2π/ω`` exceeds ``C/l`` is divided by
    f, one below ``C/h`` kept, and one between interpolated, ``(1-s)·ω/f + s·ω`` with
    ``s = (C/λ - l)/(h - l)``. For example C = 16, l = 1, h = 4 and ω = 1 (λ = 6.28, between 4 and
    16): s = 0.88, so ω becomes 0.12/f + 0.88."""
    d = shape.head_dim
    inv_freq = 1.0 / (shape.theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    if shape.llama3 is None:
        return inv_freq
    factor, low, high, context = shape.llama3
    wavelength = 2 * math.pi / inv_freq
    scaled = torch.where(wavelength > context / low, inv_freq / factor, inv_freq)
    smooth = (context / wavelength - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelength < context / high) * ~(wavelength > context / low)
    return torch.where(medium, smoothed, scaled)


@dataclass
class PrefixState:
    """A shared prefix's computed part: per layer its rotated keys and its values, (kv_heads, P, d),
    and its hidden states, (P, hidden), per ``hidden_states`` index (for poolings that read the
    prefix's positions too)."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    states: list[torch.Tensor]

    @property
    def length(self) -> int:
        return self.states[0].shape[0]


class DecoderPacking:
    """Where each computed token of a right-padded (batch, width) batch sits in packed rows.

    Row ``r`` computes columns ``skip[r]..length[r]-1``: ``skip[r]`` is the shared prefix's length
    when that row reuses it, else 0. Rows are sorted by computed length (longest first, stable);
    ``groups`` lists (count, length, first packed row, skip) for each run of equal (length, skip).
    ``columns`` are the tokens' positions in their text, the rotary positions.

    >>> p = DecoderPacking(torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]]), torch.tensor([0, 2]))
    >>> p.groups, p.columns.tolist()
    ([(1, 3, 0, 0), (1, 2, 3, 2)], [0, 1, 2, 2, 3])
    """

    def __init__(self, attention_mask: torch.Tensor, skip: torch.Tensor) -> None:
        batch, width = attention_mask.shape
        columns = torch.arange(width, device=attention_mask.device)
        computed = attention_mask.bool() & (columns[None, :] >= skip[:, None])
        lengths = computed.sum(1)
        order = torch.argsort(lengths, descending=True, stable=True)
        flat = torch.arange(batch * width, device=attention_mask.device).view(batch, width)
        self.flat = flat[order][computed[order]]
        self.columns = self.flat % width
        self.batch, self.width = batch, width
        self.skip = skip
        self.groups: list[tuple[int, int, int, int]] = []
        start = 0
        for length, skipped in zip(lengths[order].tolist(), skip[order].tolist()):
            if self.groups and self.groups[-1][1] == length and self.groups[-1][3] == skipped:
                count, _, first, _ = self.groups[-1]
                self.groups[-1] = (count + 1, length, first, skipped)
            else:
                self.groups.append((1, length, start, skipped))
            start += length

    def gather(self, padded: torch.Tensor) -> torch.Tensor:
        """(batch, width, ...) → (tokens, ...): the computed tokens, packed."""
        return padded.reshape(self.batch * self.width, *padded.shape[2:])[self.flat]

    def unpack(self, packed: torch.Tensor, prefix: torch.Tensor | None) -> torch.Tensor:
        """(tokens, hidden) → (batch, width, hidden), zeros at padding and, in a row that reused
        ``s = skip[r]`` tokens of the shared prefix, its states (``prefix``, (P, hidden)) in the
        first ``s`` columns."""
        out = packed.new_zeros(self.batch * self.width, packed.shape[-1])
        out = out.index_copy_(0, self.flat, packed).view(self.batch, self.width, -1)
        if prefix is not None:
            for skipped in set(self.skip.tolist()) - {0}:
                rows = (self.skip == skipped).nonzero().flatten()
                out[rows, :skipped] = prefix[:skipped].to(out.dtype)
        return out


class DecoderStates(PackedStates):
    """Hidden states kept packed; a layer is unpacked (prefix states filled in) when a view reads
    it, once."""

    def __init__(
        self, packing: DecoderPacking, packed: list[torch.Tensor], prefix: PrefixState | None
    ) -> None:
        super().__init__(packing, packed)
        self._prefix = prefix

    def unpack(self, index: int) -> torch.Tensor:
        prefix = None if self._prefix is None else self._prefix.states[index]
        return self._packing.unpack(self._packed[index], prefix)


def causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    skip: int,
    window: int | None,
    causal: bool = True,
) -> torch.Tensor:
    """Attention of ``count`` sentences of ``L`` tokens each over their own ``S = skip + L`` keys
    (a shared prefix of ``skip`` keys first): q (count, heads, L, d), k and v (count, kv_heads,
    S, d) → (count, L, heads·d), each key/value head shared by ``heads / kv_heads`` query heads.
    Query ``i`` sits at position ``skip + i`` and sees key ``j`` when ``j <= skip + i`` (and, with a
    sliding window, ``skip + i - j < window``, transformers' rule).

    ``scaled_dot_product_attention`` as transformers' default attention computes it, with its own
    grouped-query heads (``enable_gqa``: no repeated copy of the keys and values) and, without a
    prefix or window, its causal kernel (``is_causal``: no mask at all). On CPU this is 2-3× faster
    than an explicit fp32 product, mask and softmax at STS lengths (bf16 and fp32 alike).

    ``causal=False`` (a bidirectional view, no prefix): every query sees every key of its
    sentence, and no sliding window either, as LLM2Vec's bidirectional Mistral computes (its mask
    is all zeros: the window rule is multiplied into a mask of zeros).
    """
    count, heads, length, d = q.shape
    grouped = heads != k.shape[1]
    if not causal:
        assert not skip, "a bidirectional pass shares no prefix"
        out = F.scaled_dot_product_attention(q, k, v, enable_gqa=grouped)
    elif not skip and window is None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=grouped)
    else:
        keys = k.shape[2]
        rows = torch.arange(length, device=q.device)[:, None] + skip
        cols = torch.arange(keys, device=q.device)[None, :]
        allowed = cols <= rows
        if window is not None:
            allowed = allowed & (rows - cols < window)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=grouped)
    return out.transpose(1, 2).reshape(count, length, heads * d)


class DecoderKernels:
    """One layer's products: the fused query/key/value projection, the output projection plus
    the residual, and the SwiGLU MLP plus the residual. With ``fused`` (oneDNN, bf16 on CPU,
    :func:`harness.core.encoding.kernels.fused_linear_available`) gate and up are two products,
    the gate's SiLU and the up projection's product with it computed inside them, and each
    residual added inside its product: ``down(silu(gate(m)) ⊙ up(m)) + x`` in three calls
    instead of six passes. Otherwise the public ops (one gate/up product, ``F.silu``), as
    transformers computes them."""

    def __init__(self, layer: DecoderLayer, fused: bool) -> None:
        self.fused = fused
        self.qkv = LinearKernel.of(layer.qkv, fused, keep_weight=False)
        self.out = LinearKernel.of(layer.out, fused, keep_weight=False)
        self.down = LinearKernel.of(layer.down, fused, keep_weight=False)
        gate_up = layer.gate_up.weight
        inner = gate_up.shape[0] // 2
        if fused:
            self.gate = LinearKernel(gate_up[:inner], None, True, keep_weight=False)
            self.up = LinearKernel(gate_up[inner:], None, True, keep_weight=False)
        else:
            self.gate_up = LinearKernel.of(layer.gate_up, False)

    def mlp(self, m: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """``residual + W_down(silu(W_gate m) ⊙ W_up m)``."""
        if self.fused:
            hidden = self.up(m, multiply=self.gate(m, act="silu"))
        else:
            gate, up = self.gate_up(m).chunk(2, -1)
            hidden = F.silu(gate) * up
        return self.down(hidden, residual=residual)


class NativeDecoder(nn.Module):
    """A packed decoder returning every hidden state (see the module docstring) and no pooler."""

    inv_freq: torch.Tensor

    def __init__(self, shape: DecoderShape) -> None:
        super().__init__()
        self.shape = shape
        self.embed = uninitialised.Embedding(shape.vocab, shape.hidden)
        self.layers = nn.ModuleList(DecoderLayer(shape) for _ in range(shape.layers))
        self.norm = nn.Parameter(torch.ones(shape.hidden))
        # Computed on the CPU even when the module is built on the meta device (load_decoder): it
        # is no checkpoint tensor, and a meta arange would import torch's reference ops and sympy
        # (824 modules, 0.8 s) only to be computed again.
        with torch.device("cpu"):
            self.register_buffer("inv_freq", rope_frequencies(shape), persistent=False)
        self._prefixes: dict[tuple[int, ...], PrefixState] = {}
        self._kernels: list[DecoderKernels] | None = None

    @property
    def compute_dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    def set_compute_dtype(self, dtype: torch.dtype) -> NativeDecoder:
        """Hold every weight in ``dtype`` (the rope frequencies stay fp32); cached prefixes are
        dropped. Before the first forward only (which may release the weights for fused
        kernels)."""
        if self._kernels is not None:
            raise RuntimeError("set_compute_dtype after the first forward of a NativeDecoder")
        for parameter in self.parameters():
            parameter.data = parameter.data.to(dtype)
        self._prefixes.clear()
        return self

    def rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """(cos, sin) of each position, (tokens, 1, d), in ``dtype`` (transformers' rounding)."""
        freqs = positions[:, None].float() * self.inv_freq.float()
        angles = torch.cat((freqs, freqs), dim=-1)
        return angles.cos().to(dtype)[:, None, :], angles.sin().to(dtype)[:, None, :]

    def run(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        groups: Sequence[tuple[int, int, int, int]],
        prefix: PrefixState | None,
        keep_kv: bool = False,
        causal: bool = True,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
        """The layers over packed tokens ``ids`` at ``positions``: every hidden state, and with
        ``keep_kv`` every layer's rotated keys and values ((tokens, kv_heads, d), what a prefix
        keeps; a batch's are let go layer by layer). ``causal=False``: without the causal mask."""
        s = self.shape
        x = self.embed(ids)
        tokens, kernels = x.shape[0], self._layer_kernels(x.device)
        states, keys, values = [x], [], []
        if kernels and kernels[0].fused:
            x = bucket_rows(x)  # a row count oneDNN has compiled for already
            positions = bucket_rows(positions[:, None])[:, 0]
        cos, sin = self.rope(positions, x.dtype)
        for index, (layer, kernel) in enumerate(zip(self.layers, kernels)):
            qkv = kernel.qkv(rms_norm(x, layer.norm1, s.eps))  # type: ignore[arg-type]
            q = qkv[:, : s.heads * s.head_dim].view(-1, s.heads, s.head_dim)
            k = qkv[:, s.heads * s.head_dim : (s.heads + s.kv_heads) * s.head_dim]
            k = k.view(-1, s.kv_heads, s.head_dim)
            v = qkv[:, (s.heads + s.kv_heads) * s.head_dim :].view(-1, s.kv_heads, s.head_dim)
            q = rotate(q, cos, sin, layer.q_norm, s.eps)  # type: ignore[arg-type]
            k = rotate(k, cos, sin, layer.k_norm, s.eps)  # type: ignore[arg-type]
            if keep_kv:
                keys.append(k[:tokens])
                values.append(v[:tokens])
            attended = self.attend(q, k, v, groups, prefix, index, causal)
            x = kernel.out(attended, residual=x)
            x = kernel.mlp(rms_norm(x, layer.norm2, s.eps), residual=x)  # type: ignore[arg-type]
            states.append(x[:tokens])
        states[-1] = rms_norm(states[-1], self.norm, s.eps)  # transformers' hidden_states[-1]
        return states, keys, values

    def _layer_kernels(self, device: torch.device) -> list[DecoderKernels]:
        """Each layer's products, made at the first forward for the device and dtype the weights
        then have. With oneDNN's fused products (bf16 on CPU) the weights are reordered for them
        and the module's own copies released: a decoder's weights are most of its memory."""
        if self._kernels is None:
            dtype = self.compute_dtype
            fused = fused_linear_available(device, dtype)
            kernels = []
            for layer in self.layers:
                kernels.append(DecoderKernels(layer, fused))  # type: ignore[arg-type]
                if fused:  # layer by layer: at most one layer's weights held twice
                    for name in ("qkv", "out", "gate_up", "down"):
                        getattr(layer, name).weight = nn.Parameter(
                            torch.empty(0, dtype=dtype, device=device), requires_grad=False
                        )
            self._kernels = kernels
        return self._kernels

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        groups: Sequence[tuple[int, int, int, int]],
        prefix: PrefixState | None,
        layer: int,
        causal: bool = True,
    ) -> torch.Tensor:
        """Attention per group of equal (length, skip) over packed q (tokens, heads, d) and k, v
        (tokens, kv_heads, d), causal unless ``causal=False``; grouped-query heads share their
        key/value head."""
        s = self.shape
        out = q.new_empty(q.shape[0], s.heads * s.head_dim)
        out[sum(count * length for count, length, _, _ in groups) :] = 0  # bucket_rows' rows
        for count, length, start, skip in groups:
            if length == 0:
                continue
            rows = slice(start, start + count * length)
            gq = q[rows].view(count, length, s.heads, s.head_dim).transpose(1, 2)
            gk = k[rows].view(count, length, s.kv_heads, s.head_dim).transpose(1, 2)
            gv = v[rows].view(count, length, s.kv_heads, s.head_dim).transpose(1, 2)
            if skip:
                assert prefix is not None and skip <= prefix.length
                # the prefix's first `skip` keys and values: causal, so they are exactly those of
                # its first `skip` tokens alone
                shared_k = prefix.keys[layer][:, :skip]  # (kv_heads, skip, d)
                shared_v = prefix.values[layer][:, :skip]
                gk = torch.cat([shared_k.expand(count, -1, -1, -1), gk], dim=2)
                gv = torch.cat([shared_v.expand(count, -1, -1, -1), gv], dim=2)
            attended = causal_attention(gq, gk, gv, skip, s.window, causal)
            out[rows] = attended.reshape(-1, out.shape[1])
        return out

    def prefix_state(self, prefix_ids: tuple[int, ...], device: torch.device) -> PrefixState:
        """The shared prefix's keys, values and states, computed once per prefix (and kept for the
        model's life: a run has a handful of prompts)."""
        if prefix_ids not in self._prefixes:
            ids = torch.tensor(prefix_ids, dtype=torch.long, device=device)
            positions = torch.arange(len(prefix_ids), device=device)
            states, keys, values = self.run(
                ids, positions, [(1, len(prefix_ids), 0, 0)], None, keep_kv=True
            )
            self._prefixes[prefix_ids] = PrefixState(
                keys=[k.transpose(0, 1).contiguous() for k in keys],
                values=[v.transpose(0, 1).contiguous() for v in values],
                states=states,
            )
        return self._prefixes[prefix_ids]

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        prefix_ids: torch.Tensor | None = None,
        prefix_skip: torch.Tensor | None = None,
        bidirectional: bool = False,
    ) -> tuple[DecoderStates, None]:
        """Every hidden state of a right-padded batch. Row ``r``'s first ``prefix_skip[r]`` ids
        are the first ids of ``prefix_ids`` (the caller checked): it attends to their shared keys
        and values instead of computing them. ``bidirectional``: each token attends to every token
        of its own text (no causal mask; no shared prefix then, whose states would depend on the
        sentence after it)."""
        if bidirectional and prefix_skip is not None and bool(prefix_skip.any()):
            raise ValueError("a bidirectional pass shares no prefix: tokenize without one")
        prefix = None
        skip = torch.zeros(input_ids.shape[0], dtype=torch.long, device=input_ids.device)
        if prefix_ids is not None and prefix_skip is not None and bool(prefix_skip.any()):
            prefix = self.prefix_state(tuple(prefix_ids.tolist()), input_ids.device)
            skip = prefix_skip.long()
        packing = DecoderPacking(attention_mask, skip)
        states, _, _ = self.run(
            packing.gather(input_ids),
            packing.columns,
            packing.groups,
            prefix,
            causal=not bidirectional,
        )
        return DecoderStates(packing, states, prefix), None


# The decoders' tokenizer is every engine's (prefix ids included).
DecoderTokenizer = BackboneTokenizer


# ours (under ``layers.{i}.``) → the checkpoint's (under ``layers.{i}.``, ``model.`` removed)
DECODER_LAYER = {
    "norm1": "input_layernorm.weight",
    "norm2": "post_attention_layernorm.weight",
    "out.weight": "self_attn.o_proj.weight",
    "down.weight": "mlp.down_proj.weight",
}


def layer_tensors(hf: dict[str, torch.Tensor], i: int, shape: DecoderShape) -> dict[str, Any]:
    """Layer ``i``'s tensors under our names: q/k/v and gate/up concatenated (KeyError when the
    checkpoint lacks one)."""
    p = f"layers.{i}."
    state = {f"{p}{ours}": hf[f"{p}{theirs}"] for ours, theirs in DECODER_LAYER.items()}
    projections = [f"{p}self_attn.{name}_proj" for name in "qkv"]
    state[f"{p}qkv.weight"] = torch.cat([hf[f"{name}.weight"] for name in projections])
    if shape.qkv_bias:
        state[f"{p}qkv.bias"] = torch.cat([hf[f"{name}.bias"] for name in projections])
    state[f"{p}gate_up.weight"] = torch.cat(
        [hf[f"{p}mlp.gate_proj.weight"], hf[f"{p}mlp.up_proj.weight"]]
    )
    if shape.qk_norm:
        state[f"{p}q_norm"] = hf[f"{p}self_attn.q_norm.weight"]
        state[f"{p}k_norm"] = hf[f"{p}self_attn.k_norm.weight"]
    return state


def load_decoder(
    folder: Path, dtype: torch.dtype = torch.float32, **variant: bool
) -> NativeDecoder:
    """The checkpoint's decoder with every weight in ``dtype`` (no fp32 copy of a bf16 checkpoint
    is made on the way), in eval mode; a missing tensor raises KeyError. ``variant``: the parts
    :meth:`DecoderShape.from_config` takes (the family's, for the checkpoint's model type)."""
    shape = DecoderShape.from_config(model_config(folder), **variant)
    hf = read_weights(folder, ("model.",))  # a *ForCausalLM checkpoint; its lm_head is dropped
    state: dict[str, torch.Tensor] = {"embed.weight": hf["embed_tokens.weight"]}
    state["norm"] = hf["norm.weight"]
    for i in range(shape.layers):
        state |= layer_tensors(hf, i, shape)
    with torch.device("meta"):
        model = NativeDecoder(shape)
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True, assign=True)
    return model.eval()


# Where each LoRA target lands in our fused weights: (our weight, which block of its rows).
LORA_TARGETS = {
    "self_attn.q_proj": ("qkv", 0),
    "self_attn.k_proj": ("qkv", 1),
    "self_attn.v_proj": ("qkv", 2),
    "self_attn.o_proj": ("out", 0),
    "mlp.gate_proj": ("gate_up", 0),
    "mlp.up_proj": ("gate_up", 1),
    "mlp.down_proj": ("down", 0),
}


def merge_lora(model: NativeDecoder, adapter: Any) -> NativeDecoder:
    """Merge a plain LoRA (``adapter``: an :class:`~harness.core.encoding.adapters.AdapterRef` the
    native path takes) into the fused weights, before the first forward: ``W += s · B A`` for each
    targeted projection, the product in fp32 and rounded once into the weights' dtype. The query,
    key and value blocks of ``qkv`` are ``heads·d``, ``kv_heads·d``, ``kv_heads·d`` rows; gate and
    up the two halves of ``gate_up``. A tensor that fits nothing raises ``UserError``."""
    from safetensors.torch import load_file

    from harness.core.encoding.adapters import WEIGHTS, adapter_module_names
    from harness.core.errors import UserError

    s = model.shape
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    blocks = {"qkv": (0, q, q + kv, q + 2 * kv), "gate_up": (0, s.inner, 2 * s.inner)}
    tensors = load_file(str(Path(adapter.path) / WEIGHTS))
    names = adapter_module_names(list(tensors), "model")
    with torch.no_grad():
        for key, module in names.items():
            if ".lora_A." not in key:
                continue
            head, _, tail = module.partition(".")
            index, _, target = tail.partition(".")
            if head != "layers" or not index.isdigit() or target not in LORA_TARGETS:
                raise UserError(f"adapter {adapter.path}: {key} fits no weight of the decoder")
            ours, block = LORA_TARGETS[target]
            weight = getattr(model.layers[int(index)], ours).weight
            start, stop = (
                blocks[ours][block : block + 2] if ours in blocks else (0, weight.shape[0])
            )
            a, b = tensors[key].float(), tensors[key.replace(".lora_A.", ".lora_B.")].float()
            rows = weight[start:stop]
            if b.shape[0] != rows.shape[0] or a.shape[1] != rows.shape[1]:
                raise UserError(
                    f"adapter {adapter.path}: {key} is for a {b.shape[0]}x{a.shape[1]} weight, "
                    f"this decoder's is {rows.shape[0]}x{rows.shape[1]}: trained on another model"
                )
            rows.copy_((rows.float() + adapter.scale * (b @ a)).to(weight.dtype))
    return model
