"""Oracles for every method family, checked by value against a computation written here.

Each expected number comes from transformers' ``BertModel`` run on one sentence at a time (so no
padding and no masking logic is shared with the code under test), the checkpoint's own weights read
with safetensors, and numpy: [CLS] is token 0 of the last layer, ``avg`` the mean over the sentence's
tokens, first-last the mean of the means of ``hidden_states[1]`` and ``[-1]``, the SimCSE pooler
``tanh(W·h_cls + b)``, the cross-encoder ``classifier(tanh(W·h_cls + b))`` over "[CLS] a [SEP] b
[SEP]", DSE's head ``W2·relu(W1·[u, v, u·v, |u−v|] + b1) + b2``, whitening the principal axes of the
fit set from numpy's SVD of the centred data (never ``eigh``, which the code uses). A plausible wrong
version of any of them (the k smallest whitening directions, [CLS] replaced by the mean, the pairs'
order swapped, a sigmoid dropped) fails here; docs/measurements/mutation.md lists the mutants the tests miss.
"""

from __future__ import annotations

import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch
from fakes import FakeContext
from fixtures import pairs

from harness.core.api import SpecRequest
from harness.core.data.fitsets import make_fit_set
from harness.core.data.splits import SplitData
from methods import get_method

RNG = np.random.default_rng(7)
PAIRS = pairs(RNG, 40)
SENTENCES = list(dict.fromkeys([a for a, _, _ in PAIRS] + [b for _, b, _ in PAIRS]))
TRAIN = SplitData(tuple(a for a, _, _ in PAIRS), tuple(b for _, b, _ in PAIRS), tuple(g for _, _, g in PAIRS),
                  None, origin="test fixture")
# Sentences of different token lengths in one call, so the native engine packs (pads) rows of mixed lengths.
PROBE = [SENTENCES[0], "a dog", SENTENCES[5] + " and a red car in the park", SENTENCES[9], "the quick brown fox jumps"]
IMPLS = ("native", "transformers")
ATOL = 1e-5  # fp32 forward passes of two implementations


def context(tmp_path, backbone, impl: str = "auto", **params) -> FakeContext:
    request = SpecRequest(backbone=str(backbone), max_length=32, params=params)
    ctx = FakeContext(tmp_path / "cache", request, splits={("stsb", "train"): TRAIN})
    ctx.encode = replace(ctx.encode, impl=impl)
    return ctx


def build(name: str, ctx: FakeContext):
    return get_method(name).build(ctx.request, ctx)


def read_weights(folder) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return {k: v.astype(np.float64) for k, v in load_file(str(folder / "model.safetensors")).items()}


def hidden_states(folder, texts, second=None) -> list[list[np.ndarray]]:
    """Per text (or pair), every hidden state (tokens, hidden) as float64: one text per forward pass."""
    from transformers import AutoTokenizer, BertModel

    tokenizer, model = AutoTokenizer.from_pretrained(folder), BertModel.from_pretrained(folder).eval()
    out = []
    with torch.no_grad():
        for i, text in enumerate(texts):
            args = (text,) if second is None else (text, second[i])
            inputs = tokenizer(*args, truncation=True, max_length=32, return_tensors="pt")
            out.append([h[0].double().numpy() for h in model(**inputs, output_hidden_states=True).hidden_states])
    return out


@pytest.fixture(scope="module")
def states(tiny_bert):
    return {text: layers for text, layers in zip(SENTENCES + PROBE, hidden_states(tiny_bert, SENTENCES + PROBE))}


def cls_of(layers):
    return layers[-1][0]


def avg_of(layers):
    return layers[-1].mean(axis=0)


def first_last_of(layers):
    return (layers[1].mean(axis=0) + layers[-1].mean(axis=0)) / 2


# -- pooling ------------------------------------------------------------------------------------

@pytest.mark.parametrize("impl", IMPLS)
def test_cls_avg_and_first_last_equal_the_reference_by_value(tiny_bert, tmp_path, states, impl):
    ctx = context(tmp_path, tiny_bert, impl)
    for name, of in (("cls", cls_of), ("avg", avg_of), ("first-last", first_last_of)):
        expected = np.stack([of(states[s]) for s in PROBE])
        np.testing.assert_allclose(build(name, ctx).encode(PROBE), expected, atol=ATOL, rtol=0, err_msg=name)
    # The three really differ on this model: a pooling swapped for another cannot pass by accident.
    cls, avg = np.stack([cls_of(states[s]) for s in PROBE]), np.stack([avg_of(states[s]) for s in PROBE])
    assert np.abs(cls - avg).min(axis=1).max() > 1e-3


