"""The cached provider of a backbone's pooled views (:class:`~harness.core.encoding.pooling.View`).

Methods that differ only after the backbone (cls, avg, first-last, whitening, flow) ask for views;
the provider encodes each sentence once for all views that are missing, stores every view in its
own cache store, and serves arrays from the cache.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.core.artifacts import ArtifactStore
from harness.core.encoding.backbone import BackboneRef
from harness.core.encoding.cache import VectorStore
from harness.core.encoding.engines import resolve_impl
from harness.core.encoding.pooling import View, check_view_on
from harness.core.encoding.windows import ENCODER_CODE, WindowTask, make_windows, view_cache_key

if TYPE_CHECKING:
    from harness.core.encoding.forward import ForwardPass
    from harness.core.encoding.settings import EncodeSettings

log = logging.getLogger("sts_bench.views")


@dataclass
class EncodeStats:
    """What a provider did: sentences run through the model by workers, time spent, devices used."""

    remote_forwarded: int = 0
    seconds: float = 0.0
    devices: set[str] = field(default_factory=set)


class ViewProvider:
    """Serves views of one backbone from the cache, running the forward pass only for what is missing."""

    def __init__(self, ref: BackboneRef, settings: EncodeSettings, artifacts: ArtifactStore | Path | str) -> None:
        self.ref = ref
        self.settings = settings
        self.artifacts = artifacts if isinstance(artifacts, ArtifactStore) else ArtifactStore(artifacts)
        self.stats = EncodeStats()
        self._stores: dict[View, VectorStore] = {}
        self._forward: ForwardPass | None = None
        # The runner's backends: run WindowTasks elsewhere (GPUs, dask, ray), returning how many sentences they
        # encoded and on which devices; None = here. Typed by a type comment, not an annotation (that would make
        # this assignment another statement, and change the cache keys): as plain `= None` mypy typed it None and
        # skipped the executor branch of ensure(). Callable is not imported here (an import would change the keys
        # too), so mypy reads the type as Any: the branch is checked, the call's signature is not.
        self.executor = None  # type: Callable[[WindowTask], tuple[int, set[str]]] | None  # type: ignore[name-defined]
        self.impl = resolve_impl(ref, settings.impl)

    def cache_key(self, view: View) -> dict:
        """The full key of a view's vector store, the digest of the encoder's code included: what a
        result fitted on these vectors (a flow) keys on."""
        return self.store(view).key

    def store(self, view: View) -> VectorStore:
        if view not in self._stores:
            check_view_on(self.ref.name, self.ref.causal, view)  # before any encoding: one error line
            key = view_cache_key(self.ref, self.settings, self.impl, view)
            self._stores[view] = self.artifacts.vectors(key, code=ENCODER_CODE)
        return self._stores[view]

    @property
    def forward(self) -> ForwardPass:
        if self._forward is None:
            from harness.core.encoding.forward import ForwardPass

            self._forward = ForwardPass(self.ref, self.settings)
        return self._forward

    def ensure(self, sentences: Sequence[str], views: Sequence[View]) -> None:
        """Encode, in one forward pass per sentence, every (sentence, view) not yet cached.

        Work is cut into windows (:mod:`harness.core.encoding.windows`); a window with anything missing is
        encoded whole, by this process or, with an executor (several GPUs, dask, ray), by workers
        writing into the same cache.
        """
        import time

        views = sorted(set(views))
        windows = make_windows(sentences, self.settings.window)
        todo = [w for w in windows if any(self.store(v).missing(w) for v in views)]
        if not todo:
            return
        started = time.perf_counter()
        if self.executor is None:
            for texts, arrays in self.forward.encode_windows(todo, views):
                for view in views:
                    self.store(view).add(texts, arrays[view])
            if self.forward.device:
                self.stats.devices.add(self.forward.device)
        else:
            task = WindowTask(self.ref, self.settings, tuple(views), tuple(tuple(w) for w in todo),
                              self.artifacts)
            forwarded, devices = self.executor(task)
            self.stats.remote_forwarded += forwarded
            self.stats.devices.update(devices)
            for view in views:
                self.store(view).refresh()  # read the parts the workers wrote
        self.stats.seconds += time.perf_counter() - started

    @property
    def forwarded(self) -> int:
        """Sentences run through the model for this backbone in this run, here or on workers."""
        local = self._forward.sentences_forwarded if self._forward is not None else 0
        return local + self.stats.remote_forwarded

    def with_dropout(self, sentences: Sequence[str], views: Sequence[View], seed: int) -> dict[View, np.ndarray]:
        """Vectors with the backbone's dropout active (BERT-flow's original fitting input): computed
        afresh on every call, never cached, reproducible for a given ``seed``."""
        import torch

        torch.manual_seed(seed)
        return self.forward.encode_all(sentences, views, dropout=True)

    def get(self, sentences: Sequence[str], view: View) -> np.ndarray:
        """Float32 (n, d) vectors of ``sentences`` for ``view``, encoding what is missing first."""
        self.ensure(sentences, [view])
        return self.store(view).get(sentences)
