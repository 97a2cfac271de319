"""The STS task registry and loading a task from a source.

A task is named once (``TaskSpec``) and can be read from the run's source (``packaged``,
``senteval``, ``hub``, ``mteb``), or brings its own (``--tasks file:PATH``, ``hf:DIR_OR_ID``:
:mod:`.declared`); what comes back is the same shape whatever the source
(:mod:`harness.core.data.splits`).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence

from harness.core.data.declared import is_declared, parse_entry
from harness.core.data.splits import LoadedTask, SplitData, TaskSpec
from harness.core.errors import UserError, did_you_mean

# Each source is a module with ``load(spec, splits, *, senteval_dir=None, hub_root=None)`` returning
# {split: SplitData}; adding a source is one module and one line here. A source that knows tasks
# beyond TASKS (mteb: any MTEB STS task) also has ``task_spec(name, exact) -> TaskSpec | None``.
SOURCE_MODULES = {
    "packaged": "harness.core.data.sources.packaged",
    "senteval": "harness.core.data.sources.senteval",
    "hub": "harness.core.data.sources.hub",
    "mteb": "harness.core.data.sources.mteb_tasks",
}
SOURCES = tuple(SOURCE_MODULES)
# Sources a task names for itself (``file:PATH``, ``hf:DIR_OR_ID``), never a run's --source.
OWN_SOURCE_MODULES = {
    "file": "harness.core.data.sources.files",
    "hf": "harness.core.data.sources.hf_dataset",
}
log = logging.getLogger("sts_bench.tasks")


# Dataset revisions are the ones MTEB pins, so our `hub` numbers are comparable with MTEB's.
TASKS: dict[str, TaskSpec] = {
    "sts12": TaskSpec(
        "sts12",
        "STS12",
        "SemEval-2012 STS: MSRpar, MSRvid, SMTeuroparl, OnWN, SMTnews (3108 pairs)",
        ("test",),
        "STS/STS12-en-test",
        ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
        "mteb/sts12-sts",
        "a0d554a64d88156834ff5ae9920b964011b16384",
        in_stsb=True,
        mteb_name="STS12",
    ),
    "sts13": TaskSpec(
        "sts13",
        "STS13",
        "SemEval-2013 STS without the licensed SMT subset: FNWN, headlines, OnWN (1500)",
        ("test",),
        "STS/STS13-en-test",
        ("FNWN", "headlines", "OnWN"),
        "mteb/sts13-sts",
        "7e90230a92c190f1bf69ae9002b8cea547a64cca",
        in_stsb=True,
        mteb_name="STS13",
    ),
    "sts14": TaskSpec(
        "sts14",
        "STS14",
        "SemEval-2014 STS: forums, news, headlines, images, OnWN, tweets (3750)",
        ("test",),
        "STS/STS14-en-test",
        ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
        "mteb/sts14-sts",
        "6031580fec1f6af667f0bd2da0a551cf4f0b2375",
        in_stsb=True,
        mteb_name="STS14",
    ),
    "sts15": TaskSpec(
        "sts15",
        "STS15",
        "SemEval-2015 STS: answers-forums/-students, belief, headlines, images (3000)",
        ("test",),
        "STS/STS15-en-test",
        ("answers-forums", "answers-students", "belief", "headlines", "images"),
        "mteb/sts15-sts",
        "ae752c7c21bf194d8b67fd573edf7ae58183cbe3",
        in_stsb=True,
        mteb_name="STS15",
    ),
    "sts16": TaskSpec(
        "sts16",
        "STS16",
        "SemEval-2016 STS: answer-answer, headlines, plagiarism, postediting, q-q (1186)",
        ("test",),
        "STS/STS16-en-test",
        ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
        "mteb/sts16-sts",
        "4d8694f8f0e0100860b497b999b3dbed754a0513",
        in_stsb=True,
        mteb_name="STS16",
    ),
    "stsb": TaskSpec(
        "stsb",
        "STS-B",
        "STS Benchmark (Cer et al. 2017): train 5749 / dev 1500 / test 1379 pairs",
        ("train", "dev", "test"),
        "STS/STSBenchmark",
        (),
        "mteb/stsbenchmark-sts",
        "b0fddb56ed78048fa8b90373c8a3cfc37b684831",
        ("train", "dev", "test"),
        mteb_name="STSBenchmark",
    ),
    "sickr": TaskSpec(
        "sickr",
        "SICK-R",
        "SICK relatedness: SentEval test 4927 pairs; MTEB's hub copy is all 9927",
        ("train", "dev", "test"),
        "SICK",
        (),
        "mteb/sickr-sts",
        "20a6d6f312dd54037fe07a32d58e5e168867909d",
        mteb_name="SICK-R",
        gold_range=(1.0, 5.0),
    ),
}

_ALIASES = {"stsbenchmark": "stsb", "sick": "sickr", "sickrelatedness": "sickr"}


def get_task(name: str, source: str | None = None) -> TaskSpec:
    """Look a task up by name, forgiving case, '-' and '_': ``STS-B`` → ``stsb``, ``SICK-R`` →
    ``sickr``.

    MTEB's names of the registered tasks (``STSBenchmark``) name them too. A source with a
    ``task_spec`` hook (``mteb``) is asked for names the registry does not hold: first for the exact
    name (MTEB's ``STSB`` is C-MTEB's Chinese STS-B, not ``stsb``), then case-insensitively. An
    entry with its own source (``file:pairs.tsv?range=0,1``) is parsed
    (:func:`.declared.parse_entry`) and must not take a registered task's name.
    """
    if is_declared(name):
        return _declared(name)
    for spec in TASKS.values():
        if name == spec.mteb_name:
            return spec
    hook = (
        getattr(importlib.import_module(SOURCE_MODULES[source]), "task_spec", None)
        if source in SOURCE_MODULES
        else None
    )
    if hook is not None and (found := hook(name, exact=True)) is not None:
        return found
    key = name.lower().replace("-", "").replace("_", "")
    key = _ALIASES.get(key, key)
    if key in TASKS:
        return TASKS[key]
    if hook is not None and (found := hook(name, exact=False)) is not None:
        return found
    raise UserError(
        f"unknown task '{name}'{did_you_mean(key, list(TASKS))}; known tasks: {', '.join(TASKS)} "
        "(see --list)"
    )


def _declared(entry: str) -> TaskSpec:
    spec = parse_entry(entry)
    key = spec.name.lower().replace("-", "").replace("_", "")
    if _ALIASES.get(key, key) in TASKS or any(spec.name == t.mteb_name for t in TASKS.values()):
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
    senteval_dir: str | None = None,
    hub_root: str | None = None,
    lenient_gold: bool = False,
) -> LoadedTask:
    """Read ``splits`` of ``spec`` from ``source``; splits the source lacks are skipped silently
    (e.g. MTEB's hub has only the test split of STS12-16), but the eval split must exist. Gold
    scores are checked against the task's range (:func:`check_gold`). A task with its own source
    (``spec.own``) is read from it, whatever ``source`` says."""
    source = spec.source or source
    if source not in SOURCE_MODULES and source not in OWN_SOURCE_MODULES:
        raise UserError(
            f"unknown source '{source}'{did_you_mean(source, SOURCES)}; use one of: "
            f"{', '.join(SOURCES)}"
        )
    module = SOURCE_MODULES.get(source) or OWN_SOURCE_MODULES[source]
    data = importlib.import_module(module).load(
        spec, splits, senteval_dir=senteval_dir, hub_root=hub_root
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
