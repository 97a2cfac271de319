"""Standard normalization (``sn``) and all-but-the-top (``abtt``), checked against numpy written
here from the definitions: per-dimension z-scores, and the principal directions of the fit set
found by an SVD of its centred vectors (the code under test uses ``eigh`` of the covariance)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from fakes import FakeContext
from fixtures import pairs

from harness.core.api import SpecRequest
from harness.core.data.fitsets import make_fit_set
from harness.core.errors import UserError
from harness.core.scoring import cosine_rows
from harness.runner.cli.commands import main as commands_main
from methods import get_method
from methods.calibrations import all_but_the_top, default_k, standard_normalization

RNG = np.random.default_rng(11)
SENTENCES = list(dict.fromkeys(s for a, b, _ in pairs(RNG, 40) for s in (a, b)))


def spread(n: int = 500, d: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Points whose principal directions are the columns of a random rotation Q, with standard
    deviations 10, 5, 3, 1, 0.5, 0.2 along them (largest first), around an offset mean."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    coords = rng.normal(size=(n, d)) * np.array([10, 5, 3, 1, 0.5, 0.2])[:d]
    return coords @ q.T + 7.0, q


def z_score(fit: np.ndarray, x: np.ndarray) -> np.ndarray:
    fit = np.asarray(fit, dtype=np.float64)
    return (x - fit.mean(axis=0)) / fit.std(axis=0)


# -- sn ---------------------------------------------------------------------------------------------
def test_sn_is_the_per_dimension_z_score_of_the_fit_set():
    fit = np.random.default_rng(1).normal(size=(300, 5)) * [1, 10, 0.1, 3, 50] + [0, 4, -2, 9, 1]
    other = np.random.default_rng(2).normal(size=(20, 5)) * 7
    mu, scale, kept = standard_normalization(fit)
    assert kept == 5
    np.testing.assert_allclose((fit - mu) * scale, z_score(fit, fit), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((other - mu) * scale, z_score(fit, other), rtol=1e-5, atol=1e-5)


def test_sn_drops_a_dimension_with_zero_variance_and_scores_stay_finite(caplog):
    fit = np.random.default_rng(3).normal(size=(50, 4))
    fit[:, 2] = 0.25  # constant in the fit set
    other = np.random.default_rng(4).normal(size=(10, 4))  # varies there in the scored vectors
    mu, scale, kept = standard_normalization(fit)
    y = (other - mu) * scale
    assert kept == 3 and "1 of 4 dimensions have zero variance" in caplog.text
    assert np.isfinite(y).all() and (y[:, 2] == 0).all()
    live = [0, 1, 3]
    np.testing.assert_allclose(y[:, live], z_score(fit[:, live], other[:, live]), rtol=1e-5, atol=1e-5)
    cos, zero = cosine_rows(y[:5], y[5:])
    assert np.isfinite(cos).all() and zero == 0


@pytest.mark.parametrize("fit", [standard_normalization, lambda x: all_but_the_top(x, 1)])
def test_identical_vectors_cannot_be_fitted(fit):
    with pytest.raises(UserError, match="all identical"):
        fit(np.ones((10, 4)))


# -- abtt -------------------------------------------------------------------------------------------
def test_abtt_removes_exactly_the_top_k_principal_directions():
    x, _ = spread()
    centred = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)  # rows: principal directions, largest first
    mu, u, rank = all_but_the_top(x, 2)
    y = (x - mu) - ((x - mu) @ u) @ u.T
    assert rank == 6 and u.shape == (6, 2)
    np.testing.assert_allclose(mu[0], x.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(y @ vt[:2].T, 0, atol=1e-3)  # the two largest: gone
    np.testing.assert_allclose(y @ vt[2:].T, centred @ vt[2:].T, atol=1e-3)  # the rest: untouched
    np.testing.assert_allclose(y, centred - centred @ vt[:2].T @ vt[:2], atol=1e-3)


def test_abtt_removes_the_largest_variance_directions_not_the_smallest():
    """A mutant taking the eigenvectors in eigh's ascending order would remove the smallest."""
    x, q = spread(seed=5)
    mu, u, _ = all_but_the_top(x, 1)
    y = (x - mu) - ((x - mu) @ u) @ u.T
    per_direction = (y @ q).std(axis=0)  # spread left along each true direction (sampled: not exactly 0)
    assert per_direction[0] < 0.2 and per_direction[1] > 4 and per_direction[-1] > 0.15


