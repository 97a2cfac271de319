"""``RunContext``: the runner's implementation of :class:`harness.core.api.MethodContext`.

Backbones and view providers are memoised, so every method naming the same backbone (and
max_length) shares one ``ViewProvider`` and therefore one forward pass and one set of cache stores.
Counters are updated through calls, never by writing fields from outside.

The run's state lives here, not in modules: the method registry it resolves names through
(``registry``), its cache (``artifacts``, with its own code-digest memo), its memo of bootstrap
resamples (``resamples``) and the hub failures it remembers (``hub_failures``). Two runs in one
process share none of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from harness.core.artifacts import ArtifactStore
from harness.core.bootstrap import ResampleMemo
from harness.core.encoding import BackboneRef, resolve_backbone
from harness.core.hub import HubFailures, current_failures
from harness.runner.settings.config import BenchConfig

if TYPE_CHECKING:
    from harness.core.api import Method, MethodSpec
    from harness.core.data.splits import SplitData
    from harness.core.encoding import ViewProvider
    from methods import Registry


class RunContext:
    """One run's context. ``registry``: the methods it knows beyond the built-ins (default: the
    process registry, ``methods.PROCESS``)."""

    def __init__(self, cfg: BenchConfig, registry: Registry | None = None) -> None:
        from harness.runner.execution.backends import Backend
        from methods import PROCESS

        self.cfg = cfg
        self.seed = cfg.seed
        self.fit_set = cfg.fit_set
        self.aggregation = cfg.aggregation
        self.encode = cfg.encode_settings()
        self.registry = registry if registry is not None else PROCESS
        self.artifacts = ArtifactStore(cfg.cache_dir)
        # On disk only under the cache secret (harness.core.bootstrap); in memory for this run.
        self.resamples = ResampleMemo(self.artifacts.resample_memo, self.artifacts.secret)
        # current while the run runs (run.py); a paper's rows share the paper's (papers/run.py)
        self.hub_failures = current_failures() or HubFailures()
        self.backend = Backend(cfg.backend, cfg.device, cfg.scheduler_address)
        self.methods: dict[str, Method] = {}  # name → the run's instance (siblings share it)
        self.other_forwarded = 0  # sentences encoded by methods with their own model (sbert)
        self.devices: set[str] = set()  # devices those methods ran on
        # models fitted by training in this run (flow, ...): 0 when all came from cache
        self.trained = 0
        # sentence pairs run through a pair scorer (cross-encoder) in this run
        self.pairs_scored = 0
        self._backbones: dict[tuple[str, str | None], BackboneRef] = {}
        self._providers: dict[tuple[str, str | None, int, str], ViewProvider] = {}
        self._releases = contextlib.ExitStack()  # what the run started besides the backend

    # -- MethodContext ----------------------------------------------------------------------------
    def backbone(self, name: str, revision: str | None = None) -> BackboneRef:
        key = (name, revision)
        if key not in self._backbones:
            self._backbones[key] = resolve_backbone(name, revision, self.artifacts.fingerprint_memo)
        return self._backbones[key]

    def views(self, spec: MethodSpec) -> ViewProvider:
        from harness.core.encoding import ViewProvider

        # a view method's adapter (--set METHOD.adapter=DIR) makes another backbone: its own pass
        adapter = str(spec.params.get("adapter") or "")
        key = (spec.backbone, spec.revision, spec.max_length, adapter)
        if key not in self._providers:
            settings = replace(self.encode, max_length=spec.max_length)
            ref = self.backbone(spec.backbone, spec.revision)
            if adapter:
                ref = ref.with_adapter(adapter, self.artifacts.fingerprint_memo)
            provider = ViewProvider(ref, settings, self.artifacts)
            provider.executor = self.backend.executor()
            self._providers[key] = provider
        return self._providers[key]

    def task_split(self, task: str, split: str) -> SplitData:
        from harness.core.data.tasks import get_task, load_task
        from harness.core.errors import UserError

        spec, cfg = get_task(task), self.cfg
        loaded = load_task(
            spec,
            cfg.source,
            [split, spec.eval_split],
            locations=cfg.locations(),
            lenient_gold=cfg.allow_gold_out_of_range,
        )
        if split not in loaded.splits:
            raise UserError(
                f"the {cfg.source} source has no {spec.title} {split} split to train on; "
                "use --source packaged"
            )
        return loaded.splits[split]

    def sibling(self, name: str) -> Method:
        """The run's instance of method ``name``, or one configured from the run's settings."""
        if name not in self.methods:
            from methods.wall import built

            cls = self.registry.get(name)  # a plugin's is built in a worker (methods/wall.py)
            self.methods[name] = built(cls, lambda: cls.build(self.cfg.spec_request(), self), self)
        return self.methods[name]

    def count_trained(self) -> None:
        self.trained += 1

    def count_forwarded(self, n: int, device: str) -> None:
        self.other_forwarded += n
        self.devices.add(device)

    def count_pairs_scored(self, n: int) -> None:
        self.pairs_scored += n

    # -- for the runner ----------------------------------------------------------------------------
    def build_methods(self, names: list[str]) -> list[Method]:
        return [self.sibling(name) for name in names]

    def start_plot_worker(self) -> None:
        """Start the run's plot worker (:mod:`harness.runner.tables.plot_worker`): matplotlib is
        imported there while the run encodes, and the PNGs are drawn there; :meth:`close` stops
        it."""
        from harness.runner.tables.plot_worker import serving

        self._releases.enter_context(serving())

    def on_close(self, release: Callable[[], None]) -> None:
        """Call ``release`` when the run closes (a plugin method's worker is stopped)."""
        self._releases.callback(release)

    def close(self) -> None:
        """Release what the run started (a plot worker, plugin workers, a dask client)."""
        try:
            self._releases.close()
        finally:
            self.backend.close()

    def providers(self) -> list[ViewProvider]:
        return list(self._providers.values())

    @property
    def sentences_forwarded(self) -> int:
        """Sentences run through any model in this run: 0 on a fully warm re-run."""
        return self.other_forwarded + sum(p.forwarded for p in self._providers.values())
