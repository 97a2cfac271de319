"""Does a sentence's vector depend on its batch-mates or on the cache's history? (CPU, MiniLM.)

    .venv/bin/python benchmarks/studies/batch_invariance.py            # ~10 minutes on 2 cores
    .venv/bin/python benchmarks/studies/batch_invariance.py \\
        --out docs/measurements/batch_invariance.md

Part 1, batches: for the first sentence of every token length in STS-B test, encode it in
``--trials`` random batches of each encoder's batching: the native encoder packs rows, so its
batches mix token lengths; the transformers encoder pads, so its batches hold one length; both top
tiny batches up to ``MIN_BATCH_TOKENS`` (``harness/core/encoding/batching.py``). Random batch-mates,
batch size and position, for each thread count and dtype. It counts the sentences whose vector
(mean and [CLS] of the last layer, mean of layer 1) was not byte-identical across every batch and
thread count. For contrast: the native encoder without the top-up, and the transformers encoder
with mixed lengths padded to the longest. Each batch runs through the engine's front door:
``ForwardPass.encode_batches`` with that one explicit batch (``top_up=False`` for the contrasts).

Part 2, histories: ``avg`` on STS-B test through the harness's cache (``ViewProvider``, native
encoder), encoded into an empty cache (the test sentences only) and into a cache that first encoded
all of STS-B (the ``target`` fit set: other windows, other batch-mates); the vectors and
Pearson/Spearman of the two. The contrast without the top-up replays the cache's windows (a window
with a sentence missing is encoded whole; a cached vector is never replaced) through
``ForwardPass.encode_batches`` with the pass's own planned batches and ``top_up=False``; the same
replay with the top-up is checked byte for byte against the cache's vectors, so the replay is the
cache's history.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


class Split(NamedTuple):
    s1: list[str]
    s2: list[str]
    gold: list[float]


def stsb(splits: list[str], limit: int = 0) -> dict[str, Split]:
    """The packaged STS-B splits, each cut to its first ``limit`` pairs (0: all)."""
    from harness.core.data.sources.packaged import stsb_dir
    from harness.core.data.sources.rows import read_stsb_csv

    out = {}
    for split in splits:
        rows = read_stsb_csv(stsb_dir() / f"sts-{split}.csv")
        cut = slice(0, limit or None)
        out[split] = Split(list(rows.s1[cut]), list(rows.s2[cut]), list(rows.gold[cut]))
    return out


# (encoder, batching, mix lengths?, top up tiny batches?): what each encoder runs now, and a
# contrast.
SCHEMES = [
    ("native", "mixed lengths, packed, topped up (now)", True, True),
    ("native", "mixed lengths, packed, not topped up", True, False),
    ("transformers", "one length, topped up (now)", False, True),
    ("transformers", "mixed lengths, padded to the longest", True, False),
]


def batch_probe(
    model: str, threads: list[int], dtypes: list[str], trials: int, limit: int = 0
) -> list[str]:
    import numpy as np
    import torch

    from harness.core.encoding import EncodeSettings, ForwardPass, View, resolve_backbone

    ref = resolve_backbone(model)
    views = [View("mean", ref.num_layers), View("cls", ref.num_layers), View("mean", 1)]
    test = stsb(["test"], limit)["test"]
    texts = list(dict.fromkeys(test.s1 + test.s2))
    lines = [
        "| encoder | batching | dtype | threads | lengths probed | encodes | lengths whose vector "
        "changed |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for dtype in dtypes:
        passes = {
            impl: ForwardPass(
                ref, EncodeSettings(device="cpu", dtype=dtype, impl=impl, progress=False)
            )
            for impl in ("native", "transformers")
        }
        for impl, scheme, mixed, top_up in SCHEMES:
            forward = passes[impl]
            everyone = list(range(len(texts)))
            by_length: dict[int, list[int]] = {}
            for index, length in enumerate(forward.token_lengths(texts)):  # loads the model
                by_length.setdefault(length, []).append(index)
            seen: dict[int, set[str]] = {}
            encodes = 0
            for n_threads in threads:
                torch.set_num_threads(n_threads)
                rng = np.random.default_rng(0)
                for length, group in sorted(by_length.items()):
                    for _ in range(trials):
                        pool = everyone if mixed else group
                        size = int(rng.integers(1, min(len(pool), 48) + 1))
                        mates = (
                            [pool[i] for i in rng.choice(len(pool), size=size - 1)]
                            if size > 1
                            else []
                        )
                        position = int(rng.integers(0, size))
                        batch = [*mates[:position], group[0], *mates[position:]]
                        vectors, _ = forward.encode_batches(
                            [texts[i] for i in batch], views, [list(range(len(batch)))], top_up
                        )
                        encodes += 1
                        seen.setdefault(length, set()).add(
                            hashlib.sha1(
                                b"".join(vectors[v][position].tobytes() for v in views)
                            ).hexdigest()
                        )
            changed = sum(len(h) > 1 for h in seen.values())
            lines.append(
                f"| {impl} | {scheme} | {dtype} | {','.join(map(str, threads))} | {len(seen)} | "
                f"{encodes} | {changed} |"
            )
    return lines


# The two histories: the sentence lists the cache is asked to hold, in turn (ViewProvider.get of
# the test split's first sides, then of its second sides; the fit set first in the second).
HISTORIES = ("empty cache, test sentences only", "cache that encoded all of STS-B first")


def history_probe(model: str, limit: int = 0) -> list[str]:
    """``avg`` through the harness's cache in two histories (native encoder), and their replay."""
    import numpy as np

    from harness.core.encoding import (
        EncodeSettings,
        ForwardPass,
        View,
        ViewProvider,
        WindowTask,
        resolve_backbone,
    )
    from harness.core.scoring import cosine_rows, pearson, spearman

    ref = resolve_backbone(model)
    view = View("mean", ref.num_layers)
    settings = EncodeSettings(device="cpu", progress=False)
    data = stsb(["train", "dev", "test"], limit)
    test = data["test"]
    everything = list(dict.fromkeys(s for split in data.values() for s in split.s1 + split.s2))
    asks = {HISTORIES[0]: [test.s1, test.s2], HISTORIES[1]: [everything, test.s1, test.s2]}
    cached: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, lists in asks.items():
            provider = ViewProvider(ref, settings, Path(tmp) / name[:5])
            for sentences in lists:
                provider.ensure(sentences, [view])
            cached[name] = np.concatenate(
                [provider.get(test.s1, view), provider.get(test.s2, view)]
            )
    forward = ForwardPass(ref, settings)

    def replay(lists: list[list[str]], top_up: bool) -> np.ndarray:
        """What a cache holds after ``ensure`` of each list in turn, each batch topped up or not."""
        held: dict[str, np.ndarray] = {}
        for sentences in lists:
            for window in WindowTask.cut(sentences, settings.window):
                if all(text in held for text in window):
                    continue
                vectors, _ = forward.encode_batches(window, [view], None, top_up)
                for text, vector in zip(window, vectors[view]):
                    held.setdefault(text, vector)
        return np.stack([held[text] for text in test.s1 + test.s2])

    gold = np.asarray(test.gold)
    lines = ["| batching | history | avg Pearson ×100 | avg Spearman ×100 |", "|---|---|---:|---:|"]
    notes = []
    for scheme, top_up in (
        ("mixed lengths, packed, topped up (now)", True),
        ("mixed lengths, packed, not topped up", False),
    ):
        found = {name: replay(lists, top_up) for name, lists in asks.items()}
        if top_up:
            same = all(np.array_equal(found[name], cached[name]) for name in HISTORIES)
            notes.append(
                "the replay with the top-up against the cache's own vectors: "
                + ("byte-identical in both histories" if same else "DIFFERENT (replay is wrong)")
                + "."
            )
        for name, vectors in found.items():
            half = len(test.s1)
            similarity, _ = cosine_rows(vectors[:half], vectors[half:])
            lines.append(
                f"| {scheme} | {name} | {pearson(similarity, gold) * 100!r} | "
                f"{spearman(similarity, gold) * 100!r} |"
            )
        a, b = found[HISTORIES[0]], found[HISTORIES[1]]
        differ = int((np.abs(a - b).max(axis=1) > 0).sum())
        notes.append(
            f"{scheme}: {differ} of the {len(a)} test-pair vectors (both sides) differ between the "
            f"two histories, by at most {float(np.abs(a - b).max()):.3g}."
        )
    return [*lines, "", *notes]


def main() -> None:
    from benchmarks.report import emit, machine_line

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2,4", help="thread counts to compare (1,2,4)")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument(
        "--trials", type=int, default=3, help="random batches per token length and thread count"
    )
    parser.add_argument("--model", default="minilm", help="backbone (default: the packaged MiniLM)")
    parser.add_argument("--limit", type=int, default=0, help="first N pairs of each split (0: all)")
    parser.add_argument("--out", help="also write the report (markdown) to this file")
    args = parser.parse_args()
    dtypes = args.dtypes.split(",")
    lines = [
        "# A sentence's vector against its batch and the cache's history",
        "",
        f"`python benchmarks/studies/batch_invariance.py` ({args.model}, STS-B test"
        + (f", first {args.limit} pairs of each split" if args.limit else "")
        + ", CPU).",
        "",
        machine_line(dtypes),
        "",
        "## Batches",
        "",
    ]
    threads = [int(t) for t in args.threads.split(",")]
    lines += batch_probe(args.model, threads, dtypes, args.trials, args.limit)
    lines += ["", "## Cache histories (`avg`, fp32)", ""]
    lines += history_probe(args.model, args.limit)
    emit(lines, args.out)


if __name__ == "__main__":
    main()
