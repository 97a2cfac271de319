"""docs/measurements/README.md, generated from the benchmarks that write the reports in that folder.

    .venv/bin/python benchmarks/tools/measurements_index.py  # rewrites docs/measurements/README.md
    .venv/bin/python benchmarks/tools/measurements_index.py --check  # exit 1: stale or wrong

A report belongs to the benchmark whose module docstring shows the command that writes it: a usage
line, i.e. a docstring line that starts with ``.venv/bin/python benchmarks/GROUP/NAME.py`` (or
``python benchmarks/GROUP/NAME.py``) naming the script itself, whose ``--out PATH`` is the report,
or, for a script that writes a fixed file, whose trailing comment says ``# writes PATH`` (several
paths: ``# writes PATH and PATH``). For example, ``benchmarks/peers/throughput.py``'s docstring has

    .venv/bin/python benchmarks/peers/throughput.py --threads 1 \\
        --out docs/measurements/throughput.md

(a command continued with a backslash is one usage line), so ``docs/measurements/throughput.md`` is
written by ``benchmarks/peers/throughput.py`` with that command. The index lists each report with
its benchmark, its command, its first line (a heading's ``#`` marks dropped) and the first line that
says when or where it was measured (one with an ISO date, else the ``load average`` line that
:func:`benchmarks.report.load_line` prints), if it has one.

A report whose benchmark was retired from the suite stays as it was measured: ``[retired]`` in
``benchmarks/history.toml`` names it with the command that wrote it, the last commit that has the
script, and why it went; the index lists it with those. A report keeps the command it was made
with, also when its script has moved since: ``[moved]`` there maps former paths to present ones,
and the index lists them.

:func:`problems` says what keeps the folder honest (``tests/test_docs_layout.py`` asserts there are
none): a file in docs/measurements that no usage line writes and that is not retired, a usage line
or an ``--out`` default whose output lies outside docs/measurements, a report a usage line or
``[retired]`` promises that is not there, and one report claimed by two commands.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDER = "docs/measurements"
INDEX = f"{FOLDER}/README.md"
_USAGE = re.compile(r"^\s*(?:\.venv/bin/)?python (benchmarks/(?:[\w-]+/)*[\w-]+\.py)\b(.*)$")
_OUT = re.compile(r"--out[ =](\S+)")
_WRITES = re.compile(r"\bwrites\s+(.+)$")
_PATH = re.compile(r"(?:^|\s)(docs/\S+?)[,;.]?(?=\s|$)")
_DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")


@dataclass(frozen=True)
class Retired:
    """A report whose benchmark left the suite: the script and command that wrote it, the last
    commit that has the script (``git show COMMIT:SCRIPT``), and why it went."""

    script: str
    command: str
    commit: str
    why: str


HISTORY = "benchmarks/history.toml"


def history(root: Path = ROOT) -> dict:
    """:data:`HISTORY` read (empty when there is none)."""
    path = root / HISTORY
    return tomllib.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def retired_reports(root: Path = ROOT) -> dict[str, Retired]:
    """Report path -> :class:`Retired`, from ``[retired."REPORT"]`` tables of :data:`HISTORY`."""
    tables = history(root).get("retired", {})
    return {report: Retired(**fields) for report, fields in tables.items()}


def moved_scripts(root: Path = ROOT) -> dict[str, str]:
    """Former script path -> present one, from ``[moved]`` of :data:`HISTORY`."""
    return dict(history(root).get("moved", {}).get("paths", {}))


@dataclass(frozen=True)
class Usage:
    """One usage line of a benchmark's docstring that writes files: the script (relative to the
    repository), the command without its comment, and the repository paths it writes."""

    script: str
    command: str
    outputs: tuple[str, ...]


def usage_of(script: str, line: str) -> Usage | None:
    """The line as a usage of ``script`` that writes something, or None.

    >>> line = "  python benchmarks/studies/flow_fit.py --out docs/measurements/f.md  # 1 min"
    >>> usage = usage_of("benchmarks/studies/flow_fit.py", line)
    >>> usage.command
    'python benchmarks/studies/flow_fit.py --out docs/measurements/f.md'
    >>> usage.outputs
    ('docs/measurements/f.md',)
    >>> usage_of("benchmarks/m.py", "python benchmarks/m.py  # writes docs/a.md and b.json").outputs
    ('docs/a.md',)
    >>> usage_of("benchmarks/m.py", "python benchmarks/other.py --out x.md") is None  # another's
    True
    """
    match = _USAGE.match(line)
    if match is None or match.group(1) != script:
        return None
    command, _, comment = line.strip().partition("  #")
    outputs = _OUT.findall(command)
    writes = _WRITES.search(comment)
    if writes:
        outputs += _PATH.findall(" " + writes.group(1))
    return Usage(script, command.strip(), tuple(outputs)) if outputs else None


def benchmark_scripts(root: Path = ROOT) -> list[Path]:
    """Every script under benchmarks/ and its groups, sorted by path."""
    return sorted((root / "benchmarks").rglob("*.py"))


def usages(root: Path = ROOT) -> list[Usage]:
    """The usage lines that write files, of every benchmark's module docstring, by script."""
    found = []
    for path in benchmark_scripts(root):
        script = path.relative_to(root).as_posix()
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        # A command continued with a backslash is one usage (lines stay within 100 characters)
        lines = re.sub(r"\\\n\s*", "", docstring).splitlines()
        found += [u for line in lines if (u := usage_of(script, line))]
    return found


