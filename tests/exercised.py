"""Which modules of harness/ and methods/ a pytest run executes, and which of their lines.

A pytest plugin (tests/conftest.py loads it), off unless asked: ``--exercised=DIR`` traces every
pytest process (each xdist worker writes ``DIR/<worker>.json``: per project file, the lines that
ran and the functions that were called), and the process that started the run merges them into a
report: per module, the share of its executable lines that ran, and the modules that never ran a
function. ``--exercised-require`` makes the run fail when a module of harness/ or methods/ was not
imported or, defining functions, ran none of them (``make test-tiers`` passes it: the working tier
must reach every module). ``--exercised-compare=DIR2`` adds a column from an earlier report, e.g. of
the whole suite. Write the options with ``=``: after a space, pytest takes an existing folder for a
test path, and its xdist workers then miss tests/conftest.py and these options.

Only the pytest processes are traced: a module that only a test's subprocess runs counts as not
exercised, so the report is a lower bound. It needs nothing but the standard library
(``sys.settrace``, local tracing only inside project files), at the price of a slower run: in
Python code of the project's own files each line costs a call.

Run alone: ``python tests/exercised.py DIR [DIR2]`` prints the report of an earlier run.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "methods")
PREFIXES = tuple(str(ROOT / package) + os.sep for package in PACKAGES)
REPORT = "report.json"


def project_files() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def relative(path: str | Path) -> str:
    return Path(path).resolve().relative_to(ROOT).as_posix()


def executable_lines(path: Path) -> set[int]:
    """The lines of ``path`` that have bytecode, in every function and class body (what a line
    event can report), less the docstrings: what running the file could mark as run."""
    code = compile(path.read_text(encoding="utf-8"), str(path), "exec")
    lines: set[int] = set()
    stack = [code]
    while stack:
        current = stack.pop()
        lines.update(line for _, _, line in current.co_lines() if line is not None)
        stack.extend(const for const in current.co_consts if isinstance(const, types.CodeType))
    return lines


def functions(path: Path) -> set[str]:
    """``name:first line`` of each function and method of ``path``: the code objects below the module."""
    code = compile(path.read_text(encoding="utf-8"), str(path), "exec")
    found: set[str] = set()
    stack = list(code.co_consts)
    while stack:
        const = stack.pop()
        if isinstance(const, types.CodeType):
            if not const.co_name.startswith("<") or const.co_name == "<lambda>":
                found.add(f"{const.co_name}:{const.co_firstlineno}")
            stack.extend(const.co_consts)
    return found


class Recorder:
    """``sys.settrace`` for this thread and every thread started after it. A call in a project file
    is recorded, and its frame gets a local tracer that records its lines; any other frame gets none,
    so code outside the project pays one call per Python call and nothing per line. A test that sets
    a tracer of its own keeps calling this one (tests/test_oracles_stats.py) or restores it after."""

    def __init__(self) -> None:
        self.lines: dict[str, set[int]] = {}
        self.called: dict[str, set[str]] = {}

    def start(self) -> None:
        """Modules imported before now (tests/conftest.py imports a few) ran their module body:
        its own lines count as run."""
        for module in list(sys.modules.values()):
            filename = getattr(module, "__file__", None) or ""
            if filename.startswith(PREFIXES):
                code = compile(Path(filename).read_text(encoding="utf-8"), filename, "exec")
                self.lines.setdefault(filename, set()).update(line for _, _, line in code.co_lines() if line)
                self.called.setdefault(filename, set())
        self.previous = (sys.gettrace(), threading.gettrace())
        threading.settrace(self.trace)
        sys.settrace(self.trace)

    def stop(self) -> None:
        """Back to the tracers set before :meth:`start` (none, outside a test of this file)."""
        sys.settrace(self.previous[0])
        threading.settrace(self.previous[1])  # type: ignore[arg-type]

    def trace(self, frame, event, arg):
        code = frame.f_code
        filename = code.co_filename
        if not filename.startswith(PREFIXES):
            return None
        lines = self.lines.get(filename)
        if lines is None:
            lines = self.lines[filename] = set()
            self.called[filename] = set()
        self.called[filename].add(f"{code.co_name}:{code.co_firstlineno}")
        lines.add(frame.f_lineno)

        def local(frame, event, arg):
            if event == "line":
                lines.add(frame.f_lineno)
            return local

        return local

    def dump(self, path: Path) -> None:
        data = {
            relative(name): {"lines": sorted(self.lines[name]), "called": sorted(self.called[name])}
            for name in self.lines
        }
        path.write_text(json.dumps(data), encoding="utf-8")


def merge(folder: Path) -> dict[str, dict[str, set]]:
    merged: dict[str, dict[str, set]] = {}
    for part in sorted(folder.glob("*.json")):
        if part.name == REPORT:
            continue
        for name, seen in json.loads(part.read_text(encoding="utf-8")).items():
            into = merged.setdefault(name, {"lines": set(), "called": set()})
            into["lines"].update(seen["lines"])
            into["called"].update(seen["called"])
    return merged


def report(folder: Path) -> dict[str, dict]:
    """Per project file: executable lines, how many ran, functions defined and called. Written to
    ``folder/report.json``."""
    merged = merge(folder)
    rows = {}
    for path in project_files():
        name = relative(path)
        lines, defined = executable_lines(path), functions(path)
        seen = merged.get(name, {"lines": set(), "called": set()})
        rows[name] = {
            "imported": name in merged,
            "lines": len(lines),
            "ran": len(lines & seen["lines"]),
            "functions": len(defined),
            "called": len(defined & seen["called"]),
        }
    (folder / REPORT).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return rows


def unexercised(rows: dict[str, dict]) -> list[str]:
    """Modules never imported, or defining functions of which none ran."""
    return [name for name, row in rows.items() if not row["imported"] or (row["functions"] and not row["called"])]


def percent(row: dict) -> float:
    return 100.0 * row["ran"] / row["lines"] if row["lines"] else 100.0


def table(rows: dict[str, dict], earlier: dict[str, dict] | None = None, lowest: int = 25) -> str:
    """The totals, then the ``lowest`` modules by share of lines run (with ``earlier``'s share)."""
    total = sum(row["lines"] for row in rows.values())
    ran = sum(row["ran"] for row in rows.values())
    out = [f"exercised: {len(rows) - len(unexercised(rows))}/{len(rows)} modules of harness/ and methods/ "
           f"run, {ran}/{total} executable lines ({100.0 * ran / total:.1f} %) in the pytest processes"]
    if earlier:
        etotal, eran = (sum(row[key] for row in earlier.values()) for key in ("lines", "ran"))
        out.append(f"exercised: the compared run: {eran}/{etotal} lines ({100.0 * eran / etotal:.1f} %)")
    out.append(f"exercised: the {lowest} modules with the lowest share of lines run"
               + (" (then the compared run's)" if earlier else "") + ":")
    for name in sorted(rows, key=lambda name: (percent(rows[name]), name))[:lowest]:
        row = rows[name]
        extra = f"  {percent(earlier[name]):5.1f} %" if earlier and name in earlier else ""
        out.append(f"  {percent(row):5.1f} %{extra}  {row['ran']:4}/{row['lines']:<4} "
                   f"functions {row['called']}/{row['functions']}  {name}")
    return "\n".join(out)


# -- the pytest plugin ---------------------------------------------------------------------------

def pytest_addoption(parser) -> None:
    group = parser.getgroup("exercised", "which modules of harness/ and methods/ the run executes")
    group.addoption("--exercised", metavar="DIR", default=None,
                    help="trace the run; write per-process line records and a report to DIR")
    group.addoption("--exercised-require", action="store_true", default=False,
                    help="fail the run if a module of harness/ or methods/ was not exercised")
    group.addoption("--exercised-compare", metavar="DIR", default=None,
                    help="an earlier --exercised DIR whose shares to print beside this run's")


HELD = pytest.StashKey[tuple]()


def worker_id(config) -> str | None:
    """The xdist worker's id ("gw0"), None in the process that started the run (not the environment:
    a pytest started by a test inherits PYTEST_XDIST_WORKER)."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput["workerid"] if workerinput else None


def pytest_configure(config) -> None:
    folder = config.getoption("exercised", None)
    if not folder:
        return
    folder = Path(folder)
    worker = worker_id(config)
    if worker is None:  # the process that started the run: clear the records of an earlier one
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.json"):
            stale.unlink()
    recorder = Recorder()
    recorder.start()
    config.stash[HELD] = (recorder, folder / f"{worker or 'main'}.json")


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus) -> None:
    """Each process writes its records before xdist's worker reports that it has finished; then
    the process that started the run, its workers done, merges them into the report."""
    config = session.config
    held = config.stash.get(HELD, None)
    if held is None:
        return
    recorder, path = held
    recorder.stop()
    recorder.dump(path)
    if worker_id(config) is not None:
        return
    folder = path.parent
    rows = report(folder)
    compare = config.getoption("exercised_compare", None)
    earlier = json.loads((Path(compare) / REPORT).read_text(encoding="utf-8")) if compare else None
    text = table(rows, earlier)
    missing = unexercised(rows)
    if missing:
        text += "\nexercised: NOT EXERCISED: " + ", ".join(missing)
    config.stash[TEXT] = text
    if missing and config.getoption("exercised_require") and session.exitstatus == 0:
        session.exitstatus = 1


TEXT = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    text = config.stash.get(TEXT, None)
    if text:
        terminalreporter.write_sep("-", "modules exercised")
        terminalreporter.write_line(text)


if __name__ == "__main__":
    here = report(Path(sys.argv[1]))
    before = json.loads((Path(sys.argv[2]) / REPORT).read_text(encoding="utf-8")) if len(sys.argv) > 2 else None
    print(table(here, before, lowest=len(here)))
    sys.exit(1 if unexercised(here) else 0)
