"""Every benchmark script starts: its imports resolve and its flags parse (``--help``). The
benchmarks themselves take minutes and run by hand (docs/PERFORMANCE.md); this keeps a refactor
from breaking one unnoticed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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
