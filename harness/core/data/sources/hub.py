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
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.core.data.sources import Source
from harness.core.data.sources.rows import check_sentence, parse_score
from harness.core.data.splits import SplitData, TaskSpec
from harness.core.errors import UserError

# MTEB names the STS-B dev split "validation".
HUB_SPLIT_NAMES = {"train": "train", "dev": "validation", "test": "test"}
COLUMNS = ("sentence1", "sentence2", "score")


def load(spec: TaskSpec, splits: Sequence[str], location: str | None) -> dict[str, SplitData]:
    place = spec.place(SOURCE.name)
    if place is None:
        raise UserError(f"{spec.title} has no dataset on the hub declared (its 'hub' entry)")
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


SOURCE = Source(
    "hub",
    "MTEB's copies on the HuggingFace hub, at MTEB's pinned revisions",
    load,
    location="a folder standing in for the hub: <dataset>/<split>.jsonl (also --fit-set nli's)",
    flag="--hub-root",
)
