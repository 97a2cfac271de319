"""A ``MethodContext`` with no runner behind it: what a method sees, built by hand.

It proves the method API is narrow: a method is built from a ``SpecRequest`` and this context,
and used through ``encode`` / ``score_pairs`` without the CLI, the config or the scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.core.api import Method, MethodSpec, SpecRequest
from harness.core.artifacts import ArtifactStore
from harness.core.data.splits import SplitData
from harness.core.encoding.backbone import BackboneRef, resolve_backbone
from harness.core.encoding.provider import ViewProvider
from harness.core.encoding.settings import EncodeSettings


@dataclass
class FakeContext:
    root: Path
    request: SpecRequest
    splits: dict[tuple[str, str], SplitData] = field(default_factory=dict)
    seed: int = 1234
    fit_set: str = "test"
    aggregation: str = "all"
    encode: EncodeSettings = field(default_factory=lambda: EncodeSettings(device="cpu", threads=1, progress=False))
    trained: int = 0
    forwarded: int = 0
    pairs_scored: int = 0

    def __post_init__(self) -> None:
        self.artifacts = ArtifactStore(self.root)
        self._providers: dict[tuple, ViewProvider] = {}
        self._siblings: dict[str, Method] = {}

    def backbone(self, name: str, revision: str | None = None) -> BackboneRef:
        return resolve_backbone(name, revision, self.artifacts.fingerprint_memo)

    def views(self, spec: MethodSpec) -> ViewProvider:
        adapter = str(spec.params.get("adapter") or "")  # as RunContext.views: another backbone
        key = (spec.backbone, spec.revision, spec.max_length, adapter)
        if key not in self._providers:
            settings = replace(self.encode, max_length=spec.max_length)
            ref = self.backbone(spec.backbone, spec.revision)
            ref = ref.with_adapter(adapter, self.artifacts.fingerprint_memo) if adapter else ref
            self._providers[key] = ViewProvider(ref, settings, self.artifacts)
        return self._providers[key]

    def task_split(self, task: str, split: str) -> SplitData:
        return self.splits[(task, split)]

    def sibling(self, name: str) -> Method:
        if name not in self._siblings:
            from methods import get_method

            self._siblings[name] = get_method(name).build(self.request, self)
        return self._siblings[name]

    def count_trained(self) -> None:
        self.trained += 1

    def count_forwarded(self, n: int, device: str) -> None:
        self.forwarded += n

    def count_pairs_scored(self, n: int) -> None:
        self.pairs_scored += n
