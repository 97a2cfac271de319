"""The default run stage by stage, cold and warm, and the cold small run against MTEB's (issue 44).

    .venv/bin/python benchmarks/studies/run_stages.py            # ~4 minutes on 2 idle cores
    .venv/bin/python benchmarks/studies/run_stages.py --small-only --rounds 3 \\
        --out docs/measurements/run_stages_small.md
    .venv/bin/python benchmarks/studies/run_stages.py --before /tmp/before \\
        --out docs/measurements/run_stages.md
    .venv/bin/python benchmarks/studies/run_stages.py \\
        --out docs/measurements/run_stages_bytecode.md  # issue 44, installed with bytecode

Every step is a fresh process of the user's own command, ``run_bench.py``, as ``make bench`` runs
it: plots, page, MTEB files and history included. Its wall time is the process's ("process s":
interpreter start to exit), its stages those of the ``stages:`` line the run prints
(:mod:`harness.core.stages`: exclusive wall seconds, so they add up to the run's total; ``start``
is the interpreter and imports before the run).

    default cold   ``run_bench.py`` (the embedded default: 7 methods on STS-B), empty cache and
                   output folder
    default warm   the same command again, same cache and output folder (a re-run of make bench)
    avg fp32/bf16  ``run_bench.py --methods avg --tasks stsb --dtype D``, empty cache and output
    mteb fp32      MTEB's own STSBenchmark evaluation of the same model on the same data
                   (``benchmarks/peers/baselines.py mteb``, as benchmarks/peers/vs_peers.py has it)

Targets: default cold, process / encode stage ≤ 1.5 (install aside: ``make venv``, timed apart);
avg fp32 / mteb ≤ 0.45 where bf16 is emulated, avg bf16 / mteb ≤ 0.35 where the CPU has bf16.

``--before DIR``: another checkout of sts-bench (e.g. ``git worktree add /tmp/before main``) whose
``run_bench.py`` runs with this venv's Python (its own ``harness`` package comes first on the
path, being the script's folder), step for step alternating with this one's, so both meet the
same machine; the report puts them side by side.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
# The embedded default's Spearman ×100 (docs/DEVELOPMENT.md): a cut must leave them as they are.
DEFAULT_SCORES = {
    "avg": 82.0325,
    "sbert": 82.0325,
    "first-last": 81.5546,
    "whitening": 80.1291,
    "flow": 79.9258,
    "cls": 73.4996,
    "random": 0.9606,
}


def run_command(tree: Path, args: list[str], cache: Path, out: Path) -> dict:
    """``tree/run_bench.py ARGS --output-dir OUT`` as a fresh process with ``cache``; its wall
    seconds, its stages and its Spearman per method (from the scores.csv it wrote)."""
    from benchmarks.side_by_side import STEP_ENV, StepFailed
    from harness.core.stages import parse_line

    command = [sys.executable, str(tree / "run_bench.py"), *args, "--output-dir", str(out)]
    env = {**os.environ, **STEP_ENV, "STS_BENCH_CACHE": str(cache)}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise StepFailed(command, done.returncode, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.startswith("stages:")]
    with (out / "scores.csv").open(encoding="utf-8") as handle:
        spearman = {r["method"]: float(r["spearman"]) for r in csv.DictReader(handle)}
    return {
        "process_s": wall,
        "stages": parse_line(lines[-1]) if lines else summary_stages(done.stderr),
        "spearman": spearman,
    }


def summary_stages(stderr: str) -> dict[str, float]:
    """A checkout from before the stages: line: the seconds its summary line ended with
    (``...; plan 0.2 s · encode 138.7 s · fit 20.4 s · score 1.0 s · write 1.6 s``)."""
    lines = [line for line in stderr.splitlines() if line.startswith("summary:")]
    if not lines:
        return {}
    out = {}
    for part in lines[-1].rsplit("; ", 1)[1].split(" · "):
        name, value, _ = part.strip().rsplit(" ", 2)
        out[name] = float(value)
    out["total"] = sum(out.values())
    return out


def mteb_step() -> dict:
    from benchmarks.side_by_side import run_step

    return run_step([sys.executable, str(ROOT / "benchmarks" / "peers" / "baselines.py"), "mteb"])


# Fixed costs of a cold process: the interpreter, the command line's imports, torch's (the first
# encode pays it) and transformers' (a backbone the native engines do not run).
STARTS = {
    "python -c pass": ["-c", "pass"],
    "run_bench.py --help": [str(ROOT / "run_bench.py"), "--help"],
    "import torch": ["-c", "import torch"],
    "import transformers": ["-c", "import transformers"],
}


def start_steps() -> dict:
    from benchmarks.side_by_side import run_process

    return {
        name: {"process_s": run_process([sys.executable, *args])[1]}
        for name, args in STARTS.items()
    }


def one_round(trees: dict[str, Path], work: Path, number: int, args: argparse.Namespace) -> dict:
    """Every step once per tree; the trees' order alternates from round to round."""
    out: dict[str, dict] = {}
    order = list(trees.items())
    if number % 2:
        order.reverse()
    if not args.small_only:
        for side, tree in order:
            cache, folder = work / f"cache-default-{side}-{number}", work / f"out-default-{side}"
            out[f"default cold {side}"] = run_command(tree, [], cache, folder)
            out[f"default warm {side}"] = run_command(tree, [], cache, folder)
    # MTEB's step amid the small runs (between the dtypes), the order reversed every other round:
    # a machine that drifts meets both sides alike.
    small: list[tuple[str, Callable[[], dict]]] = []
    for dtype in args.dtypes:
        for side, tree in order:
            cache, folder = work / f"cache-avg-{dtype}-{side}-{number}", work / f"out-avg-{side}"
            command = ["--methods", "avg", "--tasks", "stsb", "--dtype", dtype]
            small.append(
                (f"avg {dtype} cold {side}", partial(run_command, tree, command, cache, folder))
            )
        if dtype == args.dtypes[0]:
            small.append(("mteb fp32", mteb_step))
    for name, step in reversed(small) if number % 2 else small:
        out[name] = step()
    out.update(start_steps())
    return out


