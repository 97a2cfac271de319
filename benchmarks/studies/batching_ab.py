"""The native encoder's batches, side by side: mixed token lengths (what it runs) against one token
length per batch (what padded encoders need), on the same sentences in one process.

    .venv/bin/python benchmarks/studies/batching_ab.py          # MiniLM, STS-B test, ~1 minute
    .venv/bin/python benchmarks/studies/batching_ab.py --rounds 5 \\
        --out docs/measurements/batching_ab.md

The native encoder packs a batch's real tokens into one matrix, so a batch may mix sentence
lengths without padding anything (``harness/core/encoding/batching.py``). One length per batch
cuts STS-B test's 2,552 sentences into many more, smaller batches. Both schemes run through the
engine's front door, ``ForwardPass.encode_batches`` on the windows a run cuts (``WindowTask.cut``)
under the CPU's token budget (4,096): the batches the pass plans itself, against batches of one
token length each planned here under the same budget (the top-up as in a run). Each scheme runs in
a fresh process of its own (as a run is; one process for both would share oneDNN's kernel cache),
timed on a second encode after a warm-up one, alternating in ``--rounds`` rounds; medians are
reported with the ratio, the batch counts, and whether every vector is byte-identical.
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
os.environ.setdefault("HF_HUB_OFFLINE", "1")


SCHEMES = ("mixed lengths (now)", "one length per batch")


TOKEN_BUDGET = 4096  # the CPU's automatic batch (EncodeSettings.max_tokens 0 on a CPU)


def one_length_batches(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Index batches of one token length each, longest first, each as many as fit ``max_tokens``.

    >>> one_length_batches([5, 3, 3, 2], 8)
    [[0], [1, 2], [3]]
    """
    groups: dict[int, list[int]] = {}
    for index, length in enumerate(lengths):
        groups.setdefault(length, []).append(index)
    batches = []
    for length in sorted(groups, reverse=True):
        size = max(1, max_tokens // max(1, length))
        batches += [groups[length][i : i + size] for i in range(0, len(groups[length]), size)]
    return batches


def encode_once(scheme: str, dtype: str, threads: int, vectors_out: str) -> None:
    """In a child process: encode STS-B test once to warm up (weights, oneDNN kernels), then time a
    second encode; print {"seconds", "batches"} and save the vectors."""
    import json

    import numpy as np

    from benchmarks.peers.baselines import load_stsb_test
    from harness.core.encoding import (
        EncodeSettings,
        ForwardPass,
        View,
        WindowTask,
        resolve_backbone,
    )

    s1, s2, _ = load_stsb_test()
    texts = list(dict.fromkeys(s1 + s2))
    ref = resolve_backbone("minilm")
    views = [View("mean", ref.layer_index(-1)), View("cls", ref.layer_index(-1)), View("mean", 1)]
    settings = EncodeSettings(
        device="cpu",
        dtype=dtype,
        progress=False,
        impl="native",
        threads=threads,
        max_tokens=TOKEN_BUDGET,
    )
    forward = ForwardPass(ref, settings)
    windows = WindowTask.cut(texts, settings.window)
    plans = [
        None if scheme == SCHEMES[0] else one_length_batches(forward.token_lengths(w), TOKEN_BUDGET)
        for w in windows
    ]
    for _attempt in ("warm-up", "timed"):  # the second is timed
        started = time.perf_counter()
        rows, batches = {}, 0
        for window, plan in zip(windows, plans):
            vectors, ran = forward.encode_batches(window, views, plan)
            rows.update(zip(window, np.concatenate([vectors[v] for v in views], axis=1)))
            batches += len(ran)
        seconds = time.perf_counter() - started
    np.save(vectors_out, np.stack([rows[t] for t in texts]))
    print(json.dumps({"seconds": seconds, "batches": batches}))


def main() -> None:
    import json
    import subprocess
    import tempfile

    import numpy as np

    from benchmarks.report import emit, load_line

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=["bf16", "fp32"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="0: all cores")
    parser.add_argument("--out", help="also write the report (markdown) to this file")
    parser.add_argument(
        "--child", nargs=3, metavar=("SCHEME", "DTYPE", "VECTORS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        encode_once(args.child[0], args.child[1], args.threads, args.child[2])
        return
    load_at_start = os.getloadavg()
    lines = [
        f"STS-B test (2,552 sentences), MiniLM, native encoder, views mean@6, cls@6, mean@1; each "
        f"encode in a fresh process after a warm-up encode; median of {args.rounds} alternating "
        "rounds",
        "",
        "| dtype | batching | batches | seconds | sentences/s | speed-up | vectors |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in args.dtypes:
            times: dict[str, list[float]] = {name: [] for name in SCHEMES}
            batches: dict[str, int] = {}
            for number in range(args.rounds):
                for name in SCHEMES if number % 2 == 0 else tuple(reversed(SCHEMES)):
                    out = str(Path(tmp) / f"{SCHEMES.index(name)}.npy")
                    done = subprocess.run(
                        [
                            sys.executable,
                            __file__,
                            "--threads",
                            str(args.threads),
                            "--child",
                            name,
                            dtype,
                            out,
                        ],
                        capture_output=True,
                        text=True,
                        cwd=ROOT,
                    )
                    if done.returncode != 0:
                        raise SystemExit(done.stderr[-3000:])
                    result = json.loads(done.stdout.strip().splitlines()[-1])
                    times[name].append(result["seconds"])
                    batches[name] = result["batches"]
            same = np.array_equal(*(np.load(Path(tmp) / f"{i}.npy") for i in range(len(SCHEMES))))
            base = statistics.median(times[SCHEMES[1]])
            for name in SCHEMES:
                median = statistics.median(times[name])
                lines.append(
                    f"| {dtype} | {name} | {batches[name]} | {median:.2f} | {2552 / median:.0f} | "
                    f"{base / median:.2f}× | {'byte-identical' if same else 'DIFFER'} |"
                )
    emit([*lines, "", load_line(load_at_start)], args.out)


if __name__ == "__main__":
    main()
