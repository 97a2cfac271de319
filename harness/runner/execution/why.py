"""Why an encode job holds the sentences it holds, in one line: scoring 1,379 STS-B test pairs
encodes 15,487 sentences when whitening fits on the ``target`` fit set (every split), and nothing
said so. The encode stage prints it before encoding and ``--dry-run`` prints the same line.

Each sentence of the job is counted once, under the first thing that needs it, in the order the
plan builds them: each task's scored split (the sentences every method of the job scores), then
each labelled task's threshold split, then each task's dev split where a prompt set chooses its
prompt, then each fit set of a method of the job (only the sentences
no earlier line counted, named by the task's splits they come from, or by the fit set's own name
for a corpus). The counts therefore add up to the job's unique sentences.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.core.data.fitsets import TASK_KINDS

if TYPE_CHECKING:
    from harness.runner.execution.plan import EncodeJob, Plan


@dataclass(frozen=True)
class Need:
    """``count`` sentences of ``what`` (``STS-B train+dev``), encoded ``why``
    (``fit set 'target' of whitening``)."""

    what: str
    count: int
    why: str


def needs(plan: Plan, job: EncodeJob) -> list[Need]:
    """The job's sentences by what needs them; the counts add up to ``len(job.sentences)``."""
    counted: set[str] = set()

    def new(sentences: list[str]) -> list[str]:
        fresh = [s for s in dict.fromkeys(sentences) if s not in counted]
        counted.update(fresh)
        return fresh

    scorers = " ".join(dict.fromkeys(method.label() for method in job.methods))
    out = [
        Need(
            f"{task.spec.title} {task.spec.eval_split}",
            len(new(task.eval.sentences())),
            f"scored: {scorers}",
        )
        for task in plan.tasks
    ]
    out += [  # labelled pairs: where accuracy / F1 thresholds are chosen
        Need(
            f"{task.spec.title} {task.spec.threshold_split}",
            len(new(plan.threshold_splits[task.spec.name].sentences())),
            "accuracy / F1 thresholds",
        )
        for task in plan.tasks
        if task.spec.name in plan.threshold_splits
    ]
    choosers = " ".join(  # prompt sets choosing their prompt on each task's dev split
        dict.fromkeys(
            m.label() for m in job.methods if m.prompt_of_set is not None and m.prompt_of_set.select
        )
    )
    titles = {task.spec.name: task.spec.title for task in plan.tasks}
    out += [
        Need(f"{titles[name]} dev", len(new(split.sentences())), f"prompt chosen: {choosers}")
        for name, split in plan.selection_splits.items()
        if choosers
    ]
    fitters: dict[str, list[str]] = {}
    for method in job.methods:
        if method.uses_fit_set:
            fitters.setdefault(method.fit_set_name(), []).append(method.label())
    if plan.calibration_set is not None:  # int8/uint8 ranges: every method of the job reads them
        fitters.setdefault(plan.calibration_set, []).append(
            f"int8/uint8 ranges of {' '.join(method.label() for method in job.methods)}"
        )
    tasks = {task.spec.name: task for task in plan.tasks}
    for (task_name, fit_name), fit in plan.fit_sets.items():
        if fit_name not in fitters:
            continue
        fresh = new(list(fit.sentences))
        if not fresh:  # a corpus shared by every task is counted under the first
            continue
        task, fresh_set = tasks[task_name], set(fresh)
        splits = [
            name
            for name, split in task.splits.items()
            if name != task.spec.eval_split and fresh_set & set(split.sentences())
        ]
        what = (
            f"{task.spec.title} {'+'.join(splits)}"
            if fit_name in TASK_KINDS and splits
            else fit.name
        )
        out.append(
            Need(what, len(fresh), f"fit set '{fit_name}' of {', '.join(fitters[fit_name])}")
        )
    return out


def why_line(plan: Plan, job: EncodeJob) -> str:
    """``minilm — 15487 unique sentences: STS-B test 2758 (scored: avg whitening); STS-B train+dev
    12729 (fit set 'target' of whitening); views mean@1, mean@6``"""
    parts = "; ".join(f"{need.what} {need.count} ({need.why})" for need in needs(plan, job))
    provider = job.provider
    views = job.all_views()
    prompts = dict.fromkeys(view.prompt for view in views if view.prompt)
    notes = [note for prompt in prompts if (note := provider.prefix_note(prompt))]
    shown = [
        f"{view} ({len(job.only[view])} sentences: per-task prompt)"
        if view in job.only and view not in job.views
        else str(view)
        for view in views
    ]
    adapter = provider.ref.adapter
    name = provider.ref.name + (f" + adapter {adapter.path}" if adapter is not None else "")
    return (
        f"{name} — {len(job.sentences)} unique sentences: {parts}; views "
        f"{', '.join(shown)}" + "".join(f"; {n}" for n in notes)
    )
