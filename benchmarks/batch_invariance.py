"""Does a sentence's vector depend on its batch-mates or on the cache's history? (CPU, MiniLM.)

    .venv/bin/python benchmarks/batch_invariance.py                       # ~10 minutes on 2 cores
    .venv/bin/python benchmarks/batch_invariance.py --out docs/measurements/batch_invariance.md

Part 1, batches: for the first sentence of every token length in STS-B test, encode it in
``--trials`` random batches of each encoder's batching: the native encoder packs rows, so its
batches mix token lengths; the transformers encoder pads, so its batches hold one length; both top
tiny batches up to ``MIN_BATCH_TOKENS`` (:mod:`harness.core.encoding.batching`). Random batch-mates,
batch size and position, for each thread count and dtype. It counts the sentences whose vector
(mean and [CLS] of the last layer, mean of layer 1) was not byte-identical across every batch and
thread count. For contrast: the native encoder without the top-up, and the transformers encoder
with mixed lengths padded to the longest.

Part 2, histories: ``avg`` on STS-B test through the harness's forward pass (native encoder),
encoded into an empty cache (the test sentences only) and into a cache that first encoded all of
STS-B (the ``target`` fit set: other windows, other batch-mates); the vectors and Pearson/Spearman
of the two, with the harness's batching and without the top-up.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def stsb(splits: list[str]):
    from harness.core.data.sources.packaged import stsb_dir
    from harness.core.data.sources.rows import read_stsb_csv

    return {split: read_stsb_csv(stsb_dir() / f"sts-{split}.csv") for split in splits}


# (encoder, batching, mix lengths?, top up tiny batches?): what each encoder runs now, and a
# contrast.
SCHEMES = [
    ("native", "mixed lengths, packed, topped up (now)", True, True),
    ("native", "mixed lengths, packed, not topped up", True, False),
    ("transformers", "one length, topped up (now)", False, True),
    ("transformers", "mixed lengths, padded to the longest", True, False),
]


def batch_probe(threads: list[int], dtypes: list[str], trials: int) -> list[str]:
    import numpy as np
    import torch
    from harness.core.encoding.devices import torch_dtype

    from harness.core.encoding.backbone import resolve_backbone
    from harness.core.encoding.batching import topped_up
    from harness.core.encoding.engines import NativeEngine, TransformersEngine
    from harness.core.encoding.pooling import View, pool_view
    from harness.core.encoding.settings import EncodeSettings

    ref = resolve_backbone("minilm")
    views = [View("mean", ref.num_layers), View("cls", ref.num_layers), View("mean", 1)]
    test = stsb(["test"])["test"]
    texts = list(dict.fromkeys(test.s1 + test.s2))
    lines = [
        "| encoder | batching | dtype | threads | lengths probed | encodes | lengths whose vector "
        "changed |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for dtype in dtypes:
        engines = {
            "native": NativeEngine(ref, EncodeSettings(device="cpu", dtype=dtype), "cpu"),
            "transformers": TransformersEngine(
                ref, EncodeSettings(device="cpu", dtype=dtype), "cpu"
            ),
        }
        for impl, scheme, mixed, top_up in SCHEMES:
            engine = engines[impl]
            autocast = None if engine.handles_dtype else torch_dtype(dtype)
            items = engine.tokenize(texts)
            by_length: dict[int, list] = {}
            for item in items:
                by_length.setdefault(engine.length(item), []).append(item)
            seen: dict[int, set[str]] = {}
            encodes = 0
            for n_threads in threads:
                torch.set_num_threads(n_threads)
                rng = np.random.default_rng(0)
                for length, group in sorted(by_length.items()):
                    for _ in range(trials):
                        pool = items if mixed else group
                        size = int(rng.integers(1, min(len(pool), 48) + 1))
                        mates = (
                            [pool[i] for i in rng.choice(len(pool), size=size - 1)]
                            if size > 1
                            else []
                        )
                        position = int(rng.integers(0, size))
                        batch = [*mates[:position], group[0], *mates[position:]]
                        if top_up:
                            batch = [
                                batch[i]
                                for i in topped_up(
                                    list(range(len(batch))), [engine.length(it) for it in batch]
                                )
                            ]
                        tensors = engine.batch(batch)
                        with (
                            torch.inference_mode(),
                            torch.autocast(
                                "cpu", dtype=autocast or torch.float32, enabled=autocast is not None
                            ),
                        ):
                            states, pooled = engine.forward(tensors)
                            vectors = [
                                pool_view(states, pooled, tensors["attention_mask"], v)[position]
                                for v in views
                            ]
                        encodes += 1
                        seen.setdefault(length, set()).add(
                            hashlib.sha1(b"".join(v.tobytes() for v in vectors)).hexdigest()
                        )
            changed = sum(len(h) > 1 for h in seen.values())
            lines.append(
                f"| {impl} | {scheme} | {dtype} | {','.join(map(str, threads))} | {len(seen)} | "
                f"{encodes} | "
                f"{changed} |"
            )
    return lines


def history_probe() -> list[str]:
    """``avg`` through the harness's own forward pass (native encoder), two cache histories."""
    from unittest import mock

    import harness.core.encoding.forward as forward

    lines = ["| batching | history | avg Pearson ×100 | avg Spearman ×100 |", "|---|---|---:|---:|"]
    notes = []
    for scheme in (
        "mixed lengths, packed, topped up (now)",
        "mixed lengths, packed, not topped up",
    ):
        patches = (
            []
            if scheme.endswith("(now)")
            else [mock.patch.object(forward, "topped_up", lambda ids, n: ids)]
        )
        for patch in patches:
            patch.start()
        try:
            rows, note = _histories(scheme)
        finally:
            for patch in patches:
                patch.stop()
        lines += rows
        notes.append(note)
    return [*lines, "", *notes]


