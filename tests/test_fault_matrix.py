"""docs/CACHE_AND_FAULTS.md names, for each fault it lists, the test that holds it: every test it cites
exists, in the file it is cited from, so a renamed or deleted test cannot leave the matrix promising it.

A citation is ``file.py::name`` or ``::name`` in a table row: ``::name`` is in the last file the row
named, else in the section's own ("Tests are in `tests/test_x.py`"; a glob such as
``tests/test_trust_*.py`` stands for any of its files). A bare ``file.py`` must exist.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "CACHE_AND_FAULTS.md"
TESTS = ROOT / "tests"
CITED = re.compile(r"`(?:tests/)?(test_[\w*]+\.py)?(?:::(test_\w+))?`")
SECTION_FILE = re.compile(r"[Tt]ests are (?:in )?`tests/(test_[\w*]+\.py)`")


def citations(text: str) -> list[tuple[int, str, str | None]]:
    """(line number, file or glob, test name or None) of every citation in ``text``'s table rows."""
    found: list[tuple[int, str, str | None]] = []
    default = ""
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            default = ""
        elif (said := SECTION_FILE.search(line)) is not None:
            default = said.group(1)
        if not line.startswith("|"):
            continue
        current = default
        for match in CITED.finditer(line):
            file, name = match.groups()
            if file is None and name is None:
                continue
            current = file or current
            found.append((number, current, name))
    return found


def missing(text: str) -> list[str]:
    """The citations of ``text`` whose file or test does not exist, as ``line N: file::name``."""
    problems = []
    for number, pattern, name in citations(text):
        files = sorted(TESTS.glob(pattern)) if pattern else []
        where = f"line {number}: {pattern or '(no file)'}::{name}" if name else f"line {number}: {pattern}"
        defined = [f for f in files if not name or re.search(rf"^def {name}\(", f.read_text(encoding="utf-8"), re.M)]
        if not defined:
            problems.append(where)
    return problems


def test_every_test_the_fault_matrix_cites_exists():
    text = DOC.read_text(encoding="utf-8")
    assert len([c for c in citations(text) if c[2]]) > 100  # the matrix's rows are read, not skipped
    assert missing(text) == []


def test_a_citation_of_a_missing_test_or_file_is_found():
    doc = "\n".join([
        "### A section", "",
        "Tests are in `tests/test_endpoint.py`.", "",
        "| # | case | test |",
        "| 1 | a | `::test_the_key_is_sent_and_written_nowhere`, `::test_no_such_test` |",
        "| 2 | b | `test_page.py::test_p_values_never_read_zero`, `::test_the_key_is_sent_and_written_nowhere` |",
        "| 3 | c | `test_no_such_file.py` (3 tests) |",
        "### Another", "",
        "| 1 | d | `::test_p_values_never_read_zero` |",
    ])
    assert missing(doc) == ["line 6: test_endpoint.py::test_no_such_test",
                            "line 7: test_page.py::test_the_key_is_sent_and_written_nowhere",
                            "line 8: test_no_such_file.py",
                            "line 11: (no file)::test_p_values_never_read_zero"]
