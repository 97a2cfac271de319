"""Pooling-only methods: [CLS], masked mean ("avg"), first-last average and the last token, all read
from the shared backbone pass. ``ViewMethod`` is also the base of the post-processors (whitening,
flow, sn, abtt) and of ``prompteol``.

Every view method takes a prompt (``--set METHOD.prompt='query: {sentence}'``; ``prompt2`` for the
second sentence of each pair): the prompt is part of the view it reads, so it is in the vector cache
key, the record and the protocol header, and methods with equal (backbone, prompt, pooling, layer)
share one forward pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.api import EmbeddingMethod, MethodContext, MethodSpec, Option, SpecRequest
from harness.core.encoding import Prompt

if TYPE_CHECKING:
    from harness.core.encoding import View

# The pooled views a post-processor may start from (``--set whitening.view=...`` and the like).
BASE_VIEWS = ("first-last", "avg", "cls", "last", "prompteol")
SAME = "same"  # prompt2's default: the second sentence reads the first's prompt

PROMPT_OPTIONS = (
    Option(
        "prompt",
        "",
        "the text read for each sentence: a template with {sentence}, or a prefix (e.g. "
        "'query: '); empty: the method's own (none for most); @FILE: a prompt set (a TOML file "
        "of name = 'template' lines), each prompt a row of its own",
    ),
    Option(
        "prompt2",
        SAME,
        "the second sentence's prompt of each pair (per-side prompts); same: prompt's; "
        "none: no prompt",
    ),
)

# A prompt set's named protocol (harness/runner/execution/prompt_sets.py): every prompt a row, or
# the one best on each task's dev split scored as one row, marked §. Every view method takes it.
PROMPT_SELECT = Option(
    "prompt_select",
    "none",
    "with a prompt set (prompt=@FILE): none scores every prompt as a row; dev scores, per task, "
    "the prompt best on its dev split (one row, marked §)",
    choices=("none", "dev"),
)


def base_view(name: str, first_last_layers: Sequence[int]) -> tuple[str, tuple[int, ...]]:
    """(pooling, layers) of a named base view; first-last takes the run's ``--first-last-layers``.

    >>> base_view("first-last", (1, -1))
    ('mean', (1, -1))
    >>> base_view("prompteol", (1, -1))
    ('last', (-1,))
    """
    return {
        "first-last": ("mean", tuple(first_last_layers)),
        "avg": ("mean", (-1,)),
        "cls": ("cls", (-1,)),
        "last": ("last", (-1,)),
        "prompteol": ("last", (-1,)),
    }[name]


class ViewMethod(EmbeddingMethod):
    """A method whose vector is the average over ``spec.layers`` of ``spec.pooling`` at each layer,
    of the text its prompt makes of the sentence, transformed by :meth:`transform` (identity here).

    ``first-last`` with layers (1, -1) is ``(mean(h1) + mean(h_last)) / 2`` where each mean is over
    non-padding tokens; this equals BERT-flow's "last2avg" (token-wise average of the two layers,
    then the masked mean), because the masked mean is linear.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Every view method (plugins deriving from it too) takes the prompt options.
        super().__init_subclass__(**kwargs)
        if not any(option.name == "prompt" for option in cls.options):
            cls.options = (*cls.options, *PROMPT_OPTIONS)
        if not any(option.name == PROMPT_SELECT.name for option in cls.options):
            cls.options = (*cls.options, PROMPT_SELECT)

    def base_prompt(self) -> Prompt:
        """The prompt the method reads when its ``prompt`` option is empty."""
        return Prompt.NONE

    def side_prompt(self, side: int) -> Prompt:
        """The prompt of the first (``side`` 1) or second (2) sentence of each pair."""
        params, base = self.spec.params, self.base_prompt()
        given = str(params.get("prompt", ""))
        if side == 2 and str(params.get("prompt2", SAME)) != SAME:
            given = str(params["prompt2"])
        if not given:
            return base
        # "\n" typed in a shell is two characters; instruction prompts mean a line break
        return Prompt("" if given.lower() == "none" else given.replace("\\n", "\n"), base.rule)

    def side_views(self, side: int) -> list[View]:
        from harness.core.encoding import View

        ref = self.ctx.backbone(self.spec.backbone, self.spec.revision)
        prompt = self.side_prompt(side)
        views = [
            View(self.spec.pooling, ref.layer_index(layer), prompt) for layer in self.spec.layers
        ]
        for view in views:  # at planning, before anything is encoded
            view.check_on(ref.name, ref.causal)
        return views

    def backbone_views(self) -> list[View]:
        return list(dict.fromkeys([*self.side_views(1), *self.side_views(2)]))

    def inputs(self) -> str | None:
        first, second = self.side_prompt(1), self.side_prompt(2)
        if not first and not second:
            return None
        return str(first) if first == second else f"sentence 1: {first} · sentence 2: {second}"

    def pooled(self, sentences: Sequence[str], side: int = 1) -> np.ndarray:
        provider = self.ctx.views(self.spec)
        arrays = [provider.get(sentences, view) for view in self.side_views(side)]
        # numpy types a mean as a scalar or an array; over axis 0 of (n, d) arrays it is an (n, d)
        # array
        return arrays[0] if len(arrays) == 1 else np.mean(arrays, axis=0, dtype=np.float32)  # type: ignore[return-value]

    def fit_vectors(self, sentences: Sequence[str]) -> np.ndarray:
        """The vectors a post-processor fits on: the fit set under each side's prompt (one set when
        both sides read the same prompt, as both papers fit on both sides of every pair)."""
        if self.side_prompt(1) == self.side_prompt(2):
            return self.pooled(sentences)
        return np.concatenate([self.pooled(sentences, 1), self.pooled(sentences, 2)])

    def transform(self, x: np.ndarray) -> np.ndarray:
        """What the method does to the pooled vectors (post-processors: their fitted map)."""
        return x

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        return self.transform(self.pooled(sentences))

    def encode_sides(self, s1: Sequence[str], s2: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        if self.side_prompt(1) == self.side_prompt(2):
            return self.encode(s1), self.encode(
                s2
            )  # a subclass's own encode (a plugin's) is honoured
        if type(self).encode is not ViewMethod.encode:
            from harness.core.errors import UserError

            raise UserError(
                f"{self.name}: prompt2 (a prompt per side) needs the method to encode as "
                "transform(pooled(...)); this class overrides encode(): give both sides one prompt"
            )
        return self.transform(self.pooled(s1, 1)), self.transform(self.pooled(s2, 2))


class PostProcessor(ViewMethod):
    """A view method that transforms a named base view (``--set METHOD.view=...``) after fitting."""

    uses_fit_set = True

    @classmethod
    def make_spec(cls, request: SpecRequest, ctx: MethodContext) -> MethodSpec:
        spec = super().make_spec(request, ctx)
        pooling, layers = base_view(spec.params["view"], request.first_last_layers)
        return replace(spec, pooling=pooling, layers=layers)

    def base_prompt(self) -> Prompt:
        return Prompt.PROMPTEOL if self.spec.params.get("view") == "prompteol" else Prompt.NONE


class Cls(ViewMethod):
    name = "cls"
    summary = "last-layer [CLS] vector, no pooler (SBERT paper's 'BERT CLS'); refused on a decoder"
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


class Last(ViewMethod):
    name = "last"
    summary = (
        "the last layer's vector at the last token of the (prompted) text: a decoder LLM's "
        "embedding"
    )
    pooling = "last"
    layers = (-1,)


class MeanSentence(ViewMethod):
    name = "avg-sentence"
    summary = (
        "masked mean of the last layer over the sentence's own tokens: the prompt and special "
        "tokens left out (sentence-transformers' include_prompt=False)"
    )
    pooling = "mean_sentence"
    layers = (-1,)
