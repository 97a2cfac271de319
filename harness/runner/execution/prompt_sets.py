"""Prompt sets: several prompts of one method in one run, each its own row, or the one best on each
task's dev split scored as one row (a named protocol, marked §).

A method's ``prompt`` option names a set with ``@FILE``: a TOML file of named prompts, one
``name = "template"`` per line, in the order the rows and the spread summary list them (a JSON
object of the same shape is read too)::

    query   = "query: {sentence}"
    passage = "passage: {sentence}"
    plain   = ""                      # the method's own prompt (none for most)

The run builds one instance per prompt, each exactly as a run given that one prompt would
(:func:`expand`), and marks it with :class:`~harness.core.api.PromptOfSet`: its row is
``last[prompt=query]``, its record's ``protocol.prompt_set`` names the set, its sha256 and the
prompt. Every other piece of the run is shared as between any two methods of one backbone: the
plan takes the union of their views, so the backbone reads each distinct (prompt, sentence) text
once, a prompt's fixed prefix is computed once (the native decoder's shared-prefix reuse), and the
vectors are cached by prompt, so a second run of the same set encodes nothing.

``prompt_select=dev`` (:data:`methods.pooling.PROMPT_SELECT`) scores, per task, only the prompt
whose score on the task's dev split is highest (:func:`choose`; the first in the file on a tie), as
one row labelled by the set (``last[prompt=@prompts.toml,prompt_select=dev]``); its record says
which prompt was chosen, where, and every prompt's dev score (``protocol.prompt_set``), and
``protocol.selected_on`` marks it § as a setting chosen on labelled data. The dev split's sentences
are encoded with the rest, under every prompt of the set. The spread over a set's prompts is the
report step :mod:`harness.runner.tables.prompt_spread`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.api import PromptOfSet
from harness.core.encoding import Prompt
from harness.core.errors import UserError
from harness.core.hashing import read_input, read_table
from harness.core.kinds import kind_of

if TYPE_CHECKING:
    from harness.core.api import Method, MethodContext, SpecRequest
    from harness.core.data.fitsets import FitSet
    from harness.core.data.splits import SplitData
    from harness.core.data.tasks import LoadedTask
    from harness.runner.settings.config import BenchConfig
    from methods import Registry

MARK = "@"  # a prompt value starting with it names a prompt set's file
SELECTIONS = {"dev": "dev"}  # prompt_select → the split of each task the prompt is chosen on
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # a prompt's name: safe in a row label


@dataclass(frozen=True)
class PromptSet:
    """A prompt set read from its file: as the user named it (``@prompts.toml``), its content's
    sha256 and its (name, template) pairs in the file's order."""

    source: str
    sha256: str
    prompts: tuple[tuple[str, str], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.prompts)


def is_prompt_set(value: object) -> bool:
    """Whether an option's value names a prompt set (``@FILE``)."""
    return isinstance(value, str) and value.startswith(MARK)


def read_prompt_set(value: str, method: str) -> PromptSet:
    """The prompt set ``value`` (``@FILE``) names, checked: a TOML (or JSON) table of at least one
    ``name = "template"``, each name made of letters, digits, ``_ . -``, each template a Prompt's
    (``{sentence}`` at most once). Every refusal is one line naming the option and the file.

    >>> import pathlib, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = pathlib.Path(folder, "p.toml")
    ...     _ = path.write_text('query = "query: {sentence}"\\nplain = ""\\n', encoding="utf-8")
    ...     read_prompt_set(f"@{path}", "last").prompts
    (('query', 'query: {sentence}'), ('plain', ''))
    """
    said = f"{method}.prompt={value}"
    path = Path(value[len(MARK) :]).expanduser()
    text = read_input(path, said)
    table = read_table(path, said, text=text)
    if not isinstance(table, dict) or not table:
        raise UserError(
            f'{said}: {path} holds no prompt; write one name = "template" per line, e.g. '
            'query = "query: {sentence}"'
        )
    prompts = []
    for name, template in table.items():
        if not _NAME.match(name):
            raise UserError(
                f"{said}: prompt name {name!r} in {path}: use letters, digits, '_', '.' or '-' (it "
                "names the row)"
            )
        if not isinstance(template, str):
            raise UserError(
                f"{said}: prompt {name!r} in {path} is {type(template).__name__}, not a string "
                "(a template with {sentence}, or a prefix)"
            )
        try:  # the checks every prompt passes; a set's prompt names no other set
            if template.startswith(MARK):
                raise UserError(f"a prompt of a set does not start with {MARK!r}")
            Prompt(template)
        except UserError as err:
            raise UserError(f"{said}: prompt {name!r} in {path}: {err}") from None
        prompts.append((name, template))
    return PromptSet(value, hashlib.sha256(text.encode()).hexdigest(), tuple(prompts))


