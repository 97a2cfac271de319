"""Query × candidate cost: a cross-encoder against a sentence encoder (DSE's second question).

For Q queries and C candidates:

* (a) the cross-encoder scores all Q·C pairs, one forward pass per pair;
* (b) the sentence encoder encodes Q + C sentences, then one (Q × d) · (d × C) matrix product;
* (c) the same with the candidates' embeddings already computed (a search index): Q sentences.

Wall times are measured; (a) beyond ``max_pairs`` pairs is extrapolated from the pairs/second of
the largest measured run and marked as such. FLOPs are estimated from the model shapes
(:class:`harness.core.cost_model.ModelShape`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.cost_model import ModelShape
from harness.runner.records.outputs import StepOutput

if TYPE_CHECKING:
    from harness.core.api import Method
    from harness.runner.records.outputs import ReportInputs
    from harness.runner.settings.config import BenchConfig

PairScore = Callable[[list[str], list[str]], np.ndarray]
Encode = Callable[[list[str]], np.ndarray]
Match = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass
class CostRow:
    queries: int
    candidates: int
    cross_seconds: float
    cross_extrapolated: bool
    student_seconds: float
    cached_seconds: float
    cross_gflops: float
    student_gflops: float
    cached_gflops: float

    @property
    def speedup_student(self) -> float:
        return self.cross_seconds / self.student_seconds

    @property
    def speedup_cached(self) -> float:
        return self.cross_seconds / self.cached_seconds


def cosine_matrix(q: np.ndarray, c: np.ndarray) -> np.ndarray:
    qn = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    cn = c / np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-12)
    return qn @ cn.T


def measure(
    pair_score: PairScore,
    encode: Encode,
    queries: list[str],
    pool: list[str],
    sizes: Sequence[int],
    cross_shape: ModelShape,
    student_shape: ModelShape,
    tokens: Callable[[list[str]], list[int]],
    max_pairs: int = 10_000,
    match: Match | None = None,
    match_flops_per_pair: float | None = None,
) -> tuple[list[CostRow], dict[int, tuple]]:
    """Time (a), (b), (c) for every candidate count; also return both score matrices per size
    (only where (a) was measured) so callers can compare the rankings. ``match`` compares query and
    candidate vectors (cosine by default; a pair head evaluates all Q·C pairs, at
    ``match_flops_per_pair`` each)."""
    match = match or cosine_matrix
    rows, matrices = [], {}
    q_tokens = tokens(queries)
    rate: float | None = None
    for size in sizes:
        candidates = pool[:size]
        c_tokens = tokens(candidates)
        pairs = len(queries) * len(candidates)
        # one [CLS]
        cross_flops = cross_shape.forward_flops([a + b - 1 for a in q_tokens for b in c_tokens])
        measured = pairs <= max_pairs or rate is None
        cross_scores = None
        if measured or rate is None:
            left = [q for q in queries for _ in candidates]
            right = [c for _ in queries for c in candidates]
            started = time.perf_counter()
            cross_scores = pair_score(left, right).reshape(len(queries), len(candidates))
            cross_seconds = time.perf_counter() - started
            rate = pairs / cross_seconds
        else:
            cross_seconds = pairs / rate
        started = time.perf_counter()
        student = match(encode(queries), encode(candidates))
        student_seconds = time.perf_counter() - started
        cached_candidates = encode(candidates)  # (c): built beforehand, not timed
        started = time.perf_counter()
        match(encode(queries), cached_candidates)
        cached_seconds = time.perf_counter() - started
        dim = cached_candidates.shape[1]
        matmul = len(queries) * len(candidates) * (match_flops_per_pair or 2.0 * dim)
        q_flops = student_shape.forward_flops(q_tokens)
        rows.append(
            CostRow(
                len(queries),
                len(candidates),
                cross_seconds,
                not measured,
                student_seconds,
                cached_seconds,
                cross_flops / 1e9,
                (q_flops + student_shape.forward_flops(c_tokens) + matmul) / 1e9,
                (q_flops + matmul) / 1e9,
            )
        )
        if cross_scores is not None:
            matrices[size] = (cross_scores, student)
    return rows, matrices


def markdown(rows: list[CostRow], title: str) -> str:
    from tabulate import tabulate

    table = [
        [
            r.queries,
            r.candidates,
            f"{r.cross_seconds:.2f}{' (extrapolated)' if r.cross_extrapolated else ''}",
            f"{r.student_seconds:.2f}",
            f"{r.cached_seconds:.3f}",
            f"{r.speedup_student:.0f}×",
            f"{r.speedup_cached:.0f}×",
            f"{r.cross_gflops:.3g}",
            f"{r.student_gflops:.3g}",
            f"{r.cached_gflops:.3g}",
        ]
        for r in rows
    ]
    headers = [
        "Q",
        "C",
        "(a) cross-encoder s",
        "(b) student s",
        "(c) cached s",
        "(a)/(b)",
        "(a)/(c)",
        "(a) GFLOP",
        "(b) GFLOP",
        "(c) GFLOP",
    ]
    return "\n".join(
        [
            f"# Query × candidate cost: {title}",
            "",
            "(a) cross-encoder over all Q·C pairs; (b) student encodes Q + C sentences and one "
            "matrix product; (c) the same with the candidates' embeddings cached. Wall seconds; "
            "GFLOP estimated from the model shapes (2·P·n + 4·L·n²·H per sequence).",
            "",
            tabulate(table, headers=headers, tablefmt="pipe"),
            "",
        ]
    )


def cost_png(rows: list[CostRow], path: Path, title: str) -> Path:
    from harness.runner.tables.plots import _pyplot, save_figure

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    sizes = [r.candidates for r in rows]
    measured = [r for r in rows if not r.cross_extrapolated]
    ax.loglog(
        [r.candidates for r in measured],
        [r.cross_seconds for r in measured],
        "o-",
        color="#C44E52",
        label="(a) cross-encoder, measured",
    )
    if len(measured) < len(rows):
        tail = [measured[-1], *[r for r in rows if r.cross_extrapolated]]
        ax.loglog(
            [r.candidates for r in tail],
            [r.cross_seconds for r in tail],
            "o--",
            color="#C44E52",
            alpha=0.6,
            label="(a) extrapolated",
        )
    for seconds, style, color, label in (
        ("student_seconds", "s-", "#4C72B0", "(b) student, Q + C encodes"),
        ("cached_seconds", "^-", "#55A868", "(c) student, candidates cached"),
    ):
        ax.loglog(sizes, [getattr(r, seconds) for r in rows], style, color=color, label=label)
    ax.set(xlabel=f"candidates C (Q = {rows[0].queries})", ylabel="seconds", title=title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def rows_as_dicts(rows: list[CostRow]) -> list[dict[str, Any]]:
    return [
        {**asdict(r), "speedup_student": r.speedup_student, "speedup_cached": r.speedup_cached}
        for r in rows
    ]


def cost_for_run(
    methods: list[Method],
    pool: list[str],
    seed: int,
    out_dir: Path,
    queries: int = 100,
    sizes: Sequence[int] = (100, 1000, 10_000),
    max_pairs: int = 10_000,
) -> list[Path]:
    """The cost table for the first method of this run that declares cost subjects (DSE: its teacher
    and itself), timed on fresh compute."""
    import json

    from harness.core.errors import UserError
    from harness.core.hashing import atomic_write_text, strict_json

    subjects = next((s for m in methods if (s := m.cost_subjects()) is not None), None)
    if subjects is None:
        raise UserError(
            "--cost compares a pair scorer with a sentence encoder distilled from it: run it with "
            "--methods cross-encoder dse"
        )
    if len(pool) < 2:
        raise UserError(
            f"--cost needs at least 2 distinct sentences to time, the run's tasks hold {len(pool)}"
        )
    queries = min(queries, len(pool) // 2)  # small tasks: half queries, half candidates
    shuffled = [pool[i] for i in np.random.default_rng(seed).permutation(len(pool))]
    query_texts, candidates = shuffled[:queries], shuffled[queries:]
    usable = [s for s in sizes if s <= len(candidates)] or [len(candidates)]
    rows, _ = measure(
        subjects.pair_score,
        subjects.encode,
        query_texts,
        candidates,
        usable,
        subjects.cross_shape,
        subjects.student_shape,
        subjects.tokens,
        max_pairs,
        subjects.match,
        subjects.match_flops_per_pair,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "cost.md", out_dir / "cost.json"]
    atomic_write_text(paths[0], markdown(rows, subjects.title))
    body = strict_json({"title": subjects.title, "rows": rows_as_dicts(rows)})
    atomic_write_text(paths[1], json.dumps(body, indent=1, allow_nan=False))
    from harness.runner.tables.plot_worker import draw

    paths.append(draw(cost_png, rows, out_dir / "plots" / "cost.png", subjects.title))
    return paths


class Cost:
    """The report step of ``--cost``: timed on fresh compute every time it is asked for (a timing
    memoised would not be a measurement)."""

    name = "cost"

    def enabled(self, cfg: BenchConfig) -> bool:
        return cfg.cost

    def memo_key(self, inputs: ReportInputs) -> None:
        return None

    def write(self, inputs: ReportInputs) -> StepOutput:
        from harness.runner.settings.console import say

        say("cost: timing the pair scorer vs its sentence encoder on fresh compute (no caches)")
        return StepOutput(
            cost_for_run(list(inputs.methods), list(inputs.pool), inputs.cfg.seed, inputs.out_dir)
        )
