"""A shared cache someone else can write: planted vectors and artifacts are caught or never read.

Two defences (docs/CACHE_AND_FAULTS.md, "Shared caches"): ``--verify-cache N`` re-encodes a random
sample of cached sentences and compares (on by default under ``--baseline``), and a cache secret
(``$STS_BENCH_CACHE_SECRET``) tags every entry with an HMAC so that entries written without it are
not read. The attack is the issue's: random vectors in a part renamed to their own sha256, which
passes every integrity check.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from harness.core.authenticity import SECRET_ENV


@pytest.fixture
def run(bench, tiny_st, senteval_root):
    def call(*extra: str) -> tuple[int, str, str]:
        return bench("--methods", "avg", "--tasks", "stsb", "--backbone", str(tiny_st), "--source", "senteval",
                     "--senteval-dir", str(senteval_root), "--bootstrap", "0", *extra)

    return call


def plant(cache: Path) -> list[Path]:
    """Replace every vector part by random vectors for the same sentences, named by their own sha256
    (the file passes the integrity check). Returns the planted files."""
    planted = []
    rng = np.random.default_rng(0)
    for part in sorted(cache.glob("vectors/*/part-*.npy")):
        rows = np.load(part, allow_pickle=False)
        rows["vec"] = rng.normal(size=rows["vec"].shape).astype(np.float32)
        from harness.core.hashing import npy_bytes

        data = npy_bytes(rows)
        target = part.with_name(f"part-{hashlib.sha256(data).hexdigest()[:32]}.npy")
        part.unlink()
        target.write_bytes(data)
        planted.append(target)
    assert planted
    return planted


def spearman(out: Path) -> float:
    records = [json.loads(p.read_text(encoding="utf-8")) for p in (out / "runs").rglob("*.json")]
    (record,) = [r for r in records if r["method"]["name"] == "avg"]
    return record["scores"]["spearman"]


def test_planted_vectors_pass_integrity_checks_but_not_verify_cache(run, tmp_path):
    code, _, err = run()
    assert code == 0, err
    clean = spearman(tmp_path / "out")
    planted = plant(tmp_path / "cache")
    code, _, err = run("--output-dir", str(tmp_path / "fooled"))
    assert code == 0 and spearman(tmp_path / "fooled") != pytest.approx(clean, abs=1.0)  # the hole, unguarded
    code, _, err = run("--verify-cache", "8", "--output-dir", str(tmp_path / "checked"))
    assert code == 3, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "do not match a fresh encode" in lines[0], err
    assert any(str(path) in lines[0] for path in planted) and "Traceback" not in err
    assert not (tmp_path / "checked" / "runs").exists() or not list((tmp_path / "checked" / "runs").rglob("*.json"))


def test_an_honest_warm_cache_passes_verification_and_encodes_nothing_more(run, tmp_path):
    code, _, err = run()
    assert code == 0, err
    code, out, err = run("--verify-cache", "16")
    assert code == 0, err
    assert "backbone passes 0 sentence(s) encoded" in out + err  # the checks are not the run's encoding


def test_verification_is_on_under_a_baseline(run, tmp_path):
    code, _, err = run()
    assert code == 0, err
    plant(tmp_path / "cache")
    code, _, err = run("--baseline", str(tmp_path / "out" / "leaderboard.csv"), "--output-dir", str(tmp_path / "g"))
    assert code == 3 and "do not match a fresh encode" in err, err
    code, _, err = run("--baseline", str(tmp_path / "out" / "leaderboard.csv"), "--verify-cache", "0",
                       "--output-dir", str(tmp_path / "g2"))
    assert code != 3, err  # --verify-cache 0 turns it off: the user's choice


def test_with_a_secret_planted_parts_are_never_read_and_the_score_is_the_clean_one(run, tmp_path, monkeypatch,
                                                                                     caplog):
    monkeypatch.setenv(SECRET_ENV, "team secret")
    code, _, err = run()
    assert code == 0, err
    clean = spearman(tmp_path / "out")
    planted = plant(tmp_path / "cache")
    code, out, err = run("--output-dir", str(tmp_path / "again"))
    assert code == 0, err
    assert "not authenticated" in caplog.text and spearman(tmp_path / "again") == clean
    assert all(path.is_file() for path in planted)  # left in place: they may be another user's
    monkeypatch.setenv(SECRET_ENV, "another secret")  # a secret that did not write the cache reads none of it
    code, out, err = run("--output-dir", str(tmp_path / "other"))
    assert code == 0 and spearman(tmp_path / "other") == clean
    assert "backbone passes 0 sentence(s) encoded" not in out + err


def test_with_a_secret_a_forged_artifact_is_recomputed(bench, tiny_st, senteval_root, tmp_path, monkeypatch, caplog):
    """A whitening fit (mu, W) replaced and meta.json re-sealed with its own checksum: without the
    secret's tag it is not read, and the score is the clean one."""
    from harness.core.artifacts import _meta_checksum

    monkeypatch.setenv(SECRET_ENV, "team secret")
    args = ("--methods", "whitening", "--tasks", "stsb", "--backbone", str(tiny_st), "--source", "senteval",
            "--senteval-dir", str(senteval_root), "--bootstrap", "0")
    code, _, err = bench(*args)
    assert code == 0, err
    runs = tmp_path / "out" / "runs"
    clean = [json.loads(p.read_text(encoding="utf-8"))["scores"]["spearman"] for p in runs.rglob("*.json")]
    (meta_path,) = list((tmp_path / "cache" / "whitening").glob("*/meta.json"))
    folder = meta_path.parent
    w = np.load(folder / "w.npy")
    (folder / "w.npy").write_bytes(_npy(np.eye(*w.shape, dtype=np.float32) * 3))
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["files"]["w.npy"] = hashlib.sha256((folder / "w.npy").read_bytes()).hexdigest()
    meta.pop("tag", None)
    meta["checksum"] = _meta_checksum(meta)
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    code, _, err = bench(*args, "--output-dir", str(tmp_path / "again"))
    assert code == 0 and "not authenticated" in caplog.text, err
    again = [json.loads(p.read_text(encoding="utf-8"))["scores"]["spearman"]
             for p in (tmp_path / "again" / "runs").rglob("*.json")]
    assert again == clean


