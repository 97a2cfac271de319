"""One writer at a time in an output folder, and a folder that no link leads out of.

Runs may share an output folder (two CI jobs, a sweep in a shell loop). Each writes its own
records, but the reports (leaderboards, significance, history, the page) are rebuilt from every
record in the folder; two runs rebuilding them at once could each miss the other's record, or
leave a page older than the leaderboard. :func:`output_lock` takes an exclusive ``flock`` on
``<out>/.sts-bench.lock`` around writing a record and around rebuilding the reports, so those
steps take turns and the last report written holds every finished record. The lock is released
by the kernel when a run dies, so a killed run never blocks the next one.

**The output folder is closed.** The folder itself may be a link (where the user keeps results is
the user's choice), but nothing sts-bench reads or writes inside it goes through one: a symbolic
link planted there (``history.jsonl`` → ``~/.bashrc``, ``plots/x.png`` → ``~/.ssh/id_rsa``) would
otherwise make a run append to, or embed in ``index.html``, a file outside the folder.

* A file is written to a temporary file and renamed over its name (``os.replace`` replaces a
  link, never its target); ``history.jsonl`` is appended with ``O_NOFOLLOW`` and a link there is
  replaced by a new file with one warning (:mod:`harness.runner.history.log`).
* A file is read with :func:`read_inside`: ``O_NOFOLLOW``, a regular file only; a link is a
  :class:`NotAFile` the reader skips with one warning.
* A folder of the tool's that is a link (``runs/``, ``plots/``, ``mteb/``, ``history/``) is
  refused when the lock is taken, before anything is read or written (:data:`FOLDERS`); a link
  deeper down where a writer of this package writes is refused by :func:`refuse_linked_folders`.
  Refused, not replaced: removing a folder link would silently move where the user's records
  live, and the line says which link to remove. Exit 3 (:class:`ResourceError`): the state of
  the folder, not the command, is wrong; the user did not cause it and no flag fixes it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from harness.core.errors import ResourceError

# What read_inside raises for a link, a link on the way, a FIFO or a folder: not a file the tool
# wrote, so not read. Shared with the cache's readers (harness.core.hashing.open_regular).
from harness.core.hashing import NotAFile, read_regular

try:
    import fcntl
except ImportError:  # not POSIX: runs sharing a folder are not serialised there
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".sts-bench.lock"
# atomic_write_bytes's temporary file (harness.core.hashing): .tmp-<pid>-<8 hex digits>-<name>
TEMPORARY = re.compile(r"\.tmp-\d+-[0-9a-f]{8}-.+")
# The folders sts-bench keeps in an output folder: records, plots, MTEB result files, history blobs.
FOLDERS = ("runs", "plots", "mteb", "history")
# Without O_NOFOLLOW (not POSIX) a link is caught by the lstat before the open instead.
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
log = logging.getLogger("sts_bench.results")


def link_target(path: Path) -> str:
    """Where the link ``path`` points, for a message (never followed to read it)."""
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def linked_folder(root: Path, path: Path) -> Path | None:
    """The first folder between ``root`` (exclusive: it may be a link) and ``path`` (exclusive) that
    is a symbolic link, else None. Folders that do not exist yet are made by the writer: real
    folders.

    >>> linked_folder(Path("/nonexistent-root"), Path("/nonexistent-root/a/b.json")) is None
    True
    """
    try:
        parts = Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).parts[:-1]
    except ValueError:
        return None  # not inside root: not this folder's business
    folder = Path(root)
    for part in parts:
        folder = folder / part
        try:
            if stat.S_ISLNK(os.lstat(folder).st_mode):
                return folder
        except FileNotFoundError:
            return None
    return None


def refuse_linked_folders(root: Path, path: Path, what: str = "the output folder") -> None:
    """One :class:`ResourceError` line when writing ``path`` would go through a folder link inside
    ``root`` (see the module docstring); nothing is written."""
    link = linked_folder(root, path)
    if link is not None:
        raise ResourceError(
            f"{link} is a symbolic link (to {link_target(link)}) inside {what} {root}; sts-bench "
            "reads and writes there only through real folders, so nothing of it lands elsewhere: "
            "remove the link (or move what it points to into its place)"
        )


def read_inside(path: Path, root: Path | None = None) -> bytes:
    """The bytes of the regular file ``path``, opened without following a link (``O_NOFOLLOW``) and
    checked on the open descriptor (``fstat``), so a link swapped in after a check is not read
    either. A link at ``path`` or on the way from ``root``, a FIFO or a folder: :class:`NotAFile`;
    a missing file: ``FileNotFoundError``."""
    if root is not None and (link := linked_folder(root, path)) is not None:
        raise NotAFile(
            errno.ELOOP, f"is inside {link}, a symbolic link (to {link_target(link)})", str(path)
        )
    try:  # the cache's reader: non-blocking (a FIFO must not hang the open), checked on fstat
        if not NOFOLLOW and os.path.islink(path):
            raise NotAFile(errno.ELOOP, "is a symbolic link", str(path))
        return read_regular(path, follow=False)
    except NotAFile as err:
        if err.errno == errno.ELOOP:
            err.strerror = f"is a symbolic link (to {link_target(path)})"
        raise


def _refuse_linked_tool_folders(out_dir: Path) -> None:
    for name in FOLDERS:
        folder = Path(out_dir) / name
        if os.path.islink(folder):
            raise ResourceError(
                f"{folder} is a symbolic link (to {link_target(folder)}); sts-bench reads and "
                f"writes inside the output folder {out_dir} only through real folders, so nothing "
                "it writes lands elsewhere: remove the link (or move what it points to into its "
                "place)"
            )


def _open_lock(path: Path) -> int:
    """The lock file's descriptor, never through a link: a link planted under its name is replaced
    by a lock file of the folder's own (one warning), so ``O_CREAT`` never makes a file
    elsewhere."""
    flags = os.O_RDWR | os.O_CREAT | NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    for _ in range(3):  # another run may replace the same link at the same moment
        if not os.path.islink(path):
            try:
                return os.open(path, flags, 0o644)
            except OSError as err:
                if err.errno not in (errno.ELOOP, errno.EMLINK):
                    raise
        log.warning(
            "output folder: %s was a symbolic link (to %s); replaced by a lock file of its own "
            "(the target is untouched)",
            path,
            link_target(path),
        )
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    raise ResourceError(f"{path}: keeps being replaced by a symbolic link; remove it and run again")


_cleared: set[str] = set()  # output folders this process has cleared (the lock is taken per record)


def _clear_temporaries(out_dir: Path) -> None:
    """Remove the temporary files of writes that never finished (a run killed by SIGKILL or a power
    cut: nothing renamed or removed them) from the folder and its tool folders (:data:`FOLDERS`):
    only regular files named as :func:`harness.core.hashing.atomic_write_bytes` names them. Called
    with the lock held: every writer of the folder writes under it, so such a file is stale. Once a
    folder and process: the walk of ``runs/`` would otherwise repeat for each record written."""
    if (key := os.path.realpath(out_dir)) in _cleared:
        return
    _cleared.add(key)
    folders = [(str(out_dir), os.listdir(out_dir))]
    folders += [(path, names) for n in FOLDERS for path, _, names in os.walk(out_dir / n)]
    for folder, names in folders:
        for name in filter(TEMPORARY.fullmatch, names):
            with contextlib.suppress(OSError):  # one that cannot go costs nothing but its bytes
                if stat.S_ISREG(os.lstat(Path(folder, name)).st_mode):
                    os.unlink(Path(folder, name))
                    log.info("output folder: removed %s, left by a write that never finished", name)


@contextlib.contextmanager
def output_lock(out_dir: Path) -> Iterator[None]:
    """Hold the output folder's lock for the ``with`` body (not re-entrant: never nest it). A folder
    of the tool's that is a link is refused first (one line, exit 3: see the module docstring)."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    _refuse_linked_tool_folders(Path(out_dir))
    fd = _open_lock(Path(out_dir) / LOCK_NAME)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        # again under the lock: a run may have waited long
        _refuse_linked_tool_folders(Path(out_dir))
        if fcntl is not None:  # held (never without it: another run may be writing)
            _clear_temporaries(Path(out_dir))
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
