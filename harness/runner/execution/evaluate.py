"""Score one (method, task): fit if the method fits, encode both sides or score the pairs, score
under the run's protocol, and assemble the result record (its schema:
:mod:`harness.runner.records.schema`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from harness.core.api import EmbeddingMethod, PairScoringMethod
from harness.runner.records.schema import RESULT_SCHEMA_VERSION, Record, strict
from harness.runner.records.store import environment, git_sha, now_iso
from harness.runner.settings.console import say

if TYPE_CHECKING:
    from harness.core.api import Method
    from harness.core.data.fitsets import FitSet
    from harness.core.data.tasks import LoadedTask
    from harness.core.scoring import TaskScores
    from harness.runner.execution.context import RunContext
    from harness.runner.settings.config import BenchConfig


def backbone_record(method: Method, ctx: RunContext) -> dict[str, Any] | None:
    if method.spec.backbone == "none":
        return None
    from harness.core.encoding.backbone import hub_id, parameter_count
    from harness.core.encoding.engines import weight_dtype

    ref = ctx.backbone(method.spec.backbone, method.spec.revision)
    impl = method.encoder_impl()
    try:  # read from the safetensors headers; metadata only, so an unreadable header is just unknown
        n_parameters = parameter_count(ref.path)
    except (OSError, ValueError, KeyError, TypeError):
        n_parameters = None
    return {"name": ref.name, "origin": ref.origin, "revision": ref.revision, "fingerprint": ref.fingerprint,
            "path": ref.path, "num_layers": ref.num_layers, "hidden_size": ref.hidden_size, "encoder_impl": impl,
            "hub_id": hub_id(ref), "n_parameters": n_parameters, "causal": ref.causal,
            # the dtype the weights were loaded in: a decoder's follows --dtype on the transformers path
            "weights": weight_dtype(ref, ctx.encode.dtype) if impl == "transformers" else "fp32"}


def build_record(method: Method, task: LoadedTask, scores: TaskScores, cfg: BenchConfig, ctx: RunContext,
                 timings: dict[str, float], similarity: np.ndarray, fit_set: FitSet | None = None,
                 leakage: dict[str, Any] | None = None) -> Record:
    """The record of one score. ``pairs`` keeps each pair's similarity (and gold), so tests between
    methods (:mod:`harness.runner.tables.comparisons`) are rebuilt from result files alone."""
    from harness.core import __version__

    split = task.eval
    protocol = cfg.protocol()
    protocol["fit_set"] = method.fit_set_name() if method.uses_fit_set else None
    # "source" stays the run's --source (where registry tasks come from: it groups tables); a task
    # that brings its own data (file:, hf:) says so here, and its fingerprint is its content.
    protocol["task_source"] = task.source
    # Transductive: the method fitted or trained on sentences of the split it is scored on.
    overlap = fit_set.overlap(split.sentences()) if fit_set is not None else 0
    protocol["transductive"] = overlap > 0
    protocol["fit_overlap_sentences"] = overlap if fit_set is not None else None
    protocol["labelled_training"] = leakage
    protocol["prompt"] = method.inputs()
    protocol["selected_on"] = method.selected_on()
    if isinstance(method, PairScoringMethod):
        protocol["similarity"] = "score_pairs"  # the method's own pair score, not a cosine
    devices = sorted({d for p in ctx.providers() for d in p.stats.devices} | ctx.devices)
    record: Record = {
        "schema_version": RESULT_SCHEMA_VERSION,
        "harness": {"name": "sts-bench", "version": __version__, "git_sha": git_sha()},
        "created": now_iso(),
        "method": {"name": method.name, "label": method.label(), "kind": method.kind,
                   "summary": method.summary, "spec": method.spec.to_dict()},
        "backbone": backbone_record(method, ctx),
        "task": {"name": task.spec.name, "title": task.spec.title, "source": task.source,
                 "split": task.spec.eval_split, "origin": split.origin, "fingerprint": split.fingerprint,
                 "n_pairs": len(split), "subsets": split.subset_sizes(), "mteb_name": task.spec.mteb_name or None},
        "protocol": protocol,
        "fit": method.fit_info,
        "scores": {"spearman": scores.spearman, "pearson": scores.pearson,
                   "spearman_ci95": list(scores.ci95) if scores.ci95 else None,
                   "bootstrap_rounds": cfg.bootstrap, "bootstrap_seed": cfg.seed,
                   "n_zero_vectors": scores.n_zero_vectors, "undefined": scores.undefined},
        "subset_scores": strict(scores.subsets),
        "pairs": {"similarity": [float(x) for x in similarity], "gold": [float(g) for g in split.gold],
                  "subset": list(split.subsets) if split.subsets is not None else None},
        "env": environment(devices, cfg.dtype),
        "timings": timings,
    }
    return strict(record)


@dataclass
class Scored:
    """A (method, task) scored: its record, and for an embedding method the vectors of both sides
    (``left[i]`` is the vector of ``s1[i]``), which ``--export-embeddings`` writes."""

    record: Record
    left: np.ndarray | None = None
    right: np.ndarray | None = None


def evaluate(method: Method, task: LoadedTask, fit_set: FitSet | None, cfg: BenchConfig, ctx: RunContext,
             leakage: dict[str, Any] | None = None) -> Record:
    """Fit (if the method fits), encode both sides, score; return the result record."""
    return score(method, task, fit_set, cfg, ctx, leakage).record


def score(method: Method, task: LoadedTask, fit_set: FitSet | None, cfg: BenchConfig, ctx: RunContext,
          leakage: dict[str, Any] | None = None) -> Scored:
    """:func:`evaluate`, keeping the vectors that were scored."""
    from harness.core.scoring import cosine_rows, score_split

    t0 = time.perf_counter()
    if method.uses_fit_set and fit_set is not None:
        method.fit(fit_set)
    t1 = time.perf_counter()
    split = task.eval
    left = right = None
    n_zero = 0
    if isinstance(method, PairScoringMethod):
        similarity = method.score_pairs(split.s1, split.s2)
    elif isinstance(method, EmbeddingMethod):
        left, right = method.encode_sides(split.s1, split.s2)
        similarity, n_zero = cosine_rows(left, right)
        if n_zero:
            say(f"warning: {method.label()} on {task.spec.title}: {n_zero} pair(s) with a zero vector; "
                "their cosine is set to 0")
    else:
        raise TypeError(f"{type(method).__name__} is neither an EmbeddingMethod nor a PairScoringMethod")
    t2 = time.perf_counter()
    scores = score_split(similarity, split.gold, split.subsets, cfg.aggregation, cfg.bootstrap, cfg.seed, n_zero)
    t3 = time.perf_counter()
    timings = {"fit_s": round(t1 - t0, 4), "encode_s": round(t2 - t1, 4), "score_s": round(t3 - t2, 4)}
    record = build_record(method, task, scores, cfg, ctx, timings, similarity, fit_set, leakage)
    # Fields a method adds to its records (DSE's teacher, a cross-encoder's symmetry, "columns").
    record = cast("Record", {**record, **strict(method.annotate(split, similarity))})
    if left is not None:  # the width of the vectors scored (whitening's k, a DSE student's...): MTEB's embed_dim
        record["embed_dim"] = int(left.shape[1])
    if cfg.diagnostics and left is not None and right is not None:
        from harness.runner.studies.diagnostics import anisotropy, unique_rows

        record["diagnostics"] = strict(anisotropy(unique_rows(split.s1, split.s2, left, right), cfg.seed))
    return Scored(record, left, right)
