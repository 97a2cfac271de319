"""Encode throughput against sentence-transformers on torch, ONNX Runtime and OpenVINO, and peak
share.

Each encoder's time is also given as a fraction of this machine's matmul peak.

    .venv/bin/python benchmarks/peers/throughput.py                 # MiniLM, ~6 minutes on 2 cores
    .venv/bin/python benchmarks/peers/throughput.py --model DIR --sentences 512 --rounds 2
    .venv/bin/python benchmarks/peers/throughput.py --out docs/measurements/throughput_2threads.md
    .venv/bin/python benchmarks/peers/throughput.py --threads 1 \\
        --out docs/measurements/throughput.md
    .venv/bin/python benchmarks/peers/throughput.py \\
        --out docs/measurements/throughput_2threads_busy.md
    .venv/bin/python benchmarks/peers/throughput.py --split all --dtypes bf16 \\
        --peers openvino:bf16 --batch-sizes 64 128 \\
        --out docs/measurements/throughput_all_bf16.md  # 15,487 sentences
    .venv/bin/python benchmarks/peers/throughput.py --split all --batch-sizes 64 128 \\
        --out docs/measurements/throughput_all_fastest_amx_busy.md  # issue 44: native dtype
    .venv/bin/python benchmarks/peers/throughput.py --split all --peers torch:fastest \\
        openvino:fastest --batch-sizes 64 128 --out docs/measurements/throughput_all_fastest_amx.md

By default every side runs in the fastest dtype this CPU computes natively (``fastest``: bf16 with
AMX or AVX512-BF16, else fp32), the peers too (``torch:fastest``, ``openvino:fastest``; ONNX
Runtime runs its fp32 graph), and the report names the CPU kind and that dtype; ``--dtypes auto``
also times fp32 beside bf16 where the CPU has it. The harness at its fastest against the fastest
peer is the headline ratio; issue 44's target (at least 1.25x) is against the faster of ONNX
Runtime and OpenVINO.

Same model, same sentences (the unique sentences of STS-B test, or the first ``--sentences`` of
them), every encoder loaded once in its own process and waiting while the others run: only
encoding (tokenization included) is timed, in rounds whose order rotates, medians reported. Each
sentence-transformers peer is timed at every ``--batch-sizes`` value in every round and reported at
its best. The ONNX and OpenVINO peers run in ``.venv-peers`` (built on first use; see
:mod:`benchmarks.peer_env`). ``avg`` Spearman on STS-B test is computed from each encoder's vectors.

"% of matmul peak" is useful FLOPs (2·P·n + 4·L·n²·H over the real token lengths, padding not
counted) per second over a square matmul of the encoder's dtype timed in the same run with the
same thread count. Options, rounds, medians and the report are the shared peer harness's
(:mod:`benchmarks.side_by_side`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# (backend, dtype) of the sentence-transformers peers by default: each in the fastest dtype this
# CPU computes natively (OpenVINO's own default on a CPU with bf16 instructions is bf16), ONNX
# Runtime in the fp32 graph it runs.
PEERS = (
    ("torch", "fastest"),
    ("onnx", "fp32"),
    ("openvino", "fastest"),
)
# issue 44: the harness at least this many times faster than the fastest of these peers
TARGET, TARGET_PEERS = 1.25, ("ST onnx", "ST openvino")


def matmul_peak(dtype, size: int = 4096, repeats: int = 5, budget_s: float = 0.5) -> float:
    """Best FLOP/s of a square product, the largest size up to ``size`` whose product takes about
    ``budget_s`` or less: a CPU without bf16 instructions emulates bf16 at a few GFLOP/s, where one
    4096² product alone would take tens of seconds."""
    import torch

    n = 512
    while True:
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        took = _timed(lambda a=a, b=b: torch.matmul(a, b))  # also the warm-up
        if n >= size or took * 8 > budget_s:  # doubling n costs 8x
            break
        n *= 2
    best = min(_timed(lambda: torch.matmul(a, b)) for _ in range(repeats))
    return 2 * n**3 / best


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


@dataclass
class Encoder:
    """One thing being timed: the harness in one dtype, or a peer at one batch size."""

    name: str
    dtype: str
    batch: str  # "auto" for the harness (token budget), the sentence count for a peer
    run: Callable[[], float]  # encodes all sentences, returns seconds
    times: list[float] = field(default_factory=list)


def harness_encoders(model: str, texts: list[str], dtypes: list[str], impl: str, threads: int = 0):
    """The harness's forward pass in each dtype, on the windows a run would use."""
    import numpy as np

    from harness.core.encoding import (
        EncodeSettings,
        ForwardPass,
        View,
        WindowTask,
        resolve_backbone,
    )

    ref = resolve_backbone(model)
    view = View("mean", ref.layer_index(-1))
    windows = WindowTask.cut(texts, EncodeSettings().window)
    vectors: dict[str, np.ndarray] = {}
    encoders = []
    for dtype in dtypes:
        forward = ForwardPass(
            ref,
            EncodeSettings(device="cpu", dtype=dtype, progress=False, impl=impl, threads=threads),
        )
        list(forward.encode_windows([texts[:64]], [view]))  # load weights, first-call costs

        def run(forward=forward, key=f"sts-bench {dtype}") -> float:
            started = time.perf_counter()
            rows: dict[str, np.ndarray] = {}
            for window, arrays in forward.encode_windows(windows, [view]):
                rows.update(zip(window, arrays[view]))
            seconds = time.perf_counter() - started
            vectors[key] = np.stack([rows[t] for t in texts])
            return seconds

        encoders.append(Encoder(f"sts-bench ({forward.impl})", dtype, "auto", run))
    lengths = forward.token_lengths(texts)  # tokens per sentence as the model sees them (truncated)
    return ref, encoders, vectors, lengths


