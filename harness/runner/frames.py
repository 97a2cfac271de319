"""The tables every report is built from, read from result records only.

``long_frame``: one row per (method row, protocol, task). ``wide_frame``: methods × tasks (+ Avg.)
per protocol group. Results with different protocols are never put in one table: rows are grouped
by the protocol (aggregation, source, dtype, max_length, first-last layers). Within a group a row
is (method, backbone, kind, fit set). Columns a method declares (its records' ``"columns"``, e.g.
DSE's "vs teacher (%)") are carried along and averaged over the row's tasks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from harness.core.data.tasks import TASKS

if TYPE_CHECKING:
    import pandas as pd

GROUP_KEYS = ("aggregation", "source", "dtype", "max_length", "first_last_layers")
ROW_KEYS = ("method", "backbone", "kind", "fit_set")
TASK_ORDER = [spec.title for spec in TASKS.values()]
AVG = "Avg."
LONG_COLUMNS = ("marks", "task", "spearman", "pearson", "ci_low", "ci_high", "n_pairs", "created")


def ordered_tasks(titles: Iterable[str]) -> list[str]:
    """Registered tasks in registry order, then any other task (an MTEB task) by name."""
    present = set(titles)
    return [t for t in TASK_ORDER if t in present] + sorted(present - set(TASK_ORDER))


def wide_tasks(wide: pd.DataFrame) -> list[str]:
    """The task columns of a :func:`wide_frame` table: those between ``marks`` and ``Avg.``."""
    columns = list(wide.columns)
    return columns[columns.index("marks") + 1:columns.index(AVG)]


def record_keys(rec: dict[str, Any]) -> dict[str, str]:
    """The (row, protocol group) a record belongs to, as the leaderboard names them."""
    protocol = rec["protocol"]
    return {"method": rec["method"]["label"], "backbone": rec["method"]["spec"]["backbone"],
            "kind": rec["method"]["kind"], "fit_set": (rec.get("fit") or {}).get("fit_set", {}).get("name", ""),
            "aggregation": protocol["aggregation"], "source": protocol["source"], "dtype": protocol["dtype"],
            "max_length": str(protocol["max_length"]),
            "first_last_layers": ",".join(str(x) for x in protocol["first_last_layers"])}


def record_marks(rec: dict[str, Any]) -> str:
    """† fitted/trained on the scored sentences; ‡ trained on labelled data built from the scored task."""
    protocol = rec["protocol"]
    return ("†" if protocol.get("transductive") else "") + ("‡" if protocol.get("labelled_training") else "")


def newest(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (row, protocol group, task): the newest file wins."""
    chosen: dict[tuple, dict[str, Any]] = {}
    for rec in sorted(records, key=lambda r: r["created"]):
        chosen[(*record_keys(rec).values(), rec["task"]["title"])] = rec
    return list(chosen.values())


def long_frame(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per result file; when a (row, task) appears twice, the newest file wins."""
    import pandas as pd

    rows, extra = [], []
    for rec in records:
        columns = rec.get("columns") or {}
        extra += [name for name in columns if name not in extra]
        scores = rec["scores"]
        ci = scores.get("spearman_ci95") or [math.nan, math.nan]
        rows.append({
            **record_keys(rec), "marks": record_marks(rec),
            "task": rec["task"]["title"], "spearman": scores["spearman"], "pearson": scores["pearson"],
            "ci_low": ci[0], "ci_high": ci[1], "n_pairs": rec["task"]["n_pairs"], "created": rec["created"],
            **columns,
        })
    frame = pd.DataFrame(rows, columns=[*ROW_KEYS, *GROUP_KEYS, *LONG_COLUMNS, *extra])
    frame = frame.sort_values("created").drop_duplicates([*GROUP_KEYS, *ROW_KEYS, "task"], keep="last")
    return frame.reset_index(drop=True)


def wide_frame(long: pd.DataFrame) -> pd.DataFrame:
    """Methods × tasks (+ Avg.) per protocol group. Avg. is only given for rows that have every
    task of their group, so averages over different task sets are never compared."""
    import pandas as pd

    if long.empty:
        return pd.DataFrame(columns=[*ROW_KEYS, "marks", AVG, *GROUP_KEYS])
    table = long.pivot_table(index=[*GROUP_KEYS, *ROW_KEYS], columns="task", values="spearman", aggfunc="last")
    tasks = ordered_tasks(table.columns)
    table = table[tasks]
    table.columns.name = None
    table = table.reset_index()
    group_tasks = long.groupby(list(GROUP_KEYS))["task"].agg(lambda s: set(s)).to_dict()
    averages = []
    for _, row in table.iterrows():
        wanted = [t for t in tasks if t in group_tasks[tuple(row[k] for k in GROUP_KEYS)]]
        values = [row[t] for t in wanted]
        averages.append(sum(values) / len(values) if values and not any(pd.isna(values)) else math.nan)
    table[AVG] = averages
    marks = long.groupby([*GROUP_KEYS, *ROW_KEYS])["marks"].agg(lambda s: "".join(sorted(set("".join(s)))))
    table["marks"] = [marks.get(tuple(row[k] for k in (*GROUP_KEYS, *ROW_KEYS)), "") for _, row in table.iterrows()]
    extra = [c for c in long.columns if c not in (*ROW_KEYS, *GROUP_KEYS, *LONG_COLUMNS)]
    for column in extra:  # a method's own columns (DSE's degradation vs its teacher): mean over tasks
        means = long.groupby([*GROUP_KEYS, *ROW_KEYS])[column].mean()
        table[column] = [means.get(tuple(row[k] for k in (*GROUP_KEYS, *ROW_KEYS)), math.nan)
                         for _, row in table.iterrows()]
    table = table.sort_values([*GROUP_KEYS, AVG], ascending=[True] * len(GROUP_KEYS) + [False])
    return table[[*ROW_KEYS, "marks", *tasks, AVG, *extra, *GROUP_KEYS]].reset_index(drop=True)


