r"""The history store: every run's scores, by commit, for tracking them over time (asv-style).

``<output>/history.jsonl`` gets one line per (method row, task) of each run: the git commit of
the harness (``+dirty`` when the tree had changes; none outside git), the date, the protocol, the
score with its interval, the data fingerprint and the environment. Each run's lines are written
with one ``write`` on a file opened ``O_APPEND`` and then fsync'ed, so concurrent runs never
interleave inside a line and a crash loses at most the run in flight. Each line carries the
sha256 of its own content; a line that fails it (a torn write, an edit) is skipped with a warning.
With a cache secret (:mod:`harness.core.authenticity`) a line also carries the HMAC of that sha256,
which covers its blobs' names, and a line without a valid one is not shown.
Lines end at ``\n`` only (``str.splitlines`` would also cut at U+2028, NEL or a form feed, which
JSON keeps raw inside a string: a backbone folder named with one would tear its line), and the
writer escapes those characters as well, for readers elsewhere that split like ``splitlines``.

Nothing here follows a symbolic link (the output folder is closed,
:mod:`harness.runner.records.lock`): ``history.jsonl`` is appended with ``O_NOFOLLOW``, and a link
found under its name is replaced by a new file with one warning (its target untouched, its lines not
read); reads skip a link with one warning.

The per-pair similarities (and, per task, the gold scores and subset labels) go beside it, under
``<output>/history/``, as content-addressed files: ``<sha256>.npy`` (float64, read with
``allow_pickle=False``) and ``<sha256>.json``, named by the sha256 of their bytes and checked
against it when read. With both runs' similarities at hand, a change between two commits is tested
with the paired bootstrap (:mod:`harness.runner.history.moves`). No pickle anywhere.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import logging
import os
import stat
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from harness.core import authenticity
from harness.core.errors import ResourceError
from harness.core.hashing import atomic_write_bytes, canonical_json, npy_array
from harness.core.kinds import DEFAULT_KIND, KINDS, TaskKind, kind_of
from harness.runner.records.lock import NOFOLLOW, NotAFile, link_target, read_inside
from harness.runner.records.outputs import StepOutput
from harness.runner.records.schema import main_ci, main_value
from harness.runner.tables.frames import record_keys

if TYPE_CHECKING:
    from harness.runner.records.outputs import ReportInputs
    from harness.runner.records.schema import Record
    from harness.runner.settings.config import BenchConfig

HISTORY_SCHEMA = 1
HISTORY_FILE = "history.jsonl"
BLOBS = "history"
log = logging.getLogger("sts_bench.history")
# Field → the type its value must have (None allowed where the tuple says so).
FIELDS: dict[str, tuple[type, ...]] = {
    "schema": (int,),
    "run": (str,),
    "commit": (str, type(None)),
    "date": (str,),
    "method": (str,),
    "backbone": (str,),
    "kind": (str,),
    "fit_set": (str,),
    "task": (str,),
    "fingerprint": (str,),
    "n_pairs": (int,),
    "aggregation": (str,),
    "source": (str,),
    "dtype": (str,),
    "max_length": (str,),
    "first_last_layers": (str,),
    "score": (float, int),  # the main score ×100, named by "metric" (Spearman for STS)
    "ci95": (list, type(None)),
    "similarity": (str, type(None)),
    "gold": (str, type(None)),
    "env": (dict,),
}
# Line breaks of str.splitlines that JSON keeps raw in a string (json.dumps escapes the others):
# escaped on write, so a reader that splits like splitlines still sees one entry per line.
_RAW_BREAKS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def _store_blob(folder: Path, data: bytes, suffix: str) -> str:
    """Write ``data`` as ``<sha256><suffix>`` unless it is there already; returns the sha256."""
    digest = hashlib.sha256(data).hexdigest()
    path = folder / f"{digest}{suffix}"
    try:
        kept = stat.S_ISREG(os.lstat(path).st_mode)  # lstat: a link under the name is written over
    except FileNotFoundError:
        kept = False
    if not kept:
        atomic_write_bytes(path, data)  # os.replace replaces a link itself, never its target
    return digest


def read_blob(folder: Path, digest: str | None, suffix: str) -> bytes | None:
    """The bytes of blob ``digest`` if present and intact, else None (a damaged one is reported)."""
    if not digest:
        return None
    path = folder / f"{digest}{suffix}"
    try:
        data = read_inside(path, folder.parent)
    except NotAFile as err:
        log.warning("history: %s %s; not read", path, err.strerror)
        return None
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != digest:
        log.warning("history: %s does not match its checksum; it is ignored", path)
        return None
    return data


def read_similarity(folder: Path, digest: str | None, n_pairs: int) -> np.ndarray | None:
    data = read_blob(folder, digest, ".npy")
    if data is None:
        return None
    try:
        array = npy_array(data)  # its header held to its bytes: a forged one allocates nothing
    except ValueError:
        return None
    return array if array.dtype == np.float64 and array.shape == (n_pairs,) else None


def read_gold(
    folder: Path, digest: str | None, n_pairs: int
) -> tuple[list[float], list[str] | None] | None:
    data = read_blob(folder, digest, ".json")
    try:
        value = json.loads(data) if data is not None else None
    except ValueError:
        return None
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("gold"), list)
        or len(value["gold"]) != n_pairs
    ):
        return None
    subsets = value.get("subset")
    return [float(g) for g in value["gold"]], (list(subsets) if isinstance(subsets, list) else None)


def read_evidence(folder: Path, digest: str | None) -> tuple[TaskKind, dict[str, Any]]:
    """The kind of a gold blob and the kind's own evidence it carries
    (:meth:`~harness.core.kinds.TaskKind.evidence_extra`, under the kind's ``evidence_key``):
    graded pairs and ``{}`` when it carries none."""
    data = read_blob(folder, digest, ".json")
    try:
        value = json.loads(data) if data is not None else None
    except ValueError:
        value = None
    for name in KINDS:
        kind = KINDS[name]
        extra = value.get(kind.evidence_key) if isinstance(value, dict) else None
        if isinstance(extra, dict):
            return kind, extra
    return KINDS[DEFAULT_KIND], {}


def history_line(record: Record, run: str, blobs: Path) -> dict[str, Any]:
    """One history entry for a result record; its similarities and gold go to content-addressed
    blobs."""
    pairs = record["pairs"]
    similarity = gold = None
    if pairs["similarity"]:
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(pairs["similarity"], dtype=np.float64), allow_pickle=False)
        similarity = _store_blob(blobs, buffer.getvalue(), ".npy")
        evidence: dict[str, Any] = {"gold": pairs["gold"], "subset": pairs.get("subset")}
        kind = kind_of(record)
        if kind is not KINDS[DEFAULT_KIND]:  # its kind, and what its metrics are computed from
            evidence[kind.evidence_key] = kind.evidence_extra(record)
        gold = _store_blob(blobs, canonical_json(evidence).encode(), ".json")
    keys = record_keys(record)
    scores = record["scores"]
    line = {
        "schema": HISTORY_SCHEMA,
        "run": run,
        "commit": record["harness"].get("git_sha"),
        "date": record["created"],
        **keys,
        "task": record["task"]["title"],
        "fingerprint": record["task"]["fingerprint"],
        "n_pairs": int(record["task"]["n_pairs"]),
        # file/hf: a task that brought its own data
        "task_source": record["task"].get("source", ""),
        # the caller keeps undefined scores out; "metric" (a key) names the score
        "score": float(cast(float, main_value(record))),
        "ci95": main_ci(record),
        "bootstrap_rounds": scores.get("bootstrap_rounds"),
        "seed": scores.get("bootstrap_seed"),
        "similarity": similarity,
        "gold": gold,
        "env": record.get("env") or {},
    }
    line["check"] = check = hashlib.sha256(canonical_json(line).encode()).hexdigest()
    if secret := authenticity.secret_from_env():  # the check covers the blobs' sha256 too
        line["auth"] = authenticity.tag(secret, check.encode())
    return line


def append_history(out_dir: Path, records: Iterable[Record]) -> Path | None:
    """Append this run's scores to ``<out_dir>/history.jsonl``: one write, O_APPEND, fsync.

    A previous write cut short (a full disk, ``ulimit -f``, a kill) leaves a last line without its
    newline; this run's lines then start on a line of their own, so the torn line stays one bad line
    (skipped on read) and this run's first line is kept. Undefined scores have no point on a history
    and get no line. The caller holds the output folder's lock (:mod:`harness.runner.records.lock`).
    """
    run = uuid.uuid4().hex[:12]
    lines = [
        history_line(rec, run, out_dir / BLOBS) for rec in records if main_value(rec) is not None
    ]
    if not lines:
        return None
    path = out_dir / HISTORY_FILE
    data = "".join(
        json.dumps(line, ensure_ascii=False, allow_nan=False).translate(_RAW_BREAKS) + "\n"
        for line in lines
    ).encode("utf-8")
    fd = _open_for_append(path)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def _open_for_append(path: Path) -> int:
    """``history.jsonl`` opened to append, never through a link. A link under its name (planted: the
    tool writes none) is removed with one warning and a new history started: appending to its target
    would write outside the output folder, and refusing the run would leave its reports half built,
    and every later run refused, for a link the user did not make. A FIFO or a folder under the name
    is one exit-3 line (a FIFO would block the run; nothing there is the tool's)."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    for _ in range(3):  # another run may replace the same link at the same moment
        if not os.path.islink(path):
            try:
                fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0), 0o644)
            except OSError as err:
                if err.errno not in (errno.ELOOP, errno.EMLINK):
                    raise
            else:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    return fd
                os.close(fd)
                raise ResourceError(
                    f"{path} is not a regular file; sts-bench appends its history there: remove it"
                )
        log.warning(
            "history: %s was a symbolic link (to %s); nothing is written through a link in the "
            "output folder: the link is replaced by a new history (the target is untouched, and "
            "its lines are not read)",
            path,
            link_target(path),
        )
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    raise ResourceError(f"{path}: keeps being replaced by a symbolic link; remove it and run again")


