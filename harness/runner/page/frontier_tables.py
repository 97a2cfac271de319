"""The page's quality-cost frontier, as data for ``templates/parts.html.j2``: when a row of the
folder is a compressed vector setting (``--dims``/``--precision``,
:func:`harness.runner.tables.frontier.has_settings`), the frontier plot (``plots/frontier.png``)
and one :class:`FrontierTask` per protocol group and task: every row with vectors by bytes per
vector, its Pareto mark, its Spearman with 95 % interval, and how it compares with its method's
full vector.

Built from what the folder holds, as frontier.csv is: the records' long rows and the paired
bootstrap rows of ``significance.csv`` (:func:`harness.runner.tables.comparisons.read_back`), so
the page resamples nothing and shows frontier.csv's numbers."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.runner.page.cells import (
    Cell,
    Head,
    Table,
    as_float,
    number,
    significance_class,
    sort_value,
)
from harness.runner.page.pngs import Figure, png_uri
from harness.runner.tables.frames import protocol_line
from harness.runner.tables.frontier import (
    PARETO_MARK,
    by_task,
    frontier_rows,
    has_settings,
    is_full_vector,
    verdict,
)

FIGURE_CAPTION = (
    "Spearman ×100 against bytes per vector (log scale), a line per method through its settings; "
    "ringed: the Pareto set"
)
PARETO_HINT = "on the Pareto set: no other row of this task is as small and scores higher"
BYTES = Head("bytes/vector", num=True)
HEADS = (
    Head("Pareto"),
    Head("method"),
    Head("backbone"),
    Head("fit set"),
    Head("marks"),
    BYTES,
    Head("Spearman", num=True),
    Head("vs full vector"),
)


@dataclass(frozen=True)
class FrontierTask:
    """One protocol group's task: its heading (task · protocol line) and its frontier table."""

    heading: str
    table: Table


@dataclass(frozen=True)
class Frontier:
    """The frontier section: the plot (None: not drawn, ``--no-plots``, or not embeddable) and a
    table per (protocol group, task)."""

    figure: Figure | None
    tasks: list[FrontierTask]


def frontier_section(
    long: list[dict[str, Any]],
    significance: Iterable[Mapping[str, Any]],
    png: bytes | None,
) -> Frontier | None:
    """The section's data from the records' long rows
    (:func:`harness.runner.tables.frames.long_rows`), the significance rows and the frontier plot's
    bytes; None when no row is a compressed setting (the page then has no frontier section)."""
    if not has_settings(long):
        return None
    rows = frontier_rows(long, significance)
    tasks = [
        FrontierTask(f"{task} · {protocol_line(group)}", frontier_table(members))
        for group, task, members in by_task(rows)
    ]
    figure = Figure(FIGURE_CAPTION, png_uri(png)) if png is not None else None
    return Frontier(figure, tasks)


def frontier_table(rows: list[Mapping[str, Any]]) -> Table:
    """One task's frontier rows (already in the order shown: bytes per vector, smallest first) as
    a sortable table; where a row is sparse (SPLADE), its active dimensions and FLOPS beside its
    bytes, as frontier.md has them (blank on dense rows: not measured there)."""
    sparse = any(not math.isnan(as_float(row.get("active_dims"))) for row in rows)
    body = []
    for row in rows:
        costs = [_cost(row.get("active_dims"), ".1f"), _cost(row.get("flops"), ".2f")]
        backbone = str(row["backbone"])
        spearman, low, high = row["spearman"], row["ci_low"], row["ci_high"]
        ci = f"{number(low)} – {number(high)}" if as_float(low) == as_float(low) else None
        body.append(
            [
                Cell(
                    PARETO_MARK if row["pareto"] else "",
                    css="pareto",
                    sort="1" if row["pareto"] else "0",
                    hint=PARETO_HINT if row["pareto"] else None,
                ),
                Cell(str(row["method"])),
                Cell(Path(backbone).name or backbone),
                Cell(str(row["fit_set"])),
                Cell(str(row["marks"]), css="marks"),
                Cell(str(row["bytes_per_vector"]), css="num", sort=str(row["bytes_per_vector"])),
                *(costs if sparse else []),
                Cell(f"{spearman:.2f}", css="num score", sort=sort_value(spearman), interval=ci),
                verdict_cell(row),
            ]
        )
    heads = list(HEADS)
    if sparse:
        at = heads.index(BYTES) + 1
        heads[at:at] = [Head("active dims", num=True), Head("FLOPS", num=True)]
    return Table("sortable frontier", heads, body)


def _cost(value: Any, spec: str) -> Cell:
    """A sparse cost cell: the number in ``spec``, blank on a dense row (not measured)."""
    number_ = as_float(value)
    if math.isnan(number_):  # not measured
        return Cell("", css="num", sort="")
    return Cell(format(number_, spec), css="num", sort=sort_value(number_))


def verdict_cell(row: Mapping[str, Any]) -> Cell:
    """A row against its full vector: the verdict's words, coloured by the difference's sign where
    p < 0.05 (grey otherwise, as the paired tests), sorting by the difference."""
    if is_full_vector(row):
        return Cell("the full vector", css="ns", sort="")
    words = verdict(row)
    if not words:
        return Cell(f"no {row['full_vector']} row to compare with", css="ns", sort="")
    shade = significance_class(row["delta_vs_full"], row["p_vs_full"])
    return Cell(words, css=shade or None, sort=sort_value(row["delta_vs_full"]))
