"""The sparse vectors of a split's pairs (a :class:`~harness.core.api.SparseEmbeddingMethod`'s):
each side's distinct sentences encoded once, kept sparse, and the pairs scored by
:func:`harness.core.sparse.pair_similarity`. A plugin's vectors and similarity are checked before
they are used, each wrong answer one ``PluginError`` line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from harness.core.compression import distinct_rows
from harness.core.errors import PluginError
from harness.core.sparse import SIMILARITIES, SparseVectors, pair_similarity
from methods.guests import is_guest, who

if TYPE_CHECKING:
    from harness.core.api import SparseEmbeddingMethod


@dataclass(frozen=True)
class SparsePairs:
    """Pair ``i`` is ``(left[left_rows[i]], right[right_rows[i]])``; ``left`` and ``right`` hold
    the distinct sentences of each side."""

    left: SparseVectors
    left_rows: np.ndarray
    right: SparseVectors
    right_rows: np.ndarray

    @classmethod
    def encode(
        cls, method: SparseEmbeddingMethod, s1: Sequence[str], s2: Sequence[str]
    ) -> SparsePairs:
        (u1, rows1), (u2, rows2) = distinct_rows(s1), distinct_rows(s2)
        kind = type(method)
        left, right = method.encode_sparse(u1), method.encode_sparse(u2)
        if is_guest(kind):
            for side, count in ((left, len(u1)), (right, len(u2))):
                checked(side, count, kind)
            if left.dim != right.dim:
                raise PluginError(
                    f"{who(kind)}: encode_sparse() returned {left.dim} dimensions for the first "
                    f"sentences and {right.dim} for the second; every vector must have the same"
                )
        return cls(left, rows1, right, rows2)

    @staticmethod
    def similarity_of(method: SparseEmbeddingMethod) -> str:
        """The method's ``sparse_similarity()``, a plugin's checked."""
        kind, how = type(method), method.sparse_similarity()
        if how not in SIMILARITIES:
            raise PluginError(
                f"{who(kind)}: sparse_similarity() returned {how!r}; sparse vectors are compared "
                f"by {' or '.join(SIMILARITIES)}"
            )
        return how

    def arrays(self) -> tuple[SparseVectors, np.ndarray, SparseVectors, np.ndarray]:
        return self.left, self.left_rows, self.right, self.right_rows

    def similarity(self, how: str) -> tuple[np.ndarray, int]:
        """Each pair's similarity, and how many pairs had none defined (cosine of a zero vector)."""
        return pair_similarity(*self.arrays(), how)


def checked(vectors: object, count: int, kind: type) -> SparseVectors:
    """A plugin's sparse vectors of ``count`` sentences, or one ``PluginError`` line."""
    named = who(kind)
    if not isinstance(vectors, SparseVectors):
        raise PluginError(
            f"{named}: encode_sparse() returned {type(vectors).__name__}; it must return "
            "SparseVectors (harness.method_api), one row per sentence"
        )
    problem = vectors.problem()
    if problem is None and len(vectors) != count:
        problem = f"{len(vectors)} vectors for {count} sentences"
    if problem is not None:
        raise PluginError(f"{named}: encode_sparse() returned unusable vectors: {problem}")
    return vectors
