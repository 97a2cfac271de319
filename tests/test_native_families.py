"""The native MPNet and DeBERTa-v2/v3 encoders against transformers' own models, on tiny fixtures
built here (tests/fixtures.py): every hidden state, both attention paths, both dtypes; the
relative-position buckets against transformers' functions; the harness's vectors against one
sentence run alone through transformers; and the checkpoints the native path refuses."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from harness.core.encoding.backbone import native_reason, resolve_backbone  # noqa: E402
from harness.core.encoding.pooling import View  # noqa: E402
from harness.core.encoding.provider import ViewProvider  # noqa: E402
from harness.core.encoding.settings import EncodeSettings  # noqa: E402
from harness.core.errors import UserError  # noqa: E402

FAMILIES = ["mpnet", "deberta", "deberta_v2", "deberta_absolute"]
# Words of the fixtures' vocabulary only (an unknown word is id 1, MPNet's padding id); the long
# one reaches distances that DeBERTa-v3's 8 buckets log-bucket and the v2 variant's 12 clamp.
TEXTS = ["a man is playing guitar", "the dog", "two people are riding a horse in the park",
         "a cat is sleeping on the grass with a small red ball and the big blue car in the street",
         "dog"]


def transformers_states(folder, texts):
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(folder).eval()
    with torch.inference_mode():
        return model(**AutoTokenizer.from_pretrained(folder)(texts, padding=True, return_tensors="pt"),
                     output_hidden_states=True)


@pytest.mark.parametrize("path", ["short", "sdpa"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("family", FAMILIES)
def test_every_hidden_state_matches_transformers(family, dtype, path, request, monkeypatch):
    """A padded, unsorted batch: every hidden state against transformers' MPNetModel /
    DebertaV2Model, to 1e-5 in fp32 and within bf16 rounding in bf16, through the short-sentence
    products and through SDPA with the position terms as its additive mask."""
    from harness.core.encoding import kernels
    from harness.core.encoding.native import NativeTokenizer, load_native

    folder = request.getfixturevalue(f"tiny_{family}")
    if path == "sdpa":
        monkeypatch.setattr(kernels, "SHORT", 0)
    assert resolve_backbone(str(folder)).native_ok
    tokenizer = NativeTokenizer(folder, 128)
    batch = tokenizer.pad(tokenizer.encode(TEXTS))
    model = load_native(folder)
    if dtype == "bf16":
        model.set_compute_dtype(torch.bfloat16)
    with torch.inference_mode():
        states, pooled = model(**batch)
    reference = transformers_states(folder, TEXTS)
    mask = batch["attention_mask"].bool()
    tolerance = {"fp32": 1e-5, "bf16": 0.05}[dtype]
    assert len(states) == len(reference.hidden_states) == 3
    for ours, theirs in zip(states, reference.hidden_states):
        np.testing.assert_allclose(ours.float()[mask].numpy(), theirs[mask].numpy(), atol=tolerance)
    if family == "mpnet":
        np.testing.assert_allclose(pooled.numpy(), reference.pooler_output.numpy(), atol=tolerance)
    else:
        assert pooled is None  # DebertaV2Model has no pooler


def test_the_position_terms_change_the_result(tiny_mpnet, tiny_deberta):
    """The fixtures' position terms move the hidden states by far more than the fp32 tolerance
    above (1e-5), so a version that left them out, or bucketed them wrongly, fails there."""
    from harness.core.encoding.native import NativeTokenizer, load_native

    for folder in (tiny_mpnet, tiny_deberta):
        tokenizer = NativeTokenizer(folder, 128)
        batch = tokenizer.pad(tokenizer.encode(TEXTS))
        model = load_native(folder)
        with torch.inference_mode():
            with_terms = model(**batch)[0][-1]
            model.score_bias = lambda layer: None  # what a version without relative positions computes
            without = model(**batch)[0][-1]
        assert (with_terms - without).abs().max() > 1e-3


def test_mpnet_buckets_equal_transformers_for_every_distance():
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    from harness.core.encoding.native_mpnet import relative_buckets

    positions = torch.arange(600)
    distance = positions[None] - positions[:, None]
    assert torch.equal(relative_buckets(600), MPNetEncoder.relative_position_bucket(distance))


@pytest.mark.parametrize("buckets, largest", [(256, 512), (8, 128), (-1, 12), (64, -1)])
def test_deberta_relative_positions_equal_transformers(buckets, largest):
    from transformers.models.deberta_v2.modeling_deberta_v2 import build_relative_position

    from harness.core.encoding.native_deberta import relative_positions

    config = {"position_buckets": buckets, "max_relative_positions": largest, "max_position_embeddings": 512}
    states = torch.zeros(1, 600, 4)
    # transformers substitutes max_position_embeddings for a max_relative_positions below 1
    want = build_relative_position(states, states, buckets, largest if largest > 0 else 512)[0]
    assert torch.equal(relative_positions(600, config), want)


@pytest.mark.parametrize("family", FAMILIES)
def test_harness_vectors_equal_each_sentence_alone_through_transformers(family, request, tmp_path):
    """Through the ViewProvider (auto picks native): batched with sentences of other lengths, every
    vector equals the sentence run alone through transformers, and equals its own vector computed
    alone by the native encoder, bit for bit (batch-mates never matter)."""
    from transformers import AutoModel, AutoTokenizer

    folder = request.getfixturevalue(f"tiny_{family}")
    ref = resolve_backbone(str(folder))
    provider = ViewProvider(ref, EncodeSettings(progress=False), tmp_path / "all")
    assert provider.impl == "native"
    views = [View("cls", 2), View("mean", 2), View("mean", 1)]
    together = {view: provider.get(TEXTS, view) for view in views}
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    for i, text in enumerate(TEXTS):
        with torch.inference_mode():
            hidden = model(**tokenizer(text, return_tensors="pt"), output_hidden_states=True).hidden_states
        alone = ViewProvider(ref, EncodeSettings(progress=False), tmp_path / f"alone{i}")
        for view in views:
            want = hidden[view.layer][0][0] if view.pooling == "cls" else hidden[view.layer][0].mean(0)
            np.testing.assert_allclose(together[view][i], want.numpy(), atol=1e-5)
            np.testing.assert_array_equal(together[view][i], alone.get([text], view)[0])


@pytest.mark.parametrize("change, native", [
    ({}, True),
    ({"conv_kernel_size": 3}, False),  # deberta-v2-xlarge's convolution after the first layer
    ({"pos_att_type": ["p2c", "c2p", "p2p"]}, False),
    ({"pos_att_type": "c2p"}, True),
    ({"attention_head_size": 8}, False),
    ({"norm_rel_ebd": "layer_norm|other"}, False),
    ({"hidden_act": "swish"}, False),
    ({"model_type": "deberta"}, False),  # DeBERTa v1: another attention
    ({"model_type": "electra"}, False),
])
def test_native_deberta_is_used_only_for_what_it_implements(tiny_deberta, change, native):
    config = {**json.loads((tiny_deberta / "config.json").read_text()), **change}
    assert (not native_reason(tiny_deberta, config)) is native


@pytest.mark.parametrize("change, native", [({}, True), ({"relative_attention_num_buckets": 64}, False)])
def test_native_mpnet_is_used_only_for_what_it_implements(tiny_mpnet, change, native):
    config = {**json.loads((tiny_mpnet / "config.json").read_text()), **change}
    assert (not native_reason(tiny_mpnet, config)) is native


def test_a_checkpoint_missing_a_tensor_is_one_line_error(tiny_deberta, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "broken"
    shutil.copytree(tiny_deberta, folder)
    weights = load_file(str(folder / "model.safetensors"))
    del weights["encoder.rel_embeddings.weight"]
    save_file(weights, str(folder / "model.safetensors"))
    provider = ViewProvider(resolve_backbone(str(folder)), EncodeSettings(progress=False), tmp_path / "cache")
    with pytest.raises(UserError, match=r"model\.safetensors lacks tensor encoder\.rel_embeddings\.weight") as caught:
        provider.get(["a dog"], View("mean", 2))
    assert "--encoder-impl" not in str(caught.value)  # transformers would start it at random: no advice