def test_abtt_with_fewer_directions_of_variance_than_k_removes_only_those(caplog):
    x = np.random.default_rng(6).normal(size=(3, 8))  # 3 points span 2 directions around their mean
    mu, u, rank = all_but_the_top(x, 5)
    assert rank == 2 and u.shape == (8, 2) and "removing 2 directions instead of k=5" in caplog.text
    other = np.random.default_rng(7).normal(size=(4, 8))
    y = (other - mu) - ((other - mu) @ u) @ u.T
    assert np.isfinite(y).all() and np.abs(y).min() > 0  # the other 6 directions are kept


def test_default_k_is_d_over_100():
    assert (default_k(768), default_k(1024), default_k(384), default_k(32)) == (8, 10, 4, 1)


# -- the methods, built directly (tests/fakes.py) ---------------------------------------------------
def context(tmp_path, backbone, **params) -> FakeContext:
    return FakeContext(tmp_path / "cache", SpecRequest(backbone=str(backbone), max_length=32, params=params))


def build(name, ctx):
    return get_method(name).build(ctx.request, ctx)


def test_sn_method_fits_on_its_fit_set_not_on_what_it_scores(tiny_bert, tmp_path):
    ctx = context(tmp_path, tiny_bert)
    fit_sentences, scored = SENTENCES[:40], SENTENCES[40:]
    base = build("first-last", ctx)
    method = build("sn", ctx)
    method.fit(make_fit_set("heldout", fit_sentences, "fixture"))
    got = method.encode(scored)
    np.testing.assert_allclose(got, z_score(base.encode(fit_sentences), base.encode(scored)), rtol=1e-4, atol=1e-4)
    assert not np.allclose(got, z_score(base.encode(scored), base.encode(scored)), atol=1e-2)
    assert method.fit_info["fit_set"]["name"] == "heldout" and method.fit_info["dims_kept"] == 32


def test_abtt_method_removes_the_fit_sets_top_direction_and_memoises_the_fit(tiny_bert, tmp_path, monkeypatch):
    ctx = context(tmp_path, tiny_bert)
    fit_set = make_fit_set("test", SENTENCES, "fixture")
    method = build("abtt", ctx)
    method.fit(fit_set)
    x = build("first-last", ctx).encode(SENTENCES).astype(np.float64)
    centred = x - x.mean(axis=0)
    top = np.linalg.svd(centred, full_matrices=False)[2][:1]
    expected = centred - centred @ top.T @ top
    np.testing.assert_allclose(method.encode(SENTENCES), expected, atol=1e-4)
    assert method.fit_info["k"] == 1 and method.fit_info["directions_removed"] == 1  # auto: 32 dims / 100 -> 1
    # A second method reads the fit from the cache, checked against its checksums...
    monkeypatch.setattr("methods.calibrations.all_but_the_top", lambda *a: pytest.fail("recomputed"))
    again = build("abtt", ctx)
    again.fit(fit_set)
    np.testing.assert_array_equal(again.encode(SENTENCES), method.encode(SENTENCES))
    # ...and a damaged one is discarded and fitted again, never read.
    monkeypatch.undo()
    (u_file,) = (tmp_path / "cache" / "abtt").rglob("u.npy")
    u_file.write_bytes(u_file.read_bytes()[:-4] + b"\0\0\0\0")
    third = build("abtt", ctx)
    third.fit(fit_set)
    np.testing.assert_allclose(third.encode(SENTENCES), expected, atol=1e-4)


def test_a_zero_variance_dimension_of_the_pooled_view_gives_finite_scores(tiny_bert, tmp_path):
    ctx = context(tmp_path, tiny_bert)
    for name in ("sn", "abtt"):
        method = build(name, ctx)
        real = method.pooled

        def pooled(sentences, real=real):
            x = real(sentences).copy()
            x[:, 3] = 1.5  # dead in every vector, fit set and scored split alike
            return x

        method.pooled = pooled
        method.fit(make_fit_set("test", SENTENCES, "fixture"))
        y = method.encode(SENTENCES)
        cos, zero = cosine_rows(y[:20], y[20:40])
        assert np.isfinite(y).all() and np.isfinite(cos).all() and zero == 0


# -- through the command line -----------------------------------------------------------------------
def senteval_args(senteval_root, model):
    return ["--source", "senteval", "--senteval-dir", str(senteval_root), "--backbone", str(model)]


