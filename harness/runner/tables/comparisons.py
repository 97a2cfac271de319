"""Paired tests between every two methods scored on the same pairs, rebuilt from result files.

Two rows of one protocol group that scored the same split (same task fingerprint) are compared
with a paired bootstrap (the same resamples for both) and Williams' t
(:mod:`harness.core.significance`). ``significance.csv`` holds every comparison; the leaderboard
marks, per task, the best row and every row not significantly below it (paired bootstrap p ≥ 0.05).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.hashing import atomic_write_text
from harness.runner.records.schema import main_score, main_value
from harness.runner.tables.frames import GROUP_KEYS, ROW_KEYS, newest, record_keys

if TYPE_CHECKING:
    from harness.core.bootstrap import ResampleMemo
    from harness.runner.records.schema import Record

ALPHA = 0.05
COLUMNS = (
    "task",
    "method_a",
    "method_b",
    "delta",
    "ci_low",
    "ci_high",
    "p_value",
    "test",
    "backbone_a",
    "backbone_b",
    "fit_set_a",
    "fit_set_b",
    *GROUP_KEYS,
)
Mark = tuple[tuple[str, ...], tuple[str, ...], str]  # (protocol group, row, task title)


def comparisons(
    records: Iterable[Record],
    rounds: int = 1000,
    seed: int = 1234,
    memo: ResampleMemo | None = None,
) -> tuple[list[dict[str, Any]], set[Mark]]:
    """Every pairwise comparison (rows of :data:`COLUMNS`), and the (group, row, task) cells not
    significantly below the best. ``memo``: the run's resampled scores (its records' intervals
    were resampled into it, so a run resamples each method once); None keeps nothing."""
    from harness.core.significance import paired_bootstrap, scored, williams

    by_split: dict[tuple, list[Record]] = {}
    for rec in newest(records):
        if rec.get("pairs") and main_value(rec) is not None:  # an undefined score is never compared
            keys = record_keys(rec)
            group = tuple(keys[k] for k in GROUP_KEYS)
            by_split.setdefault(
                (group, rec["task"]["title"], rec["task"]["fingerprint"]), []
            ).append(rec)
    rows, marks = [], set()
    for (group, task, _), recs in sorted(by_split.items(), key=lambda item: item[0][:2]):
        pairs = recs[0]["pairs"]
        labelled = "metrics" in recs[0]["scores"]
        results = {
            id(r): (
                labelled_scored(r, rounds, seed, memo)
                if labelled
                else scored(
                    np.asarray(r["pairs"]["similarity"], dtype=np.float64),
                    pairs["gold"],
                    pairs["subset"],
                    group[0],
                    rounds,
                    seed,
                    memo,
                )
            )
            for r in recs
        }
        ranked = sorted(recs, key=lambda r: -results[id(r)].spearman)
        best = ranked[0]
        for a, b in combinations(ranked, 2):
            ka, kb = record_keys(a), record_keys(b)
            tests = [paired_bootstrap(results[id(a)], results[id(b)])]
            if not labelled:  # Williams' t compares correlations; a labelled score is not one
                tests.append(williams(results[id(a)], results[id(b)], pairs["gold"]))
            else:  # every other metric of labelled pairs, on the same paired draws
                tests += other_metrics(a, b, rounds, seed, memo)
            for test in tests:
                rows.append(
                    {
                        "task": task,
                        "method_a": ka["method"],
                        "method_b": kb["method"],
                        "delta": test.delta,
                        "ci_low": test.ci_low,
                        "ci_high": test.ci_high,
                        "p_value": test.p_value,
                        "test": test.test,
                        "backbone_a": ka["backbone"],
                        "backbone_b": kb["backbone"],
                        "fit_set_a": ka["fit_set"],
                        "fit_set_b": kb["fit_set"],
                        **dict(zip(GROUP_KEYS, group)),
                    }
                )
        for rec in ranked:
            keys = record_keys(rec)
            tied = (
                rec is best
                or paired_bootstrap(results[id(best)], results[id(rec)]).p_value >= ALPHA
            )
            if tied:
                marks.add((group, tuple(keys[k] for k in ROW_KEYS), task))
    return rows, marks


def labelled_scored(rec: Record, rounds: int, seed: int, memo: ResampleMemo | None) -> Any:
    """A labelled-pairs record as :func:`harness.core.significance.paired_bootstrap` compares it:
    its main score and that score's resamples, drawn as every method's of the split are (the same
    draws: paired)."""
    from harness.core.significance import Scored

    similarity, resamples = _labelled_resamples(rec, rounds, seed, memo)
    return Scored(similarity, float(main_value(rec)), resamples[main_score(rec)])  # type: ignore[arg-type]


def other_metrics(
    a: Record, b: Record, rounds: int, seed: int, memo: ResampleMemo | None
) -> list[Any]:
    """Paired bootstraps of A − B on each labelled-pairs metric but the main one (whose test
    decides ★), where both define it; the test column names the metric
    (``paired bootstrap (B=1000) of roc_auc``)."""
    from dataclasses import replace

    from harness.core.pair_metrics import METRICS
    from harness.core.significance import Scored, paired_bootstrap

    out = []
    sides = [_labelled_resamples(rec, rounds, seed, memo) for rec in (a, b)]
    for name in METRICS:
        values = [rec["scores"]["metrics"][name]["value"] for rec in (a, b)]
        if name == main_score(a) or values[0] is None or values[1] is None:
            continue
        first, second = (
            Scored(side[0], float(v or 0.0), side[1][name]) for side, v in zip(sides, values)
        )
        test = paired_bootstrap(first, second)
        out.append(replace(test, test=f"{test.test} of {name}"))
    return out


def _labelled_resamples(
    rec: Record, rounds: int, seed: int, memo: ResampleMemo | None
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """A labelled-pairs record's similarities and every metric's resamples (memoised: the run
    resampled them once for the record's intervals)."""
    from harness.core.pair_metrics import Decisions, resampled_metrics

    task, scores, pairs = rec["task"], rec["scores"], rec["pairs"]
    index = task["classes"].index(task["positive"])
    similarity = np.asarray(pairs["similarity"], dtype=np.float64)
    gold = np.asarray(pairs["gold"], dtype=np.float64)
    predicted = pairs.get("predicted")
    decisions = (
        None if predicted is None else Decisions(np.asarray(predicted), len(task["classes"]))
    )
    resamples = resampled_metrics(
        similarity, gold, index, rounds, seed, scores.get("threshold") or None, decisions, memo
    )
    return similarity, resamples


def write_significance(rows: list[dict[str, Any]], out_dir: Path) -> Path:
    """significance.csv: numbers with 6 significant digits, a missing one (Williams' t has no
    interval) as an empty cell."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow(
            [
                ""
                if isinstance(v := row[c], float) and math.isnan(v)
                else f"{v:.6g}"
                if isinstance(v, float)
                else v
                for c in COLUMNS
            ]
        )
    path = out_dir / "significance.csv"
    atomic_write_text(path, buffer.getvalue())
    return path


NUMERIC = ("delta", "ci_low", "ci_high", "p_value")


def read_back(out_dir: Path) -> tuple[list[dict[str, Any]], set[Mark]]:
    """significance.csv (one dict per row; its numbers as floats, NaN where empty) and the ★ marks
    (leaderboard.csv's ``not_below_best``) as written to ``out_dir``: what the report page shows,
    without recomputing a resample when the reports came from the cache. Read with :mod:`csv`, so a
    warm re-run whose reports came from the cache never imports pandas."""
    with (out_dir / "significance.csv").open(encoding="utf-8", newline="") as handle:
        table = [
            {k: _number(v) if k in NUMERIC else v for k, v in row.items()}
            for row in csv.DictReader(handle)
        ]
    with (out_dir / "leaderboard.csv").open(encoding="utf-8", newline="") as handle:
        board = list(csv.DictReader(handle))
    marks = {
        (tuple(row[k] for k in GROUP_KEYS), tuple(row[k] for k in ROW_KEYS), task)
        for row in board
        for task in (row.get("not_below_best") or "").split(",")
        if task
    }
    return table, marks


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan
