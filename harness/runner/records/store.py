"""One versioned JSON file per (method, task): the only input of the leaderboard.

The file carries everything needed to trust or reproduce the number: the method spec, the task
(source, fingerprint, pairs), the protocol, the scores with their CI and per-subset values, the
fit set, the environment and timings. ``schema_version`` changes whenever a field's meaning does.
"""

from __future__ import annotations

import datetime as dt
import functools
import importlib.metadata
import json
import logging
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

from harness.core.hashing import atomic_write_text, key_hash
from harness.runner.records.schema import RESULT_SCHEMA_VERSION, Record, problems, seal

log = logging.getLogger("sts_bench.results")
_PACKAGES = ("torch", "transformers", "sentence-transformers", "numpy", "scipy")


@functools.lru_cache(maxsize=1)
def package_versions() -> dict[str, str | None]:
    """Installed versions, read from package metadata (importing torch just to ask is too slow)."""
    out: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


@functools.lru_cache(maxsize=1)
def git_sha() -> str | None:
    """The harness's own commit (with ``+dirty`` if the tree has changes), or None outside git."""
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{sha}+dirty" if dirty else sha


def environment(devices: list[str], dtype: str) -> dict[str, Any]:
    return {"python": platform.python_version(), "platform": platform.platform(), "packages": dict(package_versions()),
            "devices": devices or ["none (all vectors from cache)"], "dtype": dtype}


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


MAX_SLUG = 60  # characters of the label kept in a file name; file systems stop at 255 bytes


def file_slug(label: str, allowed: str = r"[^A-Za-z0-9.=-]+") -> str:
    """A label as a file name: odd characters become '-', and a long one is cut and tagged with a hash
    of the whole label (file systems refuse names over 255 bytes; the full label stays in the JSON)."""
    slug = re.sub(allowed, "-", label).strip("-")
    if len(slug) > MAX_SLUG:
        slug = f"{slug[:MAX_SLUG - 9]}-{key_hash({'label': label}, 8)}"
    return slug


def result_path(runs_dir: Path, record: Record) -> Path:
    """``runs/<method>__<task>__<id>.json``. The id hashes spec + protocol + task source and the
    fingerprints of the data (task pairs, fit set, backbone weights), so a re-run with the same
    settings on the same data overwrites its file, and any other setting or data gets its own.
    A long label is cut and tagged with a hash of the whole label (which stays in the JSON)."""
    fit_set = (record.get("fit") or {}).get("fit_set") or {}
    identity = {"method": record["method"]["spec"], "protocol": record["protocol"],
                "task": [record["task"]["name"], record["task"]["source"], record["task"]["fingerprint"]],
                "fit_set": fit_set.get("fingerprint"), "backbone": (record.get("backbone") or {}).get("fingerprint")}
    slug = file_slug(record["method"]["label"])
    return runs_dir / f"{slug}__{record['task']['name']}__{key_hash(identity, 10)}.json"


def write_result(runs_dir: Path, record: Record) -> Path:
    """Write the record, sealed with its checksum, as strict JSON (a NaN anywhere is a bug: scores
    that cannot be computed are null, :mod:`harness.runner.records.schema`)."""
    path = result_path(runs_dir, record)
    sealed = seal(record)
    atomic_write_text(path, json.dumps(sealed, indent=1, sort_keys=False, ensure_ascii=False, allow_nan=False) + "\n")
    return path


def load_results(runs_dir: Path) -> list[Record]:
    """Every intact record under ``runs_dir``. A file that is not one (unreadable, not JSON, edited,
    partial, another schema) is skipped with one warning and never shown; files whose name starts
    with a dot (``.tmp-*`` of a write in flight or killed) are not records at all."""
    records: list[Record] = []
    older: list[Path] = []
    for path in sorted(Path(runs_dir).glob("*.json")):
        if path.name.startswith("."):
            continue
        try:
            record = json.loads(path.read_text(encoding="utf-8"), parse_constant=_refuse_constant)
        except (OSError, ValueError) as err:
            log.warning("results: skipping %s (not readable JSON: %s)", path, str(err)[:120])
            continue
        if isinstance(record, dict) and isinstance(record.get("schema_version"), int) \
                and record["schema_version"] < RESULT_SCHEMA_VERSION:
            older.append(path)
            continue
        problem = problems(record)
        if problem:
            log.warning("results: skipping %s (%s); run the benchmark again to rewrite it", path, problem)
            continue
        records.append(record)
    if older:
        log.warning("results: skipping %d record(s) in %s written by an older sts-bench (schema < %d); run the "
                    "benchmark again to rewrite them", len(older), runs_dir, RESULT_SCHEMA_VERSION)
    return records


def _refuse_constant(name: str) -> Any:
    """Strict JSON on read too: ``NaN`` and ``Infinity`` are not numbers a record may hold."""
    raise ValueError(f"{name} is not strict JSON")
