"""One writer at a time in an output folder.

Runs may share an output folder (two CI jobs, a sweep in a shell loop). Each writes its own
records, but the reports (leaderboards, significance, history, the page) are rebuilt from every
record in the folder; two runs rebuilding them at once could each miss the other's record, or
leave a page older than the leaderboard. :func:`output_lock` takes an exclusive ``flock`` on
``<out>/.sts-bench.lock`` around writing a record and around rebuilding the reports, so those
steps take turns and the last report written holds every finished record. The lock is released
by the kernel when a run dies, so a killed run never blocks the next one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: runs sharing a folder are not serialised there
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".sts-bench.lock"


@contextlib.contextmanager
def output_lock(out_dir: Path) -> Iterator[None]:
    """Hold the output folder's lock for the ``with`` body (not re-entrant: never nest it)."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    fd = os.open(Path(out_dir) / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
