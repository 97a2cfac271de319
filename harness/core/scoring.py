"""Cosine similarity → Spearman / Pearson ×100, aggregated over subsets, with a bootstrap CI.

Aggregations (see REFERENCE.md; they are the #1 reason published numbers disagree):

* ``all``   — one correlation over every pair of the split (SBERT, SimCSE, MTEB).
* ``mean``  — correlation per subset, unweighted average (SentEval's default, WhiteningBERT).
* ``wmean`` — correlation per subset, averaged with weights = subset sizes (BERT-flow, BERT-whitening).

Worked example (the unit test's): five pairs, subsets A = pairs 0-2 and B = pairs 3-4::

    cosine  0.1  0.2  0.3 | 0.9  0.8        Spearman(A) = +1, Spearman(B) = -1
    gold    1    2    3   | 4    5
    mean  = (1 + -1) / 2             = 0.0
    wmean = (3 * 1 + 2 * -1) / 5     = 0.2
    all   = Spearman of ranks [1 2 3 5 4] vs [1 2 3 4 5] = 1 - 6 * 2 / (5 * 24) = 0.9

A split without subset labels has one implicit subset, so all three coincide.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

AGGREGATIONS = ("all", "mean", "wmean")
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
    last = np.flip(np.minimum.accumulate(np.flip(np.where(ends, position, n), axis=-1), axis=-1), axis=-1)
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


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rho (not ×100). ``spearman([1, 2, 3], [10, 30, 20]) == 0.5``."""
    return float(_pearson_rows(_rank(np.asarray(x, float)), _rank(np.asarray(y, float))))


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    return float(_pearson_rows(np.asarray(x, float), np.asarray(y, float)))


def aggregate(values: dict[str, float], sizes: dict[str, int], how: str) -> float:
    """Combine per-subset correlations; ``how`` is ``mean`` or ``wmean`` (``all`` is not an average)."""
    names = list(values)
    if how == "mean":
        return float(np.mean([values[n] for n in names]))
    if how == "wmean":
        return float(np.average([values[n] for n in names], weights=[sizes[n] for n in names]))
    raise ValueError(f"aggregate() takes mean or wmean, not {how!r}")


@dataclass(frozen=True)
class TaskScores:
    """Scores of one method on one split, ×100. ``subsets`` maps label → (spearman, pearson, n)."""

    spearman: float
    pearson: float
    aggregation: str
    n_pairs: int
    n_zero_vectors: int
    subsets: dict[str, dict[str, float]]
    ci95: tuple[float, float] | None


