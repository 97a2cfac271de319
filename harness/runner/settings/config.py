"""``BenchConfig``: every setting of a run, from CLI > config file (TOML) > defaults.

Protocol settings (those that change a published number: aggregation, source, fit set, layers,
max_length, dtype) are plain named fields here and are written next to every score.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from harness.core.api import SpecRequest
from harness.core.errors import UserError, did_you_mean

BACKENDS = ("local", "dask", "ray")  # where encode windows run (harness.runner.execution.backends)
MAX_SEED = 2**31 - 1  # np.random.seed takes < 2**32; loops seed with seed + epoch
VERIFY_UNDER_BASELINE = 32  # --verify-cache's default when a run gates on --baseline
DEFAULT_METHODS = ("cls", "avg", "first-last", "whitening", "flow", "sbert", "random")


def default_cache_dir() -> str:
    return os.environ.get("STS_BENCH_CACHE") or str(Path.home() / ".cache" / "sts-bench")


@dataclass(frozen=True)
class BenchConfig:
    methods: tuple[str, ...] = DEFAULT_METHODS
    tasks: tuple[str, ...] = ("stsb",)
    backbone: str = "minilm"
    revision: str | None = None
    source: str = "packaged"
    senteval_dir: str | None = None
    hub_root: str | None = None
    aggregation: str = "all"
    fit_set: str = "target"
    first_last_layers: tuple[int, ...] = (1, -1)
    dtype: str = "fp32"
    device: str = "auto"
    batch_size: int = 0  # sentences per batch; 0 = "auto": batches by token budget (max_tokens)
    max_tokens: int = 0  # token budget of an automatic batch; 0 = 4096 on CPU, 65536 on GPU
    max_length: int = 128
    threads: int = 0  # CPU threads for torch; 0 = the cores this process may use
    cache_dir: str = field(default_factory=default_cache_dir)
    output_dir: str = "results"
    export_embeddings: str | None = None  # DIR: each scored (method, task, split)'s sentences and vectors
    baseline: str | None = None
    baseline_partial: bool = False  # compare the cells that match the baseline instead of failing on the rest
    tolerance: float = 0.5
    seed: int = 1234
    bootstrap: int = 1000
    trust_remote_code: bool = False
    # Re-encode N cached sentences per backbone and compare (a planted vector fails with exit 3);
    # None: VERIFY_UNDER_BASELINE under --baseline (a gate's verdict must not rest on a shared cache), else 0.
    verify_cache: int | None = None
    encoder_impl: str = "auto"
    backend: str = "local"
    scheduler_address: str | None = None
    dry_run: bool = False
    progress: bool = True
    plots: bool = True
    diagnostics: bool = False
    cost: bool = False
    history: bool = False  # --history: draw history.jsonl (scores by commit) and rebuild the pages; run nothing
    allow_gold_out_of_range: bool = False  # warn instead of failing on a gold score outside the task's range
    allow_undefined: bool = False  # record an undefined correlation as undefined instead of failing (exit 2)
    method_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    paper: str | None = None  # run a paper's protocol by name (harness/runner/papers/run.py)
    # Settings the user gave (command line or config file), by field name or "method.option": they
    # override a --paper preset. Fields that differ from their default count as given too.
    explicit: frozenset[str] = frozenset()

    def given(self) -> frozenset[str]:
        """The settings the user chose: those named in ``explicit`` and those off their default."""
        defaults = BenchConfig()
        changed = {f.name for f in fields(self) if f.name not in ("explicit", "method_params")
                   and getattr(self, f.name) != getattr(defaults, f.name)}
        options = {f"{method}.{option}" for method, values in self.method_params.items() for option in values}
        return frozenset(self.explicit | changed | options)

    def cache_checks(self) -> int:
        """Cached sentences to re-encode and compare per backbone (``--verify-cache``, resolved)."""
        if self.verify_cache is not None:
            return self.verify_cache
        return VERIFY_UNDER_BASELINE if self.baseline else 0

    def spec_request(self) -> SpecRequest:
        """What methods build their specs from: the run-wide settings a method may read."""
        return SpecRequest(backbone=self.backbone, revision=self.revision, max_length=self.max_length,
                           first_last_layers=tuple(self.first_last_layers), seed=self.seed, params=self.method_params)

    def protocol(self) -> dict[str, Any]:
        """The run-wide settings that change scores; printed with every table and stored per result."""
        return {"similarity": "cosine", "aggregation": self.aggregation, "source": self.source,
                "fit_set": self.fit_set, "first_last_layers": list(self.first_last_layers),
                "max_length": self.max_length, "dtype": self.dtype}

    def validate(self) -> BenchConfig:
        from harness.core.data.fitsets import check_fit_set_name
        from harness.core.data.tasks import SOURCES
        from harness.core.encoding.devices import DTYPES
        from harness.core.encoding.engines import IMPLS
        from harness.core.scoring import AGGREGATIONS
        from harness.runner.settings.validate import check_fields

        check_fields(BenchConfig, {f.name: getattr(self, f.name) for f in fields(self)}, "config")
        for name, value, choices in (("--aggregation", self.aggregation, AGGREGATIONS),
                                     ("--source", self.source, SOURCES), ("--dtype", self.dtype, DTYPES),
                                     ("--encoder-impl", self.encoder_impl, IMPLS),
                                     ("--backend", self.backend, BACKENDS)):
            if value not in choices:
                raise UserError(f"{name} {value}: expected one of {', '.join(choices)}"
                                f"{did_you_mean(value, choices)}")
        if self.max_length < 1:
            raise UserError(f"--max-length {self.max_length}: must be a positive integer")
        for flag, count in (("--batch-size", self.batch_size), ("--max-tokens", self.max_tokens),
                            ("--threads", self.threads), ("--verify-cache", self.verify_cache or 0)):
            if count < 0:
                raise UserError(f"{flag} {count}: must not be negative")
        if self.tolerance < 0 or self.bootstrap < 0 or self.seed < 0:
            raise UserError(f"--tolerance {self.tolerance}, --bootstrap {self.bootstrap} and --seed {self.seed}: "
                            "none may be negative")
        if self.seed > MAX_SEED:
            raise UserError(f"--seed {self.seed}: must be at most {MAX_SEED} (numpy and the training loops take "
                            "32-bit seeds, and add offsets to them)")
        if len(self.first_last_layers) != 2:
            raise UserError(f"--first-last-layers: expected two layer ids like 1,-1, got {self.first_last_layers}")
        if not self.methods or not self.tasks:
            raise UserError("--methods and --tasks need at least one name each")
        check_fit_set_name(self.fit_set)
        from harness.runner.settings.validate import method_names

        methods = method_names(self.methods)  # harness.run(BenchConfig(methods=("x.py:Class",))) as the CLI
        return self if methods == self.methods else replace(self, methods=methods)
