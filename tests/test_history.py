"""The history store and ``--history``: append-safe lines verified on read, content-addressed
similarities, and moves named only when a change beats its noise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.runner.history.log import BLOBS, HISTORY_FILE, append_history, read_history
from harness.runner.history.moves import history_report


def record(similarity: np.ndarray, gold: np.ndarray, commit: str | None, created: str) -> dict:
    """A result record as the runner writes it, reduced to what the history reads."""
    return {"harness": {"git_sha": commit}, "created": created,
            "method": {"label": "avg", "kind": "embedding", "spec": {"backbone": "minilm"}},
            "fit": None, "task": {"title": "STS-B", "fingerprint": "f" * 64, "n_pairs": len(gold)},
            "protocol": {"aggregation": "all", "source": "packaged", "dtype": "fp32", "max_length": 128,
                         "first_last_layers": [1, -1]},
            "scores": {"spearman": 100 * float(np.corrcoef(np.argsort(np.argsort(similarity)),
                                                            np.argsort(np.argsort(gold)))[0, 1]),
                       "spearman_ci95": None, "bootstrap_rounds": 200, "bootstrap_seed": 1},
            "pairs": {"similarity": similarity.tolist(), "gold": gold.tolist(), "subset": None},
            "env": {"python": "3.11", "devices": ["cpu"]}}


@pytest.fixture
def history(tmp_path) -> Path:
    """Four commits: a good model, the same vectors again, a tiny real change, and a broken model."""
    rng = np.random.default_rng(0)
    gold = rng.uniform(0, 5, 300)
    good = gold + rng.normal(0, 1.0, 300)
    broken = rng.normal(0, 1, 300)
    tiny = good + rng.normal(0, 1e-3, 300)
    for i, (commit, sim) in enumerate([("a" * 40, good), ("b" * 40, good), ("c" * 40, tiny), ("d" * 40, broken)]):
        append_history(tmp_path, [record(sim, gold, commit, f"2025-01-0{i + 1}T00:00:00+00:00")])
    return tmp_path


def test_a_move_is_named_only_where_it_beats_the_noise(history):
    report = history_report(history, rounds=200, seed=1)
    assert report.commits == ["aaaaaaaa", "bbbbbbbb", "cccccccc", "dddddddd"]
    (move,) = report.moves  # a → b: the same vectors; b → c: a change within the noise; c → d: broken
    assert move["commit"] == "dddddddd" and move["previous"] == "cccccccc" and move["change"] < -50
    assert move["test"].startswith("paired bootstrap") and move["p_value"] < 0.05
    assert (history / "plots" / "history.png").is_file() and "dddddddd" in (history / "history.md").read_text()


def test_back_up_is_a_move_too_and_identical_vectors_are_not(tmp_path):
    rng = np.random.default_rng(1)
    gold = rng.uniform(0, 5, 300)
    for i, sim in enumerate([rng.normal(0, 1, 300), gold + rng.normal(0, 1, 300)]):
        append_history(tmp_path, [record(sim, gold, f"{i}" * 40, f"2025-02-0{i + 1}T00:00:00+00:00")] * 2)
    (move,) = history_report(tmp_path, rounds=200, seed=1).moves
    assert move["change"] > 50 and move["commit"] == "11111111"


def test_without_the_vectors_the_intervals_decide(history):
    for blob in (history / BLOBS).glob("*.npy"):
        blob.write_bytes(blob.read_bytes()[:-8])  # damaged: fails its checksum, so it is not used
    lines = [json.loads(line) for line in (history / HISTORY_FILE).read_text().splitlines()]
    assert all(line["ci95"] is None for line in lines)
    report = history_report(history, rounds=200, seed=1, plots=False)
    assert report.moves == []  # no vectors and no intervals: nothing can be called a move


def test_damaged_lines_are_skipped_and_said(history, caplog):
    path = history / HISTORY_FILE
    lines = path.read_text().splitlines()
    edited = json.loads(lines[1])
    edited["score"] = 99.0  # an edit the checksum catches
    path.write_text("\n".join([lines[0], json.dumps(edited), *lines[2:], '{"schema": 1, "torn'][:5]) + "\n")
    entries = read_history(history)
    assert len(entries) == 3 and all(e["score"] != 99.0 for e in entries)
    assert "skipped 2 damaged or unknown line(s)" in caplog.text


def test_every_run_appends_and_history_draws_it(bench, senteval_root, tiny_bert, tmp_path):
    for _ in range(2):
        code, _, err = bench("--methods", "avg", "random", "--tasks", "stsb", "--source", "senteval", "--senteval-dir",
                             str(senteval_root), "--backbone", str(tiny_bert), "--bootstrap", "100")
        assert code == 0, err
    entries = read_history(tmp_path / "out")
    assert len(entries) == 4 and len({e["run"] for e in entries}) == 2
    assert {e["commit"] for e in entries} == {entries[0]["commit"]}  # this checkout's commit (or None outside git)
    assert entries[0]["env"]["dtype"] == "fp32" and entries[0]["source"] == "senteval"
    code, out, err = bench("--history")
    assert code == 0, err
    assert "No score moved by more than its noise." in out and "Latest score of each series" in out
    # One commit (both runs are this checkout's): no plot of a dot per series on an empty axis, its scores as a
    # table on the page (issue 52); from the second commit on, plots/history.png (the tests below).
    assert not (tmp_path / "out" / "plots" / "history.png").exists()
    page = (tmp_path / "out" / "index.html").read_text()
    assert "id=\"history\"" in page and "the only one so far" in page
    assert all(f"<td class='num' data-sort='{e['score']:.6g}'>{e['score']:.2f}</td>" in page for e in entries)


def test_the_history_plot_is_drawn_again_only_when_what_it_shows_changes(history, monkeypatch):
    """history.png carries the digest of its inputs; an unchanged history is not drawn again (no
    matplotlib on a warm run), a new point or a damaged file is."""
    from harness.runner.history import moves as module
    from harness.runner.tables.plots import drawn_from

    history_report(history, rounds=200, seed=1)
    png = history / "plots" / "history.png"
    key = drawn_from(png)
    assert key and len(key) == 64
    drawn = []
    real = module._draw_history
    monkeypatch.setattr(module, "_draw_history", lambda *a: drawn.append(1) or real(*a))
    history_report(history, rounds=200, seed=1)
    assert drawn == []  # same inputs: the PNG is kept as it is
    png.write_bytes(png.read_bytes()[:-40])  # truncated
    history_report(history, rounds=200, seed=1)
    assert drawn == [1] and drawn_from(png) == key
    rng = np.random.default_rng(5)
    gold = rng.uniform(0, 5, 300)
    append_history(history, [record(gold + rng.normal(0, 1, 300), gold, "e" * 40, "2025-01-09T00:00:00+00:00")])
    history_report(history, rounds=200, seed=1)
    assert drawn == [1, 1] and drawn_from(png) != key


def test_a_line_appended_with_its_check_redone_is_verified_by_its_own_blobs(history, caplog):
    """Issue 42: a line's checksum is no evidence (whoever appends a line computes it). A line
    claiming Spearman 99 whose own per-pair blob gives another score, and one whose blob is
    missing, are not shown, each with one warning naming the file."""
    import hashlib

    from harness.core.hashing import canonical_json

    path = history / HISTORY_FILE
    lines = path.read_text().splitlines()
    last = json.loads(lines[-1])
    truth = 100 * float(np.corrcoef(*(np.argsort(np.argsort(np.asarray(v))) for v in (
        np.load(history / BLOBS / f"{last['similarity']}.npy"),
        json.loads((history / BLOBS / f"{last['gold']}.json").read_text())["gold"])))[0, 1])
    assert last["score"] == pytest.approx(truth, abs=1e-9)

    def forged(**change) -> str:
        body = {k: v for k, v in last.items() if k != "check"} | change
        return json.dumps({**body, "check": hashlib.sha256(canonical_json(body).encode()).hexdigest()})

    with path.open("a") as f:
        f.write(forged(score=99.0, commit="e" * 40, date="2025-01-05T00:00:00+00:00") + "\n")
        f.write(forged(similarity="0" * 64, commit="f" * 40, date="2025-01-06T00:00:00+00:00") + "\n")
    caplog.clear()
    entries = read_history(history)
    assert [e["commit"][0] for e in entries] == ["a", "b", "c", "d"]
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 2 and all(str(path) in w for w in warned)
    assert f"line 5 not shown: score 99.0 is not what its own 300 pairs give ({truth:.4f})" in warned[0]
    assert "line 6 not shown: its per-pair similarities or gold are missing" in warned[1]
    history_report(history, rounds=200, seed=1, plots=False)
    shown = (history / "history.md").read_text()
    assert "99.00" not in shown and "eeeeeeee" not in shown and "ffffffff" not in shown


def test_with_the_secret_a_line_without_its_tag_is_not_shown(tmp_path, monkeypatch, caplog):
    """Issue 51: a line fabricated with consistent blobs (its similarities are its gold: 100.00)
    passes every evidence check; with $STS_BENCH_CACHE_SECRET a line must carry the secret's tag
    over its check (which covers its blobs' sha256), as a record does."""
    from harness.core.authenticity import SECRET_ENV
    from harness.runner.history.log import history_line

    rng = np.random.default_rng(3)
    gold = rng.uniform(0, 5, 300)
    forged = history_line(record(gold.copy(), gold, "e" * 40, "2025-01-09T00:00:00+00:00"), "x" * 12,
                          tmp_path / BLOBS)  # written without the secret
    monkeypatch.setenv(SECRET_ENV, "team")
    append_history(tmp_path, [record(gold + rng.normal(0, 1, 300), gold, "a" * 40, "2025-01-01T00:00:00+00:00")])
    with (tmp_path / HISTORY_FILE).open("a") as f:
        f.write(json.dumps(forged) + "\n")
        f.write(json.dumps({**forged, "auth": "0" * 64}) + "\n")
    caplog.clear()
    assert [e["commit"][0] for e in read_history(tmp_path)] == ["a"]
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 2 and all("not authenticated by $STS_BENCH_CACHE_SECRET" in w for w in warned)
    monkeypatch.delenv(SECRET_ENV)  # without the secret the tag is not asked: the line is its evidence
    assert [e["commit"][0] for e in read_history(tmp_path)] == ["a", "e", "e"]


def test_a_line_claiming_one_resample_is_not_shown(tmp_path, caplog):
    """Issue 51: the history reader holds rounds to the command line's rule, as the record reader."""
    import hashlib

    from harness.core.hashing import canonical_json

    rng = np.random.default_rng(4)
    gold = rng.uniform(0, 5, 300)
    append_history(tmp_path, [record(gold + rng.normal(0, 1, 300), gold, "a" * 40, "2025-01-01T00:00:00+00:00")])
    line = json.loads((tmp_path / HISTORY_FILE).read_text())
    body = {k: v for k, v in line.items() if k != "check"} | {"bootstrap_rounds": 1, "commit": "b" * 40}
    with (tmp_path / HISTORY_FILE).open("a") as f:
        f.write(json.dumps({**body, "check": hashlib.sha256(canonical_json(body).encode()).hexdigest()}) + "\n")
    caplog.clear()
    assert [e["commit"][0] for e in read_history(tmp_path)] == ["a"]
    (warned,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "line 2 not shown: bootstrap rounds 1" in warned
