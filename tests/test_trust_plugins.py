"""Plugins are guests (issue 30): whatever a plugin method does at import or while the run calls it
(exits, raises, returns vectors or scores of the wrong shape, type or count, prints) is one
``error:`` line naming the plugin and its file, with its own exit code (5 at run time, 2 for a
file that does not import or a class that lacks what its base needs), never exit 0 and never "a
bug in sts-bench"; the other methods' records and the leaderboards are written. A built-in method's
bug is still exit 4 with its traceback.

Each case writes a small plugin file in ``tmp_path`` and runs it through the CLI beside the built-in
``random`` method (no backbone), on a TSV task of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fixtures import pairs

import harness
import methods
from harness.core.errors import PluginError, UserError
from harness.runner.settings.config import BenchConfig

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_EXIT = 5

HEAD = '''
import sys
import zlib

import numpy as np

from harness.method_api import BASE_VIEWS, EmbeddingMethod, Option, PairScoringMethod, PostProcessor


def vectors(sentences):
    """Deterministic, distinct vectors: a score that is defined."""
    return np.array([[zlib.crc32(f"{s}/{i}".encode()) % 997 / 997 - 0.5 for i in range(8)] for s in sentences])

'''


def embedding(body: str, extra: str = "") -> str:
    """A plugin file whose method ``bad`` encodes with ``body`` (``sentences`` in scope)."""
    return HEAD + f'''
class Bad(EmbeddingMethod):
    name, summary = "bad", "a plugin that misbehaves"
{extra}
    def encode(self, sentences):
        {body}
'''


def fitting(body: str) -> str:
    return HEAD + f'''
class Bad(EmbeddingMethod):
    name, summary = "bad", "a plugin that fits"
    uses_fit_set = True

    def fit(self, fit_set):
        {body}

    def encode(self, sentences):
        return vectors(sentences)
'''


def scoring(body: str) -> str:
    return HEAD + f'''
class Bad(PairScoringMethod):
    name, summary = "bad", "a plugin that scores pairs"

    def score_pairs(self, s1, s2):
        {body}
'''


pytestmark = pytest.mark.usefixtures("forget_plugins")  # conftest: plugins a test loads are forgotten after it


def write_pairs(path: Path, n: int = 12, odd: str = "") -> Path:
    """``n`` pairs of the tiny models' words, gold growing with the words shared; ``odd`` is appended
    to every first sentence (a word the plugin can react to)."""
    rows = ["sentence1\tsentence2\tscore"]
    rows += [f"{a}{odd}\t{b}\t{gold}" for a, b, gold in pairs(np.random.default_rng(7), n)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def run(bench, tmp_path, monkeypatch):
    """Run ``random`` and the plugin file's ``Bad`` on a task of 12 pairs, from ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    write_pairs(tmp_path / "pairs.tsv")

    def call(source: str, *extra: str) -> tuple[int, str, str]:
        (tmp_path / "bad.py").write_text(source, encoding="utf-8")
        return bench("--methods", "random", "bad.py:Bad", "--tasks", "file:pairs.tsv", "--bootstrap", "0",
                     "--no-plots", *extra)

    return call


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


def records(out: Path) -> dict[str, dict]:
    found = {}
    for path in (out / "runs").glob("*.json"):
        record = json.loads(path.read_text())
        found[f"{record['method']['label']} on {record['task']['title']}"] = record
    return found


def one_plugin_error(code: int, err: str, expected: int, says: str, named: str = "plugin method 'bad' (bad.py)"):
    """Exactly one ``error:`` line, naming the plugin and its file, saying ``says``; no traceback."""
    assert code == expected, err
    (line,) = error_lines(err)
    assert named in line and says in line, line
    assert "Traceback" not in err and "a bug in sts-bench" not in err


# -- what the run calls: each misbehaviour is one line, exit 5, and random's record is kept ---------

