"""The native encoder's kernels (harness/core/encoding/kernels.py) against the plain torch ops they
replace, and the whole packed forward against transformers' BertModel on the tiny BERT."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional


def padded_reference(qkv: torch.Tensor, mask: torch.Tensor, heads: int) -> torch.Tensor:
    """Masked SDPA over a padded (batch, length, 3H) tensor: what packed attention must equal."""
    batch, length, three_h = qkv.shape
    q, k, v = qkv.view(batch, length, 3, heads, three_h // 3 // heads).permute(2, 0, 3, 1, 4)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.bool()[:, None, None, :])
    return out.transpose(1, 2).reshape(batch, length, three_h // 3)


def test_packed_attention_equals_masked_sdpa_for_unsorted_lengths():
    from harness.core.encoding.kernels import Packing, packed_attention

    torch.manual_seed(0)
    lengths = [3, 7, 7, 1, 5, 7]  # unsorted, repeated, a one-token sentence
    mask = torch.zeros(len(lengths), 7, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    qkv = torch.randn(len(lengths), 7, 3 * 8)
    packing = Packing(mask)
    assert [(count, length) for count, length, _ in packing.groups] == [
        (3, 7),
        (1, 5),
        (1, 3),
        (1, 1),
    ]
    got = packing.unpack(packed_attention(packing.gather(qkv), packing, heads=2))
    want = padded_reference(qkv, mask, heads=2)
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=1e-5)
    assert (got[~mask.bool()] == 0).all()
    assert packing.cls_rows.tolist() == [
        packing.flat.tolist().index(row * 7) for row in range(len(lengths))
    ]


def test_short_attention_falls_back_to_softmax_when_exp_overflows():
    from harness.core.encoding.kernels import short_attention

    torch.manual_seed(1)
    qkv = torch.randn(4 * 5, 3 * 8) * 40  # scores in the thousands: exp overflows in fp32
    got = short_attention(qkv, count=4, length=5, heads=2)
    want = padded_reference(qkv.view(4, 5, 24), torch.ones(4, 5), heads=2).reshape(20, 8)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_an_overflowing_sentence_leaves_its_group_mates_untouched():
    """The softmax fallback is per row: a sentence's attention is the same alone or beside one
    whose scores overflow."""
    from harness.core.encoding.kernels import short_attention

    torch.manual_seed(4)
    calm, wild = torch.randn(5, 24), torch.randn(5, 24) * 40
    alone = short_attention(calm, count=1, length=5, heads=2)
    beside = short_attention(torch.cat([wild, calm]), count=2, length=5, heads=2)
    assert torch.isfinite(beside).all()
    assert torch.equal(beside[5:], alone)


@pytest.fixture
def fresh_probe():
    """fused_linear_ops() probes once per process: forget its answer before and after a test."""
    from harness.core.encoding import kernels

    kernels.fused_linear_ops.cache_clear()
    yield kernels
    kernels.fused_linear_ops.cache_clear()


def test_fused_linear_epilogues_match_linear_then_activation_and_add(fresh_probe):
    from harness.core.encoding.kernels import LinearKernel, fused_linear_available

    if not fused_linear_available(torch.device("cpu"), torch.bfloat16):
        pytest.skip(
            "this torch or CPU has no oneDNN bf16 fused linear (needs AVX512-BF16, AMX or "
            "AVX-NE-CONVERT)"
        )
    torch.manual_seed(2)
    linear = torch.nn.Linear(48, 40).to(torch.bfloat16)
    x, residual = torch.randn(30, 48).to(torch.bfloat16), torch.randn(30, 40).to(torch.bfloat16)
    fused, plain = LinearKernel.of(linear, fused=True), LinearKernel.of(linear, fused=False)
    assert fused.fused is not None and plain.fused is None
    for act in (None, "gelu", "gelu_new", "relu"):
        torch.testing.assert_close(
            fused(x, act=act).float(), plain(x, act=act).float(), atol=0.05, rtol=0.02
        )
    torch.testing.assert_close(
        fused(x, residual=residual).float(),
        plain(x, residual=residual).float(),
        atol=0.05,
        rtol=0.02,
    )


def _cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty off Linux): evidence of bf16 instructions
    that does not go through torch's private test."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            return {
                flag
                for line in cpuinfo
                if line.startswith("flags")
                for flag in line.split(":", 1)[1].split()
            }
    except OSError:
        return set()


def test_torch_still_has_the_fused_bf16_ops_where_the_cpu_has_bf16(fresh_probe, caplog):
    """Fails loudly when a torch upgrade renames or changes the private oneDNN ops kernels.py uses:
    the harness would still compute the same vectors (the public path), only slower, so nothing
    else would notice."""
    from harness.core.machine import half_native_on_cpu

    version = torch.__version__
    if not torch.backends.mkldnn.is_available():
        pytest.skip(f"torch {version} is built without oneDNN")
    hardware = _cpu_flags() & {"avx512_bf16", "amx_bf16", "avx_ne_convert"}
    torch_says = half_native_on_cpu("bf16")
    if not torch_says and not hardware:
        pytest.skip(
            "this CPU has no bf16 instructions (AVX512-BF16, AMX or AVX-NE-CONVERT): no fused bf16 "
            "path"
        )
    assert torch_says, (
        f"torch {version} changed torch.ops.mkldnn._is_mkldnn_bf16_supported (this CPU has "
        f"{sorted(hardware)}, it says no): update harness/core/encoding/kernels.py"
    )
    with caplog.at_level("DEBUG", logger="sts_bench.kernels"):
        ops = fresh_probe.fused_linear_ops()
    assert ops is not None, (
        f"torch {version} changed torch.ops.mkldnn._linear_pointwise (or "
        f"_reorder_linear_weight): the fused bf16 path is off — update "
        f"harness/core/encoding/kernels.py. The probe said: {caplog.text.strip()}"
    )


_ACTS = {
    ("none", ""): lambda y: y,
    ("gelu", "none"): F.gelu,
    ("gelu", "tanh"): lambda y: F.gelu(y, approximate="tanh"),
    ("relu", ""): F.relu,
    ("swish", ""): F.silu,
}


def _pointwise(x, weight, bias, attr, scalars, algorithm):
    """What torch.ops.mkldnn._linear_pointwise computes today, in public torch."""
    return _ACTS[attr, algorithm](F.linear(x, weight, bias))


def _binary(x, other, weight, bias, op):
    """What torch.ops.mkldnn._linear_pointwise.binary(..., "add" | "mul") computes today."""
    y = F.linear(x, weight, bias)
    return {"add": y + other, "mul": y * other}[op]


def _raise(*args):
    raise RuntimeError("Expected at most 5 argument(s) but received 6")


class _Op:
    """An op with a ``.binary`` overload, like torch's OpOverloadPacket."""

    def __init__(self, call, binary=_binary) -> None:
        self._call, self.binary = call, binary

    def __call__(self, *args):
        return self._call(*args)


