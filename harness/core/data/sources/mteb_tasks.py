"""MTEB's STS tasks as a source: any task of MTEB's task registry whose type is STS (STS17, STS22,
BIOSSES, STSBenchmarkMultilingualSTS, ...), read through MTEB's own task objects; and the
PairClassification tasks declared as sts-bench tasks (``harness/core/data/tasks.toml``:
SprintDuplicateQuestions, TwitterSemEval2015, TwitterURLCorpus), whose pairs carry a 0/1 label.

The task object decides everything MTEB decides: the dataset and its pinned revision, the column
names, the ``dataset_transform`` and the language subsets (``hf_subsets``); a declared task's
``mteb`` entry names it (``{"name": "STSBenchmark"}``). Without a location the data comes from
``task.load_data()`` (the hub, or offline the HuggingFace datasets cache that an earlier MTEB run
filled). With one (``--data-dir mteb=DIR``, else the hub's: ``--data-dir hub=DIR``, ``--hub-root
DIR``) it comes from local files laid out as the hub source's:
``<DIR>/<dataset name>/<split>.jsonl``, and for multilingual tasks
``<DIR>/<dataset name>/<hf_subset>/<split>.jsonl``; MTEB's ``dataset_transform`` still runs.

A task of several language subsets keeps them as subset labels (``en-en``, ``de-en``...): MTEB
scores each subset on its own and averages them, which is ``--aggregation mean`` here.
Gold scores are read as stored (MTEB rescales them linearly, which changes no correlation) and
checked against the range the task declares (``min_score``, ``max_score``). A PairClassification
task's labels are its gold (the class index: 1 is the positive class, as MTEB's evaluator reads
it); its older datasets store a split as one row of lists, read as the split's rows as MTEB does.

``mteb`` is imported only when this source is used: importing it takes seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.core.data.sources import Source
from harness.core.data.sources.labels import PairRows, unpack_single_row
from harness.core.data.sources.rows import check_sentence, parse_score
from harness.core.data.splits import LoadedTask, SplitData, TaskSpec, unique
from harness.core.errors import UserError, did_you_mean, flag
from harness.core.kinds import kind_of
from harness.core.kinds.pairclass import LABELLED

# sts-bench split → the names MTEB's datasets use for it, in order of preference.
SPLIT_NAMES = {"train": ("train",), "dev": ("validation", "dev"), "test": ("test",)}
SPLITS = ("train", "dev", "test")


def _sts_task_names() -> list[str]:
    import mteb

    return sorted(task.metadata.name for task in mteb.get_tasks(task_types=["STS"]))


def _our_split(mteb_split: str) -> str:
    return next((ours for ours, names in SPLIT_NAMES.items() if mteb_split in names), mteb_split)


def task_spec(name: str, exact: bool = True) -> TaskSpec | None:
    """A TaskSpec built from the metadata of MTEB's task ``name``; None when MTEB has no such name
    (``exact``), a one-line error naming the closest STS tasks otherwise."""
    names = _sts_task_names()
    match = name if name in names else None
    if match is None and not exact:
        folded = [n for n in names if n.casefold() == name.casefold()]
        match = folded[0] if len(folded) == 1 else None
    if match is None and exact:
        return None
    if match is None:
        import mteb

        try:
            mteb.get_task(name)
        except KeyError:
            raise UserError(
                f"unknown MTEB STS task '{name}'{did_you_mean(name, names)}; MTEB's STS tasks are: "
                f"{', '.join(names)}"
            ) from None
        match = name  # MTEB knows it, as another type of task: mteb_task says which
    return spec_from_task(mteb_task(match))


def mteb_task(name: str, pairs: bool = False) -> Any:
    """MTEB's task object for ``name``; a one-line error if it is unknown or not an STS task (or,
    with ``pairs``, a PairClassification task: one sts-bench declares as a pairclass task)."""
    import mteb
    from mteb.abstasks.pair_classification import AbsTaskPairClassification
    from mteb.abstasks.sts import AbsTaskSTS

    try:
        task = mteb.get_task(name)
    except KeyError:
        names = _sts_task_names()
        raise UserError(
            f"unknown MTEB task '{name}'{did_you_mean(name, names)}; --source mteb reads MTEB's "
            "STS tasks"
        ) from None
    if pairs and isinstance(task, AbsTaskPairClassification):
        return task
    if not isinstance(task, AbsTaskSTS):
        raise UserError(
            f"MTEB task {name} is a {task.metadata.type} task; --source mteb reads STS tasks "
            "(sentence pairs with a gold score) and the PairClassification tasks declared as "
            "sts-bench tasks (see --list)"
        )
    return task


def spec_from_task(task: Any) -> TaskSpec:
    """The TaskSpec of an MTEB task object: its name, description, dataset and revision, eval
    split; a PairClassification task's is a pairclass task with classes negative / positive (its
    labels 0 / 1), ranked by average precision, with no threshold split."""
    meta = task.metadata
    eval_split = next((s for s in meta.eval_splits if _our_split(s) == "test"), meta.eval_splits[0])
    description = " ".join(str(meta.description).split())
    subsets = f"; {len(task.hf_subsets)} language subsets" if len(task.hf_subsets) > 1 else ""
    kind: dict[str, Any] = {"gold_range": gold_range(task)}
    if _is_pairs(task):
        kind = {
            "kind": LABELLED.name,
            "main_score": LABELLED.main_default,
            "classes": ("negative", "positive"),
            "positive": "positive",
            "gold_range": (0.0, 1.0),
        }
    return TaskSpec(
        name=meta.name,
        title=meta.name,
        description=f"MTEB {meta.type}: {description[:90]}{subsets}",
        splits=SPLITS,
        eval_split=_our_split(eval_split),
        where={"mteb": {"name": meta.name}},
        **kind,
    )


def _is_pairs(task: Any) -> bool:
    from mteb.abstasks.pair_classification import AbsTaskPairClassification

    return isinstance(task, AbsTaskPairClassification)


def gold_range(task: Any) -> tuple[float, float]:
    """The scale MTEB declares for a task (``AbsTaskSTS.min_score``/``max_score``: 0-5 by default,
    -1..1 for RUParaPhraserSTS), so its gold scores are checked against what the task itself
    says."""
    low, high = getattr(task, "min_score", 0), getattr(task, "max_score", 5)
    return float(low), float(high)


def load(spec: TaskSpec, splits: Sequence[str], location: str | None) -> dict[str, SplitData]:
    task = loaded_mteb_task(spec.mteb_name or spec.name, location, pairs=kind_of(spec).labelled)
    path = str(task.metadata.dataset["path"])
    origin = (
        str(Path(location).expanduser() / path.split("/")[-1])
        if location
        else f"{path}@{task.metadata.dataset.get('revision') or ''}"
    )
    if _is_pairs(task) != kind_of(spec).labelled:
        raise UserError(
            f"{spec.title} is a {spec.kind} task but MTEB's {task.metadata.name} is a "
            f"{task.metadata.type} task; its 'mteb' entry names the wrong task"
        )
    return split_data(task, splits, origin, spec)


def loaded_mteb_task(name: str, location: str | None = None, pairs: bool = False) -> Any:
    """MTEB's task ``name`` with its data loaded: from ``location``'s local files when given, else
    through ``task.load_data()`` (the hub, or the datasets cache), tried once per process."""
    task = mteb_task(name, pairs)
    if location:
        _load_local(task, Path(location).expanduser())
    elif not task.data_loaded:
        from harness.core.hub import first_line, once

        path, revision = task.metadata.dataset["path"], task.metadata.dataset.get("revision")
        once(
            ("mteb", task.metadata.name, revision),
            task.load_data,
            lambda err: (
                f"could not load MTEB task {task.metadata.name} ({path}@{revision}): "
                f"{first_line(err)}; offline, pass {flag('--hub-root', 'DIR')} holding "
                f"{str(path).split('/')[-1]}/ (see --source hub) or run once online to fill the "
                "datasets cache"
            ),
        )
    return task


def _load_local(task: Any, root: Path) -> None:
    """Fill ``task.dataset`` from ``<root>/<dataset name>/`` and run MTEB's own transform on it."""
    from datasets import load_dataset

    folder = root / str(task.metadata.dataset["path"]).split("/")[-1]
    multilingual = task.metadata.is_multilingual
    try:
        if multilingual:
            task.dataset = {
                subset: load_dataset(str(folder / subset))
                for subset in task.hf_subsets
                if (folder / subset).is_dir()
            }
            if not task.dataset:
                raise FileNotFoundError(
                    f"no subset folder ({', '.join(task.hf_subsets[:4])}, ...) in {folder}"
                )
            task.hf_subsets = [s for s in task.hf_subsets if s in task.dataset]
        else:
            task.dataset = load_dataset(str(folder))
    # missing folder, unreadable files: one line naming the layout expected
    except Exception as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
        layout = "<subset>/<split>.jsonl" if multilingual else "<split>.jsonl"
        columns = "sent1, sent2, labels" if _is_pairs(task) else "sentence1, sentence2, score"
        raise UserError(
            f"{flag('--hub-root')}: cannot read {folder} ({first}); it should hold {layout} with "
            f"columns {columns}"
        ) from None
    task.dataset_transform()
    task.data_loaded = True


