r"""Vectors out (``--export-embeddings DIR``): for each (method, task, split) scored, the split's
unique sentences and the very vectors that were scored.

Why here and not a report step: report steps read records, and a record keeps each pair's
similarity, not the vectors. The vectors exist once, while a (method, task) is scored
(:func:`harness.runner.execution.evaluate.score`); exporting them there costs no second encode
(not even a cache read) and guarantees the file holds what the score was computed from.

Layout, one folder per (backbone, method row, task, split)::

    DIR/<backbone>/<method label>/<task>/<split>/
        vectors.npy      float32 (count, dims); row i is the vector of sentence i
        sentences.jsonl  {"index": i, "sentence": "..."} per line, the split's sentences without
                         repeats in first-seen order (s1 then s2 of each pair, as
                         SplitData.sentences)
        meta.json        written last: method label and name, backbone, task, split, dims, count,
                         the sha256 of vectors.npy and of sentences.jsonl, the task's data
                         fingerprint

``<backbone>`` is ``none`` for methods without one (an encoder object, ``random``) and the last path
component of a local folder; a name longer than :data:`MAX_PART` characters is cut and tagged with a
hash of the whole (file systems refuse names over 255 bytes; the full label is in meta.json). A
pair-scoring method (cross-encoder) has no sentence vectors: it is skipped with one note.
:func:`read_embeddings` verifies both checksums before returning anything.

``sentences.jsonl`` ends its lines at ``\n`` only, and its reader splits there only:
``str.splitlines`` would also cut at U+2028, NEL or a form feed, which a sentence may hold (JSON
keeps U+2028, U+2029 and NEL raw; the writer escapes them as ``\u2028``... too, for readers that
split like ``splitlines``). Below the export folder nothing goes through a symbolic link: a folder
link is refused (one line), a file link is replaced by the atomic write, and the reader opens no
link.
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
from harness.core.hashing import atomic_write_bytes, atomic_write_text, key_hash, npy_bytes
from harness.runner.records.lock import read_inside, refuse_linked_folders
from harness.runner.records.store import now_iso

if TYPE_CHECKING:
    from harness.runner.records.schema import Record

EXPORT_SCHEMA = 1
# characters of a folder name kept (file systems stop at 255 bytes; the slug is ASCII)
MAX_PART = 120
# Line breaks of str.splitlines that JSON keeps raw in a string (json.dumps escapes the others).
_RAW_BREAKS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}


@dataclass
class SentenceVectors:
    """The sentences of one scored split and their vectors (row i belongs to ``sentences[i]``)."""

    sentences: list[str]
    vectors: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)


def unique_rows(
    s1: tuple[str, ...], s2: tuple[str, ...], left: np.ndarray, right: np.ndarray
) -> SentenceVectors:
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
    """A folder name: a local path's last component; anything but [A-Za-z0-9._=,+[]-] becomes '_';
    over :data:`MAX_PART` characters, cut and tagged with a hash of the whole text, so two long
    labels that share their start still get two folders.

    >>> len(_slug("x" * 300)), _slug("x" * 300) == _slug("x" * 299 + "y")
    (120, False)
    """
    if "/" in text and Path(text).expanduser().is_dir():
        text = Path(text).name
    slug = re.sub(r"[^A-Za-z0-9._=,+\[\]-]", "_", text.replace("/", "--")).lstrip(".") or "_"
    if len(slug) > MAX_PART:
        slug = f"{slug[: MAX_PART - 9]}-{key_hash({'name': text}, 8)}"
    return slug


def backbone_name(record: Record) -> str:
    return record["method"]["spec"]["backbone"]


def folder_of(root: Path, record: Record) -> Path:
    task = record["task"]
    return (
        Path(root).expanduser()
        / _slug(backbone_name(record))
        / _slug(record["method"]["label"])
        / _slug(task["name"])
        / _slug(task["split"])
    )


def write_embeddings(
    root: Path, record: Record, rows: SentenceVectors, output_dir: Path | None = None
) -> Path:
    """Write one (method, task, split)'s export (see the module docstring); returns its folder.
    An export folder inside ``output_dir`` (``OUT/embeddings``) is itself no link: the output
    folder is closed (:mod:`harness.runner.records.lock`)."""
    folder = folder_of(root, record)
    if output_dir is not None:
        refuse_linked_folders(Path(output_dir).expanduser(), folder / "meta.json")
    refuse_linked_folders(Path(root).expanduser(), folder / "meta.json", "the export folder")
    vectors = npy_bytes(np.ascontiguousarray(rows.vectors, dtype=np.float32))
    lines = "".join(
        json.dumps({"index": i, "sentence": s}, ensure_ascii=False).translate(_RAW_BREAKS) + "\n"
        for i, s in enumerate(rows.sentences)
    ).encode("utf-8")
    (folder / "meta.json").unlink(missing_ok=True)  # an interrupted rewrite must not look complete
    atomic_write_bytes(folder / "vectors.npy", vectors)
    atomic_write_bytes(folder / "sentences.jsonl", lines)
    task = record["task"]
    meta = {
        "schema": EXPORT_SCHEMA,
        "method": record["method"]["label"],
        "method_name": record["method"]["name"],
        "backbone": backbone_name(record),
        "task": task["name"],
        "task_title": task["title"],
        "split": task["split"],
        "source": task["source"],
        "task_fingerprint": task["fingerprint"],
        "dims": int(rows.vectors.shape[1]),
        "count": len(rows.sentences),
        "dtype": "float32",
        "vectors_sha256": hashlib.sha256(vectors).hexdigest(),
        "sentences_sha256": hashlib.sha256(lines).hexdigest(),
        "created": now_iso(),
    }
    atomic_write_text(folder / "meta.json", json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    return folder


def read_embeddings(folder: str | Path) -> SentenceVectors:
    """An export folder's sentences and vectors, each file checked against meta.json's sha256."""
    folder = Path(folder).expanduser()
    try:  # no link is followed: what is read is what the export wrote in this folder
        meta = json.loads(read_inside(folder / "meta.json").decode("utf-8"))
        vectors_bytes = read_inside(folder / "vectors.npy")
        lines_bytes = read_inside(folder / "sentences.jsonl")
    except (OSError, ValueError) as err:
        raise UserError(
            f"{folder}: not a complete embeddings export ({type(err).__name__}: {err}); export it "
            "again with --export-embeddings"
        ) from None
    for name, data, key in (
        ("vectors.npy", vectors_bytes, "vectors_sha256"),
        ("sentences.jsonl", lines_bytes, "sentences_sha256"),
    ):
        if hashlib.sha256(data).hexdigest() != meta.get(key):
            raise UserError(
                f"{folder / name}: does not match the checksum in meta.json (altered or "
                "truncated); export it again with --export-embeddings"
            )
    import io

    vectors = np.load(io.BytesIO(vectors_bytes), allow_pickle=False)
    sentences = []
    # \n only: see the docstring
    for number, line in enumerate(lines_bytes.decode("utf-8").split("\n"), 1):
        try:
            sentences += [json.loads(line)["sentence"]] if line else []
        except (ValueError, KeyError, TypeError):
            raise UserError(
                f"{folder / 'sentences.jsonl'}:{number}: not a line of an export (a JSON object "
                "with a sentence); export it again with --export-embeddings"
            ) from None
    if len(sentences) != len(vectors):
        raise UserError(
            f"{folder}: {len(sentences)} sentences but {len(vectors)} vectors; export it again "
            "with --export-embeddings"
        )
    return SentenceVectors(sentences, vectors, meta)