def medians(rounds: list[dict], step: str) -> tuple[float, dict[str, float]]:
    process = statistics.median(r[step]["process_s"] for r in rounds)
    names = list(rounds[0][step].get("stages", {}))
    stages = {n: statistics.median(r[step]["stages"].get(n, 0.0) for r in rounds) for n in names}
    return process, stages


def stage_table(rounds: list[dict], steps: list[str]) -> list[str]:
    """One column per step: each stage's median seconds and its share of the process."""
    names: list[str] = []
    for step in steps:
        names += [n for n in rounds[0][step]["stages"] if n not in names and n != "total"]
    meds = {step: medians(rounds, step) for step in steps}
    lines = [
        "| stage | " + " | ".join(steps) + " |",
        "|---|" + "---:|" * len(steps),
    ]
    for name in [*names, "total"]:
        cells = []
        for step in steps:
            process, stages = meds[step]
            value = stages.get(name, 0.0)
            cells.append(f"{value:.2f} s ({100 * value / process:.0f} %)")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| process | " + " | ".join(f"{meds[s][0]:.2f} s" for s in steps) + " |")
    return lines


# The stages of a checkout from before the stages: line, as its summary line grouped them.
COARSE = ("start", "plan", "encode", "fit", "score", "write")


def coarse(stages: dict[str, float]) -> dict[str, float]:
    """A run's stages in :data:`COARSE`'s groups: data with the plan, every fit as fit, every
    report step (records, comparisons and plots included) as write."""
    out = dict.fromkeys(COARSE, 0.0)
    for name, seconds in stages.items():
        if name == "total":
            continue
        group = "plan" if name == "data" else "fit" if name.startswith("fit") else name
        out[group if group in COARSE else "write"] += seconds
    out["total"] = stages.get("total", sum(out.values()))
    return out


def coarse_table(rounds: list[dict], steps: list[str]) -> list[str]:
    lines = ["| stage | " + " | ".join(steps) + " |", "|---|" + "---:|" * len(steps)]
    meds = {}
    for step in steps:
        grouped = [coarse(r[step]["stages"]) for r in rounds]
        meds[step] = {n: statistics.median(g[n] for g in grouped) for n in grouped[0]}
    for name in [*COARSE, "total"]:
        lines.append(f"| {name} | " + " | ".join(f"{meds[s][name]:.1f} s" for s in steps) + " |")
    processes = [statistics.median(r[s]["process_s"] for r in rounds) for s in steps]
    lines.append("| process | " + " | ".join(f"{p:.1f} s" for p in processes) + " |")
    return lines


