"""Every method family built on its own: a ``SpecRequest`` and a fake ``MethodContext``
(tests/fakes.py), then ``fit`` / ``encode`` / ``score_pairs`` called directly — no CLI, no config,
no scheduler. Also: the trained DSE student is evaluated with exactly the pooling it trained with.
"""

from __future__ import annotations

import numpy as np
import pytest
from fakes import FakeContext
from fixtures import pairs

from harness.core.api import EmbeddingMethod, PairScoringMethod, SpecRequest
from harness.core.data.fitsets import make_fit_set
from harness.core.data.splits import SplitData
from methods import get_method

RNG = np.random.default_rng(7)
PAIRS = pairs(RNG, 40)
SENTENCES = list(dict.fromkeys([a for a, _, _ in PAIRS] + [b for _, b, _ in PAIRS]))
TRAIN = SplitData(tuple(a for a, _, _ in PAIRS), tuple(b for _, b, _ in PAIRS), tuple(g for _, _, g in PAIRS),
                  None, origin="test fixture")


def context(tmp_path, backbone, **params) -> FakeContext:
    request = SpecRequest(backbone=str(backbone), max_length=32, params=params)
    return FakeContext(tmp_path / "cache", request, splits={("stsb", "train"): TRAIN})


def build(name: str, ctx: FakeContext):
    return get_method(name).build(ctx.request, ctx)


@pytest.mark.parametrize("name", ["cls", "avg", "first-last"])
def test_pooling_methods(tiny_bert, tmp_path, name):
    ctx = context(tmp_path, tiny_bert)
    method = build(name, ctx)
    vectors = method.encode(SENTENCES[:5])
    assert isinstance(method, EmbeddingMethod) and vectors.shape == (5, 32) and vectors.dtype == np.float32
    if name == "first-last":  # the mean of layer 1's and the last layer's masked means
        provider = ctx.views(method.spec)
        layers = [provider.get(SENTENCES[:5], view) for view in method.backbone_views()]
        assert [v.layer for v in method.backbone_views()] == [1, 2]
        np.testing.assert_allclose(vectors, (layers[0] + layers[1]) / 2, rtol=1e-6)


def test_whitening_gives_identity_covariance_on_its_fit_set(tiny_bert, tmp_path):
    ctx = context(tmp_path, tiny_bert, whitening={"k": 8})
    method = build("whitening", ctx)
    method.fit(make_fit_set("test", SENTENCES, "fixture"))
    whitened = method.encode(SENTENCES)
    assert whitened.shape == (len(SENTENCES), 8)
    np.testing.assert_allclose(np.cov(whitened.T.astype(np.float64)), np.eye(8), atol=1e-3)


def test_flow_trains_once_then_loads(tiny_bert, tmp_path):
    fit_set = make_fit_set("test", SENTENCES, "fixture")
    ctx = context(tmp_path, tiny_bert, flow={"levels": 1, "depth": 1, "width": 8})
    first = build("flow", ctx)
    first.fit(fit_set)
    first.fit(fit_set)  # same fit set: nothing to do
    latents = first.encode(SENTENCES[:6])
    assert ctx.trained == 1 and latents.shape == (6, 32) and np.isfinite(latents).all()
    again = build("flow", ctx)
    again.fit(fit_set)
    assert ctx.trained == 1 and again.fit_info["loaded_from_cache"]
    np.testing.assert_array_equal(again.encode(SENTENCES[:6]), latents)
    assert again._flow is None  # the latents came from the cache: no flow was built (no torch)
    (memo,) = tmp_path.rglob("flow-latents/*/z.npy")
    memo.write_bytes(memo.read_bytes()[:-4] + b"\0\0\0\0")  # damaged: recomputed, never read
    third = build("flow", ctx)
    third.fit(fit_set)
    np.testing.assert_array_equal(third.encode(SENTENCES[:6]), latents)
    assert third._flow is not None


def test_sbert_encodes_through_its_own_modules(tiny_st, tmp_path):
    # through sentence-transformers' encode (its shared-pass pipeline: tests/test_sbert_pipeline.py)
    ctx = context(tmp_path, tiny_st, sbert={"pipeline": "sentence-transformers"})
    method = build("sbert", ctx)
    vectors = method.encode(SENTENCES[:4])
    assert vectors.shape == (4, 32) and ctx.forwarded == 4
    np.testing.assert_array_equal(method.encode(SENTENCES[:4]), vectors)  # from the cache now
    assert ctx.forwarded == 4


def test_simcse_checkpoint_reads_the_pooler(tiny_bert, tmp_path):
    ctx = context(tmp_path, tiny_bert, simcse={"model": str(tiny_bert), "pooler": "pooler"})
    method = build("simcse", ctx)
    assert method.spec.pooling == "pooler" and method.encode(SENTENCES[:3]).shape == (3, 32)


def test_simcse_train_fine_tunes_then_encodes(tiny_bert, tmp_path):
    ctx = context(tmp_path, tiny_bert, **{"simcse-train": {"batch_size": 16, "precision": "fp32"}})
    method = build("simcse-train", ctx)
    method.fit(make_fit_set("corpus", SENTENCES, "fixture"))
    assert ctx.trained == 1 and method.encode(SENTENCES[:3]).shape == (3, 32)


