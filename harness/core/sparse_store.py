"""A content-addressed store of sparse sentence vectors (:mod:`harness.core.sparse`): the rules of
the dense :class:`~harness.core.vector_store.VectorStore` in a CSR file format.

Layout of one store (``<cache>/sparse-vectors/<key hash>/``)::

    meta.json                 {"schema": 1, "key": {...the full key, in plain text...}, "dim": V}
    part-<sha256 prefix>.npz  keys (n, 32) uint8: sha256 of each sentence;
                              indptr (n + 1,) int64, indices int32, values float32: its vectors

Each part is written once, atomically, and named by the sha256 of its bytes (the HMAC under a
cache secret). On open a part is checked before any row is used: its name against its bytes, the
archive read with ``allow_pickle=False`` (an object array is refused), exactly those four arrays,
and the CSR arrays are vectors of ``dim`` dimensions
(:meth:`~harness.core.sparse.SparseVectors.from_arrays`: dtypes, bounds, increasing indices,
non-zero finite values). A part that fails is reported with a warning and removed, and its
sentences are encoded again; a ``meta.json`` whose key is not the store's discards the store. The
first part holding a sentence wins.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import logging
import shutil
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.core import authenticity
from harness.core.hashing import (
    atomic_write_bytes,
    atomic_write_text,
    key_hash,
    read_regular,
    text_digest,
)
from harness.core.sparse import SparseVectors
from harness.core.vector_store import read_meta

SPARSE_CACHE_SCHEMA = 1
ARRAYS = ("keys", "indptr", "indices", "values")
log = logging.getLogger("sts_bench.cache")


class SparseVectorStore:
    """Sparse vectors for one cache key, which must hold everything that changes them.

    >>> store = SparseVectorStore(Path(tmp), {"model": "x"})          # doctest: +SKIP
    >>> store.add(["a b"], SparseVectors.from_dense(np.eye(1, 9)))     # doctest: +SKIP
    >>> store.missing(["a b", "c"])                                    # doctest: +SKIP
    ['c']
    """

    def __init__(self, root: Path, key: Mapping[str, Any], secret: bytes | None = None) -> None:
        self.key = {"schema": SPARSE_CACHE_SCHEMA, **key}
        self.secret = secret
        self.dir = Path(root) / "sparse-vectors" / key_hash(self.key)
        self.dim: int | None = None
        self._index: dict[bytes, tuple[int, int]] | None = None
        self._parts: list[SparseVectors] = []

    # -- reading -------------------------------------------------------------------------------
    def _load(self) -> dict[bytes, tuple[int, int]]:
        if self._index is not None:
            return self._index
        self._index, self._parts = {}, []
        dim = read_meta(self.dir, self.key)
        if dim is None:
            return self._index
        self.dim = dim
        for path in sorted(self.dir.glob("part-*.npz")):  # by name: the first holding a text wins
            opened = self._open_part(path)
            if opened is None:
                continue
            digests, vectors = opened
            number = len(self._parts)
            self._parts.append(vectors)
            for row, digest in enumerate(digests):
                self._index.setdefault(digest, (number, row))
        return self._index

    def _open_part(self, path: Path) -> tuple[list[bytes], SparseVectors] | None:
        """The sentence digests and vectors of one part, or None (with a warning; the part
        removed) when it is not what its name and the store's dimensions say."""
        try:
            data = read_regular(path)
            expected = path.stem.removeprefix("part-")
            if not hmac.compare_digest(self._name_digest(data), expected):
                if self.secret:
                    log.warning(
                        "cache: %s is not authenticated by $%s; ignoring it, its sentences will "
                        "be encoded again",
                        path,
                        authenticity.SECRET_ENV,
                    )
                    return None  # left in place: it may be another user's
                raise ValueError("checksum mismatch")
            with np.load(io.BytesIO(data), allow_pickle=False) as archive:
                if sorted(archive.files) != sorted(ARRAYS):
                    raise ValueError(f"holds {sorted(archive.files)}, not {sorted(ARRAYS)}")
                arrays = {name: archive[name] for name in ARRAYS}
            keys = arrays["keys"]
            if keys.dtype != np.uint8 or keys.ndim != 2 or keys.shape[1] != 32:
                raise ValueError(f"keys are {keys.dtype} {keys.shape}, not uint8 (n, 32)")
            vectors = SparseVectors.from_arrays(
                arrays["indptr"], arrays["indices"], arrays["values"], self.dim or 0
            )
            if len(vectors) != len(keys):
                raise ValueError(f"{len(keys)} keys for {len(vectors)} vectors")
        except FileNotFoundError:
            return None  # removed by a concurrent writer between listing and opening
        except (OSError, ValueError, zipfile.BadZipFile) as err:
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
        return [row.tobytes() for row in keys], vectors

    def _name_digest(self, data: bytes) -> str:
        return (
            authenticity.tag(self.secret, data) if self.secret else hashlib.sha256(data).hexdigest()
        )[:32]

    def __len__(self) -> int:
        return len(self._load())

    def refresh(self) -> None:
        """Forget the in-memory index: the next read sees parts written by other processes."""
        self._index, self._parts = None, []

    def missing(self, texts: Sequence[str]) -> list[str]:
        """The texts with no row yet, in input order, without repeats."""
        index = self._load()
        return [t for t in dict.fromkeys(texts) if text_digest(t) not in index]

    def get(self, texts: Sequence[str]) -> SparseVectors:
        """The vectors of ``texts``, in order; every text must be present."""
        index = self._load()
        if self.dim is None:
            raise KeyError("the store is empty")
        locations = []
        for text in texts:
            location = index.get(text_digest(text))
            if location is None:
                raise KeyError(f"not cached: {text[:60]!r}")
            locations.append(location)
        if not texts:
            return SparseVectors.empty(self.dim)
        parts = np.array([loc[0] for loc in locations])
        rows = np.array([loc[1] for loc in locations])
        numbers = np.unique(parts)
        # each part's rows taken at once, then put back in the order asked
        taken = SparseVectors.concat([self._parts[n].take(rows[parts == n]) for n in numbers])
        order = np.concatenate([np.flatnonzero(parts == n) for n in numbers])
        inverse = np.empty(len(order), dtype=np.intp)
        inverse[order] = np.arange(len(order))
        return taken.take(inverse)

    # -- writing -------------------------------------------------------------------------------
    def add(self, texts: Sequence[str], vectors: SparseVectors) -> None:
        """Append the vectors of ``texts`` (those already present are skipped) as one new part."""
        if len(vectors) != len(texts):
            raise ValueError(f"{len(vectors)} vectors for {len(texts)} texts")
        problem = vectors.problem()
        if problem is not None:
            raise ValueError(f"not sparse vectors: {problem}")
        index = self._load()
        if self.dim is None:
            self.dim = vectors.dim
            meta = {"schema": SPARSE_CACHE_SCHEMA, "key": self.key, "dim": self.dim}
            atomic_write_text(self.dir / "meta.json", json.dumps(meta, indent=1, sort_keys=True))
        elif vectors.dim != self.dim:
            raise ValueError(f"store holds dim {self.dim}, got {vectors.dim}")
        fresh: dict[bytes, int] = {}
        for i, text in enumerate(texts):
            digest = text_digest(text)
            if digest not in index and digest not in fresh:
                fresh[digest] = i
        if not fresh:
            return
        kept = vectors.take(np.fromiter(fresh.values(), dtype=np.intp, count=len(fresh)))
        buffer = io.BytesIO()
        np.savez(
            buffer,
            keys=np.frombuffer(b"".join(fresh), dtype=np.uint8).reshape(-1, 32),
            indptr=kept.indptr,
            indices=kept.indices,
            values=kept.values,
        )
        data = buffer.getvalue()
        atomic_write_bytes(self.dir / f"part-{self._name_digest(data)}.npz", data)
        number = len(self._parts)
        self._parts.append(kept)
        for row, digest in enumerate(fresh):
            index[digest] = (number, row)
