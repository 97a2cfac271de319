"""One versioned JSON file per (method, task): the only input of the leaderboard.

The file carries everything needed to trust or reproduce the number: the method spec, the task
(source, fingerprint, pairs), the protocol, the scores with their CI and per-subset values, the
fit set, the environment and timings. ``schema_version`` changes whenever a field's meaning does.

**One column, one dataset.** A task's records of one protocol group must all score the same pairs:
when a task's data changes between runs into one folder (a pairs file edited, another file given the
same ``name=``), the records on the older data are *superseded* (:func:`current_data`): they stay in
``runs/`` (and their points in the history), but no table shows them beside scores on the new data,
and :func:`load_results` says so in one warning per task.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import platform
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.authenticity import secret_from_env
from harness.core.bootstrap import ResampleMemo
from harness.core.codekeys import package_versions
from harness.core.hashing import atomic_write_text, key_hash
from harness.runner.records.lock import read_inside
from harness.runner.records.schema import (
    RESULT_SCHEMA_VERSION,
    Record,
    data_fingerprints,
    problems,
    protocol_group,
    seal,
)

log = logging.getLogger("sts_bench.results")
_PACKAGES = ("torch", "transformers", "sentence-transformers", "numpy", "scipy")


@functools.lru_cache(maxsize=1)
def git_sha() -> str | None:
    """The harness's own commit (with ``+dirty`` if the tree has changes), or None outside git."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str, check: bool = False) -> str:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=5, check=check
        )
        return done.stdout.strip()

    try:
        sha = git("rev-parse", "HEAD", check=True)
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{sha}+dirty" if dirty else sha