class _FakeMkldnn:
    """Stand-in for torch.ops.mkldnn in public torch: the private ops as kernels.py expects them to
    behave, so that each breakage below changes exactly one thing."""

    def __init__(self) -> None:
        self._is_mkldnn_bf16_supported = lambda: True
        self._reorder_linear_weight = lambda weight, batch_size: weight.clone()
        self._linear_pointwise = _Op(_pointwise)


# breakage → (what it does to the fake, what the debug line then says)
BREAKAGES = {
    "no bf16 test": (lambda ns: delattr(ns, "_is_mkldnn_bf16_supported"), "has no attribute"),
    "bf16 test fails": (
        lambda ns: setattr(ns, "_is_mkldnn_bf16_supported", _raise),
        "Expected at most",
    ),
    "op renamed": (
        lambda ns: delattr(ns, "_linear_pointwise"),
        "has no attribute '_linear_pointwise'",
    ),
    "reorder renamed": (
        lambda ns: delattr(ns, "_reorder_linear_weight"),
        "no attribute '_reorder_linear_weight'",
    ),
    "signature changed": (
        lambda ns: setattr(ns, "_linear_pointwise", _Op(_raise)),
        "Expected at most",
    ),
    "binary overload gone": (
        lambda ns: setattr(ns, "_linear_pointwise", _Op(_pointwise, binary=None)),
        "not callable",
    ),
    "binary signature changed": (
        lambda ns: setattr(ns, "_linear_pointwise", _Op(_pointwise, binary=_raise)),
        "Expected at most",
    ),
    "bias ignored": (
        lambda ns: setattr(
            ns,
            "_linear_pointwise",
            _Op(lambda x, w, b, *rest: _pointwise(x, w, torch.zeros_like(b), *rest)),
        ),
        "none: off by",
    ),
    "activation ignored": (
        lambda ns: setattr(
            ns,
            "_linear_pointwise",
            _Op(lambda x, w, b, attr, scalars, algorithm: F.linear(x, w, b)),
        ),
        "gelu: off by",
    ),
    "binary subtracts": (
        lambda ns: setattr(
            ns,
            "_linear_pointwise",
            _Op(_pointwise, binary=lambda x, other, w, b, op: F.linear(x, w, b) - other),
        ),
        "residual add: off by",
    ),
    "binary adds instead of multiplying": (
        lambda ns: setattr(
            ns,
            "_linear_pointwise",
            _Op(_pointwise, binary=lambda x, other, w, b, op: F.linear(x, w, b) + other),
        ),
        "multiply, no bias: off by",
    ),
    "swish ignored": (
        lambda ns: setattr(
            ns,
            "_linear_pointwise",
            _Op(lambda x, w, b, attr, s, alg: _pointwise(x, w, b, "none" if attr == "swish" else attr, s, alg)),
        ),
        "silu: off by",
    ),
    "returns fp32": (
        lambda ns: setattr(ns, "_linear_pointwise", _Op(lambda *args: _pointwise(*args).float())),
        "expected torch.bfloat16",
    ),
    "weight layout transposed": (
        lambda ns: setattr(ns, "_reorder_linear_weight", lambda w, batch_size: w.t()),
        "cannot be multiplied",
    ),
    "NaN out": (
        lambda ns: setattr(
            ns, "_linear_pointwise", _Op(lambda *args: _pointwise(*args) * float("nan"))
        ),
        "off by up to nan",
    ),
}


