"""The page's tables as data: a :class:`Table` of :class:`Head` and :class:`Cell` values that
``templates/parts.html.j2`` renders, and the number formats the cells use.

Every field is plain text: the templates escape it (autoescape), so no builder here writes markup.
What a cell may show besides its text (the ★, an interval, a tag, a settings expander) is a field
of its own that the template renders in a fixed place."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.runner.tables.comparisons import ALPHA  # the paired tests' level


@dataclass(frozen=True)
class Cell:
    """One ``td``. ``css``: its class (None: no attribute); ``sort``: its ``data-sort`` (None:
    none); ``title``: its hover text; ``hint``: the hover text of a span around ``text``; ``star``:
    the ★ of a score not significantly below the best; ``interval``: a small-print line under the
    text; ``tag``: a boxed word after it; ``details``: the text of a "settings" expander."""

    text: str
    css: str | None = None
    sort: str | None = None
    title: str | None = None
    hint: str | None = None
    star: bool = False
    interval: str | None = None
    tag: str | None = None
    details: str | None = None


@dataclass(frozen=True)
class Head:
    """One ``th``: its text, and whether its column holds numbers (right-aligned)."""

    text: str
    num: bool = False


@dataclass(frozen=True)
class Table:
    """A table with the classes ``css``; ``empty`` is the note shown instead when it has no row;
    ``caption`` names what its numbers are ("" none)."""

    css: str
    head: list[Head]
    rows: list[list[Cell]]
    empty: str = "none"
    caption: str = ""


def as_float(value: Any) -> float:
    """``value`` as a number, NaN where it is none (an empty CSV cell, None, text)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def number(value: Any, digits: int = 2) -> str:
    """A number as shown: ``digits`` decimals, ``—`` for NaN, anything else as its text."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    return "—" if math.isnan(value) else f"{value:.{digits}f}"


def sort_value(value: Any) -> str:
    """A numeric cell's ``data-sort``: six significant digits, empty where there is no number."""
    value = as_float(value)
    return "" if math.isnan(value) else f"{value:.6g}"


def p_text(value: Any) -> str:
    """A p-value as read: ``< 0.001`` below what three digits show (never ``0.000``), ``—`` when
    undefined.

    >>> p_text(0.0004), p_text(0.0456), p_text("")
    ('< 0.001', '0.046', '—')
    """
    value = as_float(value)
    if math.isnan(value):
        return "—"
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def signed_class(value: Any) -> str:
    """``pos``/``neg`` by the sign of a change (green/red), empty for zero or undefined."""
    value = as_float(value)
    return "pos" if value > 0 else "neg" if value < 0 else ""


def significance_class(delta: Any, p: Any) -> str:
    """The colour of a paired-test delta: by its sign where p < 0.05, neutral (``ns``) otherwise, so
    green and red mean "a difference beyond the noise" and nothing else."""
    return signed_class(delta) if as_float(p) < ALPHA else "ns"


def classes(*names: str) -> str:
    """A class attribute from its names, the empty ones left out: ``classes("num", "")`` is
    ``"num"``."""
    return " ".join(name for name in names if name)


def table(
    rows: list[dict[str, Any]],
    numeric: tuple[str, ...] = (),
    css: str = "sortable",
    colour: Callable[[dict[str, Any], str], str] | None = None,
    empty: str = "none",
) -> Table:
    """A sortable table of ``rows`` (their keys are the columns). The ``numeric`` columns are
    right-aligned and sort by value; a column named ``p`` reads as :func:`p_text`;
    ``colour(row, column)`` gives a numeric cell's class."""
    columns = list(rows[0]) if rows else []
    body = []
    for row in rows:
        cells = []
        for column in columns:
            value = row[column]
            if column in numeric:
                shown = p_text(value) if column == "p" else number(value)
                shade = colour(row, column) if colour is not None else ""
                cells.append(Cell(shown, css=classes("num", shade), sort=sort_value(value)))
            else:
                cells.append(Cell(str(value)))
        body.append(cells)
    return Table(css, [Head(c, c in numeric) for c in columns], body, empty)
