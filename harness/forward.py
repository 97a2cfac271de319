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
    batch_size: int = 64
    max_length: int = 128
    chunk_size: int = 2048
    trust_remote_code: bool = False
    progress: bool = True


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
    """Turn off transformers' per-tensor "Loading weights" bar: noise next to our encode bar."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def load_hf(ref: BackboneRef, trust_remote_code: bool = False):
    """Load tokenizer and encoder from the resolved local folder (never from the network)."""
    from transformers import AutoModel, AutoTokenizer

    quiet_transformers()

    try:
        tokenizer = AutoTokenizer.from_pretrained(ref.path, local_files_only=True,
                                                  trust_remote_code=trust_remote_code)
        model = AutoModel.from_pretrained(ref.path, local_files_only=True, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        raise UserError(f"backbone {ref.name}: could not load from {ref.path}: {first}") from None
    return tokenizer, model.eval()


class ForwardPass:
    """Runs one backbone. The model is loaded on first use, so fully cached runs never load it."""

    def __init__(self, ref: BackboneRef, settings: EncodeSettings) -> None:
        self.ref = ref
        self.settings = settings
        self.device: str | None = None
        self.sentences_forwarded = 0  # the counter tests use to prove a warm run encodes nothing
        self._tokenizer = None
        self._model = None

    def _ensure_loaded(self) -> None:
        if self._model is not None:
            return
        import torch

        self.device = resolve_device(self.settings.device)
        if self.device == "cpu":
            torch.set_num_threads(available_cpus())
        self._tokenizer, model = load_hf(self.ref, self.settings.trust_remote_code)
        self._model = model.to(self.device)

    def run(self, texts: Sequence[str], views: Sequence[View]) -> Iterator[tuple[list[str], dict[View, np.ndarray]]]:
        """Yield ``(chunk_texts, {view: float32 (n, d)})`` until every text is encoded once."""
        if not texts:
            return
        import torch
        from tqdm.auto import tqdm

        self._ensure_loaded()
        settings, tokenizer = self.settings, self._tokenizer
        encoded = tokenizer(list(texts), truncation=True, max_length=settings.max_length)
        order = sorted(range(len(texts)), key=lambda i: -len(encoded["input_ids"][i]))
        autocast_dtype = torch_dtype(settings.dtype)
        device_type = self.device.split(":")[0]
        bar = tqdm(total=len(texts), desc=f"encode {self.ref.name}", unit="sent",
                   disable=None if settings.progress else True, leave=False)
        chunk_ids: list[int] = []
        chunk_vecs: dict[View, list[np.ndarray]] = {view: [] for view in views}
        try:
            for start in range(0, len(order), settings.batch_size):
                batch_ids = order[start:start + settings.batch_size]
                features = [{k: encoded[k][i] for k in encoded} for i in batch_ids]
                batch = tokenizer.pad(features, return_tensors="pt").to(self.device)
                with torch.inference_mode(), torch.autocast(device_type, dtype=autocast_dtype or torch.float32,
                                                            enabled=autocast_dtype is not None):
                    output = self._model(**batch, output_hidden_states=True, return_dict=True)
                for view in views:
                    chunk_vecs[view].append(pool(output, batch["attention_mask"], view, self.ref.name))
                chunk_ids.extend(batch_ids)
                self.sentences_forwarded += len(batch_ids)
                bar.update(len(batch_ids))
                if len(chunk_ids) >= settings.chunk_size or start + settings.batch_size >= len(order):
                    yield [texts[i] for i in chunk_ids], {v: np.concatenate(chunk_vecs[v]) for v in views}
                    chunk_ids = []
                    chunk_vecs = {view: [] for view in views}
        finally:
            bar.close()


def pool(output, attention_mask: torch.Tensor, view: View, name: str) -> np.ndarray:
    """One pooled view of a batch as float32 numpy.

    ``mean`` is the masked mean: padding positions are excluded, so a sentence's vector does not
    depend on the longest sentence in its batch.
    """
    if view.pooling == "pooler":
        if getattr(output, "pooler_output", None) is None:
            raise UserError(f"backbone {name} has no pooler; use --simcse-pooler cls_before_pooler or avg")
        return output.pooler_output.float().cpu().numpy()
    hidden = output.hidden_states[view.layer].float()
    if view.pooling == "cls":
        return hidden[:, 0].cpu().numpy()
    if view.pooling == "mean":
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        summed = (hidden * mask).sum(dim=1)
        return (summed / mask.sum(dim=1).clamp(min=1.0)).cpu().numpy()
    raise ValueError(f"unknown pooling {view.pooling!r}")