def out_defaults(root: Path = ROOT) -> list[tuple[str, str]]:
    """(script, default) of every ``add_argument("--out", default=...)`` with a constant string
    default: a run without ``--out`` writes there."""
    found = []
    for path in benchmark_scripts(root):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == "--out"
            ):
                continue
            for keyword in node.keywords:
                if (
                    keyword.arg == "default"
                    and isinstance(keyword.value, ast.Constant)
                    and isinstance(keyword.value.value, str)
                ):
                    found.append((path.relative_to(root).as_posix(), keyword.value.value))
    return found


def committed_reports(root: Path = ROOT) -> list[str]:
    """The files in docs/measurements (repository paths, sorted), the index itself left out."""
    folder = root / FOLDER
    return sorted(
        p.relative_to(root).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and p.relative_to(root).as_posix() != INDEX
    )


def problems(root: Path = ROOT) -> list[str]:
    """What is wrong with docs/measurements and the benchmarks' outputs, one line each; [] if
    nothing."""
    retired = retired_reports(root)
    found = []
    written: dict[str, list[Usage]] = {}
    for usage in usages(root):
        for output in usage.outputs:
            written.setdefault(output, []).append(usage)
    for output, claims in sorted(written.items()):
        if not output.startswith(FOLDER + "/"):
            found.append(
                f"{claims[0].script}: `{claims[0].command}` writes {output}, outside {FOLDER}/"
            )
        elif not (root / output).is_file():
            found.append(
                f"{claims[0].script}: `{claims[0].command}` promises {output}, "
                "which is not committed"
            )
        if len(claims) > 1:
            found.append(
                f"{output} is written by {len(claims)} commands: "
                + "; ".join(f"`{u.command}`" for u in claims)
            )
    for script, default in out_defaults(root):
        if not default.startswith(FOLDER + "/"):
            found.append(f"{script}: --out defaults to {default}, outside {FOLDER}/")
    for former, present in sorted(moved_scripts(root).items()):
        if not (root / present).is_file():
            found.append(f"{HISTORY}: {former} moved to {present}, which is not there")
    for report, gone in sorted(retired.items()):
        if not (root / report).is_file():
            found.append(f"{report}: retired with {gone.script}, but not committed")
        if report in written:
            found.append(f"{report}: retired with {gone.script}, yet a usage line writes it")
    found += [
        f"{report}: no benchmark's docstring shows a command that writes it"
        for report in committed_reports(root)
        if report not in written and report not in retired
    ]
    return found


