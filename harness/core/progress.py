"""Progress of a long step (encoding, fitting a flow, a training loop), on a terminal or in a log.

On a terminal a tqdm bar redraws itself in place. Where stderr is not a terminal (output redirected,
a CI log) a bar cannot redraw and tqdm draws nothing, so a cold run would print one ``encode:`` line
and then minutes of silence; there :class:`LineProgress` writes one plain line at most every
:data:`INTERVAL_S` seconds instead::

    encode minilm: 4096/15487 sentences · 310/s · ETA 37 s

The clock and the interval are arguments (and module attributes read at each call), so a test drives
a fake clock instead of sleeping.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO, Any

INTERVAL_S = 10.0  # at most one line per this many seconds in a log
clock: Callable[[], float] = time.monotonic


def duration(seconds: float) -> str:
    """``37 s``, ``4 min 05 s``, ``1 h 02 min``: what an ETA needs, no more.

    >>> duration(36.6), duration(245), duration(3725)
    ('37 s', '4 min 05 s', '1 h 02 min')
    """
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


class LineProgress:
    """A progress bar for a log: ``update``/``set_postfix``/``close`` as tqdm has them, writing
    ``DESC: DONE/TOTAL UNITs · RATE/s · ETA T`` when at least ``interval`` seconds (of ``now``) have
    passed since the last line (or the start), and on ``close`` a last ``done`` line if it wrote any
    (a step shorter than the interval stays silent)."""

    def __init__(
        self,
        total: int,
        desc: str,
        unit: str,
        *,
        write: Callable[[str], None],
        now: Callable[[], float],
        interval: float,
        initial: int = 0,
    ) -> None:
        self.total = total
        self.desc = desc
        self.unit = unit
        self.write = write
        self.now = now
        self.interval = interval
        self.n = self.start_n = initial
        self.started = self.last = now()
        self.postfix = ""
        self.lines = 0

    def _rate(self, at: float) -> float:
        elapsed = at - self.started
        return (self.n - self.start_n) / elapsed if elapsed > 0 else 0.0

    def line(self, at: float) -> str:
        rate = self._rate(at)
        eta = f"ETA {duration((self.total - self.n) / rate)}" if rate > 0 else "ETA unknown"
        extra = f" · {self.postfix}" if self.postfix else ""
        return f"{self.desc}: {self.n}/{self.total} {self.unit}s · {rate:.0f}/s · {eta}{extra}"

    def update(self, n: int = 1) -> None:
        self.n += n
        at = self.now()
        if at - self.last >= self.interval:
            self.last = at
            self.lines += 1
            self.write(self.line(at))

    def set_postfix(self, **values: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def close(self) -> None:
        if self.lines:
            at = self.now()
            self.lines = 0  # close twice (``with`` and ``finally``) writes once
            self.write(
                f"{self.desc}: {self.n}/{self.total} {self.unit}s · {self._rate(at):.0f}/s · done "
                f"in {duration(at - self.started)}"
            )

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Silent:
    """``--no-progress``: a bar that draws nothing."""

    n = 0

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix(self, **values: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def progress_bar(
    total: int,
    desc: str,
    unit: str,
    enabled: bool = True,
    initial: int = 0,
    stream: IO[str] | None = None,
    interval: float | None = None,
    now: Callable[[], float] | None = None,
) -> Any:
    """A bar on ``stream`` (stderr): tqdm on a terminal, :class:`LineProgress` elsewhere, nothing
    when ``enabled`` is false (``--no-progress``). Every caller uses the ``update``/``set_postfix``/
    ``close`` that both have."""
    stream = sys.stderr if stream is None else stream
    if not enabled:
        return _Silent()
    if getattr(stream, "isatty", lambda: False)():
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit=unit, file=stream, leave=False)

    def write(line: str) -> None:
        print(line, file=stream, flush=True)

    return LineProgress(
        total,
        desc,
        unit,
        write=write,
        now=now or clock,
        interval=INTERVAL_S if interval is None else interval,
        initial=initial,
    )
