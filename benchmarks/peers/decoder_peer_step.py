"""One sentence-transformers step of ``benchmarks/peers/decoder_peers.py``, in a process of its own.

It runs under whichever Python has the backend: the project's ``.venv`` for sentence-transformers
on torch, ``.venv-peers`` (:mod:`benchmarks.peer_env`) for OpenVINO, whose optimum-intel pins an
older transformers. It imports nothing from this project, so either environment can run it.

    python benchmarks/peers/decoder_peer_step.py export --model DIR --to DIR
    python benchmarks/peers/decoder_peer_step.py encode --model DIR --backend torch --dtype bf16 \\
        --threads 2 --texts FILE.json --prompt "Instruct: ...\\nQuery: " --vectors OUT.npy

``encode`` loads the model (a sentence-transformers folder whose pooling is last-token), encodes the
first ``--warmup`` texts untimed (oneDNN / OpenVINO build their kernels on first use), then encodes
every text timed, and prints one line of JSON: ``load_s``, ``encode_s``, ``process_s`` (from the
interpreter's start, imports included).

The prompt goes to ``encode(prompt=...)``, the documented way: sentence-transformers prepends it
to each sentence and tokenizes the joined string, as the harness tokenizes its prompted text.

Precision: torch loads the weights in the step's dtype (``model_kwargs={"dtype": ...}``, always
explicit: transformers 5 would otherwise keep the checkpoint's bf16); OpenVINO takes
``INFERENCE_PRECISION_HINT`` ``f32`` or ``bf16`` (its default on a CPU with AVX512-BF16 or AMX).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

STARTED = time.perf_counter()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
_OV_PRECISION = {"fp32": "f32", "bf16": "bf16"}


def load(model: str, backend: str, dtype: str, threads: int) -> Any:
    """A SentenceTransformer on CPU: torch in ``dtype`` on ``threads`` threads, or OpenVINO (an
    exported folder) with that precision hint and thread count."""
    from sentence_transformers import SentenceTransformer

    kwargs: dict[str, Any]
    if backend == "torch":
        import torch

        torch.set_num_threads(threads)
        wanted = torch.bfloat16 if dtype == "bf16" else torch.float32
        # transformers 5 renamed torch_dtype to dtype; the peers' 4.57 still reads torch_dtype
        key = "dtype" if _major("transformers") >= 5 else "torch_dtype"
        kwargs = {"model_kwargs": {key: wanted}}
    else:
        config = {"INFERENCE_PRECISION_HINT": _OV_PRECISION[dtype]}
        config["INFERENCE_NUM_THREADS"] = str(threads)
        kwargs = {"model_kwargs": {"ov_config": config}}
    return SentenceTransformer(model, device="cpu", backend=backend, **kwargs)  # type: ignore[arg-type]


def _major(package: str) -> int:
    import importlib.metadata

    return int(importlib.metadata.version(package).split(".")[0])


def export(model: str, to: str) -> None:
    """Export ``model`` (a local sentence-transformers folder) to OpenVINO IR, offline, and save it
    as a sentence-transformers folder. ``load_in_8bit=False``: optimum-intel would otherwise
    compress the weights of a model over 1e9 parameters (Llama-1B) to int8, another computation."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(
        model, device="cpu", backend="openvino", model_kwargs={"load_in_8bit": False}
    )
    st.save_pretrained(to)


def encode(st: Any, texts: list[str], prompt: str, batch_size: int) -> Any:
    import numpy as np

    return np.asarray(
        st.encode(
            texts,
            prompt=prompt or None,
            batch_size=batch_size,
            convert_to_numpy=True,
            show_progress_bar=False,
        ),
        dtype=np.float32,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("export", "encode"))
    parser.add_argument("--model", required=True)
    parser.add_argument("--to", help="export: the folder to write")
    parser.add_argument("--backend", choices=("torch", "openvino"), default="torch")
    parser.add_argument("--dtype", choices=tuple(_OV_PRECISION), default="fp32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--texts", help="JSON list of sentences")
    parser.add_argument("--prompt", default="", help="prepended by encode(prompt=...)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=64, help="texts encoded untimed first")
    parser.add_argument("--vectors", help="save the vectors here (.npy)")
    args = parser.parse_args(argv)
    if args.mode == "export":
        export(args.model, args.to)
        return
    texts = json.loads(Path(args.texts).read_text(encoding="utf-8"))
    started = time.perf_counter()
    st = load(args.model, args.backend, args.dtype, args.threads)
    loaded = time.perf_counter()
    if args.warmup:
        encode(st, texts[: args.warmup], args.prompt, args.batch_size)
    warm = time.perf_counter()
    vectors = encode(st, texts, args.prompt, args.batch_size)
    done = time.perf_counter()
    if args.vectors:
        import numpy as np

        np.save(args.vectors, vectors)
    print(
        json.dumps(
            {
                "load_s": loaded - started,
                "warmup_s": warm - loaded,
                "encode_s": done - warm,
                "process_s": time.perf_counter() - STARTED,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
