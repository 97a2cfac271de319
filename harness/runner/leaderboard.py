"""Leaderboards written from result files only: CSV, markdown, a long-format score table and a PNG
(the frames they are built from are :mod:`harness.runner.frames`). Each protocol group gets its own
table whose header names that protocol."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.hashing import atomic_write_text
from harness.runner.frames import GROUP_KEYS, ROW_KEYS, TASK_ORDER, wide_frame

if TYPE_CHECKING:
    import pandas as pd

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
        from harness.runner.plots import leaderboard_png

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
