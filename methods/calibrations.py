"""The simpler calibrations BERT-flow is compared with: standard normalization (``sn``) and
all-but-the-top (``abtt``; Mu & Viswanath 2018, the BERT-flow paper's "NATSV").

Both fit a few statistics of a pooled view (default first-last, as whitening and flow) on the run's
``--fit-set`` and map every vector through them before the cosine. Unlike whitening they keep the
dimension (sn rescales axes; abtt removes a few directions and keeps the rest as they are).
"""

from __future__ import annotations

import hashlib
import io
import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.api import MethodContext, MethodSpec, Option
from harness.core.errors import UserError
from harness.core.hashing import npy_bytes
from methods.pooling import BASE_VIEWS, PostProcessor

if TYPE_CHECKING:
    from harness.core.data.fitsets import FitSet

log = logging.getLogger("sts_bench.calibrations")

# A variance (or eigenvalue) at most this fraction of the largest is numerical noise, not a
# direction the fit set varies in: the same threshold whitening uses to find the covariance's rank.
RELATIVE_ZERO = 1e-10


def _two_different(x: np.ndarray, method: str) -> np.ndarray:
    """``x`` as float64, after checking the fit set has two different vectors (else nothing to
    fit)."""
    x64 = np.asarray(x, dtype=np.float64)
    if len(np.unique(x64, axis=0)) < 2:
        raise UserError(
            f"{method}: the fit set's {len(x64)} vectors are all identical (too short a "
            "--max-length, or sentences that differ only in what the tokenizer drops, such as "
            "case); fitting needs at least 2 different vectors: use a larger --fit-set or "
            "--max-length"
        )
    return x64


