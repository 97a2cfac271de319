"""The output folder is closed (issue 30, rows 7 and 8): no read or write in it follows a symbolic
link. Each case builds the situation as an attacker would, with ``os.symlink`` in the output folder
between two runs of the real CLI, and checks that nothing outside the folder changed (the target's
bytes), the one warning or error line, and the values that must be there instead.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import struct
import zlib
from pathlib import Path

import pytest

from harness.runner.history.log import read_history
from harness.runner.records.lock import FOLDERS


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One vector cache for the module: the second run of each case encodes nothing."""
    return tmp_path_factory.mktemp("trust-cache")


@pytest.fixture
def args(senteval_root, tiny_bert, cache) -> list[str]:
    return ["--methods", "avg", "--tasks", "stsb", "--source", "senteval", "--senteval-dir", str(senteval_root),
            "--backbone", str(tiny_bert), "--bootstrap", "0", "--cache-dir", str(cache)]


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder beside the output folder, standing for the rest of the user's disk."""
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


def snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder``, never following a link: a file's bytes, a link's target."""
    found: dict[str, bytes | str] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root) / name
            rel = str(path.relative_to(folder))
            if path.is_symlink():
                found[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                found[rel] = path.read_bytes()
    return found


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


def png(width: int = 1, text: bytes | None = b"Software\0GIMP 2.10") -> bytes:
    """A whole, valid grey PNG as another program writes one (its own Software text)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, 1, 8, 0, 0, 0, 0)
    extra = chunk(b"tEXt", text) if text is not None else b""
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + extra
            + chunk(b"IDAT", zlib.compress(b"\0" + b"\x80" * width)) + chunk(b"IEND", b""))


def record(out: Path) -> dict:
    (path,) = (out / "runs").glob("*.json")
    return json.loads(path.read_text(encoding="utf-8"))


# -- row 7: history.jsonl ----------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["a-file", "dangling"])
def test_a_history_link_is_replaced_and_its_target_untouched(bench, args, tmp_path, outside, caplog, target):
    out = tmp_path / "out"
    assert bench(*args)[0] == 0
    victim = outside / "bashrc"
    if target == "a-file":
        victim.write_bytes(b"export PATH=/usr/bin\n")
    before = snapshot(outside)
    (out / "history.jsonl").unlink()
    os.symlink(victim, out / "history.jsonl")
    caplog.clear()
    code, _, err = bench(*args)
    assert code == 0, err
    assert snapshot(outside) == before  # no line appended to the target; a dangling one is not created
    said = [w for w in warnings(caplog) if "history.jsonl" in w]
    assert len(said) == 1 and f"was a symbolic link (to {victim})" in said[0] and "target is untouched" in said[0]
    path = out / "history.jsonl"
    assert not path.is_symlink() and path.is_file()
    (entry,) = read_history(out)  # this run's line only: the target's lines were never read
    assert entry["score"] == record(out)["scores"]["spearman"] and entry["method"] == "avg"


def test_a_fifo_under_the_history_name_is_one_line_not_a_hang(bench, args, tmp_path):
    out = tmp_path / "out"
    assert bench(*args)[0] == 0
    (out / "history.jsonl").unlink()
    os.mkfifo(out / "history.jsonl")
    code, _, err = bench(*args)
    assert code == 3 and error_lines(err) == [f"error: {out / 'history.jsonl'} is not a regular file; sts-bench "
                                              "appends its history there: remove it"]


# -- row 8: the page's images ------------------------------------------------------------------------