def records(out) -> dict[str, dict]:
    return {r["method"]["label"]: r for r in (json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json")))}


def test_sn_and_abtt_run_through_the_cli_and_reach_the_leaderboard(bench, senteval_root, tiny_bert, tmp_path):
    code, _, err = bench("--methods", "sn", "abtt", "--set", "abtt.k=2", "--tasks", "stsb",
                         *senteval_args(senteval_root, tiny_bert))
    assert code == 0, err
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv").set_index("method")
    assert {"sn", "abtt[k=2]"} <= set(board.index)
    assert np.isfinite(board.loc[["sn", "abtt[k=2]"], "STS-B"]).all()
    by_label = records(tmp_path / "out")
    assert by_label["abtt[k=2]"]["fit"]["directions_removed"] == 2 and by_label["abtt[k=2]"]["fit"]["k"] == 2
    assert by_label["sn"]["method"]["spec"]["layers"] == [1, -1] and by_label["sn"]["method"]["spec"]["post"] == "sn"


def test_fit_set_heldout_fits_apart_from_the_scored_split(bench, senteval_root, tiny_bert, tmp_path):
    scores = {}
    for fit_set in ("heldout", "test"):
        out = tmp_path / fit_set
        code, _, err = bench("--methods", "sn", "--tasks", "stsb", "--fit-set", fit_set, "--output-dir", str(out),
                             *senteval_args(senteval_root, tiny_bert))
        assert code == 0, err
        (record,) = records(out).values()
        assert record["fit"]["fit_set"]["name"] == fit_set
        scores[fit_set] = record
    assert scores["heldout"]["protocol"]["fit_overlap_sentences"] == 0
    assert scores["heldout"]["protocol"]["transductive"] is False and scores["test"]["protocol"]["transductive"]
    assert scores["heldout"]["fit"]["fit_set"]["fingerprint"] != scores["test"]["fit"]["fit_set"]["fingerprint"]
    assert scores["heldout"]["scores"]["spearman"] != scores["test"]["scores"]["spearman"]


@pytest.mark.parametrize("name, option", [("sn", "view"), ("abtt", "k")])
def test_list_shows_the_options(name, option, capsys):
    assert commands_main(["list", name]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{name}: ") and f"  {option} " in out


@pytest.mark.parametrize("k", ["0", "-3", "2.5", "many"])
def test_a_bad_k_is_one_error_line_that_says_what_k_may_be(bench, senteval_root, tiny_bert, k):
    code, _, err = bench("--methods", "abtt", "--set", f"abtt.k={k}", "--tasks", "stsb",
                         *senteval_args(senteval_root, tiny_bert))
    assert code == 2 and err.strip().splitlines() == \
        [f"error: --set abtt.k={k}: k must be auto or a positive integer (directions to remove), not '{k}'"]


# -- the real MiniLM on the packaged STS-B ------------------------------------------------------------
@pytest.mark.real
def test_sn_and_abtt_on_the_embedded_default(bench, real_cache, tmp_path):
    from scipy.stats import spearmanr

    from harness.core.data.fitsets import build_fit_set
    from harness.core.data.tasks import get_task, load_task
    from harness.core.encoding.settings import EncodeSettings

    code, out, err = bench("--methods", "sn", "abtt", "--cache-dir", str(real_cache))
    assert code == 0, out + err
    by_label = records(tmp_path / "out")
    assert set(by_label) == {"sn", "abtt"}
    assert all(np.isfinite(r["scores"]["spearman"]) for r in by_label.values())
    assert by_label["abtt"]["fit"]["k"] == 4  # MiniLM: 384 dims / 100
    # sn again from the first-last vectors the run cached, by numpy: the target fit set's z-score
    spec = get_task("stsb")
    task = load_task(spec, "packaged", spec.splits)
    fit_set = build_fit_set("target", task)
    ctx = FakeContext(real_cache, SpecRequest(backbone="minilm"), encode=EncodeSettings(progress=False))
    first_last = build("first-last", ctx)
    fit = first_last.encode(list(fit_set.sentences)).astype(np.float64)
    a = z_score(fit, first_last.encode(list(task.eval.s1)))
    b = z_score(fit, first_last.encode(list(task.eval.s2)))
    cos = (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    expected = 100 * spearmanr(cos, task.eval.gold).statistic
    assert by_label["sn"]["scores"]["spearman"] == pytest.approx(expected, abs=0.01)
