"""SBERT: a sentence-transformers checkpoint used as its authors intend — its own modules
(pooling, optional Dense/Normalize) and its own ``max_seq_length`` — through
``SentenceTransformer.encode``. Vectors are cached like every other method's."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.core.api import EmbeddingMethod, MethodContext, MethodSpec, Option, SpecRequest
from harness.core.errors import UserError

if TYPE_CHECKING:
    from harness.core.encoding import BackboneRef
    from harness.core.vector_store import VectorStore

PUBLISHED_DEFAULT = "sentence-transformers/bert-base-nli-mean-tokens"


def st_max_seq_length(folder: Path) -> int | None:
    """The checkpoint's own truncation length, read from its files without loading it: older
    sentence-transformers write it to sentence_bert_config.json, 6.x to the tokenizer config."""
    for name, key in (
        ("sentence_bert_config.json", "max_seq_length"),
        ("tokenizer_config.json", "model_max_length"),
    ):
        path = folder / name
        if path.is_file():
            value = json.loads(path.read_text(encoding="utf-8")).get(key)
            if isinstance(value, int) and value < 1_000_000:  # HF writes 1e30 for "no limit"
                return value
    return None


class SBert(EmbeddingMethod):
    name = "sbert"
    summary = (
        "a sentence-transformers checkpoint with its own pooling/normalisation (Reimers & Gurevych "
        "2019)"
    )
    options = (
        Option(
            "model",
            "auto",
            "checkpoint (HF id or folder); auto = the backbone when it is a "
            f"sentence-transformers model (the packaged MiniLM is), else {PUBLISHED_DEFAULT}",
        ),
    )

    def __init__(self, spec: MethodSpec, ctx: MethodContext) -> None:
        super().__init__(spec, ctx)
        self._vectors: VectorStore | None = None

    @classmethod
    def make_spec(cls, request: SpecRequest, ctx: MethodContext) -> MethodSpec:
        spec = super().make_spec(request, ctx)
        model = spec.params["model"]
        if model == "auto":
            model = (
                request.backbone
                if ctx.backbone(request.backbone, request.revision).is_sentence_transformer
                else PUBLISHED_DEFAULT
            )
        revision = request.revision if model == request.backbone else None
        ref = ctx.backbone(model, revision)
        return replace(
            spec,
            backbone=model,
            revision=revision,
            pooling="sentence-transformers",
            layers=(),
            max_length=st_max_seq_length(Path(ref.path)) or spec.max_length,
        )

    def encoder_impl(self) -> str:
        return "sentence-transformers"

    def _ref(self) -> BackboneRef:
        return self.ctx.backbone(self.spec.backbone, self.spec.revision)

    def _store(self) -> VectorStore:
        if self._vectors is None:
            key = {
                "kind": "sentence-transformers",
                **self._ref().key(),
                "dtype": self.ctx.encode.dtype,
            }
            self._vectors = self.ctx.artifacts.vectors(key, code=self.code())
        return self._vectors

    def describe_encode(self, sentences: Sequence[str]) -> str:
        missing = len(self._store().missing(sentences))
        return (
            f"{len(set(sentences)) - missing} cached, {missing} to encode with "
            "sentence-transformers"
        )

    def prepare(self, sentences: Sequence[str]) -> None:
        store = self._store()
        todo = store.missing(sentences)
        if not todo:
            return
        import torch

        from harness.core.encoding import Checkpoint
        from harness.core.progress import progress_bar

        model = self._load(self.ctx.encode.device_now())
        autocast_dtype = self.ctx.encode.autocast_dtype()
        chunk = 2048
        with progress_bar(
            len(todo),
            f"encode {self.spec.backbone} (sentence-transformers)",
            "sentence",
            self.ctx.encode.progress,
        ) as bar:
            for start in range(0, len(todo), chunk):
                texts = todo[start : start + chunk]
                vectors: np.ndarray | None = None
                # One token length per batch, tiny batches topped up: a sentence's vector does not
                # depend on its batch-mates (harness.core.encoding.Checkpoint.batches).
                lengths = [
                    len(ids)
                    for ids in model.tokenizer(
                        texts, truncation=True, max_length=model.max_seq_length
                    )["input_ids"]
                ]
                for ids, rows in Checkpoint.batches(lengths, self.ctx.encode.fixed_batch_size()):
                    with torch.autocast(
                        model.device.type,
                        dtype=autocast_dtype or torch.float32,
                        enabled=autocast_dtype is not None,
                    ):
                        out = model.encode(
                            [texts[i] for i in rows],
                            batch_size=len(rows),
                            convert_to_numpy=True,
                            show_progress_bar=False,
                        )
                    if vectors is None:
                        vectors = np.empty((len(texts), np.shape(out)[1]), dtype=np.float32)
                    vectors[ids] = np.asarray(out, dtype=np.float32)[: len(ids)]
                # texts is not empty: a batch has set vectors
                store.add(texts, vectors)  # type: ignore[arg-type]
                self.ctx.count_forwarded(len(texts), str(model.device))
                bar.update(len(texts))

    def _load(self, device: str):
        from sentence_transformers import SentenceTransformer

        from harness.core.encoding import Checkpoint

        Checkpoint.quiet()
        ref = self._ref()
        try:
            return SentenceTransformer(
                ref.path,
                device=device,
                local_files_only=True,
                trust_remote_code=self.ctx.encode.trust_remote_code,
            )
        except (OSError, ValueError) as err:
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise UserError(f"sbert: could not load {ref.name} from {ref.path}: {first}") from None

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        self.prepare(sentences)
        return self._store().get(sentences)
