"""The exception types that reach the user as a single line (no traceback).

``UserError`` is bad input (exit 2); ``ResourceError`` is the machine failing the run: disk full,
permission denied, out of memory (exit 3); ``PluginError`` is a method from outside the repo
misbehaving while the run calls it (exit 5); ``EndpointError`` is a remote embeddings endpoint
failing: unreachable, refusing the key, or still failing after its retries (exit 6).
``harness.runner.cli.exits`` maps them, and the ``OSError`` and ``MemoryError`` they stand for, to
their exit codes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar


class UserError(Exception):
    """Bad input: the message says what is wrong, where, and how to fix it, in one line.

    ``run_bench.py`` prints it as ``error: <message>`` and exits with status 2. Anything already
    computed (cached vectors, written result files) stays on disk.
    """


class ResourceError(Exception):
    """The environment failed, not the input: one line naming the resource, where, and what to do.

    ``run_bench.py`` prints it as ``error: <message>`` and exits with status 3.
    """


class EndpointError(ResourceError):
    """An embeddings endpoint (an HTTP service the run does not control) failed the run: it could
    not be reached, it refused the request (a missing or wrong key, an unknown model) or it kept
    failing after the bounded retries. One line naming the endpoint and model (never the key),
    what it answered and what to do; exit 6, so a CI job tells a service's outage from bad input.
    The vectors it returned before failing stay cached.
    """


class PluginError(UserError):
    """A plugin method (a method class that is not built in, :func:`methods.plugin_origin`) did
    something a method must not while the run called it: raised, exited, or returned vectors or
    scores of the wrong shape, type or count. One line, ``plugin method 'NAME' (path/to/file.py):
    what it did; how to fix it``, exit 5.

    A subclass of :class:`UserError` so that a Python caller's ``except UserError`` still holds it
    (the plugin is the user's code); the CLI tells the two apart by exit code.
    """


def did_you_mean(name: str, choices: list[str] | tuple[str, ...]) -> str:
    """Return ``" (did you mean 'x'?)"`` for the closest choice, or ``""`` if none is close.

    >>> did_you_mean("flw", ["flow", "avg"])
    " (did you mean 'flow'?)"
    """
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean '{close[0]}'?)" if close else ""


_OOM_WORDS = ("out of memory", "can't allocate memory", "cannot allocate memory")


def is_out_of_memory(err: BaseException) -> bool:
    """MemoryError (numpy's too), torch's CUDA OOM, or the RuntimeError torch's CPU allocator
    raises: the exit code 3 of the machine, or the plugin's fault (methods/guests.py)."""
    if isinstance(err, MemoryError) or type(err).__name__ == "OutOfMemoryError":
        return True
    return isinstance(err, RuntimeError) and any(w in str(err).lower() for w in _OOM_WORDS)


# The Python spelling of each command-line flag, while a Python API call is running
# (:func:`spelled`).
_SPELLINGS: ContextVar[Mapping[str, str] | None] = ContextVar("sts_bench_spellings", default=None)


def flag(name: str, value: str | None = None) -> str:
    """How the user passes the setting whose command-line flag is ``name`` (with ``value``): the
    flag itself, or inside :func:`spelled` (a Python API call) the argument that API takes, so an
    error tells a Python caller what to change in their call rather than on a command line.

    >>> flag("--backbone", "/path/to/model")
    '--backbone /path/to/model'
    >>> with spelled({"--backbone": "backbone"}):
    ...     flag("--backbone", "/path/to/model")
    "backbone='/path/to/model'"
    """
    python = (_SPELLINGS.get() or {}).get(name)
    if python is None:
        return name if value is None else f"{name} {value}"
    return python if value is None else f"{python}={value!r}"


@contextlib.contextmanager
def spelled(names: Mapping[str, str]) -> Iterator[None]:
    """Inside: :func:`flag` names each flag of ``names`` by its Python spelling (``{"--backbone":
    "backbone"}``). A context variable, so threads and nested calls keep their own."""
    token = _SPELLINGS.set({**(_SPELLINGS.get() or {}), **names})
    try:
        yield
    finally:
        _SPELLINGS.reset(token)
