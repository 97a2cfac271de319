"""Verdicts a user or a CI job must be able to trust, where a case needs more than one run: a warm
cache never hides a changed method or changed weights, the regression gate reads its baseline before
the run and refuses to compare nothing, an undefined correlation is never a number, a damaged record
is never shown, history and reports lose nothing when runs share a folder, and the environment's
failures (SIGTERM, read-only cache folders) end in their own exit code before any work.

The single-run cases of the same matrix (bad data, lengths, seeds, baselines that match nothing)
are lines of ``tests/test_faults.py:CASES``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fixtures import tree_copy
from test_faults import one_error_line, prepare
from test_faults_disk import tmpfs

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def se(senteval_root, tmp_path) -> Path:
    """A private copy of the SentEval fixture, which cases may edit."""
    root = tmp_path / "se"
    shutil.copytree(senteval_root, root)
    return root


@pytest.fixture
def args(se, tiny_bert) -> list[str]:
    return ["--tasks", "stsb", "--source", "senteval", "--senteval-dir", str(se), "--backbone", str(tiny_bert),
            "--no-plots"]


def records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]


def strict_json(path: Path) -> object:
    """Parse ``path`` refusing NaN / Infinity, as a strict JSON reader (a browser, jq) would."""
    def refuse(name: str) -> None:
        raise AssertionError(f"{path}: bare {name} is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


# -- the regression gate ---------------------------------------------------------------------------

def test_a_baseline_in_the_output_folder_is_read_before_the_run_rewrites_it(bench, args, tmp_path):
    assert bench("--methods", "avg", *args, "--bootstrap", "0")[0] == 0
    board = tmp_path / "out" / "leaderboard.csv"
    frame = pd.read_csv(board)
    frame.loc[frame["method"] == "avg", "STS-B"] += 20  # a better score than this code gives
    frame.to_csv(board, index=False)
    code, out, err = bench("--methods", "avg", *args, "--bootstrap", "0", "--baseline", str(board))
    assert code == 1, err  # compared with the file as it was, not as this run rewrote it
    assert "REGRESSION" in out


@pytest.mark.parametrize(("column", "edit"), [
    ("max_length", lambda v: f"{float(v):.1f}"),  # 64 → "64.0", as a spreadsheet writes it
    ("method", lambda v: f"{v} "),  # "avg " with a trailing space
    ("first_last_layers", lambda v: v.replace(",", ", ")),  # "1, -1"
])
def test_baseline_keys_are_normalised_so_a_real_drop_is_seen(bench, args, tmp_path, column, edit):
    assert bench("--methods", "avg", *args, "--bootstrap", "0")[0] == 0
    frame = pd.read_csv(tmp_path / "out" / "leaderboard.csv", dtype=str, keep_default_na=False)
    frame[column] = frame[column].map(edit)
    baseline = tmp_path / "baseline.csv"
    frame.to_csv(baseline, index=False)
    code, _, err = bench("--methods", "avg", *args, "--bootstrap", "0", "--baseline", str(baseline))
    assert code == 0, err  # matched: no drop
    frame["STS-B"] = (frame["STS-B"].astype(float) + 2.97).map(str)  # the drop the issue saw pass
    frame.to_csv(baseline, index=False)
    code, out, err = bench("--methods", "avg", *args, "--bootstrap", "0", "--baseline", str(baseline))
    assert code == 1 and "REGRESSION" in out, err


@pytest.mark.parametrize("value", ["-inf", "inf"])
def test_a_non_finite_baseline_score_is_refused_before_the_run(bench, args, tmp_path, value):
    """A -inf baseline can never be dropped below (the gate could not fire), an inf one always is."""
    assert bench("--methods", "avg", *args, "--bootstrap", "0")[0] == 0
    frame = pd.read_csv(tmp_path / "out" / "leaderboard.csv", dtype=str, keep_default_na=False)
    frame["STS-B"] = value
    baseline = tmp_path / "baseline.csv"
    frame.to_csv(baseline, index=False)
    code, _, err = bench("--methods", "avg", *args, "--bootstrap", "0", "--baseline", str(baseline))
    assert code == 2 and f"{baseline}:2: column STS-B holds '{value}', not a finite number" in one_error_line(err)


def test_a_partial_baseline_compares_what_matches_only_when_asked(bench, args, tmp_path):
    assert bench("--methods", "avg", *args, "--bootstrap", "0")[0] == 0
    baseline = tmp_path / "out" / "leaderboard.csv"
    kept = tmp_path / "baseline.csv"
    shutil.copy(baseline, kept)
    code, _, err = bench("--methods", "avg", "random", *args, "--bootstrap", "0", "--baseline", str(kept))
    assert code == 2 and "random on STS-B" in one_error_line(err) and "--baseline-partial" in err
    code, _, err = bench("--methods", "avg", "random", *args, "--bootstrap", "0", "--baseline", str(kept),
                         "--baseline-partial")
    assert code == 0, err


# -- undefined is not a number ---------------------------------------------------------------------

def test_an_undefined_task_is_recorded_as_undefined_only_when_asked_and_never_ranked(bench, args, tmp_path):
    prepare(tmp_path, {"gold_all": b"3.0"}, [])
    code, _out, err = bench("--methods", "avg", "random", *args, "--allow-undefined")
    assert code == 0, err
    for record in records(tmp_path / "out"):
        assert record["scores"]["spearman"] is None and record["scores"]["spearman_ci95"] is None
        assert record["scores"]["undefined"] == "every gold score is equal"
    board = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "undefined" in board and "★" not in board.split("## Protocol")[1]  # nothing starred
    csv = pd.read_csv(tmp_path / "out" / "leaderboard.csv")
    assert csv["STS-B"].isna().all() and csv["Avg."].isna().all() and set(csv["undefined"]) == {"STS-B"}
    assert pd.read_csv(tmp_path / "out" / "significance.csv").empty  # nothing compared
    for path in [*(tmp_path / "out" / "runs").glob("*.json"), *(tmp_path / "out" / "mteb").rglob("*.json")]:
        strict_json(path)
    history = tmp_path / "out" / "history.jsonl"
    assert not history.exists() or not history.read_text().strip()  # an undefined score is no point


def test_a_method_whose_similarities_are_constant_is_refused_and_the_rest_kept(bench, args, tmp_path, monkeypatch):
    from methods.pooling import Avg

    monkeypatch.setattr(Avg, "encode", lambda self, sentences: np.ones((len(sentences), 4), np.float32))
    code, _, err = bench("--methods", "avg", "cls", *args)
    line = err.strip().splitlines()[-1]  # after the run's progress lines, one error line
    assert "Traceback" not in err and line.startswith("error: ")
    assert code == 2 and "avg on STS-B (every similarity is equal)" in line and "--allow-undefined" in line
    assert [r["method"]["name"] for r in records(tmp_path / "out")] == ["cls"]  # the rest is kept
    assert "cls" in (tmp_path / "out" / "leaderboard.csv").read_text()
    code, _, err = bench("--methods", "avg", "cls", *args, "--allow-undefined")
    assert code == 0, err
    avg = next(r for r in records(tmp_path / "out") if r["method"]["name"] == "avg")
    assert avg["scores"]["spearman"] is None and avg["scores"]["undefined"] == "every similarity is equal"


# -- records, history, reports ---------------------------------------------------------------------

def _digit_changed(path: Path) -> None:
    record = json.loads(path.read_text())
    record["scores"]["spearman"] += 1.0  # the checksum no longer matches
    path.write_text(json.dumps(record))


def _key_missing(path: Path) -> None:
    record = json.loads(path.read_text())
    del record["task"]["fingerprint"]
    path.write_text(json.dumps(record))


def _wrong_type(path: Path) -> None:
    record = json.loads(path.read_text())
    record["task"]["n_pairs"] = "twelve"
    path.write_text(json.dumps(record))


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def _resealed_better(path: Path) -> None:
    """Issue 30: a better score sealed again with the project's own checksum; its pairs say otherwise."""
    from harness.runner.records.schema import seal

    record = json.loads(path.read_text())
    record["scores"].update(spearman=99.0, spearman_ci95=[98.5, 99.5])
    path.write_text(json.dumps(seal(record)))


