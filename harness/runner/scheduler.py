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
    record.update(method.annotate(split, similarity))
    if cfg.diagnostics and left is not None:
        from harness.runner.diagnostics import anisotropy, unique_rows

        record["diagnostics"] = anisotropy(unique_rows(split.s1, split.s2, left, right), cfg.seed)
    return record


def run(cfg: BenchConfig) -> RunOutcome:
    ctx = RunContext(cfg)
    try:
        return _run(cfg, ctx)
    finally:
        ctx.close()


def _run(cfg: BenchConfig, ctx: RunContext) -> RunOutcome:
    from harness.runner.mteb_results import write_mteb_result
    from harness.runner.preflight import preflight
    from harness.runner.reports import write_reports
    from harness.runner.results import load_results, write_result

    preflight(cfg)  # baseline file, writable folders: fail now, not after the compute
    if cfg.history:  # --history: rebuild history and report pages from disk; like a dry run, nothing runs
        from harness.runner.pages import history_pages

        pages, text = history_pages(cfg)
        return RunOutcome([], [], pages, text, dry_run=True)
    stages: dict[str, float] = {}
    started = time.perf_counter()
    plan = make_plan(cfg, ctx)
    stages["plan"] = time.perf_counter() - started
    if cfg.dry_run:
        from harness.runner.plan_report import describe

        return RunOutcome([], [], [], describe(plan, ctx), dry_run=True)
    leaks = labelled_overlaps(plan.methods, plan.tasks, ctx)
    warn_leakage(leaks)
    encode_s = stages["encode"] = encode_stage(plan, ctx)
    records, paths = [], []
    runs_dir = Path(cfg.output_dir) / "runs"
    for task in plan.tasks:
        for method in plan.methods:
            fit_set = plan.fit_sets.get((task.spec.name, method.fit_set_name())) if method.uses_fit_set else None
            record = evaluate(method, task, fit_set, cfg, ctx, leaks.get((method.name, task.spec.name)))
            record["timings"]["encode_stage_s"] = round(encode_s, 4)
            records.append(record)
            paths.append(write_result(runs_dir, record))
            write_mteb_result(Path(cfg.output_dir) / "mteb", record)
            say(f"{record['method']['label']:>16} · {task.spec.title:<7} Spearman {record['scores']['spearman']:6.2f}")
    for stage, key in (("fit", "fit_s"), ("score", "score_s")):
        stages[stage] = sum(r["timings"][key] + (r["timings"]["encode_s"] if stage == "score" else 0) for r in records)

    started = time.perf_counter()
    # Leaderboards, scores, significance: copied from the cache when no record's content changed.
    every_run = load_results(runs_dir)
    table, board = write_reports(records, every_run, Path(cfg.output_dir), cfg, ctx.artifacts)
    if cfg.diagnostics:
        from harness.runner.diagnostics import write_diagnostics

        board += write_diagnostics(records, Path(cfg.output_dir))
    if cfg.cost:
        from harness.runner.cost import cost_for_run

        pool = unique([s for task in plan.tasks for s in task.eval.sentences()]
                      + [s for fit in plan.fit_sets.values() for s in fit.sentences])
        say("cost: timing the pair scorer vs its sentence encoder on fresh compute (no caches)")
        board += cost_for_run(plan.methods, pool, cfg.seed, Path(cfg.output_dir))
    from harness.runner.history import append_history
    from harness.runner.pages import write_pages
    from harness.runner.significance import read_back

    append_history(Path(cfg.output_dir), records)
    significance, marks = read_back(Path(cfg.output_dir))
    board += write_pages(cfg, every_run, marks, significance)[0]
    stages["write"] = time.perf_counter() - started
    planned = sum(len(job.sentences) for job in plan.encode_jobs)
    encoded = sum(job.provider.forwarded for job in plan.encode_jobs)
    say(f"summary: backbone passes {encoded} sentence(s) encoded, {max(planned - encoded, 0)} from cache; "
        f"other encodes {ctx.sentences_forwarded - encoded}; {ctx.trained} model(s) trained, "
        f"{ctx.pairs_scored} pair(s) scored; " + " · ".join(f"{k} {v:.1f} s" for k, v in stages.items()))
    outcome = RunOutcome(records, paths, board, table, sentences_forwarded=ctx.sentences_forwarded,
                         models_trained=ctx.trained, pairs_scored=ctx.pairs_scored)
    if cfg.baseline:
        baseline = Path(cfg.baseline)
        if not baseline.is_file():
            from harness.core.errors import UserError

            raise UserError(f"--baseline {cfg.baseline}: no such file (results were written to {runs_dir})")
        from harness.runner.frames import long_frame
        from harness.runner.leaderboard import compare_baseline

        drops, compared = compare_baseline(long_frame(records), baseline, cfg.tolerance)
        outcome.regressions = drops
        if compared == 0:
            say(f"warning: --baseline {baseline}: no (method, task) of this run is in it; nothing compared")
        outcome.exit_code = 1 if drops["regression"].any() else 0
    return outcome