MISBEHAVIOURS = {
    "encode calls sys.exit(0)": (embedding("sys.exit(0)"), "encode() called sys.exit(0) at bad.py:"),
    "encode raises": (embedding("raise RuntimeError('kaput')"), "encode() raised RuntimeError: kaput at bad.py:"),
    "fit raises": (fitting("raise ValueError('cannot fit')"), "fit() raised ValueError: cannot fit at bad.py:"),
    "fit exits": (fitting("raise SystemExit(3)"), "fit() called sys.exit(3)"),
    "score_pairs raises": (scoring("raise KeyError('gold')"), "score_pairs() raised KeyError: 'gold' at bad.py:"),
    "encode returns 1-D": (embedding("return vectors(sentences)[:, 0]"), "encode() returned shape (12,) for 12"),
    "encode returns n-1 rows": (embedding("return vectors(sentences)[1:]"), "encode() returned 11 rows for 12"),
    "encode returns an object array": (embedding("return np.array([object()] * len(sentences))"),
                                       "encode() returned ndarray of object values, not numbers"),
    "encode returns ragged lists": (embedding("return [[1.0] * (1 + i % 2) for i in range(len(sentences))]"),
                                    "encode() returned list that is not an array"),
    "encode returns NaN": (embedding("v = vectors(sentences); v[2, 1] = np.nan; return v"),
                           "encode() returned NaN or inf (or values beyond float32) in 1 of 12 rows, first row 2"),
    "encode returns no columns": (embedding("return np.zeros((len(sentences), 0))"),
                                  "encode() returned shape (12, 0)"),
    "score_pairs returns one per sentence": (scoring("return np.ones(2 * len(s1))"),
                                             "score_pairs() returned shape (24,) for 12 pairs"),
    "score_pairs returns inf": (scoring("return np.full(len(s1), np.inf)"),
                                "score_pairs() returned NaN or inf for 12 of 12 pairs"),
    "annotate overwrites the scores": (embedding("return vectors(sentences)",
                                                 "    def annotate(self, split, similarity):\n"
                                                 "        return {'scores': 1}\n"),
                                       "annotate() returned the record's own field(s) scores"),
    "fit_info is not JSON": (fitting("self.fit_info = {'fit_set': fit_set.describe(), 'mean': np.zeros(3)}"),
                             "fit() set self.fit_info to"),
}


@pytest.mark.parametrize("case", MISBEHAVIOURS)
def test_a_misbehaving_plugin_is_one_line_exit_5_and_the_rest_is_kept(run, tmp_path, case):
    source, says = MISBEHAVIOURS[case]
    code, _, err = run(source)
    one_plugin_error(code, err, PLUGIN_EXIT, says)
    assert "not recorded: bad on pairs; the other results were written to" in error_lines(err)[0]
    assert list(records(tmp_path / "out")) == ["random on pairs"]  # the other method's record is written
    assert "random" in (tmp_path / "out" / "leaderboard.csv").read_text()  # and the leaderboards


