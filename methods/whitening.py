"""BERT-whitening (Su et al. 2021): map pooled vectors to zero mean and identity covariance.

Fit on unlabeled sentences (the run's ``--fit-set``) and applied to a pooled view (default
first-last, the paper's setting). With ``k`` set, only the top-k principal directions are kept
(the paper's whitening-256), which also reduces the dimension.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from harness.core.api import MethodContext, MethodSpec, Option
from harness.core.errors import UserError
from harness.core.hashing import npy_bytes
from methods.pooling import BASE_VIEWS, PostProcessor

if TYPE_CHECKING:
    from harness.core.data.fitsets import FitSet

log = logging.getLogger("sts_bench.whitening")


def _optional_int(text: str) -> int | None:
    return None if text.lower() in ("", "none", "all") else int(text)


def whitening_transform(x: np.ndarray, k: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Return ``(mu, W, rank)`` such that ``(x - mu) @ W`` has zero mean and identity covariance.

    ``cov = U diag(S) U^T`` (the symmetric covariance's eigendecomposition, eigenvalues S largest
    first; the paper writes it as an SVD, which for a symmetric positive semi-definite matrix is the
    same factorisation), ``W = U diag(1/sqrt(S))``, so
    ``W^T cov W = diag(1/sqrt(S)) U^T U diag(S) U^T U diag(1/sqrt(S)) = I``.

    Worked example: x with columns of variance 4 and 1 and no correlation → S = (4, 1),
    U = I, W = diag(1/2, 1): each column divided by its standard deviation.

    Directions with (numerically) zero variance cannot be whitened — 1/sqrt(0) — and are dropped:
    with fewer sentences than dimensions only ``rank`` columns survive (a warning says so).

    The symmetric eigensolver (``eigh``) is used, not ``svd``: LAPACK's SVD of a finite rank-59
    covariance failed to converge with numpy 2.4.6 / OpenBLAS 0.3.31 on a Zen 5, while ``eigh`` of
    the same matrix did not. Eigenvectors' signs are arbitrary, and cosines do not see them: a
    flipped column flips that coordinate of every vector alike.
    """
    x64 = np.asarray(x, dtype=np.float64)
    # every row equal to the first (a comparison, not np.unique's sort of every row: 0.6 s)
    if len(x64) < 2 or not (x64 != x64[0]).any():
        raise UserError(
            f"whitening: the fit set's {len(x64)} vectors are all identical (too short a "
            "--max-length, or sentences that differ only in what the tokenizer drops, such as "
            "case); fitting needs at least 2 different vectors: use a larger --fit-set or "
            "--max-length"
        )
    mu = x64.mean(axis=0, keepdims=True)
    centered = x64 - mu
    cov = centered.T @ centered / (len(x64) - 1)
    s, u = np.linalg.eigh(cov)
    s, u = s[::-1], u[:, ::-1]  # largest first
    rank = int((s > s[0] * 1e-10).sum()) if s[0] > 0 else 0
    dim = x64.shape[1]
    if k is not None and k > dim:  # say which bound bit: the vectors' size, not the fit set
        log.warning(
            "whitening: k=%d exceeds the dimension %d of the vectors; keeping all %d (use --set "
            "whitening.k=N with N ≤ %d, or leave k unset for all)",
            k,
            dim,
            dim,
            dim,
        )
    wanted = dim if k is None else min(k, dim)
    keep = min(wanted, rank)
    if keep < wanted:
        log.warning(
            "whitening: covariance has rank %d of %d (fit set has %d sentences); keeping %d "
            "components (fit on more sentences than dimensions, e.g. a larger --fit-set, to keep "
            "them all; or --set whitening.k=N with N ≤ %d to say so)",
            rank,
            dim,
            len(x64),
            keep,
            rank,
        )
    w = u[:, :keep] / np.sqrt(s[:keep])
    return mu.astype(np.float32), w.astype(np.float32), rank


class Whitening(PostProcessor):
    name = "whitening"
    summary = (
        "BERT-whitening: (x - mu) U diag(1/sqrt(S)) fit on --fit-set, on a pooled view (Su et al. "
        "2021)"
    )
    post = "whitening"
    options = (
        Option("k", None, "keep the top-k whitened dimensions (default: all)", type=_optional_int),
        Option("view", "first-last", "pooled view to whiten", choices=BASE_VIEWS),
    )

    def __init__(self, spec: MethodSpec, ctx: MethodContext) -> None:
        super().__init__(spec, ctx)
        self._mu: np.ndarray | None = None
        self._w: np.ndarray | None = None

    def fit(self, fit_set: FitSet) -> None:
        if self.fit_info and self.fit_info["fit_set"]["fingerprint"] == fit_set.fingerprint:
            return  # already fitted on exactly these sentences (e.g. a corpus shared by all tasks)
        x = self.fit_vectors(fit_set.sentences)
        k = self.spec.params["k"]
        # the label says k=N: it must not stand for "all" in effect
        if k is not None and not 1 <= k <= x.shape[1]:
            raise UserError(
                f"whitening: k={k} is outside 1..{x.shape[1]}, the dimension of the vectors; use "
                f"--set whitening.k=N with 1 ≤ N ≤ {x.shape[1]}, or leave k unset for all"
            )
        self._mu, self._w, rank = self._transform(x)
        self.fit_info = {
            "fit_set": fit_set.describe(),
            "rank": rank,
            "dims_kept": int(self._w.shape[1]),
        }

    def _transform(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """:func:`whitening_transform` of ``x``, memoised in the cache by the content of ``x`` and
        ``k``: a warm re-run reads (mu, W) instead of a covariance and an SVD (whose threaded BLAS
        can take seconds on a busy machine)."""
        import hashlib

        digest = hashlib.sha256(np.ascontiguousarray(x, dtype=np.float32).tobytes()).hexdigest()
        folder = self.ctx.artifacts.folder(
            "whitening",
            {"vectors": digest, "shape": list(x.shape), "k": self.spec.params["k"]},
            code=self.code(),
        )
        if folder.complete():
            return (
                np.load(folder.path("mu.npy")),
                np.load(folder.path("w.npy")),
                int(folder.meta()["info"]["rank"]),
            )
        mu, w, rank = whitening_transform(x, self.spec.params["k"])
        folder.commit({"mu.npy": npy_bytes(mu), "w.npy": npy_bytes(w)}, {"rank": rank})
        return mu, w, rank

    def transform(self, x: np.ndarray) -> np.ndarray:
        if self._w is None:
            raise RuntimeError("whitening: fit() must run before encode()")
        return (x - self._mu) @ self._w
