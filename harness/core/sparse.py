"""Sparse vectors (SPLADE's: one dimension per vocabulary entry, nearly all zero), numpy only.

A :class:`SparseVectors` is a CSR matrix: row ``i`` holds ``values[indptr[i]:indptr[i+1]]`` at the
dimensions ``indices[indptr[i]:indptr[i+1]]``, strictly increasing, every value stored non-zero.
Nothing here densifies: pairs are scored by :func:`pair_similarity` a bounded number of stored
values at a time, so a million pairs of 30,522-dimensional vectors cost what their active
dimensions cost.

The costs a sparse vector is reported with (``record["vector"]``, ``scores.csv``, the frontier):

- **active dimensions** (:func:`active_dims`): the mean number of non-zero dimensions of the
  vectors of both sentences of every pair, as sentence-transformers'
  ``SparseEmbeddingSimilarityEvaluator`` reports ``active_dims``;
- **FLOPS** (:func:`flops`): SPLADE's measure (Paria et al. 2020; naver/splade ``flops.py``), the
  expected number of multiplications of a dot product between a first sentence and a second
  sentence drawn at random, ``Σ_j p1_j · p2_j``, where ``p1_j`` is the fraction of first
  sentences whose vector is active at dimension ``j`` (``p2_j`` of second sentences);
- **bytes per vector** (:func:`sparse_bytes`): the mean storage of a vector as (int32 index,
  float32 value) pairs, 8 bytes per active dimension, rounded to a whole byte.

Worked example. Two pairs: ``a = (1, 0, 2)`` with ``b = (0, 3, 1)``, and ``a`` again with
``c = (0, 0, 0)``. The dot products are ``1·0 + 0·3 + 2·1 = 2`` and ``0``. The four sentences have
2, 2, 2 and 0 active dimensions: 1.5 on average, 12 bytes. Dimension 0 is active in both first
sentences (``p1_0 = 1``) and no second (``p2_0 = 0``); dimension 1 in no first; dimension 2 in
both first sentences and one second (``p1_2 = 1``, ``p2_2 = 1/2``): FLOPS ``= 1 · 1/2 = 0.5``.

>>> left = SparseVectors.from_dense(np.array([[1, 0, 2]], dtype=np.float32))
>>> right = SparseVectors.from_dense(np.array([[0, 3, 1], [0, 0, 0]], dtype=np.float32))
>>> pairs = (left, np.array([0, 0]), right, np.array([0, 1]))
>>> pair_similarity(*pairs, "dot")
(array([2., 0.]), 0)
>>> float(active_dims(*pairs)), float(flops(*pairs)), sparse_bytes(active_dims(*pairs))
(1.5, 0.5, 12)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SPARSE = "sparse"  # record["vector"]["precision"] of a sparse vector (never asked by --precision)
SIMILARITIES = ("dot", "cosine")  # a sparse vector's own: dot (SPLADE's), or cosine if asked
BYTES_PER_ACTIVE = 8  # an int32 index and a float32 value
# Stored values gathered at once by pair_similarity: 2^22 of both sides' rows, ~100 MiB of keys,
# products and positions, whatever the number of pairs or dimensions.
VALUE_CHUNK = 1 << 22


@dataclass(frozen=True)
class SparseVectors:
    """``n`` vectors of ``dim`` dimensions in CSR form (see the module's docstring); build with
    :meth:`from_dense` or :meth:`from_arrays`, which check what they are given."""

    indptr: np.ndarray  # int64 (n + 1,), from 0 to len(indices)
    indices: np.ndarray  # int32 (nnz,), strictly increasing within each row, in [0, dim)
    values: np.ndarray  # float32 (nnz,), finite, non-zero
    dim: int

    @classmethod
    def from_arrays(
        cls, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, dim: int
    ) -> SparseVectors:
        """The vectors of these arrays, or a ``ValueError`` saying why they are not CSR vectors
        (:meth:`problem`): what is read back from a cache goes through here."""
        vectors = cls(np.asarray(indptr), np.asarray(indices), np.asarray(values), int(dim))
        problem = vectors.problem()
        if problem is not None:
            raise ValueError(problem)
        return vectors

    @classmethod
    def from_dense(cls, dense: np.ndarray) -> SparseVectors:
        """The non-zero entries of a float (n, d) array, row by row."""
        dense = np.asarray(dense, dtype=np.float32)
        if dense.ndim != 2:
            raise ValueError(f"from_dense() takes an (n, d) array, not {dense.shape}")
        rows, cols = np.nonzero(dense)
        indptr = np.zeros(len(dense) + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=len(dense)), out=indptr[1:])
        return cls.from_arrays(indptr, cols.astype(np.int32), dense[rows, cols], dense.shape[1])

    @classmethod
    def empty(cls, dim: int) -> SparseVectors:
        return cls.from_arrays(
            np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32), dim
        )

    @classmethod
    def concat(cls, parts: Sequence[SparseVectors]) -> SparseVectors:
        """The rows of ``parts`` one after the other (they share ``dim``)."""
        if not parts:
            raise ValueError("concat() needs at least one part")
        dims = {part.dim for part in parts}
        if len(dims) != 1:
            raise ValueError(f"concat() of vectors of {sorted(dims)} dimensions")
        offsets = np.cumsum([0, *(len(part.indices) for part in parts)])
        indptr = np.concatenate(
            [np.zeros(1, np.int64)]
            + [part.indptr[1:] + offset for part, offset in zip(parts, offsets)]
        )
        return cls(
            indptr,
            np.concatenate([part.indices for part in parts]),
            np.concatenate([part.values for part in parts]),
            dims.pop(),
        )

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def active(self) -> np.ndarray:
        """The number of non-zero dimensions of each vector (int64, (n,))."""
        return np.diff(self.indptr)

    def row_ids(self) -> np.ndarray:
        """The row of every stored value (intp, (nnz,))."""
        return np.repeat(np.arange(len(self)), self.active())

    def take(self, rows: np.ndarray) -> SparseVectors:
        """The vectors ``rows`` (any order, repeats allowed), as a new CSR matrix.

        >>> v = SparseVectors.from_dense(np.array([[1, 0], [0, 2]], dtype=np.float32))
        >>> v.take(np.array([1, 1, 0])).to_dense()
        array([[0., 2.],
               [0., 2.],
               [1., 0.]], dtype=float32)
        """
        rows = np.asarray(rows, dtype=np.intp)
        starts, lengths = self.indptr[rows], self.active()[rows]
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        # each stored value's position in self: its row's start plus its rank within the row
        positions = np.arange(indptr[-1]) + np.repeat(starts - indptr[:-1], lengths)
        return SparseVectors(indptr, self.indices[positions], self.values[positions], self.dim)

    def to_dense(self) -> np.ndarray:
        """float32 (n, dim): for tests and small checks only (30,522 columns a row)."""
        out = np.zeros((len(self), self.dim), dtype=np.float32)
        out[self.row_ids(), self.indices] = self.values
        return out

    def problem(self) -> str | None:
        """Why these arrays are not CSR vectors as this module stores them (None: they are)."""
        indptr, indices, values = self.indptr, self.indices, self.values
        if self.dim < 1:
            return f"{self.dim} dimensions"
        if indptr.dtype != np.int64 or indices.dtype != np.int32 or values.dtype != np.float32:
            return (
                f"dtypes {indptr.dtype}, {indices.dtype}, {values.dtype}, not int64, int32, float32"
            )
        if indptr.ndim != 1 or indices.ndim != 1 or values.ndim != 1 or len(indptr) < 1:
            return "indptr, indices and values are not 1-dimensional"
        if indptr[0] != 0 or indptr[-1] != len(indices) or len(values) != len(indices):
            return "indptr does not run from 0 to the number of stored values"
        if np.any(np.diff(indptr) < 0):
            return "indptr decreases"
        if len(indices) and (indices.min() < 0 or indices.max() >= self.dim):
            return f"an index lies outside 0..{self.dim - 1}"
        steps = np.diff(indices.astype(np.int64))
        starts = indptr[1:-1]  # a new row may begin lower than where the last one ended
        inside = np.ones(len(steps), dtype=bool)
        inside[starts[(starts > 0) & (starts < len(indices))] - 1] = False
        if np.any(steps[inside] <= 0):
            return "the indices of a row are not strictly increasing"
        if not np.all(np.isfinite(values)) or np.any(values == 0):
            return "a stored value is zero, NaN or infinite"
        return None


def _chunks(weights: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Consecutive (start, stop) ranges whose ``weights`` sum to at most ``budget`` (a range of
    one item may exceed it), covering every item.

    >>> _chunks(np.array([3, 3, 5, 1, 1]), 6)
    [(0, 2), (2, 4), (4, 5)]
    """
    out, start, n = [], 0, len(weights)
    total = np.cumsum(weights)
    while start < n:
        before = total[start - 1] if start else 0
        stop = int(np.searchsorted(total, before + budget, side="right"))
        stop = max(stop, start + 1)
        out.append((start, stop))
        start = stop
    return out


def pair_similarity(
    left: SparseVectors,
    left_rows: np.ndarray,
    right: SparseVectors,
    right_rows: np.ndarray,
    similarity: str,
    chunk: int = VALUE_CHUNK,
) -> tuple[np.ndarray, int]:
    """The similarity (float64) of each pair ``(left[left_rows[i]], right[right_rows[i]])``, and
    how many pairs had no defined value: ``dot`` (``Σ_j a_j b_j`` over the dimensions active in
    both, 0 for a pair without one) or ``cosine`` (the dot over both norms; a pair with a zero
    vector scores 0 and is counted, as :func:`harness.core.scoring.cosine_rows`).

    Pairs are gathered so that at most ``chunk`` stored values of both sides are in memory at
    once. Each pair's sum runs over its common dimensions in increasing order whatever ``chunk``,
    so the values are the same bit for bit.
    """
    if similarity not in SIMILARITIES:
        raise ValueError(f"sparse vectors are compared by {' or '.join(SIMILARITIES)}")
    left_rows, right_rows = np.asarray(left_rows, np.intp), np.asarray(right_rows, np.intp)
    if len(left_rows) != len(right_rows) or left.dim != right.dim:
        raise ValueError(
            f"{len(left_rows)} left rows of {left.dim} dimensions and {len(right_rows)} right "
            f"rows of {right.dim}: not pairs"
        )
    out = np.zeros(len(left_rows), dtype=np.float64)
    weights = left.active()[left_rows] + right.active()[right_rows]
    for start, stop in _chunks(weights, chunk):
        a, b = left.take(left_rows[start:stop]), right.take(right_rows[start:stop])
        # one key per stored value, (pair, dimension), increasing: the common keys are the
        # dimensions active on both sides of a pair
        key_a = a.row_ids().astype(np.int64) * a.dim + a.indices
        key_b = b.row_ids().astype(np.int64) * b.dim + b.indices
        _, at_a, at_b = np.intersect1d(key_a, key_b, assume_unique=True, return_indices=True)
        products = a.values[at_a].astype(np.float64) * b.values[at_b].astype(np.float64)
        out[start:stop] = np.bincount(key_a[at_a] // a.dim, products, minlength=stop - start)
    if similarity == "dot":
        return out, 0
    norms = [_norms(left)[left_rows], _norms(right)[right_rows]]
    zero = (norms[0] == 0) | (norms[1] == 0)
    out[~zero] /= norms[0][~zero] * norms[1][~zero]
    out[zero] = 0.0
    return out, int(zero.sum())


def _norms(vectors: SparseVectors) -> np.ndarray:
    squares = vectors.values.astype(np.float64) ** 2
    return np.sqrt(np.bincount(vectors.row_ids(), squares, minlength=len(vectors)))


def active_dims(
    left: SparseVectors, left_rows: np.ndarray, right: SparseVectors, right_rows: np.ndarray
) -> float:
    """The mean number of active dimensions over both sentences of every pair (a sentence in
    several pairs counts once per pair, as the evaluator encodes the pairs' sentences)."""
    n = len(left_rows) + len(right_rows)
    if n == 0:
        return 0.0
    total = left.active()[left_rows].sum() + right.active()[right_rows].sum()
    return float(total / n)


def activation_rate(vectors: SparseVectors, rows: np.ndarray) -> np.ndarray:
    """Per dimension, the fraction of ``vectors[rows]`` (repeats counted) active there (float64,
    (dim,)); zeros without rows."""
    if len(rows) == 0:
        return np.zeros(vectors.dim)
    times = np.bincount(np.asarray(rows, np.intp), minlength=len(vectors))  # uses of each row
    counts = np.bincount(
        vectors.indices, np.repeat(times, vectors.active()).astype(np.float64), vectors.dim
    )
    return counts / len(rows)


def flops(
    left: SparseVectors, left_rows: np.ndarray, right: SparseVectors, right_rows: np.ndarray
) -> float:
    """SPLADE's FLOPS of the pairs: ``Σ_j p1_j · p2_j`` (:func:`activation_rate` of each side)."""
    return float(activation_rate(left, left_rows) @ activation_rate(right, right_rows))


def sparse_bytes(mean_active: float) -> int:
    """Mean bytes of a sparse vector stored as (int32 index, float32 value) pairs, rounded half
    up: ``sparse_bytes(76.3) == 610``."""
    return int(np.floor(BYTES_PER_ACTIVE * mean_active + 0.5))


def describe(
    left: SparseVectors,
    left_rows: np.ndarray,
    right: SparseVectors,
    right_rows: np.ndarray,
    similarity: str,
) -> dict[str, object]:
    """``record["vector"]`` of sparse vectors compared by ``similarity``: every dimension kept
    (``dims`` full, ``full_dims`` the vocabulary), precision ``sparse``, the bytes, the active
    dimensions and the FLOPS of the scored pairs."""
    mean_active = active_dims(left, left_rows, right, right_rows)
    return {
        "dims": "full",
        "full_dims": int(left.dim),
        "precision": SPARSE,
        "similarity": similarity,
        "bytes_per_vector": sparse_bytes(mean_active),
        "active_dims": mean_active,
        "flops": flops(left, left_rows, right, right_rows),
    }
