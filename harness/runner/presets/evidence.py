"""A paper table's lines as evidence: what the paper runner writes, and what the page accepts.

The paper runner writes ``paper-<name>.csv``, one line per (row, task): the published figure, the
measured one, their delta, a status, and ``record``, the name of the result file in ``runs/`` the
measured figure comes from. The page never shows a number from that CSV as written: it takes the
published figure from the paper's bundled TOML (:mod:`harness.runner.presets.data`), recomputes the
measured one from the verified record the line names (:func:`measured_value`), the delta from the
two and each Avg. line from its row's task lines (:func:`average_line`, the runner's own
function). A line whose record is missing, unverified, of another method or task, or whose
written figures are not what the evidence gives is left out, and the file is named in one
warning (:func:`verify_lines`). The CSV only says which lines exist and why a row did not run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from harness.runner.presets.data import Paper, Row, Setting

if TYPE_CHECKING:
    from harness.runner.records.schema import Record

# The paper runner writes these words into a row's status; the page reads them.
RAN = "ran"  # a row that ran as the paper ran it; departures follow after "; "
MODEL_DIFFERS = "model differs"
PROTOCOL_DIFFERS = "protocol differs"  # the page's tag for the paper's model, run otherwise
NOT_RUN = "not run:"
AVERAGE = "Avg."
# The columns the page shows, in order; the CSV has these and RECORD.
PAPER_COLUMNS = (
    "paper",
    "table",
    "model",
    "setting",
    "task",
    "metric",
    "published",
    "measured",
    "delta",
    "status",
)
RECORD = "record"  # the result file (runs/<name>.json) a measured figure comes from
CSV_COLUMNS = (*PAPER_COLUMNS, RECORD)
# Columns a paper CSV may lack, with the value they then have: files written before the paper
# runner named each line's metric were all Spearman.
OPTIONAL = {"metric": "spearman", RECORD: ""}
# The CSV holds 4 decimals: a written figure within this of the recomputed one is that figure.
WRITTEN_TOLERANCE = 5.1e-5


def measured_value(record: Record, metric: str) -> float | None:
    """The number a row compares with its published figure: Spearman of an STS record, one score
    of a pairclass record's ``scores.metrics`` (×100, as published), or DSE's degradation. None
    where the record has no such score (an STS record asked for AUC, a metric left undefined)."""
    if metric == "degradation_pct":  # DSE adds "teacher" to its records (Method.annotate)
        teacher: dict[str, Any] = cast(dict, record).get("teacher") or {}
        return teacher.get("degradation_pct")
    from harness.core.kinds import kind_of

    kind = kind_of(record)
    return kind.metric_entry(record, metric)["value"] if metric in kind.metrics else None


def record_file(record: Record) -> str:
    """The name of the file ``record`` is written to under ``runs/`` (its identity: method spec,
    protocol, task and data fingerprints), which a paper line names as its evidence."""
    from harness.runner.records.store import result_path

    return result_path(Path("runs"), record).name


def show(value: Any) -> str:
    """A setting as statuses and the markdown tables write it: a list as ``1,-1``."""
    return ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)


def figure(value: float | None) -> str:
    """A published or measured figure as the markdown tables write it: 2 decimals, ``—`` if none."""
    return "—" if value is None else f"{value:.2f}"


def departures(paper: Paper, row: Row, record: Record, task: str) -> list[str]:
    """What ``record`` ran otherwise than ``row`` of ``paper``, from the record alone and in the
    paper runner's words: its model (the spec's backbone when neither the row's, the paper's nor a
    model option of the row's method, or an adapter merged in), each setting the paper declares
    that its protocol holds otherwise, the task's source, each option of the row's method. Any
    departure makes a line not the paper's result, whatever its CSV says (issue 51: a line naming
    MiniLM's ``avg`` record was shown as BERT-base's; only method and task were checked)."""
    spec, protocol = record["method"]["spec"], record["protocol"]
    options = {**paper.options.get(row.method, {}), **row.options.get(row.method, {})}
    model, backbone = row.backbone or paper.backbone, spec.get("backbone")
    adapter = " with an adapter" if (record.get("backbone") or {}).get("adapter") else ""
    found = []
    if adapter or backbone not in [model, *(s.value for s in options.values())]:
        found.append(f"{MODEL_DIFFERS}: {backbone}{adapter} (paper: {model})")
    for key, setting in {**paper.settings, **row.settings}.items():
        if protocol.get(key) is not None and show(protocol[key]) != show(setting.value):
            found.append(f"{key}={show(protocol[key])} (paper: {show(setting.value)})")
    source = paper.source_of(task).value
    if protocol.get("source", source) != source:
        found.append(f"source={protocol['source']} (paper: {source} for {task})")
    params = spec.get("params") or {}
    for option, setting in options.items():
        if option in params and show(params[option]) != show(setting.value):
            found.append(option_departure(row.method, option, params[option], setting))
    return found


def option_departure(method: str, option: str, value: Any, setting: Setting) -> str:
    """A method option run otherwise than the paper, as a status says it: a model option
    (``Setting.model``) as the model that differs, any other as the flag that sets it."""
    if setting.model:
        return f"{method} {option} differs: {value} (paper: {setting.value})"
    return f"--{method}-{option}={show(value)} (paper: {show(setting.value)})".replace("_", "-")


def average_line(paper: Paper, row: Row, mine: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Avg. of one row's task lines ``mine``, as the papers' tables give it (PromptEOL's README:
    OPT 125M 67.46): published when every task has a figure, measured when every task ran; [] for a
    row of one task or of another metric. A row with its own ``average`` (a paper that publishes
    only the mean, DSE's 4.6 %) has that Avg. line, whatever its metric."""
    if len(mine) < 2:
        return []
    if row.average is not None:
        published = row.average
    elif row.metric != "spearman" or any(line["published"] is None for line in mine):
        return []
    else:
        published = sum(line["published"] for line in mine) / len(mine)
    measured = None
    if all(line["measured"] is not None for line in mine):
        measured = sum(line["measured"] for line in mine) / len(mine)
    status = (
        _common_status(mine) if measured is not None else f"{NOT_RUN} not every task of the row ran"
    )
    return [paper_line(paper, row, AVERAGE, published, measured, status)]


