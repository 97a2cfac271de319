"""The backbone forward pass: one pass per sentence emits every requested pooled view.

Sentences are tokenized once, sorted by token length (longest first, so an out-of-memory error
shows up in the first batch, not the last) and padded per batch; each batch runs once under
``torch.inference_mode`` with ``output_hidden_states=True`` and every view (e.g. cls@12, mean@12,
mean@1) is pooled from that one output. Results come back in chunks so the caller can store them
as they finish: an interrupted run keeps every finished chunk.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.backbone import BackboneRef
from harness.errors import UserError
from harness.views import View

if TYPE_CHECKING:
    import torch

DTYPES = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class EncodeSettings:
    """How the forward pass runs. ``max_length`` and ``dtype`` change the vectors (they are in the
    cache key); ``device``, ``batch_size`` and ``chunk_size`` only change speed."""

    device: str = "auto"
    dtype: str = "fp32"
    batch_size: int = 128
    max_length: int = 128
    chunk_size: int = 2048
    trust_remote_code: bool = False
    progress: bool = True
    impl: str = "auto"  # "native" | "transformers" | "auto" (native when the checkpoint allows)


IMPLS = ("auto", "native", "transformers")


def resolve_impl(ref: BackboneRef, requested: str) -> str:
    """Which encoder implementation runs ``ref``: see :mod:`harness.native_bert`."""
    if requested not in IMPLS:
        raise UserError(f"--encoder-impl {requested}: expected one of {', '.join(IMPLS)}")
    if requested == "native" and not ref.native_ok:
        raise UserError(f"--encoder-impl native: {ref.name} is not a plain BERT with model.safetensors and "
                        "tokenizer.json; use --encoder-impl transformers")
    if requested == "auto":
        return "native" if ref.native_ok else "transformers"
    return requested


def resolve_device(requested: str) -> str:
    """``auto`` → ``cuda`` when a GPU is visible, else ``cpu``; ``cuda:N`` is checked to exist."""
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cpu":
        return "cpu"
    if requested.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError(f"--device {requested}: no CUDA GPU is visible to torch; use --device cpu or auto")
        index = requested.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise UserError(f"--device {requested}: this machine has {torch.cuda.device_count()} CUDA "
                            f"device(s), cuda:0..cuda:{torch.cuda.device_count() - 1}")
        return requested
    raise UserError(f"--device {requested}: expected auto, cpu, cuda or cuda:N")


def torch_dtype(name: str) -> torch.dtype | None:
    """The autocast dtype for ``--dtype``; ``None`` means plain fp32."""
    import torch

    if name not in DTYPES:
        raise UserError(f"--dtype {name}: expected one of {', '.join(DTYPES)}")
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def available_cpus() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def quiet_transformers() -> None:
    """Turn off transformers' per-tensor "Loading weights" bar and its load reports: the harness
    checks what matters itself (a missing pooler) and reports it in one line."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def load_hf(ref: BackboneRef, trust_remote_code: bool = False):
    """Load tokenizer and encoder from the resolved local folder (never from the network); also
    returns the weight names the checkpoint lacked (transformers initialised them randomly)."""
    from transformers import AutoModel, AutoTokenizer

    quiet_transformers()

    try:
        tokenizer = AutoTokenizer.from_pretrained(ref.path, local_files_only=True,
                                                  trust_remote_code=trust_remote_code)
        model, info = AutoModel.from_pretrained(ref.path, local_files_only=True, trust_remote_code=trust_remote_code,
                                                output_loading_info=True)
    except (OSError, ValueError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise UserError(f"backbone {ref.name}: could not load from {ref.path}: {first}") from None
    return tokenizer, model.eval(), list(info.get("missing_keys", []))


class TransformersEngine:
    """Tokenizer and encoder through transformers' Auto classes (any BERT-like checkpoint)."""

    def __init__(self, ref: BackboneRef, settings: EncodeSettings, device: str) -> None:
        self.tokenizer, model, missing = load_hf(ref, settings.trust_remote_code)
        self.model = model.to(device)
        self.max_length = settings.max_length
        # transformers fills absent pooler weights with random ones; never hand those out.
        self.pooler_random = any("pooler" in key for key in missing)

    def tokenize(self, texts: list[str]) -> list[dict]:
        encoded = self.tokenizer(texts, truncation=True, max_length=self.max_length)
        return [{k: encoded[k][i] for k in encoded} for i in range(len(texts))]

    @staticmethod
    def length(item: dict) -> int:
        return len(item["input_ids"])

    def batch(self, items: list[dict]) -> dict:
        return dict(self.tokenizer.pad(items, return_tensors="pt"))

    def forward(self, batch: dict) -> tuple[Sequence[torch.Tensor], torch.Tensor | None]:
        output = self.model(**batch, output_hidden_states=True, return_dict=True)
        pooled = None if self.pooler_random else getattr(output, "pooler_output", None)
        return output.hidden_states, pooled


class NativeEngine:
    """:mod:`harness.native_bert`: the same BERT function without importing transformers."""

    def __init__(self, ref: BackboneRef, settings: EncodeSettings, device: str) -> None:
        from harness.native_bert import NativeTokenizer, load_native_bert

        folder = Path(ref.path)
        self.tokenizer = NativeTokenizer(folder, settings.max_length)
        self.model = load_native_bert(folder).to(device)

    def tokenize(self, texts: list[str]) -> list[tuple[list[int], list[int]]]:
        return self.tokenizer.encode(texts)

    @staticmethod
    def length(item: tuple[list[int], list[int]]) -> int:
        return len(item[0])

    def batch(self, items: list) -> dict:
        return self.tokenizer.pad(items)

    def forward(self, batch: dict) -> tuple[Sequence[torch.Tensor], torch.Tensor | None]:
        return self.model(**batch)


class ForwardPass:
    """Runs one backbone. The model is loaded on first use, so fully cached runs never load it."""

    def __init__(self, ref: BackboneRef, settings: EncodeSettings) -> None:
        self.ref = ref
        self.settings = settings
        self.impl = resolve_impl(ref, settings.impl)
        self.device: str | None = None
        self.sentences_forwarded = 0  # the counter tests use to prove a warm run encodes nothing
        self._engine: TransformersEngine | NativeEngine | None = None
        self._dropout_engine: TransformersEngine | None = None

    def _ensure_loaded(self) -> TransformersEngine | NativeEngine:
        if self._engine is None:
            import torch

            self.device = resolve_device(self.settings.device)
            if self.device == "cpu":
                torch.set_num_threads(available_cpus())
            engine_class = NativeEngine if self.impl == "native" else TransformersEngine
            self._engine = engine_class(self.ref, self.settings, self.device)
        return self._engine

    def _ensure_dropout_engine(self) -> TransformersEngine:
        """A second copy of the backbone in train mode: dropout active, as BERT-flow fits."""
        if self._dropout_engine is None:
            self._ensure_loaded()
            self._dropout_engine = TransformersEngine(self.ref, self.settings, self.device)
            self._dropout_engine.model.train()
        return self._dropout_engine

    def encode_all(self, texts: Sequence[str], views: Sequence[View], dropout: bool = False) -> dict[View, np.ndarray]:
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

    def run(self, texts: Sequence[str], views: Sequence[View],
            dropout: bool = False) -> Iterator[tuple[list[str], dict[View, np.ndarray]]]:
        """Yield ``(chunk_texts, {view: float32 (n, d)})`` until every text is encoded once.

        ``dropout=True`` runs the backbone in train mode (random dropout masks: seed torch first);
        such vectors are never cached.
        """
        if not texts:
            return
        import torch
        from tqdm.auto import tqdm

        engine = self._ensure_dropout_engine() if dropout else self._ensure_loaded()
        settings = self.settings
        items = engine.tokenize(list(texts))
        order = sorted(range(len(texts)), key=lambda i: -engine.length(items[i]))
        autocast_dtype = torch_dtype(settings.dtype)
        device_type = self.device.split(":")[0]
        bar = tqdm(total=len(texts), desc=f"encode {self.ref.name}", unit="sent",
                   disable=None if settings.progress else True, leave=False)
        chunk_ids: list[int] = []
        chunk_vecs: dict[View, list[np.ndarray]] = {view: [] for view in views}
        try:
            for start in range(0, len(order), settings.batch_size):
                batch_ids = order[start:start + settings.batch_size]
                batch = {k: v.to(self.device) for k, v in engine.batch([items[i] for i in batch_ids]).items()}
                with torch.inference_mode(), torch.autocast(device_type, dtype=autocast_dtype or torch.float32,
                                                            enabled=autocast_dtype is not None):
                    states, pooled = engine.forward(batch)
                    for view in views:
                        chunk_vecs[view].append(pool(states, pooled, batch["attention_mask"], view, self.ref.name))
                chunk_ids.extend(batch_ids)
                self.sentences_forwarded += len(batch_ids)
                bar.update(len(batch_ids))
                if len(chunk_ids) >= settings.chunk_size or start + settings.batch_size >= len(order):
                    yield [texts[i] for i in chunk_ids], {v: np.concatenate(chunk_vecs[v]) for v in views}
                    chunk_ids = []
                    chunk_vecs = {view: [] for view in views}
        finally:
            bar.close()


def pool(states: Sequence[torch.Tensor], pooled: torch.Tensor | None, attention_mask: torch.Tensor, view: View,
         name: str) -> np.ndarray:
    """One pooled view of a batch as float32 numpy.

    ``mean`` is the masked mean: padding positions are excluded, so a sentence's vector does not
    depend on the longest sentence in its batch.
    """
    if view.pooling == "pooler":
        if pooled is None:
            raise UserError(f"backbone {name} has no trained pooler weights (pooler.dense.*); its pooler output "
                            "would be random: use --simcse-pooler cls_before_pooler, or a checkpoint with a pooler")
        return pooled.float().cpu().numpy()
    hidden = states[view.layer].float()
    if view.pooling == "cls":
        return hidden[:, 0].cpu().numpy()
    if view.pooling in ("mean", "mean_nocls"):
        mask = attention_mask.clone()
        if view.pooling == "mean_nocls":
            mask[:, 0] = 0
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        summed = (hidden * weights).sum(dim=1)
        return (summed / weights.sum(dim=1).clamp(min=1.0)).cpu().numpy()
    raise ValueError(f"unknown pooling {view.pooling!r}")
