"""How much a score moves with the prompt: the spread over each prompt set's prompts, from records.

A prompt set (``--set METHOD.prompt=@FILE``, :mod:`harness.runner.execution.prompt_sets`) scores
every prompt as a row of its own. This report gathers a set's rows back, per protocol group,
backbone, fit set and vector setting (the rows a run of the set wrote), and gives, per task and for
the average over tasks, the minimum, median and maximum score over the prompts, which prompt is
best and which worst, and whether the best is significantly above the worst: a paired bootstrap
on the pairs both scored (:func:`harness.core.significance.paired_bootstrap` of
:func:`~harness.core.significance.scored`, the same resamples as ``significance.csv``). For the
average, each round's score is the mean over tasks of that round's task scores (pairs resampled
within each task, each task's rounds those of its own interval: the run's seed), and the test is the
same paired bootstrap on those means. Rows chosen on a dev
split (``prompt_select=dev``) are one prompt per task, not a spread: they are left out.

Worked example: prompts ``a``, ``b``, ``c`` score 70, 72 and 75 on STS-B: min 70 (a), median 72,
max 75 (c); best − worst is 5, tested on the 1,379 pairs' resamples. ``prompts.csv`` has one row
per (set, task) and per set an ``Avg.`` row; ``prompts.md`` the same as tables; the run prints the
tables of the sets it scored after the leaderboard.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.hashing import atomic_write_text
from harness.runner.records.outputs import StepOutput
from harness.runner.records.schema import main_value
from harness.runner.tables.frames import (
    AVG,
    GROUP_KEYS,
    newest,
    ordered_tasks,
    protocol_line,
    record_keys,
    records_digest,
    vector_columns,
)

if TYPE_CHECKING:
    from harness.core.bootstrap import ResampleMemo
    from harness.runner.records.outputs import ReportInputs
    from harness.runner.records.schema import Record
    from harness.runner.settings.config import BenchConfig

ALPHA = 0.05
ABOVE = "▲"
COLUMNS = (
    "method",  # the set's row: the label with the prompt's name replaced by the set
    "backbone",
    "fit_set",
    "prompt_set",
    "sha256",
    "task",
    "n_prompts",
    "min",
    "worst",
    "median",
    "max",
    "best",
    "delta",
    "ci_low",
    "ci_high",
    "p_value",
    "best_above_worst",
    *GROUP_KEYS,
)


def of_set(rec: Record) -> dict[str, Any] | None:
    """The record's prompt of a set (``protocol.prompt_set``) when it is one row of a set's spread;
    None for any other record, and for a row that chose one prompt per task."""
    entry = rec["protocol"].get("prompt_set")
    return entry if isinstance(entry, dict) and not entry.get("select") else None


def set_label(rec: Record) -> str:
    """The set's row as a label: a member's (``last[prompt=query] · 64d``) with the prompt's name
    replaced by the set (``last[prompt=@prompts.toml] · 64d``)."""
    entry = of_set(rec) or {}
    label = rec["method"]["label"]
    return label.replace(f"prompt={entry.get('name')}", f"prompt={entry.get('set')}", 1)


def _set_key(rec: Record) -> tuple[str, ...]:
    keys = record_keys(rec)
    vector = vector_columns(rec)
    return (
        *(keys[k] for k in GROUP_KEYS),
        set_label(rec),
        keys["backbone"],
        keys["kind"],
        keys["fit_set"],
        str(vector["dims"]),
        str(vector["precision"]),
        str(vector["similarity"]),
    )


def gather(records: Sequence[Record]) -> dict[tuple[str, ...], list[Record]]:
    """The newest record of each row of every prompt set, by set (see the module docstring); of a
    set whose file changed between runs, only the rows of its newest content."""
    sets: dict[tuple[str, ...], list[Record]] = {}
    for rec in newest(records):
        if of_set(rec) is not None and rec.get("pairs"):
            sets.setdefault(_set_key(rec), []).append(rec)
    out = {}
    for key, recs in sets.items():
        latest = max(recs, key=lambda r: r["created"])
        sha = (of_set(latest) or {})["sha256"]
        out[key] = [r for r in recs if (of_set(r) or {})["sha256"] == sha]
    return out


def _scored(rec: Record, rounds: int, seed: int, memo: ResampleMemo | None) -> Any:
    """The record's score and its resamples, as the significance table draws them."""
    from harness.core.kinds import kind_of
    from harness.core.significance import Scored
    from harness.runner.records.schema import main_score, main_value

    similarity, resamples = kind_of(rec).comparable(rec, rounds, seed, memo)
    return Scored(similarity, float(main_value(rec)), resamples[main_score(rec)])  # type: ignore[arg-type]


