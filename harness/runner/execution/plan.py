"""The plan of a run: which methods, tasks and fit sets, and the encode jobs that serve them.

The plan groups methods by the backbone view provider they read from and takes, per provider,
the union of every view any of its methods needs and every sentence any task or fit set holds
(deduplicated), so the encode stage runs ONE forward pass per unique sentence per backbone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from harness.core.api import EmbeddingMethod
from harness.core.data.fitsets import FitSet, build_fit_set, check_fit_set_name, splits_needed
from harness.core.data.splits import LoadedTask, SplitData, unique
from harness.core.data.tasks import get_task, load_task
from harness.core.errors import UserError
from harness.core.kinds import KINDS, kind_of
from harness.core.stages import stage
from harness.runner.execution.context import RunContext
from harness.runner.settings.config import BenchConfig

if TYPE_CHECKING:
    from harness.core.api import Method
    from harness.core.encoding import Prompt, View, ViewProvider


@dataclass
class EncodeJob:
    provider: ViewProvider
    views: set[View] = field(default_factory=set)  # read on every sentence of the job
    sentences: list[str] = field(default_factory=list)  # every sentence the job encodes
    # the methods reading it (for the console's why-line)
    methods: list[Method] = field(default_factory=list)
    # Views only some tasks read (per-task prompts), each with those tasks' sentences: a task's
    # prompt is not run on the other tasks' sentences.
    only: dict[View, list[str]] = field(default_factory=dict)

    def parts(self) -> list[tuple[list[str], list[View]]]:
        """(sentences, views) to encode: every sentence under :attr:`views`, then each view of
        :attr:`only` not among them under its tasks' sentences, one part per prompt (a window
        missing one view is encoded whole under its part's views: a changed prompt re-encodes
        nothing else)."""
        out = [(self.sentences, sorted(self.views))] if self.views else []
        groups: dict[tuple[tuple[str, ...], Prompt], list[View]] = {}
        for view, sentences in self.only.items():
            if view not in self.views:
                groups.setdefault((tuple(sentences), view.prompt), []).append(view)
        return out + [(list(sentences), sorted(views)) for (sentences, _), views in groups.items()]

    def all_views(self) -> list[View]:
        """Every view the job encodes."""
        return sorted(self.views | set(self.only))


@dataclass
class Plan:
    methods: list[Method]
    tasks: list[LoadedTask]
    fit_sets: dict[tuple[str, str], FitSet]  # (task, fit-set name) → sentences
    encode_jobs: list[EncodeJob]
    own_model_sentences: dict[str, list[str]]  # method name → sentences it encodes itself (sbert)
    # The fit set int8/uint8 ranges are calibrated on (the run's --fit-set), when one is asked for:
    # its sentences are encoded with the rest, so the calibration reads them from the cache.
    calibration_set: str | None = None
    # A labelled task's threshold split (task name → its pairs), encoded with the scored split
    threshold_splits: dict[str, SplitData] = field(default_factory=dict)
    # Prompt sets whose prompt is chosen per task (method name → one instance per prompt), and the
    # split of each task it is chosen on (task name → its pairs): .prompt_sets
    selections: dict[str, list[Method]] = field(default_factory=dict)
    selection_splits: dict[str, SplitData] = field(default_factory=dict)

    def calibration(self, task: LoadedTask) -> FitSet | None:
        """The calibration sentences of ``task`` (None: no precision asked needs them)."""
        if self.calibration_set is None:
            return None
        return self.fit_sets[(task.spec.name, self.calibration_set)]


def _threshold_split(task: LoadedTask, cfg: BenchConfig) -> list[SplitData]:
    """The split a labelled task's thresholds are chosen on, when loaded: encoded with the scored
    one in the plan's shared pass."""
    names = kind_of(task).extra_splits(task.spec, cfg.pair_thresholds)
    return [task.splits[n] for n in names if n in task.splits and task.splits[n] is not task.eval]


