"""Task sources, one registry (:data:`SOURCES`): where a task's rows are read from.

A source is one registration, a :class:`Source`: its name, a one-line summary, its loader
(``load(spec, splits, location) -> {split: SplitData}``) and what its location is. Its location
comes from one place, the run's mapping source → folder (``--data-dir SOURCE=DIR``, a config file's
``[data_dir]`` table; ``--senteval-dir``, ``--glue-dir`` and ``--hub-root`` fill the same mapping):
:meth:`Source.location_in` picks the source's own entry, and the loader receives only that. A task
says where each source finds it (``TaskSpec.where``); the source reads its own entry
(``spec.place(name)``).

The built-ins are :data:`BUILTIN`'s modules, each declaring its ``SOURCE``: ``packaged`` (offline
STS-B), ``senteval`` (a SentEval data directory), ``glue`` (GLUE's data folder: its
sentence-pair tasks), ``hub`` (MTEB's copies on the HuggingFace hub, and GLUE, SNLI and MultiNLI),
``mteb`` (any MTEB STS task and the declared PairClassification tasks, through MTEB's task
objects) and the two a task names itself, ``file`` and ``hf`` (``--tasks file:PATH``,
``hf:DIR_OR_ID``). Another source is registered from Python (``SOURCES.register("mine",
Source(...))``) or by an installed package's entry point in ``sts_bench.sources`` (``mine =
"package.module:SOURCE"``); it is then a ``--source`` choice with its own ``--data-dir mine=DIR``.
Shared parsing lives in :mod:`.rows`, :mod:`.columns` and (labelled pairs) :mod:`.labels`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from harness.core.data.splits import SplitData, TaskSpec
from harness.core.errors import flag
from harness.core.registry import Registry

Loader = Callable[[TaskSpec, Sequence[str], str | None], dict[str, SplitData]]
Finder = Callable[[str, bool], TaskSpec | None]


@dataclass(frozen=True)
class Source:
    """A place tasks are read from.

    ``load(spec, splits, location)`` returns the requested splits it has (the eval split must be
    among them); ``location`` is the source's entry of the run's location mapping, or None.
    ``location`` here says in a few words what that entry is ("SentEval's data/downstream
    folder"); "" for a source that reads none (``packaged``, and ``file``/``hf``, whose tasks name
    their own). ``needs_location``: a run of this source without one is refused before it loads.
    ``falls_back_to``: other sources whose location it reads when it has none of its own (``mteb``
    reads the hub's: both lay out ``<dataset>/<split>.jsonl``). ``flag``: an older flag that sets
    its location (``--senteval-dir``), which its messages name. ``find(name, exact)``: a task it
    knows beyond the declared ones (``mteb``: any MTEB STS task) or None. ``run_wide``: False for a
    source that only a task names (``file:``, ``hf:``), never ``--source``.
    """

    name: str
    summary: str
    load: Loader
    location: str = ""
    needs_location: bool = False
    falls_back_to: tuple[str, ...] = ()
    flag: str = ""
    find: Finder | None = None
    run_wide: bool = True

    def location_in(self, locations: Mapping[str, str]) -> str | None:
        """This source's location in the run's mapping: its own entry, else the first source it
        falls back to that has one; None without."""
        for name in (self.name, *self.falls_back_to):
            if locations.get(name):
                return locations[name]
        return None

    def spelled(self, value: str = "DIR") -> str:
        """How the user gives this source's location, as messages name it: its older flag
        (``--senteval-dir DIR``; a Python caller's spelling inside :func:`~harness.core.errors.
        spelled`), else ``--data-dir NAME=DIR``."""
        if self.flag:
            return flag(self.flag, value)
        return f"--data-dir {self.name}={value}"


def _check(name: str, source: object) -> str | None:
    if not isinstance(source, Source):
        return f"expected a harness.core.data.sources.Source, got {type(source).__name__}"
    if source.name != name:
        return f"its Source is named '{source.name}'; register it under that name"
    loader: object = source.load  # a plugin's Source may hold anything
    if not callable(loader):
        return "its load is not a function load(spec, splits, location)"
    if source.needs_location and not source.location:
        return "it needs a location but does not say what it is (location='...')"
    return None


# The built-in sources' modules, each with a ``SOURCE``: adding one is a module and a word here.
BUILTIN = ("packaged", "senteval", "glue", "hub", "mteb_tasks", "files", "hf_dataset")


def _builtins(registry: Registry[Source]) -> None:
    for module in BUILTIN:
        source = importlib.import_module(f"{__name__}.{module}").SOURCE
        registry.register(source.name, source)


SOURCES: Registry[Source] = Registry(
    "source", check=_check, group="sts_bench.sources", builtins=_builtins
)


def run_sources() -> tuple[str, ...]:
    """The names ``--source`` takes: every source but those only a task names (``file``,
    ``hf``)."""
    return tuple(name for name, source in SOURCES.items() if source.run_wide)


def located() -> tuple[str, ...]:
    """The sources that read a location: the names ``--data-dir SOURCE=DIR`` takes."""
    return tuple(name for name, source in SOURCES.items() if source.location)
