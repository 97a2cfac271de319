"""A task's own HuggingFace dataset (``--tasks hf:DIR_OR_ID``): a folder written by
``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk`` (read with ``load_from_disk``, never a
download), a folder of data files (``load_dataset(DIR)``), or a hub id (``load_dataset(ID,
revision=...)``, through :func:`harness.core.hub.once`, so offline it fails with one line).

A ``DatasetDict``'s splits are taken by name (``validation`` is sts-bench's ``dev``; other names are
ignored); a single ``Dataset`` is the scored split, unless a ``split`` column says otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.core.data.declared import SPLIT_NAMES
from harness.core.data.sources import Source
from harness.core.data.sources.columns import PairSplits, find_columns
from harness.core.data.splits import OwnSource, SplitData, TaskSpec
from harness.core.errors import UserError


def load(spec: TaskSpec, splits: Sequence[str], location: str | None) -> dict[str, SplitData]:
    """The pairs of a task that names this source itself; ``location`` is unused (the task
    carries its own, ``spec.own``)."""
    own = spec.own
    assert own is not None and own.kind == "hf"
    data, origin = _open(own)
    parts = (
        [(name, SPLIT_NAMES.get(name.lower())) for name in data]
        if hasattr(data, "keys")
        else [("", None)]
    )
    pairs: PairSplits | None = None
    for name, ours in parts:
        if hasattr(data, "keys") and ours is None:
            continue  # a split sts-bench has no name for
        rows = data[name] if name else data
        label = f"{origin} [{name}]" if name else origin
        roles = find_columns(list(rows.column_names), own, label)
        if name and "split" in roles:
            raise UserError(
                f"{label}: a dataset with named splits cannot also have a split column; drop split="
            )
        if pairs is None:
            pairs = PairSplits(origin, list(roles), spec.eval_split, spec.classes)
        columns = {role: rows[column] for role, column in roles.items()}
        for i in range(len(rows)):
            pairs.add(
                f"{label} row {i}", {role: values[i] for role, values in columns.items()}, ours
            )
    if pairs is None:
        raise UserError(
            f"{origin}: none of its splits ({', '.join(data)}) is train, validation, dev or test"
        )
    return pairs.result(splits, spec)


def _open(own: OwnSource) -> tuple[Any, str]:
    """The dataset (a ``Dataset`` or ``DatasetDict``) and how to name it in messages."""
    from datasets import load_dataset, load_from_disk

    from harness.core.hub import first_line, once

    folder = Path(own.location).expanduser()
    if folder.is_dir():
        saved = (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()
        try:
            return (load_from_disk(str(folder)) if saved else load_dataset(str(folder))), str(
                folder
            )
        except Exception as err:  # an unreadable folder: one line, naming it
            raise UserError(
                f"{own.entry}: cannot read the dataset folder {folder} ({first_line(err)}); write "
                "it with Dataset.save_to_disk or put csv/json/parquet files in it"
            ) from None
    if own.location.startswith((".", "/", "~")):
        raise UserError(f"{own.entry}: {folder}: no such folder")
    revision = own.revision or None
    data = once(
        ("dataset", own.location, revision, None),
        lambda: load_dataset(own.location, revision=revision),
        lambda err: (
            f"could not load the dataset {own.location} from the hub: {first_line(err)}; offline, "
            "save it with save_to_disk and pass hf:FOLDER"
        ),
    )
    return data, f"{own.location}@{revision}" if revision else own.location


SOURCE = Source(
    "hf", "a task's own HuggingFace dataset: --tasks hf:DIR_OR_ID", load, run_wide=False
)