def valid(line: Any) -> bool:
    """A history entry of this schema whose checksum matches and whose fields have their types."""
    if not isinstance(line, dict) or line.get("schema") != HISTORY_SCHEMA:
        return False
    check = line.get("check")
    body = {k: v for k, v in line.items() if k not in ("check", "auth")}
    if check != hashlib.sha256(canonical_json(body).encode()).hexdigest():
        return False
    return all(isinstance(line.get(name), types) for name, types in FIELDS.items())


def _older_valid(line: dict[str, Any]) -> bool:
    """An older line (``spearman``, no ``metric``) whose checksum matches as it was written."""
    body = {k: v for k, v in line.items() if k != "check"}
    return line.get("check") == hashlib.sha256(canonical_json(body).encode()).hexdigest()


def _older(line: dict[str, Any]) -> dict[str, Any]:
    """An older line in today's fields, re-checksummed (it verified as written)."""
    body = {k: v for k, v in line.items() if k not in ("check", "spearman")}
    body.update(score=line["spearman"], metric="spearman")
    return {**body, "check": hashlib.sha256(canonical_json(body).encode()).hexdigest()}


def read_history(out_dir: Path) -> list[dict[str, Any]]:
    """Every intact entry of ``<out_dir>/history.jsonl`` that its own per-pair blobs give
    (:func:`evidence_problem`), in file order; damaged lines are counted and skipped, and a line its
    blobs do not give is skipped with one warning naming the file, the line and why."""
    path = out_dir / HISTORY_FILE
    try:
        text = read_inside(path).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return []
    except NotAFile as err:
        log.warning(
            "history: %s %s; not read (the next run replaces it by a file of its own)",
            path,
            err.strerror,
        )
        return []
    entries: list[dict[str, Any]] = []
    skipped, secret = 0, authenticity.secret_from_env()
    # \n only: see the module docstring ("\r\n" leaves a "\r" json ignores)
    for number, raw in enumerate(text.split("\n"), 1):
        try:
            line = json.loads(raw) if raw.strip() else None
        except ValueError:
            line = None
        if isinstance(line, dict) and "score" not in line and "spearman" in line:
            # a line of an sts-bench before labelled pairs: its score was Spearman, named so
            line = _older(line) if _older_valid(line) else None
        if isinstance(line, dict) and valid(line):
            check = line["check"].encode()
            problem = (
                f"not authenticated by ${authenticity.SECRET_ENV} (written without it, or forged)"
                if secret and not authenticity.valid(secret, check, line.get("auth"))
                else evidence_problem(line, out_dir / BLOBS)
            )
            if problem:
                log.warning("history: %s line %d not shown: %s", path, number, problem)
            else:
                entries.append(line)
        elif raw.strip():
            skipped += 1
    if skipped:
        log.warning("history: skipped %d damaged or unknown line(s) of %s", skipped, path)
    return entries


