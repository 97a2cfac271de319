"""Comparisons a researcher can trust: the protocol matrix (every source × aggregation × task,
bootstrap on, through the CLI), leakage marked, paired significance, regression by significance."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from harness.core.data.tasks import TASKS
from harness.core.significance import paired_bootstrap, scored, williams, williams_t

AGGREGATIONS = ("all", "mean", "wmean")
STS_TASKS = [name for name, spec in TASKS.items() if spec.kind == "sts"]  # pair tasks: test_pair_sources.py
SOURCE_TASKS = {"packaged": ["stsb"], "senteval": STS_TASKS, "hub": STS_TASKS}


def source_args(source, senteval_root, hub_root):
    return {"packaged": [], "senteval": ["--senteval-dir", str(senteval_root)],
            "hub": ["--hub-root", str(hub_root)]}[source]


def records(out):
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((out / "runs").glob("*.json"))]


# Every source's reader runs in test_sources.py; the matrix on the one-task source stays in `make test-fast`.
SOURCES = [s if s == "packaged" else pytest.param(s, marks=pytest.mark.heavy) for s in SOURCE_TASKS]


@pytest.mark.parametrize("source", SOURCES)
def test_the_protocol_matrix_runs_and_single_subset_tasks_agree(bench, source, senteval_root, hub_root, tiny_bert,
                                                                tmp_path):
    """Every aggregation on every task of every source, bootstrap on (the default 1000 rounds)."""
    methods = ["random"] if source == "packaged" else ["random", "avg"]
    scores = {}
    for aggregation in AGGREGATIONS:
        out = tmp_path / aggregation
        code, _, err = bench("--methods", *methods, "--tasks", *SOURCE_TASKS[source], "--source", source,
                             *source_args(source, senteval_root, hub_root), "--backbone", str(tiny_bert),
                             "--aggregation", aggregation, "--output-dir", str(out))
        assert code == 0, err
        # Only SentEval keeps STS12-16's subsets; a run whose tasks all have one subset (STS-B, SICK-R,
        # MTEB's copies) cannot differ from all and is filed as all (plan.single_subset_aggregation).
        filed = aggregation if source == "senteval" else "all"
        for rec in records(out):
            assert rec["protocol"]["aggregation"] == filed
            low, high = rec["scores"]["spearman_ci95"]
            assert math.isfinite(low) and low <= high
            scores[(aggregation, rec["method"]["name"], rec["task"]["name"])] = rec
    assert {task for _, _, task in scores} == set(SOURCE_TASKS[source])
    for (aggregation, method, task), rec in scores.items():
        subsets = rec["task"]["subsets"]
        if len(subsets) <= 1:  # one subset (or none): mean and wmean are the "all" number, CI included
            reference = scores[("all", method, task)]["scores"]
            assert rec["scores"]["spearman"] == pytest.approx(reference["spearman"], abs=1e-9)
            assert rec["scores"]["spearman_ci95"] == pytest.approx(reference["spearman_ci95"], abs=1e-9)
        elif aggregation != "all":
            values = [s["spearman"] for s in rec["subset_scores"].values()]
            sizes = [s["n"] for s in rec["subset_scores"].values()]
            expected = np.average(values, weights=sizes if aggregation == "wmean" else None)
            assert rec["scores"]["spearman"] == pytest.approx(expected, abs=1e-9)


def test_transductive_fit_sets_are_recorded_and_marked(bench, senteval_root, tiny_bert, tmp_path):
    code, _, err = bench("--methods", "whitening", "avg", "--tasks", "stsb", "--source", "senteval",
                           "--senteval-dir", str(senteval_root), "--backbone", str(tiny_bert))
    assert code == 0, err
    by_method = {r["method"]["name"]: r for r in records(tmp_path / "out")}
    assert by_method["whitening"]["protocol"]["transductive"] is True
    assert by_method["whitening"]["protocol"]["fit_overlap_sentences"] > 0
    assert by_method["avg"]["protocol"]["transductive"] is False
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv", keep_default_na=False).set_index("method")
    assert board.loc["whitening", "marks"] == "†" and board.loc["avg", "marks"] == ""
    assert "† fitted or trained on sentences of the scored split" in (tmp_path / "out" / "leaderboard.md").read_text()


def test_trained_methods_never_see_scored_sentences_by_default(bench, senteval_root, tiny_bert, tmp_path):
    code, _, err = bench("--methods", "simcse-train", "--tasks", "stsb", "--source", "senteval", "--senteval-dir",
                         str(senteval_root), "--backbone", str(tiny_bert), "--simcse-train-precision", "fp32")
    assert code == 0, err
    (rec,) = records(tmp_path / "out")
    assert rec["fit"]["fit_set"]["name"] == "heldout" and rec["protocol"]["fit_overlap_sentences"] == 0
    assert rec["protocol"]["transductive"] is False
    assert rec["fit"]["recipe"]["optimizer"] == "AdamW" and rec["fit"]["recipe"]["clip_grad_norm"] == 1.0
    # A task with no split but the scored one has nothing held out: one line saying how to fix it.
    code, _, err = bench("--methods", "simcse-train", "--tasks", "sts12", "--source", "senteval", "--senteval-dir",
                         str(senteval_root), "--backbone", str(tiny_bert))
    assert code == 2 and err.startswith("error: fit set heldout") and "--simcse-train-corpus" in err


def test_training_on_stsb_warns_once_and_marks_sts12_to_16(bench, senteval_root, tiny_bert, tmp_path):
    code, _, err = bench("--methods", "cross-encoder", "--tasks", "sts12", "sts13", "stsb", "--source", "senteval",
                         "--senteval-dir", str(senteval_root), "--backbone", str(tiny_bert),
                         "--cross-encoder-model", "train", "--cross-encoder-epochs", "1",
                         "--cross-encoder-precision", "fp32")
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "assembled from the STS 2012-2017" in line]
    assert len(warnings) == 1 and "cross-encoder on sts12 (0/" in warnings[0] and "sts13" in warnings[0]
    by_task = {r["task"]["name"]: r for r in records(tmp_path / "out")}
    assert by_task["sts12"]["protocol"]["labelled_training"]["overlap_sentences"] == 0
    assert by_task["stsb"]["protocol"]["labelled_training"] is None
    assert by_task["sts12"]["activation"] == "identity"
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv", keep_default_na=False)
    assert board.loc[0, "marks"] == "‡"


def test_significance_csv_is_rebuilt_from_the_result_files(bench, senteval_root, tiny_bert, tmp_path):
    code, _, err = bench("--methods", "avg", "first-last", "random", "--tasks", "stsb", "sts12", "--source",
                         "senteval", "--senteval-dir", str(senteval_root), "--backbone", str(tiny_bert))
    assert code == 0, err
    table = pd.read_csv(tmp_path / "out" / "significance.csv")
    assert list(table.columns[:8]) == ["task", "method_a", "method_b", "delta", "ci_low", "ci_high", "p_value",
                                       "test"]
    tasks = table[table["task"] != "Avg."]
    assert len(tasks) == 2 * 3 * 2  # 3 pairs of methods × 2 tasks × 2 tests
    assert set(tasks["test"]) == {"paired bootstrap (B=1000)", "Williams t (Spearman, all pairs)"}
    # and each pair of rows on their average over the 2 tasks (issue 41)
    averaged = table[table["task"] == "Avg."]["test"]
    assert list(averaged) == ["paired bootstrap (B=1000) of the average over 2 task(s)"] * 3
    boot = table[table["test"].str.startswith("paired")]
    assert (boot["delta"] >= 0).all() and (boot["ci_low"] <= boot["ci_high"]).all()
    assert table["p_value"].between(0, 1).all()
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv", keep_default_na=False)
    assert board["not_below_best"].str.contains("STS-B").any()
    assert "★" in (tmp_path / "out" / "leaderboard.md").read_text()


def test_paired_bootstrap_and_williams_on_known_cases():
    rng = np.random.default_rng(0)
    gold = rng.normal(size=300)
    good = gold + rng.normal(scale=0.5, size=300)
    bad = gold + rng.normal(scale=3.0, size=300)
    a, b, same = scored(good, gold, None, "all"), scored(bad, gold, None, "all"), scored(good.copy(), gold, None,
                                                                                          "all")
    clear = paired_bootstrap(a, b)
    assert clear.delta > 0 and clear.ci_low > 0 and clear.p_value < 0.01
    assert williams(a, b, gold).p_value < 0.01
    tie = paired_bootstrap(a, same)
    assert tie.delta == 0 and tie.p_value == 1 and williams(a, same, gold).p_value == 1
    t, p = williams_t(0.8, 0.7, 0.9, 100)  # the module docstring's worked example
    assert t == pytest.approx(3.674, abs=1e-3) and p == pytest.approx(0.00039, abs=2e-5)
    assert williams_t(0.7, 0.8, 0.9, 100)[1] == pytest.approx(p)  # two-sided: order does not matter


def test_student_t_tail_matches_scipy_without_importing_it():
    from scipy.stats import t as student_t

    from harness.core.significance import student_t_sf

    for df in (1, 3, 10, 97, 1376):
        for value in (-2.0, 0.0, 0.3, 1.0, 3.674, 12.0, 40.0):
            expected = student_t.sf(value, df)
            assert student_t_sf(value, df) == pytest.approx(expected, rel=1e-9, abs=1e-300)
    assert student_t_sf(float("inf"), 5) == 0.0
