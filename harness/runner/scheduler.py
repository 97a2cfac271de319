"""Execute a plan (:mod:`harness.runner.plan`): encode once, fit, score, write results and leaderboards.

The encode stage runs ONE forward pass per unique sentence per backbone; everything after it
(pooling variants, whitening, scoring) reads the cache.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.api import PairScoringMethod
from harness.core.data.splits import LoadedTask, unique
from harness.runner.config import BenchConfig
from harness.runner.context import RunContext
from harness.runner.leakage import labelled_overlaps, warn_leakage
from harness.runner.plan import Plan, make_plan

if TYPE_CHECKING:
    from harness.core.api import Method
    from harness.core.data.fitsets import FitSet


def say(message: str) -> None:
    """Progress and notes go to stderr; stdout carries the leaderboard table only."""
    print(message, file=sys.stderr, flush=True)


@dataclass
class RunOutcome:
    records: list[dict[str, Any]]
    result_paths: list[Path]
    leaderboard_paths: list[Path]
    table: str
    regressions: Any = None  # pandas DataFrame of drops vs --baseline, or None
    exit_code: int = 0
    sentences_forwarded: int = 0
    models_trained: int = 0
    pairs_scored: int = 0
    dry_run: bool = False


def encode_stage(plan: Plan, ctx: RunContext) -> float:
    started = time.perf_counter()
    for job in plan.encode_jobs:
        say(f"encode: {job.provider.ref.name} — {len(job.sentences)} unique sentences, views "
            f"{', '.join(str(v) for v in sorted(job.views))}")
        job.provider.ensure(job.sentences, sorted(job.views))
    for method in plan.methods:
        if not method.backbone_views():
            method.prepare(plan.own_model_sentences[method.name])
    return time.perf_counter() - started


def evaluate(method: Method, task: LoadedTask, fit_set: FitSet | None, cfg: BenchConfig, ctx: RunContext,
             leakage: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fit (if the method fits), encode both sides, score; return the result record."""
    from harness.core.scoring import cosine_rows, score_split
    from harness.runner.record_schema import strict
    from harness.runner.records import build_record

    t0 = time.perf_counter()
    if method.uses_fit_set and fit_set is not None:
        method.fit(fit_set)
    t1 = time.perf_counter()
    split = task.eval
    left = right = None
    n_zero = 0
    if isinstance(method, PairScoringMethod):
        similarity = method.score_pairs(split.s1, split.s2)
    else:
        left, right = method.encode(split.s1), method.encode(split.s2)
        similarity, n_zero = cosine_rows(left, right)
        if n_zero:
            say(f"warning: {method.label()} on {task.spec.title}: {n_zero} pair(s) with a zero vector; "
                "their cosine is set to 0")
    t2 = time.perf_counter()
    scores = score_split(similarity, split.gold, split.subsets, cfg.aggregation, cfg.bootstrap, cfg.seed, n_zero)
    t3 = time.perf_counter()
    timings = {"fit_s": round(t1 - t0, 4), "encode_s": round(t2 - t1, 4), "score_s": round(t3 - t2, 4)}
    record = build_record(method, task, scores, cfg, ctx, timings, similarity, fit_set, leakage)
    record.update(strict(method.annotate(split, similarity)))
    if cfg.diagnostics and left is not None:
        from harness.runner.diagnostics import anisotropy, unique_rows

        record["diagnostics"] = strict(anisotropy(unique_rows(split.s1, split.s2, left, right), cfg.seed))
    return record


def run(cfg: BenchConfig) -> RunOutcome:
    from harness.runner.preflight import settle

    cfg = settle(cfg)  # duplicate tasks merged, --max-length checked against the backbone
    ctx = RunContext(cfg)
    try:
        return _run(cfg, ctx)
    finally:
        ctx.close()


def _run(cfg: BenchConfig, ctx: RunContext) -> RunOutcome:
    from harness.runner.preflight import preflight

    baseline = preflight(cfg)  # baseline read now (before anything is written), writable folders
    if cfg.history:  # --history: rebuild history and report pages from disk; like a dry run, nothing runs
        from harness.runner.pages import history_pages

        pages, text = history_pages(cfg)
        return RunOutcome([], [], pages, text, dry_run=True)
    stages: dict[str, float] = {}
    started = time.perf_counter()
    plan = make_plan(cfg, ctx)
    if baseline is not None:  # a baseline that cannot match this run's rows fails before the compute
        from harness.runner.gate import check_planned

        check_planned(baseline, planned_cells(plan, cfg), cfg.baseline_partial)
    stages["plan"] = time.perf_counter() - started
    if cfg.dry_run:
        from harness.runner.plan_report import describe

        return RunOutcome([], [], [], describe(plan, ctx), dry_run=True)
    from harness.runner.preflight import check_cache_writable

    check_cache_writable(cfg)  # every cache subfolder this run may write, before the first sentence
    leaks = labelled_overlaps(plan.methods, plan.tasks, ctx)
    warn_leakage(leaks)
    encode_s = stages["encode"] = encode_stage(plan, ctx)
    records, paths, refused = score_stage(plan, cfg, ctx, leaks, encode_s)
    for stage, key in (("fit", "fit_s"), ("score", "score_s")):
        stages[stage] = sum(r["timings"][key] + (r["timings"]["encode_s"] if stage == "score" else 0) for r in records)
    started = time.perf_counter()
    table, board = report_stage(plan, cfg, ctx, records)
    stages["write"] = time.perf_counter() - started
    planned = sum(len(job.sentences) for job in plan.encode_jobs)
    encoded = sum(job.provider.forwarded for job in plan.encode_jobs)
    say(f"summary: backbone passes {encoded} sentence(s) encoded, {max(planned - encoded, 0)} from cache; "
        f"other encodes {ctx.sentences_forwarded - encoded}; {ctx.trained} model(s) trained, "
        f"{ctx.pairs_scored} pair(s) scored; " + " · ".join(f"{k} {v:.1f} s" for k, v in stages.items()))
    if refused:
        from harness.core.errors import UserError

        raise UserError(f"Spearman undefined for {'; '.join(refused)}: not recorded (the other results were "
                        f"written to {Path(cfg.output_dir) / 'runs'}); fix the data or the method, or pass "
                        "--allow-undefined to record them as undefined, unranked")
    outcome = RunOutcome(records, paths, board, table, sentences_forwarded=ctx.sentences_forwarded,
                         models_trained=ctx.trained, pairs_scored=ctx.pairs_scored)
    if baseline is not None:
        from harness.runner.frames import long_rows
        from harness.runner.gate import match, verdict

        drops = verdict(match(baseline, long_rows(records)[0], cfg.baseline_partial), cfg.tolerance)
        outcome.regressions = drops
        outcome.exit_code = 1 if drops["regression"].any() else 0
    return outcome


