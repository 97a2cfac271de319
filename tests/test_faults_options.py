"""Issue 42's memory bullet and its minor option rows: the scorer holds each side's distinct vectors
and gathers pairs a chunk at a time (bit-identical to the whole arrays), the up-front memory check
counts what a pair really costs, and each bad option is one ``error:`` line before anything is
written (docs/CACHE_AND_FAULTS.md, "Memory and option checks"). The peak of 1M pairs is measured by
``benchmarks/studies/million_pairs.py``, never asserted here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_faults import one_error_line

from harness.core.compression import VectorSetting

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def base_args(senteval_root, tiny_bert, tmp_path):
    """tests/test_faults.py's small real run: avg on a copy of the fixture STS-B."""
    root = tmp_path / "se"
    shutil.copytree(senteval_root, root)
    return ["--methods", "avg", "--tasks", "stsb", "--source", "senteval", "--senteval-dir", str(root),
            "--backbone", str(tiny_bert), "--bootstrap", "0", "--no-plots"]

SETTINGS = [
    VectorSetting(None, "fp32", "cosine"),
    VectorSetting(None, "fp32", "dot"),
    VectorSetting(7, "fp32", "euclidean"),
    VectorSetting(None, "int8", "cosine"),
    VectorSetting(16, "uint8", "manhattan"),
    VectorSetting(None, "binary", "hamming"),
]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.label("v") or "full")
def test_pairs_gathered_a_chunk_at_a_time_are_bit_identical_to_the_whole_arrays(setting):
    from harness.core.compression import calibrate, compressed_similarity, indexed_similarity

    rng = np.random.default_rng(0)
    left_u, right_u = (rng.standard_normal((n, 24)).astype(np.float32) for n in (13, 9))
    left_u[3] = 0  # a zero vector: cosine 0, counted
    rows1, rows2 = rng.integers(0, 13, 1000), rng.integers(0, 9, 1000)
    cal = calibrate(np.concatenate([left_u, right_u])) if setting.calibrated else None
    whole = compressed_similarity(left_u[rows1], right_u[rows2], setting, cal)
    for chunk in (1, 7, 256, 4096):
        got = indexed_similarity(left_u, rows1, right_u, rows2, setting, cal, chunk=chunk)
        assert got[1] == whole[1]
        assert np.array_equal(got[0], whole[0])  # bit for bit, not within 1e-6


def test_distinct_rows_keep_first_seen_order():
    from harness.core.compression import distinct_rows

    sentences, rows = distinct_rows(["b", "a", "b", "c", "a"])
    assert sentences == ["b", "a", "c"] and rows.tolist() == [0, 1, 0, 2, 1]


def test_a_built_in_method_encodes_each_sides_distinct_sentences_once(bench, base_args, monkeypatch):
    """STS-B's pairs repeated 50 times: the method is asked for each side's distinct sentences (the
    scorer then gathers the pairs), not for 50 copies, and the scores are the unrepeated ones'."""
    from methods.pooling import ViewMethod

    asked: list[tuple[int, int]] = []
    original = ViewMethod.encode_sides

    def spy(self, s1, s2):
        asked.append((len(s1), len(s2)))
        return original(self, s1, s2)

    monkeypatch.setattr(ViewMethod, "encode_sides", spy)
    root = Path(base_args[base_args.index("--senteval-dir") + 1])
    stsb = root / "STS" / "STSBenchmark" / "sts-test.csv"
    lines = stsb.read_text().splitlines()
    distinct = len(set(line.split("\t")[5] for line in lines)), len(set(line.split("\t")[6] for line in lines))
    stsb.write_text("".join(f"{line}\n" for line in lines * 50))
    code, _out, err = bench(*base_args)
    assert code == 0, err
    assert asked and max(asked) <= distinct, (asked, distinct, len(lines) * 50)


