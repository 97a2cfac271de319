"""The pages rebuilt after every run, and by ``--history`` alone: ``history.md``,
``plots/history.png`` (:mod:`harness.runner.history.moves`) and ``index.html``
(:mod:`harness.runner.page.html`). Like the leaderboards, they are built from files only:
``runs/*.json`` and ``history.jsonl``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.runner.history.moves import history_report
from harness.runner.page.html import write_report
from harness.runner.records.outputs import StepOutput
from harness.runner.settings.config import BenchConfig

if TYPE_CHECKING:
    from harness.runner.records.outputs import ReportInputs
    from harness.runner.records.schema import Record


def write_pages(
    cfg: BenchConfig,
    every_run: Sequence[Record],
    marks: set,
    significance: list[dict[str, Any]],
    ranks: dict[tuple, dict[str, float]] | None = None,
) -> tuple[list[Path], str]:
    """Write the history report and the report page; returns their paths and the history as text.
    ``ranks``: each row's rank and Avg. interval (leaderboard.csv's)."""
    out_dir = Path(cfg.output_dir)
    history = history_report(out_dir, cfg.bootstrap or 1000, cfg.seed, cfg.plots)
    return [
        *history.paths,
        write_report(every_run, marks, significance, out_dir, history, ranks),
    ], history.table


def history_pages(cfg: BenchConfig) -> tuple[list[Path], str]:
    """``--history``: rebuild the pages from what is on disk, running nothing. Under the output
    folder's lock, like a run's report stage: a run finishing meanwhile does not interleave its
    pages with these, and a folder of the tool's that is a link is refused before anything is read
    (:mod:`harness.runner.records.lock`)."""
    from harness.runner.records.lock import output_lock
    from harness.runner.records.store import load_results
    from harness.runner.tables.comparisons import compare

    out = Path(cfg.output_dir)
    with output_lock(out):
        every_run = load_results(out / "runs")
        significance, marks, ranks = compare(every_run, cfg.bootstrap or 1000, cfg.seed)
        return write_pages(cfg, every_run, marks, significance, ranks)


class Page:
    """The report step of the pages: history.md, plots/history.png and index.html, from the files in
    the folder (the records, history.jsonl, and the significance.csv and leaderboard.csv the
    leaderboards step wrote). Rebuilt on every run: it shows when it was built."""

    name = "page"

    def enabled(self, cfg: BenchConfig) -> bool:
        return True

    def memo_key(self, inputs: ReportInputs) -> None:
        return None

    def write(self, inputs: ReportInputs) -> StepOutput:
        from harness.runner.tables.comparisons import read_back, read_ranks

        significance, marks = read_back(inputs.out_dir)
        ranks = read_ranks(inputs.out_dir)
        paths, history = write_pages(inputs.cfg, inputs.every_run, marks, significance, ranks)
        return StepOutput(paths, notes={"history": history})
