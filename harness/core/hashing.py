"""Content hashes used for cache keys and fingerprints (stdlib only)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Files that never change what a model computes (docs, VCS metadata) stay out of its fingerprint.
_IGNORED_NAMES = {"README.md", ".gitattributes", ".gitignore"}


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: equal values give equal text, hence equal hashes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def strict_json(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, ±inf) replaced by None: what strict JSON can hold
    (``json.dumps(..., allow_nan=False)`` then never fails, and no reader meets a bare ``NaN``).

    >>> strict_json({"a": [1.0, float("nan")], "b": float("inf")})
    {'a': [1.0, None], 'b': None}
    """
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    return value


def key_hash(key: Mapping[str, Any], length: int = 32) -> str:
    """Short hex id of a cache key. ``key_hash({"a": 1}) == key_hash({"a": 1})``; any field change
    differs."""
    return hashlib.sha256(canonical_json(key).encode("utf-8")).hexdigest()[:length]


@functools.lru_cache(maxsize=1 << 16)
def text_digest(text: str) -> bytes:
    """Raw 32-byte sha256 of a sentence's exact UTF-8 text: the row key of the vector cache.
    Memoised: a run looks up the same sentences once per view and method."""
    return hashlib.sha256(text.encode("utf-8")).digest()


def file_sha256(path: Path, block: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def _model_files(folder: Path) -> list[Path]:
    files = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if (
            path.is_file()
            and path.name not in _IGNORED_NAMES
            and not any(p.startswith(".") for p in rel.parts)
        ):
            files.append(path)
    return files


def _file_stamp(path: Path) -> list[int]:
    info = path.stat()
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]


def fingerprint_dir(folder: Path, memo_file: Path | None = None) -> str:
    """sha256 over every file of a model folder (path, size, content).

    Hashing a BERT-base folder reads ~440 MB, so the result is memoised in ``memo_file`` against
    each file's stat: size, mtime, and also the inode and ctime (as git's index does), because size
    and mtime alone can be kept by a change: ``rsync -a`` or ``touch -r`` restore the mtime of
    replaced weights, but a replaced file has a new inode or ctime, which no user tool can set back.
    A warm run re-hashes nothing unless a file changed.
    """
    folder = folder.resolve()
    files = _model_files(folder)
    stamp = [[str(p.relative_to(folder)), *_file_stamp(p)] for p in files]
    memo: dict[str, Any] = {}
    if memo_file is not None and memo_file.is_file():
        try:
            memo = json.loads(memo_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            memo = {}  # a damaged memo only costs a re-hash
        entry = memo.get(str(folder))
        if isinstance(entry, dict) and entry.get("stamp") == stamp:
            return str(entry["sha256"])
    digest = hashlib.sha256()
    for path, (rel, size, *_) in zip(files, stamp):
        digest.update(f"{rel}\0{size}\0{file_sha256(path)}\n".encode())
    result = digest.hexdigest()
    if memo_file is not None:
        memo[str(folder)] = {"stamp": stamp, "sha256": result}
        # A memo that cannot be written costs a re-hash next time; the cache checks report why.
        with contextlib.suppress(OSError):
            atomic_write_text(memo_file, json.dumps(memo, indent=1))
    return result


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary file beside ``path`` then rename: readers see the old file or the new
    one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{os.getpid()}-{os.urandom(4).hex()}-{path.name}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:
        if (
            err.filename is None
        ):  # a failed write (disk full) names no file; the user needs to know which
            raise OSError(err.errno, err.strerror, str(path)) from err
        raise
    finally:
        if tmp.exists():
            tmp.unlink()


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def npy_bytes(array: Any) -> bytes:
    """``array`` as the bytes of a ``.npy`` file (no pickle), ready for
    :func:`atomic_write_bytes`."""
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()