def test_the_probe_accepts_ops_that_behave_like_today(fresh_probe):
    """The positive control of the breakages below: the fake passes, so each one fails for its own
    breakage; and kernels built on the probed ops match F.linear."""
    ops = fresh_probe.probe_fused_ops(_FakeMkldnn())
    assert ops is not None
    torch.manual_seed(5)
    linear = torch.nn.Linear(12, 10).to(torch.bfloat16)
    x = torch.randn(6, 12).to(torch.bfloat16)
    packed = ops.pack(linear.weight.detach())
    want = F.gelu(F.linear(x, linear.weight, linear.bias))
    assert torch.equal(ops.linear(x, packed, linear.bias.detach(), "gelu"), want)


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_a_changed_private_op_turns_the_fused_path_off_and_says_why(breakage, fresh_probe, caplog):
    """Every way a torch release could change the ops (gone, renamed, new signature, new meaning,
    new dtype) is caught by the probe, which returns None and logs the reason at debug level."""
    namespace = _FakeMkldnn()
    break_it, reason = BREAKAGES[breakage]
    break_it(namespace)
    with caplog.at_level("DEBUG", logger="sts_bench.kernels"):
        assert fresh_probe.probe_fused_ops(namespace) is None
    assert "oneDNN fused linear off" in caplog.text and reason in caplog.text, caplog.text


@pytest.mark.parametrize("act", [None, "gelu", "gelu_new", "relu", "silu"])
def test_the_fallback_kernel_is_plain_f_linear(act, fresh_probe, monkeypatch):
    """With the probe failing (the real torch.ops.mkldnn op made to raise), a kernel asked to fuse
    computes exactly F.linear, then the activation or the residual add."""
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", _raise, raising=False)
    assert fresh_probe.fused_linear_ops() is None
    assert not fresh_probe.fused_linear_available(torch.device("cpu"), torch.bfloat16)
    torch.manual_seed(3)
    linear = torch.nn.Linear(20, 16).to(torch.bfloat16)
    x, residual = torch.randn(9, 20).to(torch.bfloat16), torch.randn(9, 16)
    kernel = fresh_probe.LinearKernel.of(linear, fused=True)
    assert kernel.fused is None
    y = F.linear(x, linear.weight, linear.bias)
    activated = {
        None: y,
        "gelu": F.gelu(y),
        "relu": F.relu(y),
        "gelu_new": F.gelu(y, approximate="tanh"),
        "silu": (y.float() * torch.sigmoid(y.float())).to(y.dtype),  # y·σ(y) in fp32, rounded
    }[act]
    assert torch.equal(kernel(x, act=act), activated)
    assert torch.equal(kernel(x, residual=residual), residual + y.float())
    other = torch.randn(9, 16).to(torch.bfloat16)
    assert torch.equal(kernel(x, multiply=other), y * other)


