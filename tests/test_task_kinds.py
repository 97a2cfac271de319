"""A task kind is one registration (harness.core.kinds): a toy kind registered here, from a test
module, runs end to end through the tables, records, verification on read, history, page and MTEB
files with no edit outside its registration; a metric registered after records were written is
computed from their evidence when they are read."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import kendalltau

from harness.core.data.splits import TaskSpec
from harness.core.data.tasks import TASKS, declare_task
from harness.core.kinds import KINDS, Evidence, Metric, TaskKind, kind_of
from harness.core.kinds.pairclass import LABELLED


def _rows(ev: Evidence, weights: np.ndarray | None) -> list[np.ndarray]:
    """The pairs of each resample written out (row b of the draw counts: pair i drawn w[b, i] times)."""
    index = np.arange(len(ev.gold))
    return [index] if weights is None else [np.repeat(index, w) for w in np.asarray(weights, dtype=int)]


def kendall(ev: Evidence, weights: np.ndarray | None) -> np.ndarray:
    return np.array([100 * kendalltau(ev.similarity[i], ev.gold[i]).statistic for i in _rows(ev, weights)])


class RankedPairs(TaskKind):
    """Graded pairs ranked by Kendall's τ: the whole registration."""

    name = "ranked"
    title = "ranked pairs"
    summary = "graded pairs, ranked by Kendall's tau"
    main_default = "kendall"


@pytest.fixture
def ranked_task():
    kind = KINDS.register("ranked", RankedPairs([Metric("kendall", "Kendall τ", kendall)]))
    spec = declare_task(TaskSpec(
        name="stsb-tau", title="STS-B τ", description="STS-B ranked by Kendall's tau", kind="ranked",
        main_score="kendall", where={"senteval": {"folder": "STS/STSBenchmark", "layout": "stsb"}},
    ))
    yield kind, spec
    TASKS.unregister("stsb-tau")
    KINDS.unregister("ranked")


@pytest.mark.heavy
def test_a_kind_registered_from_a_test_runs_end_to_end(ranked_task, bench, tmp_path, senteval_root):
    args = ("--methods", "random", "--tasks", "stsb-tau", "--source", "senteval", "--senteval-dir", str(senteval_root),
            "--bootstrap", "60")
    code, out, err = bench(*args)
    assert code == 0, err
    out_dir = tmp_path / "out"
    [path] = (out_dir / "runs").glob("*.json")
    record = json.loads(path.read_text())
    assert record["task"]["kind"] == "ranked" and record["scores"]["main_score"] == "kendall"
    similarity, gold = np.asarray(record["pairs"]["similarity"]), np.asarray(record["pairs"]["gold"])
    tau = 100 * kendalltau(similarity, gold).statistic  # scipy on the record's own pairs
    assert record["scores"]["metrics"]["kendall"]["value"] == pytest.approx(tau, abs=1e-9)
    low, high = record["scores"]["metrics"]["kendall"]["ci95"]
    assert low <= tau <= high
    # tables, console and page name the kind's score; the MTEB file holds it as a fraction
    assert "Kendall τ" in out + err
    board = (out_dir / "leaderboard.md").read_text()
    assert "score=kendall (ranked pairs)" in board and "STS-B τ" in board
    assert "kendall" in (out_dir / "scores.csv").read_text().splitlines()[0]
    assert "STS-B τ" in (out_dir / "index.html").read_text()
    [mteb] = (out_dir / "mteb").rglob("stsb-tau.json")
    entry = json.loads(mteb.read_text())["scores"]["test"][0]
    assert entry["cosine_kendall"] == pytest.approx(tau / 100, abs=1e-6)
    assert entry["main_score"] == pytest.approx(tau / 100, abs=1e-6)
    # verified on read: the record and its history line are shown; a forged value is not
    from harness.runner.history.log import read_history
    from harness.runner.records.schema import problems, seal

    assert problems(record) is None
    forged = seal({**record, "scores": {**record["scores"], "metrics": {"kendall": {"value": 99.0, "ci95": None}}}})
    assert "kendall" in (problems(forged) or "")
    [line] = read_history(out_dir)
    assert line["metric"] == "kendall" and line["score"] == pytest.approx(tau, abs=1e-9)


def r_precision(ev: Evidence, weights: np.ndarray | None) -> np.ndarray:
    """The share of positives among the R most similar pairs, R the number of positives."""
    out = []
    for index in _rows(ev, weights):
        positive = ev.gold[index] == ev.extra["positive"]
        top = np.argsort(-ev.similarity[index], kind="stable")[: int(positive.sum())]
        out.append(100 * positive[top].mean() if positive.any() else np.nan)
    return np.asarray(out)


@pytest.fixture
def r_precision_registered():
    yield LABELLED.add_metric(Metric("r_precision", "R-precision", r_precision))
    del LABELLED.metrics["r_precision"]


@pytest.mark.heavy
def test_a_metric_registered_later_is_computed_from_earlier_records(bench, tmp_path, senteval_root, request):
    from test_pair_metrics import _labelled_file

    path, _ = _labelled_file(tmp_path, senteval_root)
    code, _, err = bench("--methods", "random", "--tasks", f"file:{path}", "--bootstrap", "50")
    assert code == 0, err
    [written] = (tmp_path / "out" / "runs").glob("*.json")
    assert "r_precision" not in json.loads(written.read_text())["scores"]["metrics"]
    request.getfixturevalue("r_precision_registered")
    from harness.runner.records.store import load_results

    [record] = load_results(tmp_path / "out" / "runs")  # read, verified, completed
    similarity, gold = np.asarray(record["pairs"]["similarity"]), np.asarray(record["pairs"]["gold"])
    positives = int((gold == 1).sum())
    expected = 100 * (gold[np.argsort(-similarity)][:positives] == 1).mean()
    entry = record["scores"]["metrics"]["r_precision"]
    assert entry["value"] == pytest.approx(expected)
    assert entry["ci95"][0] <= entry["value"] <= entry["ci95"][1]
    assert kind_of(record) is LABELLED and set(LABELLED.metrics) <= set(record["scores"]["metrics"])
    # the metric is a column of scores.csv and a row of pair_metrics.csv once reports are rebuilt
    code, _, err = bench("--methods", "random", "--tasks", f"file:{path}", "--bootstrap", "50")
    assert code == 0, err
    assert "r_precision" in (tmp_path / "out" / "pair_metrics.csv").read_text()


def test_a_kind_refuses_a_taken_metric_and_an_unknown_kind_is_one_line():
    from harness.core.errors import UserError

    with pytest.raises(UserError, match="'ap' of kind 'pairclass'"):
        LABELLED.add_metric(Metric("ap", "AP again", r_precision))
    with pytest.raises(UserError, match="unknown task kind 'nli'"):
        KINDS["nli"]
    assert kind_of({"task": {"name": "stsb"}}).name == "sts"  # records older than kinds: graded pairs
