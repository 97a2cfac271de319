"""The plot worker (harness/runner/tables/plot_worker.py): a spawned process imports matplotlib while
a cold run encodes and draws its PNGs, byte for byte the files drawn in-process; a worker that dies,
hangs or never starts loses no file (they are drawn in-process), an error the drawing raises is
raised in the parent as it would be in-process, and a job off the allowlist is refused unrun.

Tests that spawn a worker take a second or two each (the child imports harness and matplotlib); the
one end-to-end test runs four tiny runs in one subprocess (torch imported once)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.runner.records.schema import PROTOCOL_GROUP
from harness.runner.tables import plot_worker, plots
from harness.runner.tables.plot_worker import ALLOWED, PlotWorker, Unavailable

ROOT = Path(__file__).resolve().parent.parent


def long_rows() -> list[dict]:
    """Leaderboard rows of two methods on two tasks, as frames.long_rows makes them (the keys
    leaderboard_png reads)."""
    group = {"aggregation": "all", "source": "packaged", "dtype": "fp32", "max_length": 128,
             "first_last_layers": "1,-1", "metric": "spearman"}
    assert set(group) == set(PROTOCOL_GROUP)
    rows = []
    for method, base in (("avg", 70.0), ("whitening", 76.5)):
        for task, shift in (("STS-B", 0.0), ("SICK-R", -3.25)):
            score = base + shift
            rows.append({"method": method, "backbone": "models/minilm", "kind": "embedding", "fit_set": "",
                         **group, "task": task, "score": score, "spearman": score, "ci_low": score - 1.5,
                         "ci_high": score + 1.25})
    return rows


def frontier_rows() -> list[dict]:
    """Rows of frontier.frontier_rows' shape: one method at three sizes in two precisions."""
    group = {k: v for k, v in long_rows()[0].items() if k in PROTOCOL_GROUP}
    return [{**group, "of": "avg", "backbone": "models/minilm", "fit_set": "", "task": "STS-B", "precision": precision,
             "similarity": "cosine", "bytes_per_vector": size * (4 if precision == "fp32" else 1),
             "spearman": 60.0 + size / 32 - (precision != "fp32"),
             "ci_low": 58.0 + size / 32, "ci_high": 62.0 + size / 32,
             "pareto": precision == "int8" or size == 384}
            for precision in ("fp32", "int8") for size in (64, 128, 384)]


def diagnostics_records() -> list[dict]:
    return [{"method": {"label": label}, "task": {"title": "STS-B"},
             "diagnostics": {"singular_values": [1.0, 0.5 / k, 0.1 / k, 0.01],
                             "cosine_histogram": {"edges": [-1.0, -0.5, 0.0, 0.5, 1.0], "counts": [1, 4 * k, 9, 2]}}}
            for k, label in ((1, "avg"), (2, "whitening"))]


@pytest.fixture
def worker():
    """A worker of this test, current inside it (stopped after), started even though this process
    may have imported matplotlib already (serving() would then start none)."""
    # At normal priority and waited for: a busy test machine would starve an idle-priority child
    # past a run's first job (READY_WAIT_S); these tests are about what comes after.
    with plot_worker.made_current(PlotWorker.start(idle=False)) as started:
        assert started is not None and started.process.is_alive()
        assert started.wait_ready(60)
        yield started


def test_the_worker_draws_the_same_bytes_as_in_process(worker, tmp_path):
    """matplotlib's Agg PNGs are byte-deterministic for the same inputs (same process or not), so
    the files are compared whole, metadata (the input key, matplotlib's version) included."""
    jobs = [(plots.leaderboard_png, (long_rows(),), "leaderboard.png"),
            (plots.diagnostics_png, (diagnostics_records(),), "diagnostics-stsb.png"),
            (plots.frontier_png, (frontier_rows(),), "frontier.png")]
    for function, args, name in jobs:
        via_worker = worker.draw(function, (*args, tmp_path / "worker" / name), {})
        in_process = function(*args, tmp_path / "here" / name)
        assert via_worker == tmp_path / "worker" / name and in_process == tmp_path / "here" / name
        assert via_worker.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert via_worker.read_bytes() == in_process.read_bytes()
    assert not worker.broken  # answered, not fallen back