def report(rounds: list[dict], trees: dict[str, Path], args: argparse.Namespace) -> list[str]:
    from benchmarks.report import cpu_facts
    from benchmarks.side_by_side import header

    facts = cpu_facts()
    what = "run_bench.py as fresh processes, packaged all-MiniLM-L6-v2 on packaged STS-B"
    dtypes = ["fp32", *[d for d in args.dtypes if d != "fp32"]]
    lines = header(what, dtypes, len(rounds), "The default run, stage by stage", facts)
    sides = list(trees)
    if len(sides) > 1:
        lines += [f"trees: {', '.join(f'{s} = {trees[s]}' for s in sides)}", ""]
    ratios = [
        "| ratio | " + " | ".join(sides) + " | target |",
        "|---|" + "---:|" * len(sides) + "---:|",
    ]
    if not args.small_only:
        steps = [f"default {kind} {sides[-1]}" for kind in ("cold", "warm")]
        lines += ["Default run (`python run_bench.py`, what `make bench` runs):", ""]
        lines += [*stage_table(rounds, steps), ""]
        if len(sides) > 1:
            steps = [f"default {kind} {side}" for kind in ("cold", "warm") for side in sides]
            lines += ["Before and after, stages grouped as the summary line had them:", ""]
            lines += [*coarse_table(rounds, steps), ""]
        cells = []
        for side in sides:
            process, stages = medians(rounds, f"default cold {side}")
            cells.append(f"{process / stages['encode']:.2f}")
        ratios.append(
            "| default cold: process / encode stage | " + " | ".join(cells) + " | ≤ 1.5 |"
        )
        for side in sides:
            scores = rounds[-1][f"default cold {side}"]["spearman"]
            moved = {m: scores.get(m) for m, v in DEFAULT_SCORES.items() if scores.get(m) != v}
            said = "unchanged" if not moved else f"CHANGED: {moved}"
            lines.append(f"embedded default's Spearman ({side}): {said}")
        lines.append("")
    if args.dtypes:
        steps = [f"avg {dtype} cold {sides[-1]}" for dtype in args.dtypes]
        lines += ["Cold small run (`run_bench.py --methods avg --tasks stsb --dtype D`):", ""]
        lines += [*stage_table(rounds, steps), ""]
        if len(sides) > 1:
            steps = [f"avg {dtype} cold {side}" for dtype in args.dtypes for side in sides]
            lines += ["Before and after, grouped:", ""]
            lines += [*coarse_table(rounds, steps), ""]
        mteb = statistics.median(r["mteb fp32"]["process_s"] for r in rounds)
        lines.append(f"MTEB's STSBenchmark evaluation, fp32 (process): {mteb:.2f} s")
        lines.append("")
        for dtype in args.dtypes:
            cells = []
            for side in sides:
                process, _ = medians(rounds, f"avg {dtype} cold {side}")
                cells.append(f"{process / mteb:.2f}")
            target = "≤ 0.35" if dtype == "bf16" else "≤ 0.45 (AVX2)"
            ratios.append(
                f"| avg {dtype} cold / MTEB fp32 (process) | "
                + " | ".join(cells)
                + f" | {target} |"
            )
    lines += ["Process start (fresh processes, no run):", "", "| process | s |", "|---|---:|"]
    for name in STARTS:
        value = statistics.median(r[name]["process_s"] for r in rounds)
        lines.append(f"| `{name}` | {value:.2f} |")
    return [*lines, "", *ratios]


def main() -> None:
    from benchmarks.side_by_side import write

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds, medians (1)")
    parser.add_argument(
        "--dtypes",
        nargs="*",
        choices=("fp32", "bf16"),
        default=["fp32", "bf16"],
        help="dtypes of the cold small run against MTEB (fp32 bf16; none: leave it out)",
    )
    parser.add_argument("--small-only", action="store_true", help="leave out the default run")
    parser.add_argument("--before", type=Path, help="another checkout, timed alternately")
    parser.add_argument("--out", help="also write the report (markdown) to this file")
    args = parser.parse_args()
    trees = {"this": ROOT} if args.before is None else {"before": args.before, "after": ROOT}
    load = os.getloadavg()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="sts-stages-") as tmp:
        for number in range(args.rounds):
            rounds.append(one_round(trees, Path(tmp), number, args))
            print(f"round {number + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    write(report(rounds, trees, args), args.out, load)


if __name__ == "__main__":
    main()
