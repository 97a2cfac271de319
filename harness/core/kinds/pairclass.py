"""Labelled pairs (paraphrase, duplicate, entailment: GLUE's MRPC, QQP, QNLI, RTE, MNLI; SNLI;
MTEB's PairClassification): gold is a class index, the similarity is the score a classifier
thresholds, and every metric is ×100 (the math: :mod:`harness.core.pair_metrics`).

Its evidence adds to the pairs the positive class's index, the number of classes, the thresholds
chosen on the task's threshold split (or None), a classifier's own argmax per pair (or None) and
how accuracy / F1 decided (``threshold:<split>``, ``argmax`` or ``none``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from harness.core import pair_metrics as pm
from harness.core.kinds.base import Evidence, Metric, TaskKind


def _positive(ev: Evidence) -> np.ndarray:
    return ev.shared("positive", lambda: ev.gold == ev.extra["positive"])


def _ranked(ev: Evidence) -> pm.Ranked:
    return ev.shared("ranked", lambda: pm.Ranked.of(ev.similarity, _positive(ev)))


def _decided(which: int) -> Any:
    """accuracy (0) or F1 (1) at the threshold chosen on the threshold split, or of the method's
    own argmax; NaN without either."""

    def compute(ev: Evidence, weights: np.ndarray | None) -> np.ndarray:
        predicted, threshold = ev.extra.get("predicted"), ev.extra.get("threshold")
        if predicted is not None:
            chosen = np.asarray(predicted)
            right = chosen == ev.gold if which == 0 else None
            return pm.decided(chosen == ev.extra["positive"], _positive(ev), weights, right)[which]
        if threshold:
            name = ("accuracy", "f1")[which]
            return pm.at_threshold(ev.similarity, _positive(ev), threshold[name], weights)[which]
        return np.full(1 if weights is None else len(weights), np.nan)

    return compute


def _chosen_threshold(name: str) -> Any:
    return lambda ev: (ev.extra.get("threshold") or {}).get(name)


def _best(search: Any) -> Any:
    return lambda ev, weights: search(_ranked(ev), weights)[0]


def _best_threshold(search: Any) -> Any:
    def threshold(ev: Evidence) -> float | None:
        value = float(search(_ranked(ev))[1][0])
        return value if math.isfinite(value) else None

    return threshold


class LabelledPairs(TaskKind):
    name = "pairclass"
    title = "labelled pairs"
    summary = "labelled pairs, ranked by average precision"
    mteb_type = "PairClassification"
    labelled = True
    main_default = "ap"
    evidence_key = "labelled"

    def check_spec(self, spec: Any) -> str | None:
        if len(spec.classes) < 2 or spec.positive not in spec.classes:
            return "a pairclass task names its classes (2 or more) and its positive class"
        if spec.gold_range != (0.0, float(len(spec.classes) - 1)):
            return (
                f"a pairclass task's gold range is the class indices (0, {len(spec.classes) - 1})"
            )
        if spec.threshold_split and spec.threshold_split not in spec.splits:
            return f"its threshold split '{spec.threshold_split}' is not among its splits"
        return super().check_spec(spec)

    def extra_splits(self, spec: Any, thresholds: str) -> tuple[str, ...]:
        return (spec.threshold_split,) if spec.threshold_split and thresholds != "none" else ()

    def task_fields(self, spec: Any) -> dict[str, Any]:
        return {"kind": self.name, "classes": list(spec.classes), "positive": spec.positive}

    def split_evidence(
        self,
        spec: Any,
        split: Any,
        similarity: np.ndarray,
        extras: Mapping[str, tuple[Any, np.ndarray]],
        predicted: np.ndarray | None = None,
    ) -> Evidence:
        """The pairs with the positive class, and either the classifier's argmax or the
        thresholds best on the threshold split (never on the scored one)."""
        ev = super().split_evidence(spec, split, similarity, extras, predicted)
        threshold, decision = None, "argmax" if predicted is not None else "none"
        for name, (rows, values) in extras.items() if predicted is None else ():
            gold = np.asarray(rows.gold, np.float64)
            threshold = pm.choose_thresholds(
                np.asarray(values, np.float64), gold, spec.positive_index
            )
            decision = f"threshold:{name}" if threshold else "none"
        ev.extra = {
            "classes": len(spec.classes),
            "positive": spec.positive_index,
            "threshold": threshold,
            "predicted": None if predicted is None else [int(c) for c in predicted],
            "decision": decision,
        }
        return ev

    def protocol_fields(self, scored: Any) -> dict[str, Any]:
        """How accuracy / F1 decided, and the split whose pairs chose their thresholds (or null)."""
        decision = scored.fields["decision"]
        chosen_on = decision.split(":", 1)[1] if decision.startswith("threshold:") else None
        return {"decision": decision, "threshold_split": chosen_on}

    def gold_problem(self, spec: Any, split: Any, aggregation: str) -> str | None:
        gold = np.asarray(split.gold, dtype=np.float64)
        reason = pm.undefined_reason(None, gold == spec.positive_index)
        if reason and reason.startswith("every pair"):  # one class: check how labels were read
            reason += f"; it needs both classes: check its label column, positive={spec.positive}"
        return reason

    def undefined(self, ev: Evidence) -> str | None:
        return pm.undefined_reason(ev.similarity, _positive(ev))

    def main_undefined(self, main_score: str) -> str:
        if self.metrics[main_score].decision == "decided":
            return f"{main_score}: no threshold split and no decisions of the method's own"
        return super().main_undefined(main_score)

    def score_fields(self, ev: Evidence) -> dict[str, Any]:
        return {
            "decision": ev.extra.get("decision") or _decision(ev.extra),
            "threshold": ev.extra.get("threshold"),
        }

    def evidence_extra(self, record: Mapping[str, Any]) -> dict[str, Any]:
        task, scores = record["task"], record["scores"]
        classes = list(task.get("classes") or [])
        positive = task.get("positive")
        extra = {
            "classes": len(classes),
            "positive": classes.index(positive) if positive in classes else -1,
            "threshold": scores.get("threshold"),
            "predicted": record["pairs"].get("predicted"),
        }
        return {**extra, "decision": scores.get("decision", _decision(extra))}

    def extra_problem(self, extra: Mapping[str, Any], gold: np.ndarray) -> str | None:
        classes, positive = extra.get("classes"), extra.get("positive")
        threshold, predicted = extra.get("threshold"), extra.get("predicted")
        if not isinstance(classes, int) or not isinstance(positive, int):
            return "a labelled-pairs record must say its classes and its positive class"
        if not 0 <= positive < classes:
            return "its positive class is not one of its classes"
        if not np.all(np.isin(gold, np.arange(classes))):
            return "pairs.gold holds a value that is not a class index"
        if threshold is not None and not (
            isinstance(threshold, dict)
            and set(threshold) == {"accuracy", "f1"}
            and all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                for v in threshold.values()
            )
        ):
            return "scores.threshold is not {accuracy: number, f1: number}"
        if predicted is not None and not (
            isinstance(predicted, list)
            and len(predicted) == len(gold)
            and all(type(c) is int and 0 <= c < classes for c in predicted)
        ):
            return "pairs.predicted is not one class index per pair"
        decision = extra.get("decision")
        if (
            not isinstance(decision, str)
            or decision.split(":")[0] != _decision(extra).split(":")[0]
        ):
            return f"scores.decision {decision!r} is not how its evidence decided"
        return None

    def decision_of(self, record: Mapping[str, Any], metric: Metric) -> str:
        if metric.decision == "decided":
            return str(record["scores"].get("decision", ""))
        return "best on the scored split" if metric.on_scored else ""

    def mteb_values(self, ev: Evidence, compared_by: str) -> dict[str, Any]:
        """MTEB's PairClassification keys compared by ``compared_by``: accuracy, F1 with its
        precision and recall at MTEB's best thresholds on these pairs, and AP, as fractions
        (MTEB's evaluator on the same similarities gives the same numbers); ``max_*`` over the
        one similarity sts-bench compared by; ``main_score`` is ``max_ap``."""
        ranked, positive = _ranked(ev), _positive(ev)
        accuracy = float(pm.best_accuracy(ranked)[0][0]) / 100
        f1, threshold = (float(v[0]) for v in pm.best_f1(ranked))
        predicted = ev.similarity >= threshold
        tp = int((predicted & positive).sum())
        precision = tp / int(predicted.sum()) if predicted.any() and math.isfinite(f1) else 0.0
        one = {
            "accuracy": accuracy,
            "f1": f1 / 100 if math.isfinite(f1) else 0.0,
            "precision": precision,
            "recall": tp / int(positive.sum()) if math.isfinite(f1) else 0.0,
            "ap": float(pm.average_precision(ranked)[0]) / 100,
        }
        values = {f"{compared_by}_{k}": v for k, v in one.items()}
        if compared_by == "cosine":  # the model's own similarity function
            values.update({f"similarity_{k}": v for k, v in one.items()})
        values.update({f"max_{k}": v for k, v in one.items()})
        return {**values, "main_score": values["max_ap"]}


def _decision(extra: Mapping[str, Any]) -> str:
    if extra.get("predicted") is not None:
        return "argmax"
    if extra.get("threshold"):
        return f"threshold:{extra.get('threshold_split', '')}"
    return "none"


LABELLED = LabelledPairs(
    [
        Metric("ap", "AP", lambda ev, w: pm.average_precision(_ranked(ev), w)),
        Metric("roc_auc", "ROC AUC", lambda ev, w: pm.roc_auc(_ranked(ev), w)),
        Metric(
            "accuracy",
            "accuracy",
            _decided(0),
            decision="decided",
            threshold=_chosen_threshold("accuracy"),
        ),
        Metric("f1", "F1", _decided(1), decision="decided", threshold=_chosen_threshold("f1")),
        Metric(
            "accuracy_best",
            "accuracy (best threshold §)",
            _best(pm.best_accuracy),
            decision="scored",
            threshold=_best_threshold(pm.best_accuracy),
        ),
        Metric(
            "f1_best",
            "F1 (best threshold §)",
            _best(pm.best_f1),
            decision="scored",
            threshold=_best_threshold(pm.best_f1),
        ),
    ]
)
