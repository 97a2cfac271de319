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

    def backbone(self, name: str, revision: str | None = None) -> BackboneRef:
        key = (name, revision)
        if key not in self._backbones:
            self._backbones[key] = resolve_backbone(name, revision, self.cache_dir)
        return self._backbones[key]

    def views(self, spec: MethodSpec) -> ViewProvider:
        from harness.forward import EncodeSettings
        from harness.views import ViewProvider

        key = (spec.backbone, spec.revision, spec.max_length)
        if key not in self._providers:
            cfg = self.cfg
            settings = EncodeSettings(device=cfg.device, dtype=cfg.dtype, batch_size=cfg.batch_size,
                                      max_length=spec.max_length, trust_remote_code=cfg.trust_remote_code,
                                      progress=cfg.progress, impl=cfg.encoder_impl)
            self._providers[key] = ViewProvider(self.backbone(spec.backbone, spec.revision), settings,
                                                self.cache_dir)
        return self._providers[key]

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
        return self.other_forwarded + sum(p.forward.sentences_forwarded for p in self._providers.values()
                                          if p.forward_started)
