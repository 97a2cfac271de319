"""Cosine similarity → Spearman / Pearson ×100, aggregated over subsets, with a bootstrap CI.

Aggregations (see REFERENCE.md; they are the #1 reason published numbers disagree):

* ``all``   — one correlation over every pair of the split (SBERT, SimCSE, MTEB).
* ``mean``  — correlation per subset, unweighted average (SentEval's default, WhiteningBERT).
* ``wmean`` — correlation per subset, averaged with weights = subset sizes (BERT-flow,
  BERT-whitening).

Worked example (the unit test's): seven pairs, subsets A = pairs 0-3 and B = pairs 4-6::

    cosine  0.1  0.2  0.3  0.4 | 0.9  0.8  0.7      Spearman(A) = +1, Spearman(B) = -1
    gold    1    2    3    4   | 5    6    7
    mean  = (1 + -1) / 2               = 0
    wmean = (4 * 1 + 3 * -1) / 7       = 1/7 ≈ 0.143
    all   = Spearman of ranks [1 2 3 4 7 6 5] vs [1 2 3 4 5 6 7]
          = 1 - 6 * (2² + 2²) / (7 * (7² - 1)) = 1 - 48/336 = 6/7 ≈ 0.857

A split without subset labels has one implicit subset, so all three coincide.

**Undefined is not a number.** A correlation over fewer than 3 pairs, or against a constant (every
gold score equal, or every similarity equal), is undefined: :func:`undefined_reason` says why, and
:func:`score_split` then returns ``None`` scores with that reason instead of a NaN that a table
would sort, average or star. Under ``mean``/``wmean`` one undefined subset makes the average
undefined (leaving it out would silently change the protocol); under ``all`` only the whole split
counts, and an undefined subset is reported as such in ``subsets``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from harness.core.bootstrap import ResampleMemo

AGGREGATIONS = ("all", "mean", "wmean")
MIN_PAIRS = 3  # a rank correlation of 2 pairs is ±1 whatever they are
log = logging.getLogger("sts_bench.scoring")


def cosine_rows(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int]:
    """Row-wise cosine of two (n, d) arrays, and how many rows had a zero vector on either side.

    A zero vector has no direction; its cosine is defined here as 0 (not NaN, which would poison
    the correlation) and the caller is told how many there were.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    zero = norms == 0
    cos = np.zeros(len(a))
    cos[~zero] = np.einsum("ij,ij->i", a[~zero], b[~zero]) / norms[~zero]
    return cos, int(zero.sum())


def _rank(x: np.ndarray) -> np.ndarray:
    """Average ranks (1-based) along the last axis; ties share the mean of their positions.

    Vectorised over leading axes so 1000 bootstrap resamples rank in one call:
    ``_rank([10, 20, 20, 5]) == [2, 3.5, 3.5, 1]``.
    """
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, axis=-1, kind="stable")
    ordered = np.take_along_axis(x, order, axis=-1)
    n = x.shape[-1]
    position = np.broadcast_to(np.arange(n), x.shape)
    starts = np.ones(x.shape, dtype=bool)  # True where a run of equal values begins
    starts[..., 1:] = ordered[..., 1:] != ordered[..., :-1]
    ends = np.ones(x.shape, dtype=bool)  # True where a run ends
    ends[..., :-1] = starts[..., 1:]
    first = np.maximum.accumulate(np.where(starts, position, 0), axis=-1)
    last = np.flip(
        np.minimum.accumulate(np.flip(np.where(ends, position, n), axis=-1), axis=-1), axis=-1
    )
    ranks = np.empty(x.shape, dtype=np.float64)
    np.put_along_axis(ranks, order, (first + last) / 2 + 1, axis=-1)
    return ranks


def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson r along the last axis; NaN where either side is constant."""
    xc = x - x.mean(axis=-1, keepdims=True)
    yc = y - y.mean(axis=-1, keepdims=True)
    denom = np.sqrt((xc * xc).sum(axis=-1) * (yc * yc).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (xc * yc).sum(axis=-1) / denom


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman rho (not ×100). ``spearman([1, 2, 3], [10, 30, 20]) == 0.5``."""
    return float(_pearson_rows(_rank(np.asarray(x, float)), _rank(np.asarray(y, float))))


