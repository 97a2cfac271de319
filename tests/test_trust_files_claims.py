"""Files are what they claim before they are read (issue 42): a cache part, a memo or a model file
is checked to be a regular file of a known size, and a model folder to be complete, before a byte
of it is hashed or loaded; an output subfolder is never written through a link; a folder given as
a file is called a folder.

A case that hung on main runs the real CLI in a subprocess under a timeout, so a regression fails
the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


def cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess: a hang is a ``TimeoutExpired`` (the test fails), not a hung
    suite."""
    return subprocess.run([sys.executable, str(ROOT / "run_bench.py"), *args, "--no-progress", "--no-plots"],
                          cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture
def args(senteval_root, tiny_bert, tmp_path) -> list[str]:
    return ["--methods", "avg", "--tasks", "stsb", "--source", "senteval", "--senteval-dir", str(senteval_root),
            "--backbone", str(tiny_bert), "--bootstrap", "0", "--cache-dir", str(tmp_path / "cache"),
            "--output-dir", str(tmp_path / "out")]


@pytest.fixture
def deadline():
    """An in-process case that could hang (a FIFO read) raises TimeoutError after 20 s instead."""
    def expired(*_):
        raise TimeoutError("hung reading a file that is not a regular file")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def spearman(out: Path) -> float:
    (path,) = (out / "runs").glob("*.json")
    return json.loads(path.read_text(encoding="utf-8"))["scores"]["spearman"]


# -- (a) a FIFO or a device under a cache file's name ------------------------------------------------

@pytest.mark.parametrize("plant", ["fifo-part", "dev-zero-part", "fifo-code-digests"])
def test_a_fifo_or_a_device_in_the_cache_is_never_read_and_the_run_ends(bench, args, tmp_path, plant):
    assert bench(*args)[0] == 0
    first = spearman(tmp_path / "out")
    cache = tmp_path / "cache"
    (store,) = (cache / "vectors").iterdir()
    name = "0" * 32  # sorts first: read before the real parts
    if plant == "fifo-part":
        target = store / f"part-{name}.npy"
        os.mkfifo(target)
    elif plant == "dev-zero-part":
        target = store / f"part-{name}.npy"
        os.symlink("/dev/zero", target)
    else:
        target = cache / "code-digests.json"
        target.unlink(missing_ok=True)
        os.mkfifo(target)
    done = cli(*args, cwd=tmp_path, timeout=60)  # hung forever on main
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and not error_lines(done.stderr)
    assert spearman(tmp_path / "out") == first
    if plant.endswith("-part"):
        said = [line for line in done.stderr.splitlines() if str(target) in line]
        assert len(said) == 1 and "is not a regular file" in said[0], done.stderr
        assert not os.path.lexists(target)  # removed like a damaged part (a link: the link, not /dev/zero)


def test_hashing_and_reading_refuse_what_is_not_a_regular_file(tmp_path, deadline):
    from harness.core.hashing import NotAFile, file_sha256, read_regular

    os.mkfifo(tmp_path / "fifo")
    os.symlink("/dev/zero", tmp_path / "zero")
    (tmp_path / "folder").mkdir()
    for name, kind in [("fifo", "a FIFO"), ("zero", "a device"), ("folder", "a folder")]:
        for reader in (file_sha256, read_regular):
            with pytest.raises(NotAFile, match=kind):
                reader(tmp_path / name)
    (tmp_path / "file").write_bytes(b"abc")
    os.symlink(tmp_path / "file", tmp_path / "link")  # a link to a regular file is followed (a hub cache's blobs)
    assert read_regular(tmp_path / "link") == b"abc"
    assert file_sha256(tmp_path / "link") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_an_artifact_file_swapped_for_a_fifo_is_damaged_not_a_hang(tmp_path, deadline):
    from harness.core.artifacts import ArtifactCorrupt, ArtifactDir

    folder = ArtifactDir(tmp_path, "flow", {"k": 1})
    folder.commit({"weights.npy": b"0123"}, {})
    assert folder.verify() == (True, None)
    (folder.dir / "weights.npy").unlink()
    os.mkfifo(folder.dir / "weights.npy")
    with pytest.raises(ArtifactCorrupt, match="FIFO"):
        folder.read("weights.npy")
    shutil.rmtree(folder.dir)
