"""A SentEval data directory (``data/downstream``), read the way SentEval's own loaders read it.

Layout (file names exactly as SentEval's ``get_transfer_data.bash`` leaves them)::

    STS/STS12-en-test/STS.input.<subset>.txt   two tab-separated sentences per line
    STS/STS12-en-test/STS.gs.<subset>.txt      one gold score per line; an empty line = unscored
                                               pair
    ...                                         STS13..STS16 likewise
    STS/STSBenchmark/sts-{train,dev,test}.csv  the STS Benchmark format (see rows.read_stsb_csv)
    SICK/SICK_{train,trial,test_annotated}.txt header line, then pair_ID, A, B, relatedness,
                                               entailment

A task's ``senteval`` entry says where it lies and in which of those layouts: ``{"folder":
"STS/STS12-en-test", "subsets": ["MSRpar", ...]}`` (layout ``sts``, the default), ``{"folder":
"STS/STSBenchmark", "layout": "stsb"}``, ``{"folder": "SICK", "layout": "sick"}``. A new task in
one of these layouts is one declaration (:data:`harness.core.data.tasks.TASKS`), no code here.

SentEval's data is Moses-tokenized and lowercased, and SentEval hands models the tokens re-joined
with single spaces; we do the same (``" ".join(text.split())``). Pairs whose gold score is empty
(STS15/16 raw files have such lines) are dropped, as SentEval does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.core.data.sources import Source
from harness.core.data.sources.rows import check_sentence, parse_score, read_lines, read_stsb_csv
from harness.core.data.splits import SplitData, TaskSpec
from harness.core.errors import UserError

SICK_FILES = {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}
GET_DATA_HINT = "fetch it with SentEval's data/downstream/get_transfer_data.bash"


LAYOUTS = ("sts", "stsb", "sick")


def downstream_root(location: str | None) -> Path:
    """Accept either SentEval's ``data/downstream`` folder or the SentEval checkout above it."""
    if not location:
        raise UserError(f"--source senteval needs {SOURCE.spelled()} ({SOURCE.location})")
    root = Path(location).expanduser()
    if not root.is_dir():
        raise UserError(f"{SOURCE.spelled(str(root))}: no such directory")
    for candidate in (root, root / "data" / "downstream"):
        if (candidate / "STS").is_dir() or (candidate / "SICK").is_dir():
            return candidate
    raise UserError(
        f"{SOURCE.spelled(str(root))}: found neither STS/ nor SICK/ in it (or in "
        f"data/downstream/); point it at SentEval's data/downstream folder, or {GET_DATA_HINT}"
    )


def _require(path: Path, root: Path) -> Path:
    if not path.is_file():
        raise UserError(f"SentEval dir {root} is missing {path.relative_to(root)}; {GET_DATA_HINT}")
    return path


def load(spec: TaskSpec, splits: Sequence[str], location: str | None) -> dict[str, SplitData]:
    place = spec.place(SOURCE.name)
    if place is None:
        raise UserError(f"{spec.title} has no SentEval layout defined")
    subsets = tuple(place.get("subsets", ()))
    layout = place.get("layout", "sts")
    if layout not in LAYOUTS or (layout == "sts") != bool(subsets):
        raise UserError(
            f"{spec.title}: its senteval entry's layout {layout!r} is not one of "
            f"{', '.join(LAYOUTS)} (sts with its subsets)"
        )
    root = downstream_root(location)
    folder = root / str(place["folder"])
    out: dict[str, SplitData] = {}
    for split in splits:
        if split not in spec.splits:
            continue
        if layout == "sts":
            out[split] = _read_sts_year(folder, subsets, root)
        elif layout == "stsb":
            out[split] = read_stsb_csv(
                _require(folder / f"sts-{split}.csv", root), normalize_space=True
            )
        else:
            out[split] = _read_sick(_require(folder / SICK_FILES[split], root))
    return out


def _read_sts_year(folder: Path, subsets: Sequence[str], root: Path) -> SplitData:
    s1: list[str] = []
    s2: list[str] = []
    gold: list[float] = []
    labels: list[str] = []
    wheres: list[str] = []
    for subset in subsets:
        input_path = _require(folder / f"STS.input.{subset}.txt", root)
        gold_path = _require(folder / f"STS.gs.{subset}.txt", root)
        before = len(gold)
        pairs = read_lines(input_path)
        scores = read_lines(gold_path)
        if len(pairs) != len(scores):
            raise UserError(
                f"{input_path} has {len(pairs)} lines but {gold_path.name} has {len(scores)}; each "
                "input line needs one gold line (empty for an unscored pair)"
            )
        for lineno, (line, score) in enumerate(zip(pairs, scores), start=1):
            if not score.strip():
                continue  # unscored pair: SentEval drops it too
            where = f"{input_path}:{lineno}"
            fields = line.split("\t")
            if len(fields) != 2:
                raise UserError(
                    f"{where}: expected 2 tab-separated sentences, got {len(fields)} fields"
                )
            s1.append(check_sentence(" ".join(fields[0].split()), where, "sentence 1"))
            s2.append(check_sentence(" ".join(fields[1].split()), where, "sentence 2"))
            gold.append(parse_score(score.strip(), f"{gold_path}:{lineno}"))
            labels.append(subset)
            wheres.append(f"{gold_path}:{lineno}")
        # an empty subset would be scored on the others, silently, like a missing one
        if len(gold) == before:
            raise UserError(
                f"SentEval dir {root}: {input_path.relative_to(root)} and {gold_path.name} hold no "
                f"scored pair (empty files?); {GET_DATA_HINT}"
            )
    return SplitData(
        tuple(s1), tuple(s2), tuple(gold), tuple(labels), origin=str(folder), where=tuple(wheres)
    )


def _read_sick(path: Path) -> SplitData:
    s1: list[str] = []
    s2: list[str] = []
    gold: list[float] = []
    wheres: list[str] = []
    for lineno, line in enumerate(read_lines(path), start=1):
        if lineno == 1 or not line.strip():
            continue  # header: pair_ID sentence_A sentence_B relatedness_score entailment_judgment
        where = f"{path}:{lineno}"
        fields = line.strip().split("\t")
        if len(fields) < 4:
            raise UserError(
                f"{where}: expected pair_ID, sentence_A, sentence_B, relatedness_score separated "
                f"by tabs, got {len(fields)} fields"
            )
        s1.append(check_sentence(" ".join(fields[1].split()), where, "sentence_A"))
        s2.append(check_sentence(" ".join(fields[2].split()), where, "sentence_B"))
        gold.append(parse_score(fields[3], where))
        wheres.append(where)
    return SplitData(tuple(s1), tuple(s2), tuple(gold), None, origin=str(path), where=tuple(wheres))


SOURCE = Source(
    "senteval",
    "a SentEval data directory (STS12-16, STS-B, SICK-R, tokenized as SentEval gives them)",
    load,
    location="SentEval's data/downstream folder",
    needs_location=True,
    flag="--senteval-dir",
)
