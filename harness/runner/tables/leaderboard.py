"""Leaderboards written from result files only: CSV, markdown, a long-format score table and a PNG
(the frames they are built from are :mod:`harness.runner.tables.frames`). Each protocol group gets its own
table whose header names that protocol."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.hashing import atomic_write_text
from harness.runner.records.outputs import StepOutput
from harness.runner.tables.frames import GROUP_KEYS, UNDEFINED, records_digest, tied_tasks, wide_frame, wide_tasks

if TYPE_CHECKING:
    import pandas as pd

    from harness.runner.records.outputs import ReportInputs
    from harness.runner.settings.config import BenchConfig

def protocol_line(group: dict[str, Any]) -> str:
    return (f"aggregation={group['aggregation']} · source={group['source']} · dtype={group['dtype']} · "
            f"max_length={group['max_length']} · first-last layers={group['first_last_layers']} · similarity=cosine")


TIED = "★"
LEGEND = (f"{TIED} best of its task or not significantly below it (paired bootstrap, p ≥ 0.05; all tests in "
          "significance.csv) · † fitted or trained on sentences of the scored split (transductive, the fit set "
          "holds them) · ‡ trained on labelled data built from the scored task (STS-B train holds STS 2012-2017 "
          "pairs)")
UNDEFINED_LEGEND = ("undefined: the correlation cannot be computed (constant gold or similarity, or fewer than 3 "
                    "pairs); recorded because of --allow-undefined, never ranked or starred")


def mark_tied(wide: pd.DataFrame, marks: set) -> pd.DataFrame:
    """Add ``not_below_best``: the tasks where a row is best or not significantly below the best."""
    wide = wide.copy()
    tasks = wide_tasks(wide)
    wide["not_below_best"] = [tied_tasks(row, tasks, marks) for _, row in wide.iterrows()]
    return wide


def markdown(wide: pd.DataFrame) -> str:
    """One markdown table per protocol group, each under a header naming its protocol."""
    from tabulate import tabulate

    parts = ["# sts-bench leaderboard", "",
             "Spearman ×100 of cosine similarity vs gold on each task's test split. "
             "95 % bootstrap intervals and Pearson are in scores.csv; every number's full record is in runs/.",
             "", LEGEND, ""]
    tasks = wide_tasks(wide)
    if UNDEFINED in wide and wide[UNDEFINED].fillna("").astype(bool).any():
        parts += [UNDEFINED_LEGEND, ""]
    for group_values, group in wide.groupby(list(GROUP_KEYS), sort=True):
        group_dict = dict(zip(GROUP_KEYS, group_values))
        group = group.copy()
        tied = group["not_below_best"].str.split(",") if "not_below_best" in group else None
        undefined = group[UNDEFINED].fillna("").str.split(",") if UNDEFINED in group else None
        for task in tasks:
            cells = []
            for index, value in group[task].items():
                mark = f" {TIED}" if tied is not None and task in tied[index] else ""
                if value == value:  # NaN != NaN: no number in this cell
                    cells.append(f"{value:.2f}{mark}")
                else:
                    cells.append("undefined" if undefined is not None and task in undefined[index] else "—")
            group[task] = cells
        columns = [c for c in group.columns if c not in (*GROUP_KEYS, "not_below_best", UNDEFINED)
                   and not group[c].isna().all() and not (c == "marks" and not group[c].any())]
        if set(group["kind"]) == {"embedding"}:
            columns.remove("kind")  # only informative once pair scorers are in the table
        parts += [f"## Protocol: {protocol_line(group_dict)}", "",
                  tabulate(group[columns].fillna(""), headers="keys", tablefmt="pipe", showindex=False,
                           floatfmt=".2f", missingval="—", disable_numparse=False), ""]
    return "\n".join(parts)


def write_leaderboard(long: pd.DataFrame, out_dir: Path, plots: bool = True, marks: set | None = None) -> list[Path]:
    """Write leaderboard.csv/.md, scores.csv and (optionally) plots/leaderboard.png under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    wide = mark_tied(wide_frame(long), marks or set())
    paths = [out_dir / "leaderboard.csv", out_dir / "leaderboard.md", out_dir / "scores.csv"]
    # Atomic writes: runs sharing an output folder may rebuild the leaderboard at the same time.
    atomic_write_text(paths[0], wide.to_csv(index=False, float_format="%.4f"))
    atomic_write_text(paths[1], markdown(wide) + "\n")
    atomic_write_text(paths[2], long.drop(columns=["created"]).to_csv(index=False, float_format="%.4f"))
    if plots and not long.empty:
        from harness.runner.tables.plots import leaderboard_png

        paths.append(leaderboard_png(long, out_dir / "plots" / "leaderboard.png"))
    return paths


class Leaderboards:
    """The report step of the tables (:mod:`harness.runner.records.outputs`): leaderboard.csv/.md,
    scores.csv, significance.csv and plots/leaderboard.png from every record in the folder, and this
    run's table for the console. A pure function of the records' content and the bootstrap
    settings, so it is memoised: a warm re-run copies them (no pandas, no resampling)."""

    name = "leaderboards"

    def enabled(self, cfg: BenchConfig) -> bool:
        return True

    def memo_key(self, inputs: ReportInputs) -> dict[str, Any]:
        cfg = inputs.cfg
        return {"this_run": records_digest(inputs.records), "every_run": records_digest(inputs.every_run),
                "plots": cfg.plots, "bootstrap": cfg.bootstrap or 1000, "seed": cfg.seed}

    def write(self, inputs: ReportInputs) -> StepOutput:
        from harness.runner.tables.comparisons import comparisons, write_significance
        from harness.runner.tables.frames import long_frame

        cfg, out = inputs.cfg, inputs.out_dir
        table = markdown(wide_frame(long_frame(inputs.records)))
        significance, marks = comparisons(inputs.every_run, cfg.bootstrap or 1000, cfg.seed)
        paths = write_leaderboard(long_frame(inputs.every_run), out, plots=cfg.plots, marks=marks)
        paths.append(write_significance(significance, out))
        return StepOutput(paths, table)
