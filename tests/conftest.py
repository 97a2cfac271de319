"""Shared fixtures. Nothing here touches the network: every model and data folder is built here."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
# Belt and braces: a test that would reach the hub fails fast instead of hanging on a network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# --exercised DIR: which modules of harness/ and methods/ the run executes (tests/exercised.py);
# --cpu-times FILE, --cpu-budget SECONDS: CPU seconds per test (tests/cpu_times.py); a local
# embeddings endpoint (tests/endpoint_server.py: the embeddings_server and endpoint_url fixtures).
pytest_plugins = ["exercised", "cpu_times", "endpoint_server"]

from fixtures import (  # noqa: E402
    write_hub,
    write_sentence_transformer,
    write_senteval,
    write_tiny_bert,
    write_tiny_deberta,
    write_tiny_decoder,
    write_tiny_mlm,
    write_tiny_mpnet,
    write_tiny_roberta,
)


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    return write_tiny_bert(tmp_path_factory.mktemp("models") / "tiny-bert")


@pytest.fixture(scope="session")
def tiny_roberta(tiny_bert, tmp_path_factory) -> Path:
    return write_tiny_roberta(tiny_bert, tmp_path_factory.mktemp("models") / "tiny-roberta")


@pytest.fixture(scope="session")
def tiny_mlm(tiny_bert, tmp_path_factory) -> Path:
    """A tiny BertForMaskedLM with its MLM head (fixtures.write_tiny_mlm): splade's backbone."""
    return write_tiny_mlm(tiny_bert, tmp_path_factory.mktemp("models") / "tiny-mlm")


@pytest.fixture(scope="session")
def tiny_mpnet(tiny_bert, tmp_path_factory) -> Path:
    return write_tiny_mpnet(tiny_bert, tmp_path_factory.mktemp("models") / "tiny-mpnet")


@pytest.fixture(scope="session")
def tiny_deberta(tiny_bert, tmp_path_factory) -> Path:
    """DeBERTa-v3's layout (fixtures.DEBERTA_VARIANTS["v3"])."""
    return write_tiny_deberta(tiny_bert, tmp_path_factory.mktemp("models") / "tiny-deberta", "v3")


@pytest.fixture(scope="session")
def tiny_deberta_v2(tiny_bert, tmp_path_factory) -> Path:
    """DeBERTa-v2 options v3 leaves off (fixtures.DEBERTA_VARIANTS["v2-options"])."""
    return write_tiny_deberta(tiny_bert, tmp_path_factory.mktemp("models") / "tiny-deberta-v2", "v2-options")


@pytest.fixture(scope="session")
def tiny_deberta_absolute(tiny_bert, tmp_path_factory) -> Path:
    """DeBERTa-v2 without relative attention (fixtures.DEBERTA_VARIANTS["absolute"])."""
    return write_tiny_deberta(tiny_bert, tmp_path_factory.mktemp("models") / "tiny-deberta-abs", "absolute")


@pytest.fixture(scope="session")
def tiny_decoders(tmp_path_factory) -> dict[str, Path]:
    """A tiny causal LM per family (fixtures.DECODER_FAMILIES): OPT, Qwen2, Llama, GPT-2."""
    from fixtures import DECODER_FAMILIES

    root = tmp_path_factory.mktemp("decoders")
    return {family: write_tiny_decoder(root / family, family) for family in DECODER_FAMILIES}


@pytest.fixture(scope="session")
def tiny_st(tiny_bert, tmp_path_factory) -> Path:
    return write_sentence_transformer(tiny_bert, tmp_path_factory.mktemp("models") / "tiny-st")


@pytest.fixture(scope="session")
def senteval_root(tmp_path_factory) -> Path:
    return write_senteval(tmp_path_factory.mktemp("senteval") / "data" / "downstream")


@pytest.fixture(scope="session")
def hub_root(tmp_path_factory) -> Path:
    return write_hub(tmp_path_factory.mktemp("hub"))


@pytest.fixture(scope="session")
def real_cache(tmp_path_factory) -> Path:
    """The embedded default's cache, shared by every ``real`` test module (the report page test
    reads the same vectors as test_real.py instead of encoding STS-B again). Under pytest-xdist its
    users run on one worker (:func:`pytest_collection_modifyitems`), so STS-B is encoded once."""
    return tmp_path_factory.mktemp("real-cache")


# Session fixtures are per process: under pytest-xdist (`make test` runs -n ... --dist loadgroup)
# every worker builds its own tiny models (seconds), but the tests sharing a cache that is expensive
# to fill must share a worker, or each worker fills it again (MiniLM on STS-B: a minute each).
SHARED_WORKER = {"real_cache": "minilm-on-stsb"}