def test_an_error_raised_by_the_drawing_is_raised_in_the_parent_as_in_process(worker, tmp_path):
    """A plot under a path that is a file: the same exception type and message as in-process, and
    the worker keeps serving (the function failed, not the worker)."""
    (tmp_path / "plots").write_text("a file, not a folder")
    target = tmp_path / "plots" / "leaderboard.png"
    with pytest.raises(OSError) as here:
        plots.leaderboard_png(long_rows(), target)
    with pytest.raises(OSError) as there:
        plot_worker.draw(plots.leaderboard_png, long_rows(), target)
    assert type(there.value) is type(here.value) and there.value.errno == here.value.errno
    assert any("plot worker" in note for note in there.value.__notes__)
    with pytest.raises(KeyError) as missing:  # a row without its score column
        plot_worker.draw(plots.leaderboard_png, [{k: v for k, v in long_rows()[0].items() if k != "score"}],
                   tmp_path / "x.png")
    assert missing.value.args == ("score",)
    assert not worker.broken and plot_worker.draw(plots.leaderboard_png, long_rows(), tmp_path / "ok.png").is_file()


def test_a_job_off_the_allowlist_is_refused_unrun(worker, tmp_path):
    marker = tmp_path / "ran"
    answer = worker.exchange(("pathlib", "Path.touch", (marker,), {}))
    assert answer[0] == "refused" and "pathlib:Path.touch is not a plot function" in answer[1]
    assert worker.exchange(("not", "a", "job")) == ("refused", "not a job: ('not', 'a', 'job')")
    assert not marker.exists()
    with pytest.raises(ValueError, match="is not a plot function"):  # the parent sends none either
        worker.draw(Path.touch, (marker,), {})
    assert not marker.exists()
    # plots.draw calls a function off the list in this process (a test's stand-in for a PNG function)
    assert plot_worker.draw(os.getpid) == os.getpid() != worker.process.pid
    assert plot_worker.draw(plots.leaderboard_png, long_rows(), tmp_path / "a.png").is_file() and not worker.broken
    assert plot_worker.run_job(("os", "system", ("touch " + str(marker),), {}))[0] == "refused"
    assert not marker.exists()
    assert all(name.split(":")[1].endswith(("_png", "_draw_history")) for name in ALLOWED)


def test_a_killed_worker_loses_no_file(worker, tmp_path):
    worker.process.kill()
    worker.process.join(5)
    path = plot_worker.draw(plots.leaderboard_png, long_rows(), tmp_path / "plots" / "leaderboard.png")
    assert path == tmp_path / "plots" / "leaderboard.png" and path.is_file()
    assert path.read_bytes() == plots.leaderboard_png(long_rows(), tmp_path / "again.png").read_bytes()
    assert worker.broken
    with pytest.raises(Unavailable):  # later jobs go straight to in-process
        worker.draw(plots.leaderboard_png, (long_rows(), tmp_path / "never.png"), {})
    assert not (tmp_path / "never.png").exists()


def test_a_hung_worker_is_killed_and_the_file_drawn_in_process(worker, tmp_path, monkeypatch):
    monkeypatch.setattr(plot_worker, "JOB_TIMEOUT_S", 0.5)
    os.kill(worker.process.pid, signal.SIGSTOP)  # alive, never answers
    started = time.perf_counter()
    path = plot_worker.draw(plots.leaderboard_png, long_rows(), tmp_path / "leaderboard.png")
    assert path.is_file() and time.perf_counter() - started < 30
    worker.process.join(5)
    assert worker.broken and not worker.process.is_alive()  # killed, not left stopped


def test_a_worker_never_sent_a_job_is_terminated_not_waited_for():
    """A run that fails before its reports stops a worker that may still be importing matplotlib:
    it is terminated (SIGTERM) rather than asked and waited for; one that drew exits on request."""
    idle = PlotWorker.start(idle=False)
    assert idle is not None
    idle.stop()
    assert not idle.process.is_alive() and idle.process.exitcode == -signal.SIGTERM

    used = PlotWorker.start(idle=False)
    assert used is not None and used.wait_ready(60)
    answer = used.exchange(("harness.runner.tables.plots", "no_such", (), {}))  # refused, yet sent
    assert answer[0] in ("raised", "refused")
    used.stop()
    assert not used.process.is_alive() and used.process.exitcode == 0