def peer_specs(specs: list[str], bf16_native: bool) -> list[str]:
    """``backend:dtype`` peer specs with ``fastest`` made concrete for this CPU; a spec twice is
    timed once.

    >>> peer_specs(["torch:fastest", "onnx:fp32", "openvino:fastest"], bf16_native=False)
    ['torch:fp32', 'onnx:fp32', 'openvino:fp32']
    >>> peer_specs(["openvino:fastest", "openvino:bf16"], bf16_native=True)
    ['openvino:bf16']
    """
    from benchmarks.side_by_side import resolve_dtypes

    out = []
    for spec in specs:
        backend, _, dtype = spec.partition(":")
        out.append(f"{backend}:{resolve_dtypes([dtype], bf16_native)[0]}")
    return list(dict.fromkeys(out))


def main(argv: list[str] | None = None) -> None:
    import numpy as np
    import torch

    from benchmarks import side_by_side as sbs
    from benchmarks.peers.baselines import load_stsb_split, load_stsb_test, packaged_model_dir
    from benchmarks.peers.peer_env import PeerProcess
    from benchmarks.report import cpu_facts
    from harness.core.cost_model import ModelShape
    from harness.core.scoring import cosine_rows, spearman

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # --threads: of every encoder, 1 resists a busy machine best; --json is read by shapes.py
    sbs.add_options(
        parser,
        rounds=3,
        dtypes=["fastest"],
        dtype_choices=("fastest", "auto", "fp32", "bf16"),
        threads=0,
        json_out=True,
    )
    parser.add_argument(
        "--model", default="minilm", help="'minilm' (packaged) or a local model folder"
    )
    parser.add_argument(
        "--sentences", type=int, default=0, help="only the first N unique sentences (0: all)"
    )
    parser.add_argument(
        "--split",
        choices=("test", "all"),
        default="test",
        help="the unique sentences of STS-B test (2,552) or of train, dev and test (15,487)",
    )
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument(
        "--peers",
        nargs="*",
        default=[f"{b}:{d}" for b, d in PEERS],
        help="backend:dtype of the sentence-transformers peers, dtype fp32, bf16 or fastest "
        "(none: harness only)",
    )
    parser.add_argument("--impl", default="auto", help="harness --encoder-impl")
    args = sbs.check_options(parser, parser.parse_args(argv))
    facts = cpu_facts()
    args.dtypes = sbs.resolve_dtypes(args.dtypes, facts["bf16_native"])
    args.peers = peer_specs(args.peers, facts["bf16_native"])
    load_at_start = os.getloadavg()
    s1, s2, gold = load_stsb_test()
    texts = list(dict.fromkeys(s1 + s2))
    if args.split == "all":  # test first: the Spearman below reads the test sentences' vectors
        for split in ("train", "dev"):
            a, b, _ = load_stsb_split(split)
            texts = list(dict.fromkeys([*texts, *a, *b]))
    if args.sentences:
        texts = texts[: args.sentences]
    model_dir = packaged_model_dir() if args.model == "minilm" else str(Path(args.model).resolve())
    ref, encoders, vectors, lengths = harness_encoders(
        args.model, texts, args.dtypes, args.impl, args.threads
    )
    skipped = []
    peers: dict[str, PeerProcess] = {}
    with tempfile.TemporaryDirectory(prefix="throughput-") as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(texts), encoding="utf-8")
        for spec in args.peers:
            backend, dtype = spec.split(":")
            try:
                peer = peers[spec] = PeerProcess(
                    model_dir, backend, dtype, texts_file, args.threads
                )
            except RuntimeError as err:  # e.g. an architecture the backend cannot export
                skipped.append(
                    f"ST {backend} {dtype}: not measured ({str(err).splitlines()[-1][:200]})"
                )
                continue
            encoders += [
                Encoder(
                    f"ST {backend}", dtype, str(size), lambda p=peer, s=size: p.encode_seconds(s)
                )
                for size in args.batch_sizes
            ]
        for encoder in sbs.in_rounds(encoders, args.rounds):  # who goes first rotates
            encoder.times.append(encoder.run())
        best: dict[tuple[str, str], Encoder] = {}
        for encoder in encoders:
            key = (encoder.name, encoder.dtype)
            if key not in best or statistics.median(encoder.times) < statistics.median(
                best[key].times
            ):
                best[key] = encoder
        for spec, peer in peers.items():  # vectors at the best batch size, for Spearman
            backend, dtype = spec.split(":")
            chosen = best[(f"ST {backend}", dtype)]
            peer.encode_seconds(int(chosen.batch))
            peer.save_vectors(Path(tmp) / "v.npy")
            vectors[f"ST {backend} {dtype}"] = np.load(Path(tmp) / "v.npy")
            peer.close()
    index = {t: i for i, t in enumerate(texts)}
    pairs = [(index[a], index[b], g) for a, b, g in zip(s1, s2, gold) if a in index and b in index]
    left, right, kept = (list(column) for column in zip(*pairs))

    def rho(key: str) -> float:
        v = vectors[key]
        return 100 * spearman(cosine_rows(v[left], v[right])[0], kept)

    config = json.loads((Path(ref.path) / "config.json").read_text())
    flops = ModelShape.from_config(config).forward_flops(lengths)
    if args.threads:
        torch.set_num_threads(args.threads)
    peak = {"bf16": matmul_peak(torch.bfloat16), "fp32": matmul_peak(torch.float32)}
    lines = sbs.header(
        f"{len(texts)} sentences ({sum(lengths)} tokens), {args.model}, CPU "
        f"({torch.get_num_threads()} threads), encoders interleaved; {len(pairs)} STS-B test "
        "pairs scored",
        list(dict.fromkeys(e.dtype for e in encoders)),
        args.rounds,
        facts=facts,
    )
    med = {key: statistics.median(e.times) for key, e in best.items()}
    spearmans, rows = {}, []
    for (name, dtype), encoder in best.items():
        key = f"sts-bench {dtype}" if name.startswith("sts-bench") else f"{name} {dtype}"
        spearmans[(name, dtype)] = rho(key)
        share = 100 * flops / med[(name, dtype)] / peak[dtype]
        seconds, rate = f"{med[(name, dtype)]:.2f}", f"{len(texts) / med[(name, dtype)]:.0f}"
        rho_text = f"{spearmans[(name, dtype)]:.4f}"
        rows.append([name, dtype, encoder.batch, seconds, rate, rho_text, f"{share:.0f} %"])
    columns = ["encoder", "dtype", "batch", "seconds", "sentences/s", "avg Spearman"]
    lines += sbs.table([*columns, "% of matmul peak"], rows, right=[2, 3, 4, 5, 6])
    ours = [k for k in best if k[0].startswith("sts-bench")]
    reference = next((spearmans[k] for k in ours if k[1] == "fp32"), None)
    lines += [
        "",
        f"matmul peak probe (up to 4096², {torch.get_num_threads()} threads): bf16 "
        f"{peak['bf16'] / 1e9:.0f} "
        f"GFLOP/s, fp32 {peak['fp32'] / 1e9:.0f} GFLOP/s; useful work {flops / 1e9:.1f} GFLOP",
        "",
    ]
    if ours:
        fastest = min(ours, key=lambda k: med[k])
        drift = (
            ""
            if reference is None
            else f", |ΔSpearman| vs sts-bench fp32 {abs(spearmans[fastest] - reference):.4f}"
        )
        lines.append(
            f"sts-bench {fastest[1]} (its fastest{drift}) against each peer at its best batch size:"
        )
        lines.append("")
        for key in best:
            if key not in ours:
                lines.append(
                    f"- {key[0]} {key[1]} (batch {best[key].batch}): "
                    f"**{sbs.ratio(med[key], med[fastest]):.2f}×**, "
                    f"|ΔSpearman| {abs(spearmans[fastest] - spearmans[key]):.4f}"
                )
        peers_best = [k for k in best if k not in ours]
        if peers_best:
            top = min(peers_best, key=lambda k: med[k])
            lines += [
                "",
                f"fastest peer: {top[0]} {top[1]}; its seconds / sts-bench {fastest[1]}'s: "
                f"**{sbs.ratio(med[top], med[fastest]):.2f}×**",
            ]
        targeted = [k for k in peers_best if k[0] in TARGET_PEERS]
        if targeted:  # issue 44's target: against sentence-transformers on ONNX Runtime / OpenVINO
            top = min(targeted, key=lambda k: med[k])
            headline = sbs.ratio(med[top], med[fastest])
            verdict = "met" if headline >= TARGET else "MISSED"
            lines.append(
                f"fastest of ST + ONNX Runtime / OpenVINO: {top[0]} {top[1]}, "
                f"**{headline:.2f}×** (issue 44's target ≥ {TARGET}: {verdict})"
            )
    lines += [f"- {line}" for line in skipped]
    lines += [
        "",
        "every batch size (median seconds): "
        + "; ".join(
            f"{e.name} {e.dtype} b{e.batch} {statistics.median(e.times):.2f}"
            for e in encoders
            if e.batch != "auto"
        ),
    ]
    sbs.write(lines, args.out, load_at_start)
    if args.json:
        summary = {
            "threads": torch.get_num_threads(),
            "bf16_native": facts["bf16_native"],
            "cpu": facts["cpu"],
            "sentences": len(texts),
            "tokens": sum(lengths),
            "useful_gflop": flops / 1e9,
            "peak_gflops": {k: v / 1e9 for k, v in peak.items()},
            "encoders": [
                {
                    "name": name,
                    "dtype": dtype,
                    "batch": best[(name, dtype)].batch,
                    "seconds": med[(name, dtype)],
                    "spearman": spearmans[(name, dtype)],
                    "share_of_own_peak": flops / med[(name, dtype)] / peak[dtype],
                }
                for name, dtype in best
            ],
            "skipped": skipped,
        }
        Path(args.json).write_text(json.dumps(summary, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
