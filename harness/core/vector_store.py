"""A content-addressed store of sentence vectors: one store per cache key, one row per sentence.

Layout of one store (``<cache>/vectors/<key hash>/``)::

    meta.json                 {"schema": 2, "key": {...the full key, in plain text...}, "dim": 384}
    part-<sha256 prefix>.npy  rows of (sha256(sentence) as 32 bytes, float32 vector)

Each part is written once, atomically (temporary file + ``os.replace``), and is named by the
sha256 of its own bytes, so a truncated or altered part is detected on open, reported with a warning
and discarded: its sentences are simply encoded again. Parts are appended as encoding proceeds, so
an interrupted run keeps everything finished before the interrupt, and two runs writing the same
store at once only ever add whole files. Parts are read in name order and the first part holding
a sentence wins; a part that repeats sentences of earlier parts (two runs encoding one window at
once) is rewritten without them, so the store never keeps two rows for one sentence. A folder
where a part belongs is removed with a warning. Parts are plain ``.npy`` of a structured dtype,
read with ``allow_pickle=False`` and memory-mapped.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.core import authenticity
from harness.core.hashing import (
    atomic_write_bytes,
    atomic_write_text,
    file_sha256,
    key_hash,
    npy_bytes,
    read_regular,
    read_regular_text,
    text_digest,
)

CACHE_SCHEMA = 2  # 2: equal-length batches (vectors no longer depend on batch-mates)
log = logging.getLogger("sts_bench.cache")


def read_meta(folder: Path, key: Mapping[str, Any]) -> int | None:
    """The vector width a store folder's ``meta.json`` records, if it was written for ``key``;
    None when there is none yet, and when it is damaged or another key's (the folder is then
    discarded with one warning: its sentences are encoded again). Dense and sparse stores alike."""
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(read_regular_text(meta_path))
        ok = meta.get("key") == json.loads(json.dumps(key)) and isinstance(meta.get("dim"), int)
    except (OSError, ValueError):
        ok = False
    if not ok:
        log.warning(
            "cache: %s does not match its key (damaged or foreign); discarding it, "
            "its sentences will be encoded again",
            meta_path,
        )
        shutil.rmtree(folder, ignore_errors=True)
        return None
    return int(meta["dim"])


def _row_dtype(dim: int) -> np.dtype:
    # The key is 32 raw bytes as uint8, not "S32": numpy strips trailing NUL bytes from S-strings,
    # which would corrupt the 1 in 256 digests that end in 0x00.
    return np.dtype([("key", "u1", (32,)), ("vec", "<f4", (dim,))])


class VectorStore:
    """Vectors for one cache key. ``key`` must hold everything that changes the vectors.

    >>> store = VectorStore(Path(tmp), {"model": "x", "pooling": "mean"})   # doctest: +SKIP
    >>> store.add(["a b"], np.ones((1, 4), np.float32))                     # doctest: +SKIP
    >>> store.missing(["a b", "c"])                                         # doctest: +SKIP
    ['c']
    """

    def __init__(self, root: Path, key: Mapping[str, Any], secret: bytes | None = None) -> None:
        self.key = {"schema": CACHE_SCHEMA, **key}
        # With a cache secret (harness.core.authenticity) a part's name is the HMAC of its bytes,
        # not their sha256: a part planted by someone without the secret is never read.
        self.secret = secret
        self.dir = Path(root) / "vectors" / key_hash(self.key)
        self.dim: int | None = None
        self._index: dict[bytes, tuple[int, int]] | None = None
        self._parts: list[np.ndarray] = []
        self._part_files: list[str] = []  # the file each of _parts was read from (for error lines)

    # -- reading -------------------------------------------------------------------------------
    def _load(self) -> dict[bytes, tuple[int, int]]:
        if self._index is not None:
            return self._index
        self._index, self._parts, self._part_files = {}, [], []
        dim = read_meta(self.dir, self.key)
        if dim is None:
            return self._index
        self.dim = dim
        for path in sorted(
            self.dir.glob("part-*.npy")
        ):  # by name: the first part holding a sentence wins
            part = self._open_part(path)
            if part is None:
                continue
            digests = [digest.tobytes() for digest in part["key"]]
            fresh, seen = [], set()
            for row, digest in enumerate(digests):
                if digest not in self._index and digest not in seen:
                    fresh.append(row)
                    seen.add(digest)
            if len(fresh) < len(digests):
                part = self._without_repeats(path, part, fresh)
                if part is None:
                    continue
                digests = [digests[row] for row in fresh]
            number = len(self._parts)
            self._parts.append(part)
            # a part rewritten without repeats lives in another file: the memory map knows which
            self._part_files.append(Path(getattr(part, "filename", None) or path).name)
            for row, digest in enumerate(digests):
                self._index[digest] = (number, row)
        return self._index

    def _without_repeats(self, path: Path, part: np.ndarray, rows: list[int]) -> np.ndarray | None:
        """Rewrite a part that repeats sentences an earlier part holds (two runs encoding the same
        window at once), keeping only ``rows``: the store never keeps two rows for one sentence."""
        log.info(
            "cache: %s repeats %d sentence(s) of earlier parts; keeping %d new row(s)",
            path,
            len(part) - len(rows),
            len(rows),
        )
        kept = None
        if rows:
            name = self._write_part(np.ascontiguousarray(part[rows]))
            kept = np.load(self.dir / name, mmap_mode="r", allow_pickle=False)
            if name == path.name:
                return kept
        path.unlink(missing_ok=True)
        return kept

    def _write_part(self, part: np.ndarray) -> str:
        """Write ``part`` atomically as ``part-<sha256 of its bytes>.npy`` (with a cache secret: the
        HMAC of its bytes); returns the file name."""
        data = npy_bytes(part)
        name = f"part-{self._name_digest(data)}.npy"
        atomic_write_bytes(self.dir / name, data)
        return name

    def _name_digest(self, data: bytes) -> str:
        return (
            authenticity.tag(self.secret, data) if self.secret else hashlib.sha256(data).hexdigest()
        )[:32]

    def _authentic(self, path: Path, expected: str) -> bool:
        """Whether the part's bytes carry the tag its name claims (only asked with a secret)."""
        try:
            data = read_regular(path)
        except OSError:
            return True  # unreadable or not a regular file: _open_part's own checks say so
        if hmac.compare_digest(self._name_digest(data), expected):
            return True
        log.warning(
            "cache: %s is not authenticated by $%s (written without the secret, or by someone "
            "else); "
            "ignoring it, its sentences will be encoded again",
            path,
            authenticity.SECRET_ENV,
        )
        return False

    def _open_part(self, path: Path) -> np.ndarray | None:
        expected = path.stem.removeprefix("part-")
        if not path.is_dir() and not path.is_file() and os.path.lexists(path):
            # a FIFO, a device (a link to /dev/zero), a socket or a dangling link: hashing or
            # loading it would hang or fail; it is removed like a damaged part
            log.warning(
                "cache: %s is not a regular file; removing it, its sentences will be encoded again",
                path,
            )
            path.unlink(missing_ok=True)
            return None
        if self.secret and path.is_file() and not self._authentic(path, expected):
            return None  # left in place: it may be another user's (cache shared without the secret)
        if path.is_dir() and not path.is_symlink():
            log.warning(
                "cache: %s is a folder where a part file belongs; removing it, its sentences will "
                "be "
                "encoded again",
                path,
            )
            shutil.rmtree(path, ignore_errors=True)
            return None
        try:
            if not self.secret and not file_sha256(path).startswith(
                expected
            ):  # a secret's tag checked it
                raise ValueError("checksum mismatch")
            part = np.load(path, mmap_mode="r", allow_pickle=False)
            if part.dtype != _row_dtype(self.dim or 0):
                raise ValueError(f"unexpected dtype {part.dtype}")
            return part
        except FileNotFoundError:
            return None  # removed by a concurrent writer between listing and opening
        except (OSError, ValueError) as err:
            log.warning(
                "cache: %s is corrupt (%s); discarding it, its sentences will be encoded again",
                path,
                err,
            )
            path.unlink(missing_ok=True)
            return None

    def __len__(self) -> int:
        return len(self._load())

    def refresh(self) -> None:
        """Forget the in-memory index: the next read sees parts written by other processes."""
        self._index, self._parts, self._part_files = None, [], []

    def missing(self, texts: Sequence[str]) -> list[str]:
        """The texts with no row yet, in input order, without repeats."""
        index = self._load()
        return [t for t in dict.fromkeys(texts) if text_digest(t) not in index]

    def get(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts`` as a fresh float32 (n, dim) array; every text must be present."""
        index = self._load()
        if self.dim is None:
            raise KeyError("the store is empty")
        locations = [index.get(text_digest(text)) for text in texts]
        for text, location in zip(texts, locations):
            if location is None:
                raise KeyError(f"not cached: {text[:60]!r}")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        # no location is None: the loop above has raised for a text that is not cached
        part_ids = np.fromiter((loc[0] for loc in locations), dtype=np.int64, count=len(texts))  # type: ignore[index]
        rows = np.fromiter((loc[1] for loc in locations), dtype=np.int64, count=len(texts))  # type: ignore[index]
        for number in np.unique(part_ids):
            mask = part_ids == number
            out[mask] = self._parts[number]["vec"][rows[mask]]
        return out

    def part_file(self, text: str) -> Path | None:
        """The part file holding ``text``'s vector (None: not cached)."""
        location = self._load().get(text_digest(text))
        return None if location is None else self.dir / self._part_files[location[0]]

    # -- writing -------------------------------------------------------------------------------
    def add(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Append rows for ``texts`` (already present ones are skipped) as one new part file."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) != len(texts):
            raise ValueError(f"expected ({len(texts)}, dim) vectors, got {vectors.shape}")
        index = self._load()
        if self.dim is None:
            self.dim = int(vectors.shape[1])
            meta = {"schema": CACHE_SCHEMA, "key": self.key, "dim": self.dim}
            atomic_write_text(self.dir / "meta.json", json.dumps(meta, indent=1, sort_keys=True))
        elif vectors.shape[1] != self.dim:
            raise ValueError(f"store holds dim {self.dim}, got {vectors.shape[1]}")
        fresh: dict[bytes, int] = {}
        for i, text in enumerate(texts):
            digest = text_digest(text)
            if digest not in index and digest not in fresh:
                fresh[digest] = i
        if not fresh:
            return
        part = np.empty(len(fresh), dtype=_row_dtype(self.dim))
        part["key"] = np.frombuffer(b"".join(fresh), dtype=np.uint8).reshape(-1, 32)
        part["vec"] = vectors[list(fresh.values())]
        name = self._write_part(part)
        number = len(self._parts)
        # Keep a memory map of what was written, not the array: a long encode job's memory must
        # not grow with the number of sentences it has stored.
        self._parts.append(np.load(self.dir / name, mmap_mode="r", allow_pickle=False))
        self._part_files.append(name)
        for row, digest in enumerate(fresh):
            index[digest] = (number, row)
