"""Tasks that bring their own data: ``--tasks`` entries ``file:PATH`` and ``hf:DIR_OR_ID``, and a
config file's ``[[task]]`` tables, parsed into a :class:`TaskSpec` that carries its own source.

An entry is ``KIND:LOCATION``, optionally followed by ``?KEY=VALUE&KEY=VALUE...`` (quote it in a
shell: ``&`` and ``?`` are shell syntax)::

    file:my_pairs.tsv                                  header names the columns (sentence1,
                                                       sentence2, score)
    'file:pairs.csv?s1=text_a&s2=text_b&score=label&range=-1,1&name=paraphrase'
    'file:sts-test.csv?format=tsv&header=no&score=5&s1=6&s2=7'    fields by number, 1-based
    'hf:./my_dataset?score=label&eval=validation'      a datasets folder (save_to_disk) or a hub id

Keys: ``s1``, ``s2``, ``score``, ``split``, ``subset`` (which column holds what; left out, the
usual names are looked for), ``name`` (default: the file's stem or the dataset folder's name),
``range`` (the gold scale, ``LOW,HIGH``, default 0,5: a score outside it is an error naming its
``file:line``), ``eval`` (the split scored, default test), ``format`` (csv, tsv, jsonl; default from
the extension), ``header`` (yes/no, csv and tsv), ``revision`` (a hub id's pinned revision),
``sides`` (``query,document`` for an asymmetric task whose first sentence asks and second answers:
per-task prompts' query/document entries then apply; default symmetric).

>>> spec = parse_entry("hf:my-org/my_pairs?score=label&range=-1,1")
>>> spec.name, spec.gold_range, spec.source, spec.own.column("score")
('my_pairs', (-1.0, 1.0), 'hf', 'label')
>>> table_entry({"file": "pairs.jsonl", "range": [1, 5], "name": "mine"}, base=None)
'file:pairs.jsonl?range=1,5&name=mine'
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.core.data.splits import OwnSource, TaskSpec
from harness.core.errors import UserError, did_you_mean
from harness.core.hashing import PAIRS_BYTES, not_a_file, read_input

KINDS = ("file", "hf")
COLUMN_KEYS = ("s1", "s2", "score", "split", "subset")
# A labelled-pairs task (kind pairclass): the label column, its classes, the positive one, the
# score it is ranked by. A file whose header has a ``label`` column and no score column is one.
LABEL_KEYS = ("label", "classes", "positive", "metric")
KEYS = (
    *COLUMN_KEYS,
    "name",
    "range",
    "eval",
    "format",
    "header",
    "revision",
    "sides",
    *LABEL_KEYS,
)
SIDES = ("query", "document")  # sides=query,document: an asymmetric task (s1 asks, s2 answers)
SCORE_NAMES = ("score", "gold", "gold_score", "similarity", "relatedness_score", "relatedness")
FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
# What a split is called in files and datasets → sts-bench's split.
SPLIT_NAMES = {
    "train": "train",
    "dev": "dev",
    "validation": "dev",
    "valid": "dev",
    "val": "dev",
    "test": "test",
}
SPLITS = ("train", "dev", "test")
SYNTAX = "file:PATH or hf:DIR_OR_ID, then ?KEY=VALUE&... (keys: " + ", ".join(KEYS) + ")"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
# A number as data files write one: ASCII digits, an optional sign, '.', exponent. float() takes
# more: "0_5" (5.0: digit grouping), "٥" or "５" (other scripts' digits), " 5 ", "nan", "inf".
DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def decimal(text: str) -> float | None:
    """``text`` as a float when it is a plain decimal number (:data:`DECIMAL`), else None.

    >>> decimal("0.5"), decimal("-1e-3"), decimal("0_5"), decimal("nan"), decimal("５")
    (0.5, -0.001, None, None, None)
    """
    return float(text) if DECIMAL.fullmatch(text) else None


_YES = {"yes": True, "true": True, "1": True, "no": False, "false": False, "0": False}


def is_declared(entry: str) -> bool:
    """True for a ``--tasks`` entry that names its own source (``file:...``, ``hf:...``)."""
    kind, sep, _ = entry.partition(":")
    return bool(sep) and kind.strip().lower() in KINDS


def parse_entry(entry: str, where: str = "--tasks") -> TaskSpec:
    """The TaskSpec of one ``file:``/``hf:`` entry; a one-line error naming the bad part."""
    kind, _, rest = entry.partition(":")
    kind = kind.strip().lower()
    location, _, query = rest.partition("?")
    if not location.strip():
        raise UserError(f"{where} {entry}: no path after '{kind}:'; expected {SYNTAX}")
    options: dict[str, str] = {}
    for part in filter(None, query.split("&")):
        key, eq, value = part.partition("=")
        key = key.strip().lower()
        if not eq or not value.strip():
            raise UserError(f"{where} {entry}: '{part}' is not KEY=VALUE; expected {SYNTAX}")
        if key not in KEYS:
            raise UserError(
                f"{where} {entry}: unknown key '{key}'{did_you_mean(key, KEYS)}; keys: "
                f"{', '.join(KEYS)}"
            )
        if key in options:
            raise UserError(f"{where} {entry}: '{key}' is given twice")
        options[key] = value.strip()
    return _spec(kind, location.strip(), options, entry, where)


def _spec(kind: str, location: str, options: dict[str, str], entry: str, where: str) -> TaskSpec:
    fmt = ""
    if kind == "file":
        path = Path(location).expanduser()
        if not path.is_file():
            raise UserError(
                f"{where} {entry}: {path}: {not_a_file(path)} (a CSV, TSV or JSONL file of "
                "sentence pairs)"
            )
        fmt = options.get("format", "").lower() or FORMATS.get(path.suffix.lower(), "")
        if fmt not in FORMATS.values():
            raise UserError(
                f"{where} {entry}: cannot tell the format of {path.name} from its extension; name "
                "it .csv, .tsv or .jsonl, or add format=csv|tsv|jsonl"
            )
        default_name = path.stem
    else:
        if options.get("format") or options.get("header"):
            raise UserError(
                f"{where} {entry}: format and header are for file: tasks; a dataset has named "
                "columns"
            )
        default_name = Path(location.rstrip("/")).name or location
    header = _flag(options.get("header", "yes"), entry, where)
    if not header and fmt == "jsonl":
        raise UserError(
            f"{where} {entry}: header=no is for csv and tsv; JSONL lines name their keys"
        )
    columns = tuple((key, options[key]) for key in COLUMN_KEYS if key in options)
    if not header:
        bad = [f"{k}={v}" for k, v in columns if not (v.isdigit() and int(v) >= 1)]
        if bad:
            raise UserError(
                f"{where} {entry}: without a header, columns are field numbers from 1: "
                f"{', '.join(bad)}"
            )
    found = (
        _label_header(path, fmt, header, "classes" in options)
        if kind == "file" and "score" not in options and "label" not in options
        else None
    )
    labelled = any(key in options for key in LABEL_KEYS) or found is not None
    if labelled:
        if "score" in options:
            raise UserError(
                f"{where} {entry}: score= is for graded pairs and label= for labelled ones; give "
                "one of them"
            )
        column = options.get("label") or found or ("label" if header else "3")
        columns = (*columns, ("score", column))
    name = options.get("name", default_name)
    if not _NAME.match(name):
        raise UserError(
            f"{where} {entry}: task name {name!r} must be letters, digits, '.', '_', '+' or '-'; "
            "give one with name=NAME"
        )
    eval_split = SPLIT_NAMES.get(options.get("eval", "test").lower())
    if eval_split is None:
        raise UserError(
            f"{where} {entry}: eval={options['eval']}: expected one of {', '.join(SPLIT_NAMES)}"
        )
    own = OwnSource(
        kind=kind,
        location=location,
        columns=columns,
        format=fmt,
        header=header,
        revision=options.get("revision", ""),
        entry=entry,
    )
    spec = TaskSpec(
        name=name,
        title=name,
        description=f"{kind}: {location}",
        splits=SPLITS,
        eval_split=eval_split,
        sides=_sides(options.get("sides", ""), entry, where),
        own=own,
    )
    if labelled:
        return _labelled_spec(spec, options, entry, where)
    return replace(spec, gold_range=_range(options.get("range", "0,5"), entry, where))


def _sides(text: str, entry: str, where: str) -> tuple[str, ...]:
    """``sides=query,document`` (or ``document,query``): the MTEB prompt type of each sentence of a
    pair; empty: a symmetric task.

    >>> _sides("query,document", "e", "--tasks"), _sides("", "e", "--tasks")
    (('query', 'document'), ())
    """
    if not text:
        return ()
    sides = tuple(part.strip().lower() for part in text.split(","))
    if len(sides) != 2 or set(sides) != set(SIDES):
        raise UserError(
            f"{where} {entry}: sides={text}: expected query,document (the first sentence asks, "
            "the second answers) or document,query"
        )
    return sides


def _labelled_spec(spec: TaskSpec, options: dict[str, str], entry: str, where: str) -> TaskSpec:
    """``spec`` as a labelled-pairs task: ``classes`` (default ``0,1``) in label-index order, a
    label written as a class name or its index; ``positive`` (named classes must say it);
    ``metric`` (default ap); thresholds chosen on the file's train pairs when it has a split
    column with some."""
    classes = tuple(c.strip() for c in options.get("classes", "0,1").split(","))
    if len(classes) < 2 or len(set(classes)) != len(classes) or not all(classes):
        raise UserError(
            f"{where} {entry}: classes={options.get('classes')}: expected two or more distinct "
            "names, comma-separated, in label-index order (e.g. classes=different,paraphrase)"
        )
    # 1 of 0/1 and true of true/false (any case or order); which name means "similar" is no guess
    folded = {c.casefold(): c for c in classes}
    yes = next((y for n, y in (("0", "1"), ("false", "true")) if set(folded) == {n, y}), "")
    positive = options.get("positive", "").strip() or folded.get(yes, "")
    if positive not in classes:
        said = f"positive={positive} is none of them" if positive else "none is positive by default"
        raise UserError(
            f"{where} {entry}: classes {', '.join(classes)}: {said}; say which one a high "
            f"similarity predicts: positive={classes[0]} (or "
            f"{', '.join(f'positive={c}' for c in classes[1:])})"
        )
    metric = options.get("metric", "ap").strip()
    from harness.core.kinds.pairclass import LABELLED

    if metric not in LABELLED.metrics:
        raise UserError(
            f"{where} {entry}: metric={metric}: expected one of {', '.join(LABELLED.metrics)}"
        )
    if "range" in options:
        raise UserError(f"{where} {entry}: range= is for graded scores; labels name classes")
    return replace(
        spec,
        description=f"{spec.description} (labelled pairs: {', '.join(classes)})",
        kind=LABELLED.name,
        main_score=metric,
        classes=classes,
        positive=positive,
        threshold_split="train" if spec.eval_split != "train" else "",
        gold_range=(0.0, float(len(classes) - 1)),
    )


def _label_header(path: Path, fmt: str, header: bool, classes: bool) -> str | None:
    """The ``label`` column (any case) of a file of labelled pairs, None for any other file. A file
    is one when its header names a ``label`` column and no score column, and that column holds
    class labels: 0/1, or names. A ``label`` column of graded numbers (``4.5``) stays a gold
    score, as sts-bench has always read it; one of 0/1 but for a few strays (a ``2`` typed among
    them turned the task into Spearman) is refused at the first stray's ``file:line``, unless
    ``classes`` says what the column holds."""
    import csv
    import io
    import json

    if not header and fmt != "jsonl":
        return None
    text = read_input(path, limit=PAIRS_BYTES)
    try:
        if fmt == "jsonl":
            rows = [
                (n, json.loads(line)) for n, line in enumerate(text.split("\n"), 1) if line.strip()
            ]
            if not rows or not all(isinstance(row, dict) for _, row in rows):
                return None
            names = [str(key) for key in rows[0][1]]
        else:
            reader = csv.reader(io.StringIO(text, newline=""))
            table = (
                [(n, line.rstrip("\r").split("\t")) for n, line in enumerate(text.split("\n"), 1)]
                if fmt == "tsv"
                else [(reader.line_num, row) for row in reader]
            )
            table = [(n, row) for n, row in table if any(cell.strip() for cell in row)]
            if not table:
                return None
            names = [name.strip() for name in table[0][1]]
            rows = [(n, dict(zip(names, row))) for n, row in table[1:]]
    except (ValueError, csv.Error, RecursionError):
        return None  # the source reads the file and says what is wrong with it
    folded = {name.casefold(): name for name in names}
    if "label" not in folded or set(folded) & set(SCORE_NAMES):
        return None
    values = [(n, str(row.get(folded["label"], "")).strip()) for n, row in rows]
    numbers = [decimal(v) for _, v in values]
    if None in numbers:
        return folded["label"]  # names: classes
    stray = [(n, v) for (n, v), number in zip(values, numbers) if number not in (0.0, 1.0)]
    if stray and len(stray) * 10 <= len(values) and not classes:  # mostly 0/1: a typo
        raise UserError(
            f"{path}:{stray[0][0]}: label {stray[0][1]!r} in a column of 0/1 classes; fix it, or "
            "say what the column holds: classes=A,B,C (its classes, in index order) or score=label "
            "(graded scores)"
        )
    return None if stray and not classes else folded["label"]


def _flag(text: str, entry: str, where: str) -> bool:
    if text.lower() not in _YES:
        raise UserError(f"{where} {entry}: header={text}: expected yes or no")
    return _YES[text.lower()]


def _range(text: str, entry: str, where: str) -> tuple[float, float]:
    parts = [decimal(p.strip()) for p in text.split(",")]
    if len(parts) != 2 or None in parts:  # plain numbers only: float() reads "0_5" as 5
        raise UserError(
            f"{where} {entry}: range={text}: expected LOW,HIGH of plain decimal numbers like 0,5 "
            "or -1,1"
        )
    low, high = (float(p) for p in parts if p is not None)
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise UserError(f"{where} {entry}: range={text}: expected finite LOW < HIGH")
    return low, high


def table_entry(table: Mapping[str, Any], base: Path | None, where: str = "[[task]]") -> str:
    """A config file's ``[[task]]`` table as the ``--tasks`` entry it stands for; a relative path is
    taken from the config file's folder (``base``). ``{"file": "p.tsv", "range": [0, 1]}`` →
    ``file:<base>/p.tsv?range=0,1``."""
    kinds = [k for k in KINDS if k in table]
    if len(kinds) != 1:
        raise UserError(
            f'{where}: give exactly one of file = "PATH" or hf = "DIR_OR_ID" '
            f"(got {', '.join(table) or 'nothing'})"
        )
    kind = kinds[0]
    location = table[kind]
    if not isinstance(location, str) or not location.strip():
        raise UserError(f"{where}: {kind} must be a path or dataset id (a string)")
    location = _rebased(kind, location, base)
    parts = []
    for key, value in table.items():
        if key == kind:
            continue
        if key not in KEYS:
            raise UserError(
                f"{where}: unknown key '{key}'{did_you_mean(key, KEYS)}; keys: {kind}, "
                f"{', '.join(KEYS)}"
            )
        if key in ("range", "sides", "classes") and isinstance(value, list):
            value = ",".join(str(v) for v in value)
        elif isinstance(value, bool):
            value = "yes" if value else "no"
        elif not isinstance(value, str | int | float):
            raise UserError(f"{where}: {key} = {value!r}: expected a string or a number")
        text = str(value)
        if "&" in text or "?" in text:
            raise UserError(f"{where}: {key} = {text!r}: '&' and '?' cannot appear in a value")
        parts.append(f"{key}={text}")
    return f"{kind}:{location}" + (f"?{'&'.join(parts)}" if parts else "")


def rebase(entry: str, base: Path) -> str:
    """A config file's ``tasks`` entry with a relative path taken from the config file's folder."""
    if not is_declared(entry):
        return entry
    kind, _, rest = entry.partition(":")
    location, sep, query = rest.partition("?")
    return f"{kind}:{_rebased(kind.strip().lower(), location, base)}{sep}{query}"


def _rebased(kind: str, location: str, base: Path | None) -> str:
    # A hub id (org/name) stays as it is unless a folder of that name sits beside the config file.
    path = Path(location.strip()).expanduser()
    if base is None or path.is_absolute() or not (kind == "file" or (base / path).exists()):
        return location
    return str(base / path)
