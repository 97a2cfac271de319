"""A shared output folder that someone else can write (issue 30): what the tables and the gate show
must follow from evidence, not from what a file says about itself.

* a record edited and sealed again with the project's own checksum is recomputed from the per-pair
  similarities and gold it carries, and skipped with one warning when they do not give its scores;
* a score outside its own 95 % interval is skipped the same way (it used to crash the plot);
* one column is one dataset: records on a task's older data are left out of every table, and the
  gate refuses a baseline made on other data;
* the gate takes the tool's own leaderboard.csv of any run (file tasks too) and refuses a
  non-finite baseline score.

Every expected score is computed here with scipy from the pairs the test wrote or read back.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fixtures import pairs
from scipy import stats
from test_faults import one_error_line

from harness.runner.records.schema import seal


def write_tsv(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{g}\n" for a, b, g in rows),
                    encoding="utf-8")
    return path


def records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def spearman100(x, y) -> float:
    """The independent computation: scipy's Spearman ×100 (one correlation over every pair)."""
    return 100 * float(stats.spearmanr(x, y).statistic)


def tsv_gold(path: Path) -> list[float]:
    return [float(line.split("\t")[2]) for line in path.read_text(encoding="utf-8").splitlines()[1:]]


@pytest.fixture
def senteval_args(senteval_root, tiny_bert) -> list[str]:
    return ["--tasks", "stsb", "--source", "senteval", "--senteval-dir", str(senteval_root), "--backbone",
            str(tiny_bert)]


def reseal(path: Path, change) -> dict:
    """What an attacker with write access does: edit the JSON, seal it with the project's own code."""
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(seal(record), indent=1))
    return record


# -- row 1: an edited record, re-sealed ---------------------------------------------------------

def test_an_edited_record_resealed_is_recomputed_from_its_pairs_and_never_shown(bench, senteval_args, tmp_path,
                                                                               caplog):
    assert bench("--methods", "avg", "random", *senteval_args, "--no-plots")[0] == 0
    (path,) = (tmp_path / "out" / "runs").glob("random__*.json")
    record = reseal(path, lambda r: r["scores"].update(spearman=99.0, spearman_ci95=[98.5, 99.5]))
    truth = spearman100(record["pairs"]["similarity"], record["pairs"]["gold"])
    assert abs(truth - 99.0) > 10  # the pairs it carries give another number
    caplog.clear()
    code, _out, err = bench("--methods", "avg", *senteval_args, "--no-plots")
    assert code == 0, err
    (warning,) = warnings_of(caplog)
    assert path.name in warning
    assert f"scores.spearman 99.0 is not what its own {record['task']['n_pairs']} pairs give ({truth:.4f})" in warning
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv")
    assert list(board["method"]) == ["avg"]  # not shown, let alone first
    for name in ("leaderboard.md", "scores.csv", "index.html"):
        assert "random" not in outside_history((tmp_path / "out" / name).read_text())


# -- row 9: a score outside its own interval ----------------------------------------------------

def test_a_score_outside_its_own_interval_is_skipped_with_one_warning_not_a_crash(bench, senteval_args, tmp_path,
                                                                                  caplog):
    assert bench("--methods", "avg", "random", *senteval_args, "--no-plots")[0] == 0
    (path,) = (tmp_path / "out" / "runs").glob("random__*.json")
    record = reseal(path, lambda r: r["scores"].update(spearman_ci95=[98.5, 99.5]))
    score = record["scores"]["spearman"]
    assert score == pytest.approx(spearman100(record["pairs"]["similarity"], record["pairs"]["gold"]), abs=1e-9)
    caplog.clear()
    code, _out, err = bench("--methods", "avg", *senteval_args)  # plots on: the whisker that once crashed
    assert code == 0 and "Traceback" not in err, err
    (warning,) = warnings_of(caplog)
    assert path.name in warning and f"its Spearman {score:.4f} lies outside its own 95 % interval [98.5000, 99.5000]" \
        in warning
    assert (tmp_path / "out" / "plots" / "leaderboard.png").stat().st_size > 1000
    assert list(pd.read_csv(tmp_path / "out" / "leaderboard.csv")["method"]) == ["avg"]


# -- row 6: one column, one dataset -------------------------------------------------------------

