"""The console: progress and notes go to stderr, the leaderboard table to stdout; an OS error as
the one line that says what failed, where, and how to fix it."""

from __future__ import annotations

import errno
import sys


def say(message: str) -> None:
    """One line on stderr, flushed (a redirected CI log sees it at once)."""
    print(message, file=sys.stderr, flush=True)


# What to tell the user for the errno values a run meets in practice; any other OSError is still
# an I/O failure (exit 3), reported with the system's own words.
_ERRNO_HINTS = {
    errno.ENOSPC: (
        "disk full",
        "free some space or point --cache-dir / --output-dir at another disk",
    ),
    errno.EDQUOT: (
        "disk quota exceeded",
        "free some space or point --cache-dir / --output-dir elsewhere",
    ),
    errno.EACCES: (
        "permission denied",
        "make it writable or point --cache-dir / --output-dir elsewhere",
    ),
    errno.EPERM: ("operation not permitted", "check the folder's owner and permissions"),
    errno.EROFS: ("read-only file system", "point --cache-dir / --output-dir at a writable folder"),
    errno.ENOMEM: ("out of memory", "lower --batch-size / --max-tokens or close other programs"),
    errno.EMFILE: ("too many open files", "raise the limit (ulimit -n) and run again"),
    errno.ENAMETOOLONG: ("file name too long", "use a shorter path"),
}


def describe_os_error(err: OSError) -> str:
    """``disk full writing /c/x.npy ([Errno 28] No space left on device); free some space ...``"""
    what, hint = _ERRNO_HINTS.get(
        err.errno or 0, ("I/O error", "check the path and the disk, then run again")
    )
    where = f" at {err.filename}" if err.filename else ""
    reason = err.strerror or str(err) or type(err).__name__
    return f"{what}{where} ({reason}); {hint}"