def environment(devices: list[str], dtype: str, picked: str = "") -> dict[str, Any]:
    """Where a record was computed. ``picked``: why ``dtype`` is what it is when the run chose it
    (``--dtype fastest`` → ``"fastest on this CPU"``); the key is there only then."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": package_versions(*_PACKAGES),
        "devices": devices or ["none (all vectors from cache)"],
        "dtype": dtype,
        **({"dtype_picked": picked} if picked else {}),
    }


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


MAX_SLUG = 60  # characters of the label kept in a file name; file systems stop at 255 bytes


def file_slug(label: str, allowed: str = r"[^A-Za-z0-9.=-]+") -> str:
    """A label as a file name: odd characters become '-', and a long one is cut and tagged with a
    hash of the whole label (file systems refuse names over 255 bytes; the full label stays in the
    JSON)."""
    slug = re.sub(allowed, "-", label).strip("-")
    if len(slug) > MAX_SLUG:
        slug = f"{slug[: MAX_SLUG - 9]}-{key_hash({'label': label}, 8)}"
    return slug


def result_path(runs_dir: Path, record: Record) -> Path:
    """``runs/<method>__<task>__<id>.json``. The id hashes spec + protocol + task source and the
    fingerprints of the data (task pairs, fit set, backbone weights), so a re-run with the same
    settings on the same data overwrites its file, and any other setting or data gets its own.
    A long label is cut and tagged with a hash of the whole label (which stays in the JSON)."""
    fit_set = (record.get("fit") or {}).get("fit_set") or {}
    identity = {
        "method": record["method"]["spec"],
        "protocol": record["protocol"],
        "task": [record["task"]["name"], record["task"]["source"], record["task"]["fingerprint"]],
        "fit_set": fit_set.get("fingerprint"),
        "backbone": (record.get("backbone") or {}).get("fingerprint"),
    }
    slug = file_slug(record["method"]["label"])
    return runs_dir / f"{slug}__{record['task']['name']}__{key_hash(identity, 10)}.json"


def write_result(runs_dir: Path, record: Record) -> Path:
    """Write the record, sealed with its checksum, as strict JSON (a NaN anywhere is a bug: scores
    that cannot be computed are null, :mod:`harness.runner.records.schema`)."""
    path = result_path(runs_dir, record)
    sealed = seal(record, secret_from_env())
    atomic_write_text(
        path,
        json.dumps(sealed, indent=1, sort_keys=False, ensure_ascii=False, allow_nan=False) + "\n",
    )
    return path


def load_results(runs_dir: Path, memo: ResampleMemo | None = None) -> list[Record]:
    """Every intact record under ``runs_dir``, oldest first (by ``created``, then by when its file
    was written, so two runs within one second keep their order). A file that is not one
    (unreadable, not JSON, edited, partial, another schema, scores its own pairs do not give) is
    skipped with one warning and never shown; files whose name starts with a dot (``.tmp-*`` of a
    write in flight or killed) are not records at all. Records on a task's older data are returned
    (they are intact) with one warning per task: the tables leave them out
    (:func:`current_data`)."""
    loaded: list[tuple[str, int, str, Record]] = []
    older: list[Path] = []
    secret = secret_from_env()
    for path in sorted(Path(runs_dir).glob("*.json")):
        if path.name.startswith("."):
            continue
        try:
            written = path.lstat().st_mtime_ns
            # never through a link: a record must be a file of this folder
            # (records.lock.read_inside)
            record = json.loads(read_inside(path).decode("utf-8"), parse_constant=_refuse_constant)
        except (OSError, ValueError) as err:
            log.warning("results: skipping %s (not readable JSON: %s)", path, str(err)[:120])
            continue
        if (
            isinstance(record, dict)
            and isinstance(record.get("schema_version"), int)
            and record["schema_version"] < RESULT_SCHEMA_VERSION
        ):
            older.append(path)
            continue
        problem = problems(record, secret, memo)
        if problem:
            log.warning(
                "results: skipping %s (%s); run the benchmark again to rewrite it", path, problem
            )
            continue
        loaded.append((record["created"], written, path.name, record))
    if older:
        log.warning(
            "results: skipping %d record(s) in %s written by an older sts-bench (schema < %d); run "
            "the benchmark again to rewrite them",
            len(older),
            runs_dir,
            RESULT_SCHEMA_VERSION,
        )
    records = [record for *_, record in sorted(loaded, key=lambda item: item[:3])]
    for stale in current_data(records)[1]:
        log.warning("results: %s", stale.line(runs_dir))
    return records


@dataclass(frozen=True)
class Superseded:
    """A task of one protocol group whose data changed: the records on older data left out of the
    tables."""

    task: str  # the task's title: its column
    # the protocol group's values (:data:`harness.runner.records.schema.PROTOCOL_GROUP`)
    group: tuple[str, ...]
    newest: str  # the fingerprint of the task's most recently created record
    older: tuple[str, ...]  # the other fingerprints, oldest data first
    records: int  # how many records are left out

    def line(self, runs_dir: Path | str) -> str:
        """The warning, naming the task and the first 12 hex digits of each fingerprint."""
        old = ", ".join(fp[:12] for fp in self.older)
        return (
            f"{self.task}: its data changed (sha256 {old} → {self.newest[:12]}); {self.records} "
            f"record(s) on the older data are left out of every table (they stay in {runs_dir} and "
            "the history); run their methods again to score them on the current data"
        )


def current_data(records: Iterable[Record]) -> tuple[list[Record], list[Superseded]]:
    """The records on their task's current data, in their order, and what was left out.

    A task's current data, per protocol group, is each split's fingerprint in its most recently
    created record that read it (on a tie in ``created``, the one later in ``records``:
    :func:`load_results` orders them as written); a record is current when every split it read
    (its threshold split too: :func:`data_fingerprints`) is. Keyed on the task's title, the column
    it is shown in."""
    records = list(records)
    latest: dict[tuple[str, ...], tuple[str, str]] = {}  # (group, task) → (created, fingerprint)
    splits: dict[tuple[str, ...], dict[str, tuple[str, str]]] = {}  # ... → split → the same
    for rec in records:
        key = (*protocol_group(rec).values(), rec["task"]["title"])
        if key not in latest or rec["created"] >= latest[key][0]:
            latest[key] = (rec["created"], _fingerprint(rec))
        read = splits.setdefault(key, {})
        for name, fingerprint in data_fingerprints(rec).items():
            if name not in read or rec["created"] >= read[name][0]:
                read[name] = (rec["created"], fingerprint)
    kept: list[Record] = []
    left: dict[tuple[str, ...], dict[str, int]] = {}  # (group, task) → older fingerprint → records
    for rec in records:
        key = (*protocol_group(rec).values(), rec["task"]["title"])
        fingerprint = _fingerprint(rec)
        if all(splits[key][n][1] == fp for n, fp in data_fingerprints(rec).items()):
            kept.append(rec)
        else:
            counts = left.setdefault(key, {})
            counts[fingerprint] = counts.get(fingerprint, 0) + 1
    stale = [
        Superseded(
            task=key[-1],
            group=key[:-1],
            newest=latest[key][1],
            older=tuple(counts),
            records=sum(counts.values()),
        )
        for key, counts in left.items()
    ]
    return kept, stale


def _fingerprint(rec: Record) -> str:
    """The sha256 of a record's pairs; "" for a record built in memory without one (a test's, a
    caller's table of hand-made rows): such records all count as one dataset."""
    return str(rec["task"].get("fingerprint") or "")


def _refuse_constant(name: str) -> Any:
    """Strict JSON on read too: ``NaN`` and ``Infinity`` are not numbers a record may hold."""
    raise ValueError(f"{name} is not strict JSON")
