"""Issue 32's axes through a whole run: ``--dims``, ``--precision`` and ``--similarity`` score every
combination from the one encode, each a record whose Spearman equals an independent numpy/scipy
computation (truncation, int8/uint8 on ranges of the --fit-set's vectors, sign bits by Hamming
distance, each similarity), with its bytes per vector, the † mark when the calibration saw the
scored sentences, and a paired test against its method's full vector in significance.csv. A warm
re-run with one more axis value encodes nothing.
"""

from __future__ import annotations

import csv
import itertools
import json
import re

import numpy as np
import pytest
from scipy.stats import spearmanr

import harness
from harness.core.errors import UserError
from tests.test_evaluate import HashedWords, settings, stsb_test_pairs


def stsb_sentences(senteval_root, split):
    """Every sentence of an STS-B split of the fixture, read here from its CSV."""
    with (senteval_root / "STS" / "STSBenchmark" / f"sts-{split}.csv").open(encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r[5] for r in rows] + [r[6] for r in rows]


def expected_similarity(a, b, dims, precision, similarity, calibration):
    """The similarity of each pair, computed from the issue's definitions (no sts-bench code), on float32
    vectors as a run keeps them (int8 steps in float32, as sentence-transformers computes them)."""
    a, b, calibration = (np.asarray(x, dtype=np.float32) for x in (a, b, calibration))
    if dims != "full":
        a, b, calibration = a[:, :dims], b[:, :dims], calibration[:, :dims]
    if precision in ("int8", "uint8"):
        low, high = calibration.min(0), calibration.max(0)
        step = (high - low) / np.float32(255)
        step[step == 0] = 1

        def q(x):
            return np.clip(np.floor((x - low) / step), 0, 255) - (128 if precision == "int8" else 0)

        a, b = q(a), q(b)
    if precision in ("binary", "ubinary"):
        return -((a > 0) != (b > 0)).sum(1).astype(float)  # Hamming distance of the sign bits, negated
    a, b = a.astype(np.float64), b.astype(np.float64)
    if similarity == "cosine":
        return (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-300)
    if similarity == "dot":
        return (a * b).sum(1)
    if similarity == "euclidean":
        return -np.linalg.norm(a - b, axis=1)
    return -np.abs(a - b).sum(1)


GRID = {"dims": ("5", "full"), "precision": ("fp32", "int8", "uint8", "binary", "ubinary"),
        "similarity": ("cosine", "dot", "euclidean", "manhattan")}