def split_data(
    task: Any, splits: Sequence[str], origin: str, spec: TaskSpec | None = None
) -> dict[str, SplitData]:
    """The pairs of each requested split of a loaded MTEB task; language subsets become subset
    labels. A PairClassification task's labels are read as class indices of ``spec`` (default:
    :func:`spec_from_task`'s)."""
    if _is_pairs(task):
        return _pair_split_data(task, splits, origin, spec or spec_from_task(task))
    columns = type(task).column_names
    if not all(isinstance(c, str) for c in columns):
        raise UserError(
            f"MTEB task {task.metadata.name} compares non-text inputs; sts-bench reads text pairs "
            "only"
        )
    subsets = list(task.hf_subsets) if task.metadata.is_multilingual else ["default"]
    out: dict[str, SplitData] = {}
    for split in splits:
        s1: list[str] = []
        s2: list[str] = []
        gold: list[float] = []
        labels: list[str] = []
        for subset in subsets:
            data = task.dataset[subset] if task.metadata.is_multilingual else task.dataset
            name = next((n for n in SPLIT_NAMES.get(split, (split,)) if n in data), None)
            if name is None:
                continue
            rows = data[name]
            missing = [c for c in (*columns, "score") if c not in rows.column_names]
            if missing:
                raise UserError(
                    f"{origin} [{subset}/{name}]: missing column(s) {', '.join(missing)}"
                )
            for i, (a, b, score) in enumerate(
                zip(rows[columns[0]], rows[columns[1]], rows["score"])
            ):
                where = f"{origin} [{subset}/{name}] row {i}"
                s1.append(check_sentence(str(a or ""), where, columns[0]))
                s2.append(check_sentence(str(b or ""), where, columns[1]))
                gold.append(parse_score(str(score), where))
                labels.append(subset)
        if s1:
            keep = labels if len(unique(labels)) > 1 or task.metadata.is_multilingual else None
            out[split] = SplitData(
                tuple(s1), tuple(s2), tuple(gold), tuple(keep) if keep else None, origin=origin
            )
    return out


