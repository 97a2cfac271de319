"""A process that imports matplotlib while the run encodes, and draws the run's PNGs when asked.

Importing matplotlib costs a cold run most of a second (``matplotlib.pyplot`` alone ~0.5 s on two
cores), spent in the report stage, after the encode stage. The encode stage's first second or so
(importing torch, loading the model, tokenising) keeps one core busy and leaves the other idle: a
worker process started right after the plan imports matplotlib on that core, so the main process
never imports it. A thread would not do: the import holds the GIL and slows the encode stage (2.2 s
→ 3.1 s measured), so it is a process, started with ``spawn`` (never ``fork``: the parent may hold
threads, and spawn is what macOS and Windows use anyway).

The child imports at idle priority (Linux's ``SCHED_IDLE``): a 2-thread torch forward waits for
both its threads at every parallel region, so a child taking a core at normal priority, even
niced, cost the cold MiniLM run's encode 0.2-0.3 s of its 1.1 s, as much as the import saved.
At idle priority it only gets the cycles the run leaves. It says :data:`READY` once matplotlib
is imported; a child not ready within :data:`READY_WAIT_S` of the first job (all cores taken by
other work, so it was starved) is given up and the job drawn in-process: never much worse than
having no worker.

The run starts it (:meth:`harness.runner.execution.context.RunContext.start_plot_worker`) only when
it will likely draw on a cold start, and stops it when the run ends. Drawing goes through
:func:`draw`, which sends the job to the worker when one is :func:`current` and otherwise calls the
function in-process, as it does when the worker could not be started, died, hung
(:data:`JOB_TIMEOUT_S`) or its pipe broke: a worker that fails never loses a file or the run, it
only costs the import it was meant to save.

A job is one function of :data:`ALLOWED` (``"module:qualname"``) with its arguments; the child
refuses any other. The arguments and the answer travel by multiprocessing's pickling, between this
process and the child it started itself: inter-process communication with our own child, not
loading a pickle from a cache or results file (which the project never does).

``STS_BENCH_PLOT_WORKER=0`` turns the worker off (the PNGs are then drawn in-process).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.stages import stage

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

log = logging.getLogger(__name__)

# The PNG functions the worker draws: nothing else is run in it, whatever a job names.
ALLOWED = frozenset(
    {
        "harness.runner.tables.plots:leaderboard_png",
        "harness.runner.tables.plots:frontier_png",
        "harness.runner.studies.cost:cost_png",
        "harness.runner.tables.plots:diagnostics_png",
        # history_png checks the PNG's input key in the parent first (a warm run sends no job)
        "harness.runner.history.moves:_draw_history",
    }
)
SWITCH = "STS_BENCH_PLOT_WORKER"  # "0" (or off/false/no): PNGs are drawn in-process
JOB_TIMEOUT_S = 120.0  # a job taking longer: the child is taken as hung, killed, drawn in-process
STOP_WAIT_S = 1.0  # how long a stopped child may take to exit before it is terminated
# How long the first job waits for a child still importing matplotlib before it is drawn
# in-process instead: about what that import costs here, so a starved child costs little more.
READY_WAIT_S = 0.5
# The child imports at idle priority (see the module docstring). Off, it competes with the run
# like any process: what the worker's own tests use, so a busy test machine cannot starve them.
IDLE_PRIORITY = True
READY = ("ready",)  # the child's first message: matplotlib is imported, jobs are answered at once

_CURRENT: ContextVar[PlotWorker | None] = ContextVar("sts_bench_plot_worker", default=None)


class Unavailable(Exception):
    """The worker could not draw the job (not started, dead, hung, broken pipe, arguments that do
    not pickle): the caller draws it in-process."""


def name_of(function: Callable[..., Any]) -> str:
    """``"module:qualname"``, the name a job and :data:`ALLOWED` give a function."""
    return f"{function.__module__}:{function.__qualname__}"


def allowed(function: Callable[..., Any]) -> bool:
    """Whether the worker draws ``function`` (it is on :data:`ALLOWED`)."""
    return name_of(function) in ALLOWED


def check_allowed(function: Callable[..., Any]) -> None:
    """Refuse a function the worker does not draw (ValueError) before it is sent."""
    if not allowed(function):
        raise ValueError(
            f"{name_of(function)} is not a plot function ({', '.join(sorted(ALLOWED))})"
        )


def switched_on(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``STS_BENCH_PLOT_WORKER`` leaves the worker on (the default)."""
    return environ.get(SWITCH, "1").strip().lower() not in ("0", "off", "false", "no")