def _npy(array: np.ndarray) -> bytes:
    from harness.core.hashing import npy_bytes

    return npy_bytes(array)


def test_senteval_lines_split_only_at_newlines_and_gold_must_be_a_plain_number(tmp_path):
    """SentEval's input and gold files are matched line by line: a U+2028 or NEL inside a sentence
    must not make two lines of one (it would shift every later pair against its gold)."""
    from harness.core.data.sources.rows import parse_score, read_lines
    from harness.core.errors import UserError

    path = tmp_path / "STS.input.x.txt"
    path.write_bytes("a\u2028b\tc\x85d\r\ne\x0cf\tg\n".encode())
    assert read_lines(path) == ["a\u2028b\tc\x85d", "e\x0cf\tg"]
    assert parse_score("4.5", "f:1") == 4.5 and parse_score("-1e-1", "f:1") == -0.1
    for bad in ("0_5", "５", "nan", "4 5"):
        with pytest.raises(UserError, match="f:3"):
            parse_score(bad, "f:3")
    path.write_bytes(b"ok\n\xff\n")
    with pytest.raises(UserError, match=r"STS.input.x.txt:2: not valid UTF-8"):
        read_lines(path)


def test_with_a_secret_a_record_needs_its_tag_and_a_fabricated_one_is_never_shown(run, tmp_path, monkeypatch,
                                                                                  caplog):
    """A record whose pairs are forged to give its forged score passes every check but the secret's:
    re-sealed with the project's checksum, without the HMAC, it is skipped."""
    from harness.core.scoring import score_split
    from harness.runner.records.schema import seal
    from harness.runner.records.store import load_results

    monkeypatch.setenv(SECRET_ENV, "team secret")
    code, _, err = run()
    assert code == 0, err
    runs = tmp_path / "out" / "runs"
    (path,) = list(runs.glob("*.json"))
    record = json.loads(path.read_text(encoding="utf-8"))
    assert record["auth"] and [r["checksum"] for r in load_results(runs)] == [record["checksum"]]
    gold = np.array(record["pairs"]["gold"])
    forged = [float(g) for g in gold]  # similarities equal to gold: Spearman 100, consistent with its pairs
    scores = score_split(np.array(forged), gold, record["pairs"]["subset"], record["protocol"]["aggregation"], 0)
    record["pairs"]["similarity"], record["scores"]["spearman"] = forged, scores.spearman
    record["scores"]["pearson"], record["scores"]["spearman_ci95"] = scores.pearson, None
    path.write_text(json.dumps(seal({k: v for k, v in record.items() if k != "auth"})), encoding="utf-8")
    assert load_results(runs) == [] and "not authenticated" in caplog.text
    monkeypatch.delenv(SECRET_ENV)  # without the secret the same record is shown: only the secret proves who wrote it
    assert [r["scores"]["spearman"] for r in load_results(runs)] == [pytest.approx(100.0)]


def test_a_record_that_is_a_link_is_not_read(run, tmp_path, caplog):
    from harness.runner.records.store import load_results

    code, _, err = run()
    assert code == 0, err
    runs = tmp_path / "out" / "runs"
    (path,) = list(runs.glob("*.json"))
    outside = tmp_path / "elsewhere.json"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)
    assert load_results(runs) == [] and "symbolic link" in caplog.text