def test_the_fallback_path_gives_the_fused_paths_hidden_states(tiny_bert, fresh_probe, monkeypatch):
    """The whole bf16 forward with the fused ops and with the probe failing: the same hidden states
    within bf16 rounding (and the fused run not byte-identical, so both paths really ran)."""
    from harness.core.encoding.native_bert import NativeTokenizer, load_native_bert

    if fresh_probe.fused_linear_ops() is None:
        pytest.skip(
            "this torch or CPU has no oneDNN bf16 fused linear: only the public path exists here"
        )
    texts = ["the quick brown fox", "a dog", "the quick brown fox jumps over the dog again", "fox"]
    tokenizer = NativeTokenizer(tiny_bert, 64)
    batch = tokenizer.pad(tokenizer.encode(texts))

    def hidden_states():
        model = load_native_bert(tiny_bert).set_compute_dtype(torch.bfloat16)
        with torch.inference_mode():
            states, _ = model(**batch)
        return [states[i].float() for i in range(len(states))]

    fused = hidden_states()
    fresh_probe.fused_linear_ops.cache_clear()
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", _raise, raising=False)
    assert fresh_probe.fused_linear_ops() is None
    plain = hidden_states()
    mask = batch["attention_mask"].bool()
    for ours, theirs in zip(fused, plain, strict=True):
        np.testing.assert_allclose(ours[mask].numpy(), theirs[mask].numpy(), atol=0.05)
    assert not all(torch.equal(a, b) for a, b in zip(fused[1:], plain[1:]))


def test_packed_states_unpack_once_and_index_like_a_list():
    from harness.core.encoding.kernels import PackedStates, Packing

    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    packing = Packing(mask)
    layers = [torch.arange(5 * 2, dtype=torch.float32).view(5, 2) + 100 * i for i in range(3)]
    states = PackedStates(packing, layers)
    assert len(states) == 3 and states[-1] is states[2] and len(states[0:2]) == 2
    assert states[1].shape == (2, 3, 2) and states[1][0, 2].tolist() == [0.0, 0.0]
    assert [state.shape for state in states] == [(2, 3, 2)] * 3  # iteration ends (it never did)
    with pytest.raises(IndexError):
        states[3]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_native_forward_matches_bert_model_hidden_states(family, dtype, request):
    """Every hidden state of a padded, unsorted batch against transformers' BertModel
    (RobertaModel): to 1e-5 in fp32; in bf16 (whole layer in bf16, fused products) within bf16
    rounding of it."""
    from transformers import AutoModel, AutoTokenizer

    from harness.core.encoding.backbone import resolve_backbone
    from harness.core.encoding.native import load_native
    from harness.core.encoding.native_bert import NativeTokenizer

    tiny_bert = request.getfixturevalue(f"tiny_{family}")  # the model under test, BERT or RoBERTa
    assert resolve_backbone(str(tiny_bert)).native_ok
    texts = ["the quick brown fox", "a dog", "the quick brown fox jumps over the dog again", "fox"]
    tokenizer = NativeTokenizer(tiny_bert, 64)
    batch = tokenizer.pad(tokenizer.encode(texts))
    model = load_native(tiny_bert)  # its family's loader: RoBERTa's positions start after padding
    if dtype == "bf16":
        model.set_compute_dtype(torch.bfloat16)
    hf = AutoModel.from_pretrained(tiny_bert).eval()
    with torch.inference_mode():
        states, pooled = model(**batch)
        reference = hf(
            **AutoTokenizer.from_pretrained(tiny_bert)(texts, padding=True, return_tensors="pt"),
            output_hidden_states=True,
        )
    mask = batch["attention_mask"].bool()
    tolerance = {"fp32": 1e-5, "bf16": 0.05}[dtype]
    assert len(states) == len(reference.hidden_states)
    for ours, theirs in zip(states, reference.hidden_states):
        np.testing.assert_allclose(ours.float()[mask].numpy(), theirs[mask].numpy(), atol=tolerance)
    np.testing.assert_allclose(pooled.numpy(), reference.pooler_output.numpy(), atol=tolerance)