def check_scorable(task: LoadedTask, cfg: BenchConfig) -> None:
    """A task whose score is undefined whatever the method (constant gold, fewer than 3 pairs, or
    such a subset under ``mean``/``wmean``) fails before anything is encoded, unless
    ``--allow-undefined``, when it is scored and recorded as undefined (with one warning)."""
    split, kind = task.eval, kind_of(task)
    score = kind.metric(task.spec.main_score).title
    reason = kind.gold_problem(task.spec, split, cfg.aggregation)
    if not reason:
        return
    where = f"{task.spec.title} {task.spec.eval_split} ({split.origin})"
    if not cfg.allow_undefined:
        raise UserError(
            f"{where}: {score} is undefined on it: {reason}; fix the data, or pass "
            "--allow-undefined to record it as undefined"
        )
    logging.getLogger("sts_bench.plan").warning(
        "%s: %s is undefined on it (%s); recorded as undefined", where, score, reason
    )


def single_subset_aggregation(cfg: BenchConfig, tasks: list[LoadedTask]) -> BenchConfig:
    """``--aggregation mean|wmean`` where every task scored has one subset (STS-B, SICK-R, MTEB's
    copies of STS12-16): there is nothing to average, the score is ``all``'s to the last digit
    (:func:`harness.core.scoring.score_split`), so the run is filed as ``all``, with one warning
    that says so and what would make the setting count.

    Filed as ``all`` rather than as asked because a record's protocol says how its number was
    computed: under ``wmean`` the same numbers would open a second protocol table in every report, a
    duplicate of the ``all`` one that reads as a different protocol. A run that also scores a task
    with subsets keeps the aggregation: there it changes that task's number, and its table is
    one."""
    if (
        cfg.aggregation == "all"
        or not tasks
        or any(len(set(task.eval.subsets or ())) > 1 for task in tasks)
    ):
        return cfg
    from dataclasses import replace

    titles = ", ".join(task.spec.title for task in tasks)
    logging.getLogger("sts_bench.plan").warning(
        "--aggregation %s: %s %s a single subset, where %s equals all; scored and recorded as "
        "aggregation=all (drop --aggregation; it changes only tasks with subsets, e.g. sts12-sts16 "
        "with --source senteval)",
        cfg.aggregation,
        titles,
        "has" if len(tasks) == 1 else "each have",
        cfg.aggregation,
    )
    return replace(cfg, aggregation="all")


