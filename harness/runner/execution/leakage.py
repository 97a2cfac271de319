"""Labelled data that overlaps what is scored: said once per run, and recorded with each score.

STS-B was assembled from the STS 2012-2017 pairs, so a model trained on STS-B train (the
cross-encoder, DSE) has seen labelled pairs of STS12-16. Scoring it there is not a held-out score;
the run says so on stderr, each record carries ``protocol.labelled_training`` with the overlap
count (the scored sentences that occur in the training split), and the leaderboard marks the row.
A method trained on the scored task's own labelled split (DSE's teacher and student fine-tuned on
GLUE MRPC train, scored on MRPC dev) is marked the same way: supervised on that task.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from harness.core.errors import UserError
from harness.core.kinds import kind_of

if TYPE_CHECKING:
    from harness.core.api import Method
    from harness.core.data.splits import LoadedTask
    from harness.runner.execution.context import RunContext


def labelled_overlaps(
    methods: list[Method], tasks: list[LoadedTask], ctx: RunContext
) -> dict[tuple[str, str], dict[str, Any]]:
    """{(method name, task name): what labelled data overlaps the scored task, and by how much}."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    sentences: dict[tuple[str, str], set[str] | None] = {}
    for method in methods:
        for task in tasks:
            for data_task, data_split in method.labelled_training_for(task.spec):
                # a pair-classification task's own labelled split (GLUE train, scored on dev);
                # STS-B train scored on STS-B test stays unmarked, the STS papers' protocol
                own = data_task == task.spec.name and kind_of(task).labelled
                if not (own or (data_task == "stsb" and task.spec.in_stsb)):
                    continue
                key = (data_task, data_split)
                if key not in sentences:
                    try:
                        sentences[key] = set(ctx.task_split(data_task, data_split).sentences())
                    except UserError:
                        sentences[key] = None  # that data is not readable here: overlap unknown
                seen = sentences[key]
                scored = task.eval.sentences()
                out[(method.name, task.spec.name)] = {
                    "data": f"{data_task} {data_split}",
                    "built_from_scored_task": True,
                    "overlap_sentences": None
                    if seen is None
                    else sum(1 for s in scored if s in seen),
                    "scored_sentences": len(scored),
                }
    return out


def warn_leakage(leaks: dict[tuple[str, str], dict[str, Any]]) -> None:
    """One stderr line per run naming every affected (method, task) with its overlap count."""
    if not leaks:
        return
    parts = []
    for (method, task), info in leaks.items():
        count = info["overlap_sentences"]
        overlap = (
            f"{count}/{info['scored_sentences']} scored sentences"
            if count is not None
            else "overlap unknown"
        )
        parts.append(f"{method} on {task} ({overlap})")
    stsb = [part for part, info in zip(parts, leaks.values()) if info["data"] == "stsb train"]
    own = [
        f"{part} trained on {info['data']}"
        for part, info in zip(parts, leaks.values())
        if info["data"] != "stsb train"
    ]
    if stsb:
        print(
            "warning: trained on STS-B train, which was assembled from the STS 2012-2017 pairs, "
            f"so these scores are not held out: {'; '.join(stsb)}; the leaderboard marks them ‡",
            file=sys.stderr,
            flush=True,
        )
    if own:
        print(
            "note: trained on the labelled training split of the task they are scored on "
            f"(supervised scores): {'; '.join(own)}; the leaderboard marks them ‡",
            file=sys.stderr,
            flush=True,
        )