def test_a_plugin_failing_on_one_task_keeps_its_records_of_the_others(bench, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_pairs(tmp_path / "one.tsv")
    write_pairs(tmp_path / "two.tsv", odd=" zebra")
    (tmp_path / "bad.py").write_text(embedding("if any('zebra' in s for s in sentences): sys.exit(0)\n"
                                               "        return vectors(sentences)"), encoding="utf-8")
    code, _, err = bench("--methods", "random", "bad.py:Bad", "--tasks", "file:one.tsv", "file:two.tsv",
                         "--bootstrap", "0", "--no-plots")
    one_plugin_error(code, err, PLUGIN_EXIT, "encode() called sys.exit(0)")
    assert "not recorded: bad on two;" in error_lines(err)[0]
    assert sorted(records(tmp_path / "out")) == ["bad on one", "random on one", "random on two"]
    assert "bad" in (tmp_path / "out" / "leaderboard.csv").read_text()


def test_a_plugin_whose_prepare_fails_is_left_out_and_the_rest_kept(run, tmp_path):
    source = HEAD + '''
class Bad(EmbeddingMethod):
    name, summary = "bad", "its own model, which fails to load"

    @classmethod
    def make_spec(cls, request, ctx):
        from dataclasses import replace
        return replace(super().make_spec(request, ctx), backbone="none", pooling="none", layers=())

    def prepare(self, sentences):
        raise OSError("weights.bin: no such file")

    def encode(self, sentences):
        return vectors(sentences)
'''
    code, _, err = run(source)
    one_plugin_error(code, err, PLUGIN_EXIT, "prepare() raised OSError: weights.bin: no such file at bad.py:")
    assert "not recorded: bad on every task" in error_lines(err)[0]
    assert list(records(tmp_path / "out")) == ["random on pairs"]


@pytest.mark.parametrize(("hook", "body", "says"), [
    ("__init__", "def __init__(self, spec, ctx):\n        raise SystemExit(0)",
     "building the method (make_spec, create or __init__) called sys.exit(0)"),
    ("make_spec", "@classmethod\n    def make_spec(cls, request, ctx):\n        raise RuntimeError('no spec')",
     "building the method (make_spec, create or __init__) raised RuntimeError: no spec"),
    ("label", "def label(self):\n        return 42", "label() returned 42; it must return a non-empty str"),
    ("backbone_views", "def backbone_views(self):\n        raise IndexError('layer 9')",
     "backbone_views() raised IndexError: layer 9"),
])
def test_a_plugin_that_fails_while_it_is_built_is_one_line_before_anything_runs(run, tmp_path, hook, body, says):
    source = embedding("return vectors(sentences)", f"    {body}\n")
    code, _, err = run(source)
    one_plugin_error(code, err, PLUGIN_EXIT, says)
    assert not records(tmp_path / "out")  # nothing was computed: nothing to keep


def test_a_call_no_guard_wraps_is_blamed_on_the_plugin_by_its_traceback(run, tmp_path):
    """``--dry-run`` asks a fitting method what its fit costs (``describe_fit``): a call into its
    worker like every other (methods/wall.py), the plugin's line, not a bug in sts-bench."""
    hook = "    def describe_fit(self, fit_set):\n        raise ZeroDivisionError('cost')\n\n"
    source = fitting("self.fit_info = None").replace("    def encode(self, sentences):",
                                                     hook + "    def encode(self, sentences):")
    code, _, err = run(source, "--dry-run")
    one_plugin_error(code, err, PLUGIN_EXIT, "describe_fit() raised ZeroDivisionError: cost at bad.py:")


# -- what a plugin may return: converted, not refused ------------------------------------------------

@pytest.mark.parametrize("body", [
    "return vectors(sentences).astype(np.float64)",
    "return vectors(sentences).astype(np.float16)",
    "return vectors(sentences).tolist()",  # a list of lists of numbers, rectangular
    "return (vectors(sentences) * 1000).astype(np.int64)",
])
def test_a_plugin_may_return_any_rectangular_array_of_numbers(run, tmp_path, body):
    code, _, err = run(embedding(body))
    assert code == 0, err
    record = records(tmp_path / "out")["bad on pairs"]
    assert record["embed_dim"] == 8 and record["scores"]["spearman"] is not None


def test_a_fitting_plugin_that_sets_no_fit_info_is_recorded_with_its_fit_set(run, tmp_path):
    code, _, err = run(fitting("self.fitted = len(fit_set.sentences)"))
    assert code == 0, err
    fit = records(tmp_path / "out")["bad on pairs"]["fit"]
    assert fit["fit_set"]["name"] == "target" and fit["fit_set"]["n_sentences"] > 0


def test_a_plugins_print_goes_to_stderr_as_its_own_line_not_into_the_table(run, tmp_path):
    source = embedding("print('hello from the plugin', len(sentences)); print('no newline', end='')\n"
                       "        return vectors(sentences)")
    code, out, err = run(source)
    assert code == 0, err
    assert "hello from the plugin" not in out and "no newline" not in out
    assert "plugin bad: hello from the plugin 12" in err.splitlines()
    assert "plugin bad: no newline" in err.splitlines()
    table = out.strip().splitlines()
    assert any(line.lstrip("| ").startswith("random") for line in table)
    assert any(line.lstrip("| ").startswith("bad") for line in table)


def test_a_plugin_file_that_prints_on_import_prints_on_stderr(run):
    code, out, err = run("print('importing me')\n" + embedding("return vectors(sentences)"))
    assert code == 0, err
    assert "importing me" not in out and "plugin bad.py: importing me" in err.splitlines()


# -- at import and at registration: one line, exit 2, before anything runs --------------------------

@pytest.mark.parametrize(("source", "says"), [
    ("import sys\nsys.exit(0)\n", "importing bad.py called sys.exit(0) at bad.py:2"),
    ("raise SystemExit('bye')\n", "importing bad.py called sys.exit('bye') at bad.py:1"),
    ("raise KeyError('at import')\n", "importing bad.py failed at bad.py:1: KeyError"),
])
def test_a_plugin_file_that_exits_or_raises_on_import_is_one_line_exit_2(run, tmp_path, source, says):
    code, _, err = run(source)
    one_plugin_error(code, err, 2, says, named="--methods bad.py:Bad")
    assert not records(tmp_path / "out")


POST = HEAD + '''
class Bad(PostProcessor):
    name, summary = "bad", "a post-processor"
    OPTIONS

    def fit(self, fit_set):
        self.mean = self.pooled(fit_set.sentences).mean(0)

    def encode(self, sentences):
        return self.pooled(sentences) - self.mean
'''


def post(options: str) -> str:
    """A PostProcessor plugin file with ``options`` (a class-body line)."""
    return POST.replace("OPTIONS", options)


@pytest.mark.parametrize(("source", "says"), [
    (post("options = ()"), "Bad derives from PostProcessor but has no 'view' option; add Option("),
    (post("options = (Option('view', 'avg', 'the view'),)"),
     "Bad's 'view' option (default 'avg', choices None) must choose among BASE_VIEWS"),
    (post("options = (Option('view', 'mine', 'the view', choices=('mine',)),)"),
     "must choose among BASE_VIEWS"),
    (post("options = (Option('view', 'avg', 'v', choices=BASE_VIEWS), Option('view', 1, 'again'))"),
     "Bad has two options named 'view'; give each option its own name"),
    (post("options = (Option('view', 'avg', 'v', choices=BASE_VIEWS), Option('prompt2', '', 'p'))"),
     "two options named 'prompt2' (view methods get prompt and prompt2 added for them"),
    (embedding("return vectors(sentences)", "    options = (('dim', 8, 'width'),)\n"),
     "Bad.options[0] is ('dim', 8, 'width'), not an Option"),
    (embedding("return vectors(sentences)", "    options = Option('dim', 8, 'width')\n"),
     "Bad.options is Option, not a tuple"),
    (HEAD + "class Bad(EmbeddingMethod):\n    name, summary = 'bad', 's'\n", "Bad defines no encode(sentences)"),
    (HEAD + "class Bad(PairScoringMethod):\n    name, summary = 'bad', 's'\n", "Bad defines no score_pairs(s1, s2)"),
    (HEAD + "class Bad(EmbeddingMethod):\n    name, summary, uses_fit_set = 'bad', 's', True\n"
            "    def encode(self, sentences):\n        return vectors(sentences)\n",
     "Bad has uses_fit_set = True but no fit(fit_set)"),
])
def test_a_class_that_lacks_what_its_base_needs_is_refused_when_registered(run, tmp_path, source, says):
    code, _, err = run(source)
    one_plugin_error(code, err, 5, says, named="--methods bad.py:Bad: ")
    assert "plugin method 'bad' (bad.py)" in err
    assert "KeyError" not in err and not records(tmp_path / "out")


def test_a_post_processor_with_a_view_option_runs_with_the_prompt_options_added(run, tmp_path, tiny_bert):
    source = post("options = (Option('view', 'avg', 'the view', choices=BASE_VIEWS),)")
    code, _, err = run(source, "--backbone", str(tiny_bert), "--set", "bad.view=cls")
    assert code == 0, err
    record = records(tmp_path / "out")["bad[view=cls] on pairs"]
    assert record["method"]["spec"]["params"] == {"view": "cls", "prompt": "", "prompt2": "same",
                                                  "prompt_select": "none", "attention": "default", "adapter": ""}


def test_register_method_checks_the_contract_too():
    from harness.method_api import PostProcessor

    class NoView(PostProcessor):
        name, summary = "no-view", "a post-processor without its view option"

        def fit(self, fit_set):
            pass

    with pytest.raises(UserError, match="NoView derives from PostProcessor but has no 'view' option"):
        harness.register_method(NoView)
    assert "no-view" not in methods.REGISTERED


# -- from Python, built-ins, Ctrl-C ----------------------------------------------------------------------

def test_from_python_a_plugin_error_is_raised_after_the_others_are_written(tmp_path):
    from harness.method_api import EmbeddingMethod

    class Quits(EmbeddingMethod):
        name, summary = "quits", "exits in encode"

        def encode(self, sentences):
            raise SystemExit(0)

    harness.register_method(Quits)
    write_pairs(tmp_path / "pairs.tsv")
    cfg = BenchConfig(methods=("random", "quits"), tasks=(f"file:{tmp_path / 'pairs.tsv'}",),
                      cache_dir=str(tmp_path / "c"), output_dir=str(tmp_path / "o"), progress=False, plots=False,
                      bootstrap=0)
    with pytest.raises(PluginError, match=r"plugin method 'quits' \(.*test_trust_plugins.py\): encode\(\) called "
                                          r"sys.exit\(0\) at .*test_trust_plugins.py:\d+") as raised:
        harness.run(cfg)
    assert isinstance(raised.value, UserError)  # a Python caller's except UserError still holds it
    assert list(records(tmp_path / "o")) == ["random on pairs"]


class Flat:
    """An encoder object for harness.evaluate whose encode goes wrong as ``how`` says."""

    def __init__(self, how: str) -> None:
        self.how = how

    def encode(self, texts):
        if self.how == "raises":
            raise RuntimeError("the model is not loaded")
        return np.ones(len(texts))


@pytest.mark.parametrize(("how", "says"), [
    ("raises", r"plugin method 'flat' \(test_trust_plugins.Flat\): encode\(\) raised RuntimeError: the model is not "
               r"loaded at .*test_trust_plugins.py:\d+"),
    ("flat", r"encoder 'flat' \(test_trust_plugins.Flat\): encode\(\) returned shape \(\d+,\)"),
])
def test_an_encoder_object_that_fails_keeps_the_methods_beside_it(tmp_path, how, says):
    write_pairs(tmp_path / "pairs.tsv")
    with pytest.raises(PluginError, match=says):
        harness.evaluate(Flat(how), output_dir=tmp_path / "o", tasks=[f"file:{tmp_path / 'pairs.tsv'}"],
                         methods=["random"], cache_dir=str(tmp_path / "c"), bootstrap=0, plots=False, progress=False)
    assert list(records(tmp_path / "o")) == ["random on pairs"]


def test_a_built_in_methods_bug_is_still_exit_4_with_its_traceback(bench, tmp_path, monkeypatch):
    from methods.random_baseline import RandomBaseline

    monkeypatch.setattr(RandomBaseline, "encode", lambda self, sentences: np.ones(len(sentences)))
    write_pairs(tmp_path / "pairs.tsv")
    code, _, err = bench("--methods", "random", "--tasks", f"file:{tmp_path / 'pairs.tsv'}", "--bootstrap", "0")
    assert code == 4 and "Traceback" in err and error_lines(err)[-1].startswith("error: internal error")


def test_the_first_ctrl_c_stops_a_plugin_that_blocks(tmp_path):
    """Run as the user runs it, a process of its own; one SIGINT while the plugin sleeps ends the run
    with 130 at once (the guard never catches KeyboardInterrupt)."""
    started = tmp_path / "started"
    (tmp_path / "sleepy.py").write_text(HEAD + f'''
import time
from pathlib import Path


class Sleepy(EmbeddingMethod):
    name, summary = "sleepy", "blocks in encode"

    def encode(self, sentences):
        Path({str(started)!r}).write_text("in encode")
        while True:
            time.sleep(1)
''', encoding="utf-8")
    write_pairs(tmp_path / "pairs.tsv")
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "run_bench.py"), "--methods", "random", "sleepy.py:Sleepy", "--tasks",
         "file:pairs.tsv", "--bootstrap", "0", "--no-progress", "--no-plots", "--cache-dir", str(tmp_path / "c"),
         "--output-dir", str(tmp_path / "o")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        while not started.exists() and process.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(0.2)  # a poll, not a measurement: the plugin says when it blocks
        assert started.exists(), process.communicate()[1]
        process.send_signal(signal.SIGINT)  # once
        _, err = process.communicate(timeout=120)  # a hang guard only: a second press is never sent
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, err
    assert "interrupted:" in err and "Traceback" not in err and not error_lines(err)
    assert list(records(tmp_path / "o")) == ["random on pairs"]  # finished before the plugin blocked


