"""The tasks, declared as data (the built-ins in the packaged ``tasks.toml``: the STS tasks and
the sentence-pair classification tasks), and loading a task from a source.

A task is declared once (a :class:`TaskSpec` in :data:`TASKS`: name, splits, kind, main score,
citation, gold range, and per source where that source finds its rows) and read from the run's
source (:data:`harness.core.data.sources.SOURCES`: ``packaged``, ``senteval``, ``hub``, ``mteb``,
or one registered), or brings its own (``--tasks file:PATH``, ``hf:DIR_OR_ID``: :mod:`.declared`);
what comes back is the same shape whatever the source (:mod:`harness.core.data.splits`). A task of
an existing source is one declaration, a ``[[task]]`` table there or from Python
(:func:`declare_task`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from harness.core.data.declared import is_declared, parse_entry
from harness.core.data.sources import SOURCES, run_sources
from harness.core.data.splits import LoadedTask, SplitData, TaskSpec
from harness.core.errors import UserError, did_you_mean
from harness.core.registry import Registry

log = logging.getLogger("sts_bench.tasks")


def _check_task(name: str, spec: object) -> str | None:
    if not isinstance(spec, TaskSpec):
        return f"expected a TaskSpec, got {type(spec).__name__}"
    if spec.name != name:
        return f"its TaskSpec is named '{spec.name}'; register it under that name"
    from harness.core.kinds import KINDS

    if spec.kind not in KINDS:
        return f"kind '{spec.kind}': the kinds are {', '.join(KINDS)}"
    why = KINDS[spec.kind].check_spec(spec)
    if why:
        return why
    if spec.sides and (len(spec.sides) != 2 or not set(spec.sides) <= {"query", "document"}):
        return f"its sides {spec.sides} are not two of 'query', 'document' (or none: symmetric)"
    if spec.eval_split not in spec.splits:
        return f"its eval split '{spec.eval_split}' is not among its splits {spec.splits}"
    if not spec.gold_range[0] < spec.gold_range[1]:
        return f"its gold range {spec.gold_range} is not LOW < HIGH"
    return None


def _frozen(value: Any) -> Any:
    """TOML's arrays as tuples, as TaskSpec's fields and sources' ``where`` entries hold them."""
    if isinstance(value, dict):
        return {key: _frozen(item) for key, item in value.items()}
    return tuple(_frozen(item) for item in value) if isinstance(value, list) else value


def _builtins(registry: Registry[TaskSpec]) -> None:
    """Declare the built-in tasks, the ``[[task]]`` tables of the packaged ``tasks.toml`` (read on
    the registry's first use, so importing this module reads no file)."""
    import tomllib
    from importlib.resources import files

    text = files("harness.core.data").joinpath("tasks.toml").read_text(encoding="utf-8")
    for entry in tomllib.loads(text)["task"]:
        registry.register(entry["name"], TaskSpec(**_frozen(entry)))


TASKS: Registry[TaskSpec] = Registry("task", check=_check_task, builtins=_builtins)


def declare_task(spec: TaskSpec) -> TaskSpec:
    """Declare ``spec`` as a task every run of this process can name (``--tasks NAME``), read
    from whichever source its ``where`` has an entry for; refused with one line that says why."""
    return TASKS.register(spec.name, spec)


_ALIASES = {"stsbenchmark": "stsb", "sick": "sickr", "sickrelatedness": "sickr"}


def _fold(name: str) -> str:
    key = name.lower().replace("-", "").replace("_", "")
    return _ALIASES.get(key, key)


def _registered(name: str) -> TaskSpec | None:
    """The declared task ``name`` names, forgiving case, '-' and '_' (``STS-B`` → ``stsb``), or
    the one whose MTEB name it is (``STSBenchmark``)."""
    if name in TASKS:
        return TASKS[name]
    for spec in TASKS.values():
        if name == spec.mteb_name:
            return spec
    key = _fold(name)
    return next((spec for spec in TASKS.values() if _fold(spec.name) == key), None)