def _edited_in_place(tmp_path: Path) -> tuple[str, Callable[[], str]]:
    """A pairs file edited between two runs: the same path, other gold scores."""
    path = write_tsv(tmp_path / "data" / "pairs.tsv", pairs(np.random.default_rng(3), 24))
    first = f"file:{path}"
    rows = [(a, b, 5.0 - g) for a, b, g in pairs(np.random.default_rng(3), 24)]  # gold turned upside down

    def edit() -> str:
        write_tsv(path, rows)
        return first

    return first, edit


def _another_file_same_name(tmp_path: Path) -> tuple[str, Callable[[], str]]:
    """Two files given one name= in two runs."""
    write_tsv(tmp_path / "a" / "mine.tsv", pairs(np.random.default_rng(3), 24))
    write_tsv(tmp_path / "b" / "other.tsv", pairs(np.random.default_rng(4), 24))
    return f"file:{tmp_path / 'a' / 'mine.tsv'}?name=pairs", lambda: f"file:{tmp_path / 'b' / 'other.tsv'}?name=pairs"


CHANGES = [("edited in place", _edited_in_place), ("another file, one name", _another_file_same_name)]


@pytest.mark.parametrize(("case", "change"), CHANGES, ids=[c[0] for c in CHANGES])
def test_records_on_a_tasks_older_data_leave_every_table(bench, tiny_bert, tmp_path, caplog, case, change):
    common = ("--backbone", str(tiny_bert), "--bootstrap", "200")
    first, edit = change(tmp_path)
    assert bench("--methods", "avg", "cls", "--tasks", first, *common)[0] == 0
    old = {r["method"]["name"]: r for r in records(tmp_path / "out")}
    second = edit()
    caplog.clear()
    code, out, err = bench("--methods", "avg", "--tasks", second, *common)
    assert code == 0, err
    new = next(r for r in records(tmp_path / "out") if r["task"]["fingerprint"] != old["avg"]["task"]["fingerprint"])
    was, now = old["cls"]["task"]["fingerprint"], new["task"]["fingerprint"]
    (warning,) = warnings_of(caplog)
    assert f"pairs: its data changed (sha256 {was[:12]} → {now[:12]}); 2 record(s)" in warning
    # the new data's score, from the new file's gold and the new record's similarities
    source = Path(second.removeprefix("file:").split("?")[0])
    assert new["pairs"]["gold"] == tsv_gold(source)
    expected = spearman100(new["pairs"]["similarity"], tsv_gold(source))
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv")
    assert list(board["method"]) == ["avg"] and board["pairs"].item() == pytest.approx(expected, abs=1e-4)
    assert board["task_fingerprints"].item() == f"pairs={now}"
    markdown = (tmp_path / "out" / "leaderboard.md").read_text()
    assert f"Tasks with their own data: pairs: file {source} (sha256 {now[:12]})" in markdown
    assert was[:12] not in markdown and "| cls" not in markdown and "cls" not in out.split("## Protocol")[1]
    assert set(pd.read_csv(tmp_path / "out" / "scores.csv")["method"]) == {"avg"}
    assert "<td>cls<" not in (tmp_path / "out" / "index.html").read_text()
    # on disk and in the history all the same
    assert sorted((r["method"]["name"], r["task"]["fingerprint"]) for r in records(tmp_path / "out")) == \
        sorted([("avg", was), ("cls", was), ("avg", now)])
    history = [json.loads(line) for line in (tmp_path / "out" / "history.jsonl").read_text().splitlines()]
    assert ("cls", was) in {(h["method"], h["fingerprint"]) for h in history}


@pytest.mark.parametrize(("case", "change"), CHANGES, ids=[c[0] for c in CHANGES])
def test_the_gate_refuses_a_baseline_made_on_other_data(bench, tiny_bert, tmp_path, case, change):
    common = ("--methods", "avg", "--backbone", str(tiny_bert), "--bootstrap", "0")
    first, edit = change(tmp_path)
    assert bench(*common, "--tasks", first)[0] == 0
    baseline = tmp_path / "baseline.csv"
    shutil.copy(tmp_path / "out" / "leaderboard.csv", baseline)
    was = records(tmp_path / "out")[0]["task"]["fingerprint"]
    assert bench(*common, "--tasks", first, "--baseline", str(baseline))[0] == 0  # same data: compared
    second = edit()
    code, _out, err = bench(*common, "--tasks", second, "--baseline", str(baseline))
    line = err.strip().splitlines()[-1]
    assert code == 2 and "Traceback" not in err
    found = re.fullmatch(rf"error: --baseline {re.escape(str(baseline))}: made on other data: avg on pairs "
                         rf"\(baseline on sha256 {was[:12]}, this run on sha256 ([0-9a-f]{{12}})\); compare against "
                         r"a leaderboard.csv of a run on the same data", line)
    assert found and found.group(1) != was[:12], line
    # refused before anything ran: the planned cells carry the data's fingerprint, no record on the new data
    assert all(r["task"]["fingerprint"] == was for r in records(tmp_path / "out"))


