"""The math of labelled pairs' metrics (registered by :mod:`harness.core.kinds.pairclass`): the
similarity of a pair is the score a classifier thresholds, and every metric is ×100.

* ``ap`` — average precision of the positive class ranked by similarity (scikit-learn's
  ``average_precision_score``; MTEB PairClassification's main score).
* ``roc_auc`` — the probability that a positive pair is more similar than a negative one, ties
  counting one half (scikit-learn's ``roc_auc_score``; BERT-flow's QNLI experiment).
* ``accuracy`` / ``f1`` — at a threshold chosen on another split (the task's ``threshold_split``,
  DSE's tuned thresholds): a pair is predicted positive when its similarity is ``>=`` it. For a
  method that classifies pairs itself (``classify_pairs``) they are its own argmax decisions.
* ``accuracy_best`` / ``f1_best`` — at the threshold that is best *on the scored split itself*
  (MTEB's ``_find_best_acc_and_threshold`` / ``_find_best_f1_and_threshold``): a selection on
  the scored pairs, marked § wherever it is shown.

The positive class is the task's ``positive`` (MRPC's "equivalent", QNLI's "entailment"); every
other class is negative (MNLI's neutral and contradiction alike).

Every function takes ``weights`` (B, n): how often each pair is drawn in each of B bootstrap
resamples (:mod:`harness.core.bootstrap`'s draws), and returns one value per resample; ``None``
weights is the split itself (one row of ones). The pairs are sorted once by similarity and grouped
into runs of equal similarity; a resample only re-weights the groups, so B resamples cost array
work over (B, groups), never a sort per resample.

Worked example (the unit test's): similarities ``0.9 0.8 0.8 0.3`` with labels ``1 0 1 0``::

    groups (descending)   0.9 | 0.8 0.8 | 0.3        positives per group 1 | 1 | 0
                                                     negatives per group 0 | 1 | 1
    cumulative TP, FP     1, 0 | 2, 1   | 2, 2
    ap      = ΔR·precision summed = 1/2·1 + 1/2·2/3          = 5/6 ≈ 83.33
    roc_auc = per negative, positives above it + half the tied ones, over P·N
            = (1 + 1/2) + 2 = 3.5 / 4                         = 87.5
    best cuts (MTEB: between distinct similarities, never after the last group):
      after 0.9: TP 1, FP 0 → accuracy (1 + 2)/4 = 75, F1 2·1/(1 + 0 + 2) = 66.7
      after 0.8: TP 2, FP 1 → accuracy (2 + 1)/4 = 75, F1 2·2/(2 + 1 + 2) = 80
    accuracy_best = 75 (threshold 0.85, the first best), f1_best = 80 (threshold 0.55)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Ranked:
    """Pairs sorted by similarity, descending, in runs of equal similarity (``groups``).

    ``order`` sorts the pairs; ``starts`` are the sorted positions where a run begins; ``top`` the
    similarity of each run; ``positive`` each pair's label as a bool (in the pairs' order).
    """

    order: np.ndarray
    starts: np.ndarray
    top: np.ndarray
    positive: np.ndarray

    @classmethod
    def of(cls, similarity: Sequence[float] | np.ndarray, positive: np.ndarray) -> Ranked:
        sim = np.asarray(similarity, dtype=np.float64)
        order = np.argsort(-sim, kind="stable")
        ordered = sim[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        return cls(order, starts, ordered[starts], np.asarray(positive, dtype=bool))

    def counts(self, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Weighted positives and negatives per run, (B, groups) float64."""
        w = np.ones((1, len(self.order))) if weights is None else np.asarray(weights, np.float64)
        w = np.atleast_2d(w)[:, self.order]
        pos = self.positive[self.order]
        tp = np.add.reduceat(np.where(pos, w, 0.0), self.starts, axis=1)
        fp = np.add.reduceat(np.where(pos, 0.0, w), self.starts, axis=1)
        return tp, fp


def average_precision(ranked: Ranked, weights: np.ndarray | None = None) -> np.ndarray:
    """×100 average precision per resample: Σ over runs (ΔRecall · precision at the run), as
    scikit-learn computes it. NaN where a resample holds no positive pair."""
    tp_run, fp_run = ranked.counts(weights)
    tp, fp = np.cumsum(tp_run, axis=1), np.cumsum(fp_run, axis=1)
    total_pos = tp[:, -1:]
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(tp + fp > 0, tp / np.where(tp + fp > 0, tp + fp, 1), 0.0)
        ap = (tp_run / total_pos * precision).sum(axis=1)
    return 100 * np.where(total_pos[:, 0] > 0, ap, np.nan)


def roc_auc(ranked: Ranked, weights: np.ndarray | None = None) -> np.ndarray:
    """×100 area under the ROC curve per resample: for each negative pair, the positives more
    similar than it plus half the equally similar ones, over P·N. NaN where a class is absent."""
    tp_run, fp_run = ranked.counts(weights)
    above = np.cumsum(tp_run, axis=1) - tp_run  # positives in the runs before each run
    p, n = tp_run.sum(axis=1), fp_run.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = (fp_run * (above + tp_run / 2)).sum(axis=1) / (p * n)
    return 100 * np.where((p > 0) & (n > 0), auc, np.nan)


