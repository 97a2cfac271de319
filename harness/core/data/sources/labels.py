"""Labelled pairs (tasks of kind ``pairclass``), shared by the sources that read them: a row's
class label as the class index the task's ``classes`` give it, and the rows of one split collected
into a :class:`SplitData` whose gold is that index (0.0, 1.0, 2.0 ...)."""

from __future__ import annotations

from typing import Any

from harness.core.data.sources.rows import check_sentence
from harness.core.data.splits import SplitData, TaskSpec
from harness.core.errors import UserError


def class_index(value: Any, spec: TaskSpec, where: str, by: str = "index") -> int:
    """The class index of a label: a number 0..n-1 (``by="index"``: the hub's ``ClassLabel``
    values, GLUE's MRPC and QQP files) or one of ``spec.classes`` by name (``by="name"``: GLUE's
    QNLI, RTE, MNLI, SNLI files); anything else is an error naming ``where``.

    >>> from harness.core.data.tasks import TASKS
    >>> rte = TASKS["rte"]
    >>> class_index("not_entailment", rte, "RTE/dev.tsv:2", by="name"), class_index(0, rte, "row 0")
    (1, 0)
    """
    n = len(spec.classes)
    if by == "name":
        text = str(value).strip()
        if text in spec.classes:
            return spec.classes.index(text)
        expected = ", ".join(spec.classes)
    else:
        text = str(value).strip()
        if isinstance(value, bool) or not (isinstance(value, int) or text.isdigit()):
            number = None
        else:
            number = int(text)
        if number is not None and 0 <= number < n:
            return number
        expected = f"0..{n - 1} ({', '.join(f'{i} {c}' for i, c in enumerate(spec.classes))})"
    raise UserError(
        f"{where}: label {text[:40]!r} is not a class of {spec.title}; expected {expected}"
    )


class PairRows:
    """The pairs of one split as they are read: ``add`` checks both sentences (not empty) and the
    label (:func:`class_index`); ``result`` is the split."""

    def __init__(self, spec: TaskSpec, by: str = "index") -> None:
        self.spec, self.by = spec, by
        self.s1: list[str] = []
        self.s2: list[str] = []
        self.gold: list[float] = []
        self.wheres: list[str] = []

    def add(self, a: Any, b: Any, label: Any, where: str, sides: tuple[str, str]) -> None:
        self.s1.append(check_sentence("" if a is None else str(a), where, sides[0]))
        self.s2.append(check_sentence("" if b is None else str(b), where, sides[1]))
        self.gold.append(float(class_index(label, self.spec, where, self.by)))
        self.wheres.append(where)

    def result(self, origin: str) -> SplitData:
        return SplitData(
            tuple(self.s1),
            tuple(self.s2),
            tuple(self.gold),
            None,
            origin=origin,
            where=tuple(self.wheres),
        )


def unpack_single_row(columns: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """MTEB's older PairClassification datasets store a split as one row whose cells are lists
    (``{"sent1": [...], "sent2": [...], "labels": [...]}``); MTEB reads such a row as the split's
    rows (``Dataset.from_dict(split[0])``), and so do we. Anything else is returned as it is.

    >>> unpack_single_row({"sent1": [["a", "b"]], "labels": [[1, 0]]})
    {'sent1': ['a', 'b'], 'labels': [1, 0]}
    """
    values = list(columns.values())
    if values and all(len(v) == 1 and isinstance(v[0], list) for v in values):
        return {name: list(v[0]) for name, v in columns.items()}
    return columns
