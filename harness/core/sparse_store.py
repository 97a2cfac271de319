"""A content-addressed store of sparse sentence vectors (:mod:`harness.core.sparse`): the dense
:class:`~harness.core.vector_store.VectorStore`'s rules and code (:class:`PartStore`: names
checked, the cache secret's tag, damage, repeats) in a CSR file format.

Layout of one store (``<cache>/sparse-vectors/<key hash>/``)::

    meta.json                 {"schema": 1, "key": {...the full key, in plain text...}, "dim": V}
    part-<sha256 prefix>.npz  keys (n, 32) uint8: sha256 of each sentence;
                              indptr (n + 1,) int64, indices int32, values float32: its vectors

A part is an uncompressed archive of exactly those four arrays, each read with no pickle and its
header held to the bytes that follow before anything is allocated
(:func:`~harness.core.hashing.npy_array`); its CSR arrays must be vectors of ``dim`` dimensions
(:meth:`~harness.core.sparse.SparseVectors.from_arrays`: dtypes, bounds, increasing indices,
non-zero finite values). A part that fails is reported with a warning and removed, and its
sentences are encoded again.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.hashing import npy_array
from harness.core.sparse import SparseVectors
from harness.core.vector_store import PartStore

SPARSE_CACHE_SCHEMA = 1
ARRAYS = ("keys", "indptr", "indices", "values")


class SparseVectorStore(PartStore):
    """Sparse vectors for one cache key, which must hold everything that changes them.

    >>> store = SparseVectorStore(Path(tmp), {"model": "x"})          # doctest: +SKIP
    >>> store.add(["a b"], SparseVectors.from_dense(np.eye(1, 9)))     # doctest: +SKIP
    >>> store.missing(["a b", "c"])                                    # doctest: +SKIP
    ['c']
    """

    folder, schema, suffix = "sparse-vectors", SPARSE_CACHE_SCHEMA, ".npz"

    def _decode(self, path: Path, data: bytes) -> tuple[np.ndarray, Any]:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = sorted(info.filename for info in archive.infolist())
            if names != sorted(f"{name}.npy" for name in ARRAYS):
                raise ValueError(f"holds {names}, not {sorted(ARRAYS)}")
            if any(info.compress_type != zipfile.ZIP_STORED for info in archive.infolist()):
                raise ValueError("compressed (np.savez writes none): not read")
            arrays = {name: npy_array(archive.read(f"{name}.npy")) for name in ARRAYS}
        vectors = SparseVectors.from_arrays(
            arrays["indptr"], arrays["indices"], arrays["values"], self.dim or 0
        )
        return arrays["keys"], vectors

    def _encode(self, keys: np.ndarray, part: Any) -> bytes:
        buffer = io.BytesIO()
        np.savez(buffer, keys=keys, indptr=part.indptr, indices=part.indices, values=part.values)
        return buffer.getvalue()

    def _take(self, part: Any, rows: Sequence[int]) -> Any:
        return part.take(np.asarray(rows, dtype=np.intp))

    def _width(self, vectors: Any) -> int:
        problem = vectors.problem()
        if problem is not None:
            raise ValueError(f"not sparse vectors: {problem}")
        return int(vectors.dim)

    @staticmethod
    def _dense(vectors: Any) -> np.ndarray:
        return np.asarray(vectors.to_dense())

    def get(self, texts: Sequence[str]) -> SparseVectors:
        """The vectors of ``texts``, in order; every text must be present."""
        parts, rows = self._locate(texts)
        if not texts:
            return SparseVectors.empty(self.dim or 0)
        numbers = np.unique(parts)
        # each part's rows taken at once, then put back in the order asked
        taken = SparseVectors.concat([self._parts[n].take(rows[parts == n]) for n in numbers])
        order = np.concatenate([np.flatnonzero(parts == n) for n in numbers])
        inverse = np.empty(len(order), dtype=np.intp)
        inverse[order] = np.arange(len(order))
        return taken.take(inverse)