def pytest_configure(config) -> None:
    """Under pytest-xdist, each worker keeps to a core of its own (worker i: the i-th core this
    process may use). The harness sizes torch's threads by the cores a process may use
    (``--threads 0``), so two workers on two cores would otherwise run four threads that wait for
    each other; subprocesses a test starts inherit the core.

    The plot worker (harness/runner/tables/plot_worker.py) is off by default here: every cold run
    of the suite would spawn one, which costs the suite ~12 % of its time on 2 cores with nothing
    idle to hide it; tests/test_plot_worker.py turns it on where it is the subject."""
    os.environ.setdefault("STS_BENCH_PLOT_WORKER", "0")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if count <= len(cores):  # more workers than cores: leave them to the scheduler
        os.sched_setaffinity(0, {cores[int(worker[2:]) % len(cores)]})


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, a test using a fixture of ``SHARED_WORKER`` goes to that fixture's group
    (``--dist loadgroup`` runs a group on one worker), and so does every test of a module that sets
    ``SHARED_WORKER = "<group>"`` (tests/test_decoder_peers.py: its module-scoped benchmark run
    costs minutes of CPU, and would be built again on each worker that runs one of its tests).
    Without xdist the marker is not registered, and nothing is added.

    The marker is added before every other plugin's hook (xdist's reads it). After them all (-k, -m
    and --deselect have matched the ids they were given), a grouped test whose id lacks the
    ``@group`` suffix gets it: loadgroup schedules by that suffix, which xdist's worker writes to
    ``item._nodeid``, and pytest 9.2 reads ids from ``item._id`` instead, so without this the
    suffix never arrives and every group is spread over the workers (pytest-xdist issue 1386:
    MiniLM encoded STS-B on each worker, the decoder-peers benchmark ran on both)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return (yield)
    for item in items:
        groups = {SHARED_WORKER[name] for name in getattr(item, "fixturenames", ()) if name in SHARED_WORKER}
        module = getattr(item, "module", None)
        if isinstance(getattr(module, "SHARED_WORKER", None), str):  # a module whose module-scoped fixture is costly
            groups.add(module.SHARED_WORKER)
        if groups:
            item.add_marker(pytest.mark.xdist_group(name="+".join(sorted(groups))))
    result = yield
    if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
        for item in items:
            suffix_group(item)
    return result


def suffix_group(item) -> None:
    """xdist's ``@group`` suffix on the id of a test marked ``xdist_group``, where it is missing."""
    marks = item.iter_markers("xdist_group")
    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks})
    if not names or item.nodeid.rfind("@") > item.nodeid.rfind("]"):  # not grouped, or xdist wrote it
        return
    grouped = f"{item.nodeid}@{'_'.join(names)}"
    if hasattr(item, "_id"):  # pytest 9.2's structured ids
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(grouped)
    else:
        item._nodeid = grouped


@pytest.fixture
def bench(tmp_path, capsys):
    """Run the real CLI entry point; returns (exit code, stdout, stderr). Cache and outputs go to
    ``tmp_path`` unless the caller passes its own --cache-dir / --output-dir."""
    import run_bench

    def call(*args: str) -> tuple[int, str, str]:
        argv = list(args)
        if "--cache-dir" not in argv:
            argv += ["--cache-dir", str(tmp_path / "cache")]
        if "--output-dir" not in argv:
            argv += ["--output-dir", str(tmp_path / "out")]
        code = run_bench.main([*argv, "--no-progress"])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


@pytest.fixture
def forget_plugins():
    """Plugins loaded by a test are forgotten after it: the registry is per process."""
    import methods
    from methods import plugins

    held, modules = dict(methods.REGISTERED), set(sys.modules)
    yield
    methods.REGISTERED.clear()
    methods.REGISTERED.update(held)
    for name in set(sys.modules) - modules:
        if name.startswith(plugins.FILE_PREFIX):
            del sys.modules[name]


@pytest.fixture(scope="module")
def example_plugin(tmp_path_factory) -> Iterator[EntryPoint]:
    """The example plugin package, installed here for these tests only: `make bench` installs no
    example into a user's environment (issue 52). Its wheel is built by its own build backend (PEP 517,
    called as a frontend would: uv-made venvs have no pip) and installed as an installer installs a pure
    wheel, unpacked into a folder, which goes first on ``sys.path`` while the module that asked for it
    runs (test_plugins, and test_readme for the docs' commands that name ``randproj``)."""
    import shutil
    import subprocess
    import zipfile

    from methods import plugins

    root = tmp_path_factory.mktemp("randproj")
    skipped = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    source = shutil.copytree(ROOT / "examples" / "sts-bench-plugin", root / "source", ignore=skipped)
    (root / "dist").mkdir()
    done = subprocess.run([sys.executable, "-c", "import sys, setuptools.build_meta as backend; "
                           "backend.build_wheel(sys.argv[1])", str(root / "dist")],
                          cwd=source, capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = (root / "dist").glob("sts_bench_randproj-*.whl")
    site = root / "site"
    zipfile.ZipFile(wheel).extractall(site)
    sys.path.insert(0, str(site))
    try:
        found = plugins.entry_points().get("randproj")
        assert found is not None and found.dist is not None and found.dist.name == "sts-bench-randproj"
        assert Path(str(found.dist.locate_file(""))) == site  # this install, not one the environment holds
        yield found
    finally:
        sys.path.remove(str(site))
        for name in [n for n in sys.modules if n.partition(".")[0] == "sts_bench_randproj"]:
            del sys.modules[name]
