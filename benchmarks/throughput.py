"""Encode throughput against sentence-transformers, and as a fraction of this machine's matmul peak.

    .venv/bin/python benchmarks/throughput.py            # ~3 minutes on 2 cores

Same model (packaged MiniLM), same sentences (the 2,552 unique sentences of STS-B test), both
already loaded: only encoding is timed, median of ``--rounds``. ``avg`` Spearman on STS-B test
is computed from each side's vectors. The peak probe times a square bf16 (and fp32) matmul with
the same thread count; "% of peak" is the harness's useful FLOPs (2·P·n + 4·L·n²·H over the real
token lengths, padding not counted) per second over that probe.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def matmul_peak(dtype, size: int = 4096, repeats: int = 5) -> float:
    import torch

    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    torch.matmul(a, b)
    best = min(_timed(lambda: torch.matmul(a, b)) for _ in range(repeats))
    return 2 * size ** 3 / best


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> None:
    import json

    import numpy as np
    import torch

    from benchmarks.peers import load_stsb_test, packaged_model_dir
    from harness.core.cost_model import ModelShape
    from harness.core.encoding.backbone import resolve_backbone
    from harness.core.encoding.forward import ForwardPass
    from harness.core.encoding.native_bert import NativeTokenizer
    from harness.core.encoding.pooling import View
    from harness.core.encoding.settings import EncodeSettings
    from harness.core.encoding.windows import make_windows
    from harness.core.scoring import cosine_rows, spearman

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", help="also write the report (markdown) to this file")
    args = parser.parse_args()
    s1, s2, gold = load_stsb_test()
    texts = list(dict.fromkeys(s1 + s2))
    ref = resolve_backbone("minilm")
    view = View("mean", ref.layer_index(-1))
    from sentence_transformers import SentenceTransformer

    st = {"fp32": SentenceTransformer(packaged_model_dir(), device="cpu"),
          "bf16": SentenceTransformer(packaged_model_dir(), device="cpu", model_kwargs={"dtype": torch.bfloat16})}
    ours = {dtype: ForwardPass(ref, EncodeSettings(device="cpu", dtype=dtype, progress=False)) for dtype in st}
    windows = make_windows(texts, EncodeSettings().window)  # the windows a run would use
    times: dict[str, list[float]] = {f"{side} {dtype}": [] for side in ("st", "harness") for dtype in st}
    vectors: dict[str, np.ndarray] = {}
    for dtype in st:  # warm-up: load weights, first-call costs
        st[dtype].encode(texts[:64])
        list(ours[dtype].encode_windows([texts[:64]], [view]))
    for _ in range(args.rounds):
        for dtype in st:
            started = time.perf_counter()
            vectors[f"st {dtype}"] = st[dtype].encode(texts, batch_size=32, convert_to_numpy=True)
            times[f"st {dtype}"].append(time.perf_counter() - started)
            started = time.perf_counter()
            row: dict[str, np.ndarray] = {}
            for window, arrays in ours[dtype].encode_windows(windows, [view]):
                row.update(zip(window, arrays[view]))
            times[f"harness {dtype}"].append(time.perf_counter() - started)
            vectors[f"harness {dtype}"] = np.stack([row[t] for t in texts])
    index = {t: i for i, t in enumerate(texts)}
    left, right = [index[t] for t in s1], [index[t] for t in s2]
    rho = {k: 100 * spearman(cosine_rows(v[left], v[right])[0], gold) for k, v in vectors.items()}
    med = {k: statistics.median(v) for k, v in times.items()}
    config = json.loads((Path(ref.path) / "config.json").read_text())
    lengths = [len(ids) for ids, _ in NativeTokenizer(Path(ref.path), 128).encode(texts)]
    flops = ModelShape.from_config(config).forward_flops(lengths)
    peak = {"bf16": matmul_peak(torch.bfloat16), "fp32": matmul_peak(torch.float32)}
    lines = [f"{len(texts)} sentences, MiniLM, CPU ({torch.get_num_threads()} threads), median of {args.rounds}", "",
             "| encoder | dtype | seconds | sentences/s | avg Spearman | % of matmul peak |",
             "|---|---|---:|---:|---:|---:|"]
    for side in ("st", "harness"):
        for dtype in st:
            key = f"{side} {dtype}"
            name = "sentence-transformers" if side == "st" else "sts-bench"
            share = 100 * flops / med[key] / peak[dtype]
            lines.append(f"| {name} | {dtype} | {med[key]:.2f} | {len(texts) / med[key]:.0f} | {rho[key]:.4f} | "
                         f"{share:.0f} % |")
    lines += ["", f"matmul peak probe (4096², {torch.get_num_threads()} threads): bf16 {peak['bf16'] / 1e9:.0f} "
              f"GFLOP/s, fp32 {peak['fp32'] / 1e9:.0f} GFLOP/s; useful work {flops / 1e9:.0f} GFLOP",
              f"harness bf16 vs sentence-transformers fp32: {med['st fp32'] / med['harness bf16']:.2f}×; "
              f"vs sentence-transformers bf16: {med['st bf16'] / med['harness bf16']:.2f}×; "
              f"|ΔSpearman| harness bf16 vs fp32: {abs(rho['harness bf16'] - rho['harness fp32']):.4f}"]
    from benchmarks.report import emit

    emit(lines, args.out)


if __name__ == "__main__":
    main()
