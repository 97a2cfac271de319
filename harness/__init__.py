"""sts-bench: compare sentence-embedding methods on Semantic Textual Similarity.

Importing this package is cheap on purpose (no torch, no transformers): the heavy libraries are
imported inside the functions that need them, so ``--list``, ``--help`` and warm, fully cached
runs start fast.

>>> import harness
>>> cfg = harness.BenchConfig(methods=("avg",), tasks=("stsb",))   # doctest: +SKIP
>>> outcome = harness.run(cfg)                                       # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.config import BenchConfig
from harness.errors import UserError

if TYPE_CHECKING:
    from harness.scheduler import RunOutcome

__version__ = "0.1.0"
__all__ = ["BenchConfig", "UserError", "__version__", "run"]


def run(cfg: BenchConfig) -> RunOutcome:
    """Plan and execute one benchmark run; see :mod:`harness.scheduler`."""
    from harness.scheduler import run as _run

    return _run(cfg)
