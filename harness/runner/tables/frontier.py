"""The quality-cost frontier: each row's Spearman against the bytes one of its vectors takes.

A run with ``--dims``/``--precision``/``--similarity`` scores every method in several vector
settings (:mod:`harness.core.compression`); here each (protocol group, task) gets one point per
row with vectors: its bytes per vector, its Spearman and 95 % interval, whether it is on the
**Pareto set** (no other row of the task is at least as small and scores higher, or smaller and
scores as high), and how it compares with the **full vector** of the same method (every dimension
in fp32, the same similarity; cosine for bits): the difference in Spearman and the paired bootstrap
p-value of that pair from ``significance.csv`` (:mod:`.comparisons`, which tests every two rows of
a group on the same pairs).

For example, ``avg`` (1536 bytes, 82.03), ``avg · int8`` (384 bytes, 82.62) and ``avg · binary``
(48 bytes, 80.86): ``avg`` is dominated by ``avg · int8`` (smaller and higher) and off the Pareto
set; ``avg · int8`` and ``avg · binary`` are on it. ``avg · binary`` is 1.17 points below ``avg``;
with p < 0.05 it is "significantly below its full vector".

Pure Python on :func:`harness.runner.tables.frames.long_rows` and the significance rows (no
pandas): the report page builds from the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.core.hashing import atomic_write_text
from harness.runner.tables.frames import GROUP_KEYS, csv_text, protocol_line

ALPHA = 0.05  # as the ★ marks: a p-value below it is a significant difference
PARETO_MARK = "●"  # a row on its task's Pareto set, in frontier.md and on the report page
BOOTSTRAP = "paired bootstrap"  # the test of significance.csv a frontier row quotes
COLUMNS = (
    "task",
    "method",
    "of",
    "backbone",
    "fit_set",
    "marks",
    "dims",
    "precision",
    "similarity",
    "bytes_per_vector",
    "active_dims",
    "flops",
    "spearman",
    "ci_low",
    "ci_high",
    "pareto",
    "full_vector",
    "delta_vs_full",
    "p_vs_full",
    "below_full",
    *GROUP_KEYS,
)


def has_settings(long: Iterable[Mapping[str, Any]]) -> bool:
    """Whether any row is a compressed setting (fewer dimensions or another precision) or sparse
    vectors (whose bytes are their active dimensions'): only then is there a frontier to draw."""
    return any(
        row.get("precision") not in ("", "fp32", None) or row.get("dims") not in ("", "full", None)
        for row in long
    )


def method_of(row: Mapping[str, Any]) -> str:
    """The label of the method a row is a setting of: its label without the setting's suffix.

    >>> method_of({"method": "avg · 64d int8", "dims": 64, "precision": "int8",
    ...            "similarity": "cosine"})
    'avg'
    """
    suffix = _setting(row).suffix()
    label = str(row["method"])
    return label.removesuffix(f" · {suffix}") if suffix else label


def full_vector_of(row: Mapping[str, Any]) -> str:
    """The label of the row a setting is tested against: its method's full vector (every
    dimension, fp32) by the same similarity, cosine for bits."""
    return _setting(row).reference().label(method_of(row))


def _setting(row: Mapping[str, Any]) -> Any:
    """The row's :class:`harness.core.compression.VectorSetting`."""
    from harness.core.compression import VectorSetting

    return VectorSetting.read(row["dims"], row["precision"], row["similarity"])


def pareto(points: list[tuple[float, float]]) -> list[bool]:
    """For (bytes, score) points, whether each is on the Pareto set: no other point is as small or
    smaller and scores higher, or is smaller and scores as high. Ties (same bytes, same score) are
    all on it.

    >>> pareto([(1536, 82.0), (384, 82.6), (48, 80.9), (96, 80.0)])
    [False, True, True, False]
    """
    return [
        not any(
            (b2 <= b and s2 > s) or (b2 < b and s2 >= s)
            for j, (b2, s2) in enumerate(points)
            if j != i
        )
        for i, (b, s) in enumerate(points)
    ]


def frontier_rows(
    long: Iterable[Mapping[str, Any]], significance: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """One row (:data:`COLUMNS`) per long row with vectors and a defined Spearman, per protocol
    group and task in the long rows' order: bytes, score, interval, Pareto, and the test against
    the method's full vector (NaN where that row was not scored or is the row itself)."""
    tests: dict[tuple, Mapping[str, Any]] = {}
    for test in significance:
        if str(test["test"]).startswith(BOOTSTRAP):
            group = tuple(str(test[k]) for k in GROUP_KEYS)  # read back from a CSV: strings
            for a, b in (("a", "b"), ("b", "a")):
                key = (
                    group,
                    test["task"],
                    test[f"method_{a}"],
                    test[f"backbone_{a}"],
                    test[f"fit_set_{a}"],
                    test[f"method_{b}"],
                    test[f"backbone_{b}"],
                    test[f"fit_set_{b}"],
                )
                tests[key] = test
    cells: dict[tuple, list[Mapping[str, Any]]] = {}
    for row in long:
        bytes_ = row.get("bytes_per_vector")
        if not isinstance(bytes_, int | float) or math.isnan(bytes_) or _missing(row["spearman"]):
            continue
        group = tuple(str(row[k]) for k in GROUP_KEYS)
        cells.setdefault((group, row["task"]), []).append(row)
    out: list[dict[str, Any]] = []
    for (group, task), rows in cells.items():
        on_front = pareto([(float(r["bytes_per_vector"]), float(r["spearman"])) for r in rows])
        scores = {(r["method"], r["backbone"], r["fit_set"]): r["spearman"] for r in rows}
        for row, front in zip(rows, on_front):
            full = full_vector_of(row)
            delta = p_value = math.nan
            if full != row["method"]:
                reference = scores.get((full, row["backbone"], row["fit_set"]))
                if reference is not None:
                    delta = float(row["spearman"]) - float(reference)
                side = (row["backbone"], row["fit_set"])
                tested = tests.get((group, task, row["method"], *side, full, *side))
                if tested is not None:
                    p_value = float(tested["p_value"])
            out.append(
                {
                    "task": task,
                    "method": row["method"],
                    "of": method_of(row),
                    "backbone": row["backbone"],
                    "fit_set": row["fit_set"],
                    "marks": row["marks"],
                    "dims": row["dims"],
                    "precision": row["precision"],
                    "similarity": row["similarity"],
                    "bytes_per_vector": int(row["bytes_per_vector"]),
                    "active_dims": row.get("active_dims", math.nan),
                    "flops": row.get("flops", math.nan),
                    "spearman": float(row["spearman"]),
                    "ci_low": row["ci_low"],
                    "ci_high": row["ci_high"],
                    "pareto": front,
                    "full_vector": full,
                    "delta_vs_full": delta,
                    "p_vs_full": p_value,
                    "below_full": bool(delta < 0 and p_value < ALPHA),
                    **dict(zip(GROUP_KEYS, group)),
                }
            )
    return out


def by_task(
    rows: Iterable[Mapping[str, Any]],
) -> list[tuple[dict[str, Any], str, list[Mapping[str, Any]]]]:
    """The rows of :func:`frontier_rows` as frontier.md and the report page show them: per
    (protocol group, task), in the order they first appear, ``(group, task, rows)`` with ``group``
    its :data:`GROUP_KEYS` values and the rows by bytes per vector, smallest first (higher Spearman
    first among equal bytes).

    >>> group = dict.fromkeys(GROUP_KEYS, "x")
    >>> rows = [{**group, "task": "STS-B", "method": m, "bytes_per_vector": b, "spearman": s}
    ...         for m, b, s in (("avg", 1536, 82.0), ("avg · binary", 48, 80.9),
    ...                         ("cls · binary", 48, 81.5))]
    >>> [(task, [r["method"] for r in members]) for _, task, members in by_task(rows)]
    [('STS-B', ['cls · binary', 'avg · binary', 'avg'])]
    """
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault((tuple(row[k] for k in GROUP_KEYS), row["task"]), []).append(row)
    return [
        (
            dict(zip(GROUP_KEYS, group)),
            task,
            sorted(members, key=lambda r: (r["bytes_per_vector"], -r["spearman"])),
        )
        for (group, task), members in groups.items()
    ]


def is_full_vector(row: Mapping[str, Any]) -> bool:
    """Whether a frontier row is its method's full vector (the row the others are tested
    against), so it has no verdict of its own."""
    return row["full_vector"] == row["method"]


def verdict(row: Mapping[str, Any]) -> str:
    """How a setting compares with its full vector, in words.

    >>> verdict({"delta_vs_full": -0.4, "p_vs_full": 0.21})
    'not significantly below full (-0.40, p=0.21)'
    >>> verdict({"delta_vs_full": math.nan, "p_vs_full": math.nan})
    ''
    """
    delta, p_value = row["delta_vs_full"], row["p_vs_full"]
    if _missing(delta):
        return ""
    if _missing(p_value):
        return f"{delta:+.2f} (not tested)"
    if p_value >= ALPHA:
        words = "not significantly below full" if delta <= 0 else "not significantly above full"
    else:
        words = "significantly below full" if delta < 0 else "significantly above full"
    return f"{words} ({delta:+.2f}, p={p_value:.2g})"


def frontier_markdown(rows: list[dict[str, Any]]) -> str:
    """frontier.md: per protocol group and task, the rows by bytes per vector (smallest first),
    Pareto rows marked ●, each compressed setting's test against its full vector; a task with
    sparse rows also shows their mean active dimensions and FLOPS (blank for dense rows)."""
    parts = [
        "# sts-bench quality-cost frontier",
        "",
        "Spearman ×100 against the bytes one vector takes (`--dims`, `--precision`; "
        "docs/COMPRESSION.md; a sparse vector's: 8 bytes per active dimension). ● on the Pareto "
        "set: no other row of the task is as small and scores higher. Each setting is tested "
        "against its method's full vector (every dimension, fp32, the same similarity) by the "
        "paired bootstrap of significance.csv.",
    ]
    for group, task, members in by_task(rows):
        sparse = any(not _missing(row.get("active_dims")) for row in members)
        extra = " active dims | FLOPS |" if sparse else ""
        parts += ["", f"## {task} · {protocol_line(group)}", ""]
        parts += [
            f"| | method | backbone | bytes/vector |{extra} Spearman | 95 % CI | vs full vector |",
            "|:-|:-|:-|-:|" + ("-:|-:|" if sparse else "") + "-:|:-|:-|",
        ]
        for row in members:
            ci = "" if _missing(row["ci_low"]) else f"[{row['ci_low']:.2f}, {row['ci_high']:.2f}]"
            mark = PARETO_MARK if row["pareto"] else ""
            costs = (
                f" {_number(row.get('active_dims'), '.1f')} | {_number(row.get('flops'), '.2f')} |"
                if sparse
                else ""
            )
            parts.append(
                f"| {mark} | {_cell(row['method'])}{row['marks']} | "
                f"{_cell(row['backbone'])} | {row['bytes_per_vector']} |{costs} "
                f"{row['spearman']:.2f} | {ci} | {verdict(row)} |"
            )
    return "\n".join(parts) + "\n"


def write_frontier(rows: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """frontier.csv (6 significant digits, NaN as an empty cell) and frontier.md under
    ``out_dir``."""
    paths = [out_dir / "frontier.csv", out_dir / "frontier.md"]
    atomic_write_text(paths[0], csv_text(rows, COLUMNS, ".6g"))
    atomic_write_text(paths[1], frontier_markdown(rows))
    return paths


def _number(value: Any, spec: str) -> str:
    """A cost cell: the number in ``spec``, blank where it was not measured (a dense row)."""
    return "" if _missing(value) else format(float(value), spec)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|")


def _missing(value: Any) -> bool:
    return value is None or value != value
