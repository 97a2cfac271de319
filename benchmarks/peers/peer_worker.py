"""One sentence-transformers peer in a process of its own: torch, ONNX Runtime or OpenVINO backend.

It runs under whichever Python has the backend: the project's ``.venv`` for sentence-transformers
on torch, ``.venv-peers`` (see :mod:`benchmarks.peer_env`) for ``backend="onnx"`` and
``backend="openvino"``, whose optimum packages pin an older transformers. It imports nothing from
this project, so either environment can run it.

    python peer_worker.py export --model DIR --backend openvino --to DIR
    python peer_worker.py once --model DIR --backend openvino --dtype bf16 --texts FILE.json
    python peer_worker.py serve            # JSON requests on stdin, one JSON answer per line

``once`` is a cold start (what ``benchmarks/peers/vs_peers.py`` times): load, encode, print one line
of JSON with ``seconds`` (load + encode) and, with ``--vectors``, the vectors saved as ``.npy``.
``serve`` keeps one model loaded so ``benchmarks/peers/throughput.py`` can interleave it with the
harness: ``{"op": "load", ...}``, then ``{"op": "encode", "batch_size": 64}`` answers
``{"seconds": ...}`` (encode only), ``{"op": "save", "path": ...}`` writes the last vectors.

Precision: ``torch`` fp32 loads as is and bf16 through ``model_kwargs={"dtype": torch.bfloat16}``;
ONNX Runtime runs the fp32 graph; OpenVINO takes ``INFERENCE_PRECISION_HINT`` ``f32`` or
``bf16``. OpenVINO's default on a CPU with AVX512-BF16 or AMX is bf16, so ``bf16`` is what a
user gets without asking.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
BACKENDS = ("torch", "onnx", "openvino")
_OV_PRECISION = {"fp32": "f32", "bf16": "bf16"}


def load(model: str, backend: str, dtype: str, threads: int = 0):
    """A SentenceTransformer on CPU for ``backend`` (an exported folder for onnx/openvino), on
    ``threads`` threads (0: the backend's default, all cores)."""
    from sentence_transformers import SentenceTransformer

    kwargs: dict[str, Any] = {}
    if backend == "torch":
        import torch

        if threads:
            torch.set_num_threads(threads)
        if dtype == "bf16":
            kwargs["model_kwargs"] = {"dtype": torch.bfloat16}
    elif backend == "onnx":
        if dtype != "fp32":
            raise SystemExit("the ONNX Runtime peer runs the fp32 graph only")
        if threads:
            import onnxruntime

            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = threads
            kwargs["model_kwargs"] = {"session_options": options}
    else:
        config = {"INFERENCE_PRECISION_HINT": _OV_PRECISION[dtype]}
        if threads:
            config["INFERENCE_NUM_THREADS"] = threads
        kwargs["model_kwargs"] = {"ov_config": config}
    return SentenceTransformer(model, device="cpu", backend=backend, **kwargs)


def export(model: str, backend: str, to: str) -> None:
    """Export ``model`` (a local folder) to ONNX or OpenVINO IR and save it as a
    sentence-transformers folder, so loading it later reads the exported graph instead of exporting
    again. Offline."""
    from sentence_transformers import SentenceTransformer

    SentenceTransformer(model, device="cpu", backend=backend).save_pretrained(to)


def encode(st, texts: list[str], batch_size: int):
    import numpy as np

    return np.asarray(
        st.encode(texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False),
        dtype=np.float32,
    )


def serve() -> None:
    import numpy as np

    st, texts, last = None, [], None
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        if op == "load":
            st = load(
                request["model"], request["backend"], request["dtype"], request.get("threads", 0)
            )
            texts = json.loads(Path(request["texts"]).read_text(encoding="utf-8"))
            encode(st, texts[:64], 32)  # first-call costs out of the timings
            answer: dict[str, Any] = {"ok": True}
        elif op == "encode":
            started = time.perf_counter()
            last = encode(st, texts, request["batch_size"])
            answer = {"seconds": time.perf_counter() - started}
        elif op == "save":
            np.save(request["path"], last)
            answer = {"ok": True}
        else:
            answer = {"error": f"unknown op {op!r}"}
        print(json.dumps(answer), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("export", "once", "serve"))
    parser.add_argument("--model")
    parser.add_argument("--backend", choices=BACKENDS, default="torch")
    parser.add_argument("--dtype", choices=tuple(_OV_PRECISION), default="fp32")
    parser.add_argument("--texts", help="JSON list of sentences")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--to", help="export: the folder to write")
    parser.add_argument("--vectors", help="once: save the vectors here (.npy)")
    args = parser.parse_args()
    if args.mode == "serve":
        serve()
    elif args.mode == "export":
        export(args.model, args.backend, args.to)
    else:
        texts = json.loads(Path(args.texts).read_text(encoding="utf-8"))
        started = time.perf_counter()
        vectors = encode(load(args.model, args.backend, args.dtype), texts, args.batch_size)
        seconds = time.perf_counter() - started
        if args.vectors:
            import numpy as np

            np.save(args.vectors, vectors)
        print(json.dumps({"seconds": seconds}))


if __name__ == "__main__":
    main()
