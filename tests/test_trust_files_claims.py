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
        assert len(said) == 1 and "not a regular file" in said[0], done.stderr
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


# -- (b), (c) a model folder checked before it is loaded -----------------------------------------------

@pytest.fixture
def model(tiny_bert, tmp_path) -> Path:
    """A copy of the tiny BERT that a case may damage."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_bert, folder)
    return folder


def pairs_args(tmp_path: Path, backbone: Path) -> list[str]:
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("sentence1\tsentence2\tscore\n" + "".join(
        f"the {a} sat\tthe {b} sat down\t{g}\n" for a, b, g in
        [("cat", "cat", 4.0), ("dog", "fox", 1.0), ("fox", "dog", 2.0), ("cat", "dog", 0.5), ("dog", "dog", 5.0)]),
        encoding="utf-8")
    return ["--methods", "avg", "--tasks", f"file:{pairs}", "--backbone", str(backbone), "--bootstrap", "0",
            "--no-plots"]


def test_a_model_folder_without_tokenizer_files_is_one_error_line_not_a_score(bench, model, tmp_path):
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (model / name).unlink(missing_ok=True)
    code, _, err = bench(*pairs_args(tmp_path, model))  # main: every token [UNK], a score, exit 0
    assert code == 2, err
    # the tokenizer transformers builds without files reads no word (issue 51's round trip refuses it)
    assert error_lines(err) == [
        f"error: the tokenizer of {model} reads no word (tokens {['[UNK]'] * 7}) on "
        "'A man is playing a guitar.'; copy the tokenizer files saved with the model into the folder again "
        "(tokenizer.save_pretrained(folder))"]
    assert not (tmp_path / "out" / "runs").exists()


def test_a_tokenizer_file_that_does_not_parse_is_one_error_line_naming_it(bench, model, tmp_path):
    path = model / "tokenizer.json"
    assert path.is_file()
    path.write_bytes(path.read_bytes()[:300])  # cut: before, tokenizers' bare Exception, "a bug in sts-bench"
    code, _, err = bench(*pairs_args(tmp_path, model))
    assert code == 2, err
    (line,) = error_lines(err)
    # the one intake reads it first (issue 51): its JSON, then its schema; tokenizers' own check stays behind
    assert line.startswith(f"error: {path}: not valid JSON (")
    assert line.endswith("; download or copy the model again so that the file is whole, or correct the field")
    assert "Traceback" not in err and not (tmp_path / "out" / "runs").exists()


def _truncated(path: Path) -> str:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    return "holds"


def _header_length(path: Path) -> str:
    data = bytearray(path.read_bytes())
    data[:8] = (1 << 40).to_bytes(8, "little")
    path.write_bytes(bytes(data))
    return "declares a 1,099,511,627,776-byte header"


def _header_json(path: Path) -> str:
    data = bytearray(path.read_bytes())
    data[8] = ord("[")  # '{' -> '[': still the declared length, no longer JSON
    path.write_bytes(bytes(data))
    return "not valid JSON"


def _cut_in_header(path: Path) -> str:
    data = path.read_bytes()
    path.write_bytes(data[:20])
    return "after its length"


@pytest.mark.parametrize("damage", [_truncated, _header_length, _header_json, _cut_in_header])
def test_a_damaged_safetensors_file_is_one_error_line_naming_it(bench, model, tmp_path, damage):
    said = damage(model / "model.safetensors")  # main: a traceback, or "out of memory" (exit 3)
    code, _, err = bench(*pairs_args(tmp_path, model))
    assert code == 2, err
    assert "Traceback" not in err
    (line,) = error_lines(err)
    assert line.startswith(f"error: backbone {model}: {model / 'model.safetensors'} ") and said in line, line
    assert line.endswith("; download or copy the model again so that the file is whole, and pass its folder "
                         "with --backbone /path/to/model")


def test_a_whole_safetensors_file_passes_the_check(tiny_bert):
    from harness.core.encoding.backbone import safetensors_header

    header = safetensors_header(tiny_bert / "model.safetensors")
    assert any(key.endswith("word_embeddings.weight") for key in header)


# -- (d) an output subfolder that is a link ----------------------------------------------------------------

def snapshot(folder: Path) -> dict[str, bytes | str]:
    found: dict[str, bytes | str] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            found[str(path.relative_to(folder))] = ("-> " + os.readlink(path) if path.is_symlink()
                                                    else path.read_bytes() if path.is_file() else "dir")
    return found


def test_a_linked_embeddings_folder_in_the_output_is_refused_not_written_through(bench, model, tmp_path):
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    os.symlink(outside, out / "embeddings")
    code, _, err = bench(*pairs_args(tmp_path, model), "--export-embeddings", str(out / "embeddings"))
    assert code == 3, err  # main: exit 0, the vectors written into outside/
    assert error_lines(err) == [
        f"error: {out / 'embeddings'} is a symbolic link (to {outside}) inside the output folder {out}; sts-bench "
        "reads and writes there only through real folders, so nothing of it lands elsewhere: remove the link (or "
        "move what it points to into its place)"]
    assert snapshot(outside) == {}  # not even the writability probe
    assert not (out / "runs").exists()  # refused before anything was computed


def test_an_export_folder_outside_the_output_may_itself_be_a_link(bench, model, tmp_path):
    real, link = tmp_path / "real-export", tmp_path / "export"
    real.mkdir()
    os.symlink(real, link)  # where the user keeps exports is the user's choice
    code, _, err = bench(*pairs_args(tmp_path, model), "--export-embeddings", str(link))
    assert code == 0, err
    assert list(real.rglob("meta.json"))


# -- (e) a folder given as a file ------------------------------------------------------------------------

def test_a_directory_given_as_a_pairs_file_is_called_a_directory(bench, model, tmp_path):
    folder = tmp_path / "pairs-dir"
    folder.mkdir()
    args = pairs_args(tmp_path, model)
    args[args.index("--tasks") + 1] = f"file:{folder}"
    code, _, err = bench(*args)
    assert code == 2, err  # main: "no such file"
    (line,) = error_lines(err)
    assert f"{folder}: is a directory, not a file (a CSV, TSV or JSONL file of sentence pairs)" in line, line
    assert "no such file" not in line


@pytest.mark.parametrize("flag", ["--baseline", "--config"])
def test_a_directory_given_as_a_baseline_or_config_is_called_a_directory(bench, model, tmp_path, flag):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    code, _, err = bench(*pairs_args(tmp_path, model), flag, str(folder))
    assert code == 2, err
    (line,) = error_lines(err)
    assert line.startswith(f"error: {flag}: {folder}: is a directory, not a file"), line  # the one intake's form