def test_a_worker_that_does_not_start_means_drawing_in_process(tmp_path, monkeypatch):
    from multiprocessing.context import SpawnProcess

    def refuse(self):
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(SpawnProcess, "start", refuse)
    monkeypatch.setattr(plot_worker, "wanted", lambda: True)
    with plot_worker.serving() as started:
        assert started is None and plot_worker.current() is None
        assert plot_worker.draw(plots.leaderboard_png, long_rows(), tmp_path / "a.png").is_file()


def test_the_switch_and_an_imported_matplotlib_start_no_worker(monkeypatch):
    assert plot_worker.switched_on({}) and plot_worker.switched_on({"STS_BENCH_PLOT_WORKER": "1"})
    assert not any(plot_worker.switched_on({"STS_BENCH_PLOT_WORKER": v}) for v in ("0", "off", "False", " no "))
    monkeypatch.delitem(sys.modules, "matplotlib.pyplot", raising=False)
    monkeypatch.setenv("STS_BENCH_PLOT_WORKER", "0")
    assert not plot_worker.wanted()
    monkeypatch.setenv("STS_BENCH_PLOT_WORKER", "1")
    assert plot_worker.wanted()
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", object())
    assert not plot_worker.wanted()  # drawing in-process then costs no import
    with plot_worker.serving() as started:
        assert started is None


class TwoArguments(Exception):
    def __init__(self, what: str, where: str) -> None:
        super().__init__(f"{what} at {where}")


def test_an_exception_that_does_not_rebuild_becomes_a_runtime_error_naming_it():
    """TwoArguments pickles as (cls, args) with one argument: it does not rebuild, so the parent
    raises a RuntimeError with its type and message."""
    assert plot_worker.sendable(TwoArguments("disk", "/x")) is None
    assert isinstance(plot_worker.sendable(KeyError("k")), KeyError)
    error = plot_worker.rebuilt("tests.x", "TwoArguments", "disk at /x", None, "Traceback ...")
    assert type(error) is RuntimeError and error.args == ("tests.x.TwoArguments: disk at /x",)
    assert error.__notes__ == ["raised in the plot worker process:\nTraceback ..."]


RUNS = r"""
import json, os, sys
import harness
from harness.runner.tables import plot_worker as pw

pw.IDLE_PRIORITY = False  # a busy test machine would starve an idle-priority child: the run's own
pw.READY_WAIT_S = 120.0  # fallback would then draw in-process, which is not what this test is about
started = []
start = pw.PlotWorker.start.__func__
pw.PlotWorker.start = classmethod(lambda cls: started.append(start(cls)) or started[-1])
model, root, senteval = sys.argv[1], sys.argv[2], sys.argv[3]

def run(name, cache, kill=False):
    started.clear()
    if kill:  # the worker dies as soon as it is started: the run draws in-process
        killed = lambda cls: started.append(start(cls)) or started[-1].process.kill() or started[-1]
        pw.PlotWorker.start = classmethod(killed)
    cfg = harness.BenchConfig(methods=("avg",), tasks=("sts12",), source="senteval", senteval_dir=senteval,
                              backbone=model, cache_dir=f"{root}/{cache}", output_dir=f"{root}/{name}",
                              progress=False, bootstrap=200, threads=1)
    out = harness.run(cfg)
    return {"started": [w is not None for w in started], "forwarded": out.sentences_forwarded,
            "matplotlib": "matplotlib" in sys.modules, "alive": [w.process.is_alive() for w in started if w]}

result = {"worker": run("worker", "c1")}
result["warm"] = run("worker", "c1")
result["killed"] = run("killed", "c2", kill=True)
os.environ["STS_BENCH_PLOT_WORKER"] = "0"
result["in_process"] = run("in_process", "c3")
print(json.dumps(result))
"""


