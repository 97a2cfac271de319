"""The tables every report is built from, read from result records only.

``long_rows``: one row per (method row, protocol, task). ``wide_rows``: methods × tasks (+ Avg.)
per protocol group. Results with different protocols are never put in one table: rows are grouped
by the protocol (aggregation, source, dtype, max_length, first-last layers). Within a group a row
is (method, backbone, kind, fit set). Columns a method declares (its records' ``"columns"``, e.g.
DSE's "vs teacher (%)") are carried along and averaged over the row's tasks.

A column is one dataset: of a task whose data changed between runs into one folder, only the records
on its newest data are tabled (:func:`harness.runner.records.store.current_data`), and the wide rows
say which data each task column holds (``task_fingerprints``), which the regression gate matches on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from harness.core.data.tasks import TASKS
from harness.core.kinds import DEFAULT_KIND, KINDS, kind_of
from harness.runner.records.schema import (
    PROTOCOL_GROUP,
    main_ci,
    main_value,
    protocol_group,
)
from harness.runner.records.store import current_data

if TYPE_CHECKING:
    from harness.runner.records.schema import Record

# one definition: the records supersede within the groups the tables show
GROUP_KEYS = PROTOCOL_GROUP
ROW_KEYS = ("method", "backbone", "kind", "fit_set")


def protocol_line(group: Mapping[str, Any]) -> str:
    """A protocol group (its GROUP_KEYS values) as the line that heads its tables and plots. The
    similarity is a row's own (``--similarity``, :mod:`harness.core.compression`): its label names
    any but cosine."""
    default = KINDS[DEFAULT_KIND].main_default
    metric = group.get("metric", default)
    kinds = [kind.title for kind in KINDS.values() if metric in kind.metrics]
    scored = "" if metric == default else f"score={metric} ({', '.join(kinds)}) · "
    return (
        f"{scored}aggregation={group['aggregation']} · source={group['source']} · "
        f"dtype={group['dtype']} · max_length={group['max_length']} · first-last "
        f"layers={group['first_last_layers']} · similarity=cosine unless a row names another"
    )


# How a row's vectors were stored and compared (record["vector"]; --dims/--precision/--similarity),
# and for sparse vectors (harness.core.sparse) their mean active dimensions and SPLADE's FLOPS
SPARSE_COLUMNS = ("active_dims", "flops")
VECTOR_COLUMNS = ("dims", "precision", "similarity", "bytes_per_vector", *SPARSE_COLUMNS)
TASK_ORDER = [spec.title for spec in TASKS.values()]
AVG = "Avg."
LONG_COLUMNS = (
    "marks",
    "task",
    "score",  # the task kind's main score: Spearman for STS, the group's "metric" otherwise
    "spearman",
    "pearson",
    "ci_low",
    "ci_high",
    "n_pairs",
    "created",
    "undefined",
    "task_data",
    "prompt",
    "weights",
    "fingerprint",
    *VECTOR_COLUMNS,
)


def long_columns() -> tuple[str, ...]:
    """:data:`LONG_COLUMNS`, then every metric of every registered kind that is not one of them
    (labelled pairs': ap ... f1_best, ×100; intervals are in the records and pair_metrics.csv)
    and how a labelled score decided."""
    names = [name for kind in KINDS.values() for name in kind.metrics]
    return (*LONG_COLUMNS, *dict.fromkeys(n for n in names if n not in LONG_COLUMNS), "decision")


# a wide table's column: the tasks (comma-separated) whose score is undefined
UNDEFINED = "undefined"
# Each row's average as an estimate and its rank (harness.runner.tables.comparisons.averages):
# leaderboard.csv's numbers; the markdown, the console and the page show RANK as "1" or "1–2".
RANK = "rank"
RANK_NUMBERS = ("rank_low", "rank_high", "avg_ci_low", "avg_ci_high")
RANK_COLUMNS = (RANK, *RANK_NUMBERS)
# A wide table's column: ``TASK=<sha256 of its pairs>`` per task of the row, "; "-separated. Last in
# leaderboard.csv, so readers that pick columns by name or position before it read what they did.
FINGERPRINTS = "task_fingerprints"


def ordered_tasks(titles: Iterable[str]) -> list[str]:
    """Registered tasks in registry order, then any other task (an MTEB task) by name."""
    present = set(titles)
    return [t for t in TASK_ORDER if t in present] + sorted(present - set(TASK_ORDER))


def record_keys(rec: Record) -> dict[str, str]:
    """The (row, protocol group) a record belongs to, as the leaderboard names them."""
    return {
        "method": rec["method"]["label"],
        "backbone": rec["method"]["spec"]["backbone"],
        "kind": rec["method"]["kind"],
        "fit_set": (rec.get("fit") or {}).get("fit_set", {}).get("name", ""),
        **protocol_group(rec),
    }


def record_marks(rec: Record) -> str:
    """† fitted/trained on the scored sentences; ‡ trained on labelled data built from the scored
    task (STS-B train for STS12-16, a GLUE task's own train split); § a setting chosen on labelled
    data (a demonstration picked on STS-B dev, a threshold chosen on the scored pairs)."""
    protocol = rec["protocol"]
    return (
        ("†" if protocol.get("transductive") else "")
        + ("‡" if protocol.get("labelled_training") else "")
        + ("§" if protocol.get("selected_on") else "")
    )


def newest(records: Iterable[Record]) -> list[Record]:
    """One record per (row, protocol group, task): the newest file wins, among the records on the
    task's current data (older data is superseded:
    :func:`harness.runner.records.store.current_data`)."""
    chosen: dict[tuple, Record] = {}
    for rec in sorted(current_data(records)[0], key=lambda r: r["created"]):
        chosen[(*record_keys(rec).values(), rec["task"]["title"])] = rec
    return list(chosen.values())


VOLATILE = (
    "created",
    "timings",
    "env",
    "harness",
    "checksum",
)  # change on every run, change no table


def records_digest(records: Iterable[Record]) -> str:
    """The content of the records tables are built from: the newest of each (row, protocol group,
    task), minus the fields that change on every run without changing any table (:data:`VOLATILE`),
    in an order of their content, not of when they were written (a run that crossed a second
    boundary once sorted differently). Equal digests give equal tables."""
    import hashlib

    from harness.core.hashing import canonical_json

    digest = hashlib.sha256()
    for text in sorted(
        canonical_json({k: v for k, v in rec.items() if k not in VOLATILE})
        for rec in newest(records)
    ):
        digest.update(text.encode("utf-8"))
    return digest.hexdigest()


def vector_columns(rec: Record) -> dict[str, Any]:
    """A record's :data:`VECTOR_COLUMNS`: its ``vector`` setting; for a record without one (a
    method that scores pairs, an embedding record of an older sts-bench: its full vector by cosine)
    what is known, NaN for the bytes where no vectors were compared. The active dimensions and
    FLOPS are NaN but for sparse vectors.

    >>> vector_columns({"protocol": {"similarity": "score_pairs"}})
    {'dims': '', 'precision': '', 'similarity': 'score_pairs', 'bytes_per_vector': nan, \
'active_dims': nan, 'flops': nan}
    """
    unmeasured = dict.fromkeys(SPARSE_COLUMNS, math.nan)
    vector = rec.get("vector")
    if vector is not None:
        return {key: vector.get(key, math.nan) for key in VECTOR_COLUMNS}
    similarity = rec["protocol"].get("similarity", "cosine")
    width = rec.get("embed_dim")
    if similarity == "cosine" and width:
        return {
            "dims": "full",
            "precision": "fp32",
            "similarity": similarity,
            "bytes_per_vector": 4 * width,
            **unmeasured,
        }
    return {
        "dims": "",
        "precision": "",
        "similarity": similarity,
        "bytes_per_vector": math.nan,
        **unmeasured,
    }


def task_data(task: Mapping[str, object]) -> str:
    """Where a task's pairs came from, as tables print it: its source, file or dataset, and the
    first 12 hex digits of its content's sha256 (equal digests: the same pairs).

    >>> task_data({"source": "file", "origin": "/data/pairs.tsv",
    ...            "fingerprint": "9e848b50de225978a3"})
    'file /data/pairs.tsv (sha256 9e848b50de22)'
    """
    return (
        f"{task.get('source', '')} {task.get('origin', '')} (sha256 "
        f"{str(task.get('fingerprint', ''))[:12]})"
    )


def _number(value: float | None) -> float:
    return math.nan if value is None else value


def _missing(value: Any) -> bool:
    """True for a cell without a score: None or NaN (NaN != NaN)."""
    return value is None or value != value


def csv_text(rows: list[dict[str, Any]], columns: Sequence[str], number: str = ".4f") -> str:
    """A table as CSV: floats in the format ``number`` (4 decimals unless said), a missing number
    (None, NaN) as an empty cell.

    >>> csv_text([{"m": "avg", "x": 82.03254, "n": 3}, {"m": "cls", "x": float("nan"), "n": 4}],
    ...          ["m", "x", "n"])
    'm,x,n\\navg,82.0325,3\\ncls,,4\\n'
    """
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")  # it writes None as an empty cell
    writer.writerow(columns)
    for row in rows:
        cells = [row.get(c) for c in columns]
        writer.writerow(
            [
                ("" if math.isnan(v) else format(v, number)) if isinstance(v, float) else v
                for v in cells
            ]
        )
    return buffer.getvalue()


def long_rows(records: Iterable[Record]) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per (row, protocol group, task), the newest file winning, ordered by protocol group,
    row and task; and the names of the columns methods declared. Pure Python: the report page builds
    from it without pandas."""
    records = current_data(records)[0]
    extra: list[str] = []
    for rec in records:  # every declared column, as the DataFrame of every record had it
        extra += [name for name in rec.get("columns") or {} if name not in extra]
    rows: list[dict[str, Any]] = []
    for rec in newest(records):
        scores = rec["scores"]
        ci = main_ci(rec) or [math.nan, math.nan]
        kind = kind_of(rec)
        # An undefined score is NaN here (a cell without a number: never averaged, ranked or
        # starred) and its reason is kept beside it, so tables can say "undefined" instead of "not
        # run".
        rows.append(
            {
                **record_keys(rec),
                "marks": record_marks(rec),
                "task": rec["task"]["title"],
                "score": _number(main_value(rec)),
                "spearman": _number(scores["spearman"]),
                "pearson": _number(scores["pearson"]),
                "ci_low": ci[0],
                "ci_high": ci[1],
                "n_pairs": rec["task"]["n_pairs"],
                "created": rec["created"],
                "undefined": scores.get("undefined") or "",
                "task_data": task_data(rec["task"]),
                "prompt": rec["protocol"].get("prompt") or "",
                "weights": (rec.get("backbone") or {}).get("weights") or "",
                "fingerprint": rec["task"].get("fingerprint")
                or "",  # the full sha256: what the gate matches on
                **vector_columns(rec),
                **{m: _number(kind.metric_entry(rec, m)["value"]) for m in kind.metrics},
                "decision": scores.get("decision", ""),
                **(rec.get("columns") or {}),
            }
        )
    # Ordered by what the rows are (protocol group, row, task in registry order), never by when they
    # were written: the tables are then a function of the records' content alone, which the cached
    # reports rely on (harness.runner.execution.reports).
    rank = {title: i for i, title in enumerate(ordered_tasks(r["task"] for r in rows))}
    ordered = sorted(
        rows, key=lambda r: (tuple(str(r[k]) for k in (*GROUP_KEYS, *ROW_KEYS)), rank[r["task"]])
    )
    columns = (*ROW_KEYS, *GROUP_KEYS, *long_columns(), *extra)
    return [{c: row.get(c, math.nan) for c in columns} for row in ordered], extra


