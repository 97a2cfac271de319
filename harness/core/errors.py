"""The exception types that reach the user as a single line (no traceback).

``UserError`` is bad input (exit 2); ``ResourceError`` is the machine failing the run: disk full,
permission denied, out of memory (exit 3). ``harness.runner.cli.exits`` maps both, and the ``OSError`` and
``MemoryError`` they stand for, to their exit codes.
"""

from __future__ import annotations

import errno


class UserError(Exception):
    """Bad input: the message says what is wrong, where, and how to fix it, in one line.

    ``run_bench.py`` prints it as ``error: <message>`` and exits with status 2. Anything already
    computed (cached vectors, written result files) stays on disk.
    """


class ResourceError(Exception):
    """The environment failed, not the input: one line naming the resource, where, and what to do.

    ``run_bench.py`` prints it as ``error: <message>`` and exits with status 3.
    """


def did_you_mean(name: str, choices: list[str] | tuple[str, ...]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest choice, or ``""`` if none is close.

    >>> did_you_mean("flw", ["flow", "avg"])
    " (did you mean 'flow'?)"
    """
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""


# What to tell the user for the errno values a run meets in practice; any other OSError is still
# an I/O failure (exit 3), reported with the system's own words.
_ERRNO_HINTS = {
    errno.ENOSPC: ("disk full", "free some space or point --cache-dir / --output-dir at another disk"),
    errno.EDQUOT: ("disk quota exceeded", "free some space or point --cache-dir / --output-dir elsewhere"),
    errno.EACCES: ("permission denied", "make it writable or point --cache-dir / --output-dir elsewhere"),
    errno.EPERM: ("operation not permitted", "check the folder's owner and permissions"),
    errno.EROFS: ("read-only file system", "point --cache-dir / --output-dir at a writable folder"),
    errno.ENOMEM: ("out of memory", "lower --batch-size / --max-tokens or close other programs"),
    errno.EMFILE: ("too many open files", "raise the limit (ulimit -n) and run again"),
    errno.ENAMETOOLONG: ("file name too long", "use a shorter path"),
}


def describe_os_error(err: OSError) -> str:
    """``disk full writing /c/x.npy ([Errno 28] No space left on device); free some space ...``"""
    what, hint = _ERRNO_HINTS.get(err.errno, ("I/O error", "check the path and the disk, then run again"))
    where = f" at {err.filename}" if err.filename else ""
    reason = err.strerror or str(err) or type(err).__name__
    return f"{what}{where} ({reason}); {hint}"
