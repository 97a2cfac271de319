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
from harness.core.encoding.engines import resolve_impl
from harness.core.encoding.pooling import View, check_view_on
from harness.core.encoding.windows import WindowTask, encoder_code, make_windows, view_cache_key
from harness.core.vector_store import VectorStore

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from harness.core.encoding.forward import ForwardPass
    from harness.core.encoding.prompts import Prompt
    from harness.core.encoding.settings import EncodeSettings

log = logging.getLogger("sts_bench.views")


@dataclass
class EncodeStats:
    """What a provider did: sentences run through the model by workers, time spent, devices used."""

    remote_forwarded: int = 0
    seconds: float = 0.0
    devices: set[str] = field(default_factory=set)


class ViewProvider:
    """Serves views of one backbone from the cache, running the forward pass only for what is
    missing."""

    def __init__(
        self, ref: BackboneRef, settings: EncodeSettings, artifacts: ArtifactStore | Path | str
    ) -> None:
        self.ref = ref
        self.settings = settings
        self.artifacts = (
            artifacts if isinstance(artifacts, ArtifactStore) else ArtifactStore(artifacts)
        )
        self.stats = EncodeStats()
        self._stores: dict[View, VectorStore] = {}
        self._forward: ForwardPass | None = None
        # The runner's backends: run WindowTasks elsewhere (GPUs, dask, ray), returning how many
        # sentences they encoded and on which devices; None = here. Typed by a type comment, not an
        # annotation (that would make this assignment another statement, and change the cache keys):
        # as plain `= None` mypy typed it None and skipped the executor branch of ensure(). Callable
        # is not imported here (an import would change the keys too), so mypy reads the type as Any:
        # the branch is checked, the call's signature is not.
        self.executor = None  # type: Callable[[WindowTask], tuple[int, set[str]]] | None  # type: ignore[name-defined]
        self.impl = resolve_impl(ref, settings.impl)
        self._verified: set[View] = set()  # views whose cached vectors --verify-cache checked
        # The same backbone and settings at a smaller max_length (:meth:`share_shorter`), and the
        # token count of each (prompted) text asked about.
        self.shorter: ViewProvider | None = None
        self._token_counts: dict[str, int] = {}
        self._counter: Tokenizer | None = None
        self.verify_forwarded = 0  # sentences re-encoded to check the cache (not counted encoded)

    def cache_key(self, view: View) -> dict:
        """The full key of a view's vector store, the digest of the encoder's code included: what a
        result fitted on these vectors (a flow) keys on."""
        return self.store(view).key

    def store(self, view: View) -> VectorStore:
        if view not in self._stores:
            # before any encoding: one error line
            check_view_on(self.ref, view)
            key = view_cache_key(self.ref, self.settings, self.impl, view)
            self._stores[view] = self.artifacts.vectors(key, code=encoder_code(self.ref))
        return self._stores[view]

    @property
    def forward(self) -> ForwardPass:
        if self._forward is None:
            from harness.core.encoding.forward import ForwardPass

            self._forward = ForwardPass(self.ref, self.settings)
        return self._forward

    def prefix_note(self, prompt: Prompt) -> str:
        """How ``prompt``'s prefix is computed on this backbone, for the encode line ('' when it
        has none): :func:`harness.core.encoding.shared_prefix.prefix_note`."""
        from harness.core.encoding.shared_prefix import prefix_note

        return prefix_note(self.ref, self.impl, prompt, self.settings.max_length)

    def shared_prefixes(self) -> dict[str, tuple[int, int, int]]:
        """Per prompt prefix the native decoder computed once in this process: how many texts
        shared all of it, part of it and none (:meth:`ForwardPass.shared_prefixes`)."""
        return self._forward.shared_prefixes() if self._forward is not None else {}

    def share_shorter(self, shorter: ViewProvider) -> bool:
        """Serve from ``shorter`` (this backbone and settings at a smaller ``max_length``) every
        sentence whose text has no more tokens than its limit: cut at neither length, such a
        sentence has the same vectors under both, so the run's one pass at the shorter length
        gives them (sbert reads its checkpoint's ``max_seq_length``, 256 on MiniLM, avg reads
        ``--max-length`` 128: STS-B's sentences fit both). Only a longer sentence is encoded here.
        Returns whether it can: counting tokens takes the backbone's ``tokenizer.json``, as the
        engines read it (:func:`~harness.core.encoding.tokenizer.tokenizer_reason`)."""
        from harness.core.encoding.tokenizer import tokenizer_reason

        if tokenizer_reason(Path(self.ref.path)):
            return False
        self.shorter = shorter
        return True

    def fits_shorter(self, sentences: Sequence[str], prompt: Prompt) -> np.ndarray:
        """Per sentence, whether its text under ``prompt`` fits the shorter provider's length
        (all False without one). Worked example: limit 128, texts of 40 and 200 tokens → (True,
        False): the second is cut at 128 there and at this provider's length here."""
        if self.shorter is None:
            return np.zeros(len(sentences), dtype=bool)
        from harness.core.encoding.settings import usable_length
        from harness.core.encoding.tokenizer import read_tokenizer

        limit = usable_length(self.shorter.settings.max_length, self.ref.max_positions)
        texts = [prompt.apply(s) if prompt else s for s in sentences]
        todo = [text for text in dict.fromkeys(texts) if text not in self._token_counts]
        if todo:
            if self._counter is None:  # no truncation: a text's whole length
                self._counter = read_tokenizer(Path(self.ref.path))
            counted = self._counter.encode_batch(todo)
            self._token_counts.update(zip(todo, (len(e.ids) for e in counted)))
        return np.array([self._token_counts[text] <= limit for text in texts], dtype=bool)

    def ensure(self, sentences: Sequence[str], views: Sequence[View]) -> None:
        """Encode, in one forward pass per sentence, every (sentence, view) not yet cached; those
        that fit a shorter provider's length are encoded by it (:meth:`share_shorter`).

        Work is cut into windows (:mod:`harness.core.encoding.windows`); a window with anything
        missing is encoded whole, by this process or, with an executor (several GPUs, dask, ray), by
        workers writing into the same cache.
        """
        if self.shorter is None:
            self._ensure_here(sentences, views)
            return
        for prompt in dict.fromkeys(view.prompt for view in views):
            group = [view for view in views if view.prompt == prompt]
            fits = self.fits_shorter(sentences, prompt)
            if fits.any():
                self.shorter.ensure([s for s, ok in zip(sentences, fits) if ok], group)
            if not fits.all():
                self._ensure_here([s for s, ok in zip(sentences, fits) if not ok], group)

    def _ensure_here(self, sentences: Sequence[str], views: Sequence[View]) -> None:
        import time

        views = sorted(set(views))
        if self.settings.verify_cache:
            self.verify(sentences, views)
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
            task = WindowTask(
                self.ref,
                self.settings,
                tuple(views),
                tuple(tuple(w) for w in todo),
                self.artifacts,
                encoder_code(self.ref),
            )
            forwarded, devices = self.executor(task)
            self.stats.remote_forwarded += forwarded
            self.stats.devices.update(devices)
            for view in views:
                self.store(view).refresh()  # read the parts the workers wrote
        self.stats.seconds += time.perf_counter() - started

    def verify(self, sentences: Sequence[str], views: Sequence[View]) -> None:
        """Re-encode a random sample of the cached sentences (``settings.verify_cache`` of them) and
        compare with the cache, once per view and run: a vector planted in a shared cache (random
        numbers in a part renamed to its own sha256) fails the run with one line naming the part.

        The sample is drawn from the operating system's randomness, so whoever writes the cache
        cannot know which rows will be checked; the vectors themselves do not depend on batch-mates
        (:mod:`harness.core.encoding.batching`), so an honest cache matches to the last bit on the
        CPU and within the tolerance of
        :meth:`~harness.core.vector_store.PartStore.check` on a GPU."""
        import random

        pending = [view for view in views if view not in self._verified]
        present = {
            view: set(sentences) - set(self.store(view).missing(sentences)) for view in pending
        }
        pending = [view for view in pending if present[view]]
        if not pending:
            return
        pool = sorted(set.union(*present.values()))
        sample = random.SystemRandom().sample(pool, min(self.settings.verify_cache, len(pool)))
        before = self.forward.sentences_forwarded
        fresh = self.forward.encode_all(sample, pending)
        # checks, not the run's encoding
        self.verify_forwarded += self.forward.sentences_forwarded - before
        for view in pending:
            texts = [text for text in sample if text in present[view]]
            rows = [sample.index(text) for text in texts]
            self.store(view).check(texts, fresh[view][rows], f"{self.ref.name} {view}")
            self._verified.add(view)

    @property
    def forwarded(self) -> int:
        """Sentences run through the model for this backbone in this run, here or on workers."""
        local = (
            self._forward.sentences_forwarded - self.verify_forwarded
            if self._forward is not None
            else 0
        )
        return local + self.stats.remote_forwarded

    def with_dropout(
        self, sentences: Sequence[str], views: Sequence[View], seed: int
    ) -> dict[View, np.ndarray]:
        """Vectors with the backbone's dropout active (BERT-flow's original fitting input): computed
        afresh on every call, never cached, reproducible for a given ``seed``."""
        import torch

        torch.manual_seed(seed)
        return self.forward.encode_all(sentences, views, dropout=True)

    def get(self, sentences: Sequence[str], view: View) -> np.ndarray:
        """Float32 (n, d) vectors of ``sentences`` for ``view``, encoding what is missing first."""
        self.ensure(sentences, [view])
        fits = self.fits_shorter(sentences, view.prompt)
        if self.shorter is None or not fits.any():
            return self.store(view).get(sentences)
        inside = self.shorter.store(view).get([s for s, ok in zip(sentences, fits) if ok])
        if fits.all():
            return inside
        out = np.empty((len(sentences), inside.shape[1]), dtype=np.float32)
        out[fits] = inside
        out[~fits] = self.store(view).get([s for s, ok in zip(sentences, fits) if not ok])
        return out