def _resealed_outside_interval(path: Path) -> None:
    """Issue 30: the score kept, its interval moved away from it, sealed again."""
    from harness.runner.records.schema import seal

    record = json.loads(path.read_text())
    record["scores"]["spearman_ci95"] = [98.5, 99.5]
    path.write_text(json.dumps(seal(record)))


# (case, damage done to random's record, warning text)
DAMAGED_RECORDS = [
    ("one digit changed", _digit_changed, "does not match its checksum"),
    ("a key missing", _key_missing, "record.task lacks fingerprint"),
    ("a value of the wrong type", _wrong_type, "record.task.n_pairs is not an integer"),
    ("cut in half", _cut, "not readable JSON"),
    ("a better score re-sealed", _resealed_better, "scores.spearman 99.0 is not what its own"),
    ("an interval re-sealed away from its score", _resealed_outside_interval, "lies outside its own 95 % interval"),
]


@pytest.mark.parametrize(("case", "damage", "warning"), DAMAGED_RECORDS, ids=[c[0] for c in DAMAGED_RECORDS])
def test_a_damaged_record_is_skipped_with_one_warning_and_never_shown(bench, args, tmp_path, caplog, case, damage,
                                                                      warning):
    assert bench("--methods", "avg", "random", *args)[0] == 0
    (path,) = (tmp_path / "out" / "runs").glob("random__*.json")
    damage(path)
    caplog.clear()
    code, _out, err = bench("--methods", "avg", *args)
    assert code == 0, err
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warning in warnings[0] and path.name in warnings[0]
    for name in ("leaderboard.csv", "leaderboard.md", "index.html"):
        text = (tmp_path / "out" / name).read_text()
        # The page's history is history.jsonl's (each line checked against its own blobs): the first run's
        # random score is there, as a table of the one commit (issue 52), not from the damaged record.
        assert "random" not in re.sub(r"<section id=.history.>.*?</section>", "", text, flags=re.S)
    assert bench("--methods", "avg", *args)[0] == 0  # and every later run too


