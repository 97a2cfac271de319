"""Where a run's wall time went, stage by stage: one ``stages:`` line at the end of a run, and
``RunOutcome.stage_seconds`` for a program (a benchmark reads either).

A run keeps one :class:`Stages` clock, made current for the run (:func:`timing`), and code deep in
the run times its part with :func:`stage` without the clock being passed down: the plan times the
data it loads, the evaluation each method's fit, a report step the comparisons and the plots it
draws. Stages nest and are exclusive: a stage entered inside another pauses the outer one, so the
stages' seconds add up to the run's wall time, and the line says what share each took.

Worked example: ``plan`` runs 0.3 s, of which ``data`` (inside it) 0.2 s → ``plan 0.1 s · data
0.2 s``, total 0.3 s.

The command line (``run_bench.py``, ``sts-bench run``) also says how long the process took to get
to the run (``start``: interpreter start and imports, :func:`process_age`); a run called from
Python has no such stage, since its process may have been started hours before.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import time
from collections.abc import Iterator

# The stage whose share of the total the line gives: the forward passes, the model's load (and
# torch's import) before the first included.
SHARE_OF = "encode"
_CURRENT: contextvars.ContextVar[Stages | None] = contextvars.ContextVar(
    "sts_bench_stages", default=None
)
_FROM_PROCESS_START: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "sts_bench_from_process_start", default=False
)


class Stages:
    """Exclusive wall seconds per stage, in the order stages were first entered.

    >>> clock = Stages()
    >>> with clock("plan"):
    ...     with clock("data"):
    ...         pass
    >>> list(clock.seconds)
    ['plan', 'data']
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._open: list[list] = []  # [name, started] of each stage entered and not left

    def _charge(self, now: float) -> None:
        """Add the innermost open stage's time since it last (re)started, and restart it."""
        if self._open:
            name, started = self._open[-1]
            self.seconds[name] = self.seconds.get(name, 0.0) + now - started
            self._open[-1][1] = now

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self._charge(time.perf_counter())  # the outer stage pauses
        self.seconds.setdefault(name, 0.0)
        self._open.append([name, time.perf_counter()])
        try:
            yield
        finally:
            self._charge(time.perf_counter())
            self._open.pop()
            if self._open:  # the outer stage resumes now
                self._open[-1][1] = time.perf_counter()

    def add(self, name: str, seconds: float) -> None:
        """A stage timed elsewhere (the process's start)."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def total(self) -> float:
        return sum(self.seconds.values())

    def line(self) -> str:
        """``stages: start 2.1 s · plan 0.1 s · ... · total 164.0 s (encode 85 %)``; stages under
        5 ms are left out (a step memoised in the cache).

        >>> clock = Stages()
        >>> clock.seconds = {"start": 1.0, "plan": 0.5, "encode": 2.5, "page": 0.001}
        >>> clock.line()
        'stages: start 1.0 s · plan 0.5 s · encode 2.5 s · total 4.0 s (encode 62 %)'
        """
        total = self.total()
        shown = [f"{name} {s:.1f} s" for name, s in self.seconds.items() if s >= 0.005]
        share = ""
        if SHARE_OF in self.seconds and total > 0:
            share = f" ({SHARE_OF} {100 * self.seconds[SHARE_OF] / total:.0f} %)"
        return "stages: " + " · ".join([*shown, f"total {total:.1f} s{share}"])


def parse_line(line: str) -> dict[str, float]:
    """The seconds of a ``stages:`` line (:meth:`Stages.line`), ``total`` included; what a
    benchmark reads from a run's console.

    >>> parse_line("stages: plan 0.1 s · fit flow 2.0 s · total 2.1 s (encode 0 %)")
    {'plan': 0.1, 'fit flow': 2.0, 'total': 2.1}
    """
    body = line.split("stages:", 1)[1].split(" (", 1)[0]
    out = {}
    for part in body.split(" · "):
        name, value, _ = part.strip().rsplit(" ", 2)
        out[name] = float(value)
    return out


@contextlib.contextmanager
def timing(clock: Stages) -> Iterator[Stages]:
    """Make ``clock`` the one :func:`stage` charges while the run runs."""
    token = _CURRENT.set(clock)
    try:
        yield clock
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Time the block as stage ``name`` of the current run; nothing outside a run."""
    clock = _CURRENT.get()
    if clock is None:
        yield
        return
    with clock(name):
        yield


def process_age() -> float | None:
    """Seconds since this process started (Linux: its start time in ``/proc/self/stat`` against
    the boot clock); None where that cannot be read."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, in ticks
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


@contextlib.contextmanager
def from_process_start() -> Iterator[None]:
    """The command line's: a run started inside counts the process's age at its own start as the
    ``start`` stage (:func:`start_clock`)."""
    token = _FROM_PROCESS_START.set(True)
    try:
        yield
    finally:
        _FROM_PROCESS_START.reset(token)


def start_clock() -> Stages:
    """A run's clock, with the ``start`` stage when the command line started the run."""
    clock = Stages()
    age = process_age() if _FROM_PROCESS_START.get() else None
    if age is not None:
        clock.add("start", age)
    return clock
