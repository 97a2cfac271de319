"""The regression gate: this run's scores against a baseline leaderboard (``--baseline``).

A verdict a CI job trusts must not be fooled, so the gate

* reads the baseline **once, before anything is written** (:func:`load_baseline`, from the
  preflight): a baseline inside the output folder is compared as it was, not as this run rewrote it;
* **normalises keys** as the leaderboard writes them (``128.0`` is ``128``, ``"avg "`` is ``avg``,
  ``1, -1`` is ``1,-1``), so a CSV that went through a spreadsheet still matches;
* refuses to **compare nothing**: every (row, task) this run scored must have a baseline score,
  else one ``error:`` line (exit 2) names what did not match — unless ``--baseline-partial``
  asks to compare what matches (and even then at least one cell must);
* checks the match **before encoding** as well (:func:`check_planned`), from the rows the plan
  will produce, so a wrong baseline costs a second, not the run;
* calls a drop a **regression** (exit 1) only when it is larger than ``--tolerance`` and its 95 %
  interval excludes the baseline; a score that became undefined is a regression too;
* compares **like with like**: a leaderboard.csv names the data of each task column (its
  ``task_fingerprints``, the sha256 of the pairs), and a cell scored on other data than its baseline
  (a pairs file edited since, another file under the same name) is refused (exit 2), not compared;
* takes the tool's own leaderboard.csv of **any** run, whatever its tasks (a file task's column is
  named by the file): every column that is neither a key nor one the leaderboard adds is a task;
* refuses a **non-finite** baseline score: ``-inf`` would make the gate unable to fire, ``inf``
  would make it fire on every run.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.errors import UserError
from harness.core.hashing import PAIRS_BYTES, read_input
from harness.runner.tables.frames import (
    AVG,
    FINGERPRINTS,
    GROUP_KEYS,
    ROW_KEYS,
    TASK_ORDER,
    UNDEFINED,
)

if TYPE_CHECKING:
    import pandas as pd

CSV_ROUNDING = 1e-3  # leaderboard.csv keeps 4 decimals: a smaller "drop" is the file's rounding
SHOWN = 3  # unmatched cells named in the error line


BASELINE_HINT = "pass a leaderboard.csv written by run_bench.py (results/leaderboard.csv)"
# Columns a leaderboard.csv has beside its keys and tasks: never a task's score.
# the rank and the Avg. interval columns (harness.runner.tables.leaderboard.RANK_COLUMNS)
NOT_TASKS = (
    "marks",
    AVG,
    "not_below_best",
    UNDEFINED,
    FINGERPRINTS,
    "rank",
    "rank_low",
    "rank_high",
    "avg_ci_low",
    "avg_ci_high",
)


def task_columns(columns: Iterable[Any]) -> list[str]:
    """The task columns of a baseline: every column that is neither a key nor one the leaderboard
    adds (marks, Avg., ...), so a leaderboard of file tasks (columns named by their files) is one.
    A method's own column (DSE's "vs teacher (%)") is counted too; no cell is ever looked up by it.

    >>> task_columns(["method", "backbone", "marks", "STS-B", "my-pairs", "Avg.", "aggregation",
    ...               "task_fingerprints"])
    ['STS-B', 'my-pairs']
    """
    return [str(c) for c in columns if c not in (*ROW_KEYS, *GROUP_KEYS, *NOT_TASKS)]


def read_baseline(path: str | Path) -> pd.DataFrame:
    """The baseline leaderboard CSV, checked: readable UTF-8 CSV, a ``method`` column, at least one
    task column, finite numbers (or empty cells) in every task column, readable task fingerprints.
    Anything else is one UserError line.
    """
    import pandas as pd

    text = read_input(Path(path).expanduser(), "--baseline", PAIRS_BYTES)
    try:
        # every cell as its text: keys are normalised from it, scores converted below, and an error
        # line quotes a cell as the file has it ('1e999', not the inf pandas would make of it)
        base = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, na_values=[""])
    except pd.errors.EmptyDataError:
        raise UserError(f"--baseline {path}: the file is empty; {BASELINE_HINT}") from None
    except (pd.errors.ParserError, ValueError) as err:
        first = (str(err).strip().splitlines() or ["unreadable"])[0][:160]
        raise UserError(
            f"--baseline {path}: not a readable CSV ({first}); {BASELINE_HINT}"
        ) from None
    tasks = task_columns(base.columns)
    if "method" not in base.columns or not tasks:
        raise UserError(
            f"--baseline {path}: expected a 'method' column and task columns (such as "
            f"{', '.join(TASK_ORDER[:3])}, or a file task's name); found "
            f"{', '.join(map(str, base.columns[:8])) or 'none'}; {BASELINE_HINT}"
        )
    for task in tasks:
        numbers = pd.to_numeric(base[task], errors="coerce")
        bad = base[task].notna() & numbers.isna()
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise UserError(
                f"--baseline {path}:{row + 2}: column {task} holds {base[task].iloc[row]!r}, not a "
                f"number; {BASELINE_HINT}"
            )
        # inf/-inf parse as numbers; a -inf baseline is never dropped below, an inf one always is
        infinite = numbers.notna() & ~numbers.map(lambda v: math.isfinite(float(v)))
        if infinite.any():
            row = int(infinite.to_numpy().nonzero()[0][0])
            raise UserError(
                f"--baseline {path}:{row + 2}: column {task} holds {base[task].iloc[row]!r}, not a "
                f"finite number (the gate could never, or would always, fire); {BASELINE_HINT}"
            )
        base[task] = numbers
    if FINGERPRINTS in base.columns:
        for row, cell in enumerate(base[FINGERPRINTS].tolist()):
            try:
                parse_fingerprints(cell)
            except ValueError as err:
                raise UserError(
                    f"--baseline {path}:{row + 2}: column {FINGERPRINTS} holds {cell!r} ({err}); "
                    f"{BASELINE_HINT}"
                ) from None
    return base


def parse_fingerprints(cell: Any) -> dict[str, str]:
    """A ``task_fingerprints`` cell as {task: sha256 of its pairs}; an empty cell is {}.

    >>> parse_fingerprints("STS-B=9e848b50; my-pairs=0c1d")
    {'STS-B': '9e848b50', 'my-pairs': '0c1d'}
    """
    if cell is None or (isinstance(cell, float) and math.isnan(cell)):
        return {}
    found: dict[str, str] = {}
    for entry in str(cell).split(";"):
        if not entry.strip():
            continue
        # the digest has no '=', so the last one splits it from a task name, whatever that holds
        task, equals, digest = entry.strip().rpartition("=")
        if not equals or not task or not digest or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError(f"{entry.strip()!r} is not TASK=SHA256")
        found[task] = digest
    return found


def normal_key(column: str, value: Any) -> str:
    """A key cell as the leaderboard writes it: ``normal_key("max_length", "128.0") == "128"``,
    ``normal_key("first_last_layers", " 1, -1") == "1,-1"``,
    ``normal_key("method", "avg ") == "avg"``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    text = str(value).strip()
    if column == "first_last_layers":
        return ",".join(part.strip() for part in text.split(",") if part.strip())
    if column == "max_length":
        try:
            number = float(text)
        except ValueError:
            return text
        return str(int(number)) if number.is_integer() else text
    return text