def test_the_pooling_table_by_value_on_padded_batches():
    from harness.core.encoding.pooling import POOLINGS, View, pool_layers, pool_view

    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(4, 6, 3))
    lengths = [6, 2, 4, 1]
    mask = (np.arange(6)[None] < np.array(lengths)[:, None]).astype(np.int64)
    h, m = torch.from_numpy(hidden), torch.from_numpy(mask)
    expected = {"cls": hidden[:, 0],
                "mean": np.stack([hidden[i, :n].mean(0) for i, n in enumerate(lengths)]),
                # [CLS] excluded; a one-token row has nothing left: zeros (0 / clamp(0, min=1)).
                "mean_nocls": np.stack([hidden[i, 1:n].mean(0) if n > 1 else np.zeros(3)
                                        for i, n in enumerate(lengths)]),
                # the last real token of each row (right padding here; left padding in test_decoders)
                "last": np.stack([hidden[i, n - 1] for i, n in enumerate(lengths)]),
                # the masked mean, over whatever mask it is given (the sentence mask in a run)
                "mean_sentence": np.stack([hidden[i, :n].mean(0) for i, n in enumerate(lengths)])}
    for name, value in expected.items():
        np.testing.assert_allclose(POOLINGS[name](h, m).numpy(), value, atol=1e-12, err_msg=name)
    assert mask[:, 0].all() and torch.equal(m, torch.from_numpy(mask))  # mean_nocls leaves the caller's mask alone
    second = rng.normal(size=(4, 6, 3))
    layers = [torch.from_numpy(second), h]
    both = pool_layers(layers, m, "mean", [1, 0])
    np.testing.assert_allclose(both.numpy(), np.concatenate(
        [expected["mean"], np.stack([second[i, :n].mean(0) for i, n in enumerate(lengths)])], axis=1), atol=1e-12)
    np.testing.assert_allclose(pool_layers(layers, m, "cls", [-1]).numpy(), hidden[:, 0], atol=1e-12)
    masks = {"attention_mask": m}
    view = pool_view(layers, None, masks, View("mean", 1))
    assert view.dtype == np.float32
    np.testing.assert_allclose(view, expected["mean"], atol=1e-6)
    pooled = torch.from_numpy(rng.normal(size=(4, 3)))
    np.testing.assert_allclose(pool_view(layers, pooled, masks, View("pooler", 0)), pooled.numpy(), atol=1e-6)
    assert pool_view(layers, None, masks, View("pooler", 0)) is None
    # mean_sentence reads the sentence mask, not the attention mask: drop each row's first token
    sentence = m.clone()
    sentence[:, 0] = 0
    got = pool_view(layers, None, {**masks, "sentence_mask": sentence}, View("mean_sentence", 1))
    np.testing.assert_allclose(got, expected["mean_nocls"], atol=1e-6)


# -- whitening ----------------------------------------------------------------------------------

