"""MTEB both ways, offline: MTEB's STS tasks as a source (``--source mteb``), every result as an MTEB
result file that MTEB's own loader reads, and any method as an MTEB model whose MTEB score equals
the harness's own score. All data comes from the local fixtures (``fixtures.write_hub``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import harness
from harness.core.errors import UserError

mteb = pytest.importorskip("mteb")


def records(out: Path) -> dict[tuple[str, str], dict]:
    found = {}
    for path in (out / "runs").glob("*.json"):
        rec = json.loads(path.read_text(encoding="utf-8"))
        found[(rec["method"]["name"], rec["task"]["name"])] = rec
    return found


@pytest.fixture(scope="module")
def mteb_run(tmp_path_factory, hub_root, tiny_bert):
    """One run of two methods on three MTEB tasks read through MTEB's task objects, from local files."""
    import run_bench

    base = tmp_path_factory.mktemp("mteb-run")
    code = run_bench.main(["--source", "mteb", "--hub-root", str(hub_root), "--tasks", "BIOSSES",
                           "STSBenchmarkMultilingualSTS", "STSBenchmark", "--methods", "avg", "whitening",
                           "--backbone", str(tiny_bert), "--aggregation", "mean", "--cache-dir", str(base / "cache"),
                           "--output-dir", str(base / "out"), "--no-progress", "--no-plots", "--bootstrap", "50"])
    assert code == 0
    return base


def test_mteb_tasks_load_through_mteb_task_objects(mteb_run, hub_root):
    recs = records(mteb_run / "out")
    multi = recs[("avg", "STSBenchmarkMultilingualSTS")]["task"]
    # Two language subsets, whose "similarity_score" column only MTEB's dataset_transform renames.
    assert multi["subsets"] == {"en": 10, "de": 10} and multi["source"] == "mteb"
    assert recs[("avg", "BIOSSES")]["task"]["n_pairs"] == 10
    # A registered task named by its MTEB name is the registered task, read from the same files.
    stsb = recs[("avg", "stsb")]
    assert stsb["task"]["mteb_name"] == "STSBenchmark"
    rows = [json.loads(line) for line in (hub_root / "stsbenchmark-sts" / "test.jsonl").read_text().splitlines()]
    assert stsb["pairs"]["gold"] == [float(r["score"]) for r in rows]
    # whitening's target fit set is every split of the task: train + dev + test of the 2 subsets.
    whitening = recs[("whitening", "STSBenchmarkMultilingualSTS")]
    assert whitening["fit"]["fit_set"]["name"] == "target" and whitening["protocol"]["transductive"]


def test_same_data_scores_the_same_from_the_hub_source(bench, hub_root, tiny_bert, tmp_path):
    scores = {}
    for source in ("hub", "mteb"):
        code, _, err = bench("--source", source, "--hub-root", str(hub_root), "--tasks", "stsb", "--methods", "avg",
                             "--backbone", str(tiny_bert), "--output-dir", str(tmp_path / source))
        assert code == 0, err
        (rec,) = records(tmp_path / source).values()
        scores[source] = (rec["scores"]["spearman"], rec["task"]["fingerprint"])
    assert scores["hub"] == scores["mteb"]


@pytest.mark.parametrize(("task", "message"), [
    ("STS17x", "unknown MTEB STS task 'STS17x' (did you mean 'STS17'?)"),
    ("Banking77Classification", "is a Classification task; --source mteb reads STS tasks (sentence pairs with a gold "
                                "score) and the PairClassification tasks declared"),
])
def test_a_task_mteb_cannot_give_is_one_line(bench, hub_root, task, message):
    code, _, err = bench("--source", "mteb", "--hub-root", str(hub_root), "--tasks", task, "--methods", "random")
    assert code == 2 and message in err and "Traceback" not in err


def test_result_files_load_with_mtebs_own_loader(mteb_run, tmp_path):
    out = mteb_run / "out"
    files = sorted((out / "mteb").glob("*/*/*.json"))
    tasks = {p.stem for p in files if p.name != "model_meta.json"}
    assert tasks == {"BIOSSES", "STSBenchmarkMultilingualSTS", "STSBenchmark"}
    # MTEB's local cache is <cache>/results/<model>/<revision>/<Task>.json: ours is that folder.
    shutil.copytree(out / "mteb", tmp_path / "cache" / "results")
    loaded = mteb.ResultCache(cache_path=tmp_path / "cache").load_results(include_remote=False)
    by_model = {m.model_name: {t.task_name: t for t in m.task_results} for m in loaded.model_results}
    recs = records(out)
    for (method, task), rec in recs.items():
        name = f"sts-bench/{method}-{Path(rec['method']['spec']['backbone']).name}"
        result = by_model[name][rec["task"]["mteb_name"] or task]
        # MTEB's main score of a task averages its subsets: sts-bench's --aggregation mean.
        assert result.get_score() * 100 == pytest.approx(rec["scores"]["spearman"], abs=1e-3)
    stsb = mteb.TaskResult.from_disk(next(p for p in files if p.stem == "STSBenchmark"))
    assert stsb.dataset_revision.startswith("mteb-")  # local files, not MTEB's pinned revision
    meta = json.loads(next((out / "mteb").glob("sts-bench__whitening-*/*/model_meta.json")).read_text())
    assert set(meta["training_datasets"]) == tasks  # a target fit has seen the task: MTEB's contamination mark
    mteb.models.model_meta.ModelMeta.model_validate_json_resolved(json.dumps(meta))


