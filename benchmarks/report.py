"""Shared by the benchmark scripts: print a report and optionally keep it as a file."""

from __future__ import annotations

import os
from pathlib import Path


def load_line(started: tuple[float, float, float]) -> str:
    """The machine's load averages (1/5/15 min) when the run started and now: the machine is shared,
    and a busy one makes 2-thread timings much slower and noisier."""
    now = os.getloadavg()
    return (
        f"load average at start {started[0]:.2f} / {started[1]:.2f} / {started[2]:.2f}, at end "
        f"{now[0]:.2f} / {now[1]:.2f} / {now[2]:.2f} ({os.cpu_count()} cores)"
    )


def emit(lines: list[str], out: str | None) -> None:
    text = "\n".join(lines)
    print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n", encoding="utf-8")
