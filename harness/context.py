"""What a method may ask of the run: resolved backbones and their cached view providers.

Both are memoised, so every method naming the same backbone (and max_length) shares one
``ViewProvider`` and therefore one forward pass and one set of cache stores.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.backbone import BackboneRef, resolve_backbone
from harness.config import BenchConfig

if TYPE_CHECKING:
    from harness.views import ViewProvider
    from methods.base import MethodSpec


class RunContext:
    def __init__(self, cfg: BenchConfig) -> None:
        self.cfg = cfg
        self.cache_dir = Path(cfg.cache_dir).expanduser()
        self._backbones: dict[tuple[str, str | None], BackboneRef] = {}
        self._providers: dict[tuple[str, str | None, int], ViewProvider] = {}
        self.other_forwarded = 0  # sentences encoded by methods with their own model (sbert)
        self.devices: set[str] = set()  # devices those methods ran on
        self.trained = 0  # models fitted by training in this run (flow, ...): 0 when all came from cache
        self.pairs_scored = 0  # sentence pairs run through a pair scorer (cross-encoder) in this run
        from harness.backends import Backend

        self.backend = Backend(cfg.backend, cfg.device, cfg.scheduler_address)

    def backbone(self, name: str, revision: str | None = None) -> BackboneRef:
        key = (name, revision)
        if key not in self._backbones:
            self._backbones[key] = resolve_backbone(name, revision, self.cache_dir)
        return self._backbones[key]

    def views(self, spec: MethodSpec) -> ViewProvider:
        from harness.devices import available_cpus
        from harness.forward import EncodeSettings
        from harness.views import ViewProvider

        key = (spec.backbone, spec.revision, spec.max_length)
        if key not in self._providers:
            cfg = self.cfg
            settings = EncodeSettings(device=cfg.device, dtype=cfg.dtype, batch_size=cfg.batch_size,
                                      max_tokens=cfg.max_tokens, max_length=spec.max_length,
                                      threads=cfg.threads or available_cpus(), trust_remote_code=cfg.trust_remote_code,
                                      progress=cfg.progress, impl=cfg.encoder_impl)
            provider = ViewProvider(self.backbone(spec.backbone, spec.revision), settings, self.cache_dir)
            provider.executor = self.backend.executor()
            self._providers[key] = provider
        return self._providers[key]

    def close(self) -> None:
        """Release what the run started (a dask client)."""
        self.backend.close()

    def providers(self) -> list[ViewProvider]:
        return list(self._providers.values())

    def count_trained(self) -> None:
        self.trained += 1

    def count_forwarded(self, n: int, device: str) -> None:
        self.other_forwarded += n
        self.devices.add(device)

    @property
    def sentences_forwarded(self) -> int:
        """Sentences run through any model in this run: 0 on a fully warm re-run."""
        return self.other_forwarded + sum(p.forwarded for p in self._providers.values())
