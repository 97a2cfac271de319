"""The peers' own environment and a client for :mod:`benchmarks.peer_worker` processes.

sentence-transformers' ``backend="onnx"`` and ``backend="openvino"`` need optimum, optimum-intel,
onnxruntime and openvino, which pin an older transformers than this project's. The benchmarks
therefore build them a virtual environment of their own, ``.venv-peers`` at the repository root,
on first use (about a minute with a warm pip cache; never by ``make test``), with the pinned
versions below. Models are exported to ONNX / OpenVINO IR locally, from the same folder the
harness loads, into ``.cache/peers/`` (no hub). Both folders are git-ignored.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PEER_VENV = ROOT / ".venv-peers"
EXPORTS = ROOT / ".cache" / "peers"
WORKER = Path(__file__).resolve().parent / "peer_worker.py"
# What ``pip install torch==2.13.0 "sentence-transformers[onnx,openvino]"`` resolved to when the
# numbers in docs/PERFORMANCE.md were measured; pinned so they can be measured again.
PEER_REQUIREMENTS = (
    "torch==2.13.0",
    "sentence-transformers[onnx,openvino]==5.7.0",
    "transformers==4.57.6",
    "optimum==2.1.0",
    "optimum-intel==1.27.0",
    "optimum-onnx==0.1.0",
    "onnxruntime==1.32.0",
    "openvino==2026.4.1",
    "openvino-tokenizers==2026.4.1.0",
    "nncf==3.4.0",
    "tokenizers==0.22.2",
)


def peer_python() -> Path:
    """The interpreter of ``.venv-peers``, built (or rebuilt when the pins changed) on first use."""
    python = PEER_VENV / "bin" / "python"
    stamp = PEER_VENV / ".installed"
    wanted = "\n".join(PEER_REQUIREMENTS)
    if python.exists() and stamp.is_file() and stamp.read_text(encoding="utf-8") == wanted:
        return python
    print(
        f"building {PEER_VENV} (sentence-transformers with ONNX Runtime and OpenVINO) ...",
        file=sys.stderr,
    )
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(PEER_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PEER_REQUIREMENTS], check=True)
    stamp.write_text(wanted, encoding="utf-8")
    return python


def python_for(backend: str) -> Path:
    """sentence-transformers on torch runs in this project's environment (the version users of
    the harness have); the ONNX and OpenVINO backends in ``.venv-peers``."""
    return Path(sys.executable) if backend == "torch" else peer_python()


def exported(model_dir: str, backend: str) -> str:
    """The folder to load ``model_dir`` from with ``backend``: itself for torch, else its local
    ONNX / OpenVINO export (made once, kept under ``.cache/peers/``)."""
    if backend == "torch":
        return model_dir
    weights = sorted(Path(model_dir).glob("*.safetensors")) or sorted(Path(model_dir).glob("*.bin"))
    stat = weights[0].stat() if weights else Path(model_dir).stat()
    tag = hashlib.sha256(
        f"{Path(model_dir).resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()
    ).hexdigest()[:12]
    target = EXPORTS / f"{Path(model_dir).name}-{tag}-{backend}"
    if not (target / "modules.json").is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [
                str(python_for(backend)),
                str(WORKER),
                "export",
                "--model",
                model_dir,
                "--backend",
                backend,
                "--to",
                str(target),
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"exporting {model_dir} to {backend} failed:\n{done.stderr[-2000:]}")
    return str(target)


class PeerProcess:
    """One loaded peer (``peer_worker.py serve``) answering encode requests, so its timings can be
    interleaved with the harness's in one run. It waits on its stdin between requests."""

    def __init__(
        self, model_dir: str, backend: str, dtype: str, texts_file: Path, threads: int = 0
    ) -> None:
        self.label = f"ST {backend} {dtype}"
        EXPORTS.mkdir(parents=True, exist_ok=True)
        self.log = EXPORTS / f"worker-{backend}-{dtype}.log"
        with self.log.open("w", encoding="utf-8") as log:
            self._proc = subprocess.Popen(
                [str(python_for(backend)), str(WORKER), "serve"],
                cwd=ROOT,
                text=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        self.ask(
            {
                "op": "load",
                "model": exported(model_dir, backend),
                "backend": backend,
                "dtype": dtype,
                "texts": str(texts_file),
                "threads": threads,
            }
        )

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.label}: the worker exited; see {self.log}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{self.label}: {answer['error']}")
        return answer

    def encode_seconds(self, batch_size: int) -> float:
        return self.ask({"op": "encode", "batch_size": batch_size})["seconds"]

    def save_vectors(self, path: Path) -> None:
        self.ask({"op": "save", "path": str(path)})

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=60)