def _histories(scheme: str) -> tuple[list[str], str]:
    import numpy as np

    from harness.core.encoding.backbone import resolve_backbone
    from harness.core.encoding.pooling import View
    from harness.core.encoding.provider import ViewProvider
    from harness.core.encoding.settings import EncodeSettings
    from harness.core.scoring import cosine_rows, pearson, spearman

    ref = resolve_backbone("minilm")
    view = View("mean", ref.num_layers)
    data = stsb(["train", "dev", "test"])
    test = data["test"]
    everything = list(dict.fromkeys(s for split in data.values() for s in split.s1 + split.s2))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, first in (
            ("empty cache, test sentences only", []),
            ("cache that encoded all of STS-B first", everything),
        ):
            provider = ViewProvider(
                ref, EncodeSettings(device="cpu", progress=False), Path(tmp) / name[:5]
            )
            if first:
                provider.ensure(first, [view])
            left, right = provider.get(test.s1, view), provider.get(test.s2, view)
            similarity, _ = cosine_rows(left, right)
            results[name] = (
                np.concatenate([left, right]),
                pearson(similarity, np.asarray(test.gold)),
                spearman(similarity, np.asarray(test.gold)),
            )
    (a, _, _), (b, _, _) = results.values()
    differ = int((np.abs(a - b).max(axis=1) > 0).sum())
    rows = [
        f"| {scheme} | {name} | {p * 100!r} | {s * 100!r} |" for name, (_, p, s) in results.items()
    ]
    return rows, (
        f"{scheme}: {differ} of the {len(a)} test-pair vectors (both sides) differ between the two "
        f"histories, by at most {float(np.abs(a - b).max()):.3g}."
    )


def main() -> None:
    from benchmarks.report import emit

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2,4", help="thread counts to compare (1,2,4)")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument(
        "--trials", type=int, default=3, help="random batches per token length and thread count"
    )
    parser.add_argument("--out", help="also write the report here (markdown)")
    args = parser.parse_args()
    lines = [
        "# A sentence's vector against its batch and the cache's history",
        "",
        "`python benchmarks/batch_invariance.py` (MiniLM, STS-B test, CPU).",
        "",
        "## Batches",
        "",
    ]
    lines += batch_probe(
        [int(t) for t in args.threads.split(",")], args.dtypes.split(","), args.trials
    )
    lines += ["", "## Cache histories (`avg`, fp32)", ""]
    lines += history_probe()
    emit(lines, args.out)


if __name__ == "__main__":
    main()
