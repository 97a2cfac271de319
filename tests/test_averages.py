"""The average over tasks as an estimate: Avg.'s 95 % interval, the paired test of two rows on
their average, ★ on Avg., and each row's rank with the interval of its rank over the same
resamples — against an independent computation (numpy's generator drawn as the whole matrix,
scipy's Spearman), on records built here."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import spearmanr

from harness.core.data.splits import fingerprint_pairs
from harness.runner.tables.comparisons import ALPHA, averages, compare
from harness.runner.tables.frames import AVG
from harness.runner.tables.leaderboard import rank_text

GROUP = {"aggregation": "all", "source": "packaged", "dtype": "fp32", "max_length": 128,
         "first_last_layers": [1, -1]}


def record(method: str, task: str, similarity: np.ndarray, gold: np.ndarray) -> dict:
    """A record as the tables read it (the fields frames/comparisons use), scored by scipy."""
    fingerprint = fingerprint_pairs([f"{task}{i}" for i in range(len(gold))], ["x"] * len(gold), gold, None)
    return {
        "created": "2026-12-03T00:00:00",
        "method": {"name": method, "label": method, "kind": "embedding", "spec": {"backbone": "m"}},
        "fit": None,
        "protocol": {**GROUP, "prompt": None},
        "task": {"name": task, "title": task, "fingerprint": fingerprint, "n_pairs": len(gold), "source": ""},
        "scores": {"spearman": 100 * spearmanr(similarity, gold).statistic, "pearson": None,
                   "spearman_ci95": None, "undefined": None},
        "pairs": {"similarity": [float(x) for x in similarity], "gold": [float(g) for g in gold],
                  "subset": None},
    }


def independent_resamples(similarity: np.ndarray, gold: np.ndarray, rounds: int, seed: int) -> np.ndarray:
    """Spearman ×100 of each resample, the draws as one matrix from the seeded generator (the
    bootstrap module draws it in chunks of the same stream), scored by scipy."""
    n = len(gold)
    draws = np.random.default_rng(seed).integers(0, n, size=(rounds, n))
    return np.array([100 * spearmanr(similarity[d], gold[d]).statistic for d in draws])


def tasks_of(rng: np.random.Generator, shifts: dict[str, list[float]], n: int = 120) -> dict:
    """Records of rows (keys of ``shifts``) on len(shifts[row]) tasks: row r's similarity on task t
    is gold + noise, the noise shrunk by shifts[r][t] (a larger shift, a better row)."""
    records = []
    tasks = len(next(iter(shifts.values())))
    for t in range(tasks):
        gold = rng.integers(0, 26, n) / 5.0
        noise = rng.normal(0, 1.0, n)
        for method, shift in shifts.items():
            own = rng.normal(0, 0.35, n)
            records.append(record(method, f"T{t}", gold + (1.2 - shift[t]) * noise + own, gold))
    return {"records": records, "tasks": [f"T{t}" for t in range(tasks)]}


def test_avg_interval_and_the_paired_test_on_the_average_equal_an_independent_computation():
    rng = np.random.default_rng(11)
    case = tasks_of(rng, {"a": [0.3, 0.1, 0.2], "b": [0.0, 0.0, 0.0], "c": [-0.4, 0.2, -0.1]})
    rounds, seed = 300, 5
    rows, marks, summary = compare(case["records"], rounds, seed)
    per = {}
    for rec in case["records"]:
        sim, gold = np.asarray(rec["pairs"]["similarity"]), np.asarray(rec["pairs"]["gold"])
        per.setdefault(rec["method"]["label"], []).append(
            (rec["scores"]["spearman"], independent_resamples(sim, gold, rounds, seed)))
    mean = {m: (np.mean([p for p, _ in v]), np.mean([r for _, r in v], axis=0)) for m, v in per.items()}
    group = next(iter(summary))[0]
    for method, (point, resamples) in mean.items():
        entry = summary[(group, (method, "m", "embedding", ""))]
        low, high = np.percentile(resamples, [2.5, 97.5])
        assert entry["avg"] == pytest.approx(point, abs=1e-9)
        assert entry["avg_ci_low"] == pytest.approx(min(low, point), abs=1e-6)
        assert entry["avg_ci_high"] == pytest.approx(max(high, point), abs=1e-6)
        ranks = 1 + (np.array([r for _, r in mean.values()]) > resamples).sum(axis=0)
        assert entry["rank_low"] == min(int(np.percentile(ranks, 2.5, method="lower")), entry["rank"])
        assert entry["rank_high"] == max(int(np.percentile(ranks, 97.5, method="higher")), entry["rank"])
    tests = {(r["method_a"], r["method_b"]): r for r in rows if r["task"] == AVG}
    assert len(tests) == 3
    for (a, b), row in tests.items():
        diffs = mean[a][1] - mean[b][1]
        tail = min(int((diffs <= 0).sum()), int((diffs >= 0).sum()))
        assert row["delta"] == pytest.approx(mean[a][0] - mean[b][0], abs=1e-9)
        assert row["p_value"] == pytest.approx(min(1.0, 2 * (tail + 1) / (len(diffs) + 1)))
        assert [row["ci_low"], row["ci_high"]] == pytest.approx(list(np.percentile(diffs, [2.5, 97.5])), abs=1e-6)
    best = max(mean, key=lambda m: mean[m][0])
    starred = {key[1][0] for key in marks if key[2] == AVG}
    expected = {m for m in mean if m == best or tests.get((best, m), {"p_value": 1})["p_value"] >= ALPHA}
    assert starred == expected


def _p(rows, a, b, task):
    return next(r["p_value"] for r in rows if r["task"] == task and {r["method_a"], r["method_b"]} == {a, b}
                and r["test"].startswith("paired bootstrap"))


def test_rows_tied_on_every_task_can_differ_on_the_average_and_the_reverse():
    # a is a little better than b on each of 8 tasks: no single task tells them apart, the average does
    rng = np.random.default_rng(6)
    small = tasks_of(rng, {"a": [0.15] * 8, "b": [0.0] * 8}, n=80)
    rows, marks, _ = compare(small["records"], 400, 2)
    assert all(_p(rows, "a", "b", t) >= ALPHA for t in small["tasks"])
    assert _p(rows, "a", "b", AVG) < ALPHA
    assert not any(key[1][0] == "b" and key[2] == AVG for key in marks)
    # the reverse: a far better on one task, far worse on another: each task tells them apart, the
    # average does not
    rng = np.random.default_rng(4)
    mixed = tasks_of(rng, {"a": [0.9, -0.9], "b": [0.0, 0.0]}, n=200)
    rows, marks, _ = compare(mixed["records"], 400, 2)
    assert all(_p(rows, "a", "b", t) < ALPHA for t in mixed["tasks"])
    assert _p(rows, "a", "b", AVG) >= ALPHA
    assert {key[1][0] for key in marks if key[2] == AVG} == {"a", "b"}


def test_the_rank_interval_of_the_docstring():
    class S:  # a task's Scored: its score and resamples
        def __init__(self, value, resamples):
            self.spearman, self.resamples = value, np.array(resamples, dtype=float)

    rows = {"A": {"T1": S(80, [79, 81, 80, 78]), "T2": S(70, [71, 69, 70, 72])},
            "B": {"T1": S(70, [70, 72, 69, 70]), "T2": S(79, [80, 78, 81, 79])}}
    out = averages(rows, ["T1", "T2"])
    assert (out["A"]["rank"], out["A"]["rank_low"], out["A"]["rank_high"]) == (1, 1, 1)
    assert (out["B"]["rank"], out["B"]["rank_low"], out["B"]["rank_high"]) == (2, 1, 2)
    assert rank_text(out["A"]) == "1" and rank_text(out["B"]) == "2 (1–2)"
    assert out["B"]["avg"] == 74.5 and not math.isnan(out["B"]["avg_ci_low"])
