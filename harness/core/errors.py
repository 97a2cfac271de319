"""The exception types that reach the user as a single line (no traceback).

``UserError`` is bad input (exit 2); ``ResourceError`` is the machine failing the run: disk full,
permission denied, out of memory (exit 3). ``harness.runner.cli.exits`` maps both, and the ``OSError`` and
``MemoryError`` they stand for, to their exit codes.
"""

from __future__ import annotations


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
