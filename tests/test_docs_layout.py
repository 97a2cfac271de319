"""Guides apart from measurements, and docs that cannot go stale unnoticed.

docs/*.md are guides; docs/measurements/ holds only reports a benchmark script writes, each named
by a usage line of that script's docstring, and its README.md index is generated from those lines
(``benchmarks/tools/measurements_index.py``). Every markdown link in README.md and docs/** resolves, and
docs/DEVELOPMENT.md states only what is checked here: make targets that exist, files that exist,
pyproject's markers, and no test count or timing outside its "Suite time" section.
"""

from __future__ import annotations

import doctest
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.tools import measurements_index  # noqa: E402

DOCS = ROOT / "docs"
DEVELOPMENT = DOCS / "DEVELOPMENT.md"
MARKDOWN = (ROOT / "README.md", *sorted(DOCS.rglob("*.md")))


# -- docs/measurements ---------------------------------------------------------------------------

def test_the_committed_index_is_the_generated_one():
    committed = (ROOT / measurements_index.INDEX).read_text(encoding="utf-8")
    assert committed == measurements_index.render(), \
        "docs/measurements/README.md is stale: .venv/bin/python benchmarks/tools/measurements_index.py"


def test_every_measurement_has_its_benchmark_and_every_benchmark_writes_there():
    assert measurements_index.problems() == []


def test_the_index_lists_each_report_with_its_benchmark_command_and_lines():
    index = (ROOT / measurements_index.INDEX).read_text(encoding="utf-8")
    row = next(line for line in index.splitlines() if line.startswith("| [throughput.md]"))
    report = (ROOT / "docs/measurements/throughput.md").read_text(encoding="utf-8").splitlines()
    cells = [cell.strip() for cell in row.strip("|").split(" | ")]
    assert cells == ["[throughput.md](throughput.md)", "[peers/throughput.py](../../benchmarks/peers/throughput.py)",
                     "`.venv/bin/python benchmarks/peers/throughput.py --threads 1 --out "
                     "docs/measurements/throughput.md`",
                     report[0], next(line for line in report if line.startswith("load average"))]


def test_the_guides_stay_out_of_the_measurements_and_the_reports_out_of_the_guides():
    reports = {Path(p).name for p in measurements_index.committed_reports()}
    guides = {p.name for p in DOCS.glob("*.md")}
    assert "PERFORMANCE.md" in guides and "throughput.md" in reports
    assert not reports & guides
    written = {out for usage in measurements_index.usages() for out in usage.outputs}
    retired = set(measurements_index.retired_reports())  # kept as measured, their script gone
    assert {f"docs/measurements/{name}" for name in reports} <= written | retired
    assert not written & retired


def write_tree(root: Path) -> None:
    """A repository in miniature: one benchmark, two reports of which one is orphaned, one usage
    line pointing into docs/ and one promising a report that is not there, and an --out default."""
    (root / "benchmarks").mkdir()
    (root / "docs" / "measurements").mkdir(parents=True)
    (root / "benchmarks" / "a.py").write_text(
        '"""A benchmark.\n\n'
        "    .venv/bin/python benchmarks/a.py --out docs/measurements/x.md\n"
        "    .venv/bin/python benchmarks/a.py --fast --out docs/x.md   # quick\n"
        "    python benchmarks/a.py --report  # writes docs/measurements/gone.md and docs/measurements/x.md\n"
        "    .venv/bin/python benchmarks/b.py --out docs/measurements/orphan.md\n"
        '"""\n'
        "import argparse\n"
        'argparse.ArgumentParser().add_argument("--out", default="results/a.md")\n',
        encoding="utf-8")
    (root / "docs" / "measurements" / "x.md").write_text("# X\n\n2026-01-02, 2 cores\n", encoding="utf-8")
    (root / "docs" / "measurements" / "orphan.md").write_text("| a |\n", encoding="utf-8")


def test_problems_names_every_kind_of_misplaced_or_orphaned_report(tmp_path):
    write_tree(tmp_path)
    assert measurements_index.problems(tmp_path) == [
        # by output path: gone.md, x.md, then docs/x.md
        "benchmarks/a.py: `python benchmarks/a.py --report` promises docs/measurements/gone.md, "
        "which is not committed",
        "docs/measurements/x.md is written by 2 commands: "
        "`.venv/bin/python benchmarks/a.py --out docs/measurements/x.md`; `python benchmarks/a.py --report`",
        "benchmarks/a.py: `.venv/bin/python benchmarks/a.py --fast --out docs/x.md` writes docs/x.md, "
        "outside docs/measurements/",
        "benchmarks/a.py: --out defaults to results/a.md, outside docs/measurements/",
        # b.py's line sits in a.py's docstring: it is not a.py's usage, and b.py does not exist
        "docs/measurements/orphan.md: no benchmark's docstring shows a command that writes it",
    ]
    rows = [line for line in measurements_index.render(tmp_path).splitlines() if line.startswith("| [")]
    assert rows == [
        "| [x.md](x.md) | [a.py](../../benchmarks/a.py) | "
        "`.venv/bin/python benchmarks/a.py --out docs/measurements/x.md` | X | 2026-01-02, 2 cores |",
        "| [x.md](x.md) | [a.py](../../benchmarks/a.py) | `python benchmarks/a.py --report` | X | "
        "2026-01-02, 2 cores |",
    ]


