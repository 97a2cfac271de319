"""One wall for guests (issue 51): a plugin method runs in a worker process of its own
(``methods/wall.py``), so what it does to its process (an exit by any name, a signal handler, a
crash) cannot end, hang or mislabel the run. Each case below ended the run with exit 0, no error
line and no leaderboards before the wall (the in-process guards replaced only the name
``os._exit``); now it is one ``error:`` line naming the plugin and the call, exit 5, and every other
method's records, leaderboards and page are written. SIGTERM stays the run's: exit 143.

Each CLI case runs ``random`` and a plugin file's ``Bad`` through ``run_bench.py`` in a process of its
own (helpers from ``test_trust_plugins.py``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from test_trust_plugins import (
    HEAD,
    PLUGIN_EXIT,
    ROOT,
    cli,
    embedding,
    error_lines,
    one_plugin_error,
    records,
    write_pairs,
)
from test_trust_plugins import run as run

pytestmark = pytest.mark.usefixtures("forget_plugins")


def kept(tmp_path, out: str = "o") -> None:
    """The other method's record, the leaderboards and the page were written."""
    assert list(records(tmp_path / out)) == ["random on pairs"]
    assert "random" in (tmp_path / out / "leaderboard.csv").read_text()
    assert (tmp_path / out / "index.html").exists()


@pytest.mark.parametrize(
    ("body", "ended"),
    [
        ("import posix; posix._exit(0)", "exit status 0"),
        ("import ctypes; ctypes.CDLL(None)._exit(0)", "exit status 0"),
        ("_exit(0)", "exit status 0"),  # `from os import _exit`, bound at import: no name to replace
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "killed by SIGKILL"),
        ("import os; os.abort()", "killed by SIGABRT"),
        ("import ctypes; ctypes.string_at(0)", "killed by SIGSEGV"),  # a crash in native code
    ],
)
def test_an_exit_by_any_name_ends_the_plugins_worker_not_the_run(tmp_path, body, ended):
    done = cli(tmp_path, embedding(body).replace("import sys\n", "import sys\nfrom os import _exit\n", 1))
    one_plugin_error(
        done.returncode, done.stderr, PLUGIN_EXIT, f"encode() ended the worker process it runs in ({ended}"
    )
    assert "not recorded: bad on pairs" in error_lines(done.stderr)[0]
    kept(tmp_path)


def test_sigterm_ends_the_run_even_when_the_plugin_installed_a_handler(tmp_path):
    """A CI timeout (SIGTERM to the run) while the plugin runs: before, the plugin's handler had
    replaced the run's, and the run ended with exit 0, no leaderboards; now 143, as documented."""
    started = tmp_path / "started"
    write_pairs(tmp_path / "pairs.tsv")
    (tmp_path / "bad.py").write_text(
        HEAD
        + f"""
import posix, signal, time
from pathlib import Path


class Bad(EmbeddingMethod):
    name, summary = "bad", "swallows SIGTERM, then blocks"

    def encode(self, sentences):
        signal.signal(signal.SIGTERM, lambda *_: posix._exit(0))
        Path({str(started)!r}).write_text("in encode")
        while True:
            time.sleep(1)
""",
        encoding="utf-8",
    )
    process = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "run_bench.py"),
            "--methods",
            "random",
            "bad.py:Bad",
            "--tasks",
            "file:pairs.tsv",
            "--bootstrap",
            "0",
            "--no-progress",
            "--no-plots",
            "--cache-dir",
            "c",
            "--output-dir",
            "o",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        while not started.exists() and process.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(0.2)  # a poll, not a measurement: the plugin says when it blocks
        assert started.exists(), process.communicate()[1]
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)  # a hang guard only
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 143, err
    assert "terminated (SIGTERM)" in err and not error_lines(err)
    assert list(records(tmp_path / "o")) == ["random on pairs"]  # finished before the plugin blocked


def test_a_plugins_own_user_error_stays_exit_2_through_the_wall(run, tmp_path):
    source = embedding("raise UserError('bad.model: no such file; pass --set bad.model=PATH')")
    source = source.replace("import numpy as np\n", "import numpy as np\nfrom harness.core.errors import UserError\n")
    code, _, err = run(source)
    assert code == 2, err
    (line,) = error_lines(err)
    assert "bad.model: no such file; pass --set bad.model=PATH" in line and "Traceback" not in err