def _cuts(ranked: Ranked, weights: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """Cumulative TP, FP after each run, totals P and N, and which cuts MTEB allows: between two
    distinct similarities present in the resample (something above the cut and below it)."""
    tp_run, fp_run = ranked.counts(weights)
    tp, fp = np.cumsum(tp_run, axis=1), np.cumsum(fp_run, axis=1)
    mass = tp + fp
    total = mass[:, -1:]
    valid = (mass > 0) & (mass < total)
    # a cut after an empty run repeats the cut before it: keep the first, as MTEB's strict > does
    valid &= (tp_run + fp_run) > 0
    return tp, fp, tp[:, -1:], fp[:, -1:], valid


def best_accuracy(
    ranked: Ranked, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """×100 accuracy at the best cut of each resample, and its threshold (the midpoint between the
    cut's two similarities, as MTEB's); NaN where no cut exists (one similarity only)."""
    tp, fp, _, n, valid = _cuts(ranked, weights)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = np.where(valid, (tp + (n - fp)) / (tp[:, -1:] + n), -np.inf)
    return _best(ranked, accuracy, valid)


def best_f1(ranked: Ranked, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """×100 F1 of the positive class at the best cut of each resample (MTEB: only cuts with a true
    positive count), and its threshold."""
    tp, fp, p, _, valid = _cuts(ranked, weights)
    valid = valid & (tp > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        # MTEB's own arithmetic (2PR / (P + R)), not the equal 2TP / (TP + FP + P): two cuts of
        # equal F1 then compare as MTEB compares them, and the same threshold is picked
        precision, recall = tp / (tp + fp), tp / p
        f1 = np.where(valid, 2 * precision * recall / (precision + recall), -np.inf)
    return _best(ranked, f1, valid)


def _best(ranked: Ranked, values: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    best = np.argmax(values, axis=1)  # the first maximum: MTEB keeps the first with strict >
    found = valid.any(axis=1)
    value = np.where(found, values[np.arange(len(values)), best], np.nan)
    # the cut after run g lies between run g's similarity and the next run's (with the split's own
    # weights every run is present; a resample's threshold is not used)
    following = ranked.top[np.minimum(best + 1, len(ranked.top) - 1)]
    threshold = np.where(found, (ranked.top[best] + following) / 2, np.nan)
    return 100 * value, threshold


def at_threshold(
    similarity: np.ndarray,
    positive: np.ndarray,
    threshold: float,
    weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """×100 accuracy and F1 of predicting positive where ``similarity >= threshold``."""
    return decided(np.asarray(similarity, np.float64) >= threshold, positive, weights)


def decided(
    predicted: np.ndarray, positive: np.ndarray, weights: np.ndarray | None = None, correct=None
) -> tuple[np.ndarray, np.ndarray]:
    """×100 accuracy and positive-class F1 of decisions ``predicted`` (bool per pair) against
    ``positive``; ``correct`` (bool per pair) overrides what counts as right (a 3-class argmax).
    F1 is NaN where there is no positive pair and no positive prediction."""
    w = (
        np.ones((1, len(positive)))
        if weights is None
        else np.atleast_2d(weights).astype(np.float64)
    )
    predicted, positive = np.asarray(predicted, bool), np.asarray(positive, bool)
    right = (predicted == positive) if correct is None else np.asarray(correct, bool)
    total = w.sum(axis=1)
    tp = (w * (predicted & positive)).sum(axis=1)
    fp = (w * (predicted & ~positive)).sum(axis=1)
    p = (w * positive).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = (w * right).sum(axis=1) / total
        f1 = np.where(fp + p > 0, 2 * tp / (tp + fp + p), np.nan)
    return 100 * accuracy, 100 * f1


def undefined_reason(similarity: np.ndarray | None, positive: np.ndarray) -> str | None:
    """Why a pair classification score is undefined (None: defined): fewer than 2 pairs, one
    class only, or similarities that are not numbers or all equal."""
    positive = np.asarray(positive, dtype=bool)
    if len(positive) < 2:
        return f"fewer than 2 pairs ({len(positive)})"
    if positive.all() or not positive.any():
        return (
            "every pair has the same label (" + ("positive" if positive.all() else "negative") + ")"
        )
    from harness.core.scoring import similarity_undefined

    return None if similarity is None else similarity_undefined(similarity)


def choose_thresholds(
    similarity: np.ndarray, gold: np.ndarray, positive_index: int
) -> dict[str, float] | None:
    """The thresholds best on a split (its best accuracy's and best F1's, MTEB's cuts), to apply
    to another; None where that split has no cut (one class or one similarity)."""
    positive = np.asarray(gold, np.float64) == positive_index
    if undefined_reason(similarity, positive):
        return None
    ranked = Ranked.of(similarity, positive)
    accuracy = float(best_accuracy(ranked)[1][0])
    f1 = float(best_f1(ranked)[1][0])
    if not (math.isfinite(accuracy) and math.isfinite(f1)):
        return None
    return {"accuracy": accuracy, "f1": f1}
