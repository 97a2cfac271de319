"""Pooling-only methods: [CLS], masked mean ("avg"), first-last average, the last token and SGPT's
position-weighted mean ("wmean"), all read from the shared backbone pass. ``ViewMethod`` is also
the base of the post-processors (whitening, flow, sn, abtt), of ``prompteol`` and of ``sbert``.

Every view method takes a prompt (``--set METHOD.prompt='query: {sentence}'``; ``prompt2`` for the
second sentence of each pair): the prompt is part of the view it reads, so it is in the vector cache
key, the record and the protocol header, and methods with equal (backbone, prompt, pooling, layer)
share one forward pass. Those that do not fit take per-task and per-side prompts too
(``--set METHOD.task_prompts=@FILE``, MTEB's convention: :mod:`methods.task_prompts`): the prompt of
a (task, side) is then the view that task reads, in its record and cache key likewise.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

import methods.task_prompts as task_prompts
from harness.core.api import EmbeddingMethod, MethodContext, MethodSpec, Option, SpecRequest
from harness.core.encoding import Prompt, View
from harness.core.errors import UserError

if TYPE_CHECKING:
    from harness.core.data.splits import TaskSpec

log = logging.getLogger("sts_bench.methods")

# The pooled views a post-processor may start from (``--set whitening.view=...`` and the like).
BASE_VIEWS = ("first-last", "avg", "cls", "last", "prompteol", "wmean")
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
    # Not on methods that fit (whitening, sn, abtt, flow): one fit reads one prompt per side.
    Option(
        "task_prompts",
        "",
        "per-task and per-side prompts, MTEB's model_prompts convention: @FILE, a TOML (or .json) "
        "table keyed by task name, kind (sts, pairclass, STS, PairClassification), query/document "
        "or KEY-query/KEY-document; a task without an entry reads prompt/prompt2; empty: none",
        type=task_prompts.option,
    ),
)

# How the backbone runs for the method's views: a decoder without its causal mask, and a LoRA
# adapter merged into its weights (LLM2Vec: both). Every view method takes them.
BACKBONE_OPTIONS = (
    Option(
        "attention",
        "default",
        "default: the backbone's own attention (causal on a decoder); bidirectional: a decoder "
        "(Llama, Mistral, Qwen2, Qwen3) run without its causal mask, every token attending to "
        "every token of its text (LLM2Vec, NV-Embed, GritLM)",
        choices=("default", "bidirectional"),
    ),
    Option(
        "adapter",
        "",
        "a PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors) merged into "
        "the backbone's weights; its sha256 is part of the vectors' cache key and the record",
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
    >>> base_view("wmean", (1, -1))
    ('weightedmean', (-1,))
    """
    return {
        "first-last": ("mean", tuple(first_last_layers)),
        "avg": ("mean", (-1,)),
        "cls": ("cls", (-1,)),
        "last": ("last", (-1,)),
        "prompteol": ("last", (-1,)),
        "wmean": ("weightedmean", (-1,)),
    }[name]