def test_a_plugins_torch_runs_in_its_worker_after_the_run_used_openmp(tmp_path):
    """GNU OpenMP's pool does not survive a fork: a worker forked after the run's own torch ops would
    hang in its first parallel op, unless it runs torch on one thread (methods/wall.py). In a process
    of its own, so that a hang is a timeout, not a stuck test run."""
    pytest.importorskip("torch")
    write_pairs(tmp_path / "pairs.tsv")
    script = tmp_path / "after_openmp.py"
    script.write_text(f"""
import numpy as np
import torch

import harness
from harness.method_api import EmbeddingMethod
from harness.runner.settings.config import BenchConfig

torch.set_num_threads(2)
big = torch.randn(512, 4096)
assert float((big * 2 + 1).exp().sum()) > 0  # the run's own OpenMP pool has run


class Torchy(EmbeddingMethod):
    name, summary = "torchy", "a parallel torch op in encode"

    def encode(self, sentences):
        (torch.randn(512, 4096) * 2 + 1).exp().sum()
        return np.array([[len(s), s.count(" ") + 1.0] for s in sentences])


harness.register_method(Torchy)
cfg = BenchConfig(methods=("torchy",), tasks=("file:{tmp_path / "pairs.tsv"}",), cache_dir="{tmp_path / "c"}",
                  output_dir="{tmp_path / "o"}", progress=False, plots=False, bootstrap=0)
print(len(harness.run(cfg).records))
""")
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0 and done.stdout.split() == ["1"], done.stderr


def test_what_a_plugin_returns_crosses_the_wall_as_it_was(tmp_path):
    """Vectors come back bit for bit (raw bytes, never pickled): the exported vectors of a plugin
    registered from Python are its own, computed here again from the same function."""
    import harness
    from harness.method_api import EmbeddingMethod
    from harness.runner.settings.config import BenchConfig

    namespace: dict = {}
    exec(HEAD, namespace)  # the plugin files' vectors(): float64, 8 columns

    class Mine(EmbeddingMethod):
        name, summary = "mine", "vectors from a function"

        def encode(self, sentences):
            return namespace["vectors"](sentences)

    harness.register_method(Mine)
    write_pairs(tmp_path / "pairs.tsv")
    cfg = BenchConfig(
        methods=("mine",),
        tasks=(f"file:{tmp_path / 'pairs.tsv'}",),
        cache_dir=str(tmp_path / "c"),
        output_dir=str(tmp_path / "o"),
        progress=False,
        plots=False,
        bootstrap=0,
        export_embeddings=str(tmp_path / "emb"),
    )
    got = harness.run(cfg).embeddings("mine", "pairs")
    expected = np.asarray(namespace["vectors"](got.sentences), dtype=np.float64).astype(np.float32)
    np.testing.assert_array_equal(got.vectors, expected)


def test_what_a_plugins_worker_counts_is_the_runs(tmp_path):
    """The worker's context is a copy of the run's: what a plugin counts there (a model trained,
    sentences its own model encoded) comes back with each answer into the run's outcome."""
    from dataclasses import replace

    import harness
    from harness.method_api import EmbeddingMethod
    from harness.runner.settings.config import BenchConfig

    said = tmp_path / "prepared.txt"

    class Counts(EmbeddingMethod):
        name, summary, uses_fit_set = "counts", "trains once, encodes with a model of its own", True

        @classmethod
        def make_spec(cls, request, ctx):
            return replace(super().make_spec(request, ctx), backbone="none", pooling="none", layers=())

        def fit(self, fit_set):
            self.ctx.count_trained()

        def prepare(self, sentences):
            said.write_text(str(len(set(sentences))))
            self.ctx.count_forwarded(len(set(sentences)), "cpu")

        def encode(self, sentences):
            return np.array([[len(s), s.count(" ") + 1.0] for s in sentences])

    harness.register_method(Counts)
    write_pairs(tmp_path / "pairs.tsv")
    cfg = BenchConfig(
        methods=("counts",),
        tasks=(f"file:{tmp_path / 'pairs.tsv'}",),
        cache_dir=str(tmp_path / "c"),
        output_dir=str(tmp_path / "o"),
        progress=False,
        plots=False,
        bootstrap=0,
    )
    outcome = harness.run(cfg)
    assert outcome.models_trained == 1
    assert outcome.sentences_forwarded == int(said.read_text()) > 0


def test_a_plugins_thread_that_prints_after_its_call_is_heard_and_waited_for(tmp_path):
    """A thread ending within the worker's grace: its late print comes back as the plugin's line while
    the worker stops, no warning, exit 0."""
    body = (
        "import threading, time\n"
        "        threading.Thread(target=lambda: (time.sleep(0.3), print('late', flush=True))).start()\n"
        "        return vectors(sentences)"
    )
    done = cli(tmp_path, embedding(body), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "plugin bad: late" in done.stderr.splitlines()
    assert not [line for line in done.stderr.splitlines() if line.startswith(("warning:", "error:"))]


def test_an_answer_that_cannot_cross_the_wall_is_the_plugins_line(run, tmp_path):
    """A list holding itself cannot be sent as plain data: one line naming the plugin and the call."""
    code, _, err = run(embedding("loop = []\n        loop.append(loop)\n        return loop"))
    one_plugin_error(code, err, PLUGIN_EXIT, "encode() raised RecursionError")
    assert list(records(tmp_path / "out")) == ["random on pairs"]