def pearson(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    return float(_pearson_rows(np.asarray(x, float), np.asarray(y, float)))


def undefined_reason(
    similarity: Sequence[float] | np.ndarray | None, gold: Sequence[float] | np.ndarray
) -> str | None:
    """Why a correlation of ``similarity`` with ``gold`` is undefined, or None when it is defined.
    ``similarity`` None checks the data alone (before anything is encoded).

    >>> undefined_reason([0.1, 0.2, 0.3], [1, 1, 1])
    'every gold score is equal'
    >>> undefined_reason([0.5, 0.5, 0.5], [1, 2, 3]), undefined_reason(None, [1, 2])
    ('every similarity is equal', 'fewer than 3 pairs (2)')
    """
    gold_arr = np.asarray(gold, dtype=np.float64)
    if len(gold_arr) < MIN_PAIRS:
        return f"fewer than {MIN_PAIRS} pairs ({len(gold_arr)})"
    if np.all(gold_arr == gold_arr[0]):
        return "every gold score is equal"
    return None if similarity is None else similarity_undefined(similarity)


def similarity_undefined(similarity: Sequence[float] | np.ndarray) -> str | None:
    """Why no score can rank these similarities (a non-finite one, or all equal); None: it can.
    Shared by every task kind (:mod:`harness.core.pair_metrics` too)."""
    sim = np.asarray(similarity, dtype=np.float64)
    if not np.all(np.isfinite(sim)):
        return "a similarity is not a finite number"
    if np.all(sim == sim[0]):
        return "every similarity is equal"
    return None


def split_undefined(
    similarity: Sequence[float] | np.ndarray | None,
    gold: Sequence[float] | np.ndarray,
    subsets: Sequence[str] | None,
    aggregation: str,
) -> str | None:
    """Why the aggregated score of a split is undefined under ``aggregation`` (None: defined).
    ``mean``/``wmean`` over several subsets need every subset defined; ``all`` needs the split."""
    labels = list(subsets) if subsets is not None else [""] * len(gold)
    groups = list(dict.fromkeys(labels))
    if aggregation == "all" or len(groups) <= 1:
        return undefined_reason(similarity, gold)
    from harness.core.bootstrap import subset_indices

    gold_arr = np.asarray(gold, dtype=np.float64)
    sim = None if similarity is None else np.asarray(similarity, dtype=np.float64)
    for name, idx in subset_indices(labels).items():
        reason = undefined_reason(None if sim is None else sim[idx], gold_arr[idx])
        if reason:
            return (
                f"subset {name}: {reason} (under --aggregation {aggregation} every subset must be "
                "defined)"
            )
    return None


def aggregate(values: dict[str, float], sizes: dict[str, int], how: str) -> float:
    """Combine per-subset correlations; ``how`` is ``mean`` or ``wmean`` (``all`` is not an
    average)."""
    names = list(values)
    if how == "mean":
        return float(np.mean([values[n] for n in names]))
    if how == "wmean":
        return float(np.average([values[n] for n in names], weights=[sizes[n] for n in names]))
    raise ValueError(f"aggregate() takes mean or wmean, not {how!r}")


@dataclass(frozen=True)
class TaskScores:
    """Scores of one method on one split, ×100. ``subsets`` maps label → {spearman, pearson, n,
    undefined}. ``undefined`` is the reason the score could not be computed; the scores are then
    None (never NaN) and there is no interval."""

    spearman: float | None
    pearson: float | None
    aggregation: str
    n_pairs: int
    n_zero_vectors: int
    subsets: dict[str, dict[str, float | int | str | None]]
    ci95: tuple[float, float] | None
    undefined: str | None = None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def score_split(
    cos: np.ndarray,
    gold: Sequence[float] | np.ndarray,
    subsets: Sequence[str] | None,
    aggregation: str,
    bootstrap: int = 1000,
    seed: int = 1234,
    n_zero: int = 0,
    memo: ResampleMemo | None = None,
) -> TaskScores:
    """Score cosines against gold under ``aggregation``; bootstrap resamples pairs within subsets, a
    chunk of resamples at a time (:mod:`harness.core.bootstrap`), so memory grows with the pairs.

    A split too large for the memory available fails here, before any work, with one
    :class:`~harness.core.errors.ResourceError` line (:func:`harness.core.bootstrap.check_fits`).
    ``memo``: where resampled scores may be kept on disk (None: the runner's default).
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}")
    from harness.core.bootstrap import (
        check_fits,
        percentile_interval,
        resampled_scores,
        subset_indices,
    )

    check_fits(len(cos), bootstrap)
    cos = np.asarray(cos, dtype=np.float64)
    gold_arr = np.asarray(gold, dtype=np.float64)
    labels = list(subsets) if subsets is not None else [""] * len(cos)
    groups = subset_indices(labels)
    per_subset = {}
    for name, idx in groups.items():
        reason = undefined_reason(cos[idx], gold_arr[idx])
        per_subset[name] = {
            "spearman": None if reason else 100 * spearman(cos[idx], gold_arr[idx]),
            "pearson": None if reason else _finite(100 * pearson(cos[idx], gold_arr[idx])),
            "n": len(idx),
            "undefined": reason,
        }
    sizes = {name: len(idx) for name, idx in groups.items()}
    scores = TaskScores(
        spearman=None,
        pearson=None,
        aggregation=aggregation,
        n_pairs=len(cos),
        n_zero_vectors=n_zero,
        subsets=per_subset if subsets is not None else {},
        ci95=None,
        undefined=split_undefined(cos, gold_arr, subsets, aggregation),
    )
    if scores.undefined:
        return scores
    if aggregation == "all" or len(groups) == 1:
        rho, r = 100 * spearman(cos, gold_arr), 100 * pearson(cos, gold_arr)
    else:
        # split_undefined has just said every subset is defined, so their scores are numbers, not
        # None
        rho = aggregate({n: s["spearman"] for n, s in per_subset.items()}, sizes, aggregation)  # type: ignore[misc]
        r = aggregate({n: s["pearson"] for n, s in per_subset.items()}, sizes, aggregation)  # type: ignore[misc]
    ci = None
    if bootstrap > 0:
        low, high = percentile_interval(
            resampled_scores(cos, gold_arr, labels, aggregation, bootstrap, seed, memo)
        )
        ci = (low, high) if math.isfinite(low) and math.isfinite(high) else None
        if ci is not None and rho is not None and math.isfinite(rho):
            # On a handful of pairs a percentile interval can miss its own estimate (8 pairs under
            # wmean: by 2 points); an interval that excludes the score it qualifies says nothing
            # true, and a record whose score lies outside its interval is refused on read.
            ci = (min(ci[0], rho), max(ci[1], rho))
    return replace(scores, spearman=rho, pearson=_finite(r), ci95=ci)
