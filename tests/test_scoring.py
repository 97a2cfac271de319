from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import pearsonr, rankdata, spearmanr

from harness.core.bootstrap import _weighted_spearman
from harness.core.scoring import _rank, cosine_rows, score_split, spearman

# The worked example of harness/scoring.py's docstring, computed by hand there.
COS = [0.1, 0.2, 0.3, 0.4, 0.9, 0.8, 0.7]
GOLD = [1, 2, 3, 4, 5, 6, 7]
SUBSETS = ["A", "A", "A", "A", "B", "B", "B"]


@pytest.mark.parametrize(("aggregation", "expected"), [("all", 600 / 7), ("mean", 0.0), ("wmean", 100 / 7)])
def test_aggregation_on_the_hand_computed_example(aggregation, expected):
    scores = score_split(np.array(COS), GOLD, SUBSETS, aggregation, bootstrap=0)
    assert scores.spearman == pytest.approx(expected, abs=1e-9)
    assert scores.subsets["A"]["spearman"] == pytest.approx(100.0)
    assert scores.subsets["B"]["spearman"] == pytest.approx(-100.0)
    assert scores.subsets["A"]["n"] == 4 and scores.undefined is None


def test_without_subsets_all_three_aggregations_coincide():
    rng = np.random.default_rng(0)
    cos, gold = rng.normal(size=40), rng.normal(size=40)
    values = {a: score_split(cos, gold, None, a, bootstrap=0).spearman for a in ("all", "mean", "wmean")}
    assert values["all"] == values["mean"] == values["wmean"]
    assert values["all"] == pytest.approx(100 * spearmanr(cos, gold).statistic)


def test_spearman_and_pearson_match_scipy_with_ties():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 6, 200).astype(float)
    y = x + rng.integers(0, 3, 200)
    assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic)
    scores = score_split(x, y, None, "all", bootstrap=0)
    assert scores.pearson == pytest.approx(100 * pearsonr(x, y).statistic)


def test_rank_matches_scipy_average_ranks():
    rng = np.random.default_rng(2)
    x = rng.integers(0, 4, size=(5, 17)).astype(float)
    np.testing.assert_allclose(_rank(x), rankdata(x, axis=-1))


def test_weighted_spearman_equals_spearman_of_the_explicit_resample():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 10, 30).astype(float)
    y = x + rng.normal(0, 3, 30).round()
    counts = rng.multinomial(30, np.full(30, 1 / 30), size=4)
    fast = _weighted_spearman(x, y, counts)
    for b in range(4):
        drawn = np.repeat(np.arange(30), counts[b])
        assert fast[b] == pytest.approx(100 * spearmanr(x[drawn], y[drawn]).statistic)


def test_bootstrap_interval_brackets_the_estimate_and_is_seeded():
    rng = np.random.default_rng(4)
    gold = rng.normal(size=300)
    cos = gold + rng.normal(scale=1.0, size=300)
    first = score_split(cos, gold, None, "all", bootstrap=500, seed=7)
    again = score_split(cos, gold, None, "all", bootstrap=500, seed=7)
    low, high = first.ci95
    assert low < first.spearman < high
    assert 2 < high - low < 25
    assert first.ci95 == again.ci95


def test_zero_vector_gives_cosine_zero_not_nan():
    a = np.array([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    b = np.array([[1.0, 0.0], [1.0, 0.0], [-1.0, -1.0]])
    cos, n_zero = cosine_rows(a, b)
    np.testing.assert_allclose(cos, [1.0, 0.0, -1.0])
    assert n_zero == 1


@pytest.mark.parametrize(("cos", "gold", "subsets", "aggregation", "reason"), [
    ([0.1, 0.2, 0.3], [2, 2, 2], None, "all", "every gold score is equal"),
    ([0.5, 0.5, 0.5], [1, 2, 3], None, "all", "every similarity is equal"),
    ([0.1, 0.2], [1, 2], None, "all", "fewer than 3 pairs (2)"),
    ([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [1, 2, 3, 4, 4, 4], list("AAABBB"), "mean", "subset B: every gold score is equal"),
    ([0.1, 0.2, 0.3, 0.4, 0.5], [1, 2, 3, 4, 5], list("AAABB"), "wmean", "subset B: fewer than 3 pairs (2)"),
])
def test_an_undefined_correlation_is_none_with_its_reason_never_nan(cos, gold, subsets, aggregation, reason):
    scores = score_split(np.array(cos, dtype=float), gold, subsets, aggregation, bootstrap=100)
    assert scores.spearman is None and scores.pearson is None and scores.ci95 is None
    assert reason in scores.undefined


def test_under_all_an_undefined_subset_is_reported_and_the_split_still_scored():
    cos, gold = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [1, 2, 3, 4, 4, 4]
    scores = score_split(np.array(cos), gold, list("AAABBB"), "all", bootstrap=0)
    assert scores.spearman == pytest.approx(100 * spearmanr(cos, gold)[0])
    assert scores.subsets["B"] == {"spearman": None, "pearson": None, "n": 3, "undefined": "every gold score is equal"}
