"""Exit codes that mean one thing each, and the one ``error:`` line every failure becomes.

=====  ==========================================================================================
code   meaning
=====  ==========================================================================================
0      ok (also ``--dry-run`` and ``--list``)
1      a regression against ``--baseline`` — nothing else exits 1
2      bad input (:class:`~harness.core.errors.UserError`): a flag, config value, data or baseline
       file
3      the environment failed: disk full, permission denied, read-only or missing path, any other
       I/O error, out of memory (:class:`~harness.core.errors.ResourceError`, ``OSError``,
       ``MemoryError``)
4      a bug in sts-bench: the traceback is printed, please report it
5      a plugin method misbehaved (:class:`~harness.core.errors.PluginError`): it raised, exited
       or ended its worker process (``os._exit``, a signal, a crash), failed to allocate memory in
       its own code, or returned vectors or scores of the wrong shape, type or count; the line
       names the plugin and its file, and the other methods' results are written
6      an embeddings endpoint failed (:class:`~harness.core.errors.EndpointError`): unreachable,
       refused the request (key, model) or kept failing after its retries; what it returned is
       cached, and the other methods' results are written
130    interrupted (Ctrl-C); what was finished stays cached
141    the reader of standard output went away (``sts-bench list | head -3``): no message, as
       ``git``
143    terminated (SIGTERM: ``kill``, a CI timeout, a cluster's pre-emption); as for Ctrl-C
=====  ==========================================================================================

Codes 2, 3, 5 and 6 print one line and no traceback; ``--debug`` or ``STS_BENCH_DEBUG=1`` prints the
traceback too, for a bug report (for 5, the plugin's own traceback, chained).
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence

from harness.core.errors import (
    EndpointError,
    PluginError,
    ResourceError,
    UserError,
    is_out_of_memory,
)
from harness.runner.settings.console import describe_os_error

OK = 0
REGRESSION = 1
BAD_INPUT = 2
ENVIRONMENT = 3
BUG = 4
PLUGIN = 5
ENDPOINT = 6
INTERRUPTED = 130
TERMINATED = 143
STDOUT_CLOSED = 141  # 128 + SIGPIPE, what a C tool killed by the broken pipe exits with


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so it unwinds like Ctrl-C: files are closed, the output
    lock released, what was finished stays cached and written."""


@contextlib.contextmanager
def terminate_like_interrupt() -> Iterator[None]:
    """While the body runs, SIGTERM ends it the way Ctrl-C does (message, exit 143, resumable);
    the previous handler is restored after. Only the main thread may set signal handlers."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: object) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


DEBUG_ENV = "STS_BENCH_DEBUG"


def debug_requested(argv: Sequence[str] | None) -> bool:
    """``--debug`` on the command line or ``STS_BENCH_DEBUG`` set to anything but 0/empty."""
    args = sys.argv[1:] if argv is None else argv
    return "--debug" in args or os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")


def classify(err: BaseException) -> tuple[int, str | None]:
    """(exit code, the ``error:`` line) for a failure; the line is None for a bug (traceback
    instead)."""
    if isinstance(err, Terminated):
        return TERMINATED, None
    if isinstance(err, KeyboardInterrupt):
        return INTERRUPTED, None
    if isinstance(err, PluginError):  # before UserError, which it derives from
        return PLUGIN, str(err)
    if isinstance(err, UserError):
        return BAD_INPUT, str(err)
    if isinstance(err, EndpointError):  # before ResourceError, which it derives from
        return ENDPOINT, str(err)
    if isinstance(err, ResourceError):
        return ENVIRONMENT, str(err)
    if is_out_of_memory(err):
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        return ENVIRONMENT, (
            f"out of memory ({first}); lower --batch-size / --max-tokens / --max-length, or use a "
            "machine with more memory"
        )
    if isinstance(err, OSError):
        return ENVIRONMENT, describe_os_error(err)
    return BUG, None


def stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader went away (its write end polls as an error).
    If so, it is pointed at the null device, so that Python's own flush at exit does not print a
    second error. A broken pipe elsewhere (a cluster's socket) stays an I/O error."""
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        closed = any(event & select.POLLERR for _, event in poller.poll(0))
        if closed:
            os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
        return closed
    # no file descriptor (captured), or no poll (Windows)
    except (OSError, ValueError, AttributeError):
        return False


def guarded(body: Callable[[], int], debug: bool = False) -> int:
    """Run ``body`` and turn whatever it raises into one line and its exit code."""
    try:
        return body()
    except BaseException as err:  # every failure must leave with its own exit code
        if isinstance(err, SystemExit):
            raise
        if isinstance(err, BrokenPipeError) and stdout_closed():
            return STDOUT_CLOSED
        code, line = classify(err)
        if code in (INTERRUPTED, TERMINATED):
            what = "terminated (SIGTERM)" if code == TERMINATED else "interrupted"
            print(
                f"\n{what}: vectors encoded so far are cached and result files written so far are "
                "kept; run the same command again to resume",
                file=sys.stderr,
            )
            return code
        if debug or code == BUG:
            traceback.print_exception(err, file=sys.stderr)
        if code == BUG:
            print(
                f"error: internal error, a bug in sts-bench ({type(err).__name__}: "
                f"{str(err)[:200]}); please report it with the traceback above",
                file=sys.stderr,
            )
        else:
            print(f"error: {line}", file=sys.stderr)
        return code