def test_cross_encoder_is_a_pair_scorer(tiny_bert, tmp_path):
    ctx = context(tmp_path, tiny_bert, **{"cross-encoder": {"model": "train", "epochs": 1.0, "precision": "fp32"}})
    method = build("cross-encoder", ctx)
    scores = method.score_pairs(TRAIN.s1[:5], TRAIN.s2[:5])
    assert isinstance(method, PairScoringMethod) and not isinstance(method, EmbeddingMethod)
    assert scores.shape == (5,) and ctx.trained == 1 and ctx.pairs_scored == 5


def test_dse_student_is_evaluated_with_the_pooling_it_trained_with(tiny_bert, tmp_path):
    import torch
    from transformers import AutoModel, AutoTokenizer

    from methods.training.pair_training import student_pool

    teacher = {"model": "train", "epochs": 1.0, "precision": "fp32"}
    ctx = context(tmp_path, tiny_bert, dse={"top_k": 2, "precision": "fp32"}, **{"cross-encoder": teacher})
    method = build("dse", ctx)
    method.fit(make_fit_set("test", SENTENCES, "fixture"))
    vectors = method.encode(SENTENCES[:6])
    assert vectors.shape == (6, 64) and ctx.trained == 2  # teacher and student
    folder = method.fit_info["checkpoint"]
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        inputs = tokenizer(SENTENCES[:6], padding=True, truncation=True, max_length=32, return_tensors="pt")
        trained_pooling = student_pool(model(**inputs, output_hidden_states=True).hidden_states,
                                       inputs["attention_mask"], "top4-concat", 2).numpy()
    np.testing.assert_allclose(vectors, trained_pooling, atol=2e-5)


def test_dse_head_objective_makes_a_pair_scorer(tiny_bert, tmp_path):
    teacher = {"model": "train", "epochs": 1.0, "precision": "fp32"}
    ctx = context(tmp_path, tiny_bert, dse={"top_k": 1, "objective": "head", "precision": "fp32"},
                  **{"cross-encoder": teacher})
    method = build("dse", ctx)
    assert isinstance(method, PairScoringMethod) and method.kind == "pair-scorer"
    method.fit(make_fit_set("test", SENTENCES, "fixture"))
    assert method.score_pairs(TRAIN.s1[:4], TRAIN.s2[:4]).shape == (4,)


def test_random_baseline_is_a_function_of_text_and_seed(tmp_path):
    ctx = context(tmp_path, "none")
    method = build("random", ctx)
    a, b = method.encode(["x", "y", "x"]), method.encode(["x"])
    np.testing.assert_array_equal(a[0], a[2])
    np.testing.assert_array_equal(a[0], b[0])
    assert a.shape == (3, 384)


def test_the_pooling_table_is_the_one_list_of_poolings():
    from harness.core.encoding.pooling import POOLINGS, View

    assert set(POOLINGS) == {"cls", "mean", "mean_nocls", "last", "mean_sentence", "weightedmean", "max",
                             "mean_sqrt_len"}
    assert str(View("pooler", 0)) == "pooler@0"
    with pytest.raises(ValueError, match="unknown pooling"):
        View("median", 1)


def test_target_pairs_keeps_repeats_and_flow_fits_on_pair_batches(tiny_bert, tmp_path):
    from harness.core.data.fitsets import build_fit_set
    from harness.core.data.splits import LoadedTask
    from harness.core.data.tasks import TASKS

    repeated = SplitData(TRAIN.s1 + TRAIN.s1[:3], TRAIN.s2 + TRAIN.s2[:3], TRAIN.gold + TRAIN.gold[:3], None, "x")
    task = LoadedTask(TASKS["stsb"], "fixture", {"train": repeated, "test": TRAIN})
    fit_set = build_fit_set("target-pairs", task)
    assert len(fit_set.sentences) == 2 * (len(repeated) + len(TRAIN)) and len(fit_set.pairs) == 83
    ctx = context(tmp_path, tiny_bert, flow={"levels": 1, "depth": 1, "width": 8, "batches": "pairs",
                                             "batch_size": 8})
    method = build("flow", ctx)
    method.fit(fit_set)
    assert method.fit_info["steps"] == 83 // 8  # pairs of both sides per batch, the remainder dropped
    assert method.fit_info["recipe"]["batches"].startswith("pairs")
    with pytest.raises(Exception, match="needs a fit set made of pairs"):
        build("flow", ctx).fit(make_fit_set("corpus:x", SENTENCES, "fixture"))


def test_simcse_train_selects_the_best_step_on_stsb_dev(tiny_bert, tmp_path):
    ctx = context(tmp_path, tiny_bert, **{"simcse-train": {"batch_size": 16, "precision": "fp32", "select_every": 1}})
    ctx.splits[("stsb", "dev")] = TRAIN
    method = build("simcse-train", ctx)
    method.fit(make_fit_set("corpus", SENTENCES, "fixture"))
    selection = method.fit_info["selection"]
    steps = method.fit_info["steps"]
    assert selection["data"] == "STS-B dev" and len(selection["evaluations"]) == steps
    best = max(selection["evaluations"], key=lambda e: e[1])
    assert selection["chosen_step"] == best[0] and selection["dev_score"] == best[1]
