"""Task sources as a registry, tasks as data, and one mapping of locations (``--data-dir``).

A toy source from a test module (tests/toy_source.py) registered with one call and run end to end;
a toy task declared as data for an existing source; ``--data-dir SOURCE=DIR`` and a config file's
``[data_dir]`` table give the same records as the older ``--senteval-dir`` / ``--hub-root``; bad
entries are one ``error:`` line each."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import toy_source
from fixtures import pairs
from scipy.stats import spearmanr

from harness.core.data import sources
from harness.core.data.sources import SOURCES, Source
from harness.core.data.splits import TaskSpec
from harness.core.data.tasks import TASKS, declare_task, get_task, load_task
from harness.core.errors import UserError
from harness.core.registry import Registry

FAST = ("--methods", "avg", "--bootstrap", "0", "--no-plots")


def records(out: Path) -> dict[str, dict]:
    """The records of a run, by file name, without what differs between two runs of the same
    cells (when and how long)."""
    found = {}
    for path in sorted((out / "runs").glob("*.json")):
        record = json.loads(path.read_text())
        for volatile in ("created", "timings", "checksum", "auth"):
            record.pop(volatile, None)
        found[path.name] = record
    return found


def one_error(code: int, err: str) -> str:
    """The one ``error:`` line a refusal ends with (a hub source says first where its caches are)."""
    lines = err.strip().splitlines()
    assert code == 2 and [line for line in lines if line.startswith("error:")] == lines[-1:], err
    assert "Traceback" not in err, err
    return lines[-1]


@pytest.fixture
def toy():
    SOURCES.register("toy", toy_source.SOURCE)  # the one registration call
    yield toy_source.SOURCE
    SOURCES.unregister("toy")


def write_toy(folder: Path, name: str, n: int = 12) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rows = pairs(np.random.default_rng(7), n)
    (folder / f"{name}.tsv").write_text("".join(f"{a}\t{b}\t{g}\n" for a, b, g in rows), encoding="utf-8")
    return folder / f"{name}.tsv"


def test_a_toy_source_from_a_test_module_runs_end_to_end_and_scores_its_pairs(toy, bench, tiny_bert, tmp_path):
    path = write_toy(tmp_path / "toy-data", "stsb")
    code, _, err = bench("--source", "toy", "--data-dir", f"toy={tmp_path / 'toy-data'}", "--tasks", "stsb",
                           "--backbone", str(tiny_bert), *FAST)
    assert code == 0, err
    (record,) = records(tmp_path / "out").values()
    assert record["task"]["source"] == "toy" and record["protocol"]["source"] == "toy"
    assert record["task"]["origin"] == str(path) and record["task"]["n_pairs"] == 12
    expected = spearmanr(record["pairs"]["similarity"], record["pairs"]["gold"]).statistic * 100
    assert record["scores"]["spearman"] == pytest.approx(expected, abs=1e-9)
    # The same pairs as a task that brings its own file score the same.
    code, _, err = bench("--tasks", f"file:{path}?format=tsv&header=no&name=toy-file", "--backbone", str(tiny_bert),
                         *FAST, "--output-dir", str(tmp_path / "file-out"))
    assert code == 0, err
    (own,) = records(tmp_path / "file-out").values()
    assert own["scores"]["spearman"] == pytest.approx(record["scores"]["spearman"], abs=1e-9)
    assert "toy" in SOURCES and SOURCES["toy"] is toy


def test_a_source_without_its_location_or_its_file_is_one_line(toy, bench, tmp_path):
    line = one_error(*bench("--source", "toy", "--tasks", "stsb", *FAST)[::2])
    assert line == "error: --source toy needs --data-dir toy=DIR (a folder of <task>.tsv files)"
    line = one_error(*bench("--source", "toy", "--data-dir", f"toy={tmp_path}", "--tasks", "stsb", *FAST)[::2])
    assert line == f"error: --data-dir toy={tmp_path}: it holds no stsb.tsv"


def test_a_task_declared_as_data_for_an_existing_source_runs(bench, tiny_bert, tmp_path):
    folder = tmp_path / "senteval" / "STS" / "STSToy-en-test"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(3)
    for subset in ("forums", "news"):
        rows = pairs(rng, 5)
        (folder / f"STS.input.{subset}.txt").write_text("".join(f"{a}\t{b}\n" for a, b, _ in rows), encoding="utf-8")
        (folder / f"STS.gs.{subset}.txt").write_text("".join(f"{g}\n" for *_, g in rows), encoding="utf-8")
    spec = declare_task(TaskSpec(name="ststoy", title="STS-Toy", description="a toy STS year, two subsets",
                                 citation="sts-bench's tests",
                                 where={"senteval": {"folder": "STS/STSToy-en-test", "subsets": ("forums", "news")}}))
    try:
        assert get_task("STS_Toy") is spec and TASKS["ststoy"] is spec
        code, _, err = bench("--source", "senteval", "--data-dir", f"senteval={tmp_path / 'senteval'}",
                               "--tasks", "ststoy", "--aggregation", "mean", "--backbone", str(tiny_bert), *FAST)
        assert code == 0, err
        (record,) = records(tmp_path / "out").values()
        assert record["task"]["name"] == "ststoy" and record["task"]["subsets"] == {"forums": 5, "news": 5}
        assert record["task"]["origin"] == str(folder) and record["scores"]["spearman"] is not None
        # Its other sources say so in one line.
        line = one_error(*bench("--source", "hub", "--tasks", "ststoy", *FAST)[::2])
        assert line == "error: STS-Toy has no dataset on the hub declared (its 'hub' entry)"
    finally:
        TASKS.unregister("ststoy")


@pytest.mark.parametrize("source, older, tasks", [("senteval", "--senteval-dir", ("sts12", "stsb")),
                                                  ("hub", "--hub-root", ("stsb",))])
def test_data_dir_gives_the_same_records_as_the_older_flag_and_the_config_table(
        source, older, tasks, bench, senteval_root, hub_root, tiny_bert, tmp_path):
    folder = {"senteval": senteval_root, "hub": hub_root}[source]
    common = ("--source", source, "--tasks", *tasks, "--backbone", str(tiny_bert), *FAST)
    config = tmp_path / "bench.toml"
    config.write_text(f'[data_dir]\n{source} = "{folder}"\n', encoding="utf-8")
    found = []
    spellings = [(older, str(folder)), ("--data-dir", f"{source}={folder}"), ("--config", str(config))]
    for k, spelling in enumerate(spellings):
        code, _, err = bench(*common, *spelling, "--output-dir", str(tmp_path / f"out{k}"),
                             "--cache-dir", str(tmp_path / f"cache{k}"))  # each cold: the same env
        assert code == 0, err
        found.append(records(tmp_path / f"out{k}"))
    assert len(found[0]) == len(tasks)
    for other in found[1:]:
        for name, record in found[0].items():
            for key in record:
                assert record[key] == other[name][key], key


def test_the_command_line_and_a_config_table_merge_per_source(tmp_path):
    from harness.runner.cli.parser import from_cli

    config = tmp_path / "bench.toml"
    config.write_text('[data_dir]\nsenteval = "/from/config"\nhub = "/hub"\n', encoding="utf-8")
    cfg, _ = from_cli(["--config", str(config), "--senteval-dir", "/from/cli"])
    assert cfg.locations() == {"senteval": "/from/cli", "hub": "/hub"}
    cfg, _ = from_cli(["--data-dir", "mteb=/m", "--hub-root", "/h"])
    assert cfg.locations() == {"mteb": "/m", "hub": "/h"}
    assert SOURCES["mteb"].location_in(cfg.locations()) == "/m"
    assert SOURCES["mteb"].location_in({"hub": "/h"}) == "/h"  # mteb reads the hub's without its own


@pytest.mark.parametrize("args, message", [
    (["--data-dir", "sentevl=/x"],
     "error: --data-dir sentevl=/x: unknown source 'sentevl' (did you mean 'senteval'?); sources with a location: "
     "senteval, glue, hub, mteb"),
    (["--data-dir", "packaged=/x"],
     "error: --data-dir packaged=/x: the packaged source reads no location (STS-B shipped with the package, "
     "offline); leave it out"),
    (["--data-dir", "senteval"], "error: --data-dir senteval: expected SOURCE=DIR"),
    (["--data-dir", "hub=/a", "--data-dir", "hub=/b"], "error: --data-dir: hub is given twice (/a, /b); give it once"),
    (["--data-dir", "senteval=/a", "--senteval-dir", "/b"],
     "error: --senteval-dir /b and --data-dir senteval=/a name two values of senteval; give one"),
    (["--source", "sentevl"],
     "error: --source sentevl: expected one of packaged, senteval, glue, hub, mteb (did you mean 'senteval'?)"),
])
def test_a_bad_data_dir_is_one_line(bench, args, message):
    assert one_error(*bench(*args, "--dry-run")[::2]) == message


def test_a_bad_data_dir_table_in_a_config_file_is_one_line(bench, tmp_path):
    config = tmp_path / "bench.toml"
    config.write_text('[data_dir]\nhubb = "/x"\n', encoding="utf-8")
    line = one_error(*bench("--config", str(config), "--dry-run")[::2])
    assert line.startswith("error: --data-dir hubb=/x: unknown source 'hubb' (did you mean 'hub'?)")
    config.write_text('[data_dir]\nhub = 3\n', encoding="utf-8")
    line = one_error(*bench("--config", str(config), "--dry-run")[::2])
    assert line == f"error: {config}: data_dir.hub is not a string"


def test_python_callers_keep_the_older_keywords():
    import harness

    cfg = harness.BenchConfig(senteval_dir="/s", data_dir={"hub": "/h"}).validate()
    assert cfg.locations() == {"hub": "/h", "senteval": "/s"}
    with pytest.raises(UserError, match="name two locations of the senteval source"):
        harness.BenchConfig(senteval_dir="/s", data_dir={"senteval": "/t"}).validate()


def test_load_task_gives_each_source_only_its_own_location(toy, tmp_path):
    write_toy(tmp_path, "stsb")
    task = load_task(TASKS["stsb"], "toy", ["test"], locations={"toy": str(tmp_path), "senteval": "/elsewhere"})
    assert task.source == "toy" and len(task.eval) == 12


def test_registrations_are_refused_with_a_reason(toy):
    with pytest.raises(UserError, match=r"^cannot register source 'toy': the name is taken"):
        SOURCES.register("toy", toy_source.SOURCE)
    with pytest.raises(UserError, match=r"^cannot register source 'mine': expected a harness.core.data.sources.Source, "
                                        r"got function"):
        SOURCES.register("mine", toy_source.load)
    with pytest.raises(UserError, match=r"^cannot register source 'other': its Source is named 'toy'"):
        SOURCES.register("other", toy_source.SOURCE)
    with pytest.raises(UserError, match=r"^cannot register source 'bad name!': a name is letters"):
        SOURCES.register("bad name!", toy_source.SOURCE)
    with pytest.raises(UserError, match=r"^cannot register source 'nowhere': it needs a location but does not say"):
        SOURCES.register("nowhere", Source("nowhere", "x", toy_source.load, needs_location=True))
    with pytest.raises(UserError, match=r"^cannot register task 'pairs': kind 'nli': the kinds are sts, pairclass"):
        declare_task(TaskSpec(name="pairs", title="P", description="", kind="nli"))
    with pytest.raises(UserError, match=r"^cannot register task 'stsb': the name is taken"):
        declare_task(TASKS["stsb"])
    with pytest.raises(UserError, match=r"^unknown source 'hbu' \(did you mean 'hub'\?\); sources: packaged, senteval"):
        SOURCES["hbu"]


def test_an_installed_entry_point_reaches_the_same_registry(monkeypatch):
    point = importlib.metadata.EntryPoint(name="toy", value="toy_source:SOURCE", group="sts_bench.sources")
    broken = importlib.metadata.EntryPoint(name="broken", value="no_such_module:SOURCE", group="sts_bench.sources")
    listed = [point]
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group=None: [p for p in listed if p.group == group])
    fresh: Registry[Source] = Registry("source", check=sources._check, group="sts_bench.sources",
                                       builtins=sources._builtins)
    assert fresh["toy"] is toy_source.SOURCE and fresh.origin("toy") == "entry point toy_source:SOURCE in " \
                                                                        "sts_bench.sources"
    assert list(fresh)[:5] == ["packaged", "senteval", "glue", "hub", "mteb"] and "toy" in fresh
    listed.append(broken)
    again: Registry[Source] = Registry("source", check=sources._check, group="sts_bench.sources")
    with pytest.raises(UserError, match=r"^cannot register source 'broken' \(entry point no_such_module:SOURCE in "
                                        r"sts_bench.sources\): it does not import \(ModuleNotFoundError"):
        "broken" in again  # noqa: B015


def _tuples(value):
    """A JSON value as the Python declarations wrote it: every array a tuple (they had no list)."""
    if isinstance(value, dict):
        return {key: _tuples(item) for key, item in value.items()}
    return tuple(_tuples(item) for item in value) if isinstance(value, list) else value


def test_the_builtin_tasks_from_tasks_toml_are_the_specs_the_python_declarations_made():
    """tests/data/builtin_tasks.json holds every built-in TaskSpec as tasks.py and pair_tasks.py
    declared them in Python (710202d, dumped before the move to tasks.toml; none held a list): the
    same tasks in the same order (a table's columns follow it), field by field. ``repr`` tells a
    list from a tuple, 0 from 0.0 and a reordered ``where`` (``sts-bench list`` names its sources
    in order)."""
    from harness.core.data.tasks import _builtins, _check_task

    expected = json.loads((Path(__file__).parent / "data" / "builtin_tasks.json").read_text())
    fresh = Registry("task", check=_check_task, builtins=_builtins)  # tests may re-declare in TASKS
    assert fresh.names() == [want["name"] for want in expected]
    for want in expected:
        spec = fresh[want["name"]]
        for field in dataclasses.fields(TaskSpec):
            assert repr(getattr(spec, field.name)) == repr(_tuples(want[field.name])), (spec.name, field.name)


def test_the_task_data_file_is_read_on_the_registry_s_first_use_not_on_import():
    code = ("import sys; from harness.core.data.tasks import TASKS; read = 'tomllib' in sys.modules; "
            "print(read, len(TASKS), TASKS['qnli'].sides, 'tomllib' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.stdout.split() == ["False", "17", "('query',", "'document')", "True"], done.stderr[-2000:]