def test_result_files_carry_the_models_real_metadata(mteb_run, tiny_bert):
    """model_meta.json of a run: the width of the vectors scored, the backbone's parameter count (torch's
    own count of the same checkpoint), and no hub id for a local folder (where it came from is unknown)."""
    from transformers import AutoConfig, AutoModel

    out = mteb_run / "out" / "mteb"
    hidden = AutoConfig.from_pretrained(str(tiny_bert)).hidden_size
    parameters = sum(p.numel() for p in AutoModel.from_pretrained(str(tiny_bert)).parameters())
    recs = records(mteb_run / "out")
    # avg gives the hidden width; whitening keeps the fit set's rank (fewer rows than dimensions here)
    kept = {rec["fit"]["dims_kept"] for (method, _), rec in recs.items() if method == "whitening"}
    assert all(rec["embed_dim"] == (hidden if method == "avg" else rec["fit"]["dims_kept"])
               for (method, _), rec in recs.items())
    for method, widths in (("avg", {hidden}), ("whitening", kept)):
        meta = json.loads(next(out.glob(f"sts-bench__{method}-*/*/model_meta.json")).read_text())
        assert meta["embed_dim"] in widths and (meta["n_parameters"], meta["adapted_from"]) == (parameters, None)


def test_the_packaged_model_is_adapted_from_its_hub_id():
    from harness.core.encoding.backbone import resolve_backbone

    assert resolve_backbone("minilm").hub_id() == "sentence-transformers/all-MiniLM-L6-v2"


def local_task(name: str, folder: Path, splits: tuple[str, ...] = ("test",)):
    """MTEB's task ``name`` with its dataset set directly from local files, as MTEB's own tests do."""
    from datasets import Dataset, DatasetDict

    task = mteb.get_task(name)
    task.dataset = DatasetDict({split: Dataset.from_list([json.loads(line) for line in
                                                          (folder / f"{split}.jsonl").read_text().splitlines()])
                                for split in splits})
    task.data_loaded = True
    return task


def stsb_task(hub_root: Path):
    return local_task("STSBenchmark", hub_root / "stsbenchmark-sts", ("train", "validation", "test"))


@pytest.mark.parametrize("method", ["avg", "whitening"])
def test_mteb_scores_a_harness_method_as_the_harness_does(method, mteb_run, hub_root, tiny_bert):
    """The parity test: MTEB's evaluation of harness.mteb_model equals the harness's own score for the
    same method, backbone and protocol (aggregation all: STSBenchmark has one subset)."""
    task = stsb_task(hub_root)
    model = harness.mteb_model(method, backbone=str(tiny_bert), tasks=[task],
                               settings={"cache_dir": str(mteb_run / "cache")})
    result = mteb.evaluate(model, task, cache=None, show_progress_bar=False).task_results[0]
    own = records(mteb_run / "out")[(method, "stsb")]
    assert result.get_score() * 100 == pytest.approx(own["scores"]["spearman"], abs=0.01)
    assert model.ctx.sentences_forwarded == 0  # every vector came from the run's embedding cache
    # The model's MTEB identity is the folder the run wrote its MTEB result into.
    meta = model.mteb_model_meta
    assert (mteb_run / "out" / "mteb" / meta.model_name_as_path() / meta.revision / "STSBenchmark.json").is_file()


def test_a_fit_set_the_caller_names_is_fitted_once(hub_root, tiny_bert, tmp_path):
    sentences = [json.loads(line)["sentence1"] for line in
                 (hub_root / "biosses-sts" / "test.jsonl").read_text().splitlines()]
    model = harness.mteb_model("whitening", backbone=str(tiny_bert), fit_set=sentences * 4, view="avg",
                               settings={"cache_dir": str(tmp_path)})
    tasks = [local_task("BIOSSES", hub_root / "biosses-sts"), stsb_task(hub_root)]
    results = mteb.evaluate(model, tasks, cache=None, show_progress_bar=False).task_results
    assert {r.task_name for r in results} == {"BIOSSES", "STSBenchmark"}
    assert model.method.fit_info["fit_set"]["n_sentences"] == len(set(sentences))
    assert model.method.spec.params["view"] == "avg"


def test_mteb_model_refuses_what_it_cannot_be(tiny_bert):
    with pytest.raises(UserError, match="did you mean 'k'"):
        harness.mteb_model("whitening", backbone=str(tiny_bert), kk=3)
    with pytest.raises(UserError, match="unknown setting 'dtpye'"):
        harness.mteb_model("avg", backbone=str(tiny_bert), settings={"dtpye": "bf16"})
    with pytest.raises(UserError, match="scores pairs"):
        harness.mteb_model("cross-encoder", backbone=str(tiny_bert), model="train")
