"""Content hashes used for cache keys and fingerprints, and the one intake of what is read from
outside (:func:`read_input`; JSON held to its format's schema: :func:`read_json`) (stdlib only)."""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypedDict

from harness.core.errors import UserError

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


class NotAFile(OSError):
    """A path that is not a regular file where one is read: a FIFO, a device (a link to
    ``/dev/zero``), a socket or a folder, or (for readers that do not follow links) a link.
    Never read: opening a FIFO waits for a writer and a device never ends, so hashing one would
    hang the run. An ``OSError``: a reader that discards damaged files discards it; uncaught, it
    is one exit-3 line."""


def open_regular(path: Path, *, follow: bool = True) -> tuple[int, int]:
    """``(descriptor, size)`` of the regular file ``path``, opened read-only and non-blocking (a
    FIFO under the name does not hang the open) and checked on the descriptor (``fstat``), so the
    size is known before a byte is read. Links are followed unless ``follow`` is False (then a
    link is a :class:`NotAFile` too). Anything else: :class:`NotAFile`; the caller closes the
    descriptor."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):
            raise NotAFile(errno.ELOOP, "is a symbolic link", str(path)) from None
        if err.errno == errno.EISDIR:
            raise NotAFile(errno.EISDIR, "is a folder, not a file", str(path)) from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else _kind(info.st_mode)
        raise NotAFile(errno.EINVAL, f"is {kind}, not a regular file", str(path))
    return fd, info.st_size


def not_a_file(path: Path) -> str:
    """Why ``path`` is not a file to read, for an error line: ``"no such file"``, ``"is a
    directory, not a file"``, or ``"is a FIFO, not a regular file"`` (a device, a socket).

    >>> not_a_file(Path("/"))
    'is a directory, not a file'
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "no such file"
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    return f"is {_kind(mode)}, not a regular file" if not stat.S_ISREG(mode) else "not readable"


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def _read_fd(fd: int, size: int, block: int = 1 << 20) -> Iterator[bytes]:
    """At most ``size`` bytes (the size known when it was opened): a file that grows meanwhile is
    not followed forever."""
    left = size
    while left > 0 and (chunk := os.read(fd, min(block, left))):
        left -= len(chunk)
        yield chunk


def read_regular(path: Path, *, follow: bool = True) -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular`): never a FIFO or a device."""
    fd, size = open_regular(path, follow=follow)
    try:
        return b"".join(_read_fd(fd, size))
    finally:
        os.close(fd)


TEXT_BYTES, PAIRS_BYTES = 1 << 20, 1 << 30  # a file a person writes (config, prompts); of pairs
# A model's or a cache's JSON file (a config.json is a few KB); a tokenizer.json holds its whole
# vocabulary (a multilingual one some tens of MB).
JSON_BYTES, TOKENIZER_BYTES = 1 << 24, 1 << 26


def read_input(path: Path, said: str = "", limit: int = TEXT_BYTES, fix: str = "") -> str:
    """The one intake of a file the user names: a regular file (a FIFO blocks, /dev/zero never
    ends) of at most ``limit`` bytes, known before a byte is read (a 10 MB prompt took 20 GB),
    UTF-8 decoded once (a BOM dropped); anything else is one UserError line naming ``said``."""
    said, fix = f"{said}: " if said else "", f"; {fix}" if fix else ""
    try:
        fd, size = open_regular(path)
    except (FileNotFoundError, NotAFile):
        raise UserError(f"{said}{path}: {not_a_file(path)}{fix}") from None
    try:
        if size > limit:
            raise UserError(f"{said}{path} is {size:,} bytes, over the {limit:,} read here{fix}")
        data = b"".join(_read_fd(fd, size))
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise UserError(
            f"{said}{path}:{line}: not valid UTF-8 (byte {err.start}); re-save the file as UTF-8"
        ) from None


def read_table(
    path: Path, said: str = "", *, json_ok: bool = True, text: str = "", fix: str = ""
) -> Any:
    """The TOML (``.json``: JSON, if ``json_ok``) table of ``text`` or of :func:`read_input`'s
    read, or one UserError line ending in ``fix``; too deep a nesting (5,000 ``[``: RecursionError)
    included."""
    import tomllib

    as_json = json_ok and path.suffix.lower() == ".json"
    try:
        return (json.loads if as_json else tomllib.loads)(text or read_input(path, said))
    except (ValueError, RecursionError) as err:  # TOMLDecodeError is a ValueError
        why = "nested too deep" if isinstance(err, RecursionError) else err
        what = f"{said}: {path}" if said else str(path)
        fix = f"; {fix}" if fix else ""
        raise UserError(f"{what}: not valid {'JSON' if as_json else 'TOML'} ({why}){fix}") from None


def read_json(path: Path, schema: Any, fix: str, limit: int = JSON_BYTES) -> Any:
    """The one intake of a JSON file from outside (a model's or an adapter's folder, a cache's
    metadata): :func:`read_input`'s bounds, then the value held to ``schema``, the format's one
    declaration (a TypedDict: :func:`held_to`). Anything else is one UserError line naming the
    file, the field and ``fix``; a cache reader discards what raises it."""
    from harness.core.typecheck import held_to

    text = read_input(path, limit=limit, fix=fix)
    return held_to(read_table(path, text=text, fix=fix), schema, path, fix)


def file_sha256(path: Path, block: int = 1 << 20) -> str:
    """sha256 of a regular file's bytes; anything else (a FIFO, a link to ``/dev/zero``) is a
    :class:`NotAFile` before a byte is read."""
    digest = hashlib.sha256()
    fd, size = open_regular(path)
    try:
        for chunk in _read_fd(fd, size, block):
            digest.update(chunk)
    finally:
        os.close(fd)
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


class FingerprintMemo(TypedDict):  # a model folder's entry: each file's stat, and the digest
    stamp: list[Any]  # compared whole with the stat: an inode past 64 bits still matches
    sha256: str


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
            memo = read_json(memo_file, dict[str, FingerprintMemo], "it is computed again")
        except UserError:
            memo = {}  # a damaged memo only costs a re-hash
        entry = memo.get(str(folder))
        if entry is not None and entry["stamp"] == stamp:
            return entry["sha256"]
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
        # a failed write (disk full) names no file; the user needs to know which
        if err.filename is None:
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


def npy_array(data: bytes) -> Any:
    """The array the bytes of a ``.npy`` file hold, read without pickle and without trusting its
    header: the shape it declares must be the bytes that follow, checked before anything is
    allocated (``np.load`` of a header claiming 10^10 floats allocates them). Read-only."""
    import io
    import math

    import numpy as np

    stream = io.BytesIO(data)
    version = np.lib.format.read_magic(stream)
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f".npy format {version} is not written here")
    header = np.lib.format.read_array_header_1_0 if version == (1, 0) else None
    shape, fortran, dtype = (header or np.lib.format.read_array_header_2_0)(stream)
    count, start = math.prod(shape), stream.tell()
    if dtype.hasobject or count * dtype.itemsize != len(data) - start:
        raise ValueError(f"a .npy header says {shape} {dtype} over {len(data) - start} bytes")
    return np.frombuffer(data, dtype, count, start).reshape(shape, order="F" if fortran else "C")
