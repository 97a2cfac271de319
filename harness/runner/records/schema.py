"""The result record: one typed schema, sealed with a checksum when written, verified when read.

A record is one JSON file per (method, task) under ``runs/`` and the only input of every report.
:class:`Record` below *is* its schema: the TypedDicts give readers typed keys (the type checker
holds them to these names) and :func:`problems` walks the same annotations to check a record read
back from disk, so the schema is written once. :func:`seal` adds ``checksum``, the sha256 of the
record's canonical JSON without it; a record whose checksum does not match (an edited digit), whose
fields are missing or of the wrong type (a partial or hand-made file) or whose schema is another
version is never shown: :func:`harness.runner.records.store.load_results` skips it with one warning.

Records are strict JSON: no NaN or Infinity anywhere. A score that cannot be computed is ``null``
with the reason in ``undefined`` (:mod:`harness.core.scoring`).

>>> record = seal({"schema_version": 2})
>>> record["checksum"] == checksum({"schema_version": 2})
True
"""

from __future__ import annotations

import hashlib
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from harness.core.hashing import canonical_json, strict_json

RESULT_SCHEMA_VERSION = 2  # 2: strict JSON (undefined scores are null), a checksum, checked on read


class HarnessInfo(TypedDict):
    name: str
    version: str
    git_sha: str | None


class MethodInfo(TypedDict):
    name: str
    label: str
    kind: str
    summary: str
    spec: dict[str, Any]


class TaskInfo(TypedDict):
    name: str
    title: str
    source: str
    split: str
    origin: str
    fingerprint: str
    n_pairs: int
    subsets: dict[str, int]
    mteb_name: str | None


class Scores(TypedDict):
    spearman: float | None  # ×100; None when undefined
    pearson: float | None
    spearman_ci95: list[float] | None
    bootstrap_rounds: int
    bootstrap_seed: int
    n_zero_vectors: int
    undefined: str | None  # why the score could not be computed; None when it was


class SubsetScores(TypedDict):
    spearman: float | None
    pearson: float | None
    n: int
    undefined: str | None


class Pairs(TypedDict):
    similarity: list[float | None]  # None only where a method gave a non-finite score (then undefined)
    gold: list[float]
    subset: list[str] | None


class Record(TypedDict):
    schema_version: int
    harness: HarnessInfo
    created: str
    method: MethodInfo
    backbone: dict[str, Any] | None
    task: TaskInfo
    protocol: dict[str, Any]
    fit: dict[str, Any] | None
    scores: Scores
    subset_scores: dict[str, SubsetScores]
    pairs: Pairs
    env: dict[str, Any]
    timings: dict[str, float]
    columns: NotRequired[dict[str, float]]  # leaderboard columns a method declares (DSE's "vs teacher (%)")
    diagnostics: NotRequired[dict[str, Any]]
    embed_dim: NotRequired[int]  # the width of the vectors scored (embedding methods)
    checksum: NotRequired[str]


def checksum(record: Mapping[str, Any]) -> str:
    """sha256 of the record's canonical JSON, its own ``checksum`` field left out."""
    body = {k: v for k, v in record.items() if k != "checksum"}
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


def seal(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record with its checksum (the last field)."""
    return {**{k: v for k, v in record.items() if k != "checksum"}, "checksum": checksum(record)}


def strict(value: Any) -> Any:
    """:func:`harness.core.hashing.strict_json`: non-finite floats become None (strict JSON)."""
    return strict_json(value)


def problems(record: Any) -> str | None:
    """Why ``record`` is not a valid, intact record of this schema (None when it is)."""
    if not isinstance(record, dict):
        return "not a JSON object"
    if record.get("schema_version") != RESULT_SCHEMA_VERSION:
        return f"schema {record.get('schema_version')!r}, this harness reads {RESULT_SCHEMA_VERSION}"
    if "checksum" not in record:
        return "no checksum"
    problem = _check(record, Record, "record")
    if problem:
        return problem
    if record["checksum"] != checksum(record):
        return "its content does not match its checksum (edited or damaged)"
    n = record["task"]["n_pairs"]
    if len(record["pairs"]["similarity"]) != n or len(record["pairs"]["gold"]) != n:
        return f"pairs do not match n_pairs {n}"
    return None


def _check(value: Any, hint: Any, path: str) -> str | None:
    """Why ``value`` does not fit the annotation ``hint`` (a TypedDict, container or scalar)."""
    if hint is Any:
        return None
    if typing.is_typeddict(hint):
        if not isinstance(value, dict):
            return f"{path} is not an object"
        hints = typing.get_type_hints(hint, include_extras=True)
        # NotRequired read from the hints: with postponed annotations __required_keys__ cannot see it
        required = {k for k, v in hints.items() if typing.get_origin(v) is not NotRequired}
        missing = sorted(required - set(value))
        if missing:
            return f"{path} lacks {', '.join(missing)}"
        for key, inner in hints.items():
            if key in value and (problem := _check(value[key], _unwrap(inner), f"{path}.{key}")):
                return problem
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        checked = [_check(value, arg, path) for arg in args]
        return None if any(c is None for c in checked) else next(c for c in checked if c)
    if hint is type(None):
        return None if value is None else f"{path} is not null"
    if origin is dict:
        if not isinstance(value, dict):
            return f"{path} is not an object"
        return next((p for k, v in value.items() if (p := _check(v, args[1], f"{path}.{k}"))), None)
    if origin is list:
        if not isinstance(value, list):
            return f"{path} is not a list"
        if args[0] in (float, float | None) and all(type(v) is float and math.isfinite(v) for v in value):
            return None  # the fast path for the per-pair lists (thousands of numbers)
        return next((p for i, v in enumerate(value) if (p := _check(v, args[0], f"{path}[{i}]"))), None)
    if hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        return None if ok else f"{path} is not a finite number"
    if hint is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else f"{path} is not an integer"
    return None if isinstance(value, hint) else f"{path} is not {getattr(hint, '__name__', hint)}"


def _unwrap(hint: Any) -> Any:
    """``NotRequired[X]`` → ``X`` (get_type_hints keeps the wrapper on older Pythons)."""
    return typing.get_args(hint)[0] if typing.get_origin(hint) is NotRequired else hint