def principal_axes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows = principal axes of x's covariance, largest variance first, and those variances: from the
    SVD of the centred data (the code under test uses an eigendecomposition of the covariance)."""
    centred = x - x.mean(axis=0)
    _, singular, axes = np.linalg.svd(centred, full_matrices=False)
    return axes, singular ** 2 / (len(x) - 1)


def aligned(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """``actual`` with each column's sign flipped to agree with ``expected`` (eigenvectors' signs are free)."""
    return actual * np.sign((actual * expected).sum(axis=0))


def test_whitening_keeps_the_top_k_principal_axes_divided_by_the_root_of_their_variance():
    rng = np.random.default_rng(11)
    d, k = 8, 3
    rotation, _ = np.linalg.qr(rng.normal(size=(d, d)))
    scales = np.array([9.0, 6.0, 4.5, 3.0, 2.0, 1.5, 1.0, 0.6])
    x = rng.normal(size=(3000, d)) * scales @ rotation.T + 3.0
    from methods.whitening import whitening_transform

    mu, w, rank = whitening_transform(x, k=k)
    axes, variances = principal_axes(x)
    assert rank == d and w.shape == (d, k)
    assert np.all(np.diff(variances) < 0)  # the data's own ordering: distinct, largest first
    np.testing.assert_allclose(mu[0], x.mean(axis=0), rtol=1e-6)
    expected_w = axes[:k].T / np.sqrt(variances[:k])
    np.testing.assert_allclose(aligned(w, expected_w), expected_w, rtol=1e-4, atol=1e-6)
    # The data's variance along each kept direction is the top-k variances, largest first.
    directions = w / np.linalg.norm(w, axis=0)
    np.testing.assert_allclose(np.var((x - x.mean(0)) @ directions, axis=0, ddof=1), variances[:k], rtol=1e-4)
    # Whitened vectors = the projection on those axes over sqrt(variance), up to each column's sign.
    y = (x - mu) @ w
    expected_y = (x - x.mean(axis=0)) @ axes[:k].T / np.sqrt(variances[:k])
    np.testing.assert_allclose(aligned(y, expected_y), expected_y, atol=2e-4)


@pytest.mark.parametrize("k", [4, None])
def test_whitening_method_on_the_tiny_bert_equals_the_reference(tiny_bert, tmp_path, states, k):
    ctx = context(tmp_path, tiny_bert, whitening={"k": k})
    method = build("whitening", ctx)
    method.fit(make_fit_set("test", SENTENCES, "fixture"))
    x = np.stack([first_last_of(states[s]) for s in SENTENCES])  # the default view: first-last
    axes, variances = principal_axes(x)
    kept = int((variances > variances[0] * 1e-10).sum()) if k is None else k  # LayerNorm: one null direction
    assert kept == (31 if k is None else 4) and method.fit_info["dims_kept"] == kept
    reference = (np.stack([first_last_of(states[s]) for s in PROBE]) - x.mean(axis=0)) @ axes[:kept].T
    reference /= np.sqrt(variances[:kept])
    encoded = method.encode(PROBE)
    assert encoded.shape == (len(PROBE), kept)
    if k is not None:  # separated variances (0.204, 0.119, 0.102, 0.088 | 0.075): column by column
        np.testing.assert_allclose(aligned(encoded, reference), reference, atol=1e-3)
    # The Gram matrix is free of the columns' signs (and of rotations among near-equal variances).
    np.testing.assert_allclose(encoded @ encoded.T, reference @ reference.T, rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("view", ["cls", "avg"])
def test_whitening_of_another_view_whitens_that_view(tiny_bert, tmp_path, states, view):
    ctx = context(tmp_path, tiny_bert, whitening={"k": 3, "view": view})
    method = build("whitening", ctx)
    method.fit(make_fit_set("test", SENTENCES, "fixture"))
    of = {"cls": cls_of, "avg": avg_of}[view]
    x = np.stack([of(states[s]) for s in SENTENCES])
    axes, variances = principal_axes(x)
    reference = (np.stack([of(states[s]) for s in PROBE]) - x.mean(axis=0)) @ axes[:3].T / np.sqrt(variances[:3])
    np.testing.assert_allclose(method.encode(PROBE) @ method.encode(PROBE).T, reference @ reference.T, atol=1e-2)
    assert np.abs(reference @ reference.T).max() > 1  # not a vacuous comparison


def test_whitening_refits_on_another_fit_set(tiny_bert, tmp_path):
    ctx = context(tmp_path, tiny_bert, whitening={"k": 3})
    method = build("whitening", ctx)
    method.fit(make_fit_set("test", SENTENCES[:40], "fixture"))
    method.fit(make_fit_set("test", SENTENCES[40:], "fixture"))  # another set: fitted again, not kept
    fresh = build("whitening", context(tmp_path / "fresh", tiny_bert, whitening={"k": 3}))
    fresh.fit(make_fit_set("test", SENTENCES[40:], "fixture"))
    np.testing.assert_allclose(method.encode(PROBE), fresh.encode(PROBE), atol=1e-6)


def test_whitening_rank_is_relative_to_the_largest_variance(caplog):
    from methods.whitening import _optional_int, whitening_transform

    rng = np.random.default_rng(2)
    rotation, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    # Variances 1, 1e-3, 5e-12 and 0: 5e-12 is below 1e-10 of the largest (not of the second): rank 2.
    x = rng.normal(size=(400, 4)) * np.sqrt([1.0, 1e-3, 5e-12, 0.0]) @ rotation.T
    _, w, rank = whitening_transform(x)
    assert rank == 2 and w.shape == (4, 2) and "rank 2 of 4" in caplog.text
    caplog.clear()
    _, w, rank = whitening_transform(rng.normal(size=(50, 4)), k=2)
    assert rank == 4 and w.shape == (4, 2) and not caplog.text  # full rank, k kept: nothing to warn about
    two = np.repeat([[0.0, 1.0], [2.0, 5.0]], 3, axis=0)  # two different vectors are enough
    mu, w, rank = whitening_transform(two)
    assert rank == 1 and np.allclose(mu, [[1.0, 3.0]])
    assert [_optional_int(v) for v in ("", "None", "all", "256")] == [None, None, None, 256]
    # Different vectors whose differences square to 0 (underflow): no direction can be whitened.
    mu, w, rank = whitening_transform(np.array([[0.0, 1.0], [1e-170, 1.0]] * 2))
    assert rank == 0 and w.shape == (2, 0)


def test_whitening_rank_at_its_bounds():
    """Variances below 1 are whitened like any other; a variance of exactly 1e-10 of the largest
    counts as zero (the bound is exclusive)."""
    from methods.whitening import whitening_transform

    x = np.random.default_rng(5).normal(size=(300, 3)) * [1e-3, 2e-3, 5e-4]  # every variance < 1e-5
    mu, w, rank = whitening_transform(x)
    assert rank == 3 and w.shape == (3, 3)
    np.testing.assert_allclose(np.cov(((x - mu) @ w).T), np.eye(3), atol=1e-5)
    # (±1.5, 0) and (0, ±1.5e-5): mean 0, covariance diag(2·1.5²/3, 2·1.5e-5²/3) = diag(1.5, 1.5e-10),
    # and in binary64 the second is exactly 1e-10 times the first.
    assert 2 * 1.5e-5 ** 2 / 3 == 1.5 * 1e-10
    mu, w, rank = whitening_transform(np.array([[1.5, 0.0], [-1.5, 0.0], [0.0, 1.5e-5], [0.0, -1.5e-5]]))
    assert rank == 1 and w.shape == (2, 1)
    np.testing.assert_allclose(np.abs(w[:, 0]), [1 / np.sqrt(1.5), 0.0], atol=1e-7)


# -- SimCSE -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def simcse_checkpoints(tiny_bert, tmp_path_factory):
    root = tmp_path_factory.mktemp("oracle-simcse")
    for name in ("tiny-sup-simcse", "tiny-unsup-simcse"):
        shutil.copytree(tiny_bert, root / name)
    return root


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(("name", "pooler", "reads"), [
    ("tiny-sup-simcse", "auto", "pooler_output"), ("tiny-unsup-simcse", "auto", "cls"),
    ("tiny-sup-simcse", "cls_before_pooler", "cls"), ("tiny-unsup-simcse", "pooler", "pooler_output"),
])
def test_simcse_reads_the_pooler_output_or_the_cls_vector_by_value(tiny_bert, simcse_checkpoints, tmp_path, states,
                                                                   impl, name, pooler, reads):
    model = simcse_checkpoints / name
    ctx = context(tmp_path, tiny_bert, impl, simcse={"model": str(model), "pooler": pooler})
    weights = read_weights(model)
    cls = np.stack([cls_of(states[s]) for s in PROBE])
    pooled = np.tanh(cls @ weights["pooler.dense.weight"].T + weights["pooler.dense.bias"])
    expected = pooled if reads == "pooler_output" else cls
    assert np.abs(pooled - cls).max() > 0.1  # the two readings differ on this model
    np.testing.assert_allclose(build("simcse", ctx).encode(PROBE), expected, atol=ATOL, rtol=0)


# -- cross-encoder ------------------------------------------------------------------------------

def cross_encoder_logits(folder, s1, s2) -> np.ndarray:
    """classifier(tanh(W_p·h_cls + b_p)) over "[CLS] a [SEP] b [SEP]", from the checkpoint's weights."""
    weights = read_weights(folder)
    cls = np.stack([layers[-1][0] for layers in hidden_states(folder, s1, s2)])
    pooled = np.tanh(cls @ weights["bert.pooler.dense.weight"].T + weights["bert.pooler.dense.bias"])
    return pooled @ weights["classifier.weight"][0] + weights["classifier.bias"][0]


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


