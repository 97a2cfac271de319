"""MTEB's copies of the STS tasks on the HuggingFace hub, read with ``datasets.load_dataset``.

Each dataset has columns ``sentence1``, ``sentence2``, ``score`` and is pinned to the revision MTEB
pins. These copies are raw text (not SentEval's tokenized, lowercased text), store every STS year as
one split without subset labels, and SICK-R's test split is all 9,927 SICK pairs: scores from this
source are comparable with MTEB's, not with SentEval-based papers.

A task's ``hub`` entry names its dataset: ``{"path": "mteb/sts12-sts", "revision": "...",
"splits": ["test"]}`` (``splits``: those the dataset has, default test only).

The source's location (``--data-dir hub=DIR``, or ``--hub-root DIR``) replaces the hub by a local
folder: ``<DIR>/<dataset name>/`` (e.g. ``sts12-sts/test.jsonl``) with the same columns, read by the
same ``load_dataset`` call.

Labelled pairs (tasks of kind ``pairclass``, ``harness/core/data/tasks.toml``) name more in
their entry: the dataset's ``config``, ``splits`` as a mapping ours → the hub's (``{"dev":
"validation"}``), their ``columns`` (first sentence, second sentence, label: the label a class
index, ``ClassLabel`` order), ``drop`` (label values left out: SNLI's -1) and ``or`` (other
datasets with the same pairs, read from a local folder that lacks the first: MNLI from
``multi_nli/`` without ``glue/mnli/``). GLUE (``nyu-mll/glue``), SNLI (``stanfordnlp/snli``),
MultiNLI (``nyu-mll/multi_nli``) and MTEB's PairClassification copies are read so. Locally a
dataset is ``<DIR>/<dataset name>/<config>/`` (or ``<dataset name>/`` itself, or its ``data/``)
holding ``<split>.jsonl``, ``<split>-*.parquet`` (a snapshot of the hub repository) and the like,
or a ``save_to_disk`` folder. MTEB's older copies store a split as one row of lists; such a row is
read as the split's rows, as MTEB reads it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.core.data.sources import Source
from harness.core.data.sources.labels import PairRows, unpack_single_row
from harness.core.data.sources.rows import check_sentence, parse_score
from harness.core.data.splits import SplitData, TaskSpec
from harness.core.errors import UserError, flag
from harness.core.kinds import kind_of

# MTEB names the STS-B dev split "validation".
HUB_SPLIT_NAMES = {"train": "train", "dev": "validation", "test": "test"}
COLUMNS = ("sentence1", "sentence2", "score")


def load(spec: TaskSpec, splits: Sequence[str], location: str | None) -> dict[str, SplitData]:
    place = spec.place(SOURCE.name)
    if place is None:
        raise UserError(f"{spec.title} has no dataset on the hub declared (its 'hub' entry)")
    if kind_of(spec).labelled:
        return load_pairs(spec, place, splits, location)
    hub_path, hub_revision = str(place["path"]), str(place.get("revision", ""))
    hub_splits = tuple(place.get("splits", ("test",)))

    from datasets import load_dataset

    from harness.core.hub import first_line, once

    revision: str | None
    if location:
        path = Path(location).expanduser() / hub_path.split("/")[-1]
        if not path.is_dir():
            raise UserError(
                f"{SOURCE.flag}: {path} does not exist; it should hold {hub_path}'s files with "
                f"columns {', '.join(COLUMNS)}"
            )
        location, revision = str(path), None
    else:
        location, revision = hub_path, hub_revision
    out: dict[str, SplitData] = {}
    for split in splits:
        if split not in hub_splits:
            continue
        hub_split = HUB_SPLIT_NAMES[split]
        # mypy cannot infer a lambda whose default argument binds the loop variable against once()'s
        # Callables
        rows = once(
            ("dataset", location, revision, hub_split),
            lambda hub_split=hub_split: load_dataset(location, revision=revision, split=hub_split),  # type: ignore[misc]
            lambda err, hub_split=hub_split: (
                f"could not load {location} (split {hub_split}) from the hub: "  # type: ignore[misc]
                f"{first_line(err)}; offline, use --source senteval --senteval-dir DIR or "
                "--hub-root DIR"
            ),
        )
        missing = [c for c in COLUMNS if c not in rows.column_names]
        if missing:
            raise UserError(
                f"{location} split {hub_split}: missing column(s) {', '.join(missing)}; expected "
                f"{', '.join(COLUMNS)}"
            )
        s1, s2, gold, wheres = [], [], [], []
        for i, (a, b, score) in enumerate(zip(rows["sentence1"], rows["sentence2"], rows["score"])):
            where = f"{location} [{hub_split}] row {i}"
            s1.append(check_sentence(str(a or ""), where, "sentence1"))
            s2.append(check_sentence(str(b or ""), where, "sentence2"))
            gold.append(parse_score(str(score), where))
            wheres.append(where)
        origin = f"{hub_path}@{revision}" if revision else location
        out[split] = SplitData(
            tuple(s1), tuple(s2), tuple(gold), None, origin=origin, where=tuple(wheres)
        )
    return out


# The data files of one split in a local copy of a hub dataset: <split>.jsonl,
# <split>-00000-of-00001.parquet (a snapshot of the hub repository) ...
FORMATS = {"parquet": "parquet", "jsonl": "json", "json": "json", "csv": "csv"}


def _split_files(folder: Path, split: str) -> list[Path]:
    pattern = re.compile(rf"^{re.escape(split)}(?:-[^.]*)?\.(parquet|jsonl|json|csv)(?:\.gz)?$")
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and pattern.match(p.name))


def _data_folders(root: Path, place: Mapping[str, Any]) -> list[Path]:
    """Where a local copy of ``place``'s dataset may keep its splits, in order: its config's
    folder when there is one, else the dataset's folder and its ``data/``."""
    folder = root / str(place["path"]).split("/")[-1]
    config = str(place.get("config", ""))
    if config and (folder / config).is_dir():
        return [folder / config]
    return [folder, folder / "data"]