def make_plan(cfg: BenchConfig, ctx: RunContext) -> Plan:
    """Build every method and load every task and fit set; group the encode work by backbone."""
    from harness.runner.execution import prompt_sets

    request = cfg.spec_request()
    methods = [
        one
        for method in ctx.build_methods(unique(cfg.methods))
        for one in prompt_sets.expand(method, ctx.registry, request, ctx)
    ]
    selections = prompt_sets.selections(methods)
    specs = [get_task(name, cfg.source) for name in unique(cfg.tasks)]
    calibration_set = (
        cfg.fit_set
        if cfg.calibrates() and any(isinstance(m, EmbeddingMethod) for m in methods)
        else None
    )
    fit_names = unique(
        [m.fit_set_name() for m in methods if m.uses_fit_set]
        + ([calibration_set] if calibration_set is not None else [])
    )
    for name in fit_names:
        check_fit_set_name(name)
    tasks = []
    locations = cfg.locations()
    for spec in specs:
        extra = [split for name in fit_names for split in splits_needed(name, spec)]
        # a labelled task's accuracy / F1 thresholds are chosen on its threshold split
        tuning = list(KINDS[spec.kind].extra_splits(spec, cfg.pair_thresholds))
        chosen_on = prompt_sets.split_names(selections)
        splits = unique([spec.eval_split, *tuning, *extra, *chosen_on])
        with stage("data"):
            loaded = load_task(
                spec,
                cfg.source,
                splits,
                locations=locations,
                lenient_gold=cfg.allow_gold_out_of_range,
            )
        tasks.append(loaded)
    with stage("data"):
        fit_sets = {
            (task.spec.name, name): build_fit_set(name, task, locations)
            for task in tasks
            for name in fit_names
        }
    from harness.core.bootstrap import RUN_BYTES_PER_PAIR, check_fits, check_rounds

    # every method's resampled scores of every task are kept for the paired tests
    check_rounds(cfg.bootstrap, len(tasks) * max(len(methods), 1))
    for task in tasks:
        check_scorable(task, cfg)
        # a task too large to score fails before encoding, counting what the run holds per pair
        check_fits(len(task.eval.gold), cfg.bootstrap, held=RUN_BYTES_PER_PAIR)
    for fit in fit_sets.values():
        distinct = len(set(fit.sentences))
        if distinct < 2:
            raise UserError(
                f"fit set '{fit.name}' ({fit.origin}) holds {distinct} distinct sentence(s); "
                "fitting needs at least 2 different ones (a mean and a spread): use a larger "
                "--fit-set"
            )

    selection_splits = {
        task.spec.name: prompt_sets.selection_split(task, members)
        for members in selections.values()
        for task in tasks
    }
    selection_sentences = unique(
        s for split in selection_splits.values() for s in split.sentences()
    )
    eval_sentences = unique(
        s
        for task in tasks
        for split in (task.eval, *_threshold_split(task, cfg))
        for s in split.sentences()
    )
    jobs: dict[int, EncodeJob] = {}
    own_model: dict[str, list[str]] = {}
    for method in methods:

        def fits(name: str, method: Method = method) -> bool:
            return (method.uses_fit_set and name == method.fit_set_name()) or (
                name == calibration_set and isinstance(method, EmbeddingMethod)
            )

        fit_sentences = [
            s for (_, name), fit in fit_sets.items() if fits(name) for s in fit.sentences
        ]
        chooses = method.prompt_of_set is not None and method.prompt_of_set.select is not None
        needed = unique(eval_sentences + fit_sentences + (selection_sentences if chooses else []))
        views = method.backbone_views()
        if not views:
            own_model[method.name] = needed
            continue
        provider = ctx.views(method.spec)
        job = jobs.setdefault(id(provider), EncodeJob(provider))
        job.methods.append(method)
        by_task = method.views_by_task([task.spec for task in tasks])
        if all(set(by_task[task.spec.name]) == set(views) for task in tasks):
            job.views.update(views)
            job.sentences = unique(job.sentences + needed)
            continue
        for task in tasks:  # per-task views: each over its own task's sentences only
            own = unique(
                [
                    *(
                        s
                        for split in (task.eval, *_threshold_split(task, cfg))
                        for s in split.sentences()
                    ),
                    *(
                        s
                        for (name_of_task, name), fit in fit_sets.items()
                        if name_of_task == task.spec.name and fits(name)
                        for s in fit.sentences
                    ),
                    *(
                        selection_splits[task.spec.name].sentences()
                        if chooses and task.spec.name in selection_splits
                        else ()
                    ),
                ]
            )
            for view in by_task[task.spec.name]:
                job.only[view] = unique(job.only.get(view, []) + own)
            job.sentences = unique(job.sentences + own)
    thresholds = {task.spec.name: split for task in tasks for split in _threshold_split(task, cfg)}
    return Plan(
        methods,
        tasks,
        fit_sets,
        share_across_lengths(list(jobs.values())),
        own_model,
        calibration_set,
        thresholds,
        selections,
        selection_splits,
    )


def share_across_lengths(jobs: list[EncodeJob]) -> list[EncodeJob]:
    """Jobs of one backbone (and settings) that differ only in ``max_length`` share the shortest
    one's pass: each longer job's views join the shortest job for every sentence short enough for
    both (not cut at either length, its vectors are the same: ``ViewProvider.share_shorter``),
    and the longer job keeps only the sentences that are not. A job left with none is dropped. On
    the embedded default, ``sbert`` (MiniLM's ``max_seq_length`` 256) reads ``avg``'s pass
    (``--max-length`` 128): one forward pass per sentence."""
    from dataclasses import replace

    groups: dict[tuple, list[EncodeJob]] = {}
    for job in jobs:
        provider = job.provider
        groups.setdefault((provider.ref, replace(provider.settings, max_length=0)), []).append(job)
    dropped: set[int] = set()
    for group in groups.values():
        group.sort(key=lambda job: job.provider.settings.max_length)
        shortest = group[0]
        for job in group[1:]:
            if not job.views or not job.provider.share_shorter(shortest.provider):
                continue
            fits = np.ones(len(job.sentences), dtype=bool)
            for prompt in dict.fromkeys(view.prompt for view in job.views):
                fits &= job.provider.fits_shorter(job.sentences, prompt)
            shared = [s for s, ok in zip(job.sentences, fits) if ok]
            shortest.views |= job.views
            shortest.sentences = unique(shortest.sentences + shared)
            shortest.methods += [m for m in job.methods if m not in shortest.methods]
            job.sentences = [s for s, ok in zip(job.sentences, fits) if not ok]
            if not job.sentences and not job.only:
                dropped.add(id(job))
    return [job for job in jobs if id(job) not in dropped]
