"""The report stage: every step of :data:`STEPS` (:mod:`harness.runner.records.outputs`), run in
order under the output folder's lock, each memoised in the cache when it has a memo key.

The memo is derived from the steps, not kept beside them: a step's key and the digest of its
module's code (and of what it imports) name its cache folder (``reports/<hash>/``), which holds the
files it wrote and its console text. A warm re-run whose records score exactly what they scored
before copies the leaderboards instead of rebuilding them (pandas and 1000 bootstrap resamples per
method): such a run imports neither pandas nor torch (``tests/test_warm_path.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.hashing import atomic_write_bytes
from harness.core.stages import stage
from harness.runner.history.log import HistoryLog
from harness.runner.page.build import Page
from harness.runner.records.mteb_files import MtebFiles
from harness.runner.records.outputs import ReportInputs, ReportStep, StepOutput
from harness.runner.studies.cost import Cost
from harness.runner.studies.diagnostics import Diagnostics
from harness.runner.tables.leaderboard import Leaderboards
from harness.runner.tables.prompt_spread import PromptSpread

if TYPE_CHECKING:
    from harness.core.artifacts import ArtifactStore

# In order: the page reads what the leaderboards and the history wrote.
STEPS: tuple[ReportStep, ...] = (
    Leaderboards(),
    PromptSpread(),
    MtebFiles(),
    Diagnostics(),
    Cost(),
    HistoryLog(),
    Page(),
)


def run_step(step: ReportStep, inputs: ReportInputs, artifacts: ArtifactStore) -> StepOutput:
    """Write one step's files, or copy them from its memo when its key and code are unchanged."""
    key = step.memo_key(inputs)
    if key is None:
        return step.write(inputs)
    folder = artifacts.folder("reports", {"step": step.name, **key}, code=(type(step).__module__,))
    out = inputs.out_dir
    if folder.complete():  # every file checked against its sha256
        info = folder.meta()["info"]
        paths = []
        for index, name in enumerate(info["files"]):
            atomic_write_bytes(out / name, folder.path(f"file-{index}").read_bytes())
            paths.append(out / name)
        return StepOutput(paths, info["text"])
    written = step.write(inputs)
    names = [str(path.relative_to(out)) for path in written.paths]
    folder.commit(
        {f"file-{index}": path.read_bytes() for index, path in enumerate(written.paths)},
        {"files": names, "text": written.text},
    )
    return written


def report_stage(
    inputs: ReportInputs, artifacts: ArtifactStore, steps: tuple[ReportStep, ...] = STEPS
) -> tuple[str, list[Path]]:
    """Every enabled step; returns what they print, in order (the leaderboard, then a prompt set's
    spread), and the files written. The caller holds the output folder's lock
    (:mod:`harness.runner.records.lock`)."""
    texts, paths = [], []
    for step in steps:
        if step.enabled(inputs.cfg):
            with stage(step.name):  # the run's stages: line (harness.core.stages)
                written = run_step(step, inputs, artifacts)
            texts += [written.text] if written.text else []
            paths += written.paths
    return "\n".join(texts), paths
