"""The page's paper deltas, as data for ``templates/parts.html.j2``: one :class:`PaperFile` per
``paper-*.csv`` (published against measured, per paper table cell), its rows that did not run one
:class:`NotRun` line per reason with the command that runs them.

Files are read without following a link (the output folder is closed:
:mod:`harness.runner.records.lock`): a link is left out with one warning."""

from __future__ import annotations

import csv
import io
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.runner.page.cells import (
    Cell,
    Head,
    Table,
    as_float,
    classes,
    number,
    signed_class,
    sort_value,
)
from harness.runner.presets.data import PAPERS, load_paper
from harness.runner.presets.evidence import (
    MODEL_DIFFERS,
    NOT_RUN,
    OPTIONAL,
    PAPER_COLUMNS,
    PROTOCOL_DIFFERS,
    RAN,
    verify_lines,
)
from harness.runner.records.lock import NotAFile, read_inside

if TYPE_CHECKING:
    from collections.abc import Iterable

    from harness.runner.records.schema import Record

NUMERIC = ("published", "measured", "delta")
log = logging.getLogger("sts_bench.report")


@dataclass(frozen=True)
class NotRun:
    """The rows of one reason: how many, their models and tasks, the reason, the command."""

    count: int
    models: str
    tasks: str
    reason: str
    command: str


@dataclass(frozen=True)
class PaperFile:
    """One ``paper-*.csv``: its name, and either ``missing`` (why it is skipped: the columns it
    lacks) or the table of rows that ran, the lines of those that did not, the count of lines
    shown and the lines left out (each with why: the evidence does not give its figures)."""

    name: str
    missing: list[str]
    table: Table | None = None
    not_run: list[NotRun] | None = None
    total: int = 0
    left_out: list[str] = field(default_factory=list)  # lines the evidence does not give: why


def papers(out_dir: Path, records: Iterable[Record] = ()) -> list[PaperFile]:
    """Paper deltas from every ``paper-*.csv``, each number from evidence: published figures from
    the paper's bundled TOML, measured ones from the verified ``records`` (the run's ``runs/``)
    each line names, deltas and averages recomputed (:func:`verify_lines`). Rows that ran are a
    table (each line names its metric: spearman, a pair-classification score such as roc_auc, or
    degradation_pct); a delta measured on another model than the paper's is grey and says so;
    rows that did not run are one line per reason. A line the evidence does not give is left out,
    and its file named in one warning; a file of no bundled paper, or that lacks a column, or
    cannot be read, says so (and is logged)."""
    found = []
    records = list(records)
    for path in sorted(out_dir.glob("paper-*.csv")):
        try:
            reader = csv.DictReader(io.StringIO(read_inside(path).decode("utf-8"), newline=""))
            fields = reader.fieldnames or []
            lacking = [c for c in PAPER_COLUMNS if c not in fields and c not in OPTIONAL]
            missing = [f"missing column(s) {', '.join(lacking)}"] if lacking else []
            rows = [] if missing else list(reader)  # an absent cell is read as empty
        except NotAFile as err:
            log.warning("report: %s %s; left out of the page", path, err.strerror)
            continue
        except (OSError, UnicodeDecodeError, csv.Error) as err:
            missing, rows = [f"unreadable ({err})"], []
        name = path.stem[len("paper-") :]
        if not missing and (name not in PAPERS or any(row["paper"] != name for row in rows)):
            missing = [f"not a paper of sts-bench's ({', '.join(PAPERS)}), or another's lines"]
        if missing:
            log.warning("report: %s skipped: %s", path, "; ".join(missing))
            found.append(PaperFile(path.name, missing))
            continue
        verified = verify_lines(load_paper(name), rows, records)
        if verified.left_out:
            log.warning(
                "report: %s: %d line(s) left out of the page, their figures not given by the "
                "paper's published table and the verified records in runs/ (first: %s); run "
                "python run_bench.py --paper %s again to rewrite it",
                path,
                len(verified.left_out),
                verified.left_out[0],
                name,
            )
        lines = verified.lines
        ran = [row for row in lines if not str(row["status"]).startswith(NOT_RUN)]
        table, not_run = paper_table(ran), not_run_lines(lines)
        found.append(PaperFile(path.name, [], table, not_run, len(lines), verified.left_out))
    return found


def _delta(value: Any, status: str) -> Cell:
    """The delta cell: coloured by its sign only on a line of the paper's own model and protocol
    (its status, rebuilt from its record by :func:`verify_lines`, is "ran" alone); any other is
    grey and labelled with what differs: it is not the paper's result."""
    shown = "—" if math.isnan(as_float(value)) else f"{as_float(value):+.2f}"
    if status != RAN:
        tag = MODEL_DIFFERS if MODEL_DIFFERS in status else PROTOCOL_DIFFERS
        return Cell(
            shown,
            css="num differs",
            sort=sort_value(value),
            tag=tag,
            title=f"{tag} from the paper's: not comparable",
        )
    return Cell(shown, css=classes("num", signed_class(value)), sort=sort_value(value))


def paper_table(rows: list[dict[str, Any]]) -> Table:
    """The rows that ran, every column of :data:`PAPER_COLUMNS`."""
    body = []
    for row in rows:
        cells = []
        for c in PAPER_COLUMNS:
            if c == "delta":
                cells.append(_delta(row[c], str(row["status"])))
            elif c in NUMERIC:
                cells.append(Cell(number(row[c]), css="num", sort=sort_value(row[c])))
            else:
                cells.append(Cell(str(row[c])))
        body.append(cells)
    return Table(
        "sortable paper",
        [Head(c, c in NUMERIC) for c in PAPER_COLUMNS],
        body,
        empty="No row of this paper ran.",
    )


def not_run_lines(rows: list[dict[str, Any]]) -> list[NotRun]:
    """The rows that did not run, one line per reason: how many, which models and tasks, the reason
    in full (it says what to fix), and the command that runs them."""
    by_reason: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        status = str(row["status"])
        if status.startswith(NOT_RUN):
            by_reason.setdefault(status[len(NOT_RUN) :].strip(), []).append(row)
    # A run on another model says so in its rows that ran (their records'): the command keeps it.
    differs = [
        re.match(rf"{MODEL_DIFFERS}: (\S+) \(paper:", part.strip())
        for row in rows
        if not str(row["status"]).startswith(NOT_RUN)
        for part in str(row["status"]).split(";")
    ]
    backbone = next((m.group(1) for m in differs if m), None)
    lines = []
    for reason, group in by_reason.items():
        models = list(dict.fromkeys(f"{r['model']} ({r['setting']})" for r in group))
        tasks = list(dict.fromkeys(str(r["task"]) for r in group))
        command = paper_command(str(group[0]["paper"]), reason, tasks, backbone)
        lines.append(
            NotRun(len(group), "; ".join(models), ", ".join(tasks), reason.rstrip("."), command)
        )
    return lines


def paper_command(paper: str, reason: str, tasks: list[str], backbone: str | None = None) -> str:
    """The command that runs a paper's rows that did not run: the tasks left out by ``--tasks`` by
    name; otherwise the paper again, once the reason's own fix is done (it names the flag or
    folder).
    ``backbone``: the model the run used instead of the paper's, kept so the rerun matches."""
    from harness.core.data.tasks import TASKS

    command = f"python run_bench.py --paper {paper}"
    command += f" --backbone {backbone}" if backbone else ""
    if "--tasks" in reason:
        by_title = {spec.title: name for name, spec in TASKS.items()}
        command += " --tasks " + " ".join(by_title.get(t, t) for t in tasks)
    return command