def get_task(name: str, source: str | None = None) -> TaskSpec:
    """Look a task up by name, forgiving case, '-' and '_': ``STS-B`` → ``stsb``, ``SICK-R`` →
    ``sickr``.

    MTEB's names of the declared tasks (``STSBenchmark``) name them too. A source with a ``find``
    hook (``mteb``) is asked for names the registry does not hold: first for the exact name
    (MTEB's ``STSB`` is C-MTEB's Chinese STS-B, not ``stsb``), then case-insensitively. An entry
    with its own source (``file:pairs.tsv?range=0,1``) is parsed (:func:`.declared.parse_entry`)
    and must not take a declared task's name.
    """
    if is_declared(name):
        return _declared(name)
    if name in TASKS:
        return TASKS[name]
    if any(name == spec.mteb_name for spec in TASKS.values()):
        return next(spec for spec in TASKS.values() if name == spec.mteb_name)
    hook = SOURCES[source].find if source is not None and source in SOURCES else None
    if hook is not None and (found := hook(name, True)) is not None:
        return found
    if (spec := _registered(name)) is not None:
        return spec
    if hook is not None and (found := hook(name, False)) is not None:
        return found
    key = _fold(name)
    raise UserError(
        f"unknown task '{name}'{did_you_mean(key, list(TASKS))}; known tasks: {', '.join(TASKS)} "
        "(see --list)"
    )


def _declared(entry: str) -> TaskSpec:
    spec = parse_entry(entry)
    if _registered(spec.name) is not None:
        raise UserError(
            f"--tasks {entry}: its name '{spec.name}' is a registered task's; its scores would mix "
            "with "
            "that task's in every table: add name=OTHER (e.g. ?name=my-" + spec.name + ")"
        )
    return spec


def check_gold(spec: TaskSpec, split: str, data: SplitData, lenient: bool = False) -> None:
    """Every gold score within the task's range (``TaskSpec.gold_range``): a score outside it is a
    broken file, an error naming its ``file:line`` — or, with ``lenient``, one warning line."""
    low, high = spec.gold_range
    bad = data.outside(low, high)
    if not bad:
        return
    first = (
        f"{data.locate(bad[0])}: gold score {data.gold[bad[0]]:g} is outside {spec.title}'s range "
        f"{low:g}-{high:g}"
    )
    if not lenient:
        more = f" ({len(bad)} such scores in its {split} split)" if len(bad) > 1 else ""
        raise UserError(
            f"{first}{more}; fix the file, or pass --allow-gold-out-of-range to score it anyway"
        )
    log.warning(
        "%s; %d such score(s) in %s %s kept because of --allow-gold-out-of-range",
        first,
        len(bad),
        spec.title,
        split,
    )


def load_task(
    spec: TaskSpec,
    source: str,
    splits: Sequence[str],
    *,
    locations: Mapping[str, str] | None = None,
    lenient_gold: bool = False,
) -> LoadedTask:
    """Read ``splits`` of ``spec`` from ``source``; splits the source lacks are skipped silently
    (e.g. MTEB's hub has only the test split of STS12-16), but the eval split must exist. Gold
    scores are checked against the task's range (:func:`check_gold`). A task with its own source
    (``spec.own``) is read from it, whatever ``source`` says.

    ``locations`` is the run's mapping source → location (``--data-dir SOURCE=DIR``, and the
    older ``--senteval-dir``, ``--hub-root``); the source is given its own entry
    (:meth:`~harness.core.data.sources.Source.location_in`), nothing else."""
    source = spec.source or source
    if source not in SOURCES:
        names = run_sources()
        raise UserError(
            f"unknown source '{source}'{did_you_mean(source, names)}; use one of: "
            f"{', '.join(names)}"
        )
    reader = SOURCES[source]
    location = reader.location_in(locations or {})
    if reader.needs_location and not location:
        raise UserError(f"--source {source} needs {reader.spelled()} ({reader.location})")
    data = reader.load(spec, splits, location)
    if not isinstance(data, dict) or not all(isinstance(v, SplitData) for v in data.values()):
        raise UserError(
            f"source '{source}' returned {type(data).__name__} for {spec.title}; its load must "
            "return a dict of split name -> SplitData"
        )
    if spec.eval_split not in data:
        raise UserError(f"{spec.title}: the {source} source has no '{spec.eval_split}' split")
    if not len(data[spec.eval_split]):
        raise UserError(
            f"{spec.title}: its {spec.eval_split} split ({data[spec.eval_split].origin}) holds no "
            "pair; an empty task cannot be scored: restore the file or leave the task out"
        )
    for split, split_data in data.items():
        check_gold(spec, split, split_data, lenient_gold)
    return LoadedTask(spec=spec, source=source, splits=data)