@dataclass
class Baseline:
    """A baseline leaderboard as read before the run: its path, key columns and rows."""

    path: str
    # the key columns the file has (a subset of GROUP_KEYS + ROW_KEYS, with "method")
    keys: list[str]
    rows: list[dict[str, Any]]  # keys normalised, task cells float or NaN
    # per row, {task: sha256 of the pairs its score was computed on}; {} where the file does not say
    # (a hand-made baseline, a leaderboard.csv written before the column existed)
    data: list[dict[str, str]] | None = None

    def entries_for(self, cell: Mapping[str, str], task: str) -> list[tuple[float, str | None]]:
        """(score, fingerprint of its data or None) of every row matching ``cell`` on the file's
        keys."""
        wanted = {k: normal_key(k, cell.get(k, "")) for k in self.keys}
        data = self.data if self.data is not None else [{} for _ in self.rows]
        return [
            (row.get(task, math.nan), fingerprints.get(task))
            for row, fingerprints in zip(self.rows, data)
            if all(row[k] == v for k, v in wanted.items())
        ]

    def describe(self, cell: Mapping[str, str]) -> str:
        return ", ".join(
            f"{k}={normal_key(k, cell.get(k, ''))}" for k in self.keys if k != "method"
        )


def load_baseline(path: str | Path) -> Baseline:
    """Read and check the baseline CSV (:func:`harness.runner.execution.preflight.read_baseline`),
    normalised."""
    frame = read_baseline(path)
    keys = [k for k in (*ROW_KEYS, *GROUP_KEYS) if k in frame.columns]
    tasks = task_columns(frame.columns)
    rows, data = [], []
    for record in frame.to_dict("records"):
        row: dict[str, Any] = {k: normal_key(k, record.get(k)) for k in keys}
        for task in tasks:
            value = record.get(task)
            row[task] = (
                float(value)
                if isinstance(value, int | float) and not isinstance(value, bool)
                else math.nan
            )
        rows.append(row)
        data.append(parse_fingerprints(record.get(FINGERPRINTS)))
    return Baseline(str(path), keys, rows, data)


