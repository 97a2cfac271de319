"""Row parsing shared by the file-based sources, with errors that name ``file:line``."""

from __future__ import annotations

import math
from pathlib import Path

from harness.core.data.declared import decimal
from harness.core.data.splits import SplitData
from harness.core.errors import UserError
from harness.core.hashing import PAIRS_BYTES, read_input


def parse_score(text: str, where: str) -> float:
    """A gold score as float; anything else is a user-facing error naming ``where``. A plain
    decimal only (:func:`harness.core.data.declared.decimal`): ``float`` also reads ``0_5`` as 5."""
    value = decimal(text.strip())
    if value is None:
        if text.strip().lower() in ("nan", "inf", "-inf", "+inf", "infinity", "-infinity"):
            raise UserError(f"{where}: gold score {text!r} is not a finite number")
        raise UserError(f"{where}: expected a numeric gold score, got {text[:40]!r}")
    if not math.isfinite(value):
        raise UserError(f"{where}: gold score {text!r} is not a finite number")
    return value


def check_sentence(text: str, where: str, side: str) -> str:
    """Reject empty sentences: a blank side makes the pair meaningless and its cosine undefined."""
    if not text.strip():
        raise UserError(f"{where}: {side} is empty; fix or delete that row")
    return text


def read_lines(path: Path, said: str = "") -> list[str]:
    """UTF-8 lines without line endings, split at LF (a CR before it dropped) and nowhere else:
    ``str.splitlines`` also splits at U+2028, NEL and form feed, which may sit inside a sentence,
    and SentEval's input and gold files are matched line by line. A bad encoding is reported with
    the file name and line."""
    text = read_input(path, said, PAIRS_BYTES)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start another
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_stsb_csv(path: Path, normalize_space: bool = False) -> SplitData:
    """Read an STS Benchmark file (``sts-{train,dev,test}.csv``).

    Tab-separated, no header, 7 or 9 fields: genre, file, year, id, score, sentence1, sentence2
    [, source attributions]. Quote characters are literal text, so the csv module must not be used:
    it would merge rows at an unbalanced quote.
    """
    s1: list[str] = []
    s2: list[str] = []
    gold: list[float] = []
    wheres: list[str] = []
    for lineno, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        fields = line.split("\t")
        if len(fields) < 7:
            raise UserError(
                f"{where}: expected at least 7 tab-separated fields (genre, file, year, id, score, "
                f"sentence1, sentence2), got {len(fields)}"
            )
        a, b = fields[5], fields[6]
        if normalize_space:
            a, b = " ".join(a.split()), " ".join(b.split())
        s1.append(check_sentence(a, where, "sentence1"))
        s2.append(check_sentence(b, where, "sentence2"))
        gold.append(parse_score(fields[4], where))
        wheres.append(where)
    return SplitData(tuple(s1), tuple(s2), tuple(gold), None, origin=str(path), where=tuple(wheres))