def _holds(root: Path, place: Mapping[str, Any]) -> bool:
    """A local copy of ``place``'s dataset is there: a save_to_disk folder or a split's files."""
    return any(
        (d / "dataset_dict.json").is_file()
        or any(_split_files(d, s) for s in place["splits"].values())
        for d in _data_folders(root, place)
    )


def _local_split(root: Path, place: Mapping[str, Any], hub_split: str) -> tuple[Any, str]:
    """One split of a local copy of a hub dataset, and the folder it came from."""
    from datasets import load_dataset, load_from_disk

    from harness.core.hub import first_line

    folders = _data_folders(root, place)
    for folder in folders:
        try:
            if (folder / "dataset_dict.json").is_file():
                saved = load_from_disk(str(folder))
                if hub_split in saved:
                    return saved[hub_split], str(folder)
                continue
            files = _split_files(folder, hub_split)
            if files:
                kind = files[0].name.removesuffix(".gz").rsplit(".", 1)[1]
                paths = [str(p) for p in files if p.name.removesuffix(".gz").endswith(kind)]
                builder = FORMATS[kind]
                rows = load_dataset(builder, data_files={hub_split: paths}, split=hub_split)
                return rows, str(folder)
        except Exception as err:  # an unreadable file: one line naming the folder
            raise UserError(
                f"{flag(SOURCE.flag)}: cannot read {folder} ({first_line(err)})"
            ) from None
    where = " or ".join(str(f) for f in folders if f.is_dir()) or str(folders[0])
    raise UserError(
        f"{flag(SOURCE.flag)}: {where} holds no {hub_split} split of {place['path']} (expected "
        f"{hub_split}.jsonl, {hub_split}-*.parquet or .csv files, or a save_to_disk folder)"
    )


def load_pairs(
    spec: TaskSpec, place: Mapping[str, Any], splits: Sequence[str], location: str | None
) -> dict[str, SplitData]:
    """The labelled pairs of a pairclass task's hub dataset, or of its local copy."""
    from harness.core.hub import first_line, once

    root = Path(location).expanduser() if location else None
    chosen = place
    if root is not None:
        options = [place, *place.get("or", ())]
        found = next((option for option in options if _holds(root, option)), None)
        if found is None:
            names = " or ".join(
                str(_data_folders(root, option)[0].relative_to(root)) + "/" for option in options
            )
            raise UserError(
                f"{flag(SOURCE.flag, str(root))}: found no {names} holding {spec.title}'s data "
                f"({place['path']}: <split>.jsonl or <split>-*.parquet files, or a save_to_disk "
                "folder)"
            )
        chosen = found
    path, config = str(chosen["path"]), str(chosen.get("config", "")) or None
    revision = str(chosen.get("revision", "")) or None
    hub_splits: Mapping[str, str] = chosen["splits"]
    s1_col, s2_col, label_col = (str(c) for c in chosen["columns"])
    drop = set(chosen.get("drop", ()))
    out: dict[str, SplitData] = {}
    for split in splits:
        if split not in spec.splits or split not in hub_splits:
            continue
        hub_split = hub_splits[split]
        if root is not None:
            rows, origin = _local_split(root, chosen, hub_split)
        else:
            from datasets import load_dataset

            rows = once(
                ("dataset", path, config, revision, hub_split),
                lambda hub_split=hub_split: load_dataset(  # type: ignore[misc]
                    path, config, revision=revision, split=hub_split
                ),
                lambda err, hub_split=hub_split: (  # type: ignore[misc]
                    f"could not load {path} ({config or 'default'}, split {hub_split}) from the "
                    f"hub: {first_line(err)}; offline, use {flag('--hub-root', 'DIR')} holding "
                    f"{path.split('/')[-1]}/"
                ),
            )
            origin = f"{path}[{config}]" if config else path
            origin += f"@{revision}" if revision else ""
        missing = [c for c in (s1_col, s2_col, label_col) if c not in rows.column_names]
        if missing:
            raise UserError(
                f"{origin} split {hub_split}: missing column(s) {', '.join(missing)}; expected "
                f"{s1_col}, {s2_col}, {label_col}"
            )
        columns = unpack_single_row({c: list(rows[c]) for c in (s1_col, s2_col, label_col)})
        pairs = PairRows(spec)
        for i, (a, b, label) in enumerate(
            zip(columns[s1_col], columns[s2_col], columns[label_col])
        ):
            if label in drop:
                continue
            pairs.add(a, b, label, f"{origin} [{hub_split}] row {i}", (s1_col, s2_col))
        out[split] = pairs.result(origin)
    return out


SOURCE = Source(
    "hub",
    "MTEB's copies on the HuggingFace hub, at MTEB's pinned revisions; GLUE, SNLI, MultiNLI",
    load,
    location="a folder standing in for the hub: <dataset>/<split>.jsonl (also --fit-set nli's)",
    flag="--hub-root",
)
