"""The pages rebuilt after every run, and by ``--history`` alone: ``history.md``,
``plots/history.png`` (:mod:`harness.runner.history_report`) and ``index.html``
(:mod:`harness.runner.report`). Like the leaderboards, they are built from files only:
``runs/*.json`` and ``history.jsonl``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.runner.config import BenchConfig
from harness.runner.history_report import history_report
from harness.runner.report import write_report


def write_pages(cfg: BenchConfig, every_run: list[dict[str, Any]], marks: set,
                significance: list[dict[str, Any]]) -> tuple[list[Path], str]:
    """Write the history report and the report page; returns their paths and the history as text."""
    out_dir = Path(cfg.output_dir)
    history = history_report(out_dir, cfg.bootstrap or 1000, cfg.seed, cfg.plots)
    return [*history.paths, write_report(every_run, marks, significance, out_dir, history)], history.table


def history_pages(cfg: BenchConfig) -> tuple[list[Path], str]:
    """``--history``: rebuild the pages from what is on disk, running nothing."""
    from harness.runner.results import load_results
    from harness.runner.significance import comparisons

    every_run = load_results(Path(cfg.output_dir) / "runs")
    significance, marks = comparisons(every_run, cfg.bootstrap or 1000, cfg.seed)
    return write_pages(cfg, every_run, marks, significance.to_dict("records"))