@dataclass
class Match:
    """One (row, task) of this run against its baseline score."""

    cell: dict[str, Any]  # the long row: keys, task, score (the main score), ci_low, ci_high
    baseline: float


def match(baseline: Baseline, cells: Iterable[dict[str, Any]], partial: bool) -> list[Match]:
    """Pair every cell with its one baseline score on the same data; raise one UserError line for
    what cannot be. A cell's data is its ``fingerprint`` (long rows carry it); a cell or a baseline
    row that does not say is matched by its keys alone, as before fingerprints were written. A cell
    whose only baseline scores are on other data is refused even under ``--baseline-partial``: a
    comparison of two datasets is no verdict, and leaving the cell out would hide that it
    changed."""
    matched, unmatched, other_data = [], [], []
    for cell in cells:
        now = cell.get("fingerprint") or None
        entries = [
            (v, fp) for v, fp in baseline.entries_for(cell, cell["task"]) if not math.isnan(v)
        ]
        found = [v for v, fp in entries if now is None or fp is None or fp == now]
        elsewhere = sorted(
            {fp for _, fp in entries if now is not None and fp is not None and fp != now}
        )
        if elsewhere and not found:
            other_data.append(
                f"{cell['method']} on {cell['task']} (baseline on sha256 "
                f"{', '.join(fp[:12] for fp in elsewhere)}, this run on sha256 {str(now)[:12]})"
            )
            continue
        if len(found) == 1:
            matched.append(Match(cell, found[0]))
            continue
        why = "no baseline score" if not found else f"{len(found)} baseline rows"
        unmatched.append(
            f"{cell['method']} on {cell['task']} ({why} for {baseline.describe(cell)})"
        )
    if other_data:
        more = len(other_data) - SHOWN
        named = "; ".join(other_data[:SHOWN]) + (f"; and {more} more" if more > 0 else "")
        raise UserError(
            f"--baseline {baseline.path}: made on other data: {named}; compare against a "
            "leaderboard.csv of a run on the same data"
        )
    if unmatched and (not partial or not matched):
        more = len(unmatched) - SHOWN
        named = "; ".join(unmatched[:SHOWN]) + (f"; and {more} more" if more > 0 else "")
        fix = "compare against a leaderboard.csv written with the same settings" + (
            "" if partial else ", or pass --baseline-partial to compare only the cells that match"
        )
        raise UserError(
            f"--baseline {baseline.path}: {len(unmatched)} of {len(matched) + len(unmatched)} "
            f"scored cell(s) have no single baseline score: {named}; {fix}"
        )
    return matched


def check_planned(baseline: Baseline, cells: Iterable[dict[str, Any]], partial: bool) -> None:
    """Before encoding: the rows the plan will score all have baseline scores (see
    :func:`match`)."""
    match(baseline, cells, partial)


def verdict(matches: list[Match], tolerance: float) -> pd.DataFrame:
    """Every drop, with its interval and whether it is a regression (see the module docstring)."""
    import pandas as pd

    drops = []
    for item in matches:
        cell, before = item.cell, item.baseline
        now = cell["score"]
        if now is not None and not _nan(now) and now >= before - CSV_ROUNDING:
            continue
        undefined = now is None or _nan(now)
        low, high = _number(cell.get("ci_low")), _number(cell.get("ci_high"))
        has_interval = not undefined and not math.isnan(low) and not math.isnan(high)
        beyond = undefined or now < before - tolerance
        significant = undefined or not has_interval or high - before < 0
        drops.append(
            {
                "method": cell["method"],
                "backbone": cell["backbone"],
                "task": cell["task"],
                "baseline": before,
                "now": math.nan if undefined else now,
                "change": math.nan if undefined else now - before,
                "change_ci95": f"[{low - before:.2f}, {high - before:.2f}]"
                if has_interval
                else "—",
                "beyond_tolerance": beyond,
                "significant": significant,
                "regression": beyond and significant,
            }
        )
    columns = [
        "method",
        "backbone",
        "task",
        "baseline",
        "now",
        "change",
        "change_ci95",
        "beyond_tolerance",
        "significant",
        "regression",
    ]
    return pd.DataFrame(drops, columns=columns)


def _number(value: Any) -> float:
    """A cell as a float: NaN for None or anything not a number."""
    return (
        float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    )


def _nan(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