def test_the_page_embeds_only_pngs_the_tool_wrote(bench, args, tmp_path, outside, caplog):
    from harness.runner.tables.plots import _pyplot, save_figure

    out = tmp_path / "out"
    assert bench(*args)[0] == 0  # plots/leaderboard.png, drawn by the tool (history.png from a second commit on)
    plots = out / "plots"
    assert sorted(p.name for p in plots.iterdir()) == ["leaderboard.png"]
    secret = outside / "id_rsa"
    secret.write_bytes(b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n")
    drawn = outside / "drawn.png"  # drawn just as the tool draws, but outside the folder: the link decides
    figure = _pyplot().figure()
    figure.gca().plot([0, 1], [1, 0])
    save_figure(figure, drawn, input_key="elsewhere")
    os.symlink(secret, plots / "secret.png")
    os.symlink(drawn, plots / "drawn.png")
    (plots / "foreign.png").write_bytes(png())  # a whole PNG of another program
    (plots / "bare.png").write_bytes(png(text=None))  # no text chunk at all
    (plots / "notes.png").write_bytes(b"not an image")
    (plots / "cut.png").write_bytes((plots / "leaderboard.png").read_bytes()[:-20])  # the tool's, truncated
    before = snapshot(outside)
    caplog.clear()
    code, _, err = bench(*args, "--history")  # rebuilds index.html from the folder
    assert code == 0, err
    page = (out / "index.html").read_text(encoding="utf-8")
    embedded = [base64.b64decode(src.split(",", 1)[1]) for src in re.findall(r"<img [^>]*src='([^']*)'", page)]
    assert embedded == [(plots / "leaderboard.png").read_bytes()]
    assert base64.b64encode(secret.read_bytes()).decode() not in page and b"OPENSSH" not in b"".join(embedded)
    said = {re.search(r"plots/(\S+\.png)", w)[1]: w for w in warnings(caplog) if "left out of the page" in w}
    assert sorted(said) == ["bare.png", "cut.png", "drawn.png", "foreign.png", "notes.png", "secret.png"]
    assert len([w for w in warnings(caplog) if "left out of the page" in w]) == 6  # one each
    assert f"is a symbolic link (to {secret})" in said["secret.png"]
    assert f"is a symbolic link (to {drawn})" in said["drawn.png"]
    assert "did not write" in said["foreign.png"] and "did not write" in said["bare.png"]
    assert "no PNG signature" in said["notes.png"] and "damaged PNG" in said["cut.png"]
    assert snapshot(outside) == before


# -- the rest of the folder: folders refused, file links replaced --------------------------------------

@pytest.mark.parametrize("name", FOLDERS)
def test_a_linked_folder_of_the_tool_is_refused_before_anything_is_written(bench, args, tmp_path, outside, name):
    out = tmp_path / "out"
    assert bench(*args)[0] == 0
    shutil.move(out / name, outside / name)  # what the link points to: the folder, moved out
    os.symlink(outside / name, out / name)
    before, kept = snapshot(outside), snapshot(out)
    code, _, err = bench(*args)
    assert code == 3, err
    assert error_lines(err) == [f"error: {out / name} is a symbolic link (to {outside / name}); sts-bench reads and "
                                f"writes inside the output folder {out} only through real folders, so nothing it "
                                "writes lands elsewhere: remove the link (or move what it points to into its place)"]
    assert snapshot(outside) == before and snapshot(out) == kept  # nothing written, in or out


def test_a_linked_folder_below_mteb_is_refused_with_one_line(bench, args, tmp_path, outside):
    out = tmp_path / "out"
    assert bench(*args)[0] == 0
    (model,) = (out / "mteb").iterdir()
    shutil.move(model, outside / model.name)
    os.symlink(outside / model.name, model)
    before = snapshot(outside)
    code, _, err = bench(*args)
    assert code == 3 and len(error_lines(err)) == 1 and "Traceback" not in err
    assert error_lines(err)[0].startswith(f"error: {model} is a symbolic link (to {outside / model.name}) inside "
                                          f"the output folder {out}; ")
    assert snapshot(outside) == before


def test_file_links_where_the_tool_writes_are_replaced_not_written_through(bench, args, tmp_path, outside, caplog):
    out = tmp_path / "out"
    assert bench(*args)[0] == 0
    first = record(out)
    (meta,) = (out / "mteb").glob("*/*/model_meta.json")
    (result,) = (out / "mteb").glob("*/*/STS*.json")
    (run,) = (out / "runs").glob("*.json")
    forged = {**json.loads(meta.read_text()), "training_datasets": ["forged"]}
    written = [run, out / "leaderboard.csv", out / "leaderboard.md", out / "scores.csv", out / "significance.csv",
               out / "index.html", out / "history.md", out / "plots" / "leaderboard.png", result, meta,
               out / ".sts-bench.lock"]
    for i, path in enumerate(written):
        victim = outside / f"victim-{i}"
        victim.write_bytes(json.dumps(forged).encode() if path == meta else f"victim {i}\n".encode())
        path.unlink()
        os.symlink(victim, path)
    os.symlink(outside / "nothing-here", out / "history" / f"{'0' * 64}.npy")  # never written through either
    before = snapshot(outside)
    caplog.clear()
    code, _, err = bench(*args)
    assert code == 0, err
    assert snapshot(outside) == before
    for path in written:
        assert not path.is_symlink() and path.is_file(), path
    again = record(out)
    assert again["scores"]["spearman"] == first["scores"]["spearman"] and again["created"] >= first["created"]
    assert json.loads(meta.read_text())["training_datasets"] is None  # the forged list was never read
    assert json.loads(result.read_text())["scores"]["test"][0]["main_score"] == \
        pytest.approx(first["scores"]["spearman"] / 100, abs=1e-6)
    said = warnings(caplog)
    assert [w for w in said if "model_meta.json" in w] == [f"mteb: {meta} is a symbolic link (to {outside}/victim-9)"
                                                           "; not read (it is written again as a file)"]
    assert len([w for w in said if ".sts-bench.lock was a symbolic link" in w]) == 1
    assert not (outside / "nothing-here").exists()


def test_a_linked_paper_table_is_left_out_of_the_page(bench, args, tmp_path, outside, caplog):
    out = tmp_path / "out"
    assert bench(*args)[0] == 0
    table = outside / "paper-secret.csv"
    table.write_text("paper,table,model,setting,task,published,measured,delta,status\n"
                     "leak,T,m,s,STS-B,1.0,2.0,1.0,ran\n", encoding="utf-8")
    os.symlink(table, out / "paper-secret.csv")
    caplog.clear()
    assert bench(*args, "--history")[0] == 0
    assert "leak" not in (out / "index.html").read_text(encoding="utf-8")
    assert [w for w in warnings(caplog) if "paper-secret.csv" in w] == \
        [f"report: {out / 'paper-secret.csv'} is a symbolic link (to {table}); left out of the page"]


def test_history_alone_reads_no_linked_history_and_writes_nothing_through_it(bench, args, tmp_path, outside, caplog):
    out = tmp_path / "out"
    assert bench(*args)[0] == 0
    victim = outside / "other-history.jsonl"
    shutil.move(out / "history.jsonl", victim)  # a real history, but outside: its lines must not be read
    os.symlink(victim, out / "history.jsonl")
    before = snapshot(outside)
    caplog.clear()
    code, _, err = bench(*args, "--history")
    assert code == 0, err
    assert snapshot(outside) == before and (out / "history.jsonl").is_symlink()  # --history appends nothing
    assert [w for w in warnings(caplog) if "history.jsonl" in w] == \
        [f"history: {out / 'history.jsonl'} is a symbolic link (to {victim}); not read (the next run replaces it by "
         "a file of its own)"]
    assert "No history yet" in (out / "index.html").read_text(encoding="utf-8")


def test_a_page_built_beside_a_linked_plots_folder_embeds_none_of_it(tmp_path, outside, caplog):
    """The page on its own (as the paper runner and tests call it): a plots/ link is listed nowhere."""
    from harness.runner.page.html import write_report

    out = tmp_path / "out"
    out.mkdir()
    (outside / "photo.png").write_bytes(png())
    os.symlink(outside, out / "plots")
    before = snapshot(outside)
    caplog.clear()
    page = write_report([], set(), [], out).read_text(encoding="utf-8")
    assert "<img" not in page and "No plot." in page and snapshot(outside) == before
    assert warnings(caplog) == [f"report: {out / 'plots'} is a symbolic link (to {outside}); its images are left "
                                "out of the page"]


def test_a_linked_folder_in_an_export_is_refused_and_a_linked_file_is_not_read(bench, args, tmp_path, outside):
    from harness.core.errors import UserError
    from harness.runner.execution.export import read_embeddings

    vectors = tmp_path / "vectors"
    assert bench(*args, "--export-embeddings", str(vectors))[0] == 0
    (backbone,) = vectors.iterdir()
    folder = backbone / "avg" / "stsb" / "test"
    victim = outside / "sentences.jsonl"
    shutil.copy(folder / "sentences.jsonl", victim)  # the same bytes: only the link can refuse it
    (folder / "sentences.jsonl").unlink()
    os.symlink(victim, folder / "sentences.jsonl")
    with pytest.raises(UserError, match=r"not a complete embeddings export \(NotAFile: .*is a symbolic link"):
        read_embeddings(folder)
    shutil.move(backbone, outside / backbone.name)
    os.symlink(outside / backbone.name, backbone)
    before = snapshot(outside)
    code, _, err = bench(*args, "--export-embeddings", str(vectors))
    assert code == 3 and len(error_lines(err)) == 1
    assert error_lines(err)[0].startswith(f"error: {backbone} is a symbolic link (to {outside / backbone.name}) "
                                          f"inside the export folder {vectors}; ")
    assert snapshot(outside) == before
