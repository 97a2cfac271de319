"""SBERT: a sentence-transformers checkpoint used as its authors intend — its own modules
(pooling, optional Dense/Normalize), its own ``max_seq_length``, lower-casing and default prompt.

The checkpoint's pipeline (``modules.json``: :mod:`methods.st_pipeline`) runs on the shared backbone
pass: its Pooling is one view per mode (the pooling table's), its Dense and Normalize modules the
method's transform of the pooled vector. So ``sbert`` on the packaged MiniLM reads the very views
``avg`` reads and the default run encodes each sentence once. A checkpoint with a module the harness
does not run (a custom module, CNN, LSTM, WordWeights, a Router, Dense weights only in a pickle),
or ``--set sbert.pipeline=sentence-transformers``, encodes through ``SentenceTransformer.encode``
instead (:class:`SBertOwnModel`), named in the encode line and the record. Vectors are cached like
every other method's.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.api import MethodContext, MethodSpec, Option, SpecRequest
from harness.core.encoding import Prompt, read_model_json
from harness.core.errors import UserError
from methods.pooling import SAME, ViewMethod
from methods.st_pipeline import Pipeline, read_pipeline

if TYPE_CHECKING:
    from harness.core.encoding import BackboneRef, View
    from harness.core.vector_store import VectorStore

log = logging.getLogger("sts_bench.methods")

PUBLISHED_DEFAULT = "sentence-transformers/bert-base-nli-mean-tokens"
OWN_MODEL = "sentence-transformers"  # the spec's pooling when sentence-transformers encodes


def st_max_seq_length(folder: Path) -> int | None:
    """The checkpoint's own truncation length, read from its files without loading it: older
    sentence-transformers write it to sentence_bert_config.json, 6.x to the tokenizer config."""
    for name, key in (
        ("sentence_bert_config.json", "max_seq_length"),
        ("tokenizer_config.json", "model_max_length"),
    ):
        path = folder / name
        if path.exists():
            value = read_model_json(path, dict[str, Any]).get(key)
            if isinstance(value, int) and value < 1_000_000:  # HF writes 1e30 for "no limit"
                return value
    return None


class SBert(ViewMethod):
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
        Option(
            "pipeline",
            "auto",
            "auto: the checkpoint's modules on the shared backbone pass, sentence-transformers' "
            "encode for a module the harness does not run; sentence-transformers: always its "
            "encode",
            choices=("auto", OWN_MODEL),
        ),
    )

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
        folder = Path(ctx.backbone(model, revision).path)
        pipeline = read_pipeline(folder)
        own = bool(pipeline.unsupported) or spec.params["pipeline"] == OWN_MODEL
        why = pipeline.unsupported or "--set sbert.pipeline=sentence-transformers"
        return replace(
            spec,
            backbone=model,
            revision=revision,
            pooling=OWN_MODEL if own else "+".join(pipeline.poolings),
            layers=() if own else (-1,),
            post=f"{OWN_MODEL} encode: {why}" if own else (pipeline.describe() or None),
            max_length=st_max_seq_length(folder) or spec.max_length,
        )

    @classmethod
    def create(cls, spec: MethodSpec, ctx: MethodContext) -> SBert:
        return (SBertOwnModel if spec.pooling == OWN_MODEL else SBert)(spec, ctx)

    def __init__(self, spec: MethodSpec, ctx: MethodContext) -> None:
        super().__init__(spec, ctx)
        self.pipeline: Pipeline = read_pipeline(Path(self._ref().path))

    def _ref(self) -> BackboneRef:
        return self.ctx.backbone(self.spec.backbone, self.spec.revision)

    def base_prompt(self) -> Prompt:
        """The checkpoint's default prompt (config_sentence_transformers.json), if it names one."""
        return self._cased(Prompt(self.pipeline.default_prompt))

    def side_prompt(self, side: int) -> Prompt:
        return self._cased(super().side_prompt(side))

    def _cased(self, prompt: Prompt) -> Prompt:
        """The prompt lower-cased with the sentence when the checkpoint's Transformer sets
        do_lower_case (sentence-transformers lower-cases the whole prompted text)."""
        if not self.pipeline.do_lower_case:
            return prompt
        return Prompt(prompt.template.lower(), "lower")

    def side_views(self, side: int) -> list[View]:
        """One view of the last layer per pooling mode of the checkpoint, under the side's prompt.
        ``include_prompt=False`` leaves the prompt's tokens out of a mean (the sentence mask,
        ``mean_sentence``); without a prompt sentence-transformers pools every token, as here."""
        from harness.core.encoding import View

        ref, prompt = self._ref(), self.side_prompt(side)
        poolings = self.pipeline.poolings
        if not self.pipeline.include_prompt and prompt.template:
            left_out = {"mean": "mean_sentence", "last": "last"}
            if any(pooling not in left_out for pooling in poolings):
                raise UserError(
                    f"sbert: {ref.name} pools {'+'.join(poolings)} with include_prompt=False; "
                    "under a prompt the harness leaves the prompt out of mean and last pooling "
                    "only: drop the prompt"
                )
            poolings = tuple(left_out[pooling] for pooling in poolings)
        views = [View(p, ref.layer_index(-1), prompt, self.bidirectional) for p in poolings]
        for view in views:
            view.check_on(ref)
        return views

    def pooled(self, sentences: Sequence[str], side: int = 1) -> np.ndarray:
        """The pooling modes' views concatenated, in the checkpoint's order (as its Pooling
        module concatenates them)."""
        provider = self.ctx.views(self.spec)
        arrays = [provider.get(sentences, view) for view in self.side_views(side)]
        return arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=1)

    def transform(self, x: np.ndarray) -> np.ndarray:
        """The checkpoint's Dense and Normalize modules."""
        return self.pipeline.transform(x)


# What SentenceTransformer.encode cannot honour: the harness's prompts and attention (unset values).
OWN_UNSET = {"prompt": "", "prompt2": SAME, "task_prompts": "", "attention": "default"}


class SBertOwnModel(SBert):
    """``sbert`` through ``SentenceTransformer.encode``: a checkpoint with a module the harness
    does not run, or ``--set sbert.pipeline=sentence-transformers``."""

    def __init__(self, spec: MethodSpec, ctx: MethodContext) -> None:
        super().__init__(spec, ctx)
        self._vectors: VectorStore | None = None
        params = spec.params
        given = [f"{k}={params[k]}" for k, v in OWN_UNSET.items() if str(params.get(k) or v) != v]
        if given:  # sentence-transformers reads its own default prompt, runs its own attention
            raise UserError(
                f"sbert: {', '.join(given)}: {spec.backbone} encodes through "
                f"sentence-transformers ({spec.post}), which reads no prompt or attention option "
                "of the harness's; drop those options"
            )

    def backbone_views(self) -> list[View]:
        return []

    def inputs(self) -> str | None:
        return None

    def encoder_impl(self) -> str:
        return "sentence-transformers"

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
            f"sentence-transformers ({str(self.spec.post).removeprefix(OWN_MODEL + ' encode: ')})"
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
                store.add(texts, vectors)
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

    def encode_sides(self, s1: Sequence[str], s2: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        return self.encode(s1), self.encode(s2)
