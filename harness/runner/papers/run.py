"""``--paper NAME``: a paper's own protocol, run by name, with its published numbers beside ours.

Each paper is data (``harness/runner/presets/<name>.toml``): every setting as the authors ran it,
with where it comes from (a table of the paper or a file of their code), the data source of each
task, and the published rows (model, setting, task, number, table). A run resolves every row into
ordinary runs of the harness — one per data source the row's tasks need — so its scores are normal
result files too, then writes ``results/paper-<name>.md`` and ``.csv``.

Precedence: settings the user gave (command line or config file) > the row's settings > the paper's
> defaults. Every departure from the paper is written next to the numbers it changed. A row that
cannot run here (a model or a data folder out of reach) says why and how to make it run; the rows
that can run still run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.core.data.tasks import TASKS
from harness.core.errors import UserError
from harness.core.hashing import atomic_write_text
from harness.core.hub import HubFailures
from harness.runner.presets.data import Paper, Row, Setting, load_paper
from harness.runner.presets.evidence import (
    CSV_COLUMNS,
    MODEL_DIFFERS,
    NOT_RUN,
    PAPER_COLUMNS,
    RAN,
    average_line,
    figure,
    measured_value,
    option_departure,
    paper_line,
    record_file,
    show,
)
from harness.runner.settings.config import BenchConfig


@dataclass
class RowPlan:
    """One row resolved into runs: (source, tasks, config) each, plus what departs from the
    paper."""

    row: Row
    runs: list[tuple[str, list[str], BenchConfig]]
    departures: list[str]
    skipped: dict[str, str]  # task → why it cannot be run by sts-bench at all


def resolve(paper: Paper, cfg: BenchConfig) -> list[RowPlan]:
    """Every row of ``paper`` as harness runs, honouring what the user set explicitly."""
    given = cfg.given()
    plans = []
    for row in paper.rows:
        departures: list[str] = []
        values: dict[str, Any] = {}
        for key, setting in {**paper.settings, **row.settings}.items():
            if key in given and getattr(cfg, key) != _config_value(key, setting.value):
                departures.append(f"{key}={show(getattr(cfg, key))} (paper: {show(setting.value)})")
            elif key not in given:
                values[key] = _config_value(key, setting.value)
        backbone = row.backbone or paper.backbone
        takes_backbone = row.backbone is None or paper.rows_take_backbone
        if takes_backbone and "backbone" in given and cfg.backbone != backbone:
            departures.append(f"{MODEL_DIFFERS}: {cfg.backbone} (paper: {backbone})")
            backbone = cfg.backbone
        params = {method: dict(options) for method, options in cfg.method_params.items()}
        for method, options in {**paper.options, **_merge(paper.options, row.options)}.items():
            for option, setting in options.items():
                value = setting.value
                if setting.model and "backbone" in given:
                    value = cfg.backbone
                    departures.append(option_departure(method, option, value, setting))
                if f"{method}.{option}" in given:
                    if params[method][option] != value:
                        given_value = params[method][option]
                        departures.append(option_departure(method, option, given_value, setting))
                    continue
                params.setdefault(method, {})[option] = value
        tasks = [
            t
            for t in (cfg.tasks if "tasks" in given else paper.tasks)
            if t in row.published or "tasks" in given
        ]
        skipped = {t: f"{NOT_RUN} not an sts-bench task" for t in row.published if t not in TASKS}
        by_source: dict[str, list[str]] = {}

        def source_for(task: str) -> str:
            # --source replaces the paper's where it has the task; a task it does not have (QNLI
            # under --source senteval) keeps the paper's source
            given_has = "source" in given and TASKS[task].place(cfg.source) is not None
            return cfg.source if given_has else paper.source_of(task).value

        for task in tasks:
            if task in TASKS:
                by_source.setdefault(source_for(task), []).append(task)
        if "source" in given:
            departures += [
                f"source={cfg.source} (paper: {paper.source_of(t).value} for {t})"
                for t in tasks
                if t in TASKS and source_for(t) != paper.source_of(t).value
            ]
        runs = [
            (
                source,
                names,
                replace(
                    cfg,
                    **values,
                    paper=None,
                    methods=(row.method,),
                    tasks=tuple(names),
                    source=source,
                    backbone=backbone,
                    revision=None if backbone != cfg.backbone else cfg.revision,
                    method_params=params,
                ),
            )
            for source, names in by_source.items()
        ]
        plans.append(RowPlan(row, runs, departures, skipped))
    return plans


def _merge(base: dict[str, dict[str, Setting]], extra: dict[str, dict[str, Setting]]) -> dict:
    return {method: {**base.get(method, {}), **extra[method]} for method in extra}


def _config_value(key: str, value: Any) -> Any:
    return tuple(value) if key in ("first_last_layers", "tasks", "methods") else value


def run_paper(cfg: BenchConfig):
    """Run every row the machine can run; write the paper table. Returns the runner's outcome."""
    paper = load_paper(cfg.paper or "")
    if cfg.baseline:
        raise UserError(
            "--paper and --baseline do not combine: compare a paper's rows in "
            "results/paper-<name>.csv, or run the baseline check without --paper"
        )
    with HubFailures().current():  # a model the hub lacks is asked for once, not once per row
        return _run_rows(paper, cfg)


