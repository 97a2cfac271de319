"""Assemble the result record of one (method, task) evaluation (its schema: :mod:`harness.runner.record_schema`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.api import PairScoringMethod
from harness.runner.record_schema import RESULT_SCHEMA_VERSION, Record, strict
from harness.runner.results import environment, git_sha, now_iso

if TYPE_CHECKING:
    from harness.core.api import Method
    from harness.core.data.fitsets import FitSet
    from harness.core.data.tasks import LoadedTask
    from harness.core.scoring import TaskScores
    from harness.runner.config import BenchConfig
    from harness.runner.context import RunContext


def backbone_record(method: Method, ctx: RunContext) -> dict[str, Any] | None:
    if method.spec.backbone == "none":
        return None
    ref = ctx.backbone(method.spec.backbone, method.spec.revision)
    impl = method.encoder_impl()
    return {"name": ref.name, "origin": ref.origin, "revision": ref.revision, "fingerprint": ref.fingerprint,
            "path": ref.path, "num_layers": ref.num_layers, "hidden_size": ref.hidden_size, "encoder_impl": impl}


def build_record(method: Method, task: LoadedTask, scores: TaskScores, cfg: BenchConfig, ctx: RunContext,
                 timings: dict[str, float], similarity: np.ndarray, fit_set: FitSet | None = None,
                 leakage: dict[str, Any] | None = None) -> Record:
    """The record of one score. ``pairs`` keeps each pair's similarity (and gold), so tests between
    methods (:mod:`harness.runner.significance`) are rebuilt from result files alone."""
    from harness.core import __version__

    split = task.eval
    protocol = cfg.protocol()
    protocol["fit_set"] = method.fit_set_name() if method.uses_fit_set else None
    # Transductive: the method fitted or trained on sentences of the split it is scored on.
    overlap = fit_set.overlap(split.sentences()) if fit_set is not None else 0
    protocol["transductive"] = overlap > 0
    protocol["fit_overlap_sentences"] = overlap if fit_set is not None else None
    protocol["labelled_training"] = leakage
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