class ViewMethod(EmbeddingMethod):
    """A method whose vector is the average over ``spec.layers`` of ``spec.pooling`` at each layer,
    of the text its prompt makes of the sentence, transformed by :meth:`transform` (identity here).

    ``first-last`` with layers (1, -1) is ``(mean(h1) + mean(h_last)) / 2`` where each mean is over
    non-padding tokens; this equals BERT-flow's "last2avg" (token-wise average of the two layers,
    then the masked mean), because the masked mean is linear.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Every view method (plugins deriving from it too) takes the prompt options (prompteol
        # declares its own prompt and prompt2); per-task prompts only where nothing is fitted.
        super().__init_subclass__(**kwargs)
        names = {option.name for option in cls.options}
        added = [o for o in PROMPT_OPTIONS if o.name != "task_prompts" and "prompt" not in names]
        if PROMPT_SELECT.name not in names:
            added.append(PROMPT_SELECT)
        if "task_prompts" not in names and not cls.uses_fit_set:
            added += [o for o in PROMPT_OPTIONS if o.name == "task_prompts"]
        added += [o for o in BACKBONE_OPTIONS if o.name not in names]
        cls.options = (*cls.options, *added)

    # The task begun (per-task prompts read its entry) and the per-task prompts' table; set per
    # instance in __init__, here too for a subclass whose own __init__ does not call it.
    _task: TaskSpec | None = None
    _task_prompts: Mapping[str, str] = MappingProxyType({})

    def __init__(self, spec: MethodSpec, ctx: MethodContext) -> None:
        super().__init__(spec, ctx)
        self._task = None
        if self.bidirectional:  # the one door for every view method's option (sbert's, plugins')
            # any bidirectional view is refused where attention=bidirectional means nothing
            View("mean", 0, bidirectional=True).check_on(ctx.backbone(spec.backbone, spec.revision))
        try:
            self._task_prompts = task_prompts.read(str(spec.params.get("task_prompts") or ""))
        except ValueError as err:  # checked when the option was read; the file may have gone
            raise UserError(f"{self.name}: task_prompts: {err}") from None
        if self._task_prompts and str(spec.params.get("prompt", "")).startswith("@"):
            raise UserError(
                f"{self.name}: task_prompts and a prompt set (prompt=@FILE) both choose the prompt "
                "a task reads; give one: a set compares its prompts as rows, task_prompts gives "
                "each task its own prompt in one row"
            )

    @property
    def bidirectional(self) -> bool:
        """Whether the views run without the decoder's causal mask (``attention=bidirectional``)."""
        return self.spec.params.get("attention") == "bidirectional"

    def begin_task(self, task: TaskSpec) -> None:
        super().begin_task(task)
        self._task = task

    def base_prompt(self) -> Prompt:
        """The prompt the method reads when its ``prompt`` option is empty."""
        return Prompt.NONE

    def task_prompt(self, side: int) -> tuple[str, str] | None:
        """(key, prompt) of the per-task prompts' entry the task begun reads on ``side``; None
        without one (or before any task): the method's own prompt."""
        if not self._task_prompts or self._task is None:
            return None
        return task_prompts.resolve(self._task_prompts, self._task, side)

    def side_prompt(self, side: int) -> Prompt:
        """The prompt of the first (``side`` 1) or second (2) sentence of each pair: the task's
        entry of ``task_prompts`` when it has one, else ``prompt`` / ``prompt2``."""
        params, base = self.spec.params, self.base_prompt()
        entry = self.task_prompt(side)
        if entry is not None:  # taken verbatim: TOML and JSON have their own escapes
            return Prompt("" if entry[1].lower() == "none" else entry[1], base.rule)
        option = "prompt2" if side == 2 and str(params.get("prompt2", SAME)) != SAME else "prompt"
        given = str(params.get(option, ""))
        if not given:
            return base
        # "\n" typed in a shell is two characters; instruction prompts mean a line break
        template = "" if given.lower() == "none" else given.replace("\\n", "\n")
        try:  # Prompt() refuses a second {sentence} or another {name}, at planning
            return Prompt(template, base.rule)
        except UserError as err:
            raise UserError(f"--set {self.name}.{option}={given}: {err}") from None

    def side_views(self, side: int) -> list[View]:
        ref = self.ctx.backbone(self.spec.backbone, self.spec.revision)
        prompt = self.side_prompt(side)
        views = [
            View(self.spec.pooling, ref.layer_index(layer), prompt, self.bidirectional)
            for layer in self.spec.layers
        ]
        for view in views:  # at planning, before anything is encoded
            view.check_on(ref)
        return views

    def backbone_views(self) -> list[View]:
        return list(dict.fromkeys([*self.side_views(1), *self.side_views(2)]))

    def views_by_task(self, tasks: Sequence[TaskSpec]) -> dict[str, list[View]]:
        """Under per-task prompts, each task's own views (its entries' prompts); says which entries
        reach no task of the run when that looks like a mistake."""
        if not self._task_prompts:
            return super().views_by_task(tasks)
        for note in task_prompts.unmatched(self._task_prompts, tasks):
            log.warning("%s: task_prompts: %s", self.label(), note)
        held, out = self._task, {}
        try:
            for task in tasks:
                self._task = task
                out[task.name] = self.backbone_views()
        finally:
            self._task = held
        return out

    def inputs(self) -> str | None:
        first, second = self.side_prompt(1), self.side_prompt(2)
        if not first and not second:
            return None
        said = str(first) if first == second else f"sentence 1: {first} · sentence 2: {second}"
        keys = dict.fromkeys(entry[0] for side in (1, 2) if (entry := self.task_prompt(side)))
        return said + (f" (task_prompts: {', '.join(keys)})" if keys else "")

    def pooled(self, sentences: Sequence[str], side: int = 1) -> np.ndarray:
        provider = self.ctx.views(self.spec)
        arrays = [provider.get(sentences, view) for view in self.side_views(side)]
        return arrays[0] if len(arrays) == 1 else mean_of(arrays)

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
            # a subclass's own encode (a plugin's) is honoured
            return self.encode(s1), self.encode(s2)
        if type(self).encode is not ViewMethod.encode:
            raise UserError(
                f"{self.name}: prompt2 (a prompt per side) needs the method to encode as "
                "transform(pooled(...)); this class overrides encode(): give both sides one prompt"
            )
        return self.transform(self.pooled(s1, 1)), self.transform(self.pooled(s2, 2))


def mean_of(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """``np.mean(arrays, axis=0, dtype=np.float32)`` bit for bit, without stacking the arrays
    into one first (a copy of every view: 0.1-0.2 s per call for the 15,487 × 384 first-last
    vectors of the embedded default, 0.02 s this way). numpy's mean over axis 0 adds the arrays
    in order in float32, then divides by the count as an ``intp``, which is what this does.

    >>> mean_of([np.array([[1.0, 2.0]], np.float32), np.array([[2.0, 5.0]], np.float32)])
    array([[1.5, 3.5]], dtype=float32)
    """
    total = np.add(arrays[0], arrays[1], dtype=np.float32)
    for array in arrays[2:]:
        np.add(total, array, out=total, dtype=np.float32)
    return np.true_divide(total, np.intp(len(arrays)), out=total, casting="unsafe")


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


class Avg(ViewMethod):
    name = "avg"
    summary = "masked mean of the last layer's token vectors"
    pooling = "mean"


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


class MeanSentence(ViewMethod):
    name = "avg-sentence"
    summary = (
        "masked mean of the last layer over the sentence's own tokens: the prompt and special "
        "tokens left out (sentence-transformers' include_prompt=False)"
    )
    pooling = "mean_sentence"


class WeightedMean(ViewMethod):
    name = "wmean"
    summary = (
        "SGPT's position-weighted mean of the last layer: the i-th real token weighs i "
        "(Muennighoff 2022; sentence-transformers' weightedmean)"
    )
    pooling = "weightedmean"