def standard_normalization(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Return ``(mu, scale, kept)`` such that ``(x - mu) * scale`` is the per-dimension z-score of
    ``x``.

    ``mu_j = mean_i x_ij``, ``sigma_j = sqrt(mean_i (x_ij - mu_j)^2)`` and
    ``scale_j = 1 / sigma_j``. The population standard deviation is used; the sample one differs by
    the same factor ``sqrt(n / (n - 1))`` in every dimension, which no cosine sees.

    A dimension with zero variance in the fit set (a real case in small sentence encoders) has no
    z-score: its scale is set to 0, i.e. the dimension is dropped, and ``kept`` counts the others.
    Dropping, rather than keeping it centred but unscaled, because the fit set says nothing about
    that dimension's spread: any weight given to it would be arbitrary, in raw units among
    unit-variance ones; on the fit set's own vectors it is 0 after centring anyway; and whitening
    makes the same choice (zero-variance directions are dropped). Scores stay finite either way.

    Worked example: the columns (1, 3), (10, 18) and (5, 5) have means 2, 14, 5 and standard
    deviations 1, 4, 0; the third column is dropped.

    >>> mu, scale, kept = standard_normalization(np.array([[1.0, 10.0, 5.0], [3.0, 18.0, 5.0]]))
    >>> mu.tolist(), scale.tolist(), kept
    ([[2.0, 14.0, 5.0]], [[1.0, 0.25, 0.0]], 2)
    >>> ((np.array([[1.0, 10.0, 5.0], [4.0, 22.0, 9.0]]) - mu) * scale).tolist()
    [[-1.0, -1.0, 0.0], [2.0, 2.0, 0.0]]
    """
    x64 = _two_different(x, "sn")
    mu = x64.mean(axis=0, keepdims=True)
    var = ((x64 - mu) ** 2).mean(axis=0, keepdims=True)
    nonzero = var > var.max() * RELATIVE_ZERO
    scale = np.zeros_like(var)
    scale[nonzero] = 1.0 / np.sqrt(var[nonzero])
    kept = int(nonzero.sum())
    if kept < x64.shape[1]:
        log.warning(
            "sn: %d of %d dimensions have zero variance in the fit set (%d sentences); they are "
            "dropped",
            x64.shape[1] - kept,
            x64.shape[1],
            len(x64),
        )
    return mu.astype(np.float32), scale.astype(np.float32), kept


def default_k(dim: int) -> int:
    """Mu & Viswanath's rule for the number of directions to remove: d/100, rounded, at least 1.

    >>> default_k(768), default_k(384), default_k(32)
    (8, 4, 1)
    """
    return max(1, round(dim / 100))


def all_but_the_top(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Return ``(mu, U, rank)`` such that ``c - (c U) U^T`` with ``c = x - mu`` is all-but-the-top.

    ``mu`` is the fit set's mean and ``U`` (d × k') holds the eigenvectors of its covariance with
    the k' largest eigenvalues, the top principal directions: each centred vector loses its
    projection on them and keeps the rest unchanged. ``k' = min(k, rank)``: a direction the fit set
    does not vary in (eigenvalue 0, e.g. fewer sentences than dimensions) has an arbitrary
    eigenvector, and removing it would remove an arbitrary direction, so only the ``rank``
    directions with variance are removed (a warning says so). ``rank`` is returned for the record.

    The symmetric eigensolver (``eigh``) is used, as whitening does, not the SVD of the centred
    vectors: LAPACK's SVD failed to converge on one machine. Eigenvectors' signs are arbitrary and
    ``U U^T`` does not see them.

    Worked example: four points (±3, ±1) vary 9 along the first axis and 1 along the second; k = 1
    removes the first axis:

    >>> x = np.array([[3.0, 1.0], [-3.0, 1.0], [3.0, -1.0], [-3.0, -1.0]]) + 10
    >>> mu, u, rank = all_but_the_top(x, 1)
    >>> c = x - mu
    >>> (c - (c @ u) @ u.T).round(6).tolist()
    [[0.0, 1.0], [0.0, 1.0], [0.0, -1.0], [0.0, -1.0]]
    """
    x64 = _two_different(x, "abtt")
    dim = x64.shape[1]
    if k >= dim:  # removing every direction leaves every vector at 0: no cosine to compare
        raise UserError(
            f"abtt: k={k} is not below the dimension {dim} of the vectors: removing every "
            f"direction leaves nothing to compare; use --set abtt.k=N with N < {dim} (auto: "
            f"{default_k(dim)})"
        )
    mu = x64.mean(axis=0, keepdims=True)
    centered = x64 - mu
    s, u = np.linalg.eigh(centered.T @ centered / len(x64))
    s, u = s[::-1], u[:, ::-1]  # largest first
    rank = int((s > s[0] * RELATIVE_ZERO).sum())
    removed = min(k, rank)
    if removed < k:
        log.warning(
            "abtt: the fit set's covariance has rank %d (%d sentences, %d dimensions); removing %d "
            "directions instead of k=%d (fit on more sentences, e.g. a larger --fit-set, or use "
            "--set abtt.k=N with N ≤ %d)",
            rank,
            len(x64),
            dim,
            removed,
            k,
            rank,
        )
    return mu.astype(np.float32), np.ascontiguousarray(u[:, :removed], dtype=np.float32), rank


def _k_option(text: str) -> int | str:
    """``auto`` (d/100, at least 1) or a positive integer."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(
            f"k must be auto or a positive integer (directions to remove), not {text!r}"
        )
    return value


class Calibration(PostProcessor):
    """A post-processor whose fit is a few arrays computed from the fit set's pooled vectors in
    closed form, memoised in the cache by those vectors' content and the method's options and
    code."""

    def __init__(self, spec: MethodSpec, ctx: MethodContext) -> None:
        super().__init__(spec, ctx)
        self._arrays: dict[str, np.ndarray] | None = None

    def compute(self, x: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The fitted arrays (by file stem) and the facts for the record."""
        raise NotImplementedError

    def apply(self, x: np.ndarray, arrays: dict[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def fit(self, fit_set: FitSet) -> None:
        if self.fit_info and self.fit_info["fit_set"]["fingerprint"] == fit_set.fingerprint:
            return  # already fitted on exactly these sentences (e.g. a corpus shared by all tasks)
        self._arrays, info = self._fitted(self.fit_vectors(fit_set.sentences))
        self.fit_info = {"fit_set": fit_set.describe(), **info}

    def _fitted(self, x: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        digest = hashlib.sha256(np.ascontiguousarray(x, dtype=np.float32).tobytes()).hexdigest()
        key = {"vectors": digest, "shape": list(x.shape), "params": dict(self.spec.params)}
        folder = self.ctx.artifacts.folder(self.name, key, code=self.code())
        intact, damage = folder.verify()
        if intact:
            # read() checks each file against meta.json as it reads it; no pickle is ever loaded
            files = [name for name in folder.meta()["files"] if name.endswith(".npy")]
            arrays = {
                name[:-4]: np.load(io.BytesIO(folder.read(name)), allow_pickle=False)
                for name in files
            }
            return arrays, dict(folder.meta()["info"])
        if damage:
            folder.discard(damage)
        arrays, info = self.compute(x)
        folder.commit({f"{stem}.npy": npy_bytes(array) for stem, array in arrays.items()}, info)
        return arrays, info

    def transform(self, x: np.ndarray) -> np.ndarray:
        if self._arrays is None:
            raise RuntimeError(f"{self.name}: fit() must run before encode()")
        return np.asarray(self.apply(x, self._arrays), dtype=np.float32)


class StandardNormalization(Calibration):
    name = "sn"
    summary = (
        "standard normalization: per-dimension z-score (x - mu) / sigma fit on --fit-set, on a "
        "pooled view"
    )
    post = "sn"
    options = (Option("view", "first-last", "pooled view to normalize", choices=BASE_VIEWS),)

    def compute(self, x: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        mu, scale, kept = standard_normalization(x)
        return {"mu": mu, "scale": scale}, {"dims_kept": kept}

    def apply(self, x: np.ndarray, arrays: dict[str, np.ndarray]) -> np.ndarray:
        return (x - arrays["mu"]) * arrays["scale"]


class AllButTheTop(Calibration):
    name = "abtt"
    summary = (
        "all-but-the-top (NATSV): subtract the mean, remove the top-k principal directions of "
        "--fit-set (Mu & Viswanath 2018)"
    )
    post = "abtt"
    options = (
        Option(
            "k",
            "auto",
            "principal directions to remove; auto = d/100 rounded, at least 1 (Mu & Viswanath's "
            "rule: 8 for BERT-base, 4 for MiniLM)",
            type=_k_option,
        ),
        Option("view", "first-last", "pooled view to post-process", choices=BASE_VIEWS),
    )

    def compute(self, x: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        k = self.spec.params["k"]
        k = default_k(x.shape[1]) if k == "auto" else int(k)
        mu, u, rank = all_but_the_top(x, k)
        return {"mu": mu, "u": u}, {"k": k, "rank": rank, "directions_removed": int(u.shape[1])}

    def apply(self, x: np.ndarray, arrays: dict[str, np.ndarray]) -> np.ndarray:
        centered = x - arrays["mu"]
        return centered - (centered @ arrays["u"]) @ arrays["u"].T