def _pair_split_data(
    task: Any, splits: Sequence[str], origin: str, spec: TaskSpec
) -> dict[str, SplitData]:
    """The labelled pairs of each requested split of a loaded PairClassification task (one
    subset: the declared ones are English only)."""
    columns = (task.input1_column_name, task.input2_column_name, task.label_column_name)
    if not all(isinstance(c, str) for c in columns):
        raise UserError(
            f"MTEB task {task.metadata.name} compares non-text inputs; sts-bench reads text pairs "
            "only"
        )
    if task.metadata.is_multilingual:
        raise UserError(
            f"MTEB task {task.metadata.name} has language subsets; sts-bench reads single-subset "
            "PairClassification tasks only"
        )
    out: dict[str, SplitData] = {}
    for split in splits:
        name = next((n for n in SPLIT_NAMES.get(split, (split,)) if n in task.dataset), None)
        if name is None:
            continue
        rows = task.dataset[name]
        missing = [c for c in columns if c not in rows.column_names]
        if missing:
            raise UserError(f"{origin} [{name}]: missing column(s) {', '.join(missing)}")
        data = unpack_single_row({c: list(rows[c]) for c in columns})
        pairs = PairRows(spec)
        for i, (a, b, label) in enumerate(zip(*(data[c] for c in columns))):
            pairs.add(a, b, label, f"{origin} [{name}] row {i}", (columns[0], columns[1]))
        out[split] = pairs.result(origin)
    return out


def loaded_task(task: Any) -> LoadedTask:
    """An MTEB task object whose data is loaded (or set directly, as MTEB's tests do), as
    sts-bench's ``LoadedTask``: what fit sets (``target``, ``test``...) are built from."""
    if not task.data_loaded and task.dataset is None:
        raise UserError(
            f"MTEB task {task.metadata.name} has no data loaded; call task.load_data() or set "
            "task.dataset"
        )
    spec = spec_from_task(task)
    # The eval split first, as a run loads them: fit sets keep the same sentence order either way.
    splits = unique([spec.eval_split, *SPLITS])
    return LoadedTask(
        spec=spec, source="mteb", splits=split_data(task, splits, f"mteb:{task.metadata.name}")
    )


SOURCE = Source(
    "mteb",
    "any MTEB STS task by its name, and the declared PairClassification tasks, read through "
    "MTEB's own task objects",
    load,
    location="a folder standing in for the hub, laid out as hub's (default: hub's)",
    falls_back_to=("hub",),
    flag="--hub-root",
    find=task_spec,
)
