"""The files a run builds from result records — leaderboard.csv/.md, scores.csv, significance.csv,
the leaderboard plot and the table printed at the end — memoised in the cache by their inputs.

They are a pure function of the records (what each scored, on which pairs, under which protocol),
the bootstrap settings and the code that writes them. A warm re-run whose records score exactly
what they scored before therefore copies the files it built last time instead of rebuilding them
(pandas and 1000 bootstrap resamples per method). The report page, rebuilt on every run by
:mod:`harness.runner.pages`, reads them back with :mod:`csv` and builds its tables in plain Python,
so such a run imports neither pandas nor torch. The key is the content of every record except
the fields that change on every run without changing any report (``created``, ``timings``, ``env``,
``harness``), taken from the records the reports use (the newest of each row and task, as decided
by ``created``) in an order of their content, the settings, and (as for every artifact folder)
the digest of the code of every module that writes a report and of what they import
(:mod:`harness.core.codekeys`), so editing one of them rebuilds everything. The tables order their
rows by what they are, never by when they were written, so the files are a function of that key.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.hashing import atomic_write_bytes, canonical_json

if TYPE_CHECKING:
    from harness.core.artifacts import ArtifactStore
    from harness.runner.config import BenchConfig

VOLATILE = ("created", "timings", "env", "harness", "checksum")
WRITERS = ("harness.runner.frames", "harness.runner.leaderboard", "harness.runner.significance",
           "harness.runner.plots", "harness.core.significance", "harness.core.bootstrap", "harness.core.scoring",
           __name__)


def _records_digest(records: list[dict[str, Any]]) -> str:
    """The content of the records every report is built from: the newest of each (row, protocol
    group, task), minus the fields that change on every run, in an order that does not depend on
    when they were written (a run that crossed a second boundary once sorted differently)."""
    from harness.runner.frames import newest

    digest = hashlib.sha256()
    for text in sorted(canonical_json({k: v for k, v in rec.items() if k not in VOLATILE}) for rec in newest(records)):
        digest.update(text.encode("utf-8"))
    return digest.hexdigest()


def build_reports(records: list[dict[str, Any]], every_run: list[dict[str, Any]], out_dir: Path,
                  cfg: BenchConfig) -> tuple[str, list[Path]]:
    """Build every report from scratch: this run's table, and the files under ``out_dir``."""
    from harness.runner.frames import long_frame, wide_frame
    from harness.runner.leaderboard import markdown, write_leaderboard
    from harness.runner.significance import comparisons, write_significance

    table = markdown(wide_frame(long_frame(records)))
    significance, marks = comparisons(every_run, cfg.bootstrap or 1000, cfg.seed)
    board = write_leaderboard(long_frame(every_run), out_dir, plots=cfg.plots, marks=marks)
    board.append(write_significance(significance, out_dir))
    return table, board


def write_reports(records: list[dict[str, Any]], every_run: list[dict[str, Any]], out_dir: Path,
                  cfg: BenchConfig, artifacts: ArtifactStore) -> tuple[str, list[Path]]:
    """:func:`build_reports`, or the same files copied from the cache when their inputs are unchanged."""
    key = {"this_run": _records_digest(records), "every_run": _records_digest(every_run), "plots": cfg.plots,
           "bootstrap": cfg.bootstrap or 1000, "seed": cfg.seed}
    folder = artifacts.folder("reports", key, code=WRITERS)
    if folder.complete():
        info = folder.meta()["info"]
        paths = []
        for index, name in enumerate(info["files"]):
            atomic_write_bytes(out_dir / name, folder.path(f"file-{index}").read_bytes())
            paths.append(out_dir / name)
        return info["table"], paths
    table, board = build_reports(records, every_run, out_dir, cfg)
    names = [str(path.relative_to(out_dir)) for path in board]
    folder.commit({f"file-{index}": path.read_bytes() for index, path in enumerate(board)},
                  {"files": names, "table": table})
    return table, board
