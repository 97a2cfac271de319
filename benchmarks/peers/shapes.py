"""Throughput per encoder family against sentence-transformers on torch, ONNX Runtime and OpenVINO.

bert-base, bert-large, roberta-base, mpnet-base and deberta-v3-base shapes, random weights, at 1
and 2 threads, with a summary table of ratios and shares of the bf16 matmul peak.

    .venv/bin/python benchmarks/peers/shapes.py --scale 0.5 --rounds 2 \\
        --out docs/measurements/shapes.md                             # ~45 min, 2 cores
    .venv/bin/python benchmarks/peers/shapes.py --shapes mpnet-base --threads 2 --rounds 1  # one

Throughput does not depend on the weights, so each model is a randomly initialised transformers
model of the published shape, saved with ``save_pretrained`` under ``.cache/bench-models/`` with
MiniLM's (= bert-base-uncased's) tokenizer, and loaded from there by everyone. Each (shape, threads)
is one ``benchmarks/peers/throughput.py`` run (a process of its own: encoders interleaved in rounds,
each peer at its best batch size, the matmul peak probed in the same process); Spearman of random
weights means nothing and is not reported. The ``(transformers)`` sections are the same checkpoints
run by the harness through AutoModel (``--encoder-impl transformers``): the gap to the native rows
is what the native path brings. The harness runs bf16 only where the CPU computes bf16 (otherwise
torch emulates it, slower than fp32); the same holds for the torch bf16 peer.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
MODELS = ROOT / ".cache" / "bench-models"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)
BERT = {"vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2}
SHAPES = {
    "bert-base": (
        "bert",
        {
            **BERT,
            "hidden_size": 768,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "intermediate_size": 3072,
        },
    ),
    "bert-large": (
        "bert",
        {
            **BERT,
            "hidden_size": 1024,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "intermediate_size": 4096,
        },
    ),
    "roberta-base": (
        "roberta",
        {
            "vocab_size": 30522,
            "max_position_embeddings": 514,
            "type_vocab_size": 1,
            "pad_token_id": 0,
            "hidden_size": 768,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "intermediate_size": 3072,
        },
    ),
    "mpnet-base": (
        "mpnet",
        {
            "vocab_size": 30527,
            "max_position_embeddings": 514,
            "hidden_size": 768,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "intermediate_size": 3072,
            "relative_attention_num_buckets": 32,
            "pad_token_id": 1,
        },
    ),
    "deberta-v3-base": (
        "deberta-v2",
        {
            "vocab_size": 30522,
            "max_position_embeddings": 512,
            "type_vocab_size": 0,
            "hidden_size": 768,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "intermediate_size": 3072,
            "relative_attention": True,
            "position_buckets": 256,
            "norm_rel_ebd": "layer_norm",
            "share_att_key": True,
            "pos_att_type": ["p2c", "c2p"],
            "position_biased_input": False,
            "max_relative_positions": -1,
        },
    ),
}
# Sentences per shape (the first N unique sentences of STS-B test, before --scale).
SENTENCES = {
    "bert-base": 512,
    "bert-large": 256,
    "roberta-base": 512,
    "mpnet-base": 512,
    "deberta-v3-base": 512,
}
PEERS = ["torch:fp32", "onnx:fp32", "openvino:fp32", "openvino:bf16"]
# What is measured: (model, harness --encoder-impl). Each shape natively against every peer; MPNet
# and DeBERTa also through AutoModel, the harness alone (the peers were timed in the native run).
RUNS = {
    **{shape: (shape, "auto") for shape in SENTENCES},
    "mpnet-base (transformers)": ("mpnet-base", "transformers"),
    "deberta-v3-base (transformers)": ("deberta-v3-base", "transformers"),
}


def build(name: str) -> Path:
    """The random-weight model folder of ``name`` (made once, seeded)."""
    folder = MODELS / name
    if (folder / "config.json").is_file():
        return folder
    import torch
    from transformers import AutoConfig, AutoModel

    from benchmarks.peers.baselines import packaged_model_dir

    model_type, shape = SHAPES[name]
    torch.manual_seed(0)
    model = AutoModel.from_config(AutoConfig.for_model(model_type, **shape))
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    for file in TOKENIZER_FILES:
        shutil.copy(Path(packaged_model_dir()) / file, tmp / file)
    tmp.rename(folder)
    return folder


def peers() -> list[str]:
    """PEERS, plus sentence-transformers on torch in bf16 where the CPU computes bf16."""
    from harness.core.machine import half_native_on_cpu

    return [*PEERS, "torch:bf16"] if half_native_on_cpu("bf16") else PEERS


def summary(results: list[tuple[str, int, dict]]) -> list[str]:
    """One row per (shape, threads): the harness's fastest dtype against each peer at its best."""
    lines = [
        "| shape | threads | sts-bench (dtype) s | ST + OpenVINO bf16 s | × | ST + OpenVINO fp32 s "
        "| × | "
        "ST + ONNX Runtime s | × | ST torch fp32 s | × | sts-bench bf16, % of bf16 peak | "
        "sts-bench fp32, % of fp32 peak |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for shape, threads, data in results:
        by = {(e["name"], e["dtype"]): e for e in data["encoders"]}
        ours = min(
            (e for e in data["encoders"] if e["name"].startswith("sts-bench")),
            key=lambda e: e["seconds"],
        )
        cells = [shape, str(threads), f"{ours['seconds']:.2f} ({ours['dtype']})"]
        for key in (
            ("ST openvino", "bf16"),
            ("ST openvino", "fp32"),
            ("ST onnx", "fp32"),
            ("ST torch", "fp32"),
        ):
            peer = by.get(key)
            cells += (
                [f"{peer['seconds']:.2f}", f"**{peer['seconds'] / ours['seconds']:.2f}**"]
                if peer
                else ["—", "—"]
            )
        # each share is the harness's own run in that dtype against the probe of that dtype; without
        # bf16 instructions the bf16 "peak" is torch's emulation: a share of it means nothing
        bf16, fp32 = by.get((ours["name"], "bf16")), by.get((ours["name"], "fp32"))
        bf16_share = (
            f"{100 * bf16['share_of_own_peak']:.0f} %"
            if bf16 and data["bf16_native"]
            else "— (bf16 emulated)"
            if bf16
            else "—"
        )
        fp32_share = f"{100 * fp32['share_of_own_peak']:.0f} %" if fp32 else "—"
        cells += [bf16_share, fp32_share]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> None:
    import json
    import tempfile

    from benchmarks import side_by_side as sbs
    from benchmarks.report import machine_line

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # each (shape, threads) is one throughput.py run: its rounds, its dtypes (fp32, bf16 if native)
    sbs.add_options(parser, rounds=2, threads=[1, 2])
    parser.add_argument("--shapes", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 128])
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply every shape's sentence count"
    )
    args = sbs.check_options(parser, parser.parse_args(argv))
    lines = [
        "Random-weight encoders of published shapes; sentences: the first N unique sentences of "
        "STS-B test. Each section is one benchmarks/peers/throughput.py run; its ratios were "
        "measured side by side.",
        "",
    ]
    results: list[tuple[str, int, dict]] = []
    for threads in args.threads:
        for shape in args.shapes:
            model, impl = RUNS[shape]
            extra = ["--impl", impl, "--peers", *(peers() if impl == "auto" else [])]
            sentences = max(16, int(SENTENCES[model] * args.scale))
            folder = build(model)
            command = [sys.executable, str(ROOT / "benchmarks" / "peers" / "throughput.py")]
            command += ["--model", str(folder), "--sentences", str(sentences)]
            command += ["--rounds", str(args.rounds), "--batch-sizes", *map(str, args.batch_sizes)]
            command += ["--threads", str(threads), *extra]
            print(
                f"{shape}, {threads} threads: {' '.join(command[1:])}", file=sys.stderr, flush=True
            )
            with tempfile.NamedTemporaryFile(suffix=".json") as report:
                stdout, _ = sbs.run_process([*command, "--json", report.name])
                results.append(
                    (shape, threads, json.loads(Path(report.name).read_text(encoding="utf-8")))
                )
            shown = " ".join(["benchmarks/peers/throughput.py", *command[2:]])
            lines += [
                f"## {shape}, {threads} thread{'s' if threads > 1 else ''}",
                "",
                "`" + shown.replace(str(ROOT) + "/", "") + "`",
                "",
                stdout.strip(),
                "",
            ]
    dtypes = sorted({e["dtype"] for _, _, data in results for e in data["encoders"]})
    head = ["# Every family against the peers", "", machine_line(dtypes), ""]
    sbs.write([*head, *summary(results), "", *lines], args.out)


if __name__ == "__main__":
    main()
