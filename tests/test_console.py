"""What a run prints: its own leaderboard (its rows and tasks, marks among them), progress in a log, the line
that says why each sentence is encoded, and warnings that say the fix."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import numpy as np
import pytest

import harness.core.progress as progress
from harness.core.errors import UserError
from harness.core.progress import LineProgress, progress_bar


def senteval_args(senteval_root, model, *extra):
    return ["--source", "senteval", "--senteval-dir", str(senteval_root), "--backbone", str(model), *extra]


def table_rows(text: str) -> dict[str, dict[str, str]]:
    """The body rows of every markdown table in ``text``, by their first cell (the method): each a
    dict of its non-empty cells by column header (column widths and empty columns aside)."""
    rows, header = {}, []
    for line in text.splitlines():
        if not line.startswith("|") or set(line) <= set("|:- "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "method":
            header = cells
        else:
            rows[cells[0]] = {column: cell for column, cell in zip(header, cells) if cell}
    return rows


# -- 1. the printed leaderboard is this run's --------------------------------------------------------

def test_the_printed_rows_are_the_files_rows_with_their_marks(bench, senteval_root, tiny_bert, tmp_path):
    args = ["--tasks", "stsb", "sts12", *senteval_args(senteval_root, tiny_bert), "--bootstrap", "50"]
    code, out, err = bench("--methods", "avg", "cls", "whitening", *args)
    assert code == 0, err
    board = (tmp_path / "out" / "leaderboard.md").read_text()
    printed, filed = table_rows(out), table_rows(board)
    assert set(printed) == {"avg", "cls", "whitening"} and "★" in str(filed)
    assert printed == filed  # cell for cell: scores, ★, † (whitening fits on the scored sentences)
    assert printed["whitening"]["marks"] == "†" and "marks" not in printed["avg"]
    # A second run of one method into the same folder prints its own row only, with the file's
    # scores; its ★ and rank are among this run's rows (it is alone: best everywhere, rank 1), while
    # the file ranks it among the first run's rows too.
    code, out, err = bench("--methods", "avg", *args)
    assert code == 0, err
    board = (tmp_path / "out" / "leaderboard.md").read_text()
    filed = table_rows(board)
    assert set(filed) == {"avg", "cls", "whitening"} and set(table_rows(out)) == {"avg"}
    printed = table_rows(out)["avg"]
    assert {c: v.removesuffix(" ★") for c, v in printed.items() if c != "rank"} == {
        c: v.removesuffix(" ★") for c, v in filed["avg"].items() if c != "rank"}
    assert all(printed[c].endswith(" ★") for c in ("STS-B", "STS12", "Avg.")) and printed["rank"] == "1"


def labelled_pairs(folder: Path, senteval_root: Path, name: str, cut: float) -> Path:
    """The SentEval fixture's STS-B train and test pairs as ``<name>.tsv``, class 1 where gold >= cut
    (train chooses the thresholds)."""
    from harness.core.data.tasks import get_task, load_task

    task = load_task(get_task("stsb"), "senteval", ["train", "test"], locations={"senteval": str(senteval_root)})
    lines = ["sentence1\tsentence2\tlabel\tsplit"] + [
        f"{a}\t{b}\t{int(g >= cut)}\t{split}"
        for split in ("train", "test")
        for a, b, g in zip(task.splits[split].s1, task.splits[split].s2, task.splits[split].gold)]
    path = folder / f"{name}.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def protocol_tables(text: str) -> dict[str, tuple[str, dict[str, dict[str, str]]]]:
    """Each ``## Protocol:`` section of a printed leaderboard, by whether it is labelled pairs
    (``"labelled"``) or STS: its own-data line ("" when none) and its rows (:func:`table_rows`)."""
    out = {}
    for section in text.split("## Protocol: ")[1:]:
        section = section.split("\n# ")[0]  # a prompt spread printed after the leaderboard aside
        own = next((line for line in section.splitlines() if line.startswith("Tasks with their own data")), "")
        out["labelled" if section.startswith("score=ap") else "sts"] = (own, table_rows(section))
    return out


def test_stdout_shows_this_runs_tasks_and_rows_ranked_among_themselves(bench, senteval_root, tiny_bert, tmp_path):
    """Issue 50: two runs into one folder with different labelled and STS tasks and methods; the
    second run prints only its own tasks and rows, numbers equal to scikit-learn / scipy on its
    records' pairs, ranks and ★ among its rows; the files keep both runs; a warm re-run (its tables
    copied from the memo) prints the same."""
    from scipy.stats import spearmanr
    from sklearn.metrics import average_precision_score

    first = labelled_pairs(tmp_path, senteval_root, "pairs_with_label", 3)
    second = labelled_pairs(tmp_path, senteval_root, "pairs_split", 2)
    common = [*senteval_args(senteval_root, tiny_bert), "--bootstrap", "50", "--no-plots"]
    code, _, err = bench("--methods", "avg", "cls", "--tasks", f"file:{first}", "stsb", *common)
    assert code == 0, err
    before = set((tmp_path / "out" / "runs").glob("*.json"))
    args = ["--methods", "avg", "random", "--tasks", f"file:{second}", "sts12", *common]
    code, out, err = bench(*args)
    assert code == 0, err
    records = [json.loads(p.read_text()) for p in set((tmp_path / "out" / "runs").glob("*.json")) - before]
    expected: dict[str, dict[str, float]] = {"labelled": {}, "sts": {}}  # table → method → its score
    for rec in records:
        similarity, gold = np.asarray(rec["pairs"]["similarity"]), np.asarray(rec["pairs"]["gold"])
        if rec["task"].get("kind") == "pairclass":
            expected["labelled"][rec["method"]["name"]] = 100 * average_precision_score(gold == 1, similarity)
        else:
            expected["sts"][rec["method"]["name"]] = 100 * spearmanr(similarity, gold).statistic
    titles = {"labelled": "pairs_split", "sts": "STS12"}
    for printed in (out, bench(*args)):
        if isinstance(printed, tuple):  # the warm re-run: the leaderboards are copied, not computed
            code, printed, err = printed
            # (the stages line leaves out a stage under 5 ms, so a copied step may not be named)
            assert code == 0 and " comparisons " not in err, err
        shown = printed.split("## Protocol: ", 1)[1]  # the legend above names STS-B in prose
        assert "pairs_with_label" not in shown and "STS-B" not in shown and "cls" not in shown, shown
        tables = protocol_tables(printed)
        assert set(tables) == {"labelled", "sts"}
        assert tables["labelled"][0] == f"Tasks with their own data: pairs_split: file {second} " + (
            tables["labelled"][0].split(f"{second} ")[1])
        assert tables["sts"][0] == ""
        for kind, (_, rows) in tables.items():
            assert set(rows) == {"avg", "random"}
            task = titles[kind]
            assert {m: float(row[task].removesuffix(" ★")) for m, row in rows.items()} == pytest.approx(
                expected[kind], abs=0.006)
            # ranks among these two rows: 1 and 2 in the order of their scores, the best starred
            best = max(expected[kind], key=expected[kind].__getitem__)
            assert sorted(int(row["rank"].split()[0]) for row in rows.values()) == [1, 2]
            assert rows[best]["rank"].startswith("1") and rows[best][task].endswith(" ★")
            assert set(rows[best]) - {"fit_set"} == {"method", "backbone", task, "Avg.", "rank"}
    # the files hold both runs
    board = (tmp_path / "out" / "leaderboard.md").read_text()
    for name in ("pairs_with_label", "pairs_split", "STS-B", "STS12", "| cls", "| random"):
        assert name in board, name
    pair_metrics = (tmp_path / "out" / "pair_metrics.csv").read_text()
    assert ",pairs_with_label," in pair_metrics and ",pairs_split," in pair_metrics


# -- 2. progress in a log ----------------------------------------------------------------------------

class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_log_gets_a_line_at_most_every_interval_with_rate_and_eta():
    clock, lines = FakeClock(), []
    bar = LineProgress(1000, "encode m", "sentence", write=lines.append, now=clock, interval=10.0)
    for _ in range(30):  # 30 s at 20 sentences per second
        clock.t += 1.0
        bar.update(20)
    # lines at 10, 20 and 30 s: 200, 400, 600 done at 20/s; ETA = what is left / 20
    assert lines == ["encode m: 200/1000 sentences · 20/s · ETA 40 s",
                     "encode m: 400/1000 sentences · 20/s · ETA 30 s",
                     "encode m: 600/1000 sentences · 20/s · ETA 20 s"]
    clock.t += 0.5
    bar.update(400)  # 0.5 s after the last line: no new line
    assert len(lines) == 3
    bar.close()
    bar.close()  # a bar closed twice (``with`` and ``finally``) says done once
    assert lines[3:] == ["encode m: 1000/1000 sentences · 33/s · done in 30 s"]


def test_a_step_shorter_than_the_interval_prints_nothing_and_a_terminal_keeps_tqdm():
    clock, lines = FakeClock(), []
    with LineProgress(10, "fit flow", "step", write=lines.append, now=clock, interval=10.0) as bar:
        for _ in range(10):
            clock.t += 0.5
            bar.update(1)
    assert lines == []

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    from tqdm import tqdm

    assert isinstance(progress_bar(5, "x", "step", stream=Terminal()), tqdm)
    assert isinstance(progress_bar(5, "x", "step", stream=io.StringIO()), LineProgress)
    log = io.StringIO()
    silent = progress_bar(5, "x", "step", enabled=False, stream=log, interval=0)
    silent.update(5)
    silent.close()
    assert log.getvalue() == ""


def test_a_redirected_cold_run_reports_encoding_progress(senteval_root, tiny_bert, tmp_path, capsys, monkeypatch):
    import run_bench

    ticks = iter(range(10**6))
    monkeypatch.setattr(progress, "clock", lambda: float(next(ticks)))  # one second per look at the clock
    monkeypatch.setattr(progress, "INTERVAL_S", 2.0)
    code = run_bench.main(["--methods", "avg", "--tasks", "stsb", *senteval_args(senteval_root, tiny_bert),
                           "--bootstrap", "0", "--batch-size", "4", "--cache-dir", str(tmp_path / "c"),
                           "--output-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 0, err
    total = len(stsb_sentences(senteval_root)["test"])
    assert total == 24  # the fixture's 12 test pairs: 6 batches of 4, one clock look per batch
    lines = [line for line in err.splitlines() if line.startswith(f"encode {tiny_bert}: ")]
    # the bar starts at t=0; batch i ends at t=i with 4i done; a line when 2 s have passed since the last
    expected = [f"encode {tiny_bert}: {done}/24 sentences · 4/s · ETA {(24 - done) // 4} s" for done in (8, 16, 24)]
    assert lines == [*expected, f"encode {tiny_bert}: 24/24 sentences · 3/s · done in 7 s"]


# -- 3. why each sentence is encoded -----------------------------------------------------------------

def stsb_sentences(senteval_root: Path) -> dict[str, set[str]]:
    """Both sides of every pair of each STS-B split, read from the fixture files directly."""
    folder = senteval_root / "STS" / "STSBenchmark"
    out = {}
    for split in ("train", "dev", "test"):
        rows = [line.split("\t") for line in (folder / f"sts-{split}.csv").read_text().splitlines() if line]
        out[split] = {row[5] for row in rows} | {row[6] for row in rows}
    return out


def sick_sentences(senteval_root: Path) -> dict[str, set[str]]:
    folder = senteval_root / "SICK"
    out = {}
    for split, name in (("train", "SICK_train.txt"), ("dev", "SICK_trial.txt"), ("test", "SICK_test_annotated.txt")):
        rows = [line.split("\t") for line in (folder / name).read_text().splitlines()[1:] if line]
        out[split] = {row[1] for row in rows} | {row[2] for row in rows}
    return out


@pytest.mark.parametrize("dry_run", [False, True])
def test_the_encode_line_says_which_methods_need_which_sentences(bench, senteval_root, tiny_bert, dry_run):
    stsb, sick = stsb_sentences(senteval_root), sick_sentences(senteval_root)
    # Each sentence counted once, under the first thing that needs it: the scored splits, then the
    # fit set 'target' (every split) of each task.
    stsb_test = stsb["test"]
    sick_test = sick["test"] - stsb_test
    stsb_rest = (stsb["train"] | stsb["dev"]) - stsb_test - sick_test
    sick_rest = (sick["train"] | sick["dev"]) - stsb_test - sick_test - stsb_rest
    total = len(stsb_test | sick["test"] | stsb["train"] | stsb["dev"] | sick["train"] | sick["dev"])
    assert total == len(stsb_test) + len(sick_test) + len(stsb_rest) + len(sick_rest)
    code, out, err = bench("--methods", "avg", "whitening", "--tasks", "stsb", "sickr",
                         *senteval_args(senteval_root, tiny_bert), "--bootstrap", "0",
                         *(["--dry-run"] if dry_run else []))
    assert code == 0, err
    expected = (f"{tiny_bert} — {total} unique sentences: STS-B test {len(stsb_test)} (scored: avg "
                f"whitening); SICK-R test {len(sick_test)} (scored: avg whitening); STS-B train+dev {len(stsb_rest)} "
                f"(fit set 'target' of whitening); SICK-R train+dev {len(sick_rest)} (fit set 'target' of whitening); "
                "views ")
    # the encode stage prints it on stderr before encoding; --dry-run prints the plan (stdout)
    assert (f"    why: {expected}" in out) if dry_run else (f"encode: {expected}" in err)


# -- 4. warnings that say the fix --------------------------------------------------------------------

def test_whitening_k_above_the_dimension_says_so_and_keeps_every_dimension(caplog):
    from methods.whitening import whitening_transform

    x = np.random.default_rng(0).normal(size=(200, 16))  # full rank: only k is the bound
    with caplog.at_level(logging.WARNING):
        _, w, rank = whitening_transform(x, k=1000)
    assert w.shape == (16, 16) and rank == 16
    assert "k=1000 exceeds the dimension 16 of the vectors; keeping all 16 (use --set whitening.k=N with N ≤ 16" \
        in caplog.text
    assert "rank" not in caplog.text  # the rank is not what bit


def test_abtt_k_not_below_the_dimension_is_an_error_with_the_fix():
    from methods.calibrations import all_but_the_top

    x = np.random.default_rng(0).normal(size=(50, 8))
    with pytest.raises(UserError, match=r"abtt: k=8 is not below the dimension 8 .* --set abtt.k=N with N < 8"):
        all_but_the_top(x, 8)
    assert all_but_the_top(x, 7)[1].shape == (8, 7)


def test_wmean_on_single_subset_tasks_warns_once_and_files_them_under_all(bench, senteval_root, tiny_bert, tmp_path,
                                                                         caplog):
    args = ["--methods", "avg", "--tasks", "stsb", "sickr", *senteval_args(senteval_root, tiny_bert),
            "--bootstrap", "0"]
    code, _, err = bench(*args)
    assert code == 0, err
    caplog.clear()
    code, _, err = bench(*args, "--aggregation", "wmean")
    assert code == 0, err
    assert caplog.text.count("--aggregation wmean: STS-B, SICK-R each have a single subset") == 1
    assert "drop --aggregation" in caplog.text
    records = [json.loads(p.read_text()) for p in (tmp_path / "out" / "runs").glob("*.json")]
    assert {r["protocol"]["aggregation"] for r in records} == {"all"}
    board = (tmp_path / "out" / "leaderboard.md").read_text()
    assert board.count("## Protocol:") == 1 and "aggregation=all" in board
    # a task with subsets keeps the aggregation asked for: there it changes the number
    caplog.clear()
    code, _, err = bench("--methods", "avg", "--tasks", "stsb", "sts12", *senteval_args(senteval_root, tiny_bert),
                         "--bootstrap", "0", "--aggregation", "wmean")
    assert code == 0, err
    assert "single subset" not in caplog.text
    assert "aggregation=wmean" in (tmp_path / "out" / "leaderboard.md").read_text()