@pytest.fixture(scope="module")
def published_cross_encoder(tiny_bert, tmp_path_factory):
    """A cross-encoder checkpoint as sentence-transformers publishes one (no activation named: sigmoid),
    and the same weights declaring an identity activation."""
    from transformers import AutoTokenizer, BertForSequenceClassification

    root = tmp_path_factory.mktemp("oracle-ce")
    torch.manual_seed(5)
    model = BertForSequenceClassification.from_pretrained(tiny_bert, num_labels=1)
    with torch.no_grad():  # a classifier with weight, so the scores spread well beyond the tolerance
        model.classifier.weight.normal_(0, 2.0)
        model.classifier.bias.fill_(0.3)
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert)
    for name in ("sigmoid", "identity"):
        if name == "identity":
            model.config.sbert_ce_default_activation_function = "torch.nn.modules.linear.Identity"
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    return root


@pytest.mark.parametrize("activation", ["sigmoid", "identity"])
def test_cross_encoder_scores_equal_the_classifier_over_the_joint_pass(published_cross_encoder, tmp_path,
                                                                       activation):
    folder = published_cross_encoder / activation
    ctx = context(tmp_path, folder, **{"cross-encoder": {"model": str(folder)}})
    method = build("cross-encoder", ctx)
    s1, s2 = list(TRAIN.s1[:7]), list(TRAIN.s2[:7])
    logits = cross_encoder_logits(folder, s1, s2)
    expected = sigmoid(logits) if activation == "sigmoid" else logits
    assert method.activation() == activation
    np.testing.assert_allclose(method.score_pairs(s1, s2), expected, atol=ATOL, rtol=0)
    # Order matters (token types, positions): (b, a) is another input, scored as such.
    swapped = cross_encoder_logits(folder, s2, s1)
    assert np.abs(swapped - logits).max() > 1e-3
    np.testing.assert_allclose(method.score_pairs(s2, s1),
                               sigmoid(swapped) if activation == "sigmoid" else swapped, atol=ATOL, rtol=0)