def test_a_temporary_file_in_runs_is_not_a_record(bench, args, tmp_path, caplog):
    assert bench("--methods", "avg", *args)[0] == 0
    (path,) = (tmp_path / "out" / "runs").glob("avg__*.json")
    (path.parent / f".tmp-123-abcd-{path.name}").write_bytes(path.read_bytes()[:40])  # a write killed half-way
    caplog.clear()
    assert bench("--methods", "avg", *args)[0] == 0
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_a_torn_history_line_does_not_swallow_the_next_run(bench, args, tmp_path):
    from harness.runner.history.log import read_history

    assert bench("--methods", "avg", *args)[0] == 0
    history = tmp_path / "out" / "history.jsonl"
    history.write_bytes(history.read_bytes()[:-30])  # a full disk cut the last line
    assert bench("--methods", "avg", "--seed", "7", *args)[0] == 0
    entries = read_history(tmp_path / "out")
    assert [e["method"] for e in entries] == ["avg"] and entries[0]["seed"] == 7  # the torn one skipped


def wait_until_blocked_on(lock_file: Path, job: subprocess.Popen, limit: float = 120.0) -> None:
    """Return once ``job`` waits for the flock on ``lock_file`` (a ``->`` line of /proc/locks with its
    pid and the file's inode), instead of sleeping a fixed time and hoping it got there. Where the
    kernel has no /proc/locks, waits 20 s, the time a tiny-BERT run takes to reach the lock."""
    locks = Path("/proc/locks")
    if not locks.is_file():
        with pytest.raises(subprocess.TimeoutExpired):
            job.wait(timeout=20)
        return
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and job.poll() is None:
        inode = lock_file.stat().st_ino if lock_file.exists() else None
        for line in locks.read_text().splitlines():
            fields = line.split()
            if inode is not None and "->" in fields and fields[fields.index("->") + 4] == str(job.pid) \
                    and fields[fields.index("->") + 5].endswith(f":{inode}"):
                return
        time.sleep(0.1)
    raise AssertionError(f"the run (pid {job.pid}) never waited for {lock_file}; exit code {job.poll()}")


