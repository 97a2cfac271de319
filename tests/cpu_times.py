"""CPU seconds per test: what a test costs, whatever else the machine is running.

A pytest plugin (tests/conftest.py loads it). pytest's ``--durations`` are wall seconds, which a
loaded machine stretches; this one counts the CPU time of the test's process and of the
subprocesses it waited for (``os.times()``: user + system, own + children), setup, call and
teardown together. A session fixture's cost lands on the first test that asks for it.

- ``--cpu-times FILE`` writes ``{test id: CPU seconds}`` as JSON (under pytest-xdist, each worker
  writes ``FILE.<worker>`` and the process that started the run merges them into FILE).
- ``--cpu-budget SECONDS`` names, at the end of the run, the tests whose call (the test function,
  not its fixtures' setup: the first test on a worker to ask for a tiny model pays for building it)
  cost more: in ``make test-fast``, the tests to mark ``heavy``, or to make cheaper, so that the tier
  stays quick.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

SPENT = pytest.StashKey[dict]()
CALLED = pytest.StashKey[dict]()


def pytest_addoption(parser) -> None:
    group = parser.getgroup("cpu-times", "CPU seconds per test")
    group.addoption("--cpu-times", metavar="FILE", default=None, help="write {test id: CPU seconds} to FILE")
    group.addoption("--cpu-budget", metavar="SECONDS", type=float, default=None,
                    help="at the end, name the tests that took more CPU seconds than this")


def pytest_configure(config) -> None:
    if config.getoption("cpu_times", None) or config.getoption("cpu_budget", None) is not None:
        config.stash[SPENT], config.stash[CALLED] = {}, {}


def cpu() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    spent = item.config.stash.get(SPENT, None)
    if spent is None:
        yield
        return
    start = cpu()
    yield
    spent[item.nodeid] = round(cpu() - start, 3)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    called = item.config.stash.get(CALLED, None)
    start = cpu()
    yield
    if called is not None:
        called[item.nodeid] = round(cpu() - start, 3)


def pytest_testnodedown(node, error) -> None:
    """Under pytest-xdist: a worker's times come back to the process that started the run."""
    spent = node.config.stash.get(SPENT, None)
    if spent is not None:
        output = getattr(node, "workeroutput", {})  # none from a worker that crashed
        spent.update(output.get("cpu_times", {}))
        node.config.stash[CALLED].update(output.get("cpu_calls", {}))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus) -> None:
    config = session.config
    spent = config.stash.get(SPENT, None)
    if spent is None:
        return
    if hasattr(config, "workeroutput"):  # an xdist worker: hand them over
        config.workeroutput["cpu_times"] = spent
        config.workeroutput["cpu_calls"] = config.stash[CALLED]
        return
    path = config.getoption("cpu_times", None)
    if path:
        Path(path).write_text(json.dumps(dict(sorted(spent.items())), indent=1), encoding="utf-8")


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    spent = config.stash.get(SPENT, None)
    if not spent or hasattr(config, "workeroutput"):
        return
    budget = config.getoption("cpu_budget", None)
    total = sum(spent.values())
    terminalreporter.write_sep("-", "CPU seconds")
    terminalreporter.write_line(f"cpu-times: {len(spent)} tests, {total:.0f} CPU s in their setup, call and teardown")
    if budget is None:
        return
    called = config.stash[CALLED]
    over = sorted(((seconds, name) for name, seconds in called.items() if seconds > budget), reverse=True)
    for seconds, name in over:
        terminalreporter.write_line(f"cpu-times: its call over the {budget:g} s budget: {seconds:6.1f} s  {name}")
    if over:
        terminalreporter.write_line("cpu-times: mark such a test `heavy` (or share its fixture) to keep the tier quick")