def test_a_cross_encoder_trained_here_scores_with_its_raw_logit(tiny_bert, tmp_path):
    ctx = context(tmp_path, tiny_bert, **{"cross-encoder": {"model": "train", "epochs": 1.0, "precision": "fp32",
                                                            "lr": 1e-3}})
    method = build("cross-encoder", ctx)
    s1, s2 = list(TRAIN.s1[:6]), list(TRAIN.s2[:6])
    scores = method.score_pairs(s1, s2)
    assert method.activation() == "identity" and ctx.trained == 1
    np.testing.assert_allclose(scores, cross_encoder_logits(method.checkpoint(), s1, s2), atol=ATOL, rtol=0)


# -- DSE ----------------------------------------------------------------------------------------

def head_of(weights: dict[str, np.ndarray], u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """DSE's head: [u, v, u·v, |u−v|] → Linear → ReLU → Linear(1)."""
    features = np.concatenate([u, v, u * v, np.abs(u - v)], axis=1)
    hidden = np.maximum(features @ weights["net.0.weight"].T + weights["net.0.bias"], 0)
    return hidden @ weights["net.2.weight"][0] + weights["net.2.bias"][0]


def test_the_pair_head_is_linear_relu_linear_over_u_v_product_and_distance():
    from methods.training.pair_training import PairHead

    torch.manual_seed(0)
    head = PairHead(5, 7).double()
    with torch.no_grad():
        for p in head.parameters():
            p.normal_()
    rng = np.random.default_rng(1)
    u, v = rng.normal(size=(9, 5)), rng.normal(size=(9, 5))
    weights = {k: t.numpy() for k, t in head.state_dict().items()}
    assert weights["net.0.weight"].shape == (7, 20) and weights["net.2.weight"].shape == (1, 7)
    got = head(torch.from_numpy(u), torch.from_numpy(v)).detach().numpy()
    np.testing.assert_allclose(got, head_of(weights, u, v), atol=1e-10)
    assert not np.allclose(got, head(torch.from_numpy(v), torch.from_numpy(u)).detach().numpy())  # u, v ordered


def test_dse_student_vectors_and_head_scores_equal_the_reference(tiny_bert, tmp_path):
    from pathlib import Path

    from safetensors.numpy import load_file

    teacher = {"model": "train", "epochs": 1.0, "precision": "fp32"}
    ctx = context(tmp_path, tiny_bert, dse={"top_k": 2, "objective": "head", "precision": "fp32", "lr": 1e-3},
                  **{"cross-encoder": teacher})
    method = build("dse", ctx)
    method.fit(make_fit_set("test", SENTENCES, "fixture"))
    checkpoint = Path(method.fit_info["checkpoint"])
    student = hidden_states(checkpoint, PROBE)
    # The repo's pooling: the mean of each of the top 2 layers over the tokens after [CLS], concatenated.
    vectors = np.stack([np.concatenate([layers[-2][1:].mean(0), layers[-1][1:].mean(0)]) for layers in student])
    np.testing.assert_allclose(method.encode(PROBE), vectors, atol=ATOL, rtol=0)
    weights = {k: v.astype(np.float64) for k, v in load_file(str(checkpoint.parent / "head.safetensors")).items()}
    order = [3, 0, 4, 1, 2]
    expected = head_of(weights, vectors, vectors[order])
    assert np.ptp(expected) > 1e-3
    np.testing.assert_allclose(method.score_pairs(PROBE, [PROBE[i] for i in order]), expected, atol=1e-4, rtol=0)


# -- flow ---------------------------------------------------------------------------------------

def test_flow_latents_invert_to_the_first_last_reference(tiny_bert, tmp_path, states):
    """The method's z, pulled back through the flow's inverse, is the reference first-last vector: the
    flow transformed the right view with the weights it trained."""
    from safetensors.torch import load

    from methods.training.flow_fit import FlowConfig

    ctx = context(tmp_path, tiny_bert, flow={"levels": 2, "depth": 1, "width": 8, "epochs": 2.0})
    method = build("flow", ctx)
    method.fit(make_fit_set("test", SENTENCES, "fixture"))
    z = method.encode(PROBE)
    glow = FlowConfig(levels=2, depth=1, width=8).build(32, 1234).double()
    glow.load_state_dict(load(method._weights))
    with torch.no_grad():
        back = glow.eval().inverse(torch.from_numpy(z.astype(np.float64))).numpy()
    expected = np.stack([first_last_of(states[s]) for s in PROBE])
    assert np.abs(z - expected).max() > 0.1  # the flow moved the vectors
    np.testing.assert_allclose(back, expected, atol=1e-4)


def test_bits_per_dim_is_the_mean_nll_from_a_brute_force_jacobian():
    """−mean(log N(z; 0, I) + log|det ∂z/∂x|) / (D · ln 2), each term computed here: the prior with
    numpy, the log-determinant from autograd's full Jacobian of x → z."""
    from methods.training.glow import Glow

    torch.manual_seed(3)
    x = torch.randn(12, 6, dtype=torch.float64) * 2 + 0.5
    glow = Glow(6, levels=2, depth=2, width=8, coupling="affine", mixing="conv1x1").double()
    glow(x)  # data-dependent init
    with torch.no_grad():
        for p in glow.parameters():
            p.add_(0.1 * torch.randn_like(p))
    nll = []
    for row in x:
        z = glow(row[None])[0][0].detach().numpy()
        jacobian = torch.autograd.functional.jacobian(lambda v: glow(v[None])[0][0], row).numpy()
        log_prior = -0.5 * (z ** 2).sum() - 0.5 * 6 * np.log(2 * np.pi)
        nll.append(-(log_prior + np.linalg.slogdet(jacobian)[1]))
    expected = np.mean(nll) / (6 * np.log(2))
    assert float(glow.bits_per_dim(x)) == pytest.approx(expected, rel=1e-9)