def _spread(values: dict[str, float]) -> dict[str, Any]:
    """min (and its prompt), median, max (and its prompt) of the prompts' scores, in set order: on
    a tie the first prompt is best, the last worst."""
    names = list(values)
    best = max(names, key=lambda n: (values[n], -names.index(n)))
    worst = min(names, key=lambda n: (values[n], -names.index(n)))
    return {
        "n_prompts": len(values),
        "min": values[worst],
        "worst": worst,
        "median": float(np.median(list(values.values()))),
        "max": values[best],
        "best": best,
    }


def _tested(row: dict[str, Any], best: Any, worst: Any) -> dict[str, Any]:
    from harness.core.significance import Scored, paired_bootstrap

    if row["best"] == row["worst"]:
        return {**row, "delta": 0.0, "ci_low": 0.0, "ci_high": 0.0, "p_value": 1.0}
    test = paired_bootstrap(
        Scored(np.empty(0), row["max"], best), Scored(np.empty(0), row["min"], worst)
    )
    return {
        **row,
        "delta": test.delta,
        "ci_low": test.ci_low,
        "ci_high": test.ci_high,
        "p_value": test.p_value,
    }


def spread_rows(
    records: Sequence[Record],
    rounds: int = 1000,
    seed: int = 1234,
    memo: ResampleMemo | None = None,
) -> list[dict[str, Any]]:
    """One row per (prompt set, task), then the set's ``Avg.`` row when it scored two tasks or more
    (over the prompts with a defined score on every task): :data:`COLUMNS`."""
    rows: list[dict[str, Any]] = []
    for key, recs in sorted(gather(records).items()):
        rows += _set_rows(key, recs, rounds, seed, memo)
    for row in rows:
        row["best_above_worst"] = "yes" if row["delta"] > 0 and row["p_value"] < ALPHA else "no"
    return rows


def _set_rows(
    key: tuple[str, ...],
    recs: list[Record],
    rounds: int,
    seed: int,
    memo: ResampleMemo | None,
) -> list[dict[str, Any]]:
    """The rows of one prompt set (see :func:`spread_rows`)."""
    first = of_set(recs[0]) or {}
    order = {name: i for i, name in enumerate(first.get("names") or [])}
    by_task: dict[str, dict[str, Record]] = {}
    for rec in sorted(recs, key=lambda r: order.get((of_set(r) or {})["name"], len(order))):
        by_task.setdefault(rec["task"]["title"], {})[(of_set(rec) or {})["name"]] = rec
    n = len(GROUP_KEYS)
    head = {
        "method": key[n],
        "backbone": key[n + 1],
        "fit_set": key[n + 3],
        "prompt_set": first.get("set", ""),
        "sha256": first.get("sha256", ""),
        **dict(zip(GROUP_KEYS, key)),
    }
    drawn: dict[tuple[str, str], np.ndarray] = {}

    def draws(task: str, name: str) -> np.ndarray:
        if (task, name) not in drawn:
            drawn[(task, name)] = _scored(by_task[task][name], rounds, seed, memo).resamples
        return drawn[(task, name)]

    rows = []
    tasks = ordered_tasks(by_task)
    scores: dict[str, dict[str, float]] = {}  # task → prompt → score, where defined
    for task in tasks:
        scores[task] = {
            name: float(value)
            for name, rec in by_task[task].items()
            if (value := main_value(rec)) is not None
        }
        if scores[task]:
            row = {**head, "task": task, **_spread(scores[task])}
            rows.append(_tested(row, draws(task, row["best"]), draws(task, row["worst"])))
    complete = [name for name in order if all(name in scores[task] for task in tasks)]
    if len(tasks) < 2 or not complete:
        return rows
    averages = {name: float(np.mean([scores[task][name] for task in tasks])) for name in complete}
    row = {**head, "task": AVG, **_spread(averages)}
    best, worst = (
        np.mean(np.stack([draws(task, row[side]) for task in tasks]), axis=0)
        for side in ("best", "worst")
    )
    return [*rows, _tested(row, best, worst)]


