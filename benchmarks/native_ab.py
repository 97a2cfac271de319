"""The native encoder against an earlier commit's, side by side in one process, and where its time
goes.

    .venv/bin/python benchmarks/native_ab.py --against ea62661     # bf16 and fp32, ~2 minutes
    python benchmarks/native_ab.py --against ea62661 --threads 1 \\
        --out docs/measurements/native_ab.md
    .venv/bin/python benchmarks/native_ab.py --against ea62661 --profile  # + torch profiler tables

Both versions of ``harness/core/encoding/native_bert.py`` (the old one read with ``git show``) load
the packaged MiniLM and run the same padded, length-sorted batches of the 2,552 unique STS-B test
sentences (tokenization excluded), alternating in rounds; the median of each is reported with the
largest difference of their ``mean@6`` / ``cls@6`` / ``mean@1`` vectors. ``--profile`` prints the
torch profiler's operator table of each, which is how the time split in docs/PERFORMANCE.md was
read.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def load_old(rev: str):
    source = subprocess.run(
        ["git", "show", f"{rev}:harness/core/encoding/native_bert.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="native-ab-")) / "old_native_bert.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("old_native_bert", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    import numpy as np
    import torch

    from benchmarks.peers import load_stsb_test
    from harness.core.encoding import native_bert
    from harness.core.encoding.backbone import resolve_backbone
    from harness.core.encoding.forward import bound_kernel_cache, plan_batches
    from harness.core.encoding.pooling import View, pool_view

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="git revision of the other native_bert.py")
    parser.add_argument("--dtypes", nargs="+", default=["bf16", "fp32"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out", help="also write the report (markdown) to this file")
    args = parser.parse_args()
    load_at_start = os.getloadavg()
    bound_kernel_cache()
    torch.set_num_threads(args.threads)
    old = load_old(args.against)
    folder = Path(resolve_backbone("minilm").path)
    s1, s2, _ = load_stsb_test()
    texts = list(dict.fromkeys(s1 + s2))
    tokenizer = native_bert.NativeTokenizer(folder, 128)
    items = tokenizer.encode(texts)
    batches = [
        tokenizer.pad([items[i] for i in ids])
        for ids in plan_batches([len(ids) for ids, _ in items], 0, 4096)
    ]
    views = [View("mean", 6), View("cls", 6), View("mean", 1)]
    lines = [
        f"{len(texts)} sentences in {len(batches)} batches, MiniLM, {args.threads} thread(s), "
        "median of "
        f"{args.rounds}; this tree vs {args.against}",
        "",
        "| dtype | before s | now s | speed-up | max abs diff of vectors |",
        "|---|---:|---:|---:|---:|",
    ]
    profiles = []
    for dtype in args.dtypes:
        models = {
            "before": old.load_native_bert(folder),
            "now": native_bert.load_native_bert(folder),
        }
        if dtype == "bf16":
            for model in models.values():
                model.set_compute_dtype(torch.bfloat16)

        def run(model):
            with torch.inference_mode():
                return [
                    [pool_view(*model(**b), b["attention_mask"], v) for v in views] for b in batches
                ]

        outputs = {name: run(model) for name, model in models.items()}  # also the warm-up
        diff = max(
            float(
                np.abs(
                    np.concatenate([o[i] for o in outputs["before"]])
                    - np.concatenate([o[i] for o in outputs["now"]])
                ).max()
            )
            for i in range(len(views))
        )
        times: dict[str, list[float]] = {name: [] for name in models}
        for _ in range(args.rounds):
            for name, model in models.items():
                started = time.perf_counter()
                run(model)
                times[name].append(time.perf_counter() - started)
        before, now = statistics.median(times["before"]), statistics.median(times["now"])
        lines.append(f"| {dtype} | {before:.2f} | {now:.2f} | {before / now:.2f}× | {diff:.2g} |")
        if args.profile:
            from torch.profiler import ProfilerActivity, profile

            for name, model in models.items():
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    run(model)
                profiles += [
                    "",
                    f"{name}, {dtype}:",
                    "```",
                    prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12),
                    "```",
                ]
    from benchmarks.report import emit, load_line

    emit([*lines, "", load_line(load_at_start), *profiles], args.out)


if __name__ == "__main__":
    main()
