"""Leaderboards written from result files only: CSV, markdown, a long-format score table and a PNG
(the frames they are built from are :mod:`harness.runner.tables.frames`). Each protocol group gets
its own table whose header names that protocol."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.hashing import atomic_write_text
from harness.core.stages import stage
from harness.runner.records.outputs import StepOutput
from harness.runner.tables.frames import (
    AVG,
    FINGERPRINTS,
    GROUP_KEYS,
    RANK,
    RANK_COLUMNS,
    RANK_NUMBERS,
    ROW_KEYS,
    UNDEFINED,
    csv_text,
    long_rows,
    protocol_line,
    record_keys,
    records_digest,
    tied_tasks,
    wide_rows,
)
from harness.runner.tables.frames import (
    long_columns as every_column,
)

if TYPE_CHECKING:
    from harness.runner.records.outputs import ReportInputs
    from harness.runner.records.schema import Record
    from harness.runner.settings.config import BenchConfig

TIED = "★"
LEGEND = (
    f"{TIED} best of its task or not significantly below it (paired bootstrap, p ≥ 0.05; all tests "
    "in significance.csv) · † fitted or trained on sentences of the scored split (transductive, "
    "the fit set holds them) · ‡ trained on labelled data built from the scored task (STS-B train "
    "holds STS 2012-2017 pairs; a GLUE task's own train split) · § a setting chosen on labelled "
    "data (a demonstration picked on STS-B dev; a threshold chosen on the scored pairs themselves)"
)
UNDEFINED_LEGEND = (
    "undefined: the correlation cannot be computed (constant gold or similarity, or fewer than 3 "
    "pairs); recorded because of --allow-undefined, never ranked or starred"
)


def mark_tied(wide: list[dict[str, Any]], tasks: list[str], marks: set) -> list[dict[str, Any]]:
    """Add ``not_below_best``: the tasks (and ``Avg.``) where a row is best or not significantly
    below the best."""
    return [{**row, "not_below_best": tied_tasks(row, [*tasks, AVG], marks)} for row in wide]


def with_ranks(
    wide: list[dict[str, Any]], summary: dict[tuple, dict[str, float]] | None
) -> list[dict[str, Any]]:
    """The wide rows with their rank and Avg. interval (NaN where a row has no average)."""
    out = []
    for row in wide:
        key = (tuple(row[k] for k in GROUP_KEYS), tuple(row[k] for k in ROW_KEYS))
        entry = (summary or {}).get(key, {})
        out.append({**row, **{c: entry.get(c, math.nan) for c in RANK_COLUMNS}})
    return out


def rank_text(row: dict[str, Any]) -> str:
    """A row's rank as shown: ``1`` when settled (its 95 % rank interval is one value), else
    ``2 (1–3)``; empty without an average.

    >>> rank_text({"rank": 2, "rank_low": 1, "rank_high": 3}), rank_text({"rank": 1, "rank_low": 1,
    ...     "rank_high": 1}), rank_text({"rank": float("nan")})
    ('2 (1–3)', '1', '')
    """
    rank = row.get(RANK)
    if rank is None or _missing(rank):
        return ""
    low, high = int(row["rank_low"]), int(row["rank_high"])
    return f"{int(rank)}" if low == high else f"{int(rank)} ({low}–{high})"


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def own_data_line(long: list[dict[str, Any]], group: dict[str, Any]) -> str:
    """The tasks of a protocol group that bring their own data (``file:``/``hf:`` entries, whose
    source is not the group's ``--source``), with where their pairs came from; "" when there are
    none."""
    own = {
        row["task"]: row["task_data"]
        for row in long
        if all(str(row[k]) == str(group[k]) for k in GROUP_KEYS)
        and row.get("task_data")
        and not str(row["task_data"]).startswith(f"{group['source']} ")
    }
    return (
        "Tasks with their own data: " + "; ".join(f"{task}: {data}" for task, data in own.items())
        if own
        else ""
    )


def inputs_line(long: list[dict[str, Any]], group: dict[str, Any]) -> str:
    """The rows of a protocol group that read their sentences under a prompt, or whose weights were
    loaded in another dtype than fp32 (a decoder under --dtype bf16); "" when there are none. A row
    whose prompt differs between tasks (per-task prompts) names the tasks of each.

    >>> group, q = dict.fromkeys(GROUP_KEYS, ""), "'q: {sentence}'"
    >>> row = {**group, "method": "last", "backbone": "qwen", "weights": "fp32"}
    >>> reads = (("STS-B", q), ("SICK-R", q), ("QNLI", ""))
    >>> rows = [{**row, "task": task, "prompt": prompt} for task, prompt in reads]
    >>> inputs_line(rows, group)
    "Inputs: last (qwen): prompt 'q: {sentence}' on STS-B, SICK-R"
    >>> inputs_line(rows[:2], group)
    "Inputs: last (qwen): prompt 'q: {sentence}'"
    """
    seen: dict[str, dict[str, list[str]]] = {}  # row → what it read → on which tasks
    for row in long:
        if not all(str(row[k]) == str(group[k]) for k in GROUP_KEYS):
            continue
        parts = [f"prompt {row['prompt']}"] * bool(row.get("prompt"))
        parts += [f"weights {row['weights']}"] * (row.get("weights") not in ("", "fp32", None))
        tasks = seen.setdefault(f"{row['method']} ({row['backbone']})", {})
        tasks.setdefault(", ".join(parts), []).append(str(row.get("task", "")))
    said = {
        row: "; ".join(
            what if len(reads) == 1 else f"{what} on {', '.join(tasks)}"
            for what, tasks in reads.items()
            if what
        )
        for row, reads in seen.items()
    }
    said = {row: what for row, what in said.items() if what}
    return "Inputs: " + "; ".join(f"{row}: {what}" for row, what in said.items()) if said else ""


def markdown(
    wide: list[dict[str, Any]], tasks: list[str], long: list[dict[str, Any]] | None = None
) -> str:
    """One markdown table per protocol group, each under a header naming its protocol (and, from the
    ``long`` rows, the tasks that read their own data: a file or dataset named in ``--tasks``)."""
    from itertools import groupby

    from tabulate import tabulate

    parts = [
        "# sts-bench leaderboard",
        "",
        "Spearman ×100 of cosine similarity (or the one a row's label names: · dot, · binary "
        "by Hamming distance) vs gold on each task's test split; a table of labelled pairs "
        "(score=… in its protocol line) shows that score ×100 instead. 95 % bootstrap "
        "intervals and Pearson (every labelled-pairs metric) are in scores.csv; every "
        "number's full record is in runs/.",
        "",
        LEGEND,
        "",
    ]
    if any(row.get(UNDEFINED) for row in wide):
        parts += [UNDEFINED_LEGEND, ""]
    columns = list(wide[0]) if wide else []
    for group_values, rows in groupby(wide, key=lambda row: tuple(row[k] for k in GROUP_KEYS)):
        group = [dict(row) for row in rows]
        # a task no row of the group has a number or a reason for belongs to another group's table
        absent = {
            t
            for t in tasks
            if all(
                _missing(row[t]) and t not in (row.get(UNDEFINED) or "").split(",") for row in group
            )
        }
        for row in group:
            tied = (row.get("not_below_best") or "").split(",")
            undefined = (row.get(UNDEFINED) or "").split(",")
            if AVG in row and not _missing(row[AVG]):
                row[AVG] = f"{row[AVG]:.2f}" + (f" {TIED}" if AVG in tied else "")
            if RANK in row:
                row[RANK] = rank_text(row)
            for task in tasks:
                value = row[task]
                if not _missing(value):
                    row[task] = f"{value:.2f}" + (f" {TIED}" if task in tied else "")
                else:
                    row[task] = "undefined" if task in undefined else "—"
        shown = [
            c
            for c in columns
            if c not in (*GROUP_KEYS, "not_below_best", UNDEFINED, *RANK_NUMBERS)
            and c not in absent
            and not all(_missing(row[c]) for row in group)
            and not (c == "marks" and not any(r[c] for r in group))
        ]
        if {row["kind"] for row in group} == {"embedding"}:
            shown.remove("kind")  # only informative once pair scorers are in the table
        cells = [["" if _missing(row[c]) else row[c] for c in shown] for row in group]
        protocol = dict(zip(GROUP_KEYS, group_values))
        own = own_data_line(long or [], protocol)
        inputs = inputs_line(long or [], protocol)
        parts += [
            f"## Protocol: {protocol_line(protocol)}",
            "",
            *([own, ""] if own else []),
            *([inputs, ""] if inputs else []),
            tabulate(
                cells,
                headers=shown,
                tablefmt="pipe",
                floatfmt=".2f",
                missingval="—",
                disable_numparse=False,
            ),
            "",
        ]
    return "\n".join(parts)


def wide_columns(tasks: list[str], extra: list[str]) -> list[str]:
    """The columns of a wide table (leaderboard.csv's, before its fingerprints), in order."""
    head = [*ROW_KEYS, "marks", *tasks, AVG, *RANK_COLUMNS, *extra]
    return [*head, UNDEFINED, *GROUP_KEYS, "not_below_best"]


def write_leaderboard(
    long: list[dict[str, Any]],
    out_dir: Path,
    plots: bool = True,
    marks: set | None = None,
    summary: dict[tuple, dict[str, float]] | None = None,
) -> list[Path]:
    """Write leaderboard.csv/.md, scores.csv and (optionally) plots/leaderboard.png under
    ``out_dir``, from :func:`~harness.runner.tables.frames.long_rows` (the one table representation:
    the page is built from the same rows). ``summary``: each row's average as an estimate and its
    rank (:func:`harness.runner.tables.comparisons.compare`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, tasks, extra = wide_rows(long)
    wide = with_ranks(mark_tied(rows, tasks, marks or set()), summary)
    columns = wide_columns(tasks, extra)
    long_columns = [c for c in (*ROW_KEYS, *GROUP_KEYS, *every_column(), *extra) if c != "created"]
    paths = [out_dir / "leaderboard.csv", out_dir / "leaderboard.md", out_dir / "scores.csv"]
    # Atomic writes: runs sharing an output folder may rebuild the leaderboard at the same time. The
    # CSV alone says which data each task column holds (last, after every column readers knew): the
    # gate refuses a baseline of it on other data (harness.runner.tables.gate); people read the
    # markdown, whose header names each task's data already.
    atomic_write_text(paths[0], csv_text(wide, [*columns, FINGERPRINTS]))
    atomic_write_text(
        paths[1], markdown([{c: row[c] for c in columns} for row in wide], tasks, long) + "\n"
    )
    atomic_write_text(paths[2], csv_text(long, long_columns))
    if plots and long:
        from harness.runner.tables.plot_worker import draw
        from harness.runner.tables.plots import leaderboard_png

        paths.append(draw(leaderboard_png, long, out_dir / "plots" / "leaderboard.png"))
    return paths


def console_table(
    records: Sequence[Record],
    marks: set | None = None,
    summary: dict[tuple, dict[str, float]] | None = None,
) -> str:
    """This run's leaderboard, as printed at the end of a run (USAGE: stdout shows this run only):
    built from this run's records alone, so its columns, own-data lines, ★ and ranks are among its
    rows (``marks``, ``summary``: :func:`~harness.runner.tables.comparisons.compare` of them); the
    files keep every run's board."""
    long = long_rows(records)[0]
    rows, tasks, extra = wide_rows(long)
    rows = with_ranks(mark_tied(rows, tasks, marks or set()), summary)
    columns = wide_columns(tasks, extra)
    return markdown([{c: row[c] for c in columns} for row in rows], tasks, long)


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
        return {
            "this_run": records_digest(inputs.records),
            "every_run": records_digest(inputs.every_run),
            "plots": cfg.plots,
            "bootstrap": cfg.bootstrap or 1000,
            "seed": cfg.seed,
        }

    def write(self, inputs: ReportInputs) -> StepOutput:
        from harness.runner.tables.comparisons import compare, write_significance

        cfg, out = inputs.cfg, inputs.out_dir
        rounds = cfg.bootstrap or 1000
        with stage("comparisons"):  # the paired tests, a stage of the run's (stages.py)
            significance, marks, summary = compare(
                inputs.every_run, rounds, cfg.seed, inputs.resamples
            )
            # The console's ★ and ranks are among this run's rows: a second computation only when
            # the folder holds rows of other runs
            mine = (marks, summary)
            if records_digest(inputs.records) != records_digest(inputs.every_run):
                mine = compare(inputs.records, rounds, cfg.seed, inputs.resamples)[1:]
        table = console_table(inputs.records, *mine)
        long = long_rows(inputs.every_run)[0]
        paths = write_leaderboard(long, out, plots=cfg.plots, marks=marks, summary=summary)
        paths.append(write_significance(significance, out))
        paths += write_frontier_files(long, significance, out, cfg.plots)
        paths += write_pair_metrics(inputs.every_run, out)
        return StepOutput(paths, table)


PAIR_COLUMNS = ("metric_name", "value", "ci_low", "ci_high", "decision", "threshold")


def pair_metric_rows(records: Sequence[Record]) -> list[dict[str, Any]]:
    """One row per (row, task, metric) of the newest records of a kind with metrics beyond its
    main score's table (labelled pairs): every metric with its 95 % interval, how it decided and
    at what threshold (§: chosen on the scored pairs themselves), from the kind
    (:meth:`~harness.core.kinds.TaskKind.metric_rows`)."""
    from harness.core.kinds import kind_of
    from harness.runner.tables.frames import newest, ordered_tasks

    rows: list[dict[str, Any]] = []
    for rec in newest(records):
        kind = kind_of(rec)
        if "metrics" not in kind.comparison_tests():
            continue
        for row in kind.metric_rows(rec):
            metric = kind.metric(row.pop("metric"))
            rows.append(
                {
                    **record_keys(rec),
                    "task": rec["task"]["title"],
                    **{k: math.nan if v is None else v for k, v in row.items()},
                    "metric_name": metric.name + (" §" if metric.on_scored else ""),
                }
            )
    order = {t: i for i, t in enumerate(ordered_tasks(str(r["task"]) for r in rows))}
    rows.sort(
        key=lambda r: (tuple(str(r[k]) for k in (*GROUP_KEYS, *ROW_KEYS)), order[str(r["task"])])
    )
    return rows


def write_pair_metrics(records: Sequence[Record], out_dir: Path) -> list[Path]:
    """pair_metrics.csv when any record is of labelled pairs (:func:`pair_metric_rows`)."""
    rows = pair_metric_rows(records)
    if not rows:
        return []
    path = out_dir / "pair_metrics.csv"
    atomic_write_text(path, csv_text(rows, [*ROW_KEYS, *GROUP_KEYS, "task", *PAIR_COLUMNS]))
    return [path]


def write_frontier_files(
    long: list[dict[str, Any]], significance: list[dict[str, Any]], out: Path, plots: bool
) -> list[Path]:
    """frontier.csv/.md and plots/frontier.png when a row is a compressed vector setting
    (:mod:`harness.runner.tables.frontier`); nothing otherwise."""
    from harness.runner.tables.frontier import frontier_rows, has_settings, write_frontier

    if not has_settings(long):
        return []
    rows = frontier_rows(long, significance)
    paths = write_frontier(rows, out)
    if plots and rows:
        from harness.runner.tables.plot_worker import draw
        from harness.runner.tables.plots import frontier_png

        paths.append(draw(frontier_png, rows, out / "plots" / "frontier.png"))
    return paths
