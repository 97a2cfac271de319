"""Peak memory of ``run_bench.py --methods avg --tasks file:1M_pairs.tsv``, sentences cached.

    .venv/bin/python benchmarks/studies/million_pairs.py   # 1M pairs, ~2 minutes on 2 cores
    .venv/bin/python benchmarks/studies/million_pairs.py --pairs 300000 --bootstrap 0
    .venv/bin/python benchmarks/studies/million_pairs.py --out docs/measurements/million_pairs.md

The pairs file repeats STS-B test's 1,379 pairs (2,552 distinct sentences) up to ``--pairs`` rows,
so every sentence is encoded once by a warm-up run on one copy of the pairs, into the cache given
(default: a fresh one under a temporary folder), and the measured run encodes nothing: what it
holds is the scoring's own memory. The measured run is a fresh process under ``/usr/bin/time``
(peak RSS, the kernel's high-water mark) with the default bootstrap (1000 resamples) unless
``--bootstrap`` says otherwise. Issue 42's target: under 3 GB. Before the scorer gathered vectors a
chunk of pairs at a time, 300k pairs peaked at 5.5 GB and 800k failed ("Unable to allocate 2.29
GiB (800000, 384) float64"): both sides' vectors, per pair, in float32 and again in float64.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def write_pairs(path: Path, n: int) -> None:
    """``n`` rows of STS-B test's pairs, repeated in order (a TSV with a header)."""
    from benchmarks.peers.baselines import load_stsb_split

    s1, s2, gold = load_stsb_split("test")[:3]
    with path.open("w", encoding="utf-8") as out:
        out.write("sentence1\tsentence2\tscore\n")
        for i in range(n):
            k = i % len(s1)
            out.write(f"{s1[k]}\t{s2[k]}\t{float(gold[k])!r}\n")


def run(args: list[str], cache: str, out: Path, timed: bool) -> tuple[float, float]:
    """Run the harness in a fresh process; (wall s, peak RSS MiB) when ``timed``."""
    command = [
        sys.executable,
        str(ROOT / "run_bench.py"),
        *args,
        "--cache-dir",
        cache,
        "--output-dir",
        str(out),
        "--no-plots",
    ]
    if timed:
        command = ["/usr/bin/time", "-f", "%e %M", *command]
    done = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    if done.returncode != 0:
        raise SystemExit(f"exit {done.returncode}:\n{done.stdout[-1500:]}\n{done.stderr[-2500:]}")
    if not timed:
        return 0.0, 0.0
    wall, rss_kib = done.stderr.strip().splitlines()[-1].split()
    return float(wall), int(rss_kib) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--cache-dir", help="the embedding cache (default: a fresh temporary one)")
    parser.add_argument("--out", help="also write the report (markdown) to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cache = args.cache_dir or str(folder / "cache")
        write_pairs(folder / "warm.tsv", 1379)
        write_pairs(folder / "1M_pairs.tsv", args.pairs)
        common = ["--methods", "avg"]
        run(
            [*common, "--tasks", f"file:{folder / 'warm.tsv'}", "--bootstrap", "0"],
            cache,
            folder / "warm-out",
            timed=False,
        )
        measured = [*common, "--tasks", f"file:{folder / '1M_pairs.tsv'}"]
        if args.bootstrap != 1000:
            measured += ["--bootstrap", str(args.bootstrap)]
        wall, peak = run(measured, cache, folder / "out", timed=True)
    from benchmarks.report import emit, machine_line

    lines = [
        machine_line(["fp32"]),
        "",
        "`run_bench.py --methods avg --tasks file:1M_pairs.tsv` (STS-B test's pairs repeated), "
        "sentences cached, one fresh process",
        "",
        "| pairs | bootstrap | wall s | peak RSS MiB |",
        "|---:|---:|---:|---:|",
        f"| {args.pairs:,} | {args.bootstrap} | {wall:.1f} | {peak:.0f} |",
    ]
    emit(lines, args.out)


if __name__ == "__main__":
    main()
