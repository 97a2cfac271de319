"""A disk that fills up or cannot be written, on a small tmpfs: one ``error:`` line, exit 3, the
earlier outputs intact and no partial file, and the next run loses nothing. Mounting needs root
and mount(8); where the tests may not mount, they are skipped with that reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "2m", read_only: bool = False):
    """A small tmpfs at ``path``; skips the test (with the reason) where it cannot be mounted."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8); the disk-full cases are not run here")
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()[:120]}); the disk-full cases are not run")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(disk: Path, leave: int) -> None:
    """Fill ``disk`` until ``leave`` bytes are free."""
    free = shutil.disk_usage(disk).free
    (disk / "filler").write_bytes(b"\0" * max(0, free - leave))


def run_args(senteval_root, tiny_bert, cache: Path, out: Path, *extra: str) -> list[str]:
    return ["--methods", "avg", "first-last", "--tasks", "stsb", "sts12", "--source", "senteval", "--senteval-dir",
            str(senteval_root), "--backbone", str(tiny_bert), "--bootstrap", "0", "--cache-dir", str(cache),
            "--output-dir", str(out), *extra]


def leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.startswith(".tmp-") or p.name.startswith(".write-test")]


def test_a_full_cache_disk_is_one_line_and_the_next_run_loses_nothing(bench, senteval_root, tiny_bert, tmp_path):
    with tmpfs(tmp_path / "disk") as disk:
        fill(disk, leave=3 * 4096)
        code, _out, err = bench(*run_args(senteval_root, tiny_bert, disk / "cache", tmp_path / "out"))
        assert code == 3 and "disk full" in err.strip().splitlines()[-1] and "Traceback" not in err
        assert err.strip().splitlines()[-1].startswith("error: ") and not leftovers(disk)
        (disk / "filler").unlink()
        assert bench(*run_args(senteval_root, tiny_bert, disk / "cache", tmp_path / "out"))[0] == 0
        resumed = sorted(json.loads(p.read_text())["scores"]["spearman"] for p in (tmp_path / "out").glob("runs/*"))
    assert bench(*run_args(senteval_root, tiny_bert, tmp_path / "clean", tmp_path / "clean-out"))[0] == 0
    assert resumed == sorted(json.loads(p.read_text())["scores"]["spearman"]
                             for p in (tmp_path / "clean-out").glob("runs/*"))


def test_a_full_output_disk_leaves_the_previous_files_intact(bench, senteval_root, tiny_bert, tmp_path):
    with tmpfs(tmp_path / "disk") as disk:
        args = run_args(senteval_root, tiny_bert, tmp_path / "cache", disk / "out")
        assert bench(*args)[0] == 0
        before = {p: p.read_bytes() for p in (disk / "out").rglob("*") if p.is_file()}
        assert disk / "out" / "plots" / "leaderboard.png" in before
        fill(disk, leave=2 * 4096)
        code, _out, err = bench(*args, "--seed", "7")  # other seed: other CIs, every output rewritten
        assert code == 3 and err.strip().splitlines()[-1].startswith("error: disk full") and "Traceback" not in err
        assert not leftovers(disk)  # no partial file behind
        png = disk / "out" / "plots" / "leaderboard.png"
        assert png.read_bytes() == before[png]  # the good earlier plot, not a truncated one
        for path in (disk / "out" / "runs").glob("*.json"):  # each result is the old file or a whole new one
            assert json.loads(path.read_text())["scores"]


@pytest.mark.parametrize("flag", ["--cache-dir", "--output-dir"])
def test_a_read_only_folder_is_one_line_before_any_work(flag, bench, senteval_root, tiny_bert, tmp_path):
    with tmpfs(tmp_path / "ro", read_only=True) as disk:
        dirs = {"--cache-dir": tmp_path / "cache", "--output-dir": tmp_path / "out", flag: disk / "x"}
        code, _out, err = bench(*run_args(senteval_root, tiny_bert, dirs["--cache-dir"], dirs["--output-dir"]))
    assert code == 3 and err.strip() == err.strip().splitlines()[0]
    assert err.startswith(f"error: {flag} {disk / 'x'}: cannot write there: read-only file system")
    assert not list(tmp_path.glob("cache/vectors/*/part-*.npy"))