# -- row 10: the tool's own leaderboard of file tasks is a baseline -----------------------------

def test_the_gate_takes_its_own_leaderboard_of_file_tasks_only(bench, tiny_bert, tmp_path):
    one = write_tsv(tmp_path / "data" / "pairs.tsv", pairs(np.random.default_rng(3), 24))
    two = write_tsv(tmp_path / "data" / "more.tsv", pairs(np.random.default_rng(8), 24))
    run = ("--methods", "avg", "cls", "--tasks", f"file:{one}", f"file:{two}", "--backbone", str(tiny_bert),
           "--bootstrap", "0")
    assert bench(*run)[0] == 0
    board = tmp_path / "out" / "leaderboard.csv"
    frame = pd.read_csv(board)
    assert {"pairs", "more"} <= set(frame.columns) and not {"STS-B", "STS12"} & set(frame.columns)
    code, _out, err = bench(*run, "--baseline", str(board))
    assert code == 0, err  # read, matched, no drop
    avg = next(r for r in records(tmp_path / "out") if r["method"]["name"] == "avg" and r["task"]["name"] == "more")
    now = spearman100(avg["pairs"]["similarity"], tsv_gold(two))
    frame.loc[frame["method"] == "avg", "more"] = now + 3.0  # a baseline 3 points above this code
    baseline = tmp_path / "baseline.csv"
    frame.to_csv(baseline, index=False)
    code, out, err = bench(*run, "--baseline", str(baseline))
    assert code == 1, err
    verdict = out.split("REGRESSION")[1]
    row = next(line for line in verdict.splitlines() if line.startswith("| avg"))
    assert "| more" in row and f"{now + 3.0:.2f}" in row and f"{now:.2f}" in row and "-3.00" in row


# -- a non-finite baseline is malformed ---------------------------------------------------------

@pytest.mark.parametrize("value", ["-inf", "inf", "1e999", "Infinity"])
def test_a_non_finite_baseline_score_is_one_error_line_before_anything_runs(bench, tiny_bert, tmp_path, value):
    path = write_tsv(tmp_path / "data" / "pairs.tsv", pairs(np.random.default_rng(3), 24))
    run = ("--methods", "avg", "--tasks", f"file:{path}", "--backbone", str(tiny_bert), "--bootstrap", "0")
    assert bench(*run)[0] == 0
    frame = pd.read_csv(tmp_path / "out" / "leaderboard.csv", dtype=str, keep_default_na=False)
    frame.loc[frame["method"] == "avg", "pairs"] = value
    baseline = tmp_path / "baseline.csv"
    frame.to_csv(baseline, index=False)
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "out" / "runs").glob("*.json")}
    code, _out, err = bench(*run, "--seed", "5", "--baseline", str(baseline))
    line = one_error_line(err)
    assert code == 2
    assert line == (f"error: --baseline {baseline}:2: column pairs holds {value!r}, not a finite number (the gate "
                    "could never, or would always, fire); pass a leaderboard.csv written by run_bench.py "
                    "(results/leaderboard.csv)")
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "out" / "runs").glob("*.json")} == before  # nothing ran


# -- issue 42: every interval recomputed from the record's pairs, rounds and seed --------------

def test_an_interval_widened_and_resealed_is_redrawn_from_its_pairs_and_never_shown(bench, senteval_args, tmp_path,
                                                                                     caplog):
    """[-99, 99] holds any score, so the old check (the interval holds the score) passed it: the
    interval is now drawn again from the record's pairs, rounds and seed and must be the stored one."""
    from harness.core.scoring import score_split

    assert bench("--methods", "avg", "random", *senteval_args, "--no-plots", "--bootstrap", "200")[0] == 0
    (path,) = (tmp_path / "out" / "runs").glob("random__*.json")
    kept = json.loads(path.read_text())["scores"]["spearman_ci95"]
    record = reseal(path, lambda r: r["scores"].update(spearman_ci95=[-99.0, 99.0]))
    pairs_ = record["pairs"]
    truth = score_split(np.asarray(pairs_["similarity"]), pairs_["gold"], pairs_["subset"], "all", bootstrap=200,
                        seed=record["scores"]["bootstrap_seed"]).ci95
    assert truth is not None and truth == pytest.approx(kept, abs=1e-9)  # the run wrote the true one
    caplog.clear()
    code, _out, err = bench("--methods", "avg", *senteval_args, "--no-plots", "--bootstrap", "200")
    assert code == 0, err
    (warning,) = warnings_of(caplog)
    assert path.name in warning
    assert (f"scores.spearman_ci95 [-99.0000, 99.0000] is not the 95 % interval its own pairs give with 200 "
            f"resamples and seed 1234 ([{truth[0]:.4f}, {truth[1]:.4f}])") in warning
    assert list(pd.read_csv(tmp_path / "out" / "leaderboard.csv")["method"]) == ["avg"]
    for name in ("leaderboard.md", "scores.csv", "index.html"):
        assert "random" not in outside_history((tmp_path / "out" / name).read_text())