@pytest.mark.heavy  # CLI runs in subprocesses
def test_a_run_waits_for_the_output_folder_and_reports_every_record_in_it(args, tmp_path):
    """While another writer holds the folder, a run writes nothing; once it may, its reports hold
    what the other wrote in the meantime (a record of another method)."""
    from harness.runner.records.lock import output_lock

    out, cache = tmp_path / "out", tmp_path / "cache"
    command = [sys.executable, str(ROOT / "run_bench.py"), *args, "--cache-dir", str(cache), "--no-progress"]
    assert subprocess.run([*command, "--methods", "random", "--output-dir", str(tmp_path / "other")],
                          capture_output=True).returncode == 0
    (other,) = (tmp_path / "other" / "runs").glob("random__*.json")
    with output_lock(out):
        job = subprocess.Popen([*command, "--methods", "avg", "--output-dir", str(out)], stderr=subprocess.PIPE,
                               text=True)
        wait_until_blocked_on(out / ".sts-bench.lock", job)  # encoded and scored, then waiting for the lock
        assert job.poll() is None
        assert not list((out / "runs").glob("avg__*.json"))
        (out / "runs").mkdir(parents=True, exist_ok=True)
        shutil.copy(other, out / "runs" / other.name)
    assert job.wait(timeout=120) == 0, job.stderr.read()
    board = (out / "leaderboard.csv").read_text()
    assert "avg" in board and "random" in board and "random" in (out / "index.html").read_text()


