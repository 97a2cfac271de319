"""GLUE's own data folder (what ``download_glue_data.py`` writes, ``glue_data/`` by default), read
the way GLUE's processors read it: tab-separated, a header line, no quoting.

Layout (the folders and files as the script leaves them; only the labelled splits are read)::

    MRPC/{train,dev}.tsv    Quality  #1 ID  #2 ID  #1 String  #2 String             (0 / 1)
    QQP/{train,dev}.tsv     id  qid1  qid2  question1  question2  is_duplicate     (0 / 1)
    QNLI/{train,dev}.tsv    index  question  sentence  label    (entailment, not_entailment)
    RTE/{train,dev}.tsv     index  sentence1  sentence2  label  (entailment, not_entailment)
    MNLI/{train,dev_matched,dev_mismatched}.tsv   ... sentence1  sentence2 ... gold_label
    SNLI/{train,dev,test}.tsv   as MNLI's; a gold_label of '-' (no majority) is dropped

A task's ``glue`` entry says which folder and which columns, by their header names: ``{"folder":
"QNLI", "columns": ["question", "sentence", "label"], "labels": "name"}`` (``labels``: ``index``,
the default, for 0/1 files, ``name`` for files that name the classes, mapped to the task's
``classes``); ``short_rows: "skip"`` skips rows with fewer fields than the header, as GLUE's QQP
processor does for the real train file's broken lines (one log line says how many); ``drop``:
label values whose rows are left out (SNLI's ``-``). The split ``S`` is the file ``S.tsv``.

Sentences are kept as written (GLUE's processors hand them to the model as they are). A row with
the wrong number of fields, an empty sentence or an unknown label is one ``error:`` line naming
``file:line``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.core.data.sources import Source
from harness.core.data.sources.labels import PairRows
from harness.core.data.sources.rows import read_lines
from harness.core.data.splits import SplitData, TaskSpec
from harness.core.errors import UserError
from harness.core.kinds import kind_of

log = logging.getLogger("sts_bench.sources")
# The folders download_glue_data.py writes; any one of them marks a GLUE folder.
GLUE_FOLDERS = ("CoLA", "SST-2", "MRPC", "QQP", "STS-B", "MNLI", "SNLI", "QNLI", "RTE", "WNLI")
GET_DATA_HINT = "fetch it with GLUE's download_glue_data.py (--tasks {task})"


def glue_root(location: str | None) -> Path:
    """The GLUE folder: the one given, or its ``glue_data/`` (the script's default name)."""
    if not location:
        raise UserError(f"--source glue needs {SOURCE.spelled()} ({SOURCE.location})")
    root = Path(location).expanduser()
    if not root.is_dir():
        raise UserError(f"{SOURCE.spelled(str(root))}: no such directory")
    for candidate in (root, root / "glue_data"):
        if any((candidate / name).is_dir() for name in GLUE_FOLDERS):
            return candidate
    raise UserError(
        f"{SOURCE.spelled(str(root))}: found none of {', '.join(GLUE_FOLDERS)} in it (or in "
        "glue_data/); point it at the folder GLUE's download_glue_data.py wrote"
    )


def load(spec: TaskSpec, splits: Sequence[str], location: str | None) -> dict[str, SplitData]:
    place = spec.place(SOURCE.name)
    if place is None:
        raise UserError(
            f"{spec.title} is not a GLUE task (it has no 'glue' entry); use --source "
            f"{' or '.join(s for s in spec.where if s != SOURCE.name) or 'hub'}"
        )
    if not kind_of(spec).labelled:
        raise UserError(f"{spec.title}: the glue source reads labelled pairs (kind pairclass)")
    root = glue_root(location)
    folder = root / str(place["folder"])
    out: dict[str, SplitData] = {}
    for split in splits:
        if split not in spec.splits:
            continue
        path = folder / f"{split}.tsv"
        if not path.is_file():
            hint = GET_DATA_HINT.format(task=place["folder"])
            if split == spec.threshold_split:  # only accuracy / F1's thresholds read it
                hint += "; or score without it: --pair-thresholds none (and --fit-set test)"
            raise UserError(
                f"GLUE dir {root} is missing {path.relative_to(root)} ({spec.title}'s {split} "
                f"split); {hint}"
            )
        out[split] = read_tsv(path, spec, place)
    return out


def read_tsv(path: Path, spec: TaskSpec, place: Mapping[str, Any]) -> SplitData:
    """One split file of a GLUE task, its columns found by header name."""
    names = tuple(str(c) for c in place["columns"])
    skip_short = place.get("short_rows") == "skip"
    drop = {str(value) for value in place.get("drop", ())}
    lines = read_lines(path)
    if not lines:
        raise UserError(f"{path}: the file is empty; expected a header line ({'  '.join(names)})")
    header = [name.strip() for name in lines[0].lstrip("\ufeff").split("\t")]  # MRPC's has a BOM
    missing = [name for name in names if name not in header]
    if missing:
        raise UserError(
            f"{path}:1: the header lacks column(s) {', '.join(missing)} (it has "
            f"{', '.join(header)[:200]}); is this {spec.title}'s file from download_glue_data.py?"
        )
    i1, i2, il = (header.index(name) for name in names)
    rows = PairRows(spec, by=str(place.get("labels", "index")))
    skipped = dropped = 0
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        fields = line.split("\t")
        if len(fields) != len(header):
            if skip_short and len(fields) < len(header):
                skipped += 1
                continue
            raise UserError(
                f"{where}: expected {len(header)} tab-separated fields as in the header, got "
                f"{len(fields)}"
            )
        a, b, label = fields[i1], fields[i2], fields[il].strip()
        if label in drop:
            dropped += 1
            continue
        if skip_short and not (a.strip() and b.strip()):
            skipped += 1
            continue
        rows.add(a, b, label, where, (names[0], names[1]))
    if skipped:  # a warning: the default console shows it, and the data changed
        log.warning(
            "%s: skipped %d line(s) with missing fields or an empty question, as GLUE's own "
            "processors do; %d pairs read",
            path,
            skipped,
            len(rows.gold),
        )
    if dropped:  # expected (SNLI's '-'), as SentEval's unscored pairs: not a warning
        log.info(
            "%s: dropped %d pair(s) whose label is %s (no gold label)",
            path,
            dropped,
            " or ".join(sorted(drop)),
        )
    return rows.result(str(path))


SOURCE = Source(
    "glue",
    "GLUE's data folder (download_glue_data.py): MRPC, QQP, QNLI, RTE, MNLI, SNLI",
    load,
    location="the folder GLUE's download_glue_data.py writes (MRPC/, QQP/, MNLI/ ...)",
    needs_location=True,
    flag="--glue-dir",
)