def wide_rows(long: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """Methods × tasks (+ Avg.) per protocol group, from :func:`long_rows`: the rows, the task
    columns (registry order) and the method-declared columns, each averaged over the row's tasks.

    Avg. is only given for a row that has every task of its group, so averages over different task
    sets are never compared. Rows are ordered by protocol group, then by Avg. (highest first, rows
    without one last), ties by (method, backbone, kind, fit set). For example, a group scoring
    STS-B and SICK-R with rows ``avg`` (82.0, 78.0) and ``cls`` (73.5, —) gives ``avg`` Avg. 80.0
    first, then ``cls`` with Avg. NaN. Each row also says which data its task columns hold
    (:data:`FINGERPRINTS`: ``STS-B=<sha256>; my-pairs=<sha256>``), for the regression gate.
    """
    standard = {*ROW_KEYS, *GROUP_KEYS, *long_columns()}
    extra = [c for row in long[:1] for c in row if c not in standard]
    tasks = ordered_tasks(row["task"] for row in long)
    group_tasks: dict[tuple, set[str]] = {}
    cells: dict[tuple, dict[str, Any]] = {}
    for row in long:
        group = tuple(row[k] for k in GROUP_KEYS)
        group_tasks.setdefault(group, set()).add(row["task"])
        cell = cells.setdefault(
            (*group, *(row[k] for k in ROW_KEYS)),
            {"tasks": {}, "marks": set(), "extra": {}, "undefined": [], "data": {}},
        )
        cell["tasks"][row["task"]] = row["score"]
        if row.get("fingerprint"):
            cell["data"][row["task"]] = row["fingerprint"]
        if row.get("undefined"):
            cell["undefined"].append(row["task"])
        cell["marks"].update(row["marks"])
        for column in extra:
            if not _missing(row.get(column)):
                cell["extra"].setdefault(column, []).append(row[column])
    table = []
    for key in sorted(cells):
        cell, group = cells[key], key[: len(GROUP_KEYS)]
        values = [cell["tasks"].get(t, math.nan) for t in tasks if t in group_tasks[group]]
        average = (
            sum(values) / len(values)
            if values and not any(_missing(v) for v in values)
            else math.nan
        )
        row = dict(zip((*GROUP_KEYS, *ROW_KEYS), key))
        table.append(
            {
                **{k: row[k] for k in ROW_KEYS},
                "marks": "".join(sorted(cell["marks"])),
                **{t: cell["tasks"].get(t, math.nan) for t in tasks},
                AVG: average,
                **{
                    c: (sum(v) / len(v) if (v := cell["extra"].get(c)) else math.nan) for c in extra
                },
                UNDEFINED: ",".join(t for t in tasks if t in cell["undefined"]),
                **{k: row[k] for k in GROUP_KEYS},
                FINGERPRINTS: "; ".join(
                    f"{t}={cell['data'][t]}" for t in tasks if t in cell["data"]
                ),
            }
        )
    # Stable: rows tied on Avg. (or both without one) keep the (method, backbone, kind, fit set)
    # order.
    table.sort(
        key=lambda r: (
            tuple(r[k] for k in GROUP_KEYS),
            _missing(r[AVG]),
            0 if _missing(r[AVG]) else -r[AVG],
        )
    )
    return table, tasks, extra


def tied_tasks(row: dict[str, Any], tasks: list[str], marks: set) -> str:
    """The tasks (comma-separated) where a wide row is best or not significantly below the best."""
    group, key = tuple(row[k] for k in GROUP_KEYS), tuple(row[k] for k in ROW_KEYS)
    return ",".join(t for t in tasks if (group, key, t) in marks)