def expand(
    method: Method, registry: Registry, request: SpecRequest, ctx: MethodContext
) -> list[Method]:
    """``method`` as the run scores it: itself, or, when its ``prompt`` names a prompt set, one
    instance per prompt of the set, each built as a run given that prompt alone would build it and
    marked with its :class:`~harness.core.api.PromptOfSet`. ``prompt_select`` without a set, or a
    set given to ``prompt2``, is one line."""
    from methods.wall import built

    params = method.spec.params
    select = str(params.get("prompt_select", "none"))
    if is_prompt_set(params.get("prompt2")):
        raise UserError(
            f"{method.name}.prompt2={params['prompt2']}: a prompt set goes in prompt "
            f"(prompt2 takes one prompt for the second sentence of every pair)"
        )
    if not is_prompt_set(params.get("prompt")):
        if select != "none":
            raise UserError(
                f"{method.name}.prompt_select={select} chooses among a prompt set; give "
                f'{method.name}.prompt=@FILE too (a TOML file of name = "template" lines)'
            )
        return [method]
    prompt_set = read_prompt_set(str(params["prompt"]), method.name)
    cls = registry.get(method.name)
    members = []
    for name, template in prompt_set.prompts:
        given = {**request.given(method.name), "prompt": template}
        one = replace(request, params={**request.params, method.name: given})
        of_set = PromptOfSet(
            prompt_set.source,
            prompt_set.sha256,
            name,
            prompt_set.names,
            select if select != "none" else None,
        )
        build = lambda one=one, of_set=of_set: marked(cls.build(one, ctx), of_set)  # noqa: E731
        members.append(marked(built(cls, build, ctx), of_set))  # a plugin's in its worker too
    return members


def marked(method: Method, of_set: PromptOfSet) -> Method:
    method.prompt_of_set = of_set
    return method


def selections(methods: list[Method]) -> dict[str, list[Method]]:
    """The methods of a run that choose one prompt of their set per task, by method name."""
    out: dict[str, list[Method]] = {}
    for method in methods:
        if method.prompt_of_set is not None and method.prompt_of_set.select:
            out.setdefault(method.name, []).append(method)
    return out


def split_names(chosen: dict[str, list[Method]]) -> list[str]:
    """The splits the :func:`selections` choose their prompts on (each task's ``dev``)."""
    return list(
        dict.fromkeys(
            SELECTIONS[str(m.prompt_of_set.select)]
            for members in chosen.values()
            for m in members
            if m.prompt_of_set is not None
        )
    )


def selection_split(task: LoadedTask, members: list[Method]) -> SplitData:
    """The split of ``task`` its prompt is chosen on (its dev split), or one line saying why it
    cannot be: the task has none, or it is not a task of graded pairs."""
    of_set = members[0].prompt_of_set
    select = of_set.select if of_set is not None else None
    split_name = SELECTIONS[str(select)]
    said = f"{members[0].name}.prompt_select={select}"
    if kind_of(task).labelled:
        raise UserError(
            f"{said}: chooses a prompt by Spearman on graded pairs; {task.spec.title} is "
            f"{kind_of(task).title}; score it without prompt_select"
        )
    split = task.splits.get(split_name)
    if split is None or not len(split):
        raise UserError(
            f"{said}: {task.spec.title} has no {split_name} split to choose a prompt on "
            f"(splits: {', '.join(task.splits)}); leave the task out or score every prompt "
            "(prompt_select=none)"
        )
    return split


@dataclass(frozen=True)
class Choice:
    """The prompt chosen for one task: the instance to score, every prompt's score on the split it
    was chosen on (None where undefined), and the line ``protocol.selected_on`` keeps."""

    method: Method
    scores: dict[str, float | None]
    selected_on: str

    def annotate(self, record: Any) -> None:
        """Say in ``record`` (of the chosen instance, not yet written) where and among what its
        prompt was chosen."""
        protocol = record["protocol"]
        protocol["prompt_set"] = {**protocol["prompt_set"], "scores": dict(self.scores)}
        protocol["selected_on"] = "; ".join(
            part for part in (protocol.get("selected_on"), self.selected_on) if part
        )


def choose(
    members: list[Method],
    task: LoadedTask,
    split: SplitData,
    fit_set: FitSet | None,
    cfg: BenchConfig,
) -> Choice:
    """The member whose score on ``split`` (the run's aggregation, its full vector by the run's
    similarity) is highest; the first in the file on a tie. Each member is fitted as it will be
    scored (the task's fit set) before it encodes the split."""
    from harness.core.api import EmbeddingMethod
    from harness.core.scoring import score_split
    from harness.runner.execution.evaluate import pair_sides

    full = cfg.vector_grid()[0]
    of_set = members[0].prompt_of_set
    assert of_set is not None and of_set.select is not None
    split_name = SELECTIONS[of_set.select]
    scores: dict[str, float | None] = {}
    for member in members:
        if not isinstance(member, EmbeddingMethod):
            raise UserError(
                f"{member.name}.prompt_select={of_set.select}: chooses among sentence vectors; "
                f"{member.name} scores pairs as a whole"
            )
        member.begin_task(task.spec)  # a plugin's in its worker: one line if it fails
        if member.uses_fit_set and fit_set is not None:
            member.fit(fit_set)
        similarity, _ = pair_sides(member, split.s1, split.s2).similarity(full, None)
        got = score_split(similarity, split.gold, split.subsets, cfg.aggregation, bootstrap=0)
        scores[member.prompt_of_set.name if member.prompt_of_set else member.label()] = got.spearman
    defined = [(score, -index) for index, score in enumerate(scores.values()) if score is not None]
    if not defined:
        raise UserError(
            f"{members[0].label()}: Spearman is undefined on {task.spec.title} {split_name} for "
            "every prompt of the set; no prompt can be chosen there"
        )
    best = members[-max(defined)[1]]
    name = best.prompt_of_set.name if best.prompt_of_set else best.label()
    return Choice(
        best,
        scores,
        f"prompt '{name}' of {len(members)} in {of_set.source}, best on {task.spec.title} "
        f"{split_name}",
    )