@pytest.mark.heavy  # two cold CLI runs; the worker itself is tested above
def test_a_cold_run_draws_in_the_worker_the_files_drawn_in_process(tiny_bert, senteval_root, tmp_path):
    """One subprocess, four tiny runs: cold with the worker (the parent never imports matplotlib),
    a warm re-run (no worker started: nothing to encode), cold with a worker killed at its start,
    cold with STS_BENCH_PLOT_WORKER=0; the three cold runs write the same PNGs."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("STS_BENCH_PLOT_WORKER", None)
    done = subprocess.run([sys.executable, "-c", RUNS, str(tiny_bert), str(tmp_path), str(senteval_root)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["worker"]["started"] == [True] and result["worker"]["forwarded"] > 0
    assert result["worker"]["matplotlib"] is False and result["worker"]["alive"] == [False]  # stopped at the end
    assert result["warm"]["started"] == [] and result["warm"]["forwarded"] == 0 and not result["warm"]["matplotlib"]
    assert result["killed"]["started"] == [True] and result["killed"]["matplotlib"] is True  # drawn here
    assert result["in_process"]["started"] == [] and result["in_process"]["forwarded"] > 0
    names = sorted(p.name for p in (tmp_path / "in_process" / "plots").iterdir())
    assert names == ["leaderboard.png"]  # one commit in each folder: no history.png (drawn from the second)
    for name in names:
        expected = (tmp_path / "in_process" / "plots" / name).read_bytes()
        assert (tmp_path / "killed" / "plots" / name).read_bytes() == expected
        assert (tmp_path / "worker" / "plots" / name).read_bytes() == expected


SCRIPT = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
with open(sys.argv[1], "a") as marker:  # top level, no __main__ guard: spawn would run it again
    marker.write("ran\\n")
from harness.runner.tables import plot_worker, plots
plot_worker.IDLE_PRIORITY = False  # a busy test machine would starve an idle-priority child
plot_worker.READY_WAIT_S = 120.0
with plot_worker.serving() as worker:
    assert worker is not None and "matplotlib" not in sys.modules
    import test_plot_worker as t
    path = plot_worker.draw(plots.leaderboard_png, t.long_rows(), Path(sys.argv[1]).with_suffix(".png"))
    assert not worker.broken and "matplotlib" not in sys.modules
print(path)
"""


def test_a_script_without_a_main_guard_is_not_run_again_by_the_worker(tmp_path):
    """Spawn imports the parent's __main__ again in the child; a user's script that calls harness.run at
    top level would run its benchmark twice. The worker starts with no __main__ of the caller's."""
    script = tmp_path / "bench.py"
    script.write_text(SCRIPT)
    marker = tmp_path / "marker.txt"
    env = {k: v for k, v in os.environ.items() if k != "STS_BENCH_PLOT_WORKER"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, str(script), str(marker), str(Path(__file__).parent)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert marker.read_text() == "ran\n"
    assert Path(done.stdout.strip()) == marker.with_suffix(".png") and marker.with_suffix(".png").is_file()


def test_a_stopped_worker_ends_at_once_with_its_files_whole(tmp_path):
    """Asked to stop, the child leaves without the interpreter's teardown of matplotlib (os._exit
    after flushing): stop() finds it already gone, the exit code is 0 (not the terminate() a
    child that kept the parent waiting would get), and the PNG it drew is whole."""
    with plot_worker.made_current(PlotWorker.start(idle=False)) as worker:
        assert worker is not None and worker.wait_ready(60)
        path = worker.draw(plots.leaderboard_png, (long_rows(), tmp_path / "leaderboard.png"), {})
    assert worker.process.exitcode == 0
    assert path.read_bytes() == plots.leaderboard_png(long_rows(), tmp_path / "again.png").read_bytes()


def test_the_child_imports_at_idle_priority_and_a_starved_one_is_not_waited_for(tmp_path, monkeypatch):
    """The child takes only the cycles the run leaves (SCHED_IDLE), so a machine whose cores are
    all busy may starve it: the first job then waits READY_WAIT_S for its greeting, no longer, and
    is drawn in-process; the child is killed, not left behind."""
    starved = PlotWorker.start()
    assert starved is not None
    os.kill(starved.process.pid, signal.SIGSTOP)  # a child that gets no CPU before the first job
    monkeypatch.setattr(plot_worker, "READY_WAIT_S", 0.2)
    with plot_worker.made_current(starved):
        started = time.perf_counter()
        path = plot_worker.draw(plots.leaderboard_png, long_rows(), tmp_path / "leaderboard.png")
        waited = time.perf_counter() - started
    assert path.read_bytes() == plots.leaderboard_png(long_rows(), tmp_path / "again.png").read_bytes()
    assert starved.broken and not starved.ready and waited < 30
    starved.process.join(5)
    assert not starved.process.is_alive()

    default = PlotWorker.start()  # a run's worker: the child sets its own policy first thing
    assert default is not None
    try:
        deadline = time.monotonic() + 60
        while os.sched_getscheduler(default.process.pid) != os.SCHED_IDLE and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.sched_getscheduler(default.process.pid) == os.SCHED_IDLE
    finally:
        default.stop()
