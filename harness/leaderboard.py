"""Leaderboards built from result files only: CSV, markdown, a long-format score table and a PNG.

Results with different protocols are never put in one table: rows are grouped by the protocol
(aggregation, source, dtype, max_length, first-last layers) and each group gets its own table
whose header names that protocol. Within a group a row is (method, backbone, fit set).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.hashing import atomic_write_text
from harness.tasks import TASKS

if TYPE_CHECKING:
    import pandas as pd

GROUP_KEYS = ("aggregation", "source", "dtype", "max_length", "first_last_layers")
ROW_KEYS = ("method", "backbone", "kind", "fit_set")
TASK_ORDER = [spec.title for spec in TASKS.values()]
AVG = "Avg."
VS_TEACHER = "vs teacher (%)"


def long_frame(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    """One row per result file; when a (row, task) appears twice, the newest file wins."""
    import pandas as pd

    rows = []
    for rec in records:
        protocol, scores = rec["protocol"], rec["scores"]
        ci = scores.get("spearman_ci95") or [math.nan, math.nan]
        rows.append({
            "method": rec["method"]["label"], "backbone": rec["method"]["spec"]["backbone"],
            "kind": rec["method"]["kind"], "fit_set": (rec.get("fit") or {}).get("fit_set", {}).get("name", ""),
            "aggregation": protocol["aggregation"], "source": protocol["source"], "dtype": protocol["dtype"],
            "max_length": str(protocol["max_length"]),
            "first_last_layers": ",".join(str(x) for x in protocol["first_last_layers"]),
            "task": rec["task"]["title"], "spearman": scores["spearman"], "pearson": scores["pearson"],
            "ci_low": ci[0], "ci_high": ci[1], "n_pairs": rec["task"]["n_pairs"], "created": rec["created"],
            "vs_teacher_pct": (rec.get("teacher") or {}).get("degradation_pct", math.nan),
        })
    frame = pd.DataFrame(rows, columns=[*ROW_KEYS, *GROUP_KEYS, "task", "spearman", "pearson", "ci_low",
                                        "ci_high", "n_pairs", "created", "vs_teacher_pct"])
    frame = frame.sort_values("created").drop_duplicates([*GROUP_KEYS, *ROW_KEYS, "task"], keep="last")
    return frame.reset_index(drop=True)


def wide_frame(long: pd.DataFrame) -> pd.DataFrame:
    """Methods × tasks (+ Avg.) per protocol group. Avg. is only given for rows that have every
    task of their group, so averages over different task sets are never compared."""
    import pandas as pd

    if long.empty:
        return pd.DataFrame(columns=[*ROW_KEYS, AVG, VS_TEACHER, *GROUP_KEYS])
    table = long.pivot_table(index=[*GROUP_KEYS, *ROW_KEYS], columns="task", values="spearman", aggfunc="last")
    tasks = [t for t in TASK_ORDER if t in table.columns]
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
    # DSE's headline measure: relative degradation vs its teacher, averaged over the row's tasks.
    degradation = long.groupby([*GROUP_KEYS, *ROW_KEYS])["vs_teacher_pct"].mean()
    table[VS_TEACHER] = [degradation.get(tuple(row[k] for k in (*GROUP_KEYS, *ROW_KEYS)), math.nan)
                         for _, row in table.iterrows()]
    table = table.sort_values([*GROUP_KEYS, AVG], ascending=[True] * len(GROUP_KEYS) + [False])
    return table[[*ROW_KEYS, *tasks, AVG, VS_TEACHER, *GROUP_KEYS]].reset_index(drop=True)


def protocol_line(group: dict[str, Any]) -> str:
    return (f"aggregation={group['aggregation']} · source={group['source']} · dtype={group['dtype']} · "
            f"max_length={group['max_length']} · first-last layers={group['first_last_layers']} · similarity=cosine")


def markdown(wide: pd.DataFrame) -> str:
    """One markdown table per protocol group, each under a header naming its protocol."""
    from tabulate import tabulate

    parts = ["# sts-bench leaderboard", "",
             "Spearman ×100 of cosine similarity vs gold on each task's test split. "
             "95 % bootstrap intervals and Pearson are in scores.csv; every number's full record is in runs/.",
             ""]
    for group_values, group in wide.groupby(list(GROUP_KEYS), sort=True):
        group_dict = dict(zip(GROUP_KEYS, group_values))
        columns = [c for c in group.columns if c not in GROUP_KEYS and not group[c].isna().all()]
        if set(group["kind"]) == {"embedding"}:
            columns.remove("kind")  # only informative once pair scorers are in the table
        parts += [f"## Protocol: {protocol_line(group_dict)}", "",
                  tabulate(group[columns].fillna(""), headers="keys", tablefmt="pipe", showindex=False,
                           floatfmt=".2f", missingval="—"), ""]
    return "\n".join(parts)


def write_leaderboard(long: pd.DataFrame, out_dir: Path, plots: bool = True) -> list[Path]:
    """Write leaderboard.csv/.md, scores.csv and (optionally) plots/leaderboard.png under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    wide = wide_frame(long)
    paths = [out_dir / "leaderboard.csv", out_dir / "leaderboard.md", out_dir / "scores.csv"]
    # Atomic writes: runs sharing an output folder may rebuild the leaderboard at the same time.
    atomic_write_text(paths[0], wide.to_csv(index=False, float_format="%.4f"))
    atomic_write_text(paths[1], markdown(wide) + "\n")
    atomic_write_text(paths[2], long.drop(columns=["created"]).to_csv(index=False, float_format="%.4f"))
    if plots and not long.empty:
        from harness.plots import leaderboard_png

        paths.append(leaderboard_png(long, out_dir / "plots" / "leaderboard.png"))
    return paths


def compare_baseline(wide: pd.DataFrame, baseline_csv: Path, tolerance: float) -> tuple[pd.DataFrame, int]:
    """Rows of (row, task) whose score dropped by more than ``tolerance`` points vs the baseline CSV,
    and how many (row, task) cells could be compared at all."""
    import pandas as pd

    base = pd.read_csv(baseline_csv, dtype={k: str for k in (*GROUP_KEYS, *ROW_KEYS)}, keep_default_na=False,
                       na_values=[""])
    keys = [k for k in (*GROUP_KEYS, *ROW_KEYS) if k in base.columns]
    current = wide.copy()
    for frame in (current, base):
        for key in keys:
            frame[key] = frame[key].fillna("").astype(str)
    merged = current.merge(base, on=keys, suffixes=("", " (baseline)"))
    drops, compared = [], 0
    for task in [t for t in [*TASK_ORDER] if t in current.columns and f"{t} (baseline)" in merged.columns]:
        for _, row in merged.iterrows():
            now, before = row[task], row[f"{task} (baseline)"]
            if pd.isna(now) or pd.isna(before):
                continue
            compared += 1
            if now < before - tolerance:
                drops.append({"method": row["method"], "backbone": row["backbone"], "task": task,
                              "baseline": before, "now": now, "change": now - before})
    return pd.DataFrame(drops, columns=["method", "backbone", "task", "baseline", "now", "change"]), compared