# -- issue 42: --bootstrap below a 95 % interval's minimum, or beyond memory ------------------

@pytest.mark.parametrize("rounds", ["1", "40"])
def test_too_few_resamples_for_a_95_interval_are_one_error_line(bench, senteval_args, tmp_path, rounds):
    code, _out, err = bench("--methods", "random", *senteval_args, "--no-plots", "--bootstrap", rounds)
    assert code == 2
    line = one_error_line(err)
    assert f"--bootstrap: {rounds} resample(s) cannot give a 95 % interval" in line and "at least 41" in line
    assert not (tmp_path / "out" / "runs").exists() or not list((tmp_path / "out" / "runs").glob("*.json"))


def test_a_bootstrap_too_large_for_memory_is_refused_before_encoding_with_advice_about_it(
        bench, senteval_args, tmp_path, monkeypatch):
    from harness.core import machine

    monkeypatch.setattr(machine, "available_bytes", lambda device: 64 * 2**20)  # 64 MiB
    code, _out, err = bench("--methods", "avg", "random", *senteval_args, "--no-plots", "--bootstrap", "1000000")
    assert code == 3
    line = one_error_line(err)
    # 64 B × 1,000,000 resamples × (2 methods × 1 task) = 0.1 GiB > 64 MiB
    assert line.startswith("error: --bootstrap 1,000,000 keeps 1,000,000 resampled scores per method and task: "
                           "about 0.1 GiB for 2 score(s)")
    assert "lower --bootstrap" in line and "batch" not in line
    assert not list(tmp_path.glob("cache/vectors/*/part-*.npy"))  # nothing encoded
    code, _out, err = bench("--methods", "random", *senteval_args, "--bootstrap", "1000001")
    assert code == 2 and "at most 1,000,000" in one_error_line(err)


# -- issue 51: a record's evidence floors checked when it is read ----------------------------

def test_a_record_resealed_with_one_resample_and_its_interval_is_never_shown(bench, senteval_args, tmp_path, caplog):
    """``bootstrap_rounds: 1`` with the interval one resample gives is consistent with its pairs,
    but no 95 % interval: the reader holds it to the command line's rule (0, or 41..1,000,000)."""
    from harness.core.scoring import score_split

    assert bench("--methods", "avg", "random", *senteval_args, "--no-plots", "--bootstrap", "200")[0] == 0
    (path,) = (tmp_path / "out" / "runs").glob("random__*.json")
    pairs_ = json.loads(path.read_text())["pairs"]
    one = score_split(np.asarray(pairs_["similarity"]), pairs_["gold"], pairs_["subset"], "all", bootstrap=1,
                      seed=1234).ci95
    reseal(path, lambda r: r["scores"].update(bootstrap_rounds=1, spearman_ci95=None if one is None else list(one)))
    caplog.clear()
    code, _out, err = bench("--methods", "avg", *senteval_args, "--no-plots", "--bootstrap", "200")
    assert code == 0, err
    (warning,) = warnings_of(caplog)
    assert path.name in warning and "scores.bootstrap_rounds 1: 1 resample(s) cannot give a 95 % interval" in warning
    for name in ("leaderboard.md", "scores.csv", "index.html"):
        assert "random" not in outside_history((tmp_path / "out" / name).read_text())


def outside_history(text: str) -> str:
    """The page without its history section: history.jsonl's lines are checked against their own
    blobs, and one commit's are shown as a table of their scores (issue 52), the run's genuine score
    there, not the edited record's."""
    import re

    return re.sub(r"<section id=.history.>.*?</section>", "", text, flags=re.S)
