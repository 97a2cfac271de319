"""A run: plan → encode → evaluate → reports.

:func:`run` settles the settings, checks what can be checked up front (:mod:`.preflight`, the
baseline against the plan's cells), plans (:mod:`.plan`), runs ONE forward pass per unique sentence
per backbone (everything after it — pooling variants, whitening, flow, scoring — reads the cache),
scores every (task, method) into a record written as soon as it is made (:mod:`.evaluate`), then
runs the report steps (:mod:`.reports`) and the gate (:mod:`harness.runner.tables.gate`).

A plugin method is a guest in a worker process of its own (:mod:`methods.wall`): it is built,
asked for its hooks, prepared and scored there, and whatever it does wrong is one ``PluginError``
line (exit 5). A plugin that fails on a (method, task) is left out of it and the run goes on: the
other methods' records and the leaderboards are written, then the error is raised, as a score that
is undefined is (exit 2). An endpoint that fails while a method encodes with it is handled the same
way (``EndpointError``, exit 6).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.data.splits import unique
from harness.core.errors import EndpointError, PluginError
from harness.core.sparse import SPARSE
from harness.core.stages import Stages, stage, start_clock, timing
from harness.runner.execution.context import RunContext
from harness.runner.execution.evaluate import score
from harness.runner.execution.leakage import labelled_overlaps, warn_leakage
from harness.runner.execution.plan import Plan, make_plan, single_subset_aggregation
from harness.runner.execution.plugin_calls import (
    Failure,
    build_methods,
    plugin_failure,
    what_failed,
)
from harness.runner.execution.prompt_sets import choose
from harness.runner.execution.why import why_line
from harness.runner.records.schema import Record, main_value, score_title
from harness.runner.settings.config import BenchConfig
from harness.runner.settings.console import say

if TYPE_CHECKING:
    from harness.runner.execution.export import SentenceVectors
    from methods import Registry


@dataclass
class RunOutcome:
    """What :func:`harness.run` (and :func:`harness.evaluate`) return.

    ``records``: this run's result records (typed, :class:`harness.runner.records.schema.Record`),
    one per (method, task) scored; ``result_paths``: their files under ``runs/``;
    ``leaderboard_paths``: every file the report steps wrote (leaderboards, significance.csv, plots,
    index.html...); ``table``: the leaderboard as printed; ``regressions``: with ``--baseline``, a
    DataFrame of the cells compared (``exit_code`` 1 when one dropped beyond the tolerance);
    ``sentences_forwarded``, ``models_trained``, ``pairs_scored``: what this run computed rather
    than read from the cache (all 0 on a fully warm re-run); ``embedding_dirs``: with
    ``--export-embeddings``, one folder per (method, task, split) (:mod:`.export`);
    ``stage_seconds``: where the run's wall time went, stage by stage (:mod:`.stages`).

    >>> outcome = harness.run(cfg)                          # doctest: +SKIP
    >>> outcome.scores[["method", "task", "spearman"]]      # doctest: +SKIP
    >>> outcome.embeddings("avg", "stsb").vectors.shape     # doctest: +SKIP
    """

    records: list[Record]
    result_paths: list[Path]
    leaderboard_paths: list[Path]
    table: str
    regressions: Any = None  # pandas DataFrame of drops vs --baseline, or None
    exit_code: int = 0
    sentences_forwarded: int = 0
    models_trained: int = 0
    pairs_scored: int = 0
    dry_run: bool = False
    embedding_dirs: list[Path] = field(default_factory=list)
    # wall seconds per stage, exclusive (harness.core.stages): the stages: line
    stage_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def scores(self) -> Any:
        """This run's scores as a pandas DataFrame, one row per (method row, task): method,
        backbone, kind, fit_set, the protocol group, marks (†/‡), task, spearman, pearson, ci_low,
        ci_high, n_pairs, created, undefined (NaN scores where undefined), as in scores.csv."""
        import pandas as pd

        from harness.runner.tables.frames import long_rows

        return pd.DataFrame(long_rows(self.records)[0])

    @property
    def paths(self) -> list[Path]:
        """Every file and folder this run wrote: records, reports, embedding exports."""
        return [*self.result_paths, *self.leaderboard_paths, *self.embedding_dirs]

    def embeddings(self, method: str, task: str, split: str | None = None) -> SentenceVectors:
        """The exported sentences and vectors of ``method`` (its leaderboard label or name) on
        ``task`` (name or title), read back and verified (:func:`.export.read_embeddings`)."""
        from harness.core.errors import UserError
        from harness.runner.execution.export import read_embeddings

        found = []
        for folder in self.embedding_dirs:
            rows = read_embeddings(folder)
            meta = rows.meta
            names = (meta["method"], meta["method_name"])
            tasks = (meta["task"], meta["task_title"].lower())
            if method in names and task.lower() in tasks and split in (None, meta["split"]):
                found.append(rows)
        if len(found) == 1:
            return found[0]
        exported = sorted(
            {f"{folder.parts[-3]} on {folder.parts[-2]}" for folder in self.embedding_dirs}
        )
        if found:
            raise UserError(
                f"embeddings of {method} on {task}: {len(found)} exports match (several backbones "
                "or splits); name the split, or read the folders in outcome.embedding_dirs"
            )
        raise UserError(
            f"no embeddings of {method} on {task} in this run (exported: "
            f"{', '.join(exported) or 'none'}); "
            "pass --export-embeddings DIR (harness.evaluate exports by default); a pair-scoring "
            "method has no sentence vectors"
        )


def encode_stage(plan: Plan, ctx: RunContext) -> dict[str, Failure]:
    """ONE forward pass per unique sentence per backbone, for every view any method reads; then the
    methods with a model of their own encode theirs. Returns the plugin methods whose ``prepare``
    failed, and the methods whose endpoint failed, by name: they are not scored, the others are."""
    for job in plan.encode_jobs:
        say(f"encode: {why_line(plan, job)}")  # what is encoded and which method needs it
        for sentences, views in job.parts():  # one part unless a method's prompt is per task
            job.provider.ensure(sentences, views)
        for prefix, (whole, part, none) in job.provider.shared_prefixes().items():
            say(
                f"encode: prefix {prefix!r} computed once: shared whole by {whole} text(s), in "
                f"part by {part} (tokens merged across its end), not at all by {none} (encoded "
                "whole)"
            )
    failed: dict[str, Failure] = {}
    for method in plan.methods:
        if not method.backbone_views():
            sentences = plan.own_model_sentences[method.name]
            try:
                note = method.describe_encode(sentences)
                if note:  # what encodes it (sbert through sentence-transformers: and why)
                    say(f"encode: {method.label()} (own model): {note}")
                method.prepare(sentences)
            except (PluginError, EndpointError) as err:
                failed[method.name] = err
                say(f"{method.label():>16} · not scored: {what_failed(err)}")
    return failed


def encodes_any(plan: Plan) -> bool:
    """Whether the encode stage has a sentence to encode (a cold or partly cold run, which will
    draw): only such a run starts a plot worker, a fully warm one pays no process start. Asked
    before the encode stage, so whatever the question raises (a view the backbone cannot give) is
    left for the encode stage to raise, in its place."""
    try:
        return any(
            job.provider.store(view).missing(sentences)
            for job in plan.encode_jobs
            for sentences, views in job.parts()
            for view in views
        )
    except Exception:
        return False


def run(cfg: BenchConfig, registry: Registry | None = None) -> RunOutcome:
    """Run ``cfg``: plan, encode, score, report. ``registry``: the methods the run knows beyond the
    built-ins (default: the process registry; ``harness.evaluate`` passes a layer of it)."""
    from harness.core.artifacts import ArtifactStore
    from harness.core.data.hf_places import caches_under, describe
    from harness.runner.execution.preflight import settle

    clock = start_clock()
    # The datasets library and MTEB cache under --cache-dir, not the user's home
    # (core/data/hf_places.py).
    with timing(clock), clock("plan"), caches_under(ArtifactStore(cfg.cache_dir)) as places:
        cfg = settle(cfg)  # duplicate tasks merged, --max-length checked against the backbone
        if cfg.source in ("mteb", "hub") and not cfg.dry_run:
            say(describe(places))
        ctx = RunContext(cfg, registry)
        try:
            with ctx.hub_failures.current():  # hub calls of this run remember their failures there
                return _run(cfg, ctx, clock)
        finally:
            ctx.close()


def _run(cfg: BenchConfig, ctx: RunContext, clock: Stages) -> RunOutcome:
    from harness.runner.execution.preflight import check_cache_writable, preflight

    baseline = preflight(cfg)  # baseline read now (before anything is written), writable folders
    # --history: rebuild history and report pages from disk; like a dry run, nothing runs
    if cfg.history:
        from harness.runner.page.build import history_pages

        pages, text = history_pages(cfg)
        return RunOutcome([], [], pages, text, dry_run=True)
    with clock("plan"):
        build_methods(cfg, ctx)
        plan = make_plan(cfg, ctx)
        # mean/wmean on single-subset tasks only is all: filed as all (one warning), before anything
        # keys on it
        cfg = single_subset_aggregation(cfg, plan.tasks)
        ctx.cfg, ctx.aggregation = cfg, cfg.aggregation
        # a baseline that cannot match this run's cells fails before the compute
        if baseline is not None:
            from harness.runner.tables.gate import check_planned

            check_planned(baseline, planned_cells(plan, cfg), cfg.baseline_partial)
    if cfg.dry_run:
        from harness.runner.execution.dry_run import describe

        return RunOutcome([], [], [], describe(plan, ctx), dry_run=True)
    if cfg.plots and encodes_any(plan):  # a cold run: matplotlib loads in a worker meanwhile
        ctx.start_plot_worker()
    check_cache_writable(cfg)  # every cache subfolder this run may write, before the first sentence
    leaks = labelled_overlaps(plan.methods, plan.tasks, ctx)
    warn_leakage(leaks)
    with clock("encode"):
        failed = encode_stage(plan, ctx) or {}  # or: a test's stand-in returns None
    with clock("score"):  # each method's fit is a stage of its own, inside (evaluate.py)
        records, paths, refused, exported, broken = score_stage(
            plan, cfg, ctx, leaks, clock.seconds["encode"], failed
        )
    table, board = report_stage(plan, cfg, ctx, records)  # a stage per report step (reports.py)
    say(summary(plan, ctx))
    say(clock.line())
    if broken:  # after the other methods' records and the reports: what finished is kept
        # --debug: its traceback
        raise plugin_failure(broken, refused, Path(cfg.output_dir), bool(paths)) from broken[0][2]
    if refused:
        from harness.core.errors import UserError

        raise UserError(
            f"Spearman undefined for {'; '.join(refused)}: not recorded (the other results were "
            f"written to {Path(cfg.output_dir) / 'runs'}); fix the data or the method, or pass "
            "--allow-undefined to record them as undefined, unranked"
        )
    outcome = RunOutcome(
        records,
        paths,
        board,
        table,
        sentences_forwarded=ctx.sentences_forwarded,
        models_trained=ctx.trained,
        pairs_scored=ctx.pairs_scored,
        embedding_dirs=exported,
        stage_seconds=dict(clock.seconds),
    )
    if baseline is not None:
        from harness.runner.tables.frames import long_rows
        from harness.runner.tables.gate import match, verdict

        drops = verdict(match(baseline, long_rows(records)[0], cfg.baseline_partial), cfg.tolerance)
        outcome.regressions = drops
        outcome.exit_code = 1 if drops["regression"].any() else 0
    return outcome


def summary(plan: Plan, ctx: RunContext) -> str:
    """What the run computed and what came from the cache (where the time went: the ``stages:``
    line after it, :mod:`.stages`)."""
    planned = sum(len(job.sentences) for job in plan.encode_jobs)
    encoded = sum(job.provider.forwarded for job in plan.encode_jobs)
    return (
        f"summary: backbone passes {encoded} sentence(s) encoded, {max(planned - encoded, 0)} from "
        "cache; "
        f"other encodes {ctx.sentences_forwarded - encoded}; {ctx.trained} model(s) trained, "
        f"{ctx.pairs_scored} pair(s) scored"
    )


def planned_cells(plan: Plan, cfg: BenchConfig) -> list[dict[str, str]]:
    """The (row, task) cells this plan will score, keyed as the leaderboard keys them
    (:func:`harness.runner.tables.frames.record_keys`), for checking a baseline before the
    compute."""
    protocol = cfg.protocol()
    group = {
        "aggregation": protocol["aggregation"],
        "source": protocol["source"],
        "dtype": protocol["dtype"],
        "max_length": str(protocol["max_length"]),
        "first_last_layers": ",".join(str(x) for x in protocol["first_last_layers"]),
    }
    from harness.core.api import EmbeddingMethod
    from harness.runner.execution.evaluate import extra_splits

    grid = cfg.vector_grid()
    cells = []
    for task in plan.tasks:
        for method in plan.methods:
            if method.name in plan.selections and method is not plan.selections[method.name][0]:
                continue  # a prompt set choosing one prompt per task: one row
            fit = (
                plan.fit_sets.get((task.spec.name, method.fit_set_name()))
                if method.uses_fit_set
                else None
            )
            # an embedding method's row per vector setting (--dims/--precision/--similarity)
            labels = (
                [setting.label(method.label()) for setting in grid]
                if isinstance(method, EmbeddingMethod)
                else [method.label()]
            )
            cells += [
                {
                    "method": label,
                    "backbone": method.spec.backbone,
                    "kind": method.kind,
                    "fit_set": fit.name if fit is not None else "",
                    **group,
                    "metric": task.spec.main_score,
                    "task": task.spec.title,
                    # a labelled task's records hash its threshold split too, unless the method
                    # classifies itself (known once begun): the gate matches those after the run
                    "fingerprint": "" if extra_splits(task, cfg) else task.eval.fingerprint,
                }
                for label in labels
            ]  # a baseline on other data: refused up front
    return cells


def score_stage(
    plan: Plan,
    cfg: BenchConfig,
    ctx: RunContext,
    leaks: dict,
    encode_s: float,
    failed: dict[str, Failure] | None = None,
) -> tuple[list[Record], list[Path], list[str], list[Path], list[tuple[str, str, Failure]]]:
    """Fit and score every (task, method); write each record as it is made (under the output
    folder's lock), so an interrupted run keeps what it finished. A score that is undefined is
    refused (returned, not written) unless ``--allow-undefined``. With ``--export-embeddings``, the
    vectors just scored are written too (:mod:`.export`). A plugin method that fails on a task
    (or whose ``prepare`` failed: ``failed``) is left out of it, the others are scored; returns the
    export folders, then those failures as (label, task title, error)."""
    from harness.runner.execution.export import unique_rows, write_embeddings
    from harness.runner.records.lock import output_lock
    from harness.runner.records.store import write_result

    records: list[Record] = []
    paths: list[Path] = []
    refused: list[str] = []
    exported: list[Path] = []
    broken: list[tuple[str, str, Failure]] = []
    failed = dict(failed or {})
    out = Path(cfg.output_dir)
    for task in plan.tasks:
        for method in plan.methods:
            if method.name in failed:  # its prepare failed: nothing of it to score on any task
                if task is plan.tasks[0]:
                    broken.append((method.label(), "every task", failed[method.name]))
                continue
            fit_set = (
                plan.fit_sets.get((task.spec.name, method.fit_set_name()))
                if method.uses_fit_set
                else None
            )
            choice = None
            if method.name in plan.selections:  # a prompt set scoring one prompt per task
                members = plan.selections[method.name]
                if method is not members[0]:
                    continue  # the set's row is scored once, by the prompt chosen for the task
                try:
                    choice = choose(
                        members, task, plan.selection_splits[task.spec.name], fit_set, cfg
                    )
                except PluginError as err:
                    broken.append((method.label(), task.spec.title, err))
                    said = what_failed(err)
                    say(f"{method.label():>16} · {task.spec.title:<7} not scored: {said}")
                    continue
                method = choice.method
                say(f"{method.label():>16} · {task.spec.title:<7} {choice.selected_on}")
            try:
                leaked = leaks.get((method.name, task.spec.name))
                calibration = plan.calibration(task)
                every_setting = score(method, task, fit_set, cfg, ctx, leaked, calibration)
            except PluginError as err:  # this (method, task) only: the other cells are still scored
                broken.append((method.label(), task.spec.title, err))
                say(f"{method.label():>16} · {task.spec.title:<7} not scored: {what_failed(err)}")
                continue
            for scored in every_setting:
                record = scored.record
                if choice is not None:
                    choice.annotate(record)
                record["timings"]["encode_stage_s"] = round(encode_s, 4)
                if cfg.export_embeddings and scored.left is not None and scored.right is not None:
                    s1, s2 = scored.sentences or (task.eval.s1, task.eval.s2)
                    vectors = unique_rows(s1, s2, scored.left, scored.right)
                    exported.append(
                        write_embeddings(
                            Path(cfg.export_embeddings), record, vectors, Path(cfg.output_dir)
                        )
                    )
                elif cfg.export_embeddings and task is plan.tasks[0] and "vector" not in record:
                    say(
                        f"export: {method.label()} scores pairs as a whole; it has no sentence "
                        "vectors to export (skipped)"
                    )
                elif (
                    cfg.export_embeddings
                    and task is plan.tasks[0]
                    and record["vector"]["precision"] == SPARSE  # a vocabulary wide, densified
                ):
                    say(
                        f"export: {method.label()}'s vectors are sparse; --export-embeddings "
                        "writes dense vectors only (skipped)"
                    )
                label, undefined = record["method"]["label"], record["scores"]["undefined"]
                metric = score_title(record)
                if undefined and not cfg.allow_undefined:
                    refused.append(f"{label} on {task.spec.title} ({undefined})")
                    say(f"{label:>16} · {task.spec.title:<7} {metric} undefined: {undefined}")
                    continue
                with output_lock(out):
                    paths.append(write_result(out / "runs", record))
                records.append(record)
                shown = f"undefined ({undefined})" if undefined else f"{main_value(record):6.2f}"
                say(f"{label:>16} · {task.spec.title:<7} {metric} {shown}")
    return records, paths, refused, exported, broken


def report_stage(
    plan: Plan, cfg: BenchConfig, ctx: RunContext, records: list[Record]
) -> tuple[str, list[Path]]:
    """Every report step (:mod:`harness.runner.execution.reports`), from every record in the output
    folder, under its lock: two runs sharing a folder take turns, so each finished run's record is
    in every report."""
    from harness.runner.execution.reports import report_stage as run_steps
    from harness.runner.records.lock import output_lock
    from harness.runner.records.outputs import ReportInputs
    from harness.runner.records.store import load_results

    out = Path(cfg.output_dir)
    pool = (
        unique(
            [s for task in plan.tasks for s in task.eval.sentences()]
            + [s for fit in plan.fit_sets.values() for s in fit.sentences]
        )
        if cfg.cost
        else []
    )
    with output_lock(out):
        with stage("records"):  # every record of the folder, read back and verified
            every_run = load_results(out / "runs", ctx.resamples)
        inputs = ReportInputs(
            cfg,
            out,
            records,
            every_run,  # this run's resamples: checked, not redrawn
            plan.methods,
            pool,
            ctx.resamples,
        )
        return run_steps(inputs, ctx.artifacts)
