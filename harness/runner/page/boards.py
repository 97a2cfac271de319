"""The leaderboards of the page, as data for ``templates/parts.html.j2``: one :class:`Board` per
protocol group (its scores with interval, ★ and marks, each score's settings on hover and in full
under the row's "settings" expander) with the group's paired tests (:class:`PairedTests`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.runner.page.cells import (
    Cell,
    Head,
    Table,
    as_float,
    number,
    significance_class,
    sort_value,
    table,
)
from harness.runner.records.schema import main_ci, metric_axis
from harness.runner.tables.comparisons import ALPHA  # the paired tests' level
from harness.runner.tables.frames import AVG, GROUP_KEYS, RANK, ROW_KEYS
from harness.runner.tables.leaderboard import rank_text

if TYPE_CHECKING:
    from harness.runner.records.schema import Record


@dataclass(frozen=True)
class PairedTests:
    """A group's rows of significance.csv: how many, how many with p < :data:`ALPHA`, the table."""

    count: int
    significant: int
    table: Table


@dataclass(frozen=True)
class Board:
    """One protocol group: its protocol line, its Inputs line ("" when none), its leaderboard and
    its paired tests (None when it has none)."""

    protocol: str
    inputs: str
    table: Table
    tests: PairedTests | None


def settings_of(rec: Record) -> str:
    """One score's settings, as a line of text for its hover title."""
    spec, task, protocol = rec["method"]["spec"], rec["task"], rec["protocol"]
    fit = (rec.get("fit") or {}).get("fit_set") or {}
    backbone = rec.get("backbone") or {}
    env = rec.get("env") or {}
    parts = [
        f"{rec['method']['label']} on {task['title']} {task['split']} ({task['n_pairs']} pairs)",
        f"source {task['source']}: {task['origin']} (data sha256 {task['fingerprint'][:12]})",
        f"pooling {spec['pooling']} layers {spec['layers']} max_length {spec['max_length']}",
        f"options {json.dumps(spec['params'], default=str)}" if spec["params"] else "",
        f"backbone {backbone.get('name')} ({backbone.get('origin')}, "
        f"{str(backbone.get('fingerprint'))[:12]}, {backbone.get('encoder_impl')})"
        if backbone
        else "",
        f"fit set {fit.get('name')}: {fit.get('n_sentences')} sentences" if fit else "",
        f"aggregation {protocol['aggregation']}, dtype {protocol['dtype']}"
        + (f" ({env['dtype_picked']})" if env.get("dtype_picked") else "")
        + f", similarity {protocol['similarity']}",
        f"bootstrap {rec['scores'].get('bootstrap_rounds')} rounds, "
        f"seed {rec['scores'].get('bootstrap_seed')}",
        f"run {rec['created']} at commit {str(rec['harness'].get('git_sha'))[:12]}; torch "
        f"{(env.get('packages') or {}).get('torch')}, {', '.join(env.get('devices') or [])}",
    ]
    return " · ".join(p for p in parts if p)


def settings_text(rec: Record) -> str:
    """The full settings of a row (from its newest record), as the JSON its expander shows."""
    keep = {k: rec.get(k) for k in ("method", "backbone", "protocol", "fit", "env", "harness")}
    keep["task"] = {k: v for k, v in rec["task"].items() if k != "subsets"}
    return json.dumps(keep, indent=1, default=str, ensure_ascii=False)


def _score(value: float, rec: Record | None, tied: bool) -> Cell:
    """A task's cell: the score with its ★ and interval, or why there is none."""
    if rec is None or value != value:  # NaN: no score for this task
        why = rec["scores"]["undefined"] if rec is not None else None
        if why:
            return Cell("undefined", css="num", sort="", hint=why)
        return Cell("—", css="num", sort="")
    ci = main_ci(rec)
    return Cell(
        f"{value:.2f}",
        css="num score",
        sort=f"{value:.4f}",
        title=settings_of(rec),
        star=tied,
        interval=f"{number(ci[0])} – {number(ci[1])}" if ci else None,
    )


RANK_HINT = (
    "rank by Avg. (1 = highest); in brackets its 95 % interval over the bootstrap resamples: a "
    "single value is a settled rank"
)


def _average(row: dict[str, Any], tied: bool) -> Cell:
    """The Avg. cell: the mean over the group's tasks, ★ and its 95 % interval (over the same
    resamples as its tasks), or — without one."""
    value = row[AVG]
    if value != value:
        return Cell("—", css="num", sort="")
    low, high = row.get("avg_ci_low", math.nan), row.get("avg_ci_high", math.nan)
    shown = low == low and high == high
    return Cell(
        f"{value:.2f}",
        css="num score",
        sort=f"{value:.4f}",
        star=tied,
        interval=f"{number(low)} – {number(high)}" if shown else None,
    )


def board_table(
    group: list[dict[str, Any]],
    tasks: list[str],
    extra: list[str],
    cells: dict[tuple, Record],
    group_key: tuple,
) -> Table:
    """One protocol group's leaderboard (its :func:`~harness.runner.tables.frames.wide_rows`);
    ``tasks`` are the group's task columns, ``extra`` the method-declared columns any of its rows
    fills, ``cells`` the newest record of each (group, row, task); its caption names the group's
    main score (Spearman, AP...)."""
    numeric = (*tasks, AVG, RANK, *extra)
    head = [Head(h, h in numeric) for h in ("method", "backbone", "fit set", "marks", *numeric)]
    rows = []
    for row in group:
        row_key = tuple(row[k] for k in ROW_KEYS)
        tied = set(str(row.get("not_below_best") or "").split(","))
        recs = [cells.get((group_key, row_key, t)) for t in tasks]
        first = next((r for r in recs if r is not None), None)
        backbone = str(row["backbone"])
        out = [
            Cell(str(row["method"]), details=settings_text(first) if first else None),
            Cell(Path(backbone).name or backbone),
            Cell(str(row["fit_set"])),
            Cell(str(row["marks"]), css="marks"),
        ]
        out += [_score(row[task], rec, task in tied) for task, rec in zip(tasks, recs)]
        out.append(_average(row, AVG in tied))
        rank = row.get(RANK, math.nan)
        out.append(Cell(rank_text(row), css="num", sort=sort_value(rank), hint=RANK_HINT))
        out += [Cell(number(row[c]), css="num", sort=sort_value(row[c])) for c in extra]
        rows.append(out)
    score = metric_axis(dict(zip(GROUP_KEYS, group_key))["metric"])
    caption = f"{score} of each task; small print: its 95 % bootstrap interval"
    return Table("sortable board", head, rows, caption=caption)


def paired_tests(significance: list[dict[str, Any]], group: dict[str, str]) -> PairedTests | None:
    """The rows of significance.csv in ``group``, their deltas coloured only where p < 0.05."""
    rows = [
        {
            "task": r["task"],
            "A": r["method_a"],
            "B": r["method_b"],
            "delta": r["delta"],
            "CI low": r["ci_low"],
            "CI high": r["ci_high"],
            "p": r["p_value"],
            "test": r["test"],
        }
        for r in significance
        if all(str(r.get(key)) == str(value) for key, value in group.items())
    ]
    if not rows:
        return None

    def colour(row: dict[str, Any], column: str) -> str:
        return significance_class(row["delta"], row["p"]) if column == "delta" else ""

    found = table(rows, ("delta", "CI low", "CI high", "p"), colour=colour)
    return PairedTests(len(rows), sum(as_float(r["p"]) < ALPHA for r in rows), found)