def first_line(text: str) -> str:
    """The report's first heading (``#`` marks dropped), else its first line of prose, else its
    first line: a report that opens with a table says what it is below it.

    >>> first_line("| a | b |\\n|---|---|\\n| 1 | 2 |\\n\\nratio 1.4\\n")
    'ratio 1.4'
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    headings = [line.lstrip("#").strip() for line in lines if line.startswith("#")]
    prose = [line for line in lines if not line.startswith("|")]
    return (headings or prose or lines or [""])[0]


def measured_line(text: str) -> str:
    """The first line with an ISO date, else the first ``load average`` line, else ''."""
    lines = [line.strip() for line in text.splitlines()]
    dated = [line for line in lines if _DATE.search(line)]
    loads = [line for line in lines if line.startswith("load average")]
    return (dated or loads or [""])[0]


def _cell(text: str) -> str:
    """Text for a markdown table cell: pipes escaped, never empty."""
    return text.replace("|", "\\|") if text else "—"


def render(root: Path = ROOT) -> str:
    """The index's markdown: one row per report a usage line writes, by report name, then the
    reports of retired benchmarks."""
    retired = retired_reports(root)
    rows = sorted(
        (
            (output, usage)
            for usage in usages(root)
            for output in usage.outputs
            if output.startswith(FOLDER + "/") and (root / output).is_file()
        ),
        key=lambda row: row[0],
    )
    lines = [
        "# Measurements",
        "",
        "Reports written by the benchmark scripts under `benchmarks/` (peer comparisons in",
        "`peers/`, scaling studies in `studies/`), each with the command that wrote it. The",
        "guides that read these numbers are [PERFORMANCE](../PERFORMANCE.md) and",
        "[RESULTS](../RESULTS.md).",
        "This index is generated from the benchmarks' docstrings and `benchmarks/history.toml` by",
        "`.venv/bin/python benchmarks/tools/measurements_index.py`; `tests/test_docs_layout.py`",
        "fails when it is stale.",
        "",
        "| report | benchmark | command | first line | measured |",
        "|---|---|---|---|---|",
    ]
    for output, usage in rows:
        text = (root / output).read_text(encoding="utf-8") if output.endswith(".md") else ""
        name = output.removeprefix(FOLDER + "/")
        script = usage.script.removeprefix("benchmarks/")
        lines.append(
            f"| [{name}]({name}) | [{script}](../../{usage.script}) | `{usage.command}` | "
            f"{_cell(first_line(text))} | {_cell(measured_line(text))} |"
        )
    moved = moved_scripts(root)
    if moved:
        since = history(root)["moved"].get("commit", "")
        lines += [
            "",
            "## Former paths",
            "",
            "A report shows the command it was made with. Reports measured up to commit "
            f"{since}, before the scripts were grouped, name them at their former paths; each "
            "script is the same at its present path:",
            "",
            "| former path | present path |",
            "|---|---|",
            *(
                f"| `{former}` | [{present}](../../{present}) |"
                for former, present in sorted(moved.items())
            ),
        ]
    gone = [(report, r) for report, r in sorted(retired.items()) if (root / report).is_file()]
    if gone:
        lines += [
            "",
            "## Retired benchmarks",
            "",
            "Their reports stay as measured; `git show COMMIT:SCRIPT` prints the script.",
            "",
            "| report | benchmark | command | last commit with it | why it was retired |",
            "|---|---|---|---|---|",
        ]
        for report, r in gone:
            name = report.removeprefix(FOLDER + "/")
            lines.append(
                f"| [{name}]({name}) | {r.script.removeprefix('benchmarks/')} | `{r.command}` "
                f"| {r.commit} | {_cell(r.why)} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if the index is stale or the folder is wrong",
    )
    args = parser.parse_args(argv)
    wrong = problems()
    for line in wrong:
        print(f"error: {line}", file=sys.stderr)
    index = ROOT / INDEX
    text = render()
    if args.check:
        stale = not index.is_file() or index.read_text(encoding="utf-8") != text
        if stale:
            print(
                f"error: {INDEX} is stale: .venv/bin/python benchmarks/tools/measurements_index.py",
                file=sys.stderr,
            )
        return 1 if wrong or stale else 0
    index.write_text(text, encoding="utf-8")
    print(f"wrote {INDEX}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
