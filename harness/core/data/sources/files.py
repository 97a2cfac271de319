r"""A task's own file of pairs (``--tasks file:PATH``): CSV, TSV or JSONL, one pair per row.

* CSV: read with the ``csv`` module (quotes protect commas and line breaks inside a sentence);
  errors name the line the row starts on.
* TSV: split at tabs, nothing else; quote characters are text, as in the STS files (a sentence
  cannot hold a tab).
* JSONL: one JSON object per line, its keys the columns; a sentence must be a JSON string (a number,
  an object or a list would be scored as its Python spelling).

TSV and JSONL lines end at ``\n`` (or ``\r\n``) only: ``str.splitlines`` also cuts at U+2028,
U+2029, NEL, form feed, vertical tab and the file/group/record separators, which a sentence may hold
(JSON keeps them raw, a TSV field too), and would shift the line numbers of every error after them.
A gold score must be a plain decimal number (``0_5`` is refused, where ``float`` reads 5.0).

Without ``split`` column every pair belongs to the scored split (``eval``, default test). Sentences
are taken as written (no whitespace folding), so a file holding STS-B's test pairs scores exactly as
``--tasks stsb``. A UTF-8 byte-order mark (Excel's CSV) is ignored.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from harness.core.data.sources import Source
from harness.core.data.sources.columns import PairSplits, find_columns
from harness.core.data.splits import OwnSource, SplitData, TaskSpec
from harness.core.errors import UserError
from harness.core.hashing import PAIRS_BYTES, read_input


def load(spec: TaskSpec, splits: Sequence[str], location: str | None) -> dict[str, SplitData]:
    """The pairs of a task that names this source itself; ``location`` is unused (the task
    carries its own, ``spec.own``)."""
    own = spec.own
    assert own is not None and own.kind == "file"
    path = Path(own.location).expanduser()
    text = read_input(path, own.entry, PAIRS_BYTES)  # not text mode: it ends lines at a lone "\r"
    rows = _json_rows(text, path) if own.format == "jsonl" else _table_rows(text, path, own)
    pairs: PairSplits | None = None
    roles: dict[str, Any] = {}
    for where, names, row, named_at in rows:
        if pairs is None:
            roles = _roles(names, own, named_at)
            pairs = PairSplits(str(path), list(roles), spec.eval_split, spec.classes)
        pairs.add(where, _pick(row, roles, where, own))
    if pairs is None:
        raise UserError(f"{path}: no pairs in it (empty file); {spec.title} cannot be scored")
    return pairs.result(splits, spec)


def _roles(names: list[str] | None, own: OwnSource, where: str) -> dict[str, Any]:
    """Role → dict key (JSONL, a header) or 0-based field index (no header)."""
    if names is None:
        numbers = {"s1": "1", "s2": "2", "score": "3"} | dict(own.columns)
        return {role: int(number) - 1 for role, number in numbers.items()}
    found = find_columns(names, own, where)
    return (
        found
        if own.format == "jsonl"
        else {role: names.index(column) for role, column in found.items()}
    )


def _pick(row: Any, roles: dict[str, Any], where: str, own: OwnSource) -> dict[str, Any]:
    if isinstance(row, dict):
        missing = [key for key in roles.values() if key not in row]
        if missing:
            raise UserError(
                f"{where}: no '{missing[0]}' key in this line (the first line has it); fix that "
                "line"
            )
        for role, side in (("s1", "sentence 1"), ("s2", "sentence 2")):
            value = row[roles[role]]
            # str() would score 5, {"a": 1} or [..] as their Python text
            if not isinstance(value, str):
                raise UserError(
                    f"{where}: {side} ('{roles[role]}') is {_json_kind(value)}, not text; a "
                    "sentence must be a JSON string in quotes"
                )
        return {role: row[key] for role, key in roles.items()}
    needed = max(roles.values()) + 1
    if len(row) < needed:
        sep = "tab-separated" if own.format == "tsv" else "comma-separated"
        raise UserError(f"{where}: expected at least {needed} {sep} fields, got {len(row)}")
    return {role: row[index] for role, index in roles.items()}


def _json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words, with its start: ``a number (5)``,
    ``an object ({"a": 1})``."""
    kind = (
        "true/false"
        if isinstance(value, bool)
        else "a number"
        if isinstance(value, int | float)
        else "an object"
        if isinstance(value, dict)
        else "an array"
        if isinstance(value, list)
        else "null"
    )
    return kind if value is None else f"{kind} ({json.dumps(value, ensure_ascii=False)[:40]})"


def lines(text: str) -> Iterator[tuple[int, str]]:
    r"""``(line number, line)`` of ``text``, cut at ``\n`` only, a ``\r`` before it dropped (see the
    module docstring).

    >>> list(lines("a\u2028b\r\nc\x0cd\n"))
    [(1, 'a\u2028b'), (2, 'c\x0cd'), (3, '')]
    """
    for number, line in enumerate(text.split("\n"), start=1):
        yield number, line.removesuffix("\r")


# Each row: (its file:line, the column names, the row, the file:line that named the columns).
Rows = Iterator[tuple[str, list[str] | None, Any, str]]


def _json_rows(text: str, path: Path) -> Rows:
    names: list[str] | None = None
    named_at = f"{path}:1"
    for lineno, line in lines(text):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as err:  # a 5,000-deep array: Recursion
            raise UserError(
                f"{where}: not valid JSON ({getattr(err, 'msg', 'nested too deep')}); each line "
                "must be one JSON object"
            ) from None
        if not isinstance(row, dict):
            raise UserError(
                f'{where}: expected a JSON object like {{"sentence1": ..., "sentence2": ..., '
                f'"score": ...}}, got {type(row).__name__}'
            )
        if names is None:
            names, named_at = [str(key) for key in row], where
        yield where, names, row, named_at


def _table_rows(text: str, path: Path, own: OwnSource) -> Rows:
    if own.format == "tsv":  # split at tabs only: quotes are text
        rows: Iterator[tuple[int, list[str]]] = (
            (n, line.split("\t")) for n, line in lines(text) if line.strip()
        )
    else:  # the csv module ends a row at \r, \n or \r\n only; text mode's newlines, as before
        rows = _csv_lines(text.replace("\r\n", "\n").replace("\r", "\n"), path)
    names: list[str] | None = None
    named_at = f"{path}:1"
    for lineno, fields in rows:
        where = f"{path}:{lineno}"
        if own.header and names is None:
            names, named_at = [field.strip() for field in fields], where
            continue
        yield where, names, fields, named_at


def _csv_lines(text: str, path: Path) -> Iterator[tuple[int, list[str]]]:
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    start = 1
    try:
        for fields in reader:
            if any(field.strip() for field in fields):
                yield start, fields
            start = reader.line_num + 1
    except csv.Error as err:
        raise UserError(f"{path}:{start}: not valid CSV ({err}); check its quotes") from None


SOURCE = Source(
    "file", "a task's own file of pairs: --tasks file:PATH (CSV, TSV, JSONL)", load, run_wide=False
)
