"""Methods from outside the repo (docs/PLUGINS.md): a plugin file named ``file.py:Class``, the
installed example package found through its ``sts_bench.methods`` entry point, and
``register_method``. Each gets what a built-in gets (options by --set and config tables, --list,
records, leaderboards, significance, a code-keyed cache), and each way of getting one wrong is
one ``error:`` line with exit 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fakes import FakeContext
from fixtures import pairs
from scipy.stats import spearmanr

import harness
from harness.core.api import SpecRequest
from harness.core.data.fitsets import build_fit_set, make_fit_set
from harness.core.data.tasks import TASKS, load_task
from harness.runner.cli.commands import main as commands_main
from harness.runner.settings.config import BenchConfig
from methods import get_method, plugins

ROOT = Path(__file__).resolve().parent.parent
CENTERED = ROOT / "examples" / "centered_avg.py"
PLUGIN = ROOT / "examples" / "sts-bench-plugin"
SENTENCES = list(dict.fromkeys(s for a, b, _ in pairs(np.random.default_rng(3), 20) for s in (a, b)))


pytestmark = pytest.mark.usefixtures("forget_plugins")  # conftest: plugins a test loads are forgotten after it


@pytest.fixture(scope="module")
def installed(example_plugin: EntryPoint) -> EntryPoint:
    """The example plugin package, installed for this module only (conftest's ``example_plugin``)."""
    return example_plugin


def test_make_bench_installs_no_example_plugin(tmp_path):
    """Issue 52: a plain `make bench` venv listed the example plugin `randproj` among its methods. What
    `make venv` (the venv `make bench` runs in) and `make test-newest` would install, as `make -n`
    prints it for fresh venvs: the locks and the project, nothing from examples/."""
    for target in ("venv", "test-newest"):
        done = subprocess.run(["make", "-n", target, f"VENV={tmp_path / 'venv'}", f"NEWEST={tmp_path / 'newest'}"],
                              cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        installs = [line for line in done.stdout.splitlines() if " pip install " in line]
        assert any(line.endswith(" -e .") or '-e ".[' in line for line in installs), done.stdout  # the project
        assert not [line for line in installs if "examples/" in line or "PLUGIN" in line], installs
    assert "sts_bench.methods" not in (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # no entry point of ours


def senteval(root: Path, model: Path) -> list[str]:
    return ["--source", "senteval", "--senteval-dir", str(root), "--backbone", str(model), "--bootstrap", "50"]


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def fake(tmp_path: Path, model: Path, **params) -> FakeContext:
    return FakeContext(tmp_path / "cache", SpecRequest(backbone=str(model), max_length=32, params=params))


# -- the installed example package ----------------------------------------------------------------

def test_the_installed_example_is_found_listed_and_explained(installed, capsys):
    assert installed.value == "sts_bench_randproj:RandomProjection"
    assert commands_main(["list"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("randproj"))
    assert "Johnson-Lindenstrauss" in line and "[plugin: sts_bench_randproj]" in line
    assert commands_main(["list", "randproj"]) == 0
    shown = capsys.readouterr().out
    assert "--set randproj.OPTION=VALUE" in shown and "dim" in shown and "128" in shown


def test_the_example_projects_the_mean_pooled_layer_with_a_seeded_gaussian(installed, tiny_bert, tmp_path):
    ctx = fake(tmp_path, tiny_bert, randproj={"dim": 8})
    method = get_method("randproj").build(ctx.request, ctx)
    avg = get_method("avg").build(ctx.request, ctx).encode(SENTENCES)
    expected = avg.astype(np.float64) @ (np.random.default_rng(ctx.seed).standard_normal((32, 8)) / np.sqrt(8))
    got = method.encode(SENTENCES)
    assert got.shape == (len(SENTENCES), 8) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_the_example_runs_with_its_option_and_lands_in_every_table(installed, bench, senteval_root, tiny_bert,
                                                                   tmp_path):
    code, out, err = bench("--methods", "avg", "randproj", "--set", "randproj.dim=8", "--tasks", "sts12",
                           *senteval(senteval_root, tiny_bert))
    assert code == 0, err
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv")
    assert set(board["method"]) == {"avg", "randproj[dim=8]"} and "randproj[dim=8]" in out
    assert "randproj[dim=8]" in (tmp_path / "out" / "significance.csv").read_text()
    record = next(json.loads(p.read_text()) for p in (tmp_path / "out" / "runs").glob("*.json")
                  if json.loads(p.read_text())["method"]["label"] == "randproj[dim=8]")
    assert record["method"]["spec"]["params"] == {"dim": 8, "layer": -1}
    # The score, recomputed from the avg vectors and the projection drawn independently here.
    ctx = fake(tmp_path, tiny_bert)
    split = load_task(TASKS["sts12"], "senteval", ["test"], locations={"senteval": str(senteval_root)}).eval
    avg = get_method("avg").build(ctx.request, ctx)
    r = np.random.default_rng(1234).standard_normal((32, 8)) / np.sqrt(8)
    sims = cosine(avg.encode(split.s1) @ r, avg.encode(split.s2) @ r)
    assert record["scores"]["spearman"] == pytest.approx(100 * spearmanr(sims, split.gold).statistic, abs=1e-3)


# -- a plugin file ---------------------------------------------------------------------------------

def test_a_plugin_file_runs_with_its_option_from_set_or_a_config_table(bench, senteval_root, tiny_bert, tmp_path):
    reference = f"{CENTERED}:Centered"
    code, _, err = bench("--methods", "avg", reference, "--set", "centered.view=cls", "--tasks", "sts12",
                           *senteval(senteval_root, tiny_bert))
    assert code == 0, err
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv")
    assert set(board["method"]) == {"avg", "centered[view=cls]"}
    (record,) = [json.loads(p.read_text()) for p in (tmp_path / "out" / "runs").glob("*centered*.json")]
    assert record["protocol"]["fit_set"] == "target" and record["fit"]["fit_set"]["n_sentences"] > 0
    # Independently: [CLS] vectors minus their mean over the task's sentences (the target fit set).
    loaded = load_task(TASKS["sts12"], "senteval", ["test"], locations={"senteval": str(senteval_root)})
    ctx = fake(tmp_path, tiny_bert)
    cls = get_method("cls").build(ctx.request, ctx)
    mean = cls.encode(build_fit_set("target", loaded).sentences).astype(np.float64).mean(0)
    sims = cosine(cls.encode(loaded.eval.s1) - mean, cls.encode(loaded.eval.s2) - mean)
    assert record["scores"]["spearman"] == pytest.approx(100 * spearmanr(sims, loaded.eval.gold).statistic, abs=1e-3)

    config = tmp_path / "bench.toml"
    config.write_text('[centered]\nview = "cls"\n', encoding="utf-8")
    code, _, err = bench("--methods", reference, "--config", str(config), "--tasks", "sts12",
                         "--output-dir", str(tmp_path / "from-config"), *senteval(senteval_root, tiny_bert))
    assert code == 0, err
    assert list(pd.read_csv(tmp_path / "from-config" / "leaderboard.csv")["method"]) == ["centered[view=cls]"]
    assert commands_main(["list", reference]) == 0


def test_a_plugin_file_centres_on_its_fit_set(tiny_bert, tmp_path):
    ctx = fake(tmp_path, tiny_bert)
    method = get_method(f"{CENTERED}:Centered").build(ctx.request, ctx)
    assert method.name == "centered" and method.spec.layers == (-1,)  # view avg: the last layer's mean
    method.fit(make_fit_set("fixture", SENTENCES, "test"))
    avg = get_method("avg").build(ctx.request, ctx).encode(SENTENCES).astype(np.float64)
    np.testing.assert_allclose(method.encode(SENTENCES), avg - avg.mean(0), atol=1e-5)


@pytest.mark.heavy  # three CLI runs
def test_editing_a_plugin_file_recomputes_what_it_cached(senteval_root, tiny_bert, tmp_path):
    """The file's code is part of its cache key: a changed line of math fits again, a comment does
    not. Each run is a fresh process, as a user's next run is."""
    plugin = tmp_path / "centred.py"
    plugin.write_text(CENTERED.read_text(encoding="utf-8"), encoding="utf-8")
    cache = tmp_path / "cache"

    def run(name: str) -> float:
        done = subprocess.run([sys.executable, str(ROOT / "run_bench.py"), "--methods", f"{plugin}:Centered",
                               "--tasks", "sts12", *senteval(senteval_root, tiny_bert), "--bootstrap", "0",
                               "--cache-dir", str(cache), "--output-dir", str(tmp_path / name), "--no-progress",
                               "--no-plots"], capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        (record,) = [json.loads(p.read_text()) for p in (tmp_path / name / "runs").glob("*.json")]
        return record["scores"]["spearman"]

    def fits() -> int:
        return len([p for p in (cache / "centered").iterdir() if p.is_dir()])

    first = run("a")
    assert fits() == 1
    plugin.write_text(plugin.read_text().replace('"""``centered``', '# a comment\n"""Edited: ``centered``'))
    assert run("b") == first and fits() == 1  # warm: documentation is not code
    source = plugin.read_text()
    assert "x.mean(axis=0, dtype=np.float64)" in source
    plugin.write_text(source.replace("x.mean(axis=0, dtype=np.float64)", "np.median(x, axis=0)"))
    assert run("c") != first and fits() == 2


# -- register_method -------------------------------------------------------------------------------

def test_a_class_registered_at_run_time_runs_by_its_name(senteval_root, tiny_bert, tmp_path):
    from harness.method_api import EmbeddingMethod, Option, View

    class LastCls(EmbeddingMethod):
        name, summary = "last-cls", "the [CLS] vector of a layer"
        options = (Option("layer", -1, "layer", type=int),)

        def backbone_views(self):
            return [View("cls", self.ctx.backbone(self.spec.backbone).layer_index(self.spec.params["layer"]))]

        def encode(self, sentences):
            return self.ctx.views(self.spec).get(sentences, self.backbone_views()[0])

    harness.register_method(LastCls)
    cfg = BenchConfig(methods=("cls", "last-cls"), tasks=("sts12",), backbone=str(tiny_bert), source="senteval",
                      senteval_dir=str(senteval_root), cache_dir=str(tmp_path / "c"), output_dir=str(tmp_path / "o"),
                      progress=False, plots=False, bootstrap=0, method_params={"last-cls": {"layer": 1}})
    records = {r["method"]["label"]: r for r in harness.run(cfg).records}
    assert set(records) == {"cls", "last-cls[layer=1]"}
    cfg = BenchConfig(**{**cfg.__dict__, "method_params": {}, "output_dir": str(tmp_path / "o2")})
    same = {r["method"]["label"]: r["scores"]["spearman"] for r in harness.run(cfg).records}
    assert same["last-cls"] == same["cls"]  # the last layer's [CLS] is the cls method
    with pytest.raises(harness.UserError, match="built-in method's name"):
        harness.register_method(type("Avg2", (LastCls,), {"name": "avg"}))
    with pytest.raises(harness.UserError, match="not a method class"):
        harness.register_method(int)  # type: ignore[arg-type]


# -- every way to get a plugin wrong: one line, exit 2 ----------------------------------------------

BROKEN = {
    "not_method.py": "class NotAMethod:\n    name = 'x'\n",
    "builtin_name.py": ("from harness.method_api import EmbeddingMethod\n\n"
                        "class Avg(EmbeddingMethod):\n    name, summary = 'avg', 'mine'\n"),
    "no_name.py": ("from harness.method_api import EmbeddingMethod\n\n"
                   "class Nameless(EmbeddingMethod):\n    summary = 's'\n"),
    "raises.py": "import numpy\n\nx = 1\nraise RuntimeError('boom')\n",
    "syntax.py": "def f(:\n",
    "exits.py": "import sys\n\nsys.exit(0)\n",
    "no_view.py": ("from harness.method_api import PostProcessor\n\n"
                   "class NoView(PostProcessor):\n    name, summary = 'no-view', 's'\n\n"
                   "    def fit(self, fit_set):\n        pass\n"),
}


@pytest.mark.parametrize(("target", "message"), [
    ("missing.py:X", "--methods missing.py:X: no such file missing.py"),
    ("folder.py:X", "--methods folder.py:X: folder.py is a directory, not a file"),
    ("not_method.py:Absent", "defines no Absent; its classes: NotAMethod"),
    ("builtin_name.py:Avg", "'avg' is a built-in method's name; give the plugin class another name"),
    ("raises.py:X", "raises.py:4: RuntimeError: boom"),
    ("syntax.py:X", "syntax.py:1: SyntaxError"),
    ("exits.py:X", "importing exits.py called sys.exit(0) at exits.py:3"),
    ("no_such_plugin_module:X", "no module no_such_plugin_module on the Python path"),
    ("randproj2", "unknown method 'randproj2' (did you mean 'randproj'?)"),
])
def test_a_bad_plugin_is_one_line_and_exit_2(bench, tmp_path, monkeypatch, capsys, request, target, message):
    if "randproj" in message:  # the closest name is the installed example's
        request.getfixturevalue("installed")
    for name, text in BROKEN.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "folder.py").mkdir()  # a folder named like a plugin file: said so, not "no such file" (issue 42)
    monkeypatch.chdir(tmp_path)
    code, _, err = bench("--methods", target, "--tasks", "sts12")
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and message in err, err


@pytest.mark.parametrize(("target", "message"), [
    ("not_method.py:NotAMethod", "is not a method class; derive it from EmbeddingMethod"),
    ("no_name.py:Nameless", "Nameless.name = None; set a class attribute name"),
    ("no_view.py:NoView", "NoView derives from PostProcessor but has no 'view' option"),
])
def test_a_class_breaking_the_method_contract_is_one_line_naming_its_file_and_exit_5(bench, tmp_path, monkeypatch,
                                                                                   target, message):
    for name, text in BROKEN.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code, _, err = bench("--methods", target, "--tasks", "sts12")
    file = target.partition(":")[0]
    assert code == 5 and err.count("\n") == 1 and err.startswith("error: ") and message in err, err
    assert f"({file})" in err and "harness.method_api" in err


@pytest.mark.parametrize(("value", "message"), [
    ("no_such_plugin_module:Cls", "plugin 'broken' (sts_bench.methods entry point 'no_such_plugin_module:Cls') "
                                  "failed to import: ModuleNotFoundError"),
    ("methods.pooling:Cls", "the class is named 'cls'; the entry point's name must be the method's name"),
])
def test_an_installed_plugin_that_fails_is_one_line(bench, monkeypatch, value, message):
    broken = EntryPoint(name="broken", value=value, group=plugins.GROUP)
    monkeypatch.setattr(plugins, "entry_points", lambda: {"broken": broken})
    for argv in (["--methods", "broken", "--tasks", "sts12"], ["--list"]):
        code, _, err = bench(*argv)
        assert code == 2 and err.count("\n") == 1 and message in err, err


def test_an_installed_plugin_with_a_built_in_name_is_refused_when_listed(bench, monkeypatch):
    shadow = EntryPoint(name="avg", value="methods.pooling:Avg", group=plugins.GROUP)
    monkeypatch.setattr(plugins, "entry_points", lambda: {"avg": shadow})
    code, _, err = bench("--list")
    assert code == 2 and "'avg' is a built-in method's name; rename the entry point" in err, err
    assert get_method("avg").__module__ == "methods.pooling"  # a run of built-ins never consults plugins


def test_a_plugin_file_is_an_mteb_model_with_its_options(tiny_bert):
    pytest.importorskip("mteb")
    model = harness.mteb_model(f"{CENTERED}:Centered", backbone=str(tiny_bert), view="cls")
    assert model.method.name == "centered" and model.method.spec.params == {"view": "cls", "prompt": "",
                                                                             "prompt2": "same", "prompt_select": "none",
                                                                             "attention": "default", "adapter": ""}
    assert model.method.spec.pooling == "cls" and model.method.label() == "centered[view=cls]"
