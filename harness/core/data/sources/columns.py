"""Rows of a declared task (a file's lines, a dataset's rows) into splits: which column holds what,
and the checks that name ``file:line`` (a missing column, a bad number, an empty sentence, an
unknown split, too few pairs). Shared by the ``file`` and ``hf`` sources."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from harness.core.data.declared import COLUMN_KEYS, SPLIT_NAMES, decimal
from harness.core.data.sources.rows import check_sentence, parse_score
from harness.core.data.splits import OwnSource, SplitData, TaskSpec
from harness.core.errors import UserError

# The names looked for when the user does not say which column holds what (case does not matter).
ALIASES = {
    "s1": ("sentence1", "sentence_1", "sentence_a", "s1", "text1", "text_1", "text_a", "sent1"),
    "s2": ("sentence2", "sentence_2", "sentence_b", "s2", "text2", "text_2", "text_b", "sent2"),
    "score": (
        "score",
        "label",
        "gold",
        "gold_score",
        "similarity",
        "relatedness_score",
        "relatedness",
    ),
    "split": ("split",),
    "subset": ("subset",),
}
REQUIRED = ("s1", "s2", "score")
ROLE = {
    "s1": "sentence 1",
    "s2": "sentence 2",
    "score": "the gold score",
    "split": "the split",
    "subset": "the subset",
}
MIN_PAIRS = 3  # a rank correlation of fewer pairs is undefined or meaningless


def find_columns(names: Sequence[str], own: OwnSource, where: str) -> dict[str, str]:
    """Role (``s1``, ``s2``, ``score``, ``split``, ``subset``) → column name among ``names``: the
    column the user named, else the first of :data:`ALIASES` present; one line naming ``where``
    (the header's ``file:1``) when a column is missing."""
    folded = {n.strip().casefold(): n for n in names}
    out: dict[str, str] = {}
    for role in COLUMN_KEYS:
        given = own.column(role)
        if given is not None:
            if given not in names:
                raise UserError(
                    f"{where}: no column '{given}' ({role}={given}); its columns are: "
                    f"{', '.join(map(str, names))}"
                )
            out[role] = given
            continue
        found = next((folded[a] for a in ALIASES[role] if a in folded), None)
        if found is not None:
            out[role] = found
        elif role in REQUIRED:
            raise UserError(
                f"{where}: no column for {ROLE[role]} (looked for {', '.join(ALIASES[role])}); its "
                f"columns are: {', '.join(map(str, names))}; name it with {role}=COLUMN"
            )
    twice = [c for c in set(out.values()) if list(out.values()).count(c) > 1]
    if twice:
        raise UserError(
            f"{where}: column '{twice[0]}' is given more than one role; map each of s1, s2, score "
            "to its own"
        )
    return out


class PairSplits:
    """Pairs read so far, by split; :meth:`add` checks each row, :meth:`result` the whole."""

    def __init__(
        self, origin: str, roles: Sequence[str], eval_split: str, classes: Sequence[str] = ()
    ) -> None:
        self.origin = origin
        self.classes = tuple(classes)  # a labelled task's: each label becomes its class index
        self.split_column = "split" in roles
        self.subset_column = "subset" in roles
        self.eval_split = eval_split
        self.rows: dict[str, tuple[list[str], list[str], list[float], list[str], list[str]]] = {}

    def add(self, where: str, values: dict[str, Any], split: str | None = None) -> None:
        """One row: ``values`` maps roles to the raw values; ``where`` is its ``file:line``;
        ``split`` is the split it belongs to (default: a split column's value, else the scored
        split)."""
        split = split or self.eval_split
        if self.split_column:
            text = str(values["split"] if values["split"] is not None else "").strip()
            if text.lower() not in SPLIT_NAMES:
                raise UserError(
                    f"{where}: split {text!r} is not one of {', '.join(SPLIT_NAMES)}; fix that row"
                )
            split = SPLIT_NAMES[text.lower()]
        s1, s2, gold, labels, wheres = self.rows.setdefault(split, ([], [], [], [], []))
        s1.append(check_sentence(_text(values["s1"]), where, "sentence 1"))
        s2.append(check_sentence(_text(values["s2"]), where, "sentence 2"))
        text = _text(values["score"]).strip()
        gold.append(
            class_index(text, self.classes, where) if self.classes else gold_score(text, where)
        )
        if self.subset_column:
            labels.append(check_sentence(_text(values["subset"]), where, "subset").strip())
        wheres.append(where)

    def result(self, splits: Sequence[str], spec: TaskSpec) -> dict[str, SplitData]:
        """The requested splits present, after checking the scored split exists and has enough
        pairs."""
        if not self.rows:
            raise UserError(
                f"{self.origin}: no pairs in it (only a header, or empty); {spec.title} cannot be "
                "scored"
            )
        evaluated = self.rows.get(self.eval_split)
        if evaluated is None:
            raise UserError(
                f"{self.origin}: no pair of the {self.eval_split} split (it holds "
                f"{', '.join(self.rows)}); choose the scored split with eval=SPLIT"
            )
        if len(evaluated[0]) < MIN_PAIRS and not self.classes:
            raise UserError(
                f"{evaluated[4][-1]}: {spec.title}'s {self.eval_split} split holds only "
                f"{len(evaluated[0])} pair(s); Spearman needs at least {MIN_PAIRS}: add pairs"
            )
        out: dict[str, SplitData] = {}
        for split in splits:
            if split in self.rows:
                s1, s2, gold, labels, wheres = self.rows[split]
                out[split] = SplitData(
                    tuple(s1),
                    tuple(s2),
                    tuple(gold),
                    tuple(labels) if self.subset_column else None,
                    origin=self.origin,
                    where=tuple(wheres),
                )
        return out


def class_index(text: str, classes: Sequence[str], where: str) -> float:
    """A label as its class index: the class's name, or its index written as a whole number
    (``1`` or ``1.0``); anything else is one line naming ``file:line``.

    >>> classes = ("different", "paraphrase")
    >>> class_index("paraphrase", classes, "f:2"), class_index("0", classes, "f:3")
    (1.0, 0.0)
    """
    if text in classes:
        return float(classes.index(text))
    number = decimal(text)
    if number is not None and number == int(number) and 0 <= number < len(classes):
        return float(int(number))
    raise UserError(
        f"{where}: label {text[:40]!r} is not one of the classes {', '.join(classes)} (nor an "
        f"index 0-{len(classes) - 1}); name them in label-index order: classes=A,B&positive=B"
    )


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def gold_score(text: str, where: str) -> float:
    """A gold score written as a plain decimal number (:func:`~harness.core.data.declared.decimal`):
    ``float`` alone reads ``0_5`` as 5.0 and ``٥`` as 5.0, silently another score than the file's.
    Anything else float() refuses, or a NaN or infinity, gets :func:`parse_score`'s line."""
    if decimal(text) is None:
        try:
            value = float(text)
        except ValueError:
            value = math.nan  # not a number at all: parse_score says so
        if math.isfinite(value):
            raise UserError(
                f"{where}: gold score {text[:40]!r} is not a plain decimal number; write it with "
                "the digits 0-9, an optional sign, '.' and exponent, like 0.5 or 4"
            )
    return parse_score(text, where)
