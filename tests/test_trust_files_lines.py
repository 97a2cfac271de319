"""Lines end at ``\\n`` (issue 30, row 11) and the minor cases of row 13: a gold score is a plain
decimal number, a JSONL sentence is a JSON string, whitening's k is not above the vectors'
dimension, a long ``harness.evaluate`` name is a working row, and a ``cache_key`` belongs to one
encoder. Each case is built as a user would (a file with U+2028 inside a sentence and a bad line
after it, a second encoder under a used key) and checked against values computed here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

import harness
from harness.core.data.tasks import get_task, load_task
from harness.core.errors import UserError
from harness.runner.execution.export import read_embeddings
from harness.runner.history.log import read_history

# Every character str.splitlines cuts at besides \n and \r: a sentence may hold each of them.
BREAKS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
ROWS = [(f"a man{BREAKS}plays", "a man plays", "4.0"), ("the cat\u2028sleeps", "a dog runs", "1.5"),
        ("two birds fly", "birds\x85fly", "3"), ("sun", "rain\x0cfalls", "0.5")]
PLAIN = [(a.translate(dict.fromkeys(map(ord, BREAKS), " ")), b.translate(dict.fromkeys(map(ord, BREAKS), " ")), g)
         for a, b, g in ROWS]  # the same pairs without the breaks, for the cases of row 13


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lines-cache")


@pytest.fixture
def args(tiny_bert, cache) -> list[str]:
    return ["--methods", "avg", "--backbone", str(tiny_bert), "--bootstrap", "0", "--no-plots",
            "--cache-dir", str(cache)]


def error_lines(err: str) -> list[str]:
    return [line for line in err.split("\n") if line.startswith("error:")]


def tsv(path: Path, rows, header: str = "sentence1\tsentence2\tscore") -> Path:
    path.write_bytes((header + "\n" + "".join(f"{a}\t{b}\t{g}\n" for a, b, g in rows)).encode("utf-8"))
    return path


def jsonl(path: Path, rows) -> Path:
    # ensure_ascii=False: U+2028, U+2029 and NEL stay raw inside the JSON strings (valid JSON)
    path.write_bytes("".join(json.dumps({"sentence1": a, "sentence2": b, "score": g}, ensure_ascii=False) + "\n"
                             for a, b, g in rows).encode("utf-8"))
    return path


# -- row 11: lines end at \n -------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["tsv", "jsonl"])
def test_line_breaks_inside_sentences_keep_every_line_number(bench, args, tmp_path, fmt):
    write = tsv if fmt == "tsv" else jsonl
    bad = [*ROWS, ("one more", "and its gold", "high")]  # the file's line 6 (TSV: after the header) / 5
    path = write(tmp_path / f"t.{fmt}", bad)
    line = len(bad) + (1 if fmt == "tsv" else 0)
    code, _, err = bench(*args, "--tasks", f"file:{path}")
    assert code == 2 and error_lines(err) == [f"error: {path}:{line}: expected a numeric gold score, got 'high'"]
    split = load_task(get_task(f"file:{write(tmp_path / f'good.{fmt}', ROWS)}"), "packaged", ["test"]).eval
    assert split.s1 == tuple(r[0] for r in ROWS) and split.s2 == tuple(r[1] for r in ROWS)  # kept as written
    assert split.gold == tuple(float(r[2]) for r in ROWS)
    assert split.where[-1].endswith(f":{len(ROWS) + (1 if fmt == 'tsv' else 0)}")


def test_a_crlf_file_reads_as_its_lf_twin_and_a_bad_byte_names_its_line(tmp_path):
    lf = tsv(tmp_path / "lf.tsv", ROWS)
    crlf = tmp_path / "crlf.tsv"
    crlf.write_bytes(lf.read_bytes().replace(b"\n", b"\r\n"))
    read = [load_task(get_task(f"file:{p}"), "packaged", ["test"]).eval for p in (lf, crlf)]
    assert (read[0].s1, read[0].s2, read[0].gold) == (read[1].s1, read[1].s2, read[1].gold)
    broken = tmp_path / "broken.tsv"
    data = lf.read_bytes()
    third = data.index(b"\n", data.index(b"\n") + 1) + 1  # where line 3 starts
    broken.write_bytes(data[:third + 2] + b"\xff" + data[third + 2:])
    with pytest.raises(UserError, match=rf"broken\.tsv:3: not valid UTF-8 \(byte {third + 2}\)"):
        load_task(get_task(f"file:{broken}"), "packaged", ["test"])


def test_an_export_of_such_sentences_reads_back_equal(bench, args, tmp_path):
    path = tsv(tmp_path / "mine.tsv", ROWS)
    code, _, err = bench(*args, "--tasks", f"file:{path}", "--export-embeddings", str(tmp_path / "vectors"))
    assert code == 0, err
    folder = next((tmp_path / "vectors").glob("*/avg/mine/test"))
    expected = list(dict.fromkeys([r[0] for r in ROWS] + [r[1] for r in ROWS]))  # s1 then s2, first seen
    rows = read_embeddings(folder)
    assert rows.sentences == expected and rows.vectors.shape == (len(expected), 32)
    written = (folder / "sentences.jsonl").read_bytes()
    assert not any(c.encode() in written for c in "\x85\u2028\u2029")  # escaped for splitlines readers
    # An export written before the escaping (raw U+2028, NEL in its lines) reads back the same.
    raw = "".join(json.dumps({"index": i, "sentence": s}, ensure_ascii=False) + "\n"
                  for i, s in enumerate(expected)).encode("utf-8")
    assert any(c.encode() in raw for c in "\x85\u2028\u2029")
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    (folder / "sentences.jsonl").write_bytes(raw)
    meta["sentences_sha256"] = hashlib.sha256(raw).hexdigest()
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    assert read_embeddings(folder).sentences == expected


def test_a_history_line_with_a_line_separator_is_kept(bench, args, tiny_bert, senteval_root, tmp_path, caplog):
    backbone = tmp_path / "tiny\u2028bert"  # a folder name is any text: it goes into every history line
    shutil.copytree(tiny_bert, backbone)
    code, _, err = bench(*[a if a != str(tiny_bert) else str(backbone) for a in args], "--tasks", "stsb",
                         "--source", "senteval", "--senteval-dir", str(senteval_root))
    assert code == 0, err
    out = tmp_path / "out"
    (path,) = (out / "runs").glob("*.json")
    spearman = json.loads(path.read_text(encoding="utf-8"))["scores"]["spearman"]
    (entry,) = read_history(out)
    assert entry["backbone"] == str(backbone) and entry["score"] == spearman and entry["metric"] == "spearman"
    history = out / "history.jsonl"
    assert "\u2028".encode() not in history.read_bytes() and len(history.read_bytes().split(b"\n")) == 2
    # A line written raw, as before the escaping, is one line too (not two damaged halves).
    history.write_bytes(history.read_bytes().replace(b"\\u2028", "\u2028".encode()))
    caplog.clear()
    (again,) = read_history(out)
    assert again == entry and not [r for r in caplog.records if "skipped" in r.getMessage()]


# -- row 13: numbers, sentences, k, names, cache keys ---------------------------------------------------

@pytest.mark.parametrize("score", ["0_5", "\uff15", "\u0663", "4_0.0"])
def test_a_gold_score_must_be_a_plain_decimal_number(bench, args, tmp_path, score):
    path = tsv(tmp_path / "t.tsv", [PLAIN[0], (PLAIN[1][0], PLAIN[1][1], score), *PLAIN[2:]])
    assert float(score) == float(score)  # float() alone takes it, as another number than the file's
    code, _, err = bench(*args, "--tasks", f"file:{path}")
    assert code == 2 and error_lines(err) == [f"error: {path}:3: gold score {score!r} is not a plain decimal number; "
                                              "write it with the digits 0-9, an optional sign, '.' and exponent, "
                                              "like 0.5 or 4"]


def test_plain_numbers_in_every_spelling_are_read_and_a_range_too(tmp_path):
    scores = ["5e-1", "+4", ".5", "3.", "-0", "2E0"]
    path = tsv(tmp_path / "t.tsv", [(f"s{i} a", f"s{i} b", g) for i, g in enumerate(scores)])
    assert load_task(get_task(f"file:{path}"), "packaged", ["test"]).eval.gold == (0.5, 4.0, 0.5, 3.0, 0.0, 2.0)
    with pytest.raises(UserError, match=r"range=0,1_0: expected LOW,HIGH of plain decimal numbers"):
        get_task(f"file:{path}?range=0,1_0")
    assert get_task(f"file:{path}?range=-1e0, 5").gold_range == (-1.0, 5.0)


@pytest.mark.parametrize(("value", "kind"), [(5, "a number (5)"), (2.5, "a number (2.5)"),
                                             ({"a": 1}, 'an object ({"a": 1})'), (["a", "b"], 'an array (["a", "b"])'),
                                             (None, "null"), (True, "true/false (true)")])
def test_a_jsonl_sentence_must_be_a_json_string(bench, args, tmp_path, value, kind):
    path = tmp_path / "t.jsonl"
    lines = [{"sentence1": a, "sentence2": b, "score": float(g)} for a, b, g in PLAIN]
    lines[1]["sentence2"] = value
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    code, _, err = bench(*args, "--tasks", f"file:{path}")
    assert code == 2 and error_lines(err) == [f"error: {path}:2: sentence 2 ('sentence2') is {kind}, not text; a "
                                              "sentence must be a JSON string in quotes"]
    lines[1]["sentence2"] = "5"  # the same, quoted: a sentence
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    assert load_task(get_task(f"file:{path}"), "packaged", ["test"]).eval.s2[1] == "5"


def test_whitening_k_above_the_dimension_is_an_error_naming_it(bench, args, tiny_bert, senteval_root, tmp_path):
    dim = json.loads((tiny_bert / "config.json").read_text())["hidden_size"]  # first-last: the hidden size
    common = [*args, "--methods", "whitening", "--tasks", "stsb", "--source", "senteval", "--senteval-dir",
              str(senteval_root)]
    code, _, err = bench(*common, "--set", "whitening.k=100000")
    assert code == 2 and error_lines(err) == [f"error: whitening: k=100000 is outside 1..{dim}, the dimension of "
                                              f"the vectors; use --set whitening.k=N with 1 ≤ N ≤ {dim}, or leave k "
                                              "unset for all"]
    assert not list((tmp_path / "out").glob("runs/*.json"))  # no record claims k=100000
    assert bench(*common, "--set", f"whitening.k={dim}")[0] == 0
    assert bench(*common)[0] == 0
    records = {r["method"]["label"]: r for r in (json.loads(p.read_text()) for p in
                                                 (tmp_path / "out").glob("runs/*.json"))}
    assert sorted(records) == ["whitening", f"whitening[k={dim}]"]  # k=dim keeps every direction: the same numbers
    assert records[f"whitening[k={dim}]"]["scores"]["spearman"] == records["whitening"]["scores"]["spearman"]


class Lengths:
    """Deterministic vectors from the text alone; counts its calls."""

    def __init__(self, offset: float = 0.0) -> None:
        self.offset, self.calls = offset, 0

    def encode(self, texts):
        self.calls += 1
        return np.array([[len(t), t.count("a") + self.offset, t.count("e") + 1.0, 1.0] for t in texts])


class Vowels(Lengths):
    def encode(self, texts):
        self.calls += 1
        return np.array([[t.count(v) + 0.5 for v in "aeiou"] for t in texts])


def stsb(senteval_root):
    rows = [line.split("\t") for line in (senteval_root / "STS" / "STSBenchmark" / "sts-test.csv")
            .read_text(encoding="utf-8").split("\n") if line]
    return [r[5] for r in rows], [r[6] for r in rows], np.array([float(r[4]) for r in rows])


def cosine_spearman(encoder, s1, s2, gold) -> float:
    a, b = np.asarray(encoder.encode(s1), float), np.asarray(encoder.encode(s2), float)
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return 100 * spearmanr(cosine, gold).statistic


def settings(tiny_bert, senteval_root, cache):
    return {"backbone": str(tiny_bert), "source": "senteval", "senteval_dir": str(senteval_root),
            "cache_dir": str(cache), "progress": False, "plots": False, "bootstrap": 0}


def test_a_300_character_name_is_a_working_row(tiny_bert, senteval_root, cache, tmp_path):
    name = "my-encoder-" + "x" * 289
    s1, s2, gold = stsb(senteval_root)
    outcome = harness.evaluate(Lengths(), tasks="stsb", output_dir=tmp_path / "out", name=name,
                               **settings(tiny_bert, senteval_root, cache))
    (rec,) = outcome.records
    assert rec["method"]["label"] == name and len(name) == 300
    assert rec["scores"]["spearman"] == pytest.approx(cosine_spearman(Lengths(), s1, s2, gold), abs=1e-6)
    for root, dirs, files in os.walk(tmp_path / "out"):
        assert all(len(n.encode()) <= 255 for n in dirs + files), root
    rows = outcome.embeddings(name, "stsb")
    assert rows.sentences == list(dict.fromkeys(s1 + s2))
    np.testing.assert_allclose(rows.vectors, Lengths().encode(rows.sentences), rtol=1e-6)


def test_a_cache_key_belongs_to_the_encoder_that_filled_it(tiny_bert, senteval_root, cache, tmp_path):
    s1, s2, gold = stsb(senteval_root)
    common = settings(tiny_bert, senteval_root, cache)
    first = Lengths()
    harness.evaluate(first, tasks="stsb", output_dir=tmp_path / "a", name="mine", cache_key="v1", **common)
    other = Vowels()
    with pytest.raises(UserError) as refused:
        harness.evaluate(other, tasks="stsb", output_dir=tmp_path / "b", name="mine", cache_key="v1", **common)
    assert str(refused.value) == (f"harness.evaluate: cache_key='v1' of 'mine' holds the vectors of "
                                  f"{__name__}.Lengths, not of {__name__}.Vowels; give this encoder its own cache_key "
                                  "(or name)")
    assert other.calls == 0 and not (tmp_path / "b" / "runs").exists()
    (own,) = harness.evaluate(other, tasks="stsb", output_dir=tmp_path / "b", name="mine", cache_key="v2",
                              **common).records
    assert own["method"]["spec"]["params"]["encoder"] == f"{__name__}.Vowels"
    assert own["scores"]["spearman"] == pytest.approx(cosine_spearman(Vowels(), s1, s2, gold), abs=1e-6)
    again = Lengths()  # the same encoder under its key: served from the cache, as documented
    (served,) = harness.evaluate(again, tasks="stsb", output_dir=tmp_path / "c", name="mine", cache_key="v1",
                                 **common).records
    assert again.calls == 0
    assert served["scores"]["spearman"] == pytest.approx(cosine_spearman(Lengths(), s1, s2, gold), abs=1e-6)