# -- guests cannot decide how the run ends (issue 42) ------------------------------------------------


def cli(tmp_path: Path, plugin: str, *extra: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """``random`` and the plugin file's ``Bad`` through ``run_bench.py`` in a process of its own, from
    ``tmp_path`` (a plugin that ends or hangs the process cannot take pytest with it); the timeout is
    a hang guard only."""
    write_pairs(tmp_path / "pairs.tsv")
    (tmp_path / "bad.py").write_text(plugin, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(ROOT / "run_bench.py"), "--methods", "random", "bad.py:Bad", "--tasks", "file:pairs.tsv",
         "--bootstrap", "0", "--no-progress", "--no-plots", "--cache-dir", str(tmp_path / "c"), "--output-dir", "o",
         *extra],
        cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_plugin_calling_os_exit_0_is_exit_5_and_the_rest_is_kept(tmp_path):
    """``os._exit(0)`` skips every handler: before issue 42, the run ended there with exit 0, no error
    line and no leaderboards; now it ends the plugin's worker process only (tests/test_wall.py)."""
    done = cli(tmp_path, embedding("import os; os._exit(0)"))
    one_plugin_error(done.returncode, done.stderr, PLUGIN_EXIT,
                     "encode() ended the worker process it runs in (exit status 0: os._exit")
    assert list(records(tmp_path / "o")) == ["random on pairs"]
    assert "random" in (tmp_path / "o" / "leaderboard.csv").read_text()


def test_a_plugin_file_calling_os_exit_on_import_is_one_line_exit_2(tmp_path):
    done = cli(tmp_path, "import os\nos._exit(0)\n")
    one_plugin_error(done.returncode, done.stderr, 2, "importing bad.py called os._exit(0) at bad.py:2",
                     named="--methods bad.py:Bad")


def test_a_forked_child_of_a_plugin_still_exits_with_os_exit(run, tmp_path):
    """The guard is the plugin's process's only: a child it forks (multiprocessing, a data loader)
    ends through ``os._exit`` as it always did, and never unwinds the run's stack a second time."""
    body = ("import os\n        pid = os.fork()\n        if pid == 0:\n            os._exit(7)\n"
            "        assert os.waitpid(pid, 0)[1] >> 8 == 7\n        return vectors(sentences)")
    code, _, err = run(embedding(body))
    assert code == 0, err
    assert sorted(records(tmp_path / "out")) == ["bad on pairs", "random on pairs"]


def test_a_thread_a_plugin_leaves_running_does_not_keep_the_process_alive(tmp_path):
    """Before issue 42, everything was written and the process never exited (Python joins non-daemon
    threads at exit); the thread is its worker's now: the run ends with 0, a warning names it."""
    plugin = embedding("import threading, time\n"
                       "        threading.Thread(target=time.sleep, args=(3600,), name='spinner').start()\n"
                       "        return vectors(sentences)")
    done = cli(tmp_path, plugin, timeout=120)
    assert done.returncode == 0 and not error_lines(done.stderr), done.stderr
    (warning,) = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert "plugin method 'bad' (bad.py) left thread 'spinner'" in warning
    assert sorted(records(tmp_path / "o")) == ["bad on pairs", "random on pairs"]
    assert "bad" in (tmp_path / "o" / "leaderboard.csv").read_text()


def test_a_plugins_idle_thread_pool_is_not_a_fault(tmp_path):
    """An executor a plugin keeps (its workers are non-daemon threads) ends at exit as Python ends it:
    exit 0, no line."""
    plugin = embedding("return vectors(sentences)", "    import concurrent.futures\n"
                       "    pool = concurrent.futures.ThreadPoolExecutor(2)\n\n"
                       "    def __init__(self, spec, ctx):\n        super().__init__(spec, ctx)\n"
                       "        self.pool.submit(int).result()\n")
    done = cli(tmp_path, plugin, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not error_lines(done.stderr)


def test_a_plugin_changing_directory_cannot_split_the_outputs(run, tmp_path):
    """Before issue 42, with a relative ``--output-dir`` the records written after the plugin's
    ``os.chdir`` went to another folder than those written before it. The folder changed is its
    worker's now: the run's is never moved, every output lands in the one folder."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, _, err = run(embedding(f"import os; os.chdir({str(elsewhere)!r})\n        return vectors(sentences)"),
                       "--output-dir", "rel-out")
    assert code == 0, err
    assert Path.cwd() == tmp_path  # never moved
    assert not list(elsewhere.iterdir())
    assert sorted(records(tmp_path / "rel-out")) == ["bad on pairs", "random on pairs"]
    assert (tmp_path / "rel-out" / "leaderboard.csv").exists()


def test_a_plugins_huge_allocation_is_its_own_fault_exit_5(run, tmp_path):
    """Before: exit 3, "out of memory", the plugin not named (as if the machine were too small)."""
    code, _, err = run(embedding("return np.ones(2 ** 40, dtype=np.uint8)"))
    one_plugin_error(code, err, PLUGIN_EXIT, "encode() ran out of memory (MemoryError: Unable to allocate 1.00 TiB")
    assert "at bad.py:" in error_lines(err)[0]
    assert list(records(tmp_path / "out")) == ["random on pairs"]
    assert "random" in (tmp_path / "out" / "leaderboard.csv").read_text() and (tmp_path / "out" / "index.html").exists()


class Tensors:
    """An encoder object returning torch tensors made by ``how``."""

    def __init__(self, how: str) -> None:
        self.how = how

    def encode(self, texts):
        import torch

        ones = torch.from_numpy(np.random.default_rng(len(texts)).random((len(texts), 8)))
        if self.how == "bf16":
            return ones.to(torch.bfloat16)
        return ones.to_sparse()  # no .numpy()


def test_a_bfloat16_tensor_from_an_encoder_is_accepted_as_float32(tmp_path):
    """Before: "prepare() raised TypeError: Got unsupported ScalarType BFloat16"."""
    write_pairs(tmp_path / "pairs.tsv")
    outcome = harness.evaluate(Tensors("bf16"), output_dir=tmp_path / "o", tasks=[f"file:{tmp_path / 'pairs.tsv'}"],
                               cache_dir=str(tmp_path / "c"), bootstrap=0, plots=False, progress=False)
    assert outcome is not None
    assert [r["embed_dim"] for r in records(tmp_path / "o").values()] == [8]


def test_a_tensor_numpy_cannot_read_is_blamed_on_the_call_that_returned_it(tmp_path):
    write_pairs(tmp_path / "pairs.tsv")
    with pytest.raises(PluginError, match=r"encoder 'tensors' \(test_trust_plugins.Tensors\): encode\(\) returned "
                                          r"Tensor that numpy cannot read \(TypeError"):
        harness.evaluate(Tensors("sparse"), output_dir=tmp_path / "o", tasks=[f"file:{tmp_path / 'pairs.tsv'}"],
                         cache_dir=str(tmp_path / "c"), bootstrap=0, plots=False, progress=False)


def test_a_plugin_method_may_return_a_bfloat16_tensor(run, tmp_path):
    body = "import torch\n        return torch.from_numpy(vectors(sentences)).to(torch.bfloat16)"
    code, _, err = run(embedding(body))
    assert code == 0, err
    assert records(tmp_path / "out")["bad on pairs"]["embed_dim"] == 8