def current() -> PlotWorker | None:
    """The worker of the run in progress, None outside one or when it has none."""
    return _CURRENT.get()


def draw(function: Callable[..., Path], *args: Any, **kwargs: Any) -> Path:
    """``function(*args, **kwargs)``, drawn by the run's plot worker when it has one (matplotlib
    imported there while the run encoded) and ``function`` is on :data:`ALLOWED`, in-process
    otherwise or when the worker fails: the same file and the same Path either way, and what the
    function raises is raised here. A check that skips drawing (an unchanged input key,
    :func:`harness.runner.tables.plots.drawn_from`) belongs before this call, so a warm run sends
    nothing.

    >>> draw(plots.leaderboard_png, long, out / "plots" / "leaderboard.png")  # doctest: +SKIP
    """
    with stage("plots"):  # the run's stages: line (harness.core.stages)
        return _draw(function, *args, **kwargs)


def _draw(function: Callable[..., Path], *args: Any, **kwargs: Any) -> Path:
    worker = current()
    # A function off the list (a test's stand-in) is called here: only listed ones go to the worker.
    if worker is not None and allowed(function):
        try:
            return worker.draw(function, args, kwargs)
        except Unavailable:
            pass  # logged at debug level by the worker: drawn here instead
    return function(*args, **kwargs)


def wanted() -> bool:
    """Whether a worker would pay off: switched on, and matplotlib not imported here already (then
    drawing in-process costs no import, and a process start would be the only cost)."""
    import sys

    return switched_on() and "matplotlib.pyplot" not in sys.modules


@contextlib.contextmanager
def serving() -> Iterator[PlotWorker | None]:
    """Start a worker when :func:`wanted` (None otherwise, or when it does not start), make it
    :func:`current` inside, and stop it on the way out, whatever happens."""
    with made_current(PlotWorker.start() if wanted() else None) as worker:
        yield worker


@contextlib.contextmanager
def made_current(worker: PlotWorker | None) -> Iterator[PlotWorker | None]:
    """``worker`` is :func:`current` inside; stopped on the way out."""
    token = _CURRENT.set(worker)
    try:
        yield worker
    finally:
        try:
            if worker is not None:
                worker.stop()
        finally:
            with contextlib.suppress(ValueError):  # left in another context: nothing to undo here
                _CURRENT.reset(token)


