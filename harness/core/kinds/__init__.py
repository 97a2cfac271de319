"""Task kinds, one registration each (graded pairs: :mod:`.sts`; labelled pairs: :mod:`.pairclass`;
the type: :mod:`.base`): what a task of a kind is scored by, what its records hold and how they
are verified, compared, tabled, drawn and exported. Everything outside these modules asks the kind
(:func:`kind_of`) and never compares a kind's name.

A new kind is one module with a :class:`TaskKind` subclass (or instance) and one
``KINDS.register(kind.name, kind)``; installed packages register in the entry point group
``sts_bench.kinds``. A new metric of a kind is one ``kind.add_metric(Metric(...))``.

May import: the rest of the core (never the encoding engine).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.core.kinds.base import AGREE, Evidence, Metric, Scored, TaskKind
from harness.core.registry import Registry

__all__ = [
    "AGREE",
    "DEFAULT_KIND",
    "KINDS",
    "Evidence",
    "Metric",
    "Scored",
    "TaskKind",
    "kind_of",
    "metric_named",
]


def _check(name: str, kind: object) -> str | None:
    if not isinstance(kind, TaskKind):
        return f"expected a TaskKind, got {type(kind).__name__}"
    if kind.name != name or kind.main_default not in kind.metrics:
        return "its name is not the one registered, or its main_default is not one of its metrics"
    return None


def _builtins(registry: Registry[TaskKind]) -> None:
    from harness.core.kinds.pairclass import LABELLED
    from harness.core.kinds.sts import GRADED

    for kind in (GRADED, LABELLED):
        registry.register(kind.name, kind)


KINDS: Registry[TaskKind] = Registry(
    "task kind", check=_check, group="sts_bench.kinds", builtins=_builtins
)
# What a record written before records named their kind is: graded pairs.
DEFAULT_KIND = "sts"


def kind_of(thing: Any) -> TaskKind:
    """The kind of a ``TaskSpec``, a ``LoadedTask``, a record or a record's ``task`` field."""
    if isinstance(thing, Mapping):
        task = thing.get("task", thing)
        name = task.get("kind", DEFAULT_KIND) if isinstance(task, Mapping) else DEFAULT_KIND
    else:
        name = getattr(getattr(thing, "spec", thing), "kind", DEFAULT_KIND)
    return KINDS[name]


def metric_named(name: str) -> Metric | None:
    """The metric registered under ``name`` by the first kind that has one (a protocol group
    names its score by name alone), None where no kind has it."""
    return next((kind.metrics[name] for kind in KINDS.values() if name in kind.metrics), None)
