"""Paired tests between every two methods scored on the same pairs, rebuilt from result files.

Two rows of one protocol group that scored the same split (same task fingerprint) are compared
with a paired bootstrap (the same resamples for both) and Williams' t
(:mod:`harness.core.significance`). ``significance.csv`` holds every comparison; the leaderboard
marks, per task, the best row and every row not significantly below it (paired bootstrap p ≥ 0.05).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.hashing import atomic_write_text
from harness.core.kinds import TaskKind, kind_of
from harness.runner.records.schema import data_fingerprints, main_score, main_value
from harness.runner.tables.frames import GROUP_KEYS, ROW_KEYS, csv_text, newest, record_keys

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


def compare(
    records: Iterable[Record],
    rounds: int = 1000,
    seed: int = 1234,
    memo: ResampleMemo | None = None,
) -> tuple[list[dict[str, Any]], set[Mark], dict[tuple, dict[str, float]]]:
    """Every pairwise comparison (rows of :data:`COLUMNS`), the (group, row, task) cells not
    significantly below the best, the Avg. column's included, and each row's average over its
    group's tasks as an estimate (:func:`averages`: its interval and its rank interval, by (group,
    row key)). ``memo``: the run's resampled scores (its records' intervals were resampled into it,
    so a run resamples each method once); None keeps nothing."""
    from harness.core.significance import Scored, paired_bootstrap, williams

    per_row: dict[tuple, dict[str, Any]] = {}  # (group, row key) → task → its Scored
    group_tasks: dict[tuple, set[str]] = {}
    everything = newest(records)
    for rec in everything:
        keys = record_keys(rec)
        group_tasks.setdefault(tuple(keys[k] for k in GROUP_KEYS), set()).add(rec["task"]["title"])

    by_split: dict[tuple, list[Record]] = {}
    for rec in everything:
        if rec.get("pairs") and main_value(rec) is not None:  # an undefined score is never compared
            keys = record_keys(rec)
            group = tuple(keys[k] for k in GROUP_KEYS)
            data = next(iter(data_fingerprints(rec).values()))  # not its threshold split's
            by_split.setdefault((group, rec["task"]["title"], data), []).append(rec)
    rows, marks = [], set()
    for (group, task, _), recs in sorted(by_split.items(), key=lambda item: item[0][:2]):
        pairs = recs[0]["pairs"]
        kind = kind_of(recs[0])
        sides = {id(r): kind.comparable(r, rounds, seed, memo) for r in recs}
        results = {
            id(r): Scored(sides[id(r)][0], float(main_value(r)), sides[id(r)][1][main_score(r)])  # type: ignore[arg-type]
            for r in recs
        }
        for r in recs:
            keys = record_keys(r)
            per_row.setdefault((group, tuple(keys[k] for k in ROW_KEYS)), {})[task] = results[id(r)]
        ranked = sorted(recs, key=lambda r: -results[id(r)].spearman)
        best = ranked[0]
        for a, b in combinations(ranked, 2):
            ka, kb = record_keys(a), record_keys(b)
            tests = [paired_bootstrap(results[id(a)], results[id(b)])]
            if "williams" in kind.comparison_tests():  # correlations with one shared gold
                tests.append(williams(results[id(a)], results[id(b)], pairs["gold"]))
            if "metrics" in kind.comparison_tests():  # every other metric, the same paired draws
                tests += other_metrics(kind, (a, b), (sides[id(a)], sides[id(b)]))
            rows += [comparison_row(task, ka, kb, test, test.test, group) for test in tests]
        for rec in ranked:
            keys = record_keys(rec)
            tied = (
                rec is best
                or paired_bootstrap(results[id(best)], results[id(rec)]).p_value >= ALPHA
            )
            if tied:
                marks.add((group, tuple(keys[k] for k in ROW_KEYS), task))
    summary: dict[tuple, dict[str, float]] = {}
    for group, tasks in sorted(group_tasks.items()):
        complete = {
            key: scores
            for (g, key), scores in per_row.items()
            if g == group and set(scores) == tasks
        }
        summary.update({(group, key): v for key, v in averages(complete, sorted(tasks)).items()})
        rows += average_tests(group, complete, sorted(tasks), marks)
    return rows, marks, summary


def comparison_row(
    task: str, ka: dict[str, Any], kb: dict[str, Any], test: Any, name: str, group: tuple
) -> dict[str, Any]:
    """A row of :data:`COLUMNS`: ``test`` (a paired test's result, called ``name``) of the row
    keyed ``ka`` against the row keyed ``kb`` in protocol group ``group``."""
    return {
        "task": task,
        "method_a": ka["method"],
        "method_b": kb["method"],
        "delta": test.delta,
        "ci_low": test.ci_low,
        "ci_high": test.ci_high,
        "p_value": test.p_value,
        "test": name,
        "backbone_a": ka["backbone"],
        "backbone_b": kb["backbone"],
        "fit_set_a": ka["fit_set"],
        "fit_set_b": kb["fit_set"],
        **dict(zip(GROUP_KEYS, group)),
    }


def average_of(scores: dict[str, Any], tasks: list[str]) -> Any:
    """A row's average over ``tasks`` as a :class:`~harness.core.significance.Scored`: the mean of
    its task scores, and per resample the mean of its tasks' resampled scores (each task resampled
    within its own pairs, by its own draws)."""
    from harness.core.significance import Scored

    point = float(np.mean([scores[t].spearman for t in tasks]))
    resamples = np.mean([scores[t].resamples for t in tasks], axis=0)
    return Scored(np.empty(0), point, resamples)


def averages(rows: dict[tuple, dict[str, Any]], tasks: list[str]) -> dict[tuple, dict[str, float]]:
    """Each row's average over ``tasks`` with its 95 % percentile interval, and its rank (1 = the
    highest average) with the 95 % interval of its rank over the same resamples: in resample b the
    rank of a row is 1 + the rows whose average in b is higher. A rank interval of one value is a
    settled rank.

    Worked example (the unit test's): rows A and B on tasks T1, T2 with 4 resamples::

        A: T1 80 (resamples 79 81 80 78), T2 70 (71 69 70 72) → Avg. 75, resamples 75 75 75 75
        B: T1 70 (70 72 69 70),           T2 79 (80 78 81 79) → Avg. 74.5, resamples 75 75 75 74.5
        ranks of A over the resamples: 1 1 1 1 (ties count as not higher) → rank 1, interval 1–1
        ranks of B: 1 1 1 2 → rank 2 (by its average), interval 1–2
    """
    from harness.core.bootstrap import percentile_interval

    out: dict[tuple, dict[str, float]] = {}
    if not rows:
        return out
    keys = list(rows)
    mean = {key: average_of(rows[key], tasks) for key in keys}
    matrix = np.array([mean[key].resamples for key in keys])  # rows × resamples
    usable = np.all(np.isfinite(matrix), axis=0)
    matrix = matrix[:, usable]
    points = np.array([mean[key].spearman for key in keys])
    # rank 1 + the rows strictly above: a tie shares the better rank
    ranks = 1 + (matrix[None, :, :] > matrix[:, None, :]).sum(axis=1)
    point_ranks = 1 + (points[None, :] > points[:, None]).sum(axis=1)
    for i, key in enumerate(keys):
        low, high = percentile_interval(mean[key].resamples)
        value = mean[key].spearman
        entry = {"avg": value, "avg_ci_low": math.nan, "avg_ci_high": math.nan}
        if math.isfinite(low) and math.isfinite(high):
            entry.update(avg_ci_low=min(low, value), avg_ci_high=max(high, value))
        rank = int(point_ranks[i])
        if matrix.shape[1]:
            rank_low = int(np.percentile(ranks[i], 2.5, method="lower"))
            rank_high = int(np.percentile(ranks[i], 97.5, method="higher"))
        else:
            rank_low = rank_high = rank
        entry.update(rank=rank, rank_low=min(rank_low, rank), rank_high=max(rank_high, rank))
        out[key] = entry
    return out


def average_tests(
    group: tuple, rows: dict[tuple, dict[str, Any]], tasks: list[str], marks: set[Mark]
) -> list[dict[str, Any]]:
    """The paired test of every two rows on their average (significance.csv rows of task
    ``Avg.``), and the Avg. cells best or not significantly below the best (added to ``marks``)."""
    from harness.core.significance import paired_bootstrap
    from harness.runner.tables.frames import AVG

    if not rows:
        return []
    mean = {key: average_of(scores, tasks) for key, scores in rows.items()}
    ranked = sorted(mean, key=lambda key: -mean[key].spearman)
    out = []
    for a, b in combinations(ranked, 2):
        test = paired_bootstrap(mean[a], mean[b])
        ka, kb = dict(zip(ROW_KEYS, a)), dict(zip(ROW_KEYS, b))
        name = f"{test.test} of the average over {len(tasks)} task(s)"
        out.append(comparison_row(AVG, ka, kb, test, name, group))
    best = ranked[0]
    for key in ranked:
        if key == best or paired_bootstrap(mean[best], mean[key]).p_value >= ALPHA:
            marks.add((group, key, AVG))
    return out


def other_metrics(kind: TaskKind, pair: tuple[Record, Record], sides: tuple) -> list[Any]:
    """Paired bootstraps of A − B on each metric of the kind but the main one (whose test decides
    ★), where both define it; the test column names the metric (``paired bootstrap (B=1000) of
    roc_auc``). ``sides``: each record's similarities and every metric's resamples."""
    from dataclasses import replace

    from harness.core.significance import Scored, paired_bootstrap

    out = []
    for name in kind.metrics:
        values = [kind.metric_entry(rec, name)["value"] for rec in pair]
        if name == main_score(pair[0]) or values[0] is None or values[1] is None:
            continue
        first, second = (
            Scored(side[0], float(v or 0.0), side[1][name]) for side, v in zip(sides, values)
        )
        test = paired_bootstrap(first, second)
        out.append(replace(test, test=f"{test.test} of {name}"))
    return out


def write_significance(rows: list[dict[str, Any]], out_dir: Path) -> Path:
    """significance.csv: numbers with 6 significant digits, a missing one (Williams' t has no
    interval) as an empty cell."""
    path = out_dir / "significance.csv"
    atomic_write_text(path, csv_text(rows, COLUMNS, ".6g"))
    return path


NUMERIC = ("delta", "ci_low", "ci_high", "p_value")


def read_ranks(out_dir: Path) -> dict[tuple, dict[str, float]]:
    """Each row's rank and Avg. interval as leaderboard.csv holds them (what :func:`compare`
    computed), by (group, row key): the page shows them without resampling again."""
    from harness.runner.tables.frames import RANK_COLUMNS

    with (out_dir / "leaderboard.csv").open(encoding="utf-8", newline="") as handle:
        board = list(csv.DictReader(handle))
    return {
        (tuple(row[k] for k in GROUP_KEYS), tuple(row[k] for k in ROW_KEYS)): {
            c: _number(row.get(c) or "") for c in RANK_COLUMNS
        }
        for row in board
        if all(k in row for k in (*GROUP_KEYS, *ROW_KEYS))
    }


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