def _run_rows(paper: Paper, cfg: BenchConfig):
    from harness.runner.execution.run import RunOutcome, run, say

    lines: list[dict[str, Any]] = []
    records, paths = [], []
    for plan in resolve(paper, cfg):
        row = plan.row
        measured: dict[str, float | None] = {}
        evidence: dict[str, str] = {}  # task → the result file its measured figure comes from
        status: dict[str, str] = dict(plan.skipped)
        for _, tasks, row_cfg in plan.runs:
            try:
                outcome = run(row_cfg)
            except UserError as err:
                say(
                    f"paper {paper.name}: {row.model} ({row.setting}) on {', '.join(tasks)} not "
                    f"run: {err}"
                )
                status.update({task: f"{NOT_RUN} {err}" for task in tasks})
                continue
            records += outcome.records
            paths += outcome.result_paths
            for record in outcome.records:
                if record["method"]["name"] == row.method:
                    measured[record["task"]["name"]] = measured_value(record, row.metric)
                    evidence[record["task"]["name"]] = record_file(record)
        done = "planned (--dry-run)" if cfg.dry_run else RAN
        ran = done + (f"; {'; '.join(plan.departures)}" if plan.departures else "")
        first = len(lines)
        for task, published in row.published.items():
            if task not in status and task not in measured:
                status[task] = f"{NOT_RUN} task not selected (--tasks)"
            value, title = measured.get(task), TASKS[task].title if task in TASKS else task
            named = evidence.get(task, "") if value is not None else ""
            line = paper_line(paper, row, title, published, value, status.get(task, ran), named)
            lines.append(line)
        lines += average_line(paper, row, lines[first:])
    out = Path(cfg.output_dir)
    table = paper_markdown(paper, lines)
    if cfg.dry_run:  # every row only planned: the paper table is printed, nothing is written
        return RunOutcome(records, paths, [], table, dry_run=True)
    written = write_paper(paper, lines, table, out)
    written += refresh_page(cfg, out)
    return RunOutcome(records, paths, written, table)


def refresh_page(cfg: BenchConfig, out: Path) -> list[Path]:
    """Rebuild index.html (and the history pages) now that paper-<name>.csv is written: each row's
    run built the page before the paper table existed, so without this the page would show the
    previous paper run's deltas, or none. Under the folder's lock, like every run's report stage."""
    from harness.runner.page.build import write_pages
    from harness.runner.records.lock import output_lock
    from harness.runner.records.store import load_results
    from harness.runner.tables.comparisons import read_back, read_ranks

    if not (out / "significance.csv").is_file() or not (out / "leaderboard.csv").is_file():
        return []  # no row ran here yet: there is no leaderboard to put beside the paper table
    with output_lock(out):
        significance, marks = read_back(out)
        return write_pages(cfg, load_results(out / "runs"), marks, significance, read_ranks(out))[0]


def paper_markdown(paper: Paper, lines: list[dict[str, Any]]) -> str:
    from tabulate import tabulate

    settings = [[key, show(s.value), s.source] for key, s in paper.settings.items()]
    settings += [[f"source ({task})", s.value, s.source] for task, s in paper.sources.items()]
    settings += [
        [f"{method} {option}", show(s.value), s.source]
        for method, options in paper.options.items()
        for option, s in options.items()
    ]

    # the CSV's columns from the model on, each figure with 2 decimals, the delta signed
    shown = {"published": figure, "measured": figure, "delta": _signed}
    rows = [[shown.get(c, str)(line[c]) for c in PAPER_COLUMNS[2:]] for line in lines]
    return "\n".join(
        [
            f"# {paper.title}",
            "",
            f"Code: {paper.code}. Generated by `python run_bench.py --paper {paper.name}`; "
            "each line names its metric (spearman, a pair-classification score such as roc_auc, "
            "all ×100, or DSE's degradation_pct). Every setting below is the paper's, "
            "with its source; each departure is written in the status of the numbers it changed.",
            "",
            tabulate(
                settings,
                headers=["setting", "value", "source"],
                tablefmt="pipe",
                disable_numparse=True,
            ),
            "",
            tabulate(
                rows,
                # the CSV's columns from the model on, the delta written as Δ
                headers=[("Δ" if c == "delta" else c) for c in PAPER_COLUMNS[2:]],
                tablefmt="pipe",
                disable_numparse=True,
            ),
            "",
        ]
    )


def _signed(delta: float | None) -> str:
    return "—" if delta is None else f"{delta:+.2f}"


def write_paper(paper: Paper, lines: list[dict[str, Any]], table: str, out: Path) -> list[Path]:
    from harness.runner.tables.leaderboard import csv_text  # the leaderboards' CSV: 4 decimals

    paths = [out / f"paper-{paper.name}.md", out / f"paper-{paper.name}.csv"]
    atomic_write_text(paths[0], table)
    atomic_write_text(paths[1], csv_text(lines, list(CSV_COLUMNS)))
    return paths
