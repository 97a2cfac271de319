"""A content-addressed store of sentence vectors: one store per cache key, one row per sentence.

Layout of one store (``<cache>/vectors/<key hash>/``)::

    meta.json                 {"schema": 2, "key": {...the full key, in plain text...}, "dim": 384}
    part-<sha256 prefix>.npy  rows of (sha256(sentence) as 32 bytes, float32 vector)

Each part is written once, atomically (temporary file + ``os.replace``), and is named by the
sha256 of its own bytes (with a cache secret, :mod:`harness.core.authenticity`: their HMAC, so a
part planted without the secret is never read, and left in place), so a truncated or altered part
is detected on open, reported with a warning and discarded: its sentences are simply encoded
again. A part that is not a regular file (a FIFO, a device, a folder) or whose header does not
describe the store's vectors is discarded the same way; a ``meta.json`` of another key, or whose
width is out of bounds or not the width the key's vectors have, discards the store. Parts are
appended as encoding proceeds, so an interrupted run keeps everything finished before the
interrupt, and two runs writing the same store at once only ever add whole files. Parts are read
in name order and the first part holding a sentence wins; a part that repeats sentences of earlier
parts (two runs encoding one window at once) is rewritten without them, so the store never keeps
two rows for one sentence. Parts are plain ``.npy`` of a structured dtype, read with
``allow_pickle=False`` and memory-mapped. :class:`PartStore` is all of this but the file format,
which the sparse store (:mod:`harness.core.sparse_store`) shares.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import shutil
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from harness.core import authenticity
from harness.core.errors import UserError
from harness.core.hashing import (
    atomic_write_bytes,
    atomic_write_text,
    key_hash,
    npy_bytes,
    read_json,
    read_regular,
    text_digest,
)

CACHE_SCHEMA = 2  # 2: equal-length batches (vectors no longer depend on batch-mates)
MAX_DIM = 1 << 24  # beyond any vocabulary or hidden size: a meta.json saying more is damaged
log = logging.getLogger("sts_bench.cache")


def read_meta(folder: Path, key: Mapping[str, Any]) -> int | None:
    """The vector width a store folder's ``meta.json`` records, if it was written for ``key``;
    None when there is none yet, and when it is damaged, another key's or its width out of bounds
    (the folder is then discarded with one warning: its sentences are encoded again)."""
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        return None
    try:
        meta = read_json(meta_path, StoreMeta, "discarded")
        ok = meta["key"] == json.loads(json.dumps(key)) and 0 < meta["dim"] <= MAX_DIM
    except UserError:
        ok = False
    if not ok:
        discard(folder, f"{meta_path} does not match its key (damaged or foreign)")
        return None
    return int(meta["dim"])


class StoreMeta(TypedDict):  # a store folder's meta.json: the key of its vectors, their width
    key: dict[str, Any]
    dim: int


def discard(folder: Path, why: str) -> None:
    log.warning("cache: %s; discarding it, its sentences will be encoded again", why)
    shutil.rmtree(folder, ignore_errors=True)


class PartStore:
    """What the dense and the sparse store share: parts named by their bytes' digest (or the
    secret's tag) and checked against it, ``meta.json``, the index, repeats, damage. A subclass
    says how a part's bytes hold ``(keys, vectors)``: :meth:`_decode`, :meth:`_encode`,
    :meth:`_take`, :meth:`_width`."""

    folder, schema, suffix = "vectors", CACHE_SCHEMA, ".npy"

    def __init__(self, root: Path, key: Mapping[str, Any], secret: bytes | None = None) -> None:
        self.key = {"schema": self.schema, **key}
        self.secret = secret
        self.dir = Path(root) / self.folder / key_hash(self.key)
        self.dim: int | None = None
        self._index: dict[bytes, tuple[int, int]] | None = None
        self._parts: list[Any] = []
        self._part_files: list[str] = []  # the file each of _parts was read from (for error lines)

    def _decode(self, path: Path, data: bytes) -> tuple[np.ndarray, Any]:
        raise NotImplementedError

    def _encode(self, keys: np.ndarray, part: Any) -> bytes:
        raise NotImplementedError

    def _take(self, part: Any, rows: Sequence[int]) -> Any:
        return part[np.asarray(rows, dtype=np.intp)]

    def _width(self, vectors: Any) -> int:
        raise NotImplementedError

    def _reopen(self, name: str, part: Any) -> Any:
        return part

    def get(self, texts: Sequence[str]) -> Any:
        raise NotImplementedError

    # -- reading -------------------------------------------------------------------------------
    def _load(self) -> dict[bytes, tuple[int, int]]:
        if self._index is not None:
            return self._index
        self._index, self._parts, self._part_files = {}, [], []
        self.dim = read_meta(self.dir, self.key)
        if self.dim is None:
            return self._index
        for path in sorted(self.dir.glob(f"part-*{self.suffix}")):  # the first holding a text wins
            opened = self._open_part(path)
            if opened is None:
                continue
            keys, part = opened
            fresh: dict[bytes, int] = {}
            for row, digest in enumerate(keys):
                if digest.tobytes() not in self._index:
                    fresh.setdefault(digest.tobytes(), row)
            if len(fresh) == len(keys):
                self._append(path.name, keys, part)
                continue
            log.info("cache: %s repeats sentences of earlier parts; keeping %d", path, len(fresh))
            if fresh:  # rewritten without the repeats: one row per sentence in the store
                rows = list(fresh.values())
                self._write(keys[rows], self._take(part, rows))
            path.unlink(missing_ok=True)
        return self._index

    def _open_part(self, path: Path) -> tuple[np.ndarray, Any] | None:
        """The sentence digests and vectors of one part, or None: a part the cache secret does not
        authenticate is left in place (it may be another user's), one that is not a regular file,
        not what its name says or not vectors of the store's width is removed with a warning."""
        try:
            data = read_regular(path)
            if not hmac.compare_digest(self._name_digest(data), path.stem.removeprefix("part-")):
                if self.secret:
                    log.warning(
                        "cache: %s is not authenticated by $%s (written without the secret, or by "
                        "someone else); ignoring it, its sentences will be encoded again",
                        path,
                        authenticity.SECRET_ENV,
                    )
                    return None
                raise ValueError("checksum mismatch")
            keys, part = self._decode(path, data)
            if keys.dtype != np.uint8 or keys.shape != (self._rows(part), 32):
                raise ValueError(f"keys are {keys.dtype} {keys.shape}, not uint8 (rows, 32)")
            return keys, part
        except (OSError, ValueError, zipfile.BadZipFile) as err:
            if isinstance(err, FileNotFoundError) and not os.path.islink(path):
                return None  # removed by a concurrent writer between listing and opening
            log.warning(
                "cache: %s is corrupt (%s); discarding it, its sentences will be encoded again",
                path,
                err,
            )
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            return None

    @staticmethod
    def _rows(part: Any) -> int:
        return len(part)

    def _name_digest(self, data: bytes) -> str:
        return (
            authenticity.tag(self.secret, data) if self.secret else hashlib.sha256(data).hexdigest()
        )[:32]

    def __len__(self) -> int:
        return len(self._load())

    def refresh(self) -> None:
        """Forget the in-memory index: the next read sees parts written by other processes."""
        self._index, self._parts, self._part_files = None, [], []

    def missing(self, texts: Sequence[str]) -> list[str]:
        """The texts with no row yet, in input order, without repeats."""
        index = self._load()
        return [t for t in dict.fromkeys(texts) if text_digest(t) not in index]

    def _locate(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The part number and row of each of ``texts``; every text must be present."""
        index = self._load()
        if self.dim is None:
            raise KeyError("the store is empty")
        locations = []
        for text in texts:
            location = index.get(text_digest(text))
            if location is None:
                raise KeyError(f"not cached: {text[:60]!r}")
            locations.append(location)
        found = np.array(locations, dtype=np.int64).reshape(-1, 2)
        return found[:, 0], found[:, 1]

    def part_file(self, text: str) -> Path | None:
        """The part file holding ``text``'s vector (None: not cached)."""
        location = self._load().get(text_digest(text))
        return None if location is None else self.dir / self._part_files[location[0]]

    def check(self, texts: Sequence[str], again: Any, what: str) -> None:
        """``--verify-cache``: raise :class:`ResourceError` (one line naming a part) unless the
        cached vectors of ``texts`` are ``again``, a fresh encode of them, within a GPU's
        tolerance (an honest cache matches to the last bit on the CPU): a part planted with its
        own checksum passes every other check."""
        from harness.core.errors import ResourceError

        cached, again = self._dense(self.get(texts)), self._dense(again)
        bad = ~np.isclose(cached, again, rtol=1e-3, atol=1e-4).all(axis=1)
        if bad.any():
            raise ResourceError(
                f"cache: {int(bad.sum())} of {len(texts)} sampled cached vectors of {what} do not "
                f"match a fresh encode of their sentences (max |Δ| "
                f"{float(np.abs(cached - again).max()):.3g}), e.g. in "
                f"{self.part_file(texts[int(np.argmax(bad))])}: the cache was altered or written "
                f"by other code; remove {self.dir} (or use another --cache-dir, or set "
                f"${authenticity.SECRET_ENV})"
            )
        log.info("cache: %d cached vector(s) of %s match a fresh encode", len(texts), what)

    @staticmethod
    def _dense(vectors: Any) -> np.ndarray:
        return np.asarray(vectors)

    # -- writing -------------------------------------------------------------------------------
    def add(self, texts: Sequence[str], vectors: Any) -> None:
        """Append the vectors of ``texts`` (those already present are skipped) as one new part."""
        width = self._width(vectors)
        if self._rows(vectors) != len(texts):
            raise ValueError(f"{self._rows(vectors)} vectors for {len(texts)} texts")
        index = self._load()
        if self.dim is not None and width != self.dim:  # the key's vectors are `width` wide
            discard(self.dir, f"{self.dir / 'meta.json'} says {self.dim} wide, not {width}")
            self.refresh()
            index = self._load()
        if self.dim is None:
            self.dim = width
            meta = {"schema": self.schema, "key": self.key, "dim": self.dim}
            atomic_write_text(self.dir / "meta.json", json.dumps(meta, indent=1, sort_keys=True))
        fresh: dict[bytes, int] = {}
        for i, text in enumerate(texts):
            digest = text_digest(text)
            if digest not in index and digest not in fresh:
                fresh[digest] = i
        if fresh:
            keys = np.frombuffer(b"".join(fresh), dtype=np.uint8).reshape(-1, 32)
            self._write(keys, self._take(vectors, list(fresh.values())))

    def _write(self, keys: np.ndarray, part: Any) -> None:
        """Write a part atomically, named by its bytes' digest (or tag), and index it."""
        data = self._encode(keys, part)
        name = f"part-{self._name_digest(data)}{self.suffix}"
        atomic_write_bytes(self.dir / name, data)
        self._append(name, keys, self._reopen(name, part))

    def _append(self, name: str, keys: np.ndarray, part: Any) -> None:
        assert self._index is not None
        number = len(self._parts)
        self._parts.append(part)
        self._part_files.append(name)
        for row, digest in enumerate(keys):
            self._index[digest.tobytes()] = (number, row)


def _row_dtype(dim: int) -> np.dtype:
    # The key is 32 raw bytes as uint8, not "S32": numpy strips trailing NUL bytes from S-strings,
    # which would corrupt the 1 in 256 digests that end in 0x00.
    return np.dtype([("key", "u1", (32,)), ("vec", "<f4", (dim,))])


class VectorStore(PartStore):
    """Dense vectors for one cache key. ``key`` must hold everything that changes the vectors.

    >>> store = VectorStore(Path(tmp), {"model": "x", "pooling": "mean"})   # doctest: +SKIP
    >>> store.add(["a b"], np.ones((1, 4), np.float32))                     # doctest: +SKIP
    >>> store.missing(["a b", "c"])                                         # doctest: +SKIP
    ['c']
    """

    def _decode(self, path: Path, data: bytes) -> tuple[np.ndarray, Any]:
        # memory-mapped (a mapping past the file's end is refused): a long encode job's memory
        # must not grow with the number of sentences it has stored
        part = np.load(path, mmap_mode="r", allow_pickle=False)
        if part.dtype != _row_dtype(self.dim or 0):
            raise ValueError(f"unexpected dtype {part.dtype}")
        return part["key"], part["vec"]

    def _encode(self, keys: np.ndarray, part: Any) -> bytes:
        rows = np.empty(len(keys), dtype=_row_dtype(self.dim or 0))
        rows["key"], rows["vec"] = keys, part
        return npy_bytes(rows)

    def _reopen(self, name: str, part: Any) -> Any:
        return np.load(self.dir / name, mmap_mode="r", allow_pickle=False)["vec"]

    def _width(self, vectors: Any) -> int:
        if np.ndim(vectors) != 2:
            raise ValueError(f"expected (n, dim) vectors, got {np.shape(vectors)}")
        return int(np.shape(vectors)[1])

    def get(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts`` as a fresh float32 (n, dim) array; every text must be present."""
        parts, rows = self._locate(texts)
        out = np.empty((len(texts), self.dim or 0), dtype=np.float32)
        for number in np.unique(parts):
            mask = parts == number
            out[mask] = self._parts[number][rows[mask]]
        return out

    def add(self, texts: Sequence[str], vectors: Any) -> None:
        super().add(texts, np.asarray(vectors, dtype=np.float32))
