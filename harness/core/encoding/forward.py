"""The backbone forward pass: one pass per sentence emits every requested pooled view.

Sentences are tokenized and sorted by token length (longest first, so an out-of-memory error shows
up in the first batch, not the last). A padded encoder (transformers) gets batches of one length, so
nothing is padded; the native encoder packs rows and gets batches of mixed lengths; either way a
sentence's vector never depends on its batch-mates (:mod:`.batching`). Each batch runs once under
``torch.inference_mode`` with ``output_hidden_states=True`` and every view (e.g. cls@12, mean@12,
mean@1) is pooled from that one output. Batches hold ``batch_size`` sentences, or with
``batch_size=0`` ("auto") as many as fit a token budget. A CUDA out-of-memory error halves the batch
and retries it (and later batches stay at the smaller size) instead of failing the run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from harness.core.encoding.backbone import BackboneRef
from harness.core.encoding.batching import equal_length_batches, packed_batches, topped_up
from harness.core.encoding.engines import (
    NativeDecoderEngine,
    NativeEngine,
    TransformersEngine,
    resolve_impl,
)
from harness.core.encoding.pooling import (
    ATTENTION_MASK,
    SENTENCE_MASK,
    View,
    check_view_on,
    pool_view,
)
from harness.core.encoding.prompts import Prompt
from harness.core.encoding.settings import AUTO_TOKENS, EncodeSettings, inference_autocast
from harness.core.errors import ResourceError, UserError
from harness.core.machine import available_cpus, half_native_on_cpu, resolve_device

if TYPE_CHECKING:
    pass

log = logging.getLogger("sts_bench.forward")


def release_free_memory() -> None:
    """Hand freed heap memory back to the OS (glibc). Batches of ever-different shapes fragment
    the heap; without this a long encode's RSS creeps up window after window."""
    import contextlib
    import ctypes

    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to do
        ctypes.CDLL("libc.so.6").malloc_trim(0)


# glibc serves an allocation above its mmap threshold (dynamic, from 128 KiB up to 32 MiB) with a
# fresh mapping and unmaps it on free, so every activation of a large batch page-faults its pages in
# again: measured on 2 cores, an fp32 (2000, 1024) product of two tensors took 7.0 ms, 1.5 ms with
# the threshold fixed at 1 GiB. Kept below it, freed activations are reused from the heap; the
# trim threshold keeps glibc from handing them back between batches, and release_free_memory()
# still trims once per window (the RSS bound the comment above it describes).
HEAP_THRESHOLD = 1 << 30


def keep_activations_on_the_heap() -> None:
    """Fix glibc's mmap and trim thresholds (``mallopt``) so batch activations are reused, not
    mapped and faulted in again per operation; nothing on another C library, or when the user set
    ``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_`` (their values stay)."""
    import contextlib
    import ctypes

    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        return
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to do
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, HEAP_THRESHOLD)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 2 * HEAP_THRESHOLD)  # M_TRIM_THRESHOLD


# oneDNN compiles a kernel per (operation, input shape) and keeps 1024 of them by default; every
# window brings new batch shapes, so in bf16 a long encode's memory grew by a few MiB per window
# (measured: 30k sentences, RSS after each window 265 → 357 MiB; with 64 kept, 265 → 318, at the
# same speed, since windows are length-sorted and shapes recur only nearby).
KERNEL_CACHE_CAPACITY = "64"