def evidence_problem(line: dict[str, Any], blobs: Path) -> str | None:
    """Why a history line's score (and 95 % interval) is not what its own per-pair blobs give
    (None: it is). A line's checksum is no evidence (anyone appending a line can compute it): its
    score is computed again by its kind from the similarities and gold it names, the kind's own
    evidence its gold blob carries (:func:`read_evidence`), its aggregation, rounds and seed, as a
    record's are (:func:`harness.runner.records.schema.evidence_problem`)."""
    from harness.core.bootstrap import rounds_problem
    from harness.core.kinds import Evidence
    from harness.core.scoring import AGGREGATIONS
    from harness.runner.records.schema import AGREE

    n = line["n_pairs"]
    similarity = read_similarity(blobs, line["similarity"], n)
    gold = read_gold(blobs, line["gold"], n)
    if similarity is None or gold is None:
        return "its per-pair similarities or gold are missing or damaged (nothing to check it by)"
    if line["aggregation"] not in AGGREGATIONS:
        return f"aggregation {line['aggregation']!r} is not one of {', '.join(AGGREGATIONS)}"
    rounds, seed = line.get("bootstrap_rounds") or 0, line.get("seed") or 0
    if not isinstance(rounds, int) or not isinstance(seed, int):
        return "its bootstrap rounds or seed are not integers"
    if rounds < 0 or rounds_problem(rounds) or not 0 <= seed < 2**32:  # the CLI's rule
        return f"bootstrap rounds {rounds} or seed {seed} out of range"
    labels = gold[1]
    if labels is not None and len(labels) != n:
        return "its subset labels do not match its pairs"
    kind, extra = read_evidence(blobs, line["gold"])
    metric = line.get("metric", kind.main_default)
    if metric not in kind.metrics:
        return f"metric {metric!r} is not one of {', '.join(kind.metrics)}"
    gold_array = np.asarray(gold[0], dtype=np.float64)
    problem = kind.extra_problem(extra, gold_array)
    if problem:
        return f"its kind's evidence is malformed ({problem})"
    evidence = Evidence(similarity, gold_array, labels, dict(extra))
    try:
        fresh = kind.score(
            evidence,
            metric,
            rounds if line["ci95"] is not None else 0,
            seed,
            aggregation=line["aggregation"],
        ).metrics[metric]
    except (ArithmeticError, TypeError, ValueError) as err:
        return f"its pairs cannot be scored again ({type(err).__name__})"
    value, interval = fresh["value"], fresh["ci95"]
    if value is None or abs(value - float(line["score"])) > AGREE:
        gives = "undefined" if value is None else f"{value:.4f}"
        return f"score {line['score']} is not what its own {n} pairs give ({gives})"
    ci = line["ci95"]
    if ci is not None and (
        interval is None
        or len(ci) != 2
        or any(abs(float(a) - b) > AGREE for a, b in zip(ci, interval))
    ):
        return f"ci95 {ci} is not the interval its own pairs give ({interval})"
    return None


class HistoryLog:
    """The report step that appends this run's scores to ``history.jsonl``
    (:func:`append_history`)."""

    name = "history"

    def enabled(self, cfg: BenchConfig) -> bool:
        return True

    def memo_key(self, inputs: ReportInputs) -> None:
        return None  # an append: every run adds its own lines

    def write(self, inputs: ReportInputs) -> StepOutput:
        path = append_history(inputs.out_dir, inputs.records)
        return StepOutput([path] if path is not None else [])
