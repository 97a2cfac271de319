"""Pooling-only methods: [CLS], masked mean ("avg") and first-last average, all read from the
shared backbone pass. ``ViewMethod`` is also the base of the post-processors (whitening, flow)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from harness.core.api import EmbeddingMethod, MethodContext, MethodSpec, SpecRequest

if TYPE_CHECKING:
    from harness.core.encoding.pooling import View

# The pooled views a post-processor may start from (``--whitening-view`` and the like).
BASE_VIEWS = ("first-last", "avg", "cls")


def base_view(name: str, first_last_layers: Sequence[int]) -> tuple[str, tuple[int, ...]]:
    """(pooling, layers) of a named base view; first-last takes the run's ``--first-last-layers``.

    >>> base_view("first-last", (1, -1))
    ('mean', (1, -1))
    """
    return {"first-last": ("mean", tuple(first_last_layers)), "avg": ("mean", (-1,)), "cls": ("cls", (-1,))}[name]


class ViewMethod(EmbeddingMethod):
    """A method whose vector is the average over ``spec.layers`` of ``spec.pooling`` at each layer.

    ``first-last`` with layers (1, -1) is ``(mean(h1) + mean(h_last)) / 2`` where each mean is over
    non-padding tokens; this equals BERT-flow's "last2avg" (token-wise average of the two layers,
    then the masked mean), because the masked mean is linear.
    """

    def backbone_views(self) -> list[View]:
        from harness.core.encoding.pooling import View

        ref = self.ctx.backbone(self.spec.backbone, self.spec.revision)
        return [View(self.spec.pooling, ref.layer_index(layer)) for layer in self.spec.layers]

    def pooled(self, sentences: Sequence[str]) -> np.ndarray:
        provider = self.ctx.views(self.spec)
        arrays = [provider.get(sentences, view) for view in self.backbone_views()]
        # numpy types a mean as a scalar or an array; over axis 0 of (n, d) arrays it is an (n, d) array
        return arrays[0] if len(arrays) == 1 else np.mean(arrays, axis=0, dtype=np.float32)  # type: ignore[return-value]

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        return self.pooled(sentences)


class PostProcessor(ViewMethod):
    """A view method that transforms a named base view (``--<method>-view``) after fitting."""

    uses_fit_set = True

    @classmethod
    def make_spec(cls, request: SpecRequest, ctx: MethodContext) -> MethodSpec:
        spec = super().make_spec(request, ctx)
        pooling, layers = base_view(spec.params["view"], request.first_last_layers)
        return replace(spec, pooling=pooling, layers=layers)


class Cls(ViewMethod):
    name = "cls"
    summary = "last-layer [CLS] vector, no pooler (SBERT paper's 'BERT CLS')"
    pooling = "cls"
    layers = (-1,)


class Avg(ViewMethod):
    name = "avg"
    summary = "masked mean of the last layer's token vectors"
    pooling = "mean"
    layers = (-1,)


class FirstLast(ViewMethod):
    name = "first-last"
    summary = "mean of the masked means of two layers (--first-last-layers, default 1 and last)"

    @classmethod
    def make_spec(cls, request: SpecRequest, ctx: MethodContext) -> MethodSpec:
        return replace(super().make_spec(request, ctx), layers=tuple(request.first_last_layers))
