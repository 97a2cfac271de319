"""What a task kind is: its metrics, each registered once, and everything a split of that kind is
scored, recorded, verified, compared and exported by (:class:`TaskKind`).

A kind's scores are computed from **evidence** (:class:`Evidence`: each pair's similarity and gold,
the subset labels, and what the kind adds, such as the positive class or the thresholds chosen on
another split); a record keeps the evidence, and every metric is a function of it. A record that
lacks a metric registered after it was written has it computed on read (:meth:`TaskKind.verify`).

A :class:`Metric` computes one value per row of bootstrap draw counts (``weights``, (B, n), as
:mod:`harness.core.bootstrap` draws them; None: the split itself), so one function gives the score
and its resamples, and two methods' resamples of one split are paired draw by draw.

>>> import numpy as np
>>> mean_gold = Metric("mean_gold", "mean gold", lambda ev, w: np.atleast_2d(
...     np.ones(len(ev.gold)) if w is None else w) @ ev.gold / len(ev.gold), unit="")
>>> ev = Evidence(np.array([0.1, 0.5, 0.9]), np.array([1.0, 2.0, 3.0]))
>>> float(mean_gold.compute(ev, None)[0]), mean_gold.axis
(2.0, 'mean gold')
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.core import bootstrap

# ×100 points. A score recomputed by the same code from the same floats agrees to ~1e-13; a looser
# bound only absorbs another numpy's summation order, and no edit worth making hides inside it.
AGREE = 1e-6
# How a metric's decisions are made: "" it ranks the similarities (no decision); "decided" at a
# threshold chosen on another split, or by the method's own argmax; "scored" at a threshold chosen
# on the scored split itself (a selection on the pairs it scores: § wherever it is shown).
DECISIONS = ("", "decided", "scored")


@dataclass
class Evidence:
    """What a split's scores are computed from: each pair's similarity (NaN where a method gave a
    non-finite one) and gold, the subset labels (None: no subsets) and the kind's own ``extra``
    (JSON values: labelled pairs' positive class index, thresholds, a classifier's decisions).
    ``derived`` holds what metrics share (a sort by similarity), computed once."""

    similarity: np.ndarray
    gold: np.ndarray
    subsets: Sequence[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    derived: dict[str, Any] = field(default_factory=dict, repr=False)

    def shared(self, name: str, make: Callable[[], Any]) -> Any:
        """``make()`` once per evidence: what several metrics derive from the same pairs."""
        if name not in self.derived:
            self.derived[name] = make()
        return self.derived[name]


@dataclass(frozen=True)
class Metric:
    """One score of a kind, registered once: its ``name`` (records, CSVs, ``metric=``), ``title``
    and ``unit`` (tables, axes, headers), whether higher is better, how its decisions are made
    (:data:`DECISIONS`), ``compute(evidence, weights)`` (one value per row of ``weights``; the
    resampled form for intervals and paired tests) and, for a thresholded metric, ``threshold``
    (the threshold its value was taken at, from the evidence)."""

    name: str
    title: str
    compute: Callable[[Evidence, np.ndarray | None], np.ndarray]
    unit: str = "×100"
    higher_is_better: bool = True
    decision: str = ""
    threshold: Callable[[Evidence], float | None] | None = None

    @property
    def axis(self) -> str:
        """The metric as an axis or header names it: ``AP ×100``."""
        return f"{self.title} {self.unit}".strip()

    @property
    def on_scored(self) -> bool:
        """Chosen on the scored split itself: shown with §."""
        return self.decision == "scored"


@dataclass(frozen=True)
class Scored:
    """One split's scores under a kind: every metric's value and 95 % interval (None: undefined,
    or no interval), the main one's name, why the split is undefined (None: defined) and the
    kind's own fields of ``record["scores"]`` (``fields``: labelled pairs' decision and
    thresholds) and the scores of each subset (``subsets``: ``record["subset_scores"]``)."""

    main_score: str
    metrics: dict[str, dict[str, Any]]
    n_pairs: int
    n_zero_vectors: int = 0
    undefined: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    subsets: dict[str, Any] = field(default_factory=dict)

    @property
    def main(self) -> float | None:
        return self.metrics[self.main_score]["value"]


def agree(stored: Any, computed: Any) -> bool:
    """Both undefined, or both numbers within :data:`AGREE`."""
    if stored is None or computed is None:
        return stored is None and computed is None
    return abs(float(stored) - float(computed)) <= AGREE


def shown(value: Any) -> str:
    return "undefined" if value is None else f"{float(value):.4f}"


def rounds_problem(scores: Mapping[str, Any]) -> str | None:
    """Why ``bootstrap_rounds`` / ``bootstrap_seed`` cannot be what an interval was drawn with."""
    rounds, seed = scores["bootstrap_rounds"], scores["bootstrap_seed"]
    problem = "not a count" if rounds < 0 else bootstrap.rounds_problem(rounds)  # the CLI's rule
    if problem:
        return f"scores.bootstrap_rounds {rounds}: {problem}"
    if not 0 <= seed < 2**32:
        return f"scores.bootstrap_seed {seed} is not a 32-bit seed"
    return None


def ci_differs(
    name: str, stored: list[float] | None, fresh: Any, scores: Mapping[str, Any]
) -> str | None:
    """Why ``stored`` is not the interval ``fresh`` recomputed (None: both absent, or equal within
    :data:`AGREE`)."""
    fresh = None if fresh is None else [float(fresh[0]), float(fresh[1])]
    if stored is None and fresh is None:
        return None
    if stored is not None and fresh is not None and all(map(agree, stored, fresh)):
        return None
    said = "none" if stored is None else f"[{stored[0]:.4f}, {stored[1]:.4f}]"
    gives = "none" if fresh is None else f"[{fresh[0]:.4f}, {fresh[1]:.4f}]"
    return (
        f"{name} {said} is not the 95 % interval its own pairs give with "
        f"{scores['bootstrap_rounds']} resamples and seed {scores['bootstrap_seed']} ({gives})"
    )


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


class TaskKind:
    """A task kind: graded pairs ranked by Spearman, labelled pairs ranked by AP, or one a test or
    a plugin registers. Its metrics (:class:`Metric`) are registered once; the default behaviour
    below scores, records, verifies, compares and exports any kind whose metrics are functions of
    the evidence, and a kind overrides what differs (STS keeps its subset aggregation and its
    record fields; labelled pairs add classes, thresholds and decisions).

    ``name`` is the kind's ``TaskSpec.kind``; ``title`` what tables call its tasks; ``summary`` the
    line ``sts-bench list tasks`` prints; ``mteb_type`` its MTEB task type ("" where MTEB has
    none); ``labelled`` whether gold values are class indices (a classifier may decide them)."""

    name = ""
    title = ""
    summary = ""
    mteb_type = ""
    labelled = False
    main_default = ""
    # the key a history line's gold blob keeps the kind's own evidence under (default: its name)
    evidence_key = ""

    def __init__(self, metrics: Sequence[Metric] = ()) -> None:
        self.evidence_key = self.evidence_key or self.name
        self.metrics: dict[str, Metric] = {}
        for metric in metrics:
            self.add_metric(metric)

    def add_metric(self, metric: Metric) -> Metric:
        """Register one more metric: every split of this kind is scored by it from now on, and a
        record written before it has it computed from its pairs when read."""
        from harness.core.errors import UserError

        if metric.name in self.metrics or metric.decision not in DECISIONS:
            raise UserError(
                f"cannot register metric '{metric.name}' of kind '{self.name}': "
                + ("the name is taken" if metric.name in self.metrics else "unknown decision")
            )
        self.metrics[metric.name] = metric
        return metric

    def metric(self, name: str) -> Metric:
        return self.metrics[name]

    # -- the task ------------------------------------------------------------------------------

    def check_spec(self, spec: Any) -> str | None:
        """Why ``spec`` (a ``TaskSpec`` of this kind) cannot be registered (None: it can)."""
        if spec.main_score not in self.metrics:
            return (
                f"main score '{spec.main_score}': a {self.name} task is ranked by one of "
                f"{', '.join(self.metrics)}"
            )
        return None

    def extra_splits(self, spec: Any, thresholds: str) -> tuple[str, ...]:
        """The splits besides the scored one that its scores read (their rows enter the
        fingerprint and the record); ``thresholds`` is the run's ``--pair-thresholds``."""
        return ()

    def task_fields(self, spec: Any) -> dict[str, Any]:
        """What ``record["task"]`` says of the kind."""
        return {"kind": self.name}

    def split_evidence(
        self,
        spec: Any,
        split: Any,
        similarity: np.ndarray,
        extras: Mapping[str, tuple[Any, np.ndarray]],
        predicted: np.ndarray | None = None,
    ) -> Evidence:
        """The evidence of a scored split (a ``SplitData``) and its pairs' similarities;
        ``extras``: each extra split read (:meth:`extra_splits`) with its similarities;
        ``predicted``: a classifier's argmax class per pair."""
        gold = np.asarray(split.gold, dtype=np.float64)
        return Evidence(np.asarray(similarity, dtype=np.float64), gold, split.subsets)

    def protocol_fields(self, scored: Scored) -> dict[str, Any]:
        """What ``record["protocol"]`` says of how the kind scored (labelled pairs: how accuracy
        and F1 decided)."""
        return {}

    # -- scoring --------------------------------------------------------------------------------

    def undefined(self, ev: Evidence) -> str | None:
        """Why the split cannot be scored at all (None: it can)."""
        from harness.core.scoring import similarity_undefined

        if len(ev.gold) < 2:
            return f"fewer than 2 pairs ({len(ev.gold)})"
        return similarity_undefined(ev.similarity)

    def gold_problem(self, spec: Any, split: Any, aggregation: str) -> str | None:
        """Why a split's score is undefined whatever the method (None: it may be defined)."""
        return None if len(split.gold) >= 2 else f"fewer than 2 pairs ({len(split.gold)})"

    def values(self, ev: Evidence, weights: np.ndarray | None) -> dict[str, np.ndarray]:
        """Every metric of the evidence, one value per row of ``weights``."""
        return {name: metric.compute(ev, weights) for name, metric in self.metrics.items()}

    def resamples(
        self, ev: Evidence, rounds: int, seed: int, memo: Any = None
    ) -> dict[str, np.ndarray]:
        """Every metric of ``rounds`` bootstrap resamples of the pairs (the draws every kind and
        method of a split of this size and seed share), memoised per metric under the content of
        all it depends on: a metric registered later adds its own resamples to the memo."""
        from harness.core.bootstrap import ResampleMemo, _count_chunks, check_fits
        from harness.core.codekeys import code_digest

        memo = ResampleMemo(None) if memo is None else memo
        digest = hashlib.sha256(np.ascontiguousarray(ev.similarity, dtype=np.float64).data)
        digest.update(np.ascontiguousarray(ev.gold, dtype=np.float64).data)
        digest.update(repr([self.name, rounds, seed, sorted(ev.extra.items())]).encode())
        digest.update(code_digest(type(self).__module__).encode())
        digest.update(code_digest("harness.core.bootstrap").encode())
        key = "k" + digest.hexdigest()[:38]
        names = list(self.metrics)

        def compute() -> list[np.ndarray]:
            step = check_fits(len(ev.gold), rounds)
            out = {name: np.empty(rounds) for name in names}
            for r0, (counts,) in _count_chunks([np.arange(len(ev.gold))], rounds, seed, step):
                for name, values in self.values(ev, counts).items():
                    out[name][r0 : r0 + len(counts)] = values
            return [out[name] for name in names]

        keys = [f"{key}{name}" for name in names]
        return dict(zip(names, memo.recall(keys, rounds, compute)))

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
        """Every metric with its percentile interval over ``bootstrap`` resamples; a split that
        cannot be scored has every metric None, with the reason."""
        from harness.core.bootstrap import check_fits, percentile_interval

        check_fits(len(ev.gold), bootstrap)
        fields = self.score_fields(ev)
        undefined = self.undefined(ev)
        if undefined:
            empty = {name: {"value": None, "ci95": None} for name in self.metrics}
            return Scored(main_score, empty, len(ev.gold), n_zero, undefined, fields)
        values = self.values(ev, None)
        resamples = self.resamples(ev, bootstrap, seed, memo) if bootstrap > 0 else None
        metrics: dict[str, dict[str, Any]] = {}
        for name in self.metrics:
            value, ci = _finite(float(values[name][0])), None
            if resamples is not None and value is not None:
                low, high = percentile_interval(resamples[name])
                if math.isfinite(low) and math.isfinite(high):
                    # an interval that excludes its own estimate says nothing true
                    ci = [min(low, value), max(high, value)]
            metrics[name] = {"value": value, "ci95": ci}
        scored = Scored(main_score, metrics, len(ev.gold), n_zero, None, fields)
        if scored.main is None:
            return Scored(
                main_score, metrics, len(ev.gold), n_zero, self.main_undefined(main_score), fields
            )
        return scored

    def main_undefined(self, main_score: str) -> str:
        """Why the main score is undefined on a split whose pairs can be scored."""
        return f"{main_score}: undefined"

    def score_fields(self, ev: Evidence) -> dict[str, Any]:
        """The kind's own fields of ``record["scores"]`` beside the metrics."""
        return {}

    # -- the record -----------------------------------------------------------------------------

    def scores_field(self, scored: Scored, bootstrap: int, seed: int) -> dict[str, Any]:
        """``record["scores"]``: the main score, every metric with its interval, the resampling
        that drew them and the kind's own fields."""
        return {
            "spearman": None,
            "pearson": None,
            "spearman_ci95": None,
            "bootstrap_rounds": bootstrap,
            "bootstrap_seed": seed,
            "n_zero_vectors": scored.n_zero_vectors,
            "undefined": scored.undefined,
            "main_score": scored.main_score,
            "metrics": scored.metrics,
            **scored.fields,
        }

    def main_score(self, record: Mapping[str, Any]) -> str:
        return str(record["scores"].get("main_score", self.main_default))

    def metric_entry(self, record: Mapping[str, Any], name: str) -> dict[str, Any]:
        """``{"value", "ci95"}`` of one metric of a record (both None where it has none)."""
        entry = (record["scores"].get("metrics") or {}).get(name)
        return dict(entry) if isinstance(entry, dict) else {"value": None, "ci95": None}

    def evidence_extra(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """The kind's own evidence as a record keeps it (what a history line stores beside its
        similarities and gold)."""
        return {}

    def evidence(self, record: Mapping[str, Any]) -> Evidence:
        """A record's evidence (its pairs and the kind's own fields)."""
        pairs = record["pairs"]
        raw = pairs["similarity"]
        return Evidence(
            np.asarray([math.nan if v is None else v for v in raw], dtype=np.float64),
            np.asarray(pairs["gold"], dtype=np.float64),
            pairs.get("subset"),
            self.evidence_extra(record),
        )

    def extra_problem(self, extra: Mapping[str, Any], gold: np.ndarray) -> str | None:
        """Why a record's or history line's own evidence is malformed (None: it is not)."""
        return None

    def verify(self, record: dict[str, Any], memo: Any = None) -> str | None:
        """Why ``record``'s scores are not what its evidence gives (None: they are). Every metric
        is computed again from the pairs and must agree; a metric the record lacks (registered
        after it was written) is computed and added; one this kind does not register is dropped;
        every interval is drawn again from the pairs, rounds and seed."""
        scores = record["scores"]
        stored = scores.get("metrics")
        if not isinstance(stored, dict) or scores.get("main_score") not in self.metrics:
            return f"a {self.name} record must name its metrics and one of them as main_score"
        ev = self.evidence(record)
        problem = self.extra_problem(ev.extra, ev.gold) or rounds_problem(scores)
        if problem:
            return problem
        again = self.score(
            ev, scores["main_score"], scores["bootstrap_rounds"], scores["bootstrap_seed"], 0, memo
        )
        if again.fields != {k: scores.get(k) for k in again.fields}:
            return f"scores {sorted(again.fields)} are not what its own evidence gives"
        if (again.undefined is None) != (scores["undefined"] is None):
            return "scores.undefined does not say whether its main score is defined"
        for name in self.metrics:
            if name not in stored:  # registered after the record was written: computed on read
                stored[name] = again.metrics[name]
                continue
            entry, fresh = stored[name], again.metrics[name]
            if not isinstance(entry, dict) or set(entry) != {"value", "ci95"}:
                return f"scores.metrics.{name} is not {{value, ci95}}"
            if not agree(entry["value"], fresh["value"]):
                return (
                    f"scores.metrics.{name} {entry['value']} is not what its own "
                    f"{len(ev.gold)} pairs give ({shown(fresh['value'])})"
                )
            problem = ci_differs(
                f"scores.metrics.{name}.ci95", entry["ci95"], fresh["ci95"], scores
            )
            if problem:
                return problem
        for name in [name for name in stored if name not in self.metrics]:
            del stored[name]  # not a metric of this version: nothing here can verify it
        return None

    def main_value(self, record: Mapping[str, Any]) -> float | None:
        return self.metric_entry(record, self.main_score(record))["value"]

    def main_ci(self, record: Mapping[str, Any]) -> list[float] | None:
        return self.metric_entry(record, self.main_score(record))["ci95"]

    # -- reports --------------------------------------------------------------------------------

    def metric_rows(self, record: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One row per metric of a record (``pair_metrics.csv``): value, interval, the decision
        and threshold a thresholded metric was taken at."""
        ev = self.evidence(record)
        rows = []
        for name, metric in self.metrics.items():
            entry = self.metric_entry(record, name)
            ci = entry["ci95"] or [None, None]
            threshold = metric.threshold(ev) if metric.threshold is not None else None
            rows.append(
                {
                    "metric": name,
                    "metric_name": metric.title,
                    "value": entry["value"],
                    "ci_low": ci[0],
                    "ci_high": ci[1],
                    "decision": self.decision_of(record, metric),
                    "threshold": threshold,
                }
            )
        return rows

    def decision_of(self, record: Mapping[str, Any], metric: Metric) -> str:
        """How ``metric``'s decisions were made in ``record`` (a pair_metrics.csv column)."""
        return "scored split" if metric.on_scored else ("" if not metric.decision else "none")

    def comparable(
        self, record: Mapping[str, Any], rounds: int, seed: int, memo: Any = None
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """A record's similarities and its metrics' resamples, drawn as every method's of the
        split are (paired draw by draw; memoised: the run drew them for the record's intervals)."""
        ev = self.evidence(record)
        return ev.similarity, self.resamples(ev, rounds, seed, memo)

    def comparison_tests(self) -> tuple[str, ...]:
        """Tests of two methods on one split beside the paired bootstrap of the main score:
        ``"williams"`` (Williams' t, for correlations with gold) and ``"metrics"`` (a paired
        bootstrap of every other metric)."""
        return ("metrics",)

    def mteb_values(self, ev: Evidence, compared_by: str) -> dict[str, Any]:
        """One subset's scores as an MTEB result file holds them (fractions, ``main_score``)."""
        values = {
            f"{compared_by}_{name}": _finite(float(v[0]) / 100)
            for name, v in self.values(ev, None).items()
        }
        values["main_score"] = values.get(f"{compared_by}_{self.main_default}")
        return values
