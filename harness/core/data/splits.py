"""The in-memory shape of task data, whatever the source: a task's identity (``TaskSpec``, and for a
task that brings its own data, where and how to read it: ``OwnSource``), the pairs of one split
(``SplitData``: s1, s2, gold, subset, with a sha256 fingerprint) and a task read from one source
(``LoadedTask``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class OwnSource:
    """Where a task declared by the user (``--tasks file:PATH``, ``hf:DIR_OR_ID``, a ``[[task]]``
    table) reads its pairs, and how (:mod:`harness.core.data.declared` parses the entries).

    ``columns`` maps a role (``s1``, ``s2``, ``score``, ``split``, ``subset``) to a column name, or
    to a 1-based field number in a file without a header; roles left out are found by name.
    """

    kind: str  # "file" | "hf"
    location: str  # a file path, a dataset folder or a hub dataset id
    columns: tuple[tuple[str, str], ...] = ()
    format: str = ""  # file: csv | tsv | jsonl ("" = from the extension)
    header: bool = True  # file (csv/tsv): the first row names the columns
    revision: str = ""  # hf: the hub revision to pin
    entry: str = ""  # the entry as the user wrote it, for messages

    def column(self, role: str) -> str | None:
        return dict(self.columns).get(role)


@dataclass(frozen=True)
class TaskSpec:
    """A task as data, declared once whatever source its rows come from (MTEB's ``TaskMetadata``
    is the model): its name, title and description, its splits and the one it is scored on, its
    ``kind`` and ``main_score``, its citation and the gold scale its annotators used
    (``gold_range``).

    ``kind`` names a registered :class:`harness.core.kinds.TaskKind` (its metrics and everything
    that differs by kind): ``sts``, graded pairs ranked by Spearman; ``pairclass``, labelled pairs
    (paraphrase, duplicate, entailment: GLUE's MRPC, QQP, QNLI, RTE, MNLI; MTEB's
    PairClassification), ranked by average precision unless declared
    otherwise. A pairclass task's gold is the class index (0.0, 1.0, 2.0 ...) into ``classes``;
    ``positive`` names the class a high similarity predicts (MNLI's "entailment": the other
    classes are its negatives for every similarity metric); thresholds for accuracy / F1 are chosen
    on ``threshold_split`` ("" = none: only the scored split's best threshold, marked §).

    ``where`` says, per source, where that source finds the task's rows: plain data each source
    reads and checks itself (``{"senteval": {"folder": "STS/STS12-en-test", "subsets": [...]},
    "hub": {"path": "mteb/sts12-sts", "revision": "..."}, "mteb": {"name": "STS12"}}``); a task is
    read from the run's ``--source`` when it has that source's entry. A task that brings its own
    data (``file:``, ``hf:``, :mod:`harness.core.data.declared`) carries its source in ``own``.
    """

    name: str
    title: str
    description: str
    splits: tuple[str, ...] = ("test",)
    eval_split: str = "test"
    kind: str = "sts"
    main_score: str = "spearman"
    citation: str = ""
    gold_range: tuple[float, float] = (0.0, 5.0)  # what the annotators could give; SICK's is 1-5
    # STS-B was assembled from these pairs (STS 2012-2017): STS-B train has seen them
    in_stsb: bool = False
    # pairclass only: class names in label-index order, the positive class, the threshold split
    classes: tuple[str, ...] = ()
    positive: str = ""
    threshold_split: str = ""
    # MTEB's input1/input2 prompt types: ("query", "document") for an asymmetric task whose first
    # sentence asks and whose second answers (QNLI's question and sentence); () for a symmetric one.
    # Per-task prompts' query/document entries apply to the sides of an asymmetric task only.
    sides: tuple[str, ...] = ()
    where: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, hash=False)
    own: OwnSource | None = None  # a declared task's own source; None = the run's --source

    @property
    def positive_index(self) -> int:
        """The label index of the positive class (pairclass); ``classes.index(positive)``."""
        return self.classes.index(self.positive)

    @property
    def source(self) -> str:
        """The task's own source (``file``, ``hf``); "" for a registry task (the run's
        ``--source``)."""
        return self.own.kind if self.own else ""

    @property
    def mteb_name(self) -> str:
        """The task's name in MTEB (``STSBenchmark`` for stsb; MTEB result files use it), "" when
        MTEB does not have it."""
        return str(self.where.get("mteb", {}).get("name", ""))

    def place(self, source: str) -> Mapping[str, Any] | None:
        """What ``where`` says for ``source``; None when that source does not have the task."""
        return self.where.get(source)


@dataclass(frozen=True)
class SplitData:
    """The pairs of one split, as parallel tuples, plus where they came from.

    ``subsets`` is the subset label of each pair (STS12-16 from SentEval); ``None`` when the source
    does not keep subsets (STS-B, SICK-R, and MTEB's hub copies, which store each year as one
    split).
    """

    s1: tuple[str, ...]
    s2: tuple[str, ...]
    gold: tuple[float, ...]
    subsets: tuple[str, ...] | None
    origin: str
    fingerprint: str = field(default="")
    # "file:line" (or "dataset row i") of each pair's gold score, for errors; not part of the data.
    where: tuple[str, ...] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not (len(self.s1) == len(self.s2) == len(self.gold)):
            raise ValueError("s1, s2 and gold must have the same length")
        if self.subsets is not None and len(self.subsets) != len(self.s1):
            raise ValueError("subsets must label every pair")
        if not self.fingerprint:
            object.__setattr__(
                self, "fingerprint", fingerprint_pairs(self.s1, self.s2, self.gold, self.subsets)
            )

    def __len__(self) -> int:
        return len(self.s1)

    def locate(self, index: int) -> str:
        """Where pair ``index`` came from: ``file:line`` when the source kept it."""
        return self.where[index] if self.where else f"{self.origin} (pair {index + 1})"

    def outside(self, low: float, high: float) -> list[int]:
        """Indices of pairs whose gold score lies outside ``[low, high]``."""
        return [i for i, g in enumerate(self.gold) if not low <= g <= high]

    def subset_sizes(self) -> dict[str, int]:
        """Pairs per subset, in first-seen order; ``{}`` when the split has no subsets."""
        sizes: dict[str, int] = {}
        for label in self.subsets or ():
            sizes[label] = sizes.get(label, 0) + 1
        return sizes

    def sentences(self) -> list[str]:
        """Both sides of every pair, first-seen order, without repeats."""
        return unique(list(self.s1) + list(self.s2))


@dataclass(frozen=True)
class LoadedTask:
    """A task read from one source: its splits (only those the source has) and its provenance."""

    spec: TaskSpec
    source: str
    splits: dict[str, SplitData]

    @property
    def eval(self) -> SplitData:
        return self.splits[self.spec.eval_split]

    def fingerprint(self, extra: Sequence[str] = ()) -> str:
        """The sha256 of the data a score read: the scored split's own fingerprint when it read no
        other split (so an STS task's record ids never moved), else of each split's name and
        fingerprint, scored first, then ``extra`` (a threshold split: its labels move scores)."""
        if not extra:
            return self.eval.fingerprint
        named = [(name, self.splits[name].fingerprint) for name in (self.spec.eval_split, *extra)]
        return hashlib.sha256(json.dumps(named).encode("utf-8")).hexdigest()

    def sentences(self, splits: Iterable[str] | None = None) -> list[str]:
        """Unlabeled sentences of the given splits (all splits by default), without repeats."""
        names = list(self.splits) if splits is None else list(splits)
        out: list[str] = []
        for name in names:
            out.extend(self.splits[name].sentences())
        return unique(out)


def unique(items: Iterable[str]) -> list[str]:
    """First-seen order without repeats. ``unique(["b", "a", "b"]) == ["b", "a"]``."""
    return list(dict.fromkeys(items))


def fingerprint_pairs(
    s1: Sequence[str], s2: Sequence[str], gold: Sequence[float], subsets: Sequence[str] | None
) -> str:
    """sha256 of the pairs' content in order; any changed sentence, score or label changes it."""
    digest = hashlib.sha256()
    labels = subsets if subsets is not None else [""] * len(s1)
    for a, b, g, label in zip(s1, s2, gold, labels):
        digest.update(json.dumps([a, b, repr(float(g)), label], ensure_ascii=False).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()