def test_every_combination_is_a_record_equal_to_numpy_from_one_encode(tiny_bert, senteval_root, tmp_path):
    s1, s2, gold = stsb_test_pairs(senteval_root)
    enc = HashedWords(dims=12)
    outcome = harness.evaluate(enc, tasks="stsb", output_dir=tmp_path / "out", name="words", fit_set="train",
                               bootstrap=200, **GRID, **settings(tiny_bert, senteval_root, tmp_path))
    assert enc.calls == 1  # the scored and the calibration sentences in one encode, read back for every setting
    a, b = HashedWords(12).encode(s1), HashedWords(12).encode(s2)
    calibration = HashedWords(12).encode(stsb_sentences(senteval_root, "train"))
    by_label = {r["method"]["label"]: r for r in outcome.records}
    expected_labels = set()
    for dims, precision, similarity in itertools.product(*GRID.values()):
        bits = precision in ("binary", "ubinary")
        if bits and similarity != "cosine":
            continue  # bits are compared by Hamming distance whatever is asked: one row
        parts = [f"{dims}d" if dims != "full" else "", "" if precision == "fp32" else precision,
                 "" if similarity == "cosine" or bits else similarity]
        label = " · ".join(["words", " ".join(p for p in parts if p)]) if any(parts) else "words"
        expected_labels.add(label)
        record = by_label[label]
        want = expected_similarity(a, b, int(dims) if dims != "full" else "full", precision, similarity, calibration)
        np.testing.assert_allclose(record["pairs"]["similarity"], want, rtol=1e-9, atol=1e-9, err_msg=label)
        assert record["scores"]["spearman"] == pytest.approx(100 * spearmanr(want, gold).statistic, abs=1e-6)
        kept = 12 if dims == "full" else int(dims)
        width = {"fp32": 4 * kept, "int8": kept, "uint8": kept}.get(precision, (kept + 7) // 8)
        assert record["vector"]["bytes_per_vector"] == width and record["embed_dim"] == kept
        assert record["vector"]["similarity"] == record["protocol"]["similarity"] == ("hamming" if bits else similarity)
        assert ("calibration" in record["vector"]) == (precision in ("int8", "uint8"))
    assert set(by_label) == expected_labels and len(expected_labels) == 2 * (3 * 4 + 2)
    # scores.csv carries the setting of each row
    with (tmp_path / "out" / "scores.csv").open(encoding="utf-8") as f:
        rows = {r["method"]: r for r in csv.DictReader(f)}
    assert rows["words · 5d uint8 dot"]["dims"] == "5" and rows["words · 5d uint8 dot"]["bytes_per_vector"] == "5"
    full = rows["words"]
    assert (full["dims"], full["precision"], full["bytes_per_vector"]) == ("full", "fp32", "48")
    assert rows["words · binary"]["similarity"] == "hamming" and rows["words · binary"]["bytes_per_vector"] == "2"


def test_each_setting_is_tested_against_its_full_vector_and_the_frontier_says_so(tiny_bert, senteval_root, tmp_path):
    harness.evaluate(HashedWords(dims=12), tasks="stsb", output_dir=tmp_path / "out", name="words", fit_set="train",
                     bootstrap=200, dims=("4", "full"), precision=("fp32", "int8", "binary"),
                     similarity=("cosine", "dot"),
                     **settings(tiny_bert, senteval_root, tmp_path))
    with (tmp_path / "out" / "significance.csv").open(encoding="utf-8") as f:
        tests = [r for r in csv.DictReader(f) if r["test"].startswith("paired bootstrap")]
    tested = {frozenset((t["method_a"], t["method_b"])) for t in tests}
    full_of = {"words · 4d": "words", "words · int8": "words", "words · 4d int8": "words", "words · binary": "words",
               "words · 4d binary": "words", "words · 4d dot": "words · dot", "words · int8 dot": "words · dot",
               "words · 4d int8 dot": "words · dot"}
    assert all(frozenset(pair) in tested for pair in full_of.items())
    with (tmp_path / "out" / "frontier.csv").open(encoding="utf-8") as f:
        frontier = {r["method"]: r for r in csv.DictReader(f)}
    assert set(frontier) == {*full_of, "words", "words · dot"}
    for label, full in full_of.items():
        row = frontier[label]
        assert row["full_vector"] == full and row["of"] == "words"
        test = next(t for t in tests if {t["method_a"], t["method_b"]} == {label, full})
        assert float(row["p_vs_full"]) == pytest.approx(float(test["p_value"]), rel=1e-5)
        delta = float(frontier[label]["spearman"]) - float(frontier[full]["spearman"])
        assert float(row["delta_vs_full"]) == pytest.approx(delta, rel=1e-5, abs=1e-4)  # CSVs keep 6 digits
    # The Pareto set, computed here: no other row at most as large and strictly better (or smaller and as good)
    points = {k: (int(r["bytes_per_vector"]), float(r["spearman"])) for k, r in frontier.items()}
    for label, (size, score) in points.items():
        dominated = any((s2 <= size and v2 > score) or (s2 < size and v2 >= score)
                        for other, (s2, v2) in points.items() if other != label)
        assert (frontier[label]["pareto"] == "True") == (not dominated)
    text = (tmp_path / "out" / "frontier.md").read_text(encoding="utf-8")
    assert "| words · 4d binary |" in text and "vs full vector" in text


def test_a_warm_run_with_one_more_axis_value_encodes_nothing(tiny_bert, senteval_root, tmp_path):
    common = {**settings(tiny_bert, senteval_root, tmp_path), "fit_set": "train", "bootstrap": 0, "name": "words",
              "cache_key": "v1", "tasks": "stsb"}
    cold_encoder, warm_encoder = HashedWords(), HashedWords()
    # int8 needs the --fit-set's vectors: encoded once, with the scored sentences, then cached too
    harness.evaluate(cold_encoder, output_dir=tmp_path / "a", dims=("8", "full"), precision=("fp32", "int8"), **common)
    warm = harness.evaluate(warm_encoder, output_dir=tmp_path / "b", dims=("4", "8", "full"),
                            precision=("fp32", "int8", "binary"), similarity=("cosine", "manhattan"), **common)
    assert cold_encoder.calls == 1 and warm_encoder.calls == 0 and warm.sentences_forwarded == 0
    assert len(warm.records) == 3 * (2 * 2 + 1)


def test_builtin_methods_on_a_backbone_score_the_grid_from_one_forward_pass(bench, tiny_bert, senteval_root, tmp_path):
    base = ["--backbone", str(tiny_bert), "--source", "senteval", "--senteval-dir", str(senteval_root),
            "--tasks", "stsb", "--methods", "avg", "whitening", "--fit-set", "train", "--no-plots",
            "--bootstrap", "100"]
    code, _, cold = bench(*base, "--dims", "16", "full", "--precision", "fp32", "int8", "binary")
    assert code == 0, cold
    code, _, again = bench(*base, "--dims", "8", "16", "full", "--precision", "fp32", "int8", "binary")
    assert code == 0, again
    assert re.search(r"backbone passes 0 sentence\(s\) encoded, \d+ from cache; other encodes 0;", again), again
    assert not re.search(r"backbone passes 0 sentence", cold)  # the cold run did encode
    runs = [json.loads(p.read_text()) for p in (tmp_path / "out" / "runs").glob("*.json")]
    labels = {r["method"]["label"] for r in runs}
    assert {"avg · 8d binary", "whitening · 8d int8", "whitening", "avg"} <= labels and len(labels) == 2 * 9
    # whitening's fit is the method's; the int8 ranges are the whitened train vectors': neither is on the test split
    assert not any(r["protocol"]["transductive"] for r in runs)


def test_a_calibration_on_the_scored_sentences_is_marked(tiny_bert, senteval_root, tmp_path):
    outcome = harness.evaluate(HashedWords(), tasks="stsb", output_dir=tmp_path / "out", name="words",
                               fit_set="target", precision=("fp32", "int8", "binary"), bootstrap=0,
                               **settings(tiny_bert, senteval_root, tmp_path))
    marked = {r["method"]["label"]: r["protocol"]["transductive"] for r in outcome.records}
    assert marked == {"words": False, "words · int8": True, "words · binary": False}
    int8 = next(r for r in outcome.records if r["method"]["label"] == "words · int8")
    assert int8["vector"]["calibration"]["name"] == "target" and int8["vector"]["calibration"]["overlap_sentences"] > 0
    board = (tmp_path / "out" / "leaderboard.md").read_text(encoding="utf-8")
    assert any(line.startswith("| words · int8 ") and "†" in line for line in board.splitlines())


@pytest.mark.parametrize(("extra", "says"), [
    ({"dims": ("64",)}, "--dims 64: the vectors have 32 dimensions, fewer than 64"),
    ({"dims": ("0",)}, "--dims 0: expected a positive number of dimensions or full"),
    ({"precision": ("int4",)}, "--precision int4: unknown precision"),
    ({"similarity": ("hamming",)}, "--similarity hamming: not a similarity to ask for"),
])
def test_a_bad_axis_value_is_one_line(tiny_bert, senteval_root, tmp_path, extra, says):
    with pytest.raises(UserError, match=says):
        harness.evaluate(HashedWords(), tasks="stsb", output_dir=tmp_path / "out", name="words", bootstrap=0,
                         **extra, **settings(tiny_bert, senteval_root, tmp_path))


def test_the_cli_and_a_config_file_take_the_axes(bench, tiny_bert, senteval_root, tmp_path):
    config = tmp_path / "bench.toml"
    config.write_text('methods = ["avg"]\ntasks = ["stsb"]\ndims = ["8", "full"]\nprecision = "ubinary"\n'
                      'similarity = ["dot"]\n', encoding="utf-8")
    code, _out, err = bench("--config", str(config), "--backbone", str(tiny_bert), "--source", "senteval",
                           "--senteval-dir", str(senteval_root), "--no-plots", "--bootstrap", "0")
    assert code == 0, err
    labels = {json.loads(p.read_text())["method"]["label"] for p in (tmp_path / "out" / "runs").glob("*.json")}
    assert labels == {"avg · dot", "avg · 8d ubinary", "avg · ubinary"}
    code, _, err = bench("--methods", "avg", "--dims", "full,-3", "--backbone", str(tiny_bert))
    assert code == 2
    assert err.strip().splitlines() == ["error: --dims -3: expected a positive number of dimensions or full"]


def test_whitening_k_is_the_whitened_vector_cut_to_k(bench, tiny_bert, senteval_root, tmp_path):
    """Whitening keeps its directions by falling eigenvalue, so whitening.k=K and "whitening · Kd" are one vector:
    the frontier can put the paper's whitening-k beside the cut."""
    base = ["--backbone", str(tiny_bert), "--source", "senteval", "--senteval-dir", str(senteval_root), "--tasks",
            "stsb", "--methods", "whitening", "--fit-set", "train", "--no-plots", "--bootstrap", "0"]
    assert bench(*base, "--dims", "8", "full")[0] == 0
    assert bench(*base, "--set", "whitening.k=8")[0] == 0
    files = (tmp_path / "out" / "runs").glob("*.json")
    runs = {r["method"]["label"]: r for r in (json.loads(p.read_text()) for p in files)}
    paper, cut = runs["whitening[k=8]"], runs["whitening · 8d"]
    np.testing.assert_allclose(paper["pairs"]["similarity"], cut["pairs"]["similarity"], rtol=1e-5, atol=1e-6)
    assert cut["vector"]["bytes_per_vector"] == paper["vector"]["bytes_per_vector"] == 32


def test_the_gate_compares_compressed_rows_like_any_other(bench, tiny_bert, senteval_root, tmp_path):
    base = ["--backbone", str(tiny_bert), "--source", "senteval", "--senteval-dir", str(senteval_root), "--tasks",
            "stsb", "--methods", "avg", "--fit-set", "train", "--no-plots", "--bootstrap", "100",
            "--dims", "8", "full", "--precision", "fp32", "int8"]
    assert bench(*base)[0] == 0
    board = (tmp_path / "out" / "leaderboard.csv").read_text(encoding="utf-8")
    baseline = tmp_path / "baseline.csv"
    baseline.write_text(board, encoding="utf-8")
    code, _, err = bench(*base, "--baseline", str(baseline))
    assert code == 0, err
    rows = list(csv.DictReader(board.splitlines()))
    row = next(r for r in rows if r["method"] == "avg · 8d int8")
    row["STS-B"] = f"{float(row['STS-B'].split()[0]) + 30:.2f}"  # the baseline says it once scored 30 points more
    with baseline.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    code, out, err = bench(*base, "--baseline", str(baseline))
    # matched to its own baseline row and compared; on 12 pairs a 30-point drop is within its interval: no regression
    assert code == 0, out + err
    drops = out.split("drops, none a regression")[1].splitlines()
    drop = next(line for line in drops if line.startswith("| avg · 8d int8"))
    assert "-30.00" in drop and "| STS-B" in drop
