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
        if (
            rec.get("pairs") and rec["scores"]["spearman"] is not None
        ):  # an undefined score is never compared
            keys = record_keys(rec)
            group = tuple(keys[k] for k in GROUP_KEYS)
            by_split.setdefault(
                (group, rec["task"]["title"], rec["task"]["fingerprint"]), []
            ).append(rec)
    rows, marks = [], set()
    for (group, task, _), recs in sorted(by_split.items(), key=lambda item: item[0][:2]):
        pairs = recs[0]["pairs"]
        results = {
            id(r): scored(
                np.asarray(r["pairs"]["similarity"], dtype=np.float64),
                pairs["gold"],
                pairs["subset"],
                group[0],
                rounds,
                seed,
                memo,
            )
            for r in recs
        }
        ranked = sorted(recs, key=lambda r: -results[id(r)].spearman)
        best = ranked[0]
        for a, b in combinations(ranked, 2):
            ka, kb = record_keys(a), record_keys(b)
            for test in (
                paired_bootstrap(results[id(a)], results[id(b)]),
                williams(results[id(a)], results[id(b)], pairs["gold"]),
            ):
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
