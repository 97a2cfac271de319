"""Per-task and per-side prompts in MTEB's convention: ``--set METHOD.task_prompts=@FILE``.

FILE (TOML, or JSON when it ends in ``.json``) is one flat table from keys to prompts, MTEB's
``model_prompts`` (``mteb.models.abs_encoder.get_prompt_name``), so a model card's map is used as it
is written. A key is

* a task's name: sts-bench's (``stsb``, ``qnli``, a file task's ``name``), its title (``STS-B``)
  or its name in MTEB (``STSBenchmark``);
* a task kind: ``sts``, ``pairclass``, or MTEB's task types ``STS``, ``PairClassification``;
* a side: ``query`` or ``document``;
* ``KEY-query`` / ``KEY-document``: a task or a kind, on one side.

A (task, side) reads the first entry found in MTEB's order: task-side, task, kind-side, kind, side;
with none, the method's own prompt (``prompt``, ``prompt2``). Sides exist on an asymmetric task only
(:attr:`TaskSpec.sides`: QNLI's question is the query, its sentence the document; a file task's
``sides=query,document``): the two sentences of a symmetric task (STS) are neither, as MTEB encodes
STS with no prompt type, so ``query``/``document`` entries do not reach them. A value is a prompt as
``prompt`` takes one (a template with ``{sentence}``, or a prefix), taken verbatim (TOML's own
escapes: ``"\\n"`` is a line break); ``""`` or ``"none"`` read the sentence without a prompt.

>>> from harness.core.data.tasks import get_task
>>> prompts = {"STS": "Retrieve semantically similar text: ", "qnli-query": "Question: ",
...            "document": ""}
>>> resolve(prompts, get_task("stsb"), 1), resolve(prompts, get_task("stsb"), 2)
(('STS', 'Retrieve semantically similar text: '), ('STS', 'Retrieve semantically similar text: '))
>>> resolve(prompts, get_task("qnli"), 1), resolve(prompts, get_task("qnli"), 2)
(('qnli-query', 'Question: '), ('document', ''))
>>> resolve(prompts, get_task("mrpc"), 1) is None  # symmetric, no entry: the method's own prompt
True
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from harness.core.encoding import Prompt
from harness.core.errors import UserError
from harness.core.hashing import read_table
from harness.core.kinds import kind_of

if TYPE_CHECKING:
    from harness.core.data.splits import TaskSpec

SIDES = ("query", "document")
FILE_HINT = (
    "@FILE, a TOML (or .json) table of prompts keyed as MTEB's model_prompts: a task name, a kind "
    "(sts, pairclass, STS, PairClassification), query/document, or KEY-query/KEY-document"
)


def option(text: str) -> str:
    """The ``task_prompts`` option's value checked when it is read: empty, or ``@FILE`` whose table
    is well formed (:func:`read`). The value stays the text given (the row's label shows the file);
    what each (task, side) read is in its record."""
    text = text.strip()
    if text:
        read(text)
    return text


def read(text: str) -> dict[str, str]:
    """The table of ``@FILE`` (``text``); ``{}`` for an empty option. A ValueError says what is
    wrong (the option's reader turns it into one ``error:`` line)."""
    if not text:
        return {}
    if not text.startswith("@"):
        raise ValueError(f"expected {FILE_HINT}; got {text!r}")
    path = Path(text[1:]).expanduser()
    table = read_table(path, f"task_prompts={text}")
    if not isinstance(table, dict) or not table:
        raise ValueError(f"{path}: expected one non-empty table of prompts ({FILE_HINT})")
    for key, value in table.items():
        if not isinstance(value, str):
            raise ValueError(
                f"{path}: {key} = {value!r}: expected a prompt (a string); a side of a task is "
                f"the key '{key}-query' or '{key}-document', MTEB's spelling"
            )
        if not key.strip() or key != key.strip():
            raise ValueError(f"{path}: key {key!r}: expected a task, kind or side, unpadded")
        try:
            Prompt(value)
        except UserError as err:  # Prompt's checks
            raise ValueError(f"{path}: {key}: {err}") from None
    return table


def names(task: TaskSpec) -> list[str]:
    """The keys that name ``task`` itself: its name, title and MTEB name."""
    return [n for n in dict.fromkeys([task.name, task.title, task.mteb_name]) if n]


def kinds(task: TaskSpec) -> list[str]:
    """The keys that name ``task``'s kind: sts-bench's and MTEB's task type."""
    return [k for k in dict.fromkeys([task.kind, kind_of(task).mteb_type]) if k]


def candidates(task: TaskSpec, side: int) -> list[str]:
    """The keys that would give (``task``, ``side``) its prompt, in MTEB's order of precedence."""
    side_type = task.sides[side - 1] if task.sides else ""
    keys = [f"{name}-{side_type}" for name in names(task)] if side_type else []
    keys += names(task)
    keys += [f"{kind}-{side_type}" for kind in kinds(task)] if side_type else []
    keys += kinds(task)
    return keys + ([side_type] if side_type else [])


def resolve(prompts: Mapping[str, str], task: TaskSpec, side: int) -> tuple[str, str] | None:
    """(key, prompt) of the entry (``task``, ``side``) reads, or None: the method's own prompt."""
    for key in candidates(task, side):
        if key in prompts:
            return key, prompts[key]
    return None


def unmatched(prompts: Mapping[str, str], tasks: Iterable[TaskSpec]) -> list[str]:
    """What to tell about entries that reach no (task, side) of the run: a side entry for tasks
    without sides, and a key close to one that would reach (a typo). Entries for tasks the run
    does not score (a model card's map names many) are left unsaid.

    >>> from harness.core.data.tasks import get_task
    >>> entries = {"STSBenchmrk": "a: ", "query": "q: ", "SICK-R": "s: "}
    >>> for note in unmatched(entries, [get_task("stsb")]):
    ...     print(note[:72])
    'STSBenchmrk' names no task, kind or side of this run (did you mean 'STS
    'query' is a side entry and STS-B has no sides: both of its sentences re
    """
    tasks = list(tasks)
    reachable = {key for task in tasks for side in (1, 2) for key in candidates(task, side)}
    notes = []
    for key in prompts:
        if key in reachable:
            continue
        base, _, side = key.rpartition("-")
        if key in SIDES or side in SIDES:
            symmetric = [
                task.title
                for task in tasks
                if not task.sides and (key in SIDES or base in names(task) + kinds(task))
            ]
            if symmetric:
                notes.append(
                    f"'{key}' is a side entry and {', '.join(symmetric)} "
                    f"{'has' if len(symmetric) == 1 else 'have'} no sides: both of "
                    f"{'its' if len(symmetric) == 1 else 'their'} sentences read "
                    f"{'its' if len(symmetric) == 1 else 'their'} task's or kind's entry (sides "
                    "are for asymmetric tasks: qnli, a file task with sides=query,document)"
                )
                continue
        close = difflib.get_close_matches(key, sorted(reachable), n=1, cutoff=0.6)
        if close:
            notes.append(
                f"'{key}' names no task, kind or side of this run (did you mean '{close[0]}'?)"
            )
    return notes
