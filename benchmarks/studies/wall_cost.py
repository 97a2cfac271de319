"""What the wall costs a plugin method's call (issue 51): a trivial ``encode`` through the worker
process (``methods/wall.py``) against the same call in the run's own process.

    .venv/bin/python benchmarks/studies/wall_cost.py            # ~20 s on 2 cores
    .venv/bin/python benchmarks/studies/wall_cost.py --out docs/measurements/wall_cost.md

The method returns float32 zeros (n, 384), MiniLM's width, so the time is the wall's: the sentences
pickled to the worker, the vectors sent back as raw bytes and read by ``np.frombuffer``. Calls of
1, 64 and 4,096 sentences (the run's chunk), ``--rounds`` each, alternating in-process and through
the wall; medians, and the ratio. Also the worker's start (fork and the method built there), paid
once per plugin method per run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks.report import emit, load_line, machine_line  # noqa: E402
from harness.core.api import EmbeddingMethod, SpecRequest  # noqa: E402
from methods.wall import built  # noqa: E402


class Zeros(EmbeddingMethod):
    """A plugin's method (its module is not ``methods.``: a guest) doing no work of its own."""

    name, summary = "zeros", "float32 zeros, 384 wide"

    def encode(self, sentences):  # type: ignore[no-untyped-def]
        return np.zeros((len(sentences), 384), np.float32)


class Closing:
    """What the wall asks of a run's context: where to leave each worker's stop."""

    def __init__(self) -> None:
        self.stops: list = []

    def on_close(self, stop) -> None:  # type: ignore[no-untyped-def]
        self.stops.append(stop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    started = os.getloadavg()
    ctx = Closing()
    build = lambda: Zeros.build(SpecRequest(), ctx)  # noqa: E731
    starts = []
    for _ in range(10):
        began = time.perf_counter()
        walled = built(Zeros, build, ctx)
        starts.append(time.perf_counter() - began)
    here = build()
    lines = [
        "# The wall's cost per plugin call (benchmarks/studies/wall_cost.py)",
        "",
        machine_line(["fp32"]),
        "",
        f"worker start (fork, build, first answer): median "
        f"{statistics.median(starts) * 1e3:.2f} ms of 10",
        "",
        "| sentences per encode | in process (median) | through the wall (median) | ratio "
        "| added |",
        "|---:|---:|---:|---:|---:|",
    ]
    for n in (1, 64, 4096):
        sentences = [f"sentence {i}" for i in range(n)]
        times: dict[str, list[float]] = {"here": [], "wall": []}
        for _ in range(args.rounds):
            for side, method in (("here", here), ("wall", walled)):
                began = time.perf_counter()
                method.encode(sentences)
                times[side].append(time.perf_counter() - began)
        a, b = statistics.median(times["here"]), statistics.median(times["wall"])
        lines.append(
            f"| {n:,} | {a * 1e6:,.1f} µs | {b * 1e6:,.1f} µs | {b / a:,.0f}× | "
            f"{(b - a) * 1e6:,.0f} µs |"
        )
    for stop in ctx.stops:
        stop()
    lines += ["", load_line(started)]
    emit(lines, args.out)


if __name__ == "__main__":
    main()
