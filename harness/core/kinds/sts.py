"""Graded pairs (STS12-16, STS-B, SICK-R, any file with a gold score): ranked by the Spearman ×100
of the similarity against gold under the run's aggregation (all | mean | wmean over subsets,
:mod:`harness.core.scoring`), compared by a paired bootstrap and Williams' t.

Its records keep the fields they always had (``scores.spearman``, ``pearson``, ``spearman_ci95``,
``subset_scores``; no ``task.kind``), so every STS file and number reads as before.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

import numpy as np

from harness.core.kinds.base import (
    AGREE,
    Evidence,
    Metric,
    Scored,
    TaskKind,
    agree,
    ci_differs,
    rounds_problem,
    shown,
)


def _correlation(name: str) -> Any:
    def compute(ev: Evidence, weights: np.ndarray | None) -> np.ndarray:
        from harness.core.bootstrap import _weighted_pearson, _weighted_spearman
        from harness.core.scoring import pearson, spearman

        if weights is None:
            one = spearman if name == "spearman" else pearson
            return np.array([100 * one(ev.similarity, ev.gold)])
        if name == "spearman":
            return _weighted_spearman(ev.similarity, ev.gold, weights)
        return _weighted_pearson(ev.similarity[None, :], ev.gold[None, :], weights)

    return compute


class GradedPairs(TaskKind):
    name = "sts"
    title = "graded pairs"
    summary = "graded pairs, ranked by Spearman"
    mteb_type = "STS"
    main_default = "spearman"

    def task_fields(self, spec: Any) -> dict[str, Any]:
        return {}  # STS records keep the fields they always had

    def score(
        self,
        ev: Evidence,
        main_score: str,
        bootstrap: int,
        seed: int,
        n_zero: int = 0,
        memo: Any = None,
        aggregation: str = "all",
    ) -> Scored:
        from harness.core.hashing import strict_json
        from harness.core.scoring import score_split

        scores = score_split(
            ev.similarity, ev.gold, ev.subsets, aggregation, bootstrap, seed, n_zero, memo=memo
        )
        metrics: dict[str, dict[str, Any]] = {
            "spearman": {
                "value": scores.spearman,
                "ci95": list(scores.ci95) if scores.ci95 else None,
            },
            "pearson": {"value": scores.pearson, "ci95": None},
        }
        subsets = strict_json(scores.subsets)
        return Scored(main_score, metrics, len(ev.gold), n_zero, scores.undefined, {}, subsets)

    def gold_problem(self, spec: Any, split: Any, aggregation: str) -> str | None:
        from harness.core.scoring import split_undefined

        return split_undefined(None, split.gold, split.subsets, aggregation)

    def scores_field(self, scored: Scored, bootstrap: int, seed: int) -> dict[str, Any]:
        spearman = scored.metrics["spearman"]
        return {
            "spearman": spearman["value"],
            "pearson": scored.metrics["pearson"]["value"],
            "spearman_ci95": spearman["ci95"],
            "bootstrap_rounds": bootstrap,
            "bootstrap_seed": seed,
            "n_zero_vectors": scored.n_zero_vectors,
            "undefined": scored.undefined,
        }

    def metric_entry(self, record: Mapping[str, Any], name: str) -> dict[str, Any]:
        scores = record["scores"]
        ci = scores.get("spearman_ci95") if name == "spearman" else None
        return {"value": scores.get(name), "ci95": ci}

    def comparable(
        self, record: Mapping[str, Any], rounds: int, seed: int, memo: Any = None
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The Spearman's resamples under the record's aggregation, within its subsets."""
        from harness.core.bootstrap import resampled_scores

        ev = self.evidence(record)
        labels = list(ev.subsets) if ev.subsets is not None else [""] * len(ev.gold)
        aggregation = record["protocol"]["aggregation"]
        resamples = resampled_scores(
            ev.similarity, ev.gold, labels, aggregation, rounds, seed, memo
        )
        return ev.similarity, {"spearman": resamples}

    def comparison_tests(self) -> tuple[str, ...]:
        return ("williams",)  # Williams' t compares correlations with one shared gold

    def mteb_values(self, ev: Evidence, compared_by: str) -> dict[str, Any]:
        """MTEB's score keys of one subset's pairs compared by ``compared_by`` (cosine: also the
        unprefixed keys and ``main_score``; hamming: manhattan and euclidean, as MTEB's binary
        evaluation names them)."""
        from harness.core.compression import HAMMING
        from harness.core.scoring import pearson, spearman

        def pair(prefix: str, values: np.ndarray) -> dict[str, Any]:
            return {
                f"{prefix}pearson": pearson(values, ev.gold),
                f"{prefix}spearman": spearman(values, ev.gold),
            }

        if compared_by == "cosine":
            out = {**pair("", ev.similarity), **pair("cosine_", ev.similarity)}
            return {**out, "main_score": out["cosine_spearman"]}
        if compared_by == HAMMING:  # -hamming; on 0/1 vectors Euclidean is minus its square root
            euclidean = -np.sqrt(np.maximum(-ev.similarity, 0.0))
            return {**pair("manhattan_", ev.similarity), **pair("euclidean_", euclidean)}
        return pair(f"{compared_by}_", ev.similarity)

    def verify(self, record: dict[str, Any], memo: Any = None) -> str | None:
        """The Spearman and Pearson ×100 of the whole split and of every subset computed again
        from the pairs under the record's aggregation; the interval drawn again from the pairs,
        rounds and seed; counts agree with the pairs."""
        from harness.core.scoring import score_split

        task, scores, pairs = record["task"], record["scores"], record["pairs"]
        aggregation = record["protocol"]["aggregation"]
        n, labels = task["n_pairs"], pairs["subset"]
        if labels is not None and len(labels) != n:
            return f"pairs.subset has {len(labels)} labels for n_pairs {n}"
        counts = dict(collections.Counter(labels or ()))  # counted in C: thousands of labels
        if counts != task["subsets"]:
            return f"task.subsets {task['subsets']} does not count pairs.subset ({counts})"
        ev = self.evidence(record)
        zeros = int(np.count_nonzero(ev.similarity == 0.0))  # a zero vector's cosine is 0
        if not 0 <= scores["n_zero_vectors"] <= zeros:
            return (
                f"scores.n_zero_vectors {scores['n_zero_vectors']}, but {zeros} of its "
                "similarities are 0"
            )
        try:
            fresh = score_split(ev.similarity, ev.gold, labels, aggregation, bootstrap=0)
        except (ArithmeticError, TypeError, ValueError) as err:
            # Only a hand-made record gets here: the run that wrote a record scored these very
            # pairs with this code (similarities near ±1e308 overflow a subset's Pearson).
            return f"its pairs cannot be scored again ({type(err).__name__}: {str(err)[:80]})"
        if (scores["undefined"] is not None) != (fresh.undefined is not None):
            said = (
                f"undefined ({scores['undefined']})" if scores["undefined"] else scores["spearman"]
            )
            gives = f"undefined ({fresh.undefined})" if fresh.undefined else f"{fresh.spearman:.4f}"
            return f"its Spearman is recorded as {said}, but its own pairs give {gives}"
        for name, stored, computed in (
            ("spearman", scores["spearman"], fresh.spearman),
            ("pearson", scores["pearson"], fresh.pearson),
        ):
            if not agree(stored, computed):
                return (
                    f"scores.{name} {stored} is not what its own {n} pairs give ({shown(computed)})"
                )
        if set(record["subset_scores"]) != set(fresh.subsets):
            return (
                f"subset_scores has {sorted(record['subset_scores'])}, its pairs' subsets are "
                f"{sorted(fresh.subsets)}"
            )
        for label, entry in record["subset_scores"].items():
            again = fresh.subsets[label]
            if entry["n"] != again["n"] or (entry["undefined"] is None) != (
                again["undefined"] is None
            ):
                return (
                    f"subset_scores.{label} is not what its own pairs give (n {again['n']}, "
                    f"{again['undefined']})"
                )
            for name in ("spearman", "pearson"):
                if not agree(entry[name], again[name]):
                    return (
                        f"subset_scores.{label}.{name} {entry[name]} is not what its own pairs "
                        f"give ({shown(again[name])})"
                    )
        problem = _interval_problem(scores) or rounds_problem(scores)
        if problem or scores["spearman"] is None:
            return problem
        ci = score_split(
            ev.similarity,
            ev.gold,
            labels,
            aggregation,
            bootstrap=scores["bootstrap_rounds"],
            seed=scores["bootstrap_seed"],
            memo=memo,
        ).ci95
        return ci_differs("scores.spearman_ci95", scores["spearman_ci95"], ci, scores)


def _interval_problem(scores: Mapping[str, Any]) -> str | None:
    """Why the stored 95 % interval cannot be the interval of the stored Spearman (None: it can)."""
    ci, rho = scores["spearman_ci95"], scores["spearman"]
    if ci is None:
        return None  # no interval (--bootstrap 0, or every resample undefined): nothing to hold
    if rho is None:
        return "an undefined score has an interval"
    if len(ci) != 2:
        return f"scores.spearman_ci95 has {len(ci)} numbers, not 2"
    low, high = ci
    if not low - AGREE <= rho <= high + AGREE:
        return f"its Spearman {rho:.4f} lies outside its own 95 % interval [{low:.4f}, {high:.4f}]"
    if low < -100 - AGREE or high > 100 + AGREE:
        return f"its 95 % interval [{low:.4f}, {high:.4f}] reaches beyond ±100"
    return None


GRADED = GradedPairs(
    [
        Metric("spearman", "Spearman", _correlation("spearman")),
        Metric("pearson", "Pearson", _correlation("pearson")),
    ]
)