def test_a_retired_benchmarks_report_is_listed_with_its_commit_and_a_missing_one_is_named(tmp_path):
    write_tree(tmp_path)
    (tmp_path / "benchmarks" / "history.toml").write_text(
        '[retired."docs/measurements/orphan.md"]\nscript = "benchmarks/b.py"\n'
        'command = "python benchmarks/b.py --out docs/measurements/orphan.md"\ncommit = "abc1234"\nwhy = "settled"\n'
        '[retired."docs/measurements/lost.md"]\nscript = "benchmarks/c.py"\ncommand = "python benchmarks/c.py"\n'
        'commit = "def5678"\nwhy = "settled"\n', encoding="utf-8")
    found = measurements_index.problems(tmp_path)
    assert "docs/measurements/orphan.md: no benchmark's docstring shows a command that writes it" not in found
    assert "docs/measurements/lost.md: retired with benchmarks/c.py, but not committed" in found
    rows = [line for line in measurements_index.render(tmp_path).splitlines() if line.startswith("| [orphan")]
    assert rows == ["| [orphan.md](orphan.md) | b.py | `python benchmarks/b.py --out docs/measurements/orphan.md` "
                    "| abc1234 | settled |"]


def test_the_index_scripts_examples_run():
    failed, attempted = doctest.testmod(measurements_index)
    assert attempted >= 4 and failed == 0


# -- links ---------------------------------------------------------------------------------------

def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors: a heading lower-cased, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#{1,6} (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def broken_links(doc: Path) -> list[str]:
    """The targets of ``[text](target)`` links (and images) in ``doc``, outside code blocks, whose
    file is missing or, for a markdown file, whose ``#anchor`` is no heading of it."""
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        unanchored = bool(anchor) and file.suffix == ".md" and file.exists() \
            and anchor not in heading_anchors(file.read_text(encoding="utf-8"))
        if not file.exists() or unanchored:
            broken.append(target)
    return broken


@pytest.mark.parametrize("doc", MARKDOWN, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_resolves(doc):
    assert broken_links(doc) == []


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "b.md").write_text("# Real heading\n", encoding="utf-8")
    doc = tmp_path / "a.md"
    doc.write_text("[ok](b.md#real-heading) [no file](c.md) [no anchor](b.md#other)\n"
                   "```\n[in code](d.md)\n```\n[web](https://example.com)\n", encoding="utf-8")
    assert broken_links(doc) == ["c.md", "b.md#other"]


# -- docs/DEVELOPMENT.md -------------------------------------------------------------------------

def development_text() -> str:
    return DEVELOPMENT.read_text(encoding="utf-8")


def section(text: str, title: str) -> str:
    """The body of the ``## title`` section, up to the next ``## `` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"docs/DEVELOPMENT.md has no '## {title}' section"
    return match.group(1)


def test_the_make_targets_it_names_exist():
    targets = set(re.findall(r"^([\w.-]+):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M))
    named = set(re.findall(r"`make ([\w-]+)", development_text()))
    assert {"test", "test-newest"} <= named
    assert named <= targets, f"not Makefile targets: {named - targets}"


def test_the_files_it_names_exist():
    spans = re.findall(r"`([^`\s]+)`", development_text())
    paths = [s for s in spans if re.match(r"(tests|harness|methods|benchmarks|examples|docs|\.ci)/", s)]
    assert "tests/test_native_families.py" in paths and "tests/test_oracles*.py" in paths
    missing = [p for p in paths if not any(ROOT.glob(p.rstrip("/")))]
    assert missing == []


def test_its_markers_are_pyprojects_markers():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    declared = {m.split(":")[0].strip() for m in config["tool"]["pytest"]["ini_options"]["markers"]}
    text = development_text()
    listed = set(re.findall(r"^- `(\w+)`:", section(text, "Markers"), re.M))
    assert listed == declared
    expressions = re.findall(r'(?<!python )-m "([^"]+)"|(?<!python )-m (\w+)', text)  # not python -m
    used = {word for pair in expressions for word in re.findall(r"\w+", " ".join(pair))} - {"and", "or", "not"}
    assert used and used <= declared, f"not markers: {used - declared}"


def test_it_states_no_count_or_timing_outside_suite_time():
    text = development_text()
    assert section(text, "Suite time").strip()  # the placeholder, or the lead's line
    rest = re.sub(r"^## Suite time\n.*?(?=^## |\Z)", "", text, flags=re.M | re.S)
    stale = re.findall(r"\b\d[\d,]*\s+tests?\b|\b\d+(?:\.\d+)?\s*(?:s|min|minutes|seconds|h)\b(?![-\w])", rest)
    assert stale == [], "counts and timings go stale: say how to measure them, or put them in Suite time"
    # Not even there a test count (issue 52: a newcomer read 1,273 as the tier's size when it had grown to
    # 1,700): the Makefile's FAST_TESTS under `pytest --collect-only -q` counts them, and the page says so.
    assert re.findall(r"\b\d[\d,]*\s+tests?\b", text) == []
    fast = re.search(r'^FAST_TESTS = (-m "[^"]+")$', (ROOT / "Makefile").read_text(encoding="utf-8"), re.M)
    assert fast and fast.group(1) in text and "pytest --collect-only -q" in text


def test_the_real_score_it_quotes_is_the_one_test_real_asserts():
    assert "82.03 within 0.05" in development_text()
    assert "approx(82.03, abs=0.05)" in (ROOT / "tests" / "test_real.py").read_text(encoding="utf-8")