@pytest.mark.heavy  # two CLI runs in subprocesses
def test_two_runs_into_one_output_folder_both_reach_every_report(args, tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    command = [sys.executable, str(ROOT / "run_bench.py"), *args, "--cache-dir", str(cache), "--output-dir",
               str(out), "--no-progress", "--bootstrap", "200"]
    assert subprocess.run([*command, "--methods", "avg", "first-last"], capture_output=True).returncode == 0  # warm
    for trial in range(3):
        jobs = [subprocess.Popen([*command, "--methods", m, "--seed", str(trial)], stderr=subprocess.DEVNULL)
                for m in ("avg", "first-last")]
        assert [job.wait(timeout=300) for job in jobs] == [0, 0]
        board = pd.read_csv(out / "leaderboard.csv")
        assert {"avg", "first-last"} <= set(board["method"])
        page = (out / "index.html").read_text()
        assert "<td>avg<" in page and "<td>first-last<" in page


# -- a warm cache never hides a change -------------------------------------------------------------

def test_weights_replaced_in_place_with_their_mtime_restored_are_seen(bench, args, tiny_bert, tmp_path):
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    model = tmp_path / "model"
    shutil.copytree(tiny_bert, model)
    run = ["--methods", "avg", *[a if a != str(tiny_bert) else str(model) for a in args]]
    assert bench(*run)[0] == 0
    before = records(tmp_path / "out")[0]["scores"]["spearman"]
    weights = model / "model.safetensors"
    stat = weights.stat()
    tensors = load_file(str(weights))
    with safe_open(str(weights), "np") as handle:
        metadata = handle.metadata()
    name = next(k for k in tensors if k.endswith("word_embeddings.weight"))
    tensors[name] = np.ascontiguousarray(tensors[name][::-1])  # same size, other content
    save_file(tensors, str(weights), metadata=metadata)
    assert weights.stat().st_size == stat.st_size
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as rsync -a / touch -r leave it
    assert bench(*run)[0] == 0
    after = records(tmp_path / "out")
    assert len(after) == 2  # new weights, a new record
    fresh = [r["scores"]["spearman"] for r in after if r["scores"]["spearman"] != before]
    assert bench(*run, "--cache-dir", str(tmp_path / "fresh"), "--output-dir", str(tmp_path / "fresh-out"))[0] == 0
    assert fresh == [records(tmp_path / "fresh-out")[0]["scores"]["spearman"]]


@pytest.mark.heavy  # CLI runs in subprocesses
def test_a_changed_method_is_recomputed_on_a_warm_cache(args, tmp_path):
    """A copy of the tree whose whitening is changed (the bug the issue planted), run on the cache the
    original warmed: its score is the changed code's, the same as on an empty cache."""
    tree = tree_copy(tmp_path / "tree")

    def run(root: Path, cache: str, out: str) -> float:
        done = subprocess.run([sys.executable, str(root / "run_bench.py"), "--methods", "whitening", *args,
                               "--bootstrap", "0", "--cache-dir", str(tmp_path / cache), "--output-dir",
                               str(tmp_path / out), "--no-progress"], capture_output=True, text=True, cwd=root)
        assert done.returncode == 0, done.stderr[-2000:]
        (path,) = (tmp_path / out / "runs").glob("whitening__*.json")
        return json.loads(path.read_text())["scores"]["spearman"]

    original = run(tree, "cache", "out-a")
    whitening = tree / "methods" / "whitening.py"
    text = whitening.read_text()
    assert "/ np.sqrt(s[:keep])" in text
    whitening.write_text(text.replace("/ np.sqrt(s[:keep])", "* np.sqrt(s[:keep])"))
    changed_warm = run(tree, "cache", "out-b")
    changed_cold = run(tree, "cache-empty", "out-c")
    assert changed_warm == changed_cold != original


def test_identical_vectors_after_encoding_are_one_error_line(bench, args, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a man is playing\nA MAN IS PLAYING\n")  # two lines, one sentence to an uncased model
    code, _, err = bench("--methods", "whitening", "--fit-corpus", str(corpus), *args)
    assert code == 2 and "Traceback" not in err  # found once encoded: the last line is the one error line
    assert err.strip().splitlines()[-1].startswith("error: whitening: the fit set's 2 vectors are all identical")


# -- lengths, tasks, signals, folders --------------------------------------------------------------

def test_max_length_above_the_model_is_capped_with_one_warning_and_recorded(bench, args, tmp_path, caplog):
    code, _, err = bench("--methods", "avg", *args, "--max-length", "100000")
    assert code == 0, err
    warnings = [r.getMessage() for r in caplog.records if "max-length" in r.getMessage()]
    assert len(warnings) == 1 and "reads at most 64 tokens; using 64" in warnings[0]
    (record,) = records(tmp_path / "out")
    assert record["protocol"]["max_length"] == 64 and record["method"]["spec"]["max_length"] == 64
    code, _, err = bench("--methods", "avg", *args, "--max-length", "64", "--output-dir", str(tmp_path / "o64"))
    assert code == 0 and records(tmp_path / "o64")[0]["scores"] == record["scores"]


def test_a_task_named_twice_is_scored_once(bench, args, tmp_path, caplog):
    code, _, err = bench("--methods", "avg", *args[:1], "stsb", "STS-B", *args[2:])
    assert code == 0, err
    assert len(records(tmp_path / "out")) == 1
    assert len((tmp_path / "out" / "history.jsonl").read_text().splitlines()) == 1
    assert any("scored once" in r.getMessage() for r in caplog.records)


def test_sigterm_ends_like_ctrl_c(bench, args, tmp_path, monkeypatch):
    import signal

    import harness.runner.execution.run as scheduler

    def terminated(plan, ctx):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not stop the run")

    monkeypatch.setattr(scheduler, "encode_stage", terminated)
    previous = signal.getsignal(signal.SIGTERM)
    code, _, err = bench("--methods", "avg", *args)
    assert code == 143 and "terminated (SIGTERM)" in err and "run the same command again to resume" in err
    assert signal.getsignal(signal.SIGTERM) == previous  # the CLI's handler does not outlive the run


@pytest.mark.parametrize("folder", ["vectors", "vectors/<key>", "reports"])
def test_a_read_only_cache_subfolder_fails_before_encoding(bench, args, tmp_path, folder):
    cache = tmp_path / "cache"
    assert bench("--methods", "avg", *args)[0] == 0
    target = cache / "vectors" / next(p.name for p in (cache / "vectors").iterdir()) if folder == "vectors/<key>" \
        else cache / folder
    shutil.rmtree(target)
    with tmpfs(target, read_only=True):
        code, _, err = bench("--methods", "avg", "cls", *args, "--seed", "9")
        line = one_error_line(err)
    assert code == 3 and "read-only file system" in line and str(target) in line
    assert not list((tmp_path / "out" / "runs").glob("cls__*.json"))  # nothing computed
