"""Throughput on bigger encoders: bert-base and bert-large shapes (and RoBERTa / DeBERTa-v3 shapes,
which go through transformers' AutoModel), random weights, against the sentence-transformers peers.

    .venv/bin/python benchmarks/shapes.py --out docs/shapes.md          # ~25 minutes on 2 cores
    .venv/bin/python benchmarks/shapes.py --shapes bert-base --rounds 1  # one shape

Throughput does not depend on the weights, so each model is a randomly initialised transformers
model of the published shape, saved with ``save_pretrained`` under ``.cache/bench-models/`` with
MiniLM's (= bert-base-uncased's) tokenizer, and loaded from there by everyone. Each shape is one
``benchmarks/throughput.py`` run (a process of its own: encoders interleaved in rounds, each peer
at its best batch size, the matmul peak probed in the same process); Spearman of random weights
means nothing and is not reported. ``bert-base (transformers)`` and ``roberta-base (transformers)``
are the same checkpoints run by the harness through AutoModel (``--encoder-impl transformers``):
the gap to the native rows is what the native path brings (DeBERTa-v3 has only the AutoModel path).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MODELS = ROOT / ".cache" / "bench-models"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
BERT = {"vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2}
SHAPES = {
    "bert-base": ("bert", {**BERT, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                           "intermediate_size": 3072}),
    "bert-large": ("bert", {**BERT, "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                            "intermediate_size": 4096}),
    "roberta-base": ("roberta", {"vocab_size": 30522, "max_position_embeddings": 514, "type_vocab_size": 1,
                                 "pad_token_id": 0, "hidden_size": 768, "num_hidden_layers": 12,
                                 "num_attention_heads": 12, "intermediate_size": 3072}),
    "deberta-v3-base": ("deberta-v2", {"vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 0,
                                       "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                                       "intermediate_size": 3072, "relative_attention": True,
                                       "position_buckets": 256, "norm_rel_ebd": "layer_norm",
                                       "share_att_key": True, "pos_att_type": ["p2c", "c2p"],
                                       "position_biased_input": False, "max_relative_positions": -1}),
}
# What each shape is measured against: (sentences, throughput.py arguments).
RUNS = {
    "bert-base": (512, ["--peers", "torch:fp32", "torch:bf16", "openvino:fp32", "openvino:bf16"]),
    "bert-large": (256, ["--peers", "torch:fp32", "torch:bf16", "openvino:fp32", "openvino:bf16"]),
    "bert-base (transformers)": (512, ["--impl", "transformers", "--peers"]),
    "roberta-base": (512, ["--peers", "torch:fp32", "torch:bf16", "openvino:bf16"]),
    "roberta-base (transformers)": (512, ["--impl", "transformers", "--peers"]),
    "deberta-v3-base": (256, ["--peers", "torch:fp32", "torch:bf16", "openvino:bf16"]),
}


def build(name: str) -> Path:
    """The random-weight model folder of ``name`` (made once, seeded)."""
    folder = MODELS / name
    if (folder / "config.json").is_file():
        return folder
    import torch
    from transformers import AutoConfig, AutoModel

    from benchmarks.peers import packaged_model_dir

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=list(RUNS), choices=list(RUNS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--threads", type=int, default=0, help="passed on to throughput.py")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every shape's sentence count")
    parser.add_argument("--out", help="also write the report (markdown) to this file")
    args = parser.parse_args()
    lines = ["Random-weight encoders of published shapes; sentences: the first N unique sentences of STS-B "
             "test. Each section is one benchmarks/throughput.py run; its ratios were measured side by side.", ""]
    for shape in args.shapes:
        sentences, extra = RUNS[shape]
        sentences = max(16, int(sentences * args.scale))
        folder = build(shape.split(" ")[0])
        command = [sys.executable, str(ROOT / "benchmarks" / "throughput.py"), "--model", str(folder),
                   "--sentences", str(sentences), "--rounds", str(args.rounds),
                   "--batch-sizes", *map(str, args.batch_sizes), "--threads", str(args.threads), *extra]
        print(f"{shape}: {' '.join(command[1:])}", file=sys.stderr, flush=True)
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if done.returncode != 0:
            raise SystemExit(f"{shape} failed:\n{done.stderr[-3000:]}")
        lines += [f"## {shape}", "", "`" + " ".join(["benchmarks/throughput.py", *command[2:]]).replace(
            str(ROOT) + "/", "") + "`", "", done.stdout.strip(), ""]
    from benchmarks.report import emit

    emit(lines, args.out)


if __name__ == "__main__":
    main()
