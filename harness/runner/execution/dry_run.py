"""``--dry-run``: the plan in words — encode jobs, fit jobs, score jobs, and what is already cached.

Nothing is encoded, trained or scored; reading the caches' indexes is all it does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.core.encoding import WindowTask
from harness.runner.execution.why import why_line
from methods.trained import TrainedMethod

if TYPE_CHECKING:
    from harness.runner.execution.context import RunContext
    from harness.runner.execution.plan import Plan


def approx_tokens(sentences: list[str]) -> int:
    """A cheap estimate for planning: ~1.3 word pieces per whitespace word, plus [CLS] and [SEP]."""
    return int(sum(len(s.split()) * 1.3 + 2 for s in sentences))


def describe(plan: Plan, ctx: RunContext) -> str:
    cfg = ctx.cfg
    lines = [
        f"plan (dry run): {len(plan.methods)} method(s) × {len(plan.tasks)} task(s); backend "
        f"{cfg.backend}, device {cfg.device}, dtype {cfg.dtype}",
        "",
        "encode jobs (one forward pass per sentence per backbone):",
    ]
    for job in plan.encode_jobs:
        # each view over the sentences it is read on (all of them unless its prompt is per task)
        wanted = {view: sentences for sentences, views in job.parts() for view in views}
        views = sorted(wanted)
        windows = WindowTask.cut(job.sentences, job.provider.settings.window)
        missing = {view: set(job.provider.store(view).missing(wanted[view])) for view in views}
        todo = [s for s in job.sentences if any(s in m for m in missing.values())]
        # a pass per prompt: each reads the prompted text of the sentences its views miss
        prompted = [
            view.prompt.apply(s)
            for view in {v.prompt: v for v in views}.values()
            for s in missing[view]
        ]
        cached = ", ".join(
            f"{v} {len(wanted[v]) - len(missing[v])}/{len(wanted[v])}" for v in views
        )
        lines += [
            f"  {job.provider.ref.name} ({job.provider.impl}): {len(job.sentences)} unique "
            f"sentences in {len(windows)} window(s); cached per view: {cached}",
            f"    why: {why_line(plan, job)}",
            f"    to encode: {len(todo)} sentences (≈{approx_tokens(prompted)} tokens"
            f"{f', {len(prompted)} passes' if len(prompted) != len(todo) else ''})",
        ]
    for method in plan.methods:
        note = (
            method.describe_encode(plan.own_model_sentences[method.name])
            if not method.backbone_views()
            else None
        )
        if note:
            lines.append(f"  {method.label()} (own model): {note}")
    if not plan.encode_jobs:
        lines.append("  (none)")
    lines += ["", "fit jobs:"]
    fit_lines = []
    for method in plan.methods:
        if method.uses_fit_set:
            for task in plan.tasks:
                method.begin_task(task.spec)
                fit_set = plan.fit_sets[(task.spec.name, method.fit_set_name())]
                fit_lines.append(
                    f"  {method.label()} × {task.spec.title} on {fit_set.name} "
                    f"({len(fit_set.sentences)} sentences): {method.describe_fit(fit_set)}"
                )
        elif isinstance(method, TrainedMethod):
            # one line, unless what it trains depends on the task (a teacher per GLUE task)
            per_task = {}
            for task in plan.tasks:
                method.begin_task(task.spec)
                per_task[task.spec.title] = method.describe_fit(None)
            if len(set(per_task.values())) == 1:
                fit_lines.append(f"  {method.label()}: {next(iter(per_task.values()))}")
            else:
                fit_lines += [
                    f"  {method.label()} × {title}: {line}" for title, line in per_task.items()
                ]
    lines += fit_lines or ["  (none)"]
    # a prompt set choosing its prompt per task scores one row (its other prompts only on dev)
    rows = len(plan.methods) - sum(len(members) - 1 for members in plan.selections.values())
    scored = rows * len(plan.tasks)
    lines += [
        "",
        f"score jobs: {scored} ({rows} method(s) × {len(plan.tasks)} task(s)), "
        f"aggregation {cfg.aggregation}, bootstrap {cfg.bootstrap}",
    ]
    return "\n".join(lines)