class PlotWorker:
    """The parent's end: a spawned child (:func:`serve`) and a pipe to it, one job at a time."""

    def __init__(self, process: BaseProcess, conn: Connection) -> None:
        self.process = process
        self.conn = conn
        self.broken = False  # once it failed, every later job is drawn in-process at once
        self.ready = False  # the child said it imported matplotlib (READY)
        self._lock = threading.Lock()

    @classmethod
    def start(cls, idle: bool | None = None) -> PlotWorker | None:
        """A started worker, or None when the process did not start (a debug line). ``idle``: the
        child imports at idle priority (default :data:`IDLE_PRIORITY`)."""
        idle = IDLE_PRIORITY if idle is None else idle
        try:
            import multiprocessing

            context = multiprocessing.get_context("spawn")
            parent, child = context.Pipe(duplex=True)
            process = context.Process(
                target=serve, args=(child, idle), name="sts-bench-plots", daemon=True
            )
            with _no_main_module():
                process.start()
        except Exception as err:  # no process to be had (limits, a frozen interpreter): in-process
            log.debug("plot worker did not start (%s): drawing in-process", err)
            return None
        child.close()  # the child holds its own copy: its death now reads as EOF here
        return cls(process, parent)

    def draw(self, function: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
        """``function(*args, **kwargs)`` run in the child: its result, or the exception it raised
        re-raised here (:func:`rebuilt`). Raises :class:`Unavailable` when the child cannot answer
        (it is then killed, and marked broken)."""
        check_allowed(function)
        answer = self.exchange((function.__module__, function.__qualname__, args, kwargs))
        kind = answer[0]
        if kind == "done":
            return answer[1]
        if kind == "raised":
            raise rebuilt(*answer[1:])
        self._fail(f"answered {kind!r}")
        raise Unavailable(kind)

    def exchange(self, job: tuple, timeout: float | None = None) -> tuple:
        """Send one job, wait for its answer (at most ``timeout`` seconds, default
        :data:`JOB_TIMEOUT_S`). Raises :class:`Unavailable` on anything but an answer."""
        timeout = JOB_TIMEOUT_S if timeout is None else timeout
        with self._lock:
            if self.broken:
                raise Unavailable("broken earlier")
            if not self.ready:
                self._await_ready(READY_WAIT_S)
            try:
                self.conn.send(job)
            except (OSError, ValueError) as err:  # the pipe broke, or the child is gone
                self._fail(f"job not sent: {err}")
                raise Unavailable(str(err)) from err
            except Exception as err:  # arguments that do not pickle: the pipe is still clean
                log.debug("plot job not sent (%s): drawing in-process", err)
                raise Unavailable(str(err)) from err
            try:
                if not self.conn.poll(timeout):
                    self._fail(f"no answer in {timeout:g} s")
                    raise Unavailable("timeout")
                answer = self.conn.recv()
            except (OSError, EOFError) as err:  # the child died: its end of the pipe closed
                self._fail(f"died ({err or type(err).__name__})")
                raise Unavailable(str(err)) from err
            except Exception as err:  # an answer that does not rebuild here
                self._fail(f"answer not read: {err}")
                raise Unavailable(str(err)) from err
            if not isinstance(answer, tuple) or not answer:
                self._fail(f"answered {answer!r}")
                raise Unavailable("malformed answer")
            return answer

    def wait_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the child's matplotlib import; whether it is done
        (a child that failed meanwhile is marked broken)."""
        with self._lock:
            if not self.ready and not self.broken:
                with contextlib.suppress(Unavailable):
                    self._await_ready(timeout)
            return self.ready

    def _await_ready(self, timeout: float) -> None:
        """Read the child's :data:`READY` within ``timeout`` seconds, or give up on it
        (:class:`Unavailable`): the child imports at idle priority, so on a machine whose cores
        are all taken it may not get there soon, and the job is then cheaper drawn here."""
        try:
            if not self.conn.poll(timeout):
                self._fail(f"still importing matplotlib after {timeout:g} s")
                raise Unavailable("not ready")
            message = self.conn.recv()
        except (OSError, EOFError) as err:
            self._fail(f"died before it was ready ({err or type(err).__name__})")
            raise Unavailable(str(err)) from err
        if message != READY:
            self._fail(f"said {message!r} before it was ready")
            raise Unavailable("malformed greeting")
        self.ready = True

    def _fail(self, why: str) -> None:
        """Give up on the child: kill it; every later job is drawn in-process."""
        log.debug("plot worker %s: drawing in-process", why)
        self.broken = True
        with contextlib.suppress(Exception):
            self.process.kill()
        with contextlib.suppress(Exception):
            self.conn.close()

    def stop(self, wait: float = STOP_WAIT_S) -> None:
        """Ask the child to exit, wait ``wait`` seconds, then terminate it; never raises. A child
        not known to be :attr:`ready` (a run that failed before its reports; no job is sent before
        READY is read) is terminated at once: it may still be importing matplotlib, and would only
        read the request after that."""
        with contextlib.suppress(Exception):
            if not self.broken and self.ready:
                self.conn.send(None)
        with contextlib.suppress(Exception):
            self.process.join(wait if self.ready else 0)
            if self.process.is_alive():
                self.process.terminate()
                self.process.join(wait)
        with contextlib.suppress(Exception):
            self.conn.close()
        self.broken = True


@contextlib.contextmanager
def _no_main_module() -> Iterator[None]:
    """Spawn runs the parent's ``__main__`` again in the child (as ``__mp_main__``), so a script
    calling ``harness.run(...)`` without an ``if __name__ == "__main__":`` guard would run its whole
    benchmark again there. ``Process.start()`` reads ``sys.modules["__main__"]`` while it starts
    the child, and only then: an empty module in its place for that moment gives the child nothing
    of the caller's to run (``serve`` needs nothing from it)."""
    import sys
    import types

    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def rebuilt(
    module: str, qualname: str, message: str, error: BaseException | None, tb: str
) -> BaseException:
    """The exception the function raised in the child, for the parent to raise: the same one
    (its type and arguments, unpickled) when it could be sent, else a RuntimeError naming it; the
    child's traceback is added as a note (``--debug`` shows it)."""
    if not isinstance(error, BaseException):
        error = RuntimeError(f"{module}.{qualname}: {message}")
    error.add_note(f"raised in the plot worker process:\n{tb}")
    return error


def serve(conn: Connection, idle: bool = True) -> None:
    """The child: import matplotlib first (the point of the process), at idle priority, say
    :data:`READY`, then answer jobs until told to stop (``None``) or the parent goes away. An
    answer is ``("done", result)``, ``("raised", module, qualname, message, error or None,
    traceback)`` or ``("refused", why)``."""
    import signal

    # Ctrl-C reaches the whole process group: the parent stops the child, which stays quiet.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The import runs while the parent encodes on every core: at idle priority it takes only the
    # cycles the parent leaves (a 2-thread torch forward loses 0.2-0.3 s of a 1.1 s encode to a
    # child at normal priority, even niced). A child that is still importing when the first job
    # comes is not waited for long (READY_WAIT_S).
    if idle:
        with contextlib.suppress(OSError, AttributeError):  # Linux only; elsewhere: normal priority
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    try:
        from harness.runner.tables.plots import _pyplot

        _pyplot()
    except Exception:  # a job will raise the same error, as it would in-process
        pass
    try:
        conn.send(READY)
    except (OSError, ValueError):  # the parent is gone
        return
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if job is None:
            _end_now()
        answer = run_job(job)
        try:
            conn.send(answer)
        except (OSError, ValueError):  # the parent is gone
            return
        except Exception as err:  # a result that does not pickle (a PNG function returns a Path)
            conn.send(
                ("raised", "builtins", "TypeError", f"result does not pickle: {err}", None, "")
            )


def _end_now() -> None:
    """End the child at once, as asked. Its PNGs are written and closed, and it holds nothing else:
    the interpreter's teardown of matplotlib's modules, which the parent's :meth:`PlotWorker.stop`
    would wait for, is skipped (90 ms of a cold run)."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def run_job(job: Any) -> tuple:
    """One job's answer (see :func:`serve`); a function off :data:`ALLOWED` is refused unrun."""
    import importlib
    import traceback

    try:
        module_name, qualname, args, kwargs = job
        name = f"{module_name}:{qualname}"
    except (TypeError, ValueError):
        return ("refused", f"not a job: {job!r}"[:200])
    if name not in ALLOWED:
        return ("refused", f"{name} is not a plot function")
    try:
        function: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            function = getattr(function, part)
        return ("done", function(*args, **kwargs))
    except Exception as err:
        kind = type(err)
        tb = traceback.format_exc()
        return ("raised", kind.__module__, kind.__qualname__, str(err), sendable(err), tb)


def sendable(error: BaseException) -> BaseException | None:
    """``error`` when it survives the trip to the parent (pickled and rebuilt, as the pipe will),
    else None (the parent raises a RuntimeError naming it): an exception whose ``__init__`` takes
    other arguments than its ``args`` pickles but does not rebuild. Our own bytes, in our own
    process: no file is unpickled."""
    import pickle

    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return None
    return error
