"""``splade``: sparse vectors from the backbone's masked-language-model head (Formal et al. 2021).

Each token's MLM logits over the vocabulary go through ``log(1 + relu(x))`` (``activation``), and
the sentence's vector is their maximum over its tokens (``pooling=max``, SPLADE v2 and later;
``sum`` is SPLADE v1's), padding left out: one dimension per vocabulary entry, nearly all zero for
a model trained with SPLADE's sparsity regulariser. Pairs are compared by dot product, as SPLADE is
trained (``similarity``). The vectors are kept sparse from the pooled batch on: cached as CSR
arrays (:mod:`harness.core.sparse_store`) and scored without densifying
(:func:`harness.core.sparse.pair_similarity`); the run reports their active dimensions and FLOPS
beside their bytes.

The backbone must carry its MLM head (``cls.predictions`` of a ``BertForMaskedLM``, ``lm_head`` of
a ``RobertaForMaskedLM``): transformers would give a bare encoder (the packaged MiniLM) a random
one, so such a backbone is refused in one line when the method loads it. The values are those of
sentence-transformers' ``SparseEncoder`` (``MLMTransformer`` + ``SpladePooling``) on the same
checkpoint, whose ``activation_function`` names differ: its ``relu`` is ``log1p_relu`` here and
its ``log1p_relu`` is ``log1p_log1p_relu`` (``tests/test_splade.py``).

Worked example of one dimension: a word whose logits at the three tokens of ``[CLS] cat [SEP]``
are ``(-2.0, 1.718, 0.5)`` gets ``log(1 + relu(x)) = (0, 1, 0.405)``; ``max`` keeps 1.0, ``sum``
1.405. A word whose logits are all negative is 0: not stored, not multiplied.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from harness.core.api import MethodContext, MethodSpec, Option, SparseEmbeddingMethod, SpecRequest
from harness.core.errors import UserError
from harness.core.sparse import SparseVectors

if TYPE_CHECKING:
    import torch

    from harness.core.encoding import BackboneRef
    from harness.core.sparse_store import SparseVectorStore

# activation name → how many times log1p follows the relu (sentence-transformers' name)
ACTIVATIONS = {"log1p_relu": 1, "log1p_log1p_relu": 2}  # ST: "relu", "log1p_relu"
POOLINGS = ("max", "sum")
# how a pair of sparse vectors may be compared (harness.core.sparse.SIMILARITIES, which the run
# checks a sparse method's answer against)
SIMILARITIES = ("dot", "cosine")
# Logits held at once: a batch of (rows, tokens, vocabulary) float32 stays under 256 MiB
LOGIT_BUDGET = 1 << 26
CHUNK = 2048  # sentences encoded between two writes to the cache


def splade_pool(
    logits: torch.Tensor, mask: torch.Tensor, activation: str, pooling: str
) -> torch.Tensor:
    """(batch, vocabulary) float32: ``activation`` of the (batch, tokens, vocabulary) logits,
    pooled (``max`` or ``sum``) over the tokens ``mask`` keeps. Every activated value is ≥ 0, so
    a masked token set to 0 never wins a maximum.

    >>> import torch
    >>> logits = torch.tensor([[[-2.0], [1.718281828], [0.5]]])
    >>> splade_pool(logits, torch.tensor([[1, 1, 1]]), "log1p_relu", "max")
    tensor([[1.]])
    >>> splade_pool(logits, torch.tensor([[1, 0, 1]]), "log1p_relu", "sum")
    tensor([[0.4055]])
    """
    values = logits.float().relu()
    for _ in range(ACTIVATIONS[activation]):
        values = values.log1p()
    values = values * mask.unsqueeze(-1).to(values.dtype)
    return values.amax(dim=1) if pooling == "max" else values.sum(dim=1)


class Splade(SparseEmbeddingMethod):
    name = "splade"
    summary = (
        "sparse vectors of the backbone's MLM head: log(1 + relu(logits)) max-pooled over tokens, "
        "compared by dot product (SPLADE; needs a checkpoint with its MLM head)"
    )
    options = (
        Option(
            "activation",
            "log1p_relu",
            "applied to each token's vocabulary logits: log1p_relu = log(1 + relu(x)) (SPLADE; "
            "sentence-transformers' 'relu'), log1p_log1p_relu = log(1 + log(1 + relu(x))) "
            "(sentence-transformers' 'log1p_relu')",
            choices=tuple(ACTIVATIONS),
        ),
        Option(
            "pooling",
            "max",
            "over the tokens: max (SPLADE v2 and later) or sum (SPLADE v1)",
            choices=POOLINGS,
        ),
        Option(
            "similarity",
            "dot",
            "how two vectors are compared: dot (as SPLADE is trained) or cosine",
            choices=SIMILARITIES,
        ),
    )

    def __init__(self, spec: MethodSpec, ctx: MethodContext) -> None:
        super().__init__(spec, ctx)
        self._vectors: SparseVectorStore | None = None
        self._verified = False  # --verify-cache: the sample is checked once per run

    @classmethod
    def make_spec(cls, request: SpecRequest, ctx: MethodContext) -> MethodSpec:
        spec = super().make_spec(request, ctx)
        return replace(spec, pooling=f"splade-{spec.params['pooling']}", layers=())

    def encoder_impl(self) -> str:
        return "transformers (masked-lm head)"

    def sparse_similarity(self) -> str:
        return str(self.spec.params["similarity"])

    def _ref(self) -> BackboneRef:
        return self.ctx.backbone(self.spec.backbone, self.spec.revision)

    def _store(self) -> SparseVectorStore:
        if self._vectors is None:
            params = self.spec.params
            key: dict[str, Any] = {
                "kind": "splade",
                **self._ref().key(),
                "revision": self.spec.revision,
                "activation": params["activation"],
                "pooling": params["pooling"],
                "max_length": self.spec.max_length,
                "dtype": self.ctx.encode.dtype,
                "torch": importlib.metadata.version("torch"),
                "transformers": importlib.metadata.version("transformers"),
            }
            self._vectors = self.ctx.artifacts.sparse_vectors(key, code=self.code())
        return self._vectors

    def describe_encode(self, sentences: Sequence[str]) -> str:
        missing = len(self._store().missing(sentences))
        return f"{len(set(sentences)) - missing} cached, {missing} to encode (MLM head)"

    def prepare(self, sentences: Sequence[str]) -> None:
        store = self._store()
        todo = store.missing(sentences)
        if self.ctx.encode.verify_cache and not self._verified:  # as a dense backbone's parts are
            import random

            cached = sorted(set(sentences) - set(todo))
            sample = random.SystemRandom().sample(
                cached, min(self.ctx.encode.verify_cache, len(cached))
            )
            for texts, vectors in self._encode(sample):
                store.check(texts, vectors, f"{self.spec.backbone} (splade)")
            self._verified = True
        for texts, vectors in self._encode(todo):  # stored a chunk at a time: a stop keeps them
            store.add(texts, vectors)
            self.ctx.count_forwarded(len(texts), self.ctx.encode.device_now())

    def _encode(self, todo: Sequence[str]) -> Iterator[tuple[list[str], SparseVectors]]:
        """The vectors of ``todo``, a chunk of :data:`CHUNK` sentences at a time (in the order
        the chunk's texts are given with them)."""
        if not todo:
            return
        from harness.core.encoding import Checkpoint
        from harness.core.progress import progress_bar

        try:
            checkpoint = Checkpoint.open(self._ref().path, head="masked-lm")
        except UserError as err:
            raise UserError(f"{self.name}: --backbone {self.spec.backbone}: {err}") from None
        device = self.ctx.encode.device_now()
        model = checkpoint.model.to(device).eval()
        tokenizer, vocabulary = checkpoint.tokenizer, int(model.config.vocab_size)
        length = checkpoint.usable_length(self.spec.max_length)
        autocast = self.ctx.encode.autocast_dtype()
        activation, pooling = self.spec.params["activation"], self.spec.params["pooling"]
        with progress_bar(
            len(todo), f"encode {self.spec.backbone} (splade)", "sentence", self.ctx.encode.progress
        ) as bar:
            for start in range(0, len(todo), CHUNK):
                texts = todo[start : start + CHUNK]
                lengths = [
                    len(ids)
                    for ids in tokenizer(texts, truncation=True, max_length=length)["input_ids"]
                ]
                # rows a batch may hold so that its logits stay within LOGIT_BUDGET
                rows_fit = max(1, LOGIT_BUDGET // (max(lengths) * vocabulary))
                batch_size = min(self.ctx.encode.fixed_batch_size(), rows_fit)
                done: list[int] = []
                parts: list[SparseVectors] = []
                for ids, rows in Checkpoint.batches(lengths, batch_size):
                    inputs = tokenizer(
                        [texts[i] for i in rows],
                        padding=True,
                        truncation=True,
                        max_length=length,
                        return_tensors="pt",
                    ).to(device)
                    with Checkpoint.inference(device, autocast):
                        logits = model(**inputs).logits[: len(ids)]
                        pooled = splade_pool(
                            logits, inputs["attention_mask"][: len(ids)], activation, pooling
                        )
                    done += ids
                    parts.append(SparseVectors.from_dense(pooled.cpu().numpy()))
                    bar.update(len(ids))
                yield [texts[i] for i in done], SparseVectors.concat(parts)

    def encode_sparse(self, sentences: Sequence[str]) -> SparseVectors:
        self.prepare(sentences)
        return self._store().get(sentences)