def planned_cells(plan: Plan, cfg: BenchConfig) -> list[dict[str, str]]:
    """The (row, task) cells this plan will score, keyed as the leaderboard keys them
    (:func:`harness.runner.frames.record_keys`), for checking a baseline before the compute."""
    protocol = cfg.protocol()
    group = {"aggregation": protocol["aggregation"], "source": protocol["source"], "dtype": protocol["dtype"],
             "max_length": str(protocol["max_length"]),
             "first_last_layers": ",".join(str(x) for x in protocol["first_last_layers"])}
    cells = []
    for task in plan.tasks:
        for method in plan.methods:
            fit = plan.fit_sets.get((task.spec.name, method.fit_set_name())) if method.uses_fit_set else None
            cells.append({"method": method.label(), "backbone": method.spec.backbone, "kind": method.kind,
                          "fit_set": fit.name if fit is not None else "", **group, "task": task.spec.title})
    return cells


def score_stage(plan: Plan, cfg: BenchConfig, ctx: RunContext, leaks: dict, encode_s: float
                ) -> tuple[list[dict[str, Any]], list[Path], list[str]]:
    """Fit and score every (task, method); write each record as it is made (under the output
    folder's lock), so an interrupted run keeps what it finished. A score that is undefined is
    refused (returned, not written) unless ``--allow-undefined``."""
    from harness.runner.mteb_results import write_mteb_result
    from harness.runner.outlock import output_lock
    from harness.runner.results import write_result

    records, paths, refused = [], [], []
    out = Path(cfg.output_dir)
    for task in plan.tasks:
        for method in plan.methods:
            fit_set = plan.fit_sets.get((task.spec.name, method.fit_set_name())) if method.uses_fit_set else None
            record = evaluate(method, task, fit_set, cfg, ctx, leaks.get((method.name, task.spec.name)))
            record["timings"]["encode_stage_s"] = round(encode_s, 4)
            label, undefined = record["method"]["label"], record["scores"]["undefined"]
            if undefined and not cfg.allow_undefined:
                refused.append(f"{label} on {task.spec.title} ({undefined})")
                say(f"{label:>16} · {task.spec.title:<7} Spearman undefined: {undefined}")
                continue
            with output_lock(out):
                paths.append(write_result(out / "runs", record))
                write_mteb_result(out / "mteb", record)
            records.append(record)
            shown = f"undefined ({undefined})" if undefined else f"{record['scores']['spearman']:6.2f}"
            say(f"{label:>16} · {task.spec.title:<7} Spearman {shown}")
    return records, paths, refused


def report_stage(plan: Plan, cfg: BenchConfig, ctx: RunContext, records: list[dict[str, Any]]
                 ) -> tuple[str, list[Path]]:
    """Every report, rebuilt from every record in the output folder, under its lock: two runs
    sharing a folder take turns, so each finished run's record is in every report."""
    from harness.runner.history import append_history
    from harness.runner.outlock import output_lock
    from harness.runner.pages import write_pages
    from harness.runner.reports import write_reports
    from harness.runner.results import load_results
    from harness.runner.significance import read_back

    out = Path(cfg.output_dir)
    with output_lock(out):
        # Leaderboards, scores, significance: copied from the cache when no record's content changed.
        every_run = load_results(out / "runs")
        table, board = write_reports(records, every_run, out, cfg, ctx.artifacts)
        if cfg.diagnostics:
            from harness.runner.diagnostics import write_diagnostics

            board += write_diagnostics(records, out)
        if cfg.cost:
            from harness.runner.cost import cost_for_run

            pool = unique([s for task in plan.tasks for s in task.eval.sentences()]
                          + [s for fit in plan.fit_sets.values() for s in fit.sentences])
            say("cost: timing the pair scorer vs its sentence encoder on fresh compute (no caches)")
            board += cost_for_run(plan.methods, pool, cfg.seed, out)
        append_history(out, records)
        significance, marks = read_back(out)
        board += write_pages(cfg, every_run, marks, significance)[0]
    return table, board
