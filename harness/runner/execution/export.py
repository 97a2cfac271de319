"""Vectors out (``--export-embeddings DIR``): for each (method, task, split) scored, the split's
unique sentences and the very vectors that were scored.

Why here and not a report step: report steps read records, and a record keeps each pair's
similarity, not the vectors. The vectors exist once, while a (method, task) is scored
(:func:`harness.runner.execution.evaluate.score`); exporting them there costs no second encode
(not even a cache read) and guarantees the file holds what the score was computed from.

Layout, one folder per (backbone, method row, task, split)::

    DIR/<backbone>/<method label>/<task>/<split>/
        vectors.npy      float32 (count, dims); row i is the vector of sentence i
        sentences.jsonl  {"index": i, "sentence": "..."} per line, the split's sentences without
                         repeats in first-seen order (s1 then s2 of each pair, as SplitData.sentences)
        meta.json        written last: method label and name, backbone, task, split, dims, count,
                         the sha256 of vectors.npy and of sentences.jsonl, the task's data fingerprint

``<backbone>`` is ``none`` for methods without one (an encoder object, ``random``) and the last path
component of a local folder. A pair-scoring method (cross-encoder) has no sentence vectors: it is
skipped with one note. :func:`read_embeddings` verifies both checksums before returning anything.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.errors import UserError
from harness.core.hashing import atomic_write_bytes, atomic_write_text, npy_bytes
from harness.runner.records.store import now_iso

if TYPE_CHECKING:
    from harness.runner.records.schema import Record

EXPORT_SCHEMA = 1


@dataclass
class SentenceVectors:
    """The sentences of one scored split and their vectors (row i belongs to ``sentences[i]``)."""

    sentences: list[str]
    vectors: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)


def unique_rows(s1: tuple[str, ...], s2: tuple[str, ...], left: np.ndarray, right: np.ndarray) -> SentenceVectors:
    """One row per distinct sentence of both sides, first-seen order (s1 then s2).

    >>> rows = unique_rows(("a", "b"), ("b", "c"), np.eye(2), np.eye(2)[::-1])
    >>> rows.sentences, rows.vectors.tolist()
    (['a', 'b', 'c'], [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    """
    first: dict[str, tuple[np.ndarray, int]] = {}
    for texts, vectors in ((s1, left), (s2, right)):
        for i, text in enumerate(texts):
            first.setdefault(text, (vectors, i))
    dims = left.shape[1] if left.ndim == 2 else 0
    out = np.empty((len(first), dims), dtype=np.float32)
    for row, (vectors, i) in enumerate(first.values()):
        out[row] = vectors[i]
    return SentenceVectors(list(first), out)


def _slug(text: str) -> str:
    """A folder name: a local path's last component; anything but [A-Za-z0-9._=,+[]-] becomes '_'."""
    if "/" in text and Path(text).expanduser().is_dir():
        text = Path(text).name
    return re.sub(r"[^A-Za-z0-9._=,+\[\]-]", "_", text.replace("/", "--")).lstrip(".") or "_"


def backbone_name(record: Record) -> str:
    return record["method"]["spec"]["backbone"]


def folder_of(root: Path, record: Record) -> Path:
    task = record["task"]
    return (Path(root).expanduser() / _slug(backbone_name(record)) / _slug(record["method"]["label"])
            / _slug(task["name"]) / _slug(task["split"]))


def write_embeddings(root: Path, record: Record, rows: SentenceVectors) -> Path:
    """Write one (method, task, split)'s export (see the module docstring); returns its folder."""
    folder = folder_of(root, record)
    vectors = npy_bytes(np.ascontiguousarray(rows.vectors, dtype=np.float32))
    lines = "".join(json.dumps({"index": i, "sentence": s}, ensure_ascii=False) + "\n"
                    for i, s in enumerate(rows.sentences)).encode("utf-8")
    (folder / "meta.json").unlink(missing_ok=True)  # an interrupted rewrite must not look complete
    atomic_write_bytes(folder / "vectors.npy", vectors)
    atomic_write_bytes(folder / "sentences.jsonl", lines)
    task = record["task"]
    meta = {"schema": EXPORT_SCHEMA, "method": record["method"]["label"], "method_name": record["method"]["name"],
            "backbone": backbone_name(record), "task": task["name"], "task_title": task["title"],
            "split": task["split"], "source": task["source"], "task_fingerprint": task["fingerprint"],
            "dims": int(rows.vectors.shape[1]), "count": len(rows.sentences), "dtype": "float32",
            "vectors_sha256": hashlib.sha256(vectors).hexdigest(),
            "sentences_sha256": hashlib.sha256(lines).hexdigest(), "created": now_iso()}
    atomic_write_text(folder / "meta.json", json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    return folder


def read_embeddings(folder: str | Path) -> SentenceVectors:
    """An export folder's sentences and vectors, each file checked against meta.json's sha256."""
    folder = Path(folder).expanduser()
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        vectors_bytes = (folder / "vectors.npy").read_bytes()
        lines_bytes = (folder / "sentences.jsonl").read_bytes()
    except (OSError, ValueError) as err:
        raise UserError(f"{folder}: not a complete embeddings export ({type(err).__name__}: {err}); "
                        "export it again with --export-embeddings") from None
    for name, data, key in (("vectors.npy", vectors_bytes, "vectors_sha256"),
                            ("sentences.jsonl", lines_bytes, "sentences_sha256")):
        if hashlib.sha256(data).hexdigest() != meta.get(key):
            raise UserError(f"{folder / name}: does not match the checksum in meta.json (altered or truncated); "
                            "export it again with --export-embeddings")
    import io

    vectors = np.load(io.BytesIO(vectors_bytes), allow_pickle=False)
    sentences = [json.loads(line)["sentence"] for line in lines_bytes.decode("utf-8").splitlines()]
    return SentenceVectors(sentences, vectors, meta)
