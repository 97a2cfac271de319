"""The tasks, declared as data (the STS tasks here, the pair-classification tasks in
:mod:`.pair_tasks`), and loading a task from a source.

A task is declared once (a :class:`TaskSpec` in :data:`TASKS`: name, splits, kind, main score,
citation, gold range, and per source where that source finds its rows) and read from the run's
source (:data:`harness.core.data.sources.SOURCES`: ``packaged``, ``senteval``, ``hub``, ``mteb``,
or one registered), or brings its own (``--tasks file:PATH``, ``hf:DIR_OR_ID``: :mod:`.declared`);
what comes back is the same shape whatever the source (:mod:`harness.core.data.splits`). A task of
an existing source is one declaration, here or from Python (:func:`declare_task`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from harness.core.data.declared import is_declared, parse_entry
from harness.core.data.pair_tasks import PAIR_TASKS
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


TASKS: Registry[TaskSpec] = Registry("task", check=_check_task)


def declare_task(spec: TaskSpec) -> TaskSpec:
    """Declare ``spec`` as a task every run of this process can name (``--tasks NAME``), read
    from whichever source its ``where`` has an entry for; refused with one line that says why."""
    return TASKS.register(spec.name, spec)


# Dataset revisions are the ones MTEB pins, so our `hub` numbers are comparable with MTEB's.
declare_task(
    TaskSpec(
        name="sts12",
        title="STS12",
        description="SemEval-2012 STS: MSRpar, MSRvid, SMTeuroparl, OnWN, SMTnews (3108 pairs)",
        citation="Agirre et al. 2012, SemEval-2012 Task 6: A Pilot on Semantic Textual Similarity",
        in_stsb=True,
        where={
            "senteval": {
                "folder": "STS/STS12-en-test",
                "subsets": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
            },
            "hub": {
                "path": "mteb/sts12-sts",
                "revision": "a0d554a64d88156834ff5ae9920b964011b16384",
            },
            "mteb": {"name": "STS12"},
        },
    )
)
declare_task(
    TaskSpec(
        name="sts13",
        title="STS13",
        description="SemEval-2013 STS without the licensed SMT subset: FNWN, headlines, OnWN "
        "(1500)",
        citation="Agirre et al. 2013, *SEM 2013 shared task: Semantic Textual Similarity",
        in_stsb=True,
        where={
            "senteval": {"folder": "STS/STS13-en-test", "subsets": ("FNWN", "headlines", "OnWN")},
            "hub": {
                "path": "mteb/sts13-sts",
                "revision": "7e90230a92c190f1bf69ae9002b8cea547a64cca",
            },
            "mteb": {"name": "STS13"},
        },
    )
)
declare_task(
    TaskSpec(
        name="sts14",
        title="STS14",
        description="SemEval-2014 STS: forums, news, headlines, images, OnWN, tweets (3750)",
        citation="Agirre et al. 2014, SemEval-2014 Task 10: Multilingual Semantic Textual "
        "Similarity",
        in_stsb=True,
        where={
            "senteval": {
                "folder": "STS/STS14-en-test",
                "subsets": (
                    "deft-forum",
                    "deft-news",
                    "headlines",
                    "images",
                    "OnWN",
                    "tweet-news",
                ),
            },
            "hub": {
                "path": "mteb/sts14-sts",
                "revision": "6031580fec1f6af667f0bd2da0a551cf4f0b2375",
            },
            "mteb": {"name": "STS14"},
        },
    )
)
declare_task(
    TaskSpec(
        name="sts15",
        title="STS15",
        description="SemEval-2015 STS: answers-forums/-students, belief, headlines, images (3000)",
        citation="Agirre et al. 2015, SemEval-2015 Task 2: Semantic Textual Similarity, English, "
        "Spanish and Pilot on Interpretability",
        in_stsb=True,
        where={
            "senteval": {
                "folder": "STS/STS15-en-test",
                "subsets": (
                    "answers-forums",
                    "answers-students",
                    "belief",
                    "headlines",
                    "images",
                ),
            },
            "hub": {
                "path": "mteb/sts15-sts",
                "revision": "ae752c7c21bf194d8b67fd573edf7ae58183cbe3",
            },
            "mteb": {"name": "STS15"},
        },
    )
)
declare_task(
    TaskSpec(
        name="sts16",
        title="STS16",
        description="SemEval-2016 STS: answer-answer, headlines, plagiarism, postediting, q-q "
        "(1186)",
        citation="Agirre et al. 2016, SemEval-2016 Task 1: Semantic Textual Similarity, "
        "Monolingual and Cross-Lingual Evaluation",
        in_stsb=True,
        where={
            "senteval": {
                "folder": "STS/STS16-en-test",
                "subsets": (
                    "answer-answer",
                    "headlines",
                    "plagiarism",
                    "postediting",
                    "question-question",
                ),
            },
            "hub": {
                "path": "mteb/sts16-sts",
                "revision": "4d8694f8f0e0100860b497b999b3dbed754a0513",
            },
            "mteb": {"name": "STS16"},
        },
    )
)
declare_task(
    TaskSpec(
        name="stsb",
        title="STS-B",
        description="STS Benchmark (Cer et al. 2017): train 5749 / dev 1500 / test 1379 pairs",
        splits=("train", "dev", "test"),
        citation="Cer et al. 2017, SemEval-2017 Task 1: Semantic Textual Similarity Multilingual "
        "and Crosslingual Focused Evaluation",
        where={
            "packaged": {"folder": "sts_b"},
            "senteval": {"folder": "STS/STSBenchmark", "layout": "stsb"},
            "hub": {
                "path": "mteb/stsbenchmark-sts",
                "revision": "b0fddb56ed78048fa8b90373c8a3cfc37b684831",
                "splits": ("train", "dev", "test"),
            },
            "mteb": {"name": "STSBenchmark"},
        },
    )
)
declare_task(
    TaskSpec(
        name="sickr",
        title="SICK-R",
        description="SICK relatedness: SentEval test 4927 pairs; MTEB's hub copy is all 9927",
        splits=("train", "dev", "test"),
        citation="Marelli et al. 2014, A SICK cure for the evaluation of compositional "
        "distributional semantic models",
        gold_range=(1.0, 5.0),
        where={
            "senteval": {"folder": "SICK", "layout": "sick"},
            "hub": {
                "path": "mteb/sickr-sts",
                "revision": "20a6d6f312dd54037fe07a32d58e5e168867909d",
            },
            "mteb": {"name": "SICK-R"},
        },
    )
)

# The sentence-pair classification tasks (GLUE, SNLI, MTEB's PairClassification): .pair_tasks
for _spec in PAIR_TASKS:
    declare_task(_spec)

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