def _number(value: float) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:.2f}"


def markdown(rows: Sequence[dict[str, Any]], heading: bool = True) -> str:
    """One table per prompt set: each task's and the average's spread over the prompts."""
    from itertools import groupby

    from tabulate import tabulate

    parts = []
    if heading:
        parts += [
            "# Prompt sets: the spread over prompts",
            "",
            "Each task's score ×100 (and the average over tasks) over the prompts of a set: "
            "min (worst prompt), median, max (best prompt); best − worst with its 95 % paired "
            f"bootstrap interval and p-value on the same pairs; {ABOVE} the best is significantly "
            f"above the worst (p < {ALPHA}). Every row of a set is in leaderboard.md.",
            "",
        ]
    for _, group in groupby(
        rows, key=lambda r: tuple(r[k] for k in ("method", "backbone", "fit_set", *GROUP_KEYS))
    ):
        table = list(group)
        first = table[0]
        parts += [
            f"## {first['method']} · {first['backbone']}"
            + (f" · fit set {first['fit_set']}" if first["fit_set"] else ""),
            "",
            f"Protocol: {protocol_line(first)} · prompt set {first['prompt_set']} (sha256 "
            f"{first['sha256'][:12]})",
            "",
            tabulate(
                [
                    [
                        row["task"],
                        row["n_prompts"],
                        f"{_number(row['min'])} ({row['worst']})",
                        _number(row["median"]),
                        f"{_number(row['max'])} ({row['best']})",
                        _number(row["delta"])
                        + (f" {ABOVE}" if row["best_above_worst"] == "yes" else ""),
                        f"[{_number(row['ci_low'])}, {_number(row['ci_high'])}]",
                        f"{row['p_value']:.3g}",
                    ]
                    for row in table
                ],
                headers=["task", "prompts", "min", "median", "max", "best − worst", "95 % CI", "p"],
                tablefmt="pipe",
                disable_numparse=True,
            ),
            "",
        ]
    return "\n".join(parts)


class PromptSpread:
    """The report step of prompt sets (:mod:`harness.runner.records.outputs`): ``prompts.csv`` and
    ``prompts.md`` from every record of the folder that is one prompt of a set, and for the console
    the tables of the sets this run scored. Nothing when the folder has no prompt set (no pandas,
    no resampling: the warm path of a run without one is unchanged). Memoised on the set records'
    content and the bootstrap settings."""

    name = "prompt-spread"

    def enabled(self, cfg: BenchConfig) -> bool:
        return True

    def memo_key(self, inputs: ReportInputs) -> dict[str, Any] | None:
        every = [rec for rec in inputs.every_run if of_set(rec) is not None]
        if not every:
            return None  # written on every run: it writes nothing
        cfg = inputs.cfg
        return {
            "this_run": records_digest([r for r in inputs.records if of_set(r) is not None]),
            "every_run": records_digest(every),
            "bootstrap": cfg.bootstrap or 1000,
            "seed": cfg.seed,
        }

    def write(self, inputs: ReportInputs) -> StepOutput:
        from harness.runner.tables.frames import csv_text

        every = [rec for rec in inputs.every_run if of_set(rec) is not None]
        if not every:
            return StepOutput([])
        cfg, out = inputs.cfg, inputs.out_dir
        rows = spread_rows(every, cfg.bootstrap or 1000, cfg.seed, inputs.resamples)
        paths = [out / "prompts.csv", out / "prompts.md"]
        atomic_write_text(paths[0], csv_text(rows, list(COLUMNS)))
        atomic_write_text(paths[1], markdown(rows) + "\n")
        # stdout shows this run (USAGE): the spread of its own prompts only, on its own tasks
        own = [rec for rec in inputs.records if of_set(rec) is not None]
        shown = spread_rows(own, cfg.bootstrap or 1000, cfg.seed, inputs.resamples) if own else []
        return StepOutput([Path(p) for p in paths], markdown(shown) if shown else "")
