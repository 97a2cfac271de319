"""docs/MTEB.md keeps working: its Python example runs offline on a tiny model and local data, in a
process whose HOME is an empty folder, and gives the CLI's scores; MTEB's and the datasets library's
caches land under the chosen cache folder (for ``--source mteb`` too); errors from Python name the
Python argument; the exported metadata is the model's own (checked against counts made here)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import harness
from harness.core.errors import UserError

mteb = pytest.importorskip("mteb")
ROOT = Path(__file__).resolve().parent.parent
PLACEHOLDERS = re.compile(r"^MODEL, DATA, CACHE = .*$", re.M)


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(encoding="utf-8"), re.M | re.S)


def bare_home(tmp_path: Path) -> dict[str, str]:
    """The environment of a user whose home is an empty folder and who set no cache variable."""
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "HF_HOME", "HF_DATASETS_CACHE",
                                                            "MTEB_CACHE", "STS_BENCH_CACHE")}
    (tmp_path / "home").mkdir()
    return {**env, "HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*")] if folder.exists() else []


def independent_parameter_count(folder: Path) -> int:
    from transformers import AutoModel

    return sum(p.numel() for p in AutoModel.from_pretrained(str(folder)).parameters())


@pytest.mark.heavy  # two processes importing mteb; test_mteb.py runs mteb in-process
def test_the_docs_example_runs_offline_gives_the_clis_scores_and_keeps_home_clean(tmp_path, tiny_bert, hub_root,
                                                                                   bench):
    block = python_blocks(ROOT / "docs" / "MTEB.md")[0]  # the example (the second block reads result files)
    assert 5 <= len(block.strip().splitlines()) <= 15 and PLACEHOLDERS.search(block)
    cache = tmp_path / "sts-cache"
    code = PLACEHOLDERS.sub(f"MODEL, DATA, CACHE = {str(tiny_bert)!r}, {str(hub_root)!r}, {str(cache)!r}", block)
    env = bare_home(tmp_path)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = dict(line.split() for line in done.stdout.splitlines() if line.strip())
    # The CLI's score of the same method and protocol (MTEB's main score is the mean over subsets).
    code_, _, err = bench("--source", "mteb", "--hub-root", str(hub_root), "--tasks", "STSBenchmark", "BIOSSES",
                          "--methods", "whitening", "--set", "whitening.k=16", "--backbone", str(tiny_bert),
                          "--aggregation", "mean", "--output-dir", str(tmp_path / "out"))
    assert code_ == 0, err
    for path in (tmp_path / "out" / "runs").glob("*.json"):
        rec = json.loads(path.read_text(encoding="utf-8"))
        name = rec["task"]["mteb_name"] or rec["task"]["name"]
        assert float(printed[name]) == pytest.approx(rec["scores"]["spearman"], abs=0.006)
    # The last line: embed_dim (whitening's k) and the backbone's parameters, counted by torch here.
    dim, params = done.stdout.split()[-2:]
    assert int(dim) == 16 and int(params) == independent_parameter_count(tiny_bert)
    assert files_under(tmp_path / "home") == []
    assert {p.name for p in (cache / "mteb" / "results").glob("*/*/*.json")} >= {"STSBenchmark.json", "BIOSSES.json",
                                                                                  "model_meta.json"}
    assert any(p.is_file() for p in files_under(cache / "hf-datasets"))
    assert f"MTEB in {cache / 'mteb'}" in done.stderr


@pytest.mark.heavy  # a process importing mteb; test_sources.py reads --source mteb in-process
def test_source_mteb_keeps_home_clean_and_says_where_its_caches_are(tmp_path, tiny_bert, hub_root):
    cache = tmp_path / "cache"
    done = subprocess.run([sys.executable, str(ROOT / "run_bench.py"), "--source", "mteb", "--hub-root",
                           str(hub_root), "--tasks", "BIOSSES", "--methods", "avg", "--backbone", str(tiny_bert),
                           "--cache-dir", str(cache), "--output-dir", str(tmp_path / "out"), "--no-progress",
                           "--no-plots", "--bootstrap", "0"],
                          cwd=tmp_path, env=bare_home(tmp_path), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert files_under(tmp_path / "home") == []
    assert any(p.is_file() for p in files_under(cache / "hf-datasets"))
    assert f"caches: HuggingFace datasets in {cache / 'hf-datasets'}, MTEB in {cache / 'mteb'}" in done.stderr


def test_caches_under_restores_what_it_changed(tmp_path, monkeypatch):
    import datasets.config

    from harness.core.artifacts import ArtifactStore
    from harness.core.data.hf_places import caches_under

    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    monkeypatch.setenv("MTEB_CACHE", str(tmp_path / "mine"))  # the user's own choice wins
    before = datasets.config.HF_DATASETS_CACHE
    with caches_under(ArtifactStore(tmp_path / "c")) as places:
        assert datasets.config.HF_DATASETS_CACHE == tmp_path / "c" / "hf-datasets" == places["HF_DATASETS_CACHE"]
        assert tmp_path / "c" / "hf-datasets" / "downloads" == datasets.config.DOWNLOADED_DATASETS_PATH
        assert os.environ["HF_DATASETS_CACHE"] == str(tmp_path / "c" / "hf-datasets")
        assert places["MTEB_CACHE"] == tmp_path / "mine"
    assert before == datasets.config.HF_DATASETS_CACHE and "HF_DATASETS_CACHE" not in os.environ
    assert os.environ["MTEB_CACHE"] == str(tmp_path / "mine")


def test_a_missing_model_is_worded_for_the_caller(bench, tmp_path):
    missing = "no-such-org/no-such-model"
    code, _, err = bench("--backbone", missing, "--methods", "avg")
    assert code == 2 and "pass its folder with --backbone /path/to/model" in err
    # Same model again, from Python: the remembered failure is worded for this caller.
    with pytest.raises(UserError) as raised:
        harness.mteb_model("avg", backbone=missing, settings={"cache_dir": str(tmp_path / "c")})
    assert "pass its folder with backbone='/path/to/model'" in str(raised.value)
    assert "--backbone" not in str(raised.value)


def test_missing_local_data_names_the_setting(tiny_bert, tmp_path, bench):
    model = harness.mteb_model("avg", backbone=str(tiny_bert),
                               settings={"hub_root": str(tmp_path / "none"), "cache_dir": str(tmp_path / "c")})
    with pytest.raises(UserError, match=r"^settings\['hub_root'\]: cannot read .*none/biosses-sts"):
        model.evaluate(["BIOSSES"], cache=None)
    code, _, err = bench("--source", "mteb", "--hub-root", str(tmp_path / "none"), "--tasks", "BIOSSES",
                         "--methods", "avg", "--backbone", str(tiny_bert))
    assert code == 2 and "error: --hub-root: cannot read" in err


def test_metadata_is_the_models_own(tiny_bert, hub_root, tmp_path):
    config = json.loads((tiny_bert / "config.json").read_text(encoding="utf-8"))
    settings = {"cache_dir": str(tmp_path / "c"), "hub_root": str(hub_root)}
    meta = harness.mteb_model("avg", backbone=str(tiny_bert), settings=settings).mteb_model_meta
    assert meta.embed_dim == config["hidden_size"] == 32
    assert meta.n_parameters == independent_parameter_count(tiny_bert)
    assert meta.adapted_from is None  # a local folder: no hub id to claim
    task = mteb.get_task("BIOSSES")
    whitening = harness.mteb_model("whitening", backbone=str(tiny_bert), k=8, tasks=[task], settings=settings)
    # No data yet (mteb.evaluate loads it after reading the metadata): no fit, so no width is claimed.
    assert whitening.mteb_model_meta.embed_dim is None
    from harness.core.data.sources.mteb_tasks import loaded_mteb_task

    loaded = harness.mteb_model("whitening", backbone=str(tiny_bert), k=8, settings=settings,
                                tasks=[loaded_mteb_task("BIOSSES", str(hub_root))])
    assert loaded.mteb_model_meta.embed_dim == 8


def test_the_packaged_model_is_named_by_its_hub_id():
    from harness.core.encoding.backbone import resolve_backbone

    assert resolve_backbone("minilm").hub_id() == "sentence-transformers/all-MiniLM-L6-v2"
