"""Time and peak memory of scoring 10k, 100k and 1M synthetic pairs with the bootstrap and a paired
test.

    .venv/bin/python benchmarks/studies/pairs_scale.py   # 10k, 100k, 1M; ~5 minutes on 2 cores
    .venv/bin/python benchmarks/studies/pairs_scale.py --sizes 10000 30000 --rounds 200
    .venv/bin/python benchmarks/studies/pairs_scale.py --subsets 5 --json out.json

Each size runs in a fresh process, which reports its own peak resident memory (``VmHWM``, the
kernel's high-water mark, and ``ru_maxrss``). In it: gold scores in 26 tied steps of 0.2 over 0-5
(as STS gold), two methods' similarities correlated with gold (noise σ 1 and 1.3), optionally
split into subsets; then

* **score**: :func:`harness.core.scoring.score_split` of each method with ``--rounds`` bootstrap
  resamples (the run's 95 % interval), as the runner scores a (method, task);
* **paired**: :func:`harness.core.significance.scored` of both, the paired bootstrap and Williams'
  t, given no ``ResampleMemo`` (nothing is memoised then), so the resampling is timed again (as
  when the reports are rebuilt in another process).

Memory should grow about linearly with the pairs and not with pairs × rounds: the resamples are
ranked in chunks (:mod:`harness.core.bootstrap`); before, 50k pairs took 2.0 GB and 500k 19 GB
and rising. Times are wall seconds on a machine that may be shared (the load averages are
printed) and the CPU seconds of the measured process, which a busy machine inflates less. Time per
pair rises somewhat with size: past a few 100k pairs the gathers of a resample's ranks miss the
CPU's caches.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
DEFAULT_SIZES = [10_000, 100_000, 1_000_000]


def high_water_mib() -> float:
    """This process's peak resident memory in MiB: VmHWM from /proc, else ru_maxrss (KiB on
    Linux)."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(n: int, rounds: int, subsets: int) -> dict[str, float]:
    """In the measured process: score two methods on ``n`` synthetic pairs and compare them."""
    import numpy as np

    from harness.core.scoring import score_split
    from harness.core.significance import paired_bootstrap, scored, williams

    rng = np.random.default_rng(0)
    gold = rng.integers(0, 26, n) / 5.0
    a = gold + rng.normal(0, 1.0, n)
    b = gold + rng.normal(0, 1.3, n)
    labels = [f"subset-{i * subsets // n}" for i in range(n)] if subsets > 1 else None
    aggregation = "wmean" if subsets > 1 else "all"
    score_split(
        a[:100], gold[:100], None, "all", 10, 1
    )  # one-time costs (the code digest's parse) are not timed
    before = high_water_mib()
    start = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = start.ru_utime + start.ru_stime
    t0 = time.perf_counter()
    first = score_split(a, gold, labels, aggregation, rounds, 1234)
    second = score_split(b, gold, labels, aggregation, rounds, 1234)
    t1 = time.perf_counter()
    # no ResampleMemo passed: the paired test resamples again (see the module docstring)
    one, two = (
        scored(a, gold, labels, aggregation, rounds, 1234),
        scored(b, gold, labels, aggregation, rounds, 1234),
    )
    test, other = paired_bootstrap(one, two), williams(one, two, gold)
    t2 = time.perf_counter()
    assert first.ci95 is not None and second.ci95 is not None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "pairs": n,
        "rounds": rounds,
        "subsets": subsets,
        "score_s": t1 - t0,
        "paired_s": t2 - t1,
        "cpu_s": usage.ru_utime + usage.ru_stime - cpu_before,
        "peak_rss_mib": high_water_mib(),
        "rss_before_mib": before,
        "spearman_a": first.spearman,
        "ci_a": list(first.ci95),
        "delta": test.delta,
        "delta_ci": [test.ci_low, test.ci_high],
        "p_bootstrap": test.p_value,
        "p_williams": other.p_value,
    }


def table(rows: list[dict[str, float]], rounds: int, subsets: int, load: str) -> list[str]:
    lines = [
        f"{rounds} bootstrap resamples, two methods, {subsets} subset(s), one process per size; "
        f"{load}",
        "",
        "| pairs | score 2 methods (s) | paired test (s) | total (s) | s per 100k pairs | CPU s "
        "per 100k pairs "
        "| peak RSS (MiB) | MiB per 100k pairs above the first |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    base = rows[0]
    for row in rows:
        total = row["score_s"] + row["paired_s"]
        extra = row["pairs"] - base["pairs"]
        growth = (
            f"{(row['peak_rss_mib'] - base['peak_rss_mib']) / extra * 1e5:.1f}"
            if extra > 0
            else "—"
        )
        lines.append(
            f"| {row['pairs']:,} | {row['score_s']:.1f} | {row['paired_s']:.1f} | {total:.1f} "
            f"| {total / row['pairs'] * 1e5:.2f} | {row['cpu_s'] / row['pairs'] * 1e5:.2f} "
            f"| {row['peak_rss_mib']:.0f} | {growth} |"
        )
    return lines


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=DEFAULT_SIZES, help="pair counts (one process each)"
    )
    parser.add_argument(
        "--rounds", type=int, default=1000, help="bootstrap resamples (the run's default: 1000)"
    )
    parser.add_argument(
        "--subsets", type=int, default=1, help="subsets the pairs are split into (wmean over them)"
    )
    parser.add_argument("--json", help="also write the measurements to this file")
    parser.add_argument("--out", help="also write the report (markdown) to this file")
    args = parser.parse_args()
    from benchmarks.report import emit, load_line, machine_line

    started = os.getloadavg()
    rows = []
    for n in sorted(args.sizes):
        done = subprocess.run(
            [sys.executable, __file__, "--child", str(n), str(args.rounds), str(args.subsets)],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        if done.returncode != 0:
            raise SystemExit(done.stderr[-2000:])
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(
            f"{n:,} pairs: {rows[-1]['score_s'] + rows[-1]['paired_s']:.1f} s, "
            f"peak {rows[-1]['peak_rss_mib']:.0f} MiB",
            file=sys.stderr,
            flush=True,
        )
    head = [machine_line(["float64 (numpy: the scores and resamples)"]), ""]
    emit([*head, *table(rows, args.rounds, args.subsets, load_line(started))], args.out)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"rows": rows, "load": load_line(started)}, indent=1) + "\n",
            encoding="utf-8",
        )


if __name__ == "__main__":
    main()
