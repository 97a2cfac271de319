"""Shared by the benchmark scripts: print a report and optionally keep it as a file."""

from __future__ import annotations

from pathlib import Path


def emit(lines: list[str], out: str | None) -> None:
    text = "\n".join(lines)
    print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n", encoding="utf-8")
