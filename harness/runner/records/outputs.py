"""What a run writes after scoring, as report steps: one small protocol, and one tuple of steps
(:data:`harness.runner.execution.reports.STEPS`) that the run loop and the report memo derive from.

A step says its ``name``, whether it runs for these settings (``enabled``), what its files depend
on (``memo_key``: None when it must run every time, e.g. an append to the history) and how it
writes them (``write``). Every step reads the records and the files earlier steps wrote, never the
run in memory (``--history`` rebuilds the same page). A step with a memo key is run once per key:
a warm re-run copies the files it wrote last time from the cache, keyed on that key and on the
digest of the step's code (:mod:`harness.core.codekeys`), so editing a step rebuilds its files.

Adding an output is one module with a step and one line in ``STEPS``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from harness.core.api import Method
    from harness.core.bootstrap import ResampleMemo
    from harness.runner.records.schema import Record
    from harness.runner.settings.config import BenchConfig


@dataclass(frozen=True)
class ReportInputs:
    """What every step may read: the settings, the output folder, this run's records and every
    intact record of the folder (``runs/``), and for studies that time methods, the run's methods
    and the sentences it scored or fitted on."""

    cfg: BenchConfig
    out_dir: Path
    records: Sequence[Record]
    every_run: Sequence[Record]
    methods: Sequence[Method] = ()
    pool: Sequence[str] = ()
    # The run's resampled scores (RunContext.resamples): the significance table reuses them.
    resamples: ResampleMemo | None = None


@dataclass
class StepOutput:
    """The files a step wrote (under ``out_dir``) and the text, if any, printed after the run."""

    paths: list[Path]
    text: str = ""
    notes: dict[str, Any] = field(default_factory=dict)


class ReportStep(Protocol):
    """One output of a run (see the module docstring)."""

    name: str

    def enabled(self, cfg: BenchConfig) -> bool:
        """Whether this run writes it (``--diagnostics``, ``--cost``...)."""
        ...

    def memo_key(self, inputs: ReportInputs) -> Mapping[str, Any] | None:
        """Everything its files depend on besides its code; None: written on every run."""
        ...

    def write(self, inputs: ReportInputs) -> StepOutput:
        """Write the files under ``inputs.out_dir``."""
        ...
