"""Where a run's time went (harness/core/stages.py): exclusive stage seconds from one clock, the
stages: line and its parser, the process's age, and a run's stages adding up to its wall time.
Also the pooled mean that the fits read (methods.pooling.mean_of) against numpy's own mean."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from harness.core import stages
from harness.core.stages import Stages, parse_line

ROOT = Path(__file__).resolve().parent.parent


class FakeClock:
    """perf_counter by hand: ``advance(s)`` moves it."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def fake(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(stages.time, "perf_counter", clock)
    return clock


def test_a_nested_stage_pauses_the_outer_one(fake):
    clock = Stages()
    with clock("plan"):
        fake.advance(1.0)
        with clock("data"):
            fake.advance(2.0)
        fake.advance(0.5)
        with clock("data"):  # a stage entered twice adds up
            fake.advance(0.25)
    with clock("encode"):
        fake.advance(4.0)
    assert clock.seconds == {"plan": 1.5, "data": 2.25, "encode": 4.0}
    assert clock.total() == 7.75  # the wall time from the first entry to the last exit


def test_stage_charges_the_current_clock_only_inside_a_run(fake):
    with stages.stage("fit flow"):  # no run: nothing to charge, no error
        fake.advance(1.0)
    clock = Stages()
    with stages.timing(clock), clock("score"):
        fake.advance(1.0)
        with stages.stage("fit flow"):
            fake.advance(3.0)
    assert clock.seconds == {"score": 1.0, "fit flow": 3.0}


def test_the_line_parses_back_to_its_seconds():
    clock = Stages()
    clock.seconds = {"start": 0.71, "plan": 0.2, "encode": 6.0, "fit flow": 2.04, "page": 0.001}
    line = clock.line()
    assert line == (
        "stages: start 0.7 s · plan 0.2 s · encode 6.0 s · fit flow 2.0 s · total 9.0 s "
        "(encode 67 %)"
    )  # page under 5 ms left out; 6.0 / 8.951 = 67 %
    assert parse_line(line) == {"start": 0.7, "plan": 0.2, "encode": 6.0, "fit flow": 2.0,
                                "total": 9.0}


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux's /proc")
def test_process_age_is_the_time_since_the_process_started():
    """A child that sleeps 0.5 s after it starts reports an age of at least 0.5 s and at most the
    wall time its parent measured around it."""
    code = "import time; time.sleep(0.5); from harness.core.stages import process_age; print(process_age())"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=True)
    wall = time.perf_counter() - started
    age = float(done.stdout)
    assert 0.5 <= age <= wall + 0.02  # /proc's start time counts in ticks of 10 ms


def test_the_command_line_prints_stages_that_add_up_to_the_run(bench, senteval_root, tiny_bert):
    started = time.perf_counter()
    code, _, err = bench("--methods", "avg", "whitening", "--tasks", "stsb", "--backbone", str(tiny_bert),
                           "--source", "senteval", "--senteval-dir", str(senteval_root), "--no-plots")
    wall = time.perf_counter() - started
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("stages:")]
    assert len(lines) == 1
    seconds = parse_line(lines[0])
    assert {"start", "encode", "total"} <= set(seconds), seconds  # stages under 5 ms (plan, often): left out
    shown = sum(v for k, v in seconds.items() if k not in ("total", "start"))
    # each shown to 0.1 s, and the stages under 5 ms left out
    assert shown == pytest.approx(seconds["total"] - seconds["start"], abs=0.05 * len(seconds) + 0.1)
    # the run within the test's own wall time (start is the test process's age: not comparable); both
    # are printed to 0.1 s, so their difference may exceed the true one by up to 0.1 s (0.4 printed for
    # a 0.348 s run once in CI)
    assert seconds["total"] - seconds["start"] <= wall + 0.1 + 1e-9


def test_a_run_from_python_has_no_start_stage(senteval_root, tiny_bert, tmp_path):
    import harness

    cfg = harness.BenchConfig(methods=("avg", "whitening"), tasks=("stsb",), backbone=str(tiny_bert), source="senteval",
                              senteval_dir=str(senteval_root), cache_dir=str(tmp_path / "c"),
                              output_dir=str(tmp_path / "o"), progress=False, plots=False)
    started = time.perf_counter()
    outcome = harness.run(cfg)
    wall = time.perf_counter() - started
    assert "start" not in outcome.stage_seconds and outcome.stage_seconds["encode"] > 0
    # the fit, each report step, the comparisons inside the leaderboards' step: stages of their own
    assert list(outcome.stage_seconds) == ["plan", "data", "encode", "score", "fit whitening", "records",
                                           "leaderboards", "comparisons", "prompt-spread", "mteb-files",
                                           "history", "page"]
    assert sum(outcome.stage_seconds.values()) == pytest.approx(wall, abs=0.05)


@pytest.mark.parametrize("count", [2, 3, 5])
def test_mean_of_is_numpys_mean_bit_for_bit(count):
    from methods.pooling import mean_of

    rng = np.random.default_rng(count)
    arrays = [(rng.standard_normal((257, 33)) * 10 ** rng.uniform(-3, 3)).astype(np.float32)
              for _ in range(count)]
    expected = np.mean(arrays, axis=0, dtype=np.float32)
    got = mean_of(arrays)
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))
    assert all(not np.shares_memory(got, a) for a in arrays)  # the views are left as they were