def paper_line(
    paper: Paper,
    row: Row,
    task: str,
    published: float | None,
    measured: float | None,
    status: str,
    record: str = "",
) -> dict[str, Any]:
    """One line of a paper table, as the CSV's columns hold it (``task`` its title), its delta
    computed: the runner's, an Avg.'s and the page's rebuilt ones are all made here."""
    delta = None if measured is None or published is None else measured - published
    values = (paper.name, row.table, row.model, row.setting, task, row.metric, published, measured)
    return dict(zip(CSV_COLUMNS, (*values, delta, status, record), strict=True))


def _common_status(lines: list[dict[str, Any]]) -> str:
    statuses = {line["status"] for line in lines}
    return statuses.pop() if len(statuses) == 1 else "ran (each task's departures are on its line)"


@dataclass(frozen=True)
class Verified:
    """A paper CSV's lines as the evidence gives them (numbers as floats, None where absent), and
    why each line left out was (``"STS-B of BERT-base (last avg): its record ... "``)."""

    lines: list[dict[str, Any]]
    left_out: list[str]


def _written(value: Any) -> float | None:
    """A CSV cell as a number: None when empty; NaN when it is not a number (never equal)."""
    text = str(value or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return math.nan


def _same(written: Any, value: float | None) -> bool:
    """Whether a CSV cell says ``value`` (both absent, or within the CSV's rounding)."""
    number = _written(written)
    if number is None or value is None:
        return number is None and value is None
    return abs(number - value) <= WRITTEN_TOLERANCE


def verify_lines(
    paper: Paper, rows: Sequence[Mapping[str, Any]], records: Iterable[Record]
) -> Verified:
    """The lines of ``paper``'s CSV (``rows``, as read) rebuilt from evidence: published figures
    from the paper's TOML, measured figures from the verified ``records`` each line names, deltas
    and Avg. lines recomputed, each status the record's departures from the row
    (:func:`departures`). A line is kept only when what it wrote is what the evidence gives.

    Worked example: a line "BERT-base, last avg, STS-B, published 47.29, measured 99.99, record
    avg__stsb__1a2b.json" is kept only if ``runs/avg__stsb__1a2b.json`` is among ``records`` (the
    verified ones), is a record of the row's method on STS-B, its Spearman rounds to 99.99, and
    the TOML's STS-B figure of that row is 47.29; else it is left out, with the reason."""
    from harness.core.data.tasks import TASKS

    by_file: dict[str, Record] = {}
    for record in records:
        try:
            by_file[record_file(record)] = record
        except (KeyError, TypeError):  # a record built in memory without an identity
            continue
    names = {spec.title: name for name, spec in TASKS.items()}
    kept: dict[int, dict[str, Any]] = {}  # the CSV's line number → the line rebuilt
    left_out: list[str] = []
    groups: dict[int, list[dict[str, Any]]] = {}  # id(row) → its kept task lines
    averages: list[tuple[int, Row, Mapping[str, Any]]] = []
    for number, line in enumerate(rows):
        title = str(line.get("task") or "")
        where = f"{title} of {line.get('model')} ({line.get('setting')})"
        row = _row_of(paper, line)
        if row is None:
            left_out.append(f"{where}: no such row in the paper's published tables")
            continue
        if title == AVERAGE:
            averages.append((number, row, line))
            continue
        task = names.get(title, title)
        if task not in row.published:
            left_out.append(f"{where}: the paper's row has no figure for this task")
            continue
        published = row.published[task]
        problem = None if _same(line.get("published"), published) else "its published figure"
        status = str(line.get("status") or "")
        measured: float | None = None
        if problem is None and status.startswith(NOT_RUN):
            if _written(line.get("measured")) is not None:
                problem = "a measured figure on a row that did not run"
        elif problem is None:
            evidence = by_file.get(str(line.get(RECORD) or ""))
            if evidence is None:
                problem = f"no verified record {line.get(RECORD) or '(none named)'} in runs/"
            elif evidence["method"]["name"] != row.method or evidence["task"]["name"] != task:
                problem = f"its record {line.get(RECORD)} is of another method or task"
            else:
                measured = measured_value(evidence, row.metric)
                if measured is None or not _same(line.get("measured"), measured):
                    problem = f"its measured figure is not its record's ({line.get(RECORD)})"
                # what the line says of how it ran comes from its record, never from the CSV
                status = "; ".join([RAN, *departures(paper, row, evidence, task)])
        if problem is not None:
            left_out.append(f"{where}: {problem}")
            continue
        rebuilt = paper_line(paper, row, title, published, measured, status, line.get(RECORD) or "")
        kept[number] = rebuilt
        groups.setdefault(id(row), []).append(rebuilt)
    for number, row, line in averages:
        where = f"{AVERAGE} of {line.get('model')} ({line.get('setting')})"
        mine = groups.get(id(row), [])
        # the Avg. of a row is over every task the row publishes: each must be a kept line
        whole = len(mine) == len(row.published)
        average = average_line(paper, row, mine) if whole else []
        if not average:
            left_out.append(f"{where}: its task lines are not all verified")
        elif not _same(line.get("published"), average[0]["published"]) or not _same(
            line.get("measured"), average[0]["measured"]
        ):
            left_out.append(f"{where}: its figures are not the mean of its task lines")
        else:
            kept[number] = average[0]
    return Verified([kept[n] for n in sorted(kept)], left_out)


def _row_of(paper: Paper, line: Mapping[str, Any]) -> Row | None:
    """The paper's row a CSV line is of: same table, model, setting and metric."""
    metric = line.get("metric") or OPTIONAL["metric"]
    key = (line.get("table"), line.get("model"), line.get("setting"), metric)
    return next((r for r in paper.rows if (r.table, r.model, r.setting, r.metric) == key), None)
