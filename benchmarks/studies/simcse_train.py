"""simcse-train on the packaged MiniLM on CPU: throughput fp32 vs bf16, one epoch over all STS-B
sentences, and STS-B test before and after, on the same backbone.

    .venv/bin/python benchmarks/studies/simcse_train.py                 # ~6 minutes on 2 cores
    .venv/bin/python benchmarks/studies/simcse_train.py --skip-epoch    # throughput only, ~1 minute
    .venv/bin/python benchmarks/studies/simcse_train.py --out docs/measurements/simcse_train.md

Throughput: SimCSE steps on the first N STS-B train sentences (batch 64, max_len 32, each sentence
encoded twice), fp32 and bf16 autocast alternating over rounds; sentences per second of training
(forward of both views + backward + optimiser step), median over rounds, and their ratio. The
header says which CPU ran and whether it computes bf16 (an emulated bf16 is slower than fp32).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def throughput(sentences: list[str], rounds: int) -> dict[str, float]:
    from harness.core.encoding import resolve_backbone
    from methods.training.simcse_loop import SimCSEConfig, SimCSETrainer

    base = Path(resolve_backbone("minilm").path)
    from benchmarks.side_by_side import round_order

    speeds: dict[str, list[float]] = {"fp32": [], "bf16": []}
    for number in range(rounds):
        for precision in round_order(list(speeds), number, rounds):  # who goes first rotates
            with tempfile.TemporaryDirectory() as tmp:
                config = SimCSEConfig(precision=precision, save_every=10**9)
                result = SimCSETrainer(base, Path(tmp), config, seed=42, progress=False).train(
                    sentences
                )
                speeds[precision].append(result.items_per_second)
    return {k: statistics.median(v) for k, v in speeds.items()}


def epoch_and_scores(cache: str, out: str) -> dict:
    import harness

    before = harness.run(
        harness.BenchConfig(
            methods=("cls", "avg"), cache_dir=cache, output_dir=out, progress=False, plots=False
        )
    )
    started = time.perf_counter()
    # The measured setting is the transductive one (target holds the test sentences); the method's
    # default is heldout (train + dev minus test sentences).
    after = harness.run(
        harness.BenchConfig(
            methods=("simcse-train",),
            cache_dir=cache,
            output_dir=out,
            method_params={"simcse-train": {"corpus": "target"}},
            progress=True,
            plots=False,
        )
    )
    wall = time.perf_counter() - started
    record = after.records[0]
    return {
        "before": {r["method"]["name"]: r["scores"]["spearman"] for r in before.records},
        "after": record["scores"]["spearman"],
        "fit": record["fit"],
        "wall": wall,
    }


def main() -> None:
    from harness.core.data.sources.packaged import stsb_dir
    from harness.core.data.sources.rows import read_stsb_csv

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=640, help="sentences per throughput run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-epoch", action="store_true")
    parser.add_argument("--out", help="also write the report (markdown) to this file")
    args = parser.parse_args()
    sentences = read_stsb_csv(stsb_dir() / "sts-train.csv").sentences()[: args.sentences]
    speed = throughput(sentences, args.rounds)
    lines = [
        f"simcse-train throughput, MiniLM, CPU ({os.cpu_count()} cores), {len(sentences)} "
        "sentences, "
        f"batch 64, max_len 32, median of {args.rounds}",
        "",
        "| precision | sentences/s |",
        "|---|---:|",
        f"| fp32 | {speed['fp32']:.1f} |",
        f"| bf16 autocast | {speed['bf16']:.1f} |",
        "",
        f"bf16 / fp32 = {speed['bf16'] / speed['fp32']:.2f}",
    ]
    if not args.skip_epoch:
        with tempfile.TemporaryDirectory() as tmp:
            epoch = epoch_and_scores(f"{tmp}/cache", f"{tmp}/out")
        fit = epoch["fit"]
        lines += [
            "",
            "one epoch over all STS-B sentences (--fit-set target: "
            f"{fit['fit_set']['n_sentences']} "
            f"sentences, {fit['steps']} steps, {fit['precision']}): training "
            f"{fit['train_seconds']:.0f} s "
            f"({fit['sentences_per_second']:.1f} sentences/s), whole run {epoch['wall']:.0f} s",
            "",
            "| STS-B test Spearman ×100 | |",
            "|---|---:|",
            f"| MiniLM [CLS] (cls), before | {epoch['before']['cls']:.2f} |",
            f"| MiniLM mean pooling (avg), before | {epoch['before']['avg']:.2f} |",
            f"| simcse-train (cls_before_pooler), after | {epoch['after']:.2f} |",
            f"| loss first → last | {fit['first_loss']:.3f} → {fit['final_loss']:.3f} |",
        ]
    from benchmarks.report import emit, machine_line

    emit([machine_line(["fp32", "bf16 autocast"]), "", *lines], args.out)


if __name__ == "__main__":
    main()
