"""A task source as a user writes one, outside ``harness/``: a folder of ``<task>.tsv`` files
(sentence 1, sentence 2, gold score; tab-separated), for any declared task. One registration call
makes it a run's source: ``SOURCES.register("toy", SOURCE)``, then ``--source toy --data-dir
toy=DIR``; or an installed package's entry point ``toy = "toy_source:SOURCE"`` in
``sts_bench.sources``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.core.data.sources import Source
from harness.core.data.splits import SplitData, TaskSpec
from harness.core.errors import UserError


def load(spec: TaskSpec, splits: Sequence[str], location: str | None) -> dict[str, SplitData]:
    path = Path(str(location)) / f"{spec.name}.tsv"
    if not path.is_file():
        raise UserError(f"--data-dir toy={location}: it holds no {path.name}")
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {spec.eval_split: SplitData(tuple(r[0] for r in rows), tuple(r[1] for r in rows),
                                       tuple(float(r[2]) for r in rows), None, origin=str(path))}


SOURCE = Source("toy", "a folder of <task>.tsv files", load, location="a folder of <task>.tsv files",
                needs_location=True)