def test_the_memory_check_before_encoding_counts_what_the_run_holds_per_pair(monkeypatch):
    """Before encoding, a split of n pairs is refused when the run's own per-pair bytes (sentences,
    rows, similarity, the record's lists) and the scoring's do not fit; before, only the scoring's
    128 B a pair were counted, and 800k pairs failed after encoding."""
    from harness.core import bootstrap
    from harness.core.errors import ResourceError

    n = 800_000
    assert bootstrap.RUN_BYTES_PER_PAIR >= 512
    fits_scoring_alone = bootstrap.scoring_bytes(n, 1000) + 1
    bootstrap.check_fits(n, 1000, available=fits_scoring_alone)
    with pytest.raises(ResourceError, match="scoring 800,000 pairs needs about"):
        bootstrap.check_fits(n, 1000, available=fits_scoring_alone, held=bootstrap.RUN_BYTES_PER_PAIR)


def test_a_task_that_fits_only_the_scoring_is_refused_before_encoding(bench, base_args, tmp_path, monkeypatch):
    from harness.core import bootstrap, machine

    root = Path(base_args[base_args.index("--senteval-dir") + 1])
    n = len((root / "STS" / "STSBenchmark" / "sts-test.csv").read_text().splitlines())
    monkeypatch.setattr(machine, "available_bytes", lambda device: bootstrap.scoring_bytes(n, 0) + 64 * n)
    code, _out, err = bench(*base_args)
    assert code == 3, err
    assert f"scoring {n:,} pairs needs about" in one_error_line(err)
    assert not list(tmp_path.glob("cache/vectors/*/part-*.npy"))


# -- the minor rows: one error line each, before anything is written ------------------------------


def test_threads_above_the_maximum_is_one_error_line_not_a_segfault(tmp_path):
    """torch.set_num_threads(100000) ended the process (exit 139, no message): in a subprocess, so
    a regression cannot take the test run with it."""
    done = subprocess.run([sys.executable, str(ROOT / "run_bench.py"), "--threads", "100000", "--methods", "avg",
                           "--output-dir", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "--threads 100000: must be at most 4096" in one_error_line(done.stderr)
    assert not (tmp_path / "out").exists()


def test_a_prompt_with_two_sentence_slots_is_one_error_line(bench, base_args, tmp_path):
    code, _out, err = bench(*base_args, "--set", "avg.prompt={sentence} and {sentence}")
    assert code == 2, err
    assert "--set avg.prompt={sentence} and {sentence}: {sentence} appears 2 times" in one_error_line(err)
    assert not list(tmp_path.glob("out/runs/*.json"))


def test_an_unknown_device_is_refused_even_when_every_sentence_is_cached(bench, base_args, tmp_path):
    code, _out, err = bench(*base_args)
    assert code == 0, err
    code, _out, err = bench(*base_args, "--device", "tpu", "--output-dir", str(tmp_path / "again"))
    assert code == 2, err
    assert "--device tpu: expected auto, cpu, cuda" in one_error_line(err)
    assert not (tmp_path / "again").exists()


def test_a_dry_run_with_history_is_refused_and_writes_nothing(bench, base_args, tmp_path):
    code, _out, err = bench(*base_args, "--dry-run", "--history")
    assert code == 2, err
    assert "--dry-run and --history do not combine" in one_error_line(err)
    assert not (tmp_path / "out").exists()


def test_a_dry_run_of_a_paper_prints_its_table_and_writes_nothing(bench, base_args, tmp_path):
    root = base_args[base_args.index("--senteval-dir") + 1]
    code, out, err = bench("--dry-run", "--paper", "bert-whitening", "--tasks", "stsb", "--source", "senteval",
                           "--senteval-dir", root, "--no-plots")
    assert code == 0, err
    assert "bert-whitening" in out.lower() or "whitening" in out
    assert not list((tmp_path / "out").glob("paper-*")) and not list(tmp_path.glob("out/runs/*.json"))


def test_a_method_option_that_is_not_an_integer_names_the_type(bench, base_args):
    code, _out, err = bench(*base_args, "--methods", "whitening", "--set", "whitening.k=abc")
    assert code == 2, err
    line = one_error_line(err)
    assert "--set whitening.k=abc: expected an integer" in line and "valid value" not in line