def score_split(cos: np.ndarray, gold: Sequence[float], subsets: Sequence[str] | None, aggregation: str,
                bootstrap: int = 1000, seed: int = 1234, n_zero: int = 0) -> TaskScores:
    """Score cosines against gold under ``aggregation``; bootstrap resamples pairs within subsets."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}")
    cos = np.asarray(cos, dtype=np.float64)
    gold_arr = np.asarray(gold, dtype=np.float64)
    labels = np.asarray(subsets if subsets is not None else [""] * len(cos))
    groups = {name: np.flatnonzero(labels == name) for name in dict.fromkeys(labels.tolist())}
    per_subset = {name: {"spearman": 100 * spearman(cos[idx], gold_arr[idx]),
                         "pearson": 100 * pearson(cos[idx], gold_arr[idx]), "n": len(idx)}
                  for name, idx in groups.items()}
    sizes = {name: len(idx) for name, idx in groups.items()}
    if aggregation == "all" or len(groups) == 1:
        rho, r = 100 * spearman(cos, gold_arr), 100 * pearson(cos, gold_arr)
    else:
        rho = aggregate({n: s["spearman"] for n, s in per_subset.items()}, sizes, aggregation)
        r = aggregate({n: s["pearson"] for n, s in per_subset.items()}, sizes, aggregation)
    ci = _bootstrap_ci(cos, gold_arr, labels.tolist(), aggregation, bootstrap, seed) if bootstrap > 0 else None
    return TaskScores(spearman=rho, pearson=r, aggregation=aggregation, n_pairs=len(cos),
                      n_zero_vectors=n_zero, subsets=per_subset if subsets is not None else {}, ci95=ci)


def _resample_ranks(x: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Average ranks of each item within every resample, without sorting each resample.

    A bootstrap resample is described by ``counts[b, i]`` = how often item i was drawn. Items are
    sorted once; within resample b an item's rank is (draws of all smaller values) + (draws of its
    own value + 1) / 2 — the average rank of its tied copies. Everything is O(B·n) array work.
    """
    order = np.argsort(x, kind="stable")
    ordered = x[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    group = np.cumsum(np.r_[True, ordered[1:] != ordered[:-1]]) - 1
    # float32 is exact here: ranks are sums of counts (< 2^24) and halves.
    per_group = np.add.reduceat(counts[:, order], starts, axis=1).astype(np.float32)
    below = np.cumsum(per_group, axis=1) - per_group
    ranks = np.empty(counts.shape, dtype=np.float32)
    ranks[:, order] = (below + (per_group + 1) / 2)[:, group]
    return ranks


def _weighted_pearson(rx: np.ndarray, ry: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """×100 Pearson of each row pair, each item weighted by its draw count."""
    w = (counts / counts.sum(axis=1, keepdims=True)).astype(np.float32)
    dx = rx - (w * rx).sum(axis=1, keepdims=True)
    dy = ry - (w * ry).sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        covariance = (w * dx * dy).sum(axis=1, dtype=np.float64)
        return 100 * covariance / np.sqrt((w * dx * dx).sum(axis=1, dtype=np.float64)
                                          * (w * dy * dy).sum(axis=1, dtype=np.float64))


def _weighted_spearman(x: np.ndarray, y: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Spearman ×100 of each resample given by ``counts`` (B, n): Pearson of the resample's ranks,
    each item weighted by how often it was drawn."""
    return _weighted_pearson(_resample_ranks(x, counts), _resample_ranks(y, counts), counts)


@functools.lru_cache(maxsize=8)
def _resample_plan(gold_bytes: bytes, labels: tuple[str, ...], rounds: int, seed: int) -> dict[str, tuple]:
    """Bootstrap draws for one split, shared by every method scored on it (same seed → same draws,
    so methods are compared on identical resamples, and the gold side is ranked once).

    Returns {group: (indices, counts (rounds, len(indices)), ranks of gold within each resample)};
    the key "" (all pairs, stratified by subset) is present as well.
    """
    gold = np.frombuffer(gold_bytes, dtype=np.float64)
    rng = np.random.default_rng(seed)
    label_array = np.asarray(labels)
    groups = {name: np.flatnonzero(label_array == name) for name in dict.fromkeys(labels)}
    counts = np.zeros((rounds, len(gold)), dtype=np.int32)
    for idx in groups.values():
        # counts[b, i] = how often pair i is drawn in resample b: a bincount of uniform draws.
        draws = rng.integers(0, len(idx), size=(rounds, len(idx))) + (np.arange(rounds) * len(idx))[:, None]
        counts[:, idx] = np.bincount(draws.ravel(), minlength=rounds * len(idx)).reshape(rounds, len(idx))
    plan = {name: (idx, counts[:, idx], _resample_ranks(gold[idx], counts[:, idx])) for name, idx in groups.items()}
    everything = np.arange(len(gold))
    plan[""] = (everything, counts, _resample_ranks(gold, counts))
    return plan


def _bootstrap_ci(cos: np.ndarray, gold: np.ndarray, labels: Sequence[str], aggregation: str,
                  rounds: int, seed: int) -> tuple[float, float]:
    """95 % percentile interval of the aggregated Spearman over ``rounds`` resamples of the pairs,
    stratified by subset (each subset is resampled to its own size)."""
    plan = _resample_plan(gold.tobytes(), tuple(labels), rounds, seed)
    subsets = [name for name in plan if name]
    if aggregation == "all" or len(subsets) == 1:
        stats = _spearman_of_resamples(cos, *plan[""])
    else:
        values = np.stack([_spearman_of_resamples(cos, *plan[name]) for name in subsets])
        weights = np.array([len(plan[name][0]) for name in subsets], dtype=float)
        if aggregation == "mean":
            weights = np.ones_like(weights)
        stats = (values * weights[:, None]).sum(axis=0) / weights.sum()
    stats = stats[np.isfinite(stats)]
    if not len(stats):
        return (math.nan, math.nan)
    low, high = np.percentile(stats, [2.5, 97.5])
    return (float(low), float(high))


def _spearman_of_resamples(cos: np.ndarray, idx: np.ndarray, counts: np.ndarray, gold_ranks: np.ndarray) -> np.ndarray:
    return _weighted_pearson(_resample_ranks(cos[idx], counts), gold_ranks, counts)