def bound_kernel_cache() -> None:
    """Cap oneDNN's primitive cache unless the user set ``ONEDNN_PRIMITIVE_CACHE_CAPACITY``. oneDNN
    reads the variable when it first builds a kernel, so this must run before the first forward."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", KERNEL_CACHE_CAPACITY)


def plan_batches(
    lengths: Sequence[int], batch_size: int, max_tokens: int, packs_rows: bool = False
) -> list[list[int]]:
    """Index batches, longest first: fixed ``batch_size``, or (batch_size 0) as many as fit
    ``max_tokens``. Items of one token length each for a padded encoder; lengths mixed for one that
    packs rows (``packs_rows``), which never pads. Either way a sentence's vector does not depend on
    its batch-mates: :mod:`harness.core.encoding.batching`.

    >>> plan_batches([5, 3, 3, 2], 0, 8)
    [[0], [1, 2], [3]]
    >>> plan_batches([5, 3, 3, 2], 0, 8, packs_rows=True)
    [[0, 1], [2, 3]]
    """
    return (packed_batches if packs_rows else equal_length_batches)(lengths, batch_size, max_tokens)


def is_out_of_memory(error: BaseException) -> bool:
    import torch

    return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error).lower()


def warn_emulated_half(dtype: str) -> None:
    """One warning when this CPU has no instructions for ``dtype`` and torch emulates it: the run
    is then slower than fp32 (4x measured on an AVX2 Zen 4), and the fix is ``--dtype fp32``."""
    native = half_native_on_cpu(dtype)
    if not native and dtype not in _WARNED:
        _WARNED.add(dtype)
        log.warning(
            "--dtype %s: this CPU has no %s instructions (AVX512-%s, AMX or AVX-NE-CONVERT), so "
            "torch emulates it, slower than fp32; use --dtype fp32 here",
            dtype,
            dtype,
            dtype.upper(),
        )


_WARNED: set[str] = set()


def _right_padded(rows: Sequence[Sequence[int]], attention_mask):
    """Sentence masks as a tensor shaped like the batch's attention mask. Both engines pad on the
    right (the transformers engine's batches have one length, so they are not padded at all); a
    tokenizer that pads on the left is realigned from the attention mask."""
    import torch

    out = torch.zeros_like(attention_mask)
    for row, values in enumerate(rows):
        # the positions of the row's own tokens, in order
        real = attention_mask[row].nonzero().flatten()
        out[row, real[: len(values)]] = torch.tensor(
            list(values)[: len(real)], dtype=out.dtype, device=out.device
        )
    return out


def shared_prefix(prompt: Prompt, bidirectional: bool) -> str:
    """The prompt's fixed prefix a decoder may compute once (:mod:`.shared_prefix`), '' when its
    states cannot be shared: without the causal mask a prefix token attends to the sentence after
    it, so its states differ from sentence to sentence."""
    return "" if bidirectional else prompt.parts()[0]


class ForwardPass:
    """Runs one backbone. The model is loaded on first use, so fully cached runs never load it."""

    def __init__(self, ref: BackboneRef, settings: EncodeSettings) -> None:
        self.ref = ref
        self.settings = settings
        self.impl = resolve_impl(ref, settings.impl)
        self.device: str | None = None
        self.sentences_forwarded = 0  # the counter tests use to prove a warm run encodes nothing
        self._engine: TransformersEngine | NativeEngine | NativeDecoderEngine | None = None
        self._dropout_engine: TransformersEngine | None = None
        self._budget, self._cap = 0, settings.batch_size  # batch limits; an OOM halves them
        self._cut_warned: set[Prompt] = set()  # prompts whose truncation was already reported

    def _ensure_loaded(self) -> TransformersEngine | NativeEngine | NativeDecoderEngine:
        if self._engine is None:
            import torch

            self.device = resolve_device(self.settings.device)
            if self.device == "cpu":
                torch.set_num_threads(self.settings.threads or available_cpus())
                bound_kernel_cache()
                keep_activations_on_the_heap()
                if self.settings.dtype in ("bf16", "fp16"):
                    warn_emulated_half(self.settings.dtype)
            from harness.core.encoding.memory import check_weights_fit

            weights = self.ref.weight_dtype(self.settings.dtype)
            # before loading: one line, not an OOM kill
            check_weights_fit(self.ref, weights, self.device)
            engine_class: type[TransformersEngine | NativeEngine | NativeDecoderEngine]
            engine_class = TransformersEngine
            if self.impl == "native":
                engine_class = NativeDecoderEngine if self.ref.causal else NativeEngine
            self._engine = engine_class(self.ref, self.settings, self.device)
            budget = self.settings.max_tokens or AUTO_TOKENS.get(self.device.split(":")[0], 4096)
            self._budget, self._cap = budget, self.settings.batch_size
        return self._engine

    def _ensure_dropout_engine(self) -> TransformersEngine:
        """A second copy of the backbone in train mode: dropout active, as BERT-flow fits."""
        if self._dropout_engine is None:
            self._ensure_loaded()
            # device: set by _ensure_loaded
            self._dropout_engine = TransformersEngine(self.ref, self.settings, self.device)  # type: ignore[arg-type]
            self._dropout_engine.model.train()
        return self._dropout_engine

    def shared_prefixes(self) -> dict[str, tuple[int, int, int]]:
        """Per prompt prefix the native decoder computed once: how many texts reused all of it,
        part of it (their tokens merge across its end) and none (encoded whole). Empty for other
        engines and before the first encode."""
        counts = getattr(self._engine, "prefix_counts", {})
        return {prefix: (full, part, none) for prefix, (full, part, none) in counts.items()}

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        """Tokens per text after truncation, special tokens included (what the model computes
        on)."""
        engine = self._ensure_loaded()
        # the engine is one of two classes whose items differ; each engine only gets back its own
        # items
        return [engine.length(item) for item in engine.tokenize(list(texts))]  # type: ignore[arg-type]

    def encode_all(
        self, texts: Sequence[str], views: Sequence[View], dropout: bool = False
    ) -> dict[View, np.ndarray]:
        """Every text's vectors in input order (no cache involved): for callers that need fresh
        vectors — dropout-encoded fit sets, timing a real forward pass."""
        unique_texts = list(dict.fromkeys(texts))
        parts: dict[View, list[np.ndarray]] = {view: [] for view in views}
        order: list[str] = []
        for chunk, arrays in self.run(unique_texts, views, dropout=dropout):
            order.extend(chunk)
            for view in views:
                parts[view].append(arrays[view])
        position = {text: i for i, text in enumerate(order)}
        rows = [position[text] for text in texts]
        return {view: np.concatenate(parts[view])[rows] for view in views}

    def run(
        self, texts: Sequence[str], views: Sequence[View], dropout: bool = False
    ) -> Iterator[tuple[list[str], dict[View, np.ndarray]]]:
        """Yield ``(window_texts, {view: float32 (n, d)})`` window by window (``settings.window``
        sentences), so memory stays bounded and callers can store each window as it finishes.

        ``dropout=True`` runs the backbone in train mode (random dropout masks: seed torch first);
        such vectors are never cached.
        """
        size = self.settings.window
        windows = [list(texts[start : start + size]) for start in range(0, len(texts), size)]
        yield from self.encode_windows(windows, views, dropout)

    def encode_windows(
        self, windows: Sequence[Sequence[str]], views: Sequence[View], dropout: bool = False
    ) -> Iterator[tuple[list[str], dict[View, np.ndarray]]]:
        """Encode each window as a unit (its own length-sorted batches): the same window always
        gives the same vectors, whichever process or device runs it and whatever ran before."""
        from harness.core.progress import progress_bar

        engine = self._ensure_dropout_engine() if dropout else self._ensure_loaded()
        # a tqdm bar on a terminal, a line every ~10 s in a log (harness.core.progress)
        # one pass per prompt and attention: the text read, or the mask, differs
        passes = len({(view.prompt, view.bidirectional) for view in views}) or 1
        bar = progress_bar(
            passes * sum(len(w) for w in windows),
            f"encode {self.ref.name}",
            "sentence",
            self.settings.progress,
        )
        try:
            for window in windows:
                yield list(window), self._encode_window(engine, list(window), views, bar)
        finally:
            bar.close()

    def _encode_window(
        self, engine, window: list[str], views: Sequence[View], bar
    ) -> dict[View, np.ndarray]:
        """Every view of ``window``: one forward pass per (prompt, attention) among ``views`` (the
        prompt changes the text the model reads, a bidirectional view the mask; pooling and layer
        do not), each pooled into its views."""
        for view in views:
            check_view_on(self.ref, view)
        by_pass: dict[tuple[Prompt, bool], list[View]] = {}
        for view in views:
            by_pass.setdefault((view.prompt, view.bidirectional), []).append(view)
        filled: dict[View, np.ndarray] = {}
        for (prompt, bidirectional), group in by_pass.items():
            texts = [prompt.apply(text) for text in window] if prompt else window
            items = engine.tokenize(texts, shared_prefix(prompt, bidirectional))
            lengths = [engine.length(item) for item in items]
            if prompt:
                self._warn_cut_prompts(prompt, texts, lengths, engine)
            # the token budget counts what a batch computes: a shared prefix's tokens are not
            computed = getattr(engine, "computed_length", engine.length)
            lengths = [computed(item) for item in items]
            sentence_masks = None
            if any(view.mask == SENTENCE_MASK for view in group):
                sentence_masks = engine.sentence_masks(
                    texts, [prompt.span(text) for text in window]
                )
            for batch_ids in plan_batches(lengths, self._cap, self._budget, engine.packs_rows):
                for ids, arrays in self._forward_with_backoff(
                    engine, items, lengths, batch_ids, group, sentence_masks
                ):
                    for view in group:
                        if view not in filled:
                            filled[view] = np.empty(
                                (len(window), arrays[view].shape[1]), np.float32
                            )
                        filled[view][ids] = arrays[view]
                    # a sentence under two prompts is two passes
                    self.sentences_forwarded += len(ids)
                    bar.update(len(ids))
        release_free_memory()
        return filled

    def _warn_cut_prompts(
        self, prompt: Prompt, texts: Sequence[str], lengths: Sequence[int], engine
    ) -> None:
        """A prompted text cut at --max-length loses the prompt's end (PromptEOL's ``means in one
        word:"``), so its last token is no longer the prompt's: say how many, once per prompt."""
        limit = engine.max_length  # both engines truncate there
        if not prompt.parts()[1]:
            return
        cut = sum(1 for length in lengths if length >= limit)
        if cut and prompt not in self._cut_warned:
            self._cut_warned.add(prompt)
            log.warning(
                "prompt %s: %d text(s) reached --max-length %d tokens, so the end of the prompt "
                "may be cut off them; raise --max-length",
                prompt,
                cut,
                limit,
            )

    def _pool(self, states, pooled, masks, view: View) -> np.ndarray:
        array = pool_view(states, pooled, masks, view)
        if array is None:
            raise UserError(
                f"backbone {self.ref.name} has no trained pooler weights (pooler.dense.*); its "
                "pooler output would be random: use --simcse-pooler cls_before_pooler, or a "
                "checkpoint with a pooler"
            )
        return array

    def _forward_with_backoff(
        self,
        engine,
        items,
        lengths: Sequence[int],
        ids: list[int],
        views: Sequence[View],
        sentence_masks: Sequence[Sequence[int]] | None = None,
    ) -> list[tuple[list[int], dict[View, np.ndarray]]]:
        """Run one batch; on CUDA out-of-memory, halve it (and every later batch) and retry."""
        import torch

        try:
            return [(ids, self._forward_batch(engine, items, lengths, ids, views, sentence_masks))]
        except (torch.cuda.OutOfMemoryError, RuntimeError) as err:
            if not is_out_of_memory(err):
                raise
            if len(ids) == 1:
                raise ResourceError(
                    f"out of memory on {self.device} even for one sentence with {self.ref.name}; "
                    "lower --max-length or use another device"
                ) from None
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            half = len(ids) // 2
            self._cap = half if self._cap else 0
            self._budget = max(1, self._budget // 2)
            log.warning(
                "out of memory on %s with a batch of %d; retrying it in halves (later batches: %d)",
                self.device,
                len(ids),
                half,
            )
            return self._forward_with_backoff(
                engine, items, lengths, ids[:half], views, sentence_masks
            ) + self._forward_with_backoff(
                engine, items, lengths, ids[half:], views, sentence_masks
            )

    def _forward_batch(
        self,
        engine,
        items,
        lengths: Sequence[int],
        ids: list[int],
        views: Sequence[View],
        sentence_masks: Sequence[Sequence[int]] | None = None,
        top_up: bool = True,
    ) -> dict[View, np.ndarray]:
        """The views of the items ``ids``, run as one batch in this order (topped up when tiny)."""
        autocast_dtype = None if engine.handles_dtype else self.settings.autocast_dtype()
        rows = topped_up(ids, lengths) if top_up else list(ids)  # tiny batches: see batching.py
        batch = {k: v.to(self.device) for k, v in engine.batch([items[i] for i in rows]).items()}
        masks = {ATTENTION_MASK: batch["attention_mask"]}
        if sentence_masks is not None:
            masks[SENTENCE_MASK] = _right_padded(
                [sentence_masks[i] for i in rows], batch["attention_mask"]
            )
        # self.device: str | None is set by _ensure_loaded, which made the engine
        with inference_autocast(self.device, autocast_dtype):  # type: ignore[arg-type]
            # one pass serves views of one attention (ensure/encode_batches group them so)
            states, pooled = engine.forward(batch, bidirectional=views[0].bidirectional)
            return {view: self._pool(states, pooled, masks, view)[: len(ids)] for view in views}

    def encode_batches(
        self,
        texts: Sequence[str],
        views: Sequence[View],
        batches: Sequence[Sequence[int]] | None = None,
        top_up: bool = True,
    ) -> tuple[dict[View, np.ndarray], list[list[int]]]:
        """A study's encode, never a run's: ``texts`` as one window, in index ``batches`` given
        explicitly and each run as given, in that order (``None``: the batches this pass plans for
        the window: its engine's rule under its token budget, :mod:`.batching`). No cache, no
        out-of-memory halving, one prompt among ``views``. ``top_up=False`` leaves a batch under
        ``MIN_BATCH_TOKENS`` tokens as it is, which a run never does. The transformers engine
        pads a batch of mixed token lengths to its longest, the native one packs it. Returns
        every text's vectors in input order and the batches that ran.
        ``benchmarks/studies/batch_invariance.py`` and ``batching_ab.py`` measure through it what
        :mod:`.batching` promises: a vector that does not depend on its batch."""
        engine = self._ensure_loaded()
        passes = {(view.prompt, view.bidirectional) for view in views}
        if len(passes) != 1:
            raise UserError(
                f"encode_batches takes views of one prompt and attention, got {len(passes)}"
            )
        ((prompt, bidirectional),) = passes
        for view in views:
            check_view_on(self.ref, view)
        prompted = [prompt.apply(text) for text in texts] if prompt else list(texts)
        items = engine.tokenize(prompted, shared_prefix(prompt, bidirectional))
        computed = getattr(engine, "computed_length", engine.length)
        # each engine only gets back its own items (as in token_lengths)
        lengths = [computed(item) for item in items]  # type: ignore[arg-type]
        sentence_masks = None
        if any(view.mask == SENTENCE_MASK for view in views):
            sentence_masks = engine.sentence_masks(prompted, [prompt.span(t) for t in texts])
        if batches is None:
            batches = plan_batches(lengths, self._cap, self._budget, engine.packs_rows)
        out: dict[View, np.ndarray] = {}
        for ids in batches:
            arrays = self._forward_batch(
                engine, items, lengths, list(ids), views, sentence_masks, top_up
            )
            for view in views:
                if view not in out:
                    out[view] = np.empty((len(texts), arrays[view].shape[1]), np.float32)
                out[view][list(ids)] = arrays[view]
            self.sentences_forwarded += len(ids)
        return out, [list(ids) for ids in batches]
