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
    assert [(count, length) for count, length, _ in packing.groups] == [(3, 7), (1, 5), (1, 3), (1, 1)]
    got = packing.unpack(packed_attention(packing.gather(qkv), packing, heads=2))
    want = padded_reference(qkv, mask, heads=2)
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-5, rtol=1e-5)
    assert (got[~mask.bool()] == 0).all()
    assert packing.cls_rows.tolist() == [packing.flat.tolist().index(row * 7) for row in range(len(lengths))]


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


def test_fused_linear_epilogues_match_linear_then_activation_and_add():
    from harness.core.encoding.kernels import LinearKernel, fused_linear_available

    if not fused_linear_available(torch.device("cpu"), torch.bfloat16):
        pytest.skip("this torch or CPU has no oneDNN bf16 fused linear (needs AVX512-BF16, AMX or AVX-NE-CONVERT)")
    torch.manual_seed(2)
    linear = torch.nn.Linear(48, 40).to(torch.bfloat16)
    x, residual = torch.randn(30, 48).to(torch.bfloat16), torch.randn(30, 40).to(torch.bfloat16)
    fused, plain = LinearKernel(linear, fused=True), LinearKernel(linear, fused=False)
    for act in (None, "gelu", "gelu_new", "relu"):
        torch.testing.assert_close(fused(x, act=act).float(), plain(x, act=act).float(), atol=0.05, rtol=0.02)
    torch.testing.assert_close(fused(x, residual=residual).float(), plain(x, residual=residual).float(),
                               atol=0.05, rtol=0.02)


def test_packed_states_unpack_once_and_index_like_a_list():
    from harness.core.encoding.kernels import PackedStates, Packing

    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    packing = Packing(mask)
    layers = [torch.arange(5 * 2, dtype=torch.float32).view(5, 2) + 100 * i for i in range(3)]
    states = PackedStates(packing, layers)
    assert len(states) == 3 and states[-1] is states[2] and len(states[0:2]) == 2
    assert states[1].shape == (2, 3, 2) and states[1][0, 2].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_native_forward_matches_bert_model_hidden_states(family, dtype, request):
    """Every hidden state of a padded, unsorted batch against transformers' BertModel (RobertaModel):
    to 1e-5 in fp32; in bf16 (whole layer in bf16, fused products) within bf16 rounding of it."""
    from transformers import AutoModel, AutoTokenizer

    from harness.core.encoding.backbone import resolve_backbone
    from harness.core.encoding.native_bert import NativeTokenizer, load_native_bert

    tiny_bert = request.getfixturevalue(f"tiny_{family}")  # the model under test, BERT or RoBERTa
    assert resolve_backbone(str(tiny_bert)).native_ok
    texts = ["the quick brown fox", "a dog", "the quick brown fox jumps over the dog again", "fox"]
    tokenizer = NativeTokenizer(tiny_bert, 64)
    batch = tokenizer.pad(tokenizer.encode(texts))
    model = load_native_bert(tiny_bert)
    if dtype == "bf16":
        model.set_compute_dtype(torch.bfloat16)
    hf = AutoModel.from_pretrained(tiny_bert).eval()
    with torch.inference_mode():
        states, pooled = model(**batch)
        reference = hf(**AutoTokenizer.from_pretrained(tiny_bert)(texts, padding=True, return_tensors="pt"),
                       output_hidden_states=True)
    mask = batch["attention_mask"].bool()
    tolerance = {"fp32": 1e-5, "bf16": 0.05}[dtype]
    assert len(states) == len(reference.hidden_states)
    for ours, theirs in zip(states, reference.hidden_states):
        np.testing.assert_allclose(ours.float()[mask].numpy(), theirs[mask].numpy(), atol=tolerance)
    np.testing.assert_allclose(pooled.numpy(), reference.pooler_output.numpy(), atol=tolerance)
