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
reported with the ratio, the batch counts, and whether every vector is byte-identical. Options,
steps, rounds and the report are the shared peer harness's (:mod:`benchmarks.side_by_side`).
"""

from __future__ import annotations

import argparse
import os
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


def encode_once(spec: dict) -> dict:
    """A step (a fresh process): encode STS-B test once to warm up (weights, oneDNN kernels), then
    time a second encode of ``spec["scheme"]``; save the vectors, return seconds and batches."""
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
        dtype=spec["dtype"],
        progress=False,
        impl="native",
        threads=spec["threads"],
        max_tokens=TOKEN_BUDGET,
    )
    forward = ForwardPass(ref, settings)
    windows = WindowTask.cut(texts, settings.window)
    plans = [
        None
        if spec["scheme"] == SCHEMES[0]
        else one_length_batches(forward.token_lengths(w), TOKEN_BUDGET)
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
    np.save(spec["vectors"], np.stack([rows[t] for t in texts]))
    return {"seconds": seconds, "batches": batches}


def main(argv: list[str] | None = None) -> None:
    import tempfile

    import numpy as np

    from benchmarks import side_by_side as sbs

    argv = sys.argv[1:] if argv is None else argv
    if sbs.answer_step(argv, encode_once):
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sbs.add_options(
        parser, rounds=3, dtypes=["bf16", "fp32"], dtype_choices=["fp32", "bf16"], threads=0
    )
    args = sbs.check_options(parser, parser.parse_args(argv))
    load_at_start = os.getloadavg()
    lines = sbs.header(
        "STS-B test (2,552 sentences), MiniLM, native encoder, views mean@6, cls@6, mean@1; each "
        "encode in a fresh process after a warm-up encode",
        args.dtypes,
        args.rounds,
        title="The native encoder's batches: mixed token lengths against one length per batch",
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in args.dtypes:
            timings, batches = sbs.Timings(), {}
            for name in sbs.in_rounds(SCHEMES, args.rounds):
                spec = {
                    "scheme": name,
                    "dtype": dtype,
                    "threads": args.threads,
                    "vectors": str(Path(tmp) / f"{SCHEMES.index(name)}.npy"),
                }
                result = sbs.run_step(sbs.step_command(__file__, spec))
                timings.add(name, result["seconds"])
                batches[name] = result["batches"]
            same = np.array_equal(*(np.load(Path(tmp) / f"{i}.npy") for i in range(len(SCHEMES))))
            for name in SCHEMES:
                median = timings.median(name)
                speedup = f"{timings.ratio(name, SCHEMES[1]):.2f}×"
                vectors = "byte-identical" if same else "DIFFER"
                rate = f"{2552 / median:.0f}"
                rows.append([dtype, name, batches[name], f"{median:.2f}", rate, speedup, vectors])
    columns = ["dtype", "batching", "batches", "seconds", "sentences/s", "speed-up", "vectors"]
    sbs.write([*lines, *sbs.table(columns, rows, right=[2, 3, 4, 5])], args.out, load_at_start)


if __name__ == "__main__":
    main()
