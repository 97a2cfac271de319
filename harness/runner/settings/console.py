"""The console: progress and notes go to stderr, the leaderboard table to stdout."""

from __future__ import annotations

import sys


def say(message: str) -> None:
    """One line on stderr, flushed (a redirected CI log sees it at once)."""
    print(message, file=sys.stderr, flush=True)
