"""Is method A better than method B on the same pairs? Two tests for dependent correlations.

Both methods are scored against one gold vector, so their correlations are dependent and an
interval per method says little about their difference.

* **Paired bootstrap** (:func:`paired_bootstrap`): the same resamples of pairs for both methods
  (:mod:`harness.core.bootstrap`); the 95 % percentile interval of the difference, and the
  two-sided p-value ``2 · (min(#{d* ≤ 0}, #{d* ≥ 0}) + 1) / (B + 1)``, capped at 1. It respects the
  aggregation (subset-stratified draws, ``mean`` / ``wmean`` over subsets).
* **Williams' t** (:func:`williams_t`, Williams 1959; Steiger 1980, eq. 7) for two correlations
  r12, r13 that share variable 1 (gold), given r23 (the two methods' agreement), with n − 3 degrees
  of freedom. Applied to Spearman correlations over all pairs of the split.

Worked example: r12 = 0.8, r13 = 0.7, r23 = 0.9, n = 100 → |R| = 1 − 0.64 − 0.49 − 0.81 +
2·0.8·0.7·0.9 = 0.068, t = 0.1 · √(99 · 1.9) / √(2 · 99/97 · 0.068 + 0.5625 · 0.001) ≈ 3.67,
two-sided p ≈ 0.0004.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.core.bootstrap import ResampleMemo, check_fits, percentile_interval, resampled_scores
from harness.core.scoring import score_split, spearman

BOOTSTRAP_TEST = "paired bootstrap"
WILLIAMS_TEST = "Williams t (Spearman, all pairs)"


@dataclass(frozen=True)
class Comparison:
    """A − B in the compared score ×100 (Spearman under one aggregation, or a labelled-pairs
    metric), with one test's interval and p-value."""

    delta: float
    ci_low: float
    ci_high: float
    p_value: float
    test: str


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes
    6.4)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h


def student_t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom, through the regularized incomplete
    beta function: P(|T| > |t|) = I_x(df/2, 1/2) with x = df / (df + t²). Pure math, so scoring does
    not import scipy.stats (0.5-0.8 s, most of a warm run); the tests check it against scipy.

    >>> round(2 * student_t_sf(2.0, 10), 6)  # scipy: 2 * t.sf(2, 10) = 0.073388
    0.073388
    """
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    a, b, x = df / 2, 0.5, df / (df + t * t)
    front = (
        math.exp(
            math.lgamma(a + b)
            - math.lgamma(a)
            - math.lgamma(b)
            + a * math.log(x)
            + b * math.log1p(-x)
        )
        if 0 < x < 1
        else 0.0
    )
    if x == 0:
        tail = 0.0
    elif x < (a + 1) / (a + b + 2):
        tail = front * _betacf(a, b, x) / a
    else:
        tail = 1 - front * _betacf(b, a, 1 - x) / b if x < 1 else 1.0
    return tail / 2 if t >= 0 else 1 - tail / 2


def williams_t(r12: float, r13: float, r23: float, n: int) -> tuple[float, float]:
    """Williams' t for H0: r12 = r13 (correlations sharing variable 1); returns (t, two-sided p)."""
    if n < 4:
        return math.nan, math.nan
    det = 1 - r12**2 - r13**2 - r23**2 + 2 * r12 * r13 * r23
    mean_r = (r12 + r13) / 2
    denominator = 2 * (n - 1) / (n - 3) * det + mean_r**2 * (1 - r23) ** 3
    if r12 == r13:
        return 0.0, 1.0  # identical correlations (also covers identical methods, where 0/0)
    if denominator <= 0:
        return math.copysign(math.inf, r12 - r13), 0.0
    t = (r12 - r13) * math.sqrt((n - 1) * (1 + r23)) / math.sqrt(denominator)
    return t, 2 * student_t_sf(abs(t), n - 3)


@dataclass(frozen=True)
class Scored:
    """One method's similarities on a split, with its score and its bootstrap resamples."""

    similarity: np.ndarray
    spearman: float
    resamples: np.ndarray


def scored(
    similarity: np.ndarray,
    gold: Sequence[float],
    subsets: Sequence[str] | None,
    aggregation: str,
    rounds: int = 1000,
    seed: int = 1234,
    memo: ResampleMemo | None = None,
) -> Scored:
    """Score once and resample once per method; every comparison of it reuses both. The score must
    be defined: an undefined one (:func:`harness.core.scoring.score_split`) would put None into
    ``Scored.spearman``, and :func:`paired_bootstrap` would fail on it. The callers (the runner's
    significance table and history report) only pass scores whose split is defined.

    Memory: the resamples are computed a chunk at a time and a method keeps ``rounds`` numbers of
    them, so comparing methods costs memory in the pairs, never in pairs × rounds; a split too
    large for memory fails before any work with one ResourceError line. ``memo``: as in
    :func:`harness.core.bootstrap.resampled_scores`."""
    labels = list(subsets) if subsets is not None else [""] * len(gold)
    gold_arr = np.asarray(gold, dtype=np.float64)
    similarity = np.asarray(similarity, dtype=np.float64)
    check_fits(len(gold_arr), rounds)
    # float | None: None for an undefined score, which the callers never pass (see the docstring)
    return Scored(
        similarity,
        score_split(similarity, gold_arr, subsets, aggregation, bootstrap=0).spearman,  # type: ignore[arg-type]
        resampled_scores(similarity, gold_arr, labels, aggregation, rounds, seed, memo),
    )


def paired_bootstrap(a: Scored, b: Scored) -> Comparison:
    """A − B with a paired-bootstrap 95 % interval and two-sided p-value (see the module docstring).
    Both must come from :func:`scored` with the same gold, subsets, aggregation, rounds and seed."""
    diffs = a.resamples - b.resamples
    diffs = diffs[np.isfinite(diffs)]
    low, high = percentile_interval(diffs)
    tail = min(int((diffs <= 0).sum()), int((diffs >= 0).sum()))
    p_value = min(1.0, 2 * (tail + 1) / (len(diffs) + 1)) if len(diffs) else math.nan
    return Comparison(
        a.spearman - b.spearman, low, high, p_value, f"{BOOTSTRAP_TEST} (B={len(a.resamples)})"
    )


def williams(a: Scored, b: Scored, gold: Sequence[float]) -> Comparison:
    """A − B (the protocol's Spearman ×100), tested with Williams' t on the Spearman over all
    pairs."""
    r12, r13 = spearman(a.similarity, gold), spearman(b.similarity, gold)
    r23 = spearman(a.similarity, b.similarity)
    _, p_value = williams_t(r12, r13, r23, len(gold))
    return Comparison(a.spearman - b.spearman, math.nan, math.nan, p_value, WILLIAMS_TEST)
