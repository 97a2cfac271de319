"""The output folder's own files (issue 52): the lock file and the temporary file of a write a killed
run never finished are ignored by git in this checkout, and such temporary files are removed by the
next run that holds the folder's lock: only files named as the tool names them, only in the folder
and its tool folders, and never without the lock."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from harness.runner.records import lock

# A writer that holds the lock, as a run writing a record does, and is SIGKILLed between writing its
# temporary file and renaming it over the file's name.
KILLED_WRITER = """
import sys, time
from pathlib import Path
from harness.core import hashing
from harness.runner.records.lock import output_lock

def stop(*args):
    print("written", flush=True)
    time.sleep(600)

hashing.os.replace = stop  # this process only: it is killed here, its temporary file whole
with output_lock(Path(sys.argv[1])):
    hashing.atomic_write_text(Path(sys.argv[1]) / sys.argv[2], "{}")
"""


def killed_write(out: Path, name: str) -> None:
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(out), name], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "written\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL


def files(out: Path) -> set[str]:
    return {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() or p.is_symlink()}


def planted(out: Path) -> set[str]:
    """Two writes killed under the lock (a record, then an MTEB result file), and what must stay."""
    killed_write(out, "runs/r.json")
    (first,) = (out / "runs").glob(".tmp-*")
    killed_write(out, "mteb/model/revision/STSBenchmark.json")
    assert not first.exists()  # the second run, once it held the lock, removed the first one's
    shutil.copyfile(next((out / "mteb").rglob(".tmp-*")), first)  # planted again, for the next holder
    stale = {p for p in files(out) if ".tmp-" in p}
    assert len(stale) == 2 and all(re.fullmatch(r"(runs|mteb/model/revision)/\.tmp-\d+-[0-9a-f]{8}-\S+\.json", p)
                                   for p in stale), stale
    (out / "runs" / "kept.json").write_text("{}")
    (out / "runs" / ".tmp-notes.txt").write_text("a user's file, not named as the tool names its own")
    (out / ".tmp-1-0123abcd-index.html").write_text("a page never renamed into place")
    (out / "plots" / ".tmp-1-0123abcd-link.png").parent.mkdir()
    (out / "plots" / ".tmp-1-0123abcd-link.png").symlink_to(out / "runs" / "kept.json")
    (out / "cache").mkdir()
    (out / "cache" / ".tmp-1-0123abcd-part.npy").write_text("another folder: not the tool's to clear")
    return stale | {".tmp-1-0123abcd-index.html"}


def test_a_killed_runs_temporary_files_are_removed_by_the_next_holder_of_the_lock(tmp_path):
    out = tmp_path / "results"
    stale = planted(out)
    before = files(out)
    with lock.output_lock(out):
        assert files(out) == before - stale
    assert files(out) == before - stale  # and the rest is untouched
    assert {".sts-bench.lock", "runs/kept.json", "runs/.tmp-notes.txt", "plots/.tmp-1-0123abcd-link.png",
            "cache/.tmp-1-0123abcd-part.npy"} <= files(out)


def test_without_a_lock_no_temporary_file_is_removed(tmp_path, monkeypatch):
    """Where flock is missing (not POSIX) runs do not take turns: a temporary file may be another run's
    write in flight, so nothing is removed."""
    out = tmp_path / "results"
    planted(out)
    before = files(out)
    monkeypatch.setattr(lock, "fcntl", None)
    with lock.output_lock(out):
        pass
    assert files(out) == before


def test_the_lock_and_temporary_files_of_results_are_ignored_by_git():
    """A run into results/ leaves nothing in `git status`: its lock file stays (removing it would let
    a waiting run and a new one write at once) and a killed write's temporary file until the next run."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    paths = ["results/.sts-bench.lock", "results/.tmp-12-0123abcd-leaderboard.md",
             "results/.tmp-12-0123abcd-index.html", "results/runs/.tmp-12-0123abcd-avg.json",
             "results/mteb/m/r/.tmp-12-0123abcd-STS12.json", "results/plots/.tmp-12-0123abcd-leaderboard.png",
             "results/history/.tmp-12-0123abcd-ab.npy"]
    shown = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=ROOT, capture_output=True, text=True)
    assert shown.stdout.split() == paths
    kept = subprocess.run(["git", "check-ignore", "--no-index", "results/baselines/embedded-default.csv"], cwd=ROOT)
    assert kept.returncode == 1  # the committed baselines are not ignored


def test_the_folder_is_walked_for_temporary_files_once_a_process_not_once_a_record(tmp_path, monkeypatch):
    """The run takes the lock for each record it writes: walking runs/ every time grew with the folder's
    history. The first holder in a process clears; later ones in that process do not walk again."""
    out = tmp_path / "results"
    stale = planted(out)
    walked: list[str] = []
    real_walk = lock.os.walk
    monkeypatch.setattr(lock.os, "walk", lambda top, *a, **k: walked.append(str(top)) or real_walk(top, *a, **k))
    for _ in range(3):
        with lock.output_lock(out):
            pass
    assert not stale & files(out)
    assert len(walked) == len(lock.FOLDERS)  # one walk of each tool folder, for three holders
