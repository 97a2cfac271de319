"""Vector settings (--dims, --precision, --similarity) as MTEB experiments: every setting of a method is the same
MTEB model (name and revision) with MTEB's experiment_kwargs (embed_dim, output_dtypes) telling them apart, in the
folder mteb.ResultCache computes for that experiment; each similarity under MTEB's STS score key, checked against
scipy on the record's own pairs and, for bits, against MTEB's own CompressionWrapper evaluation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

import harness
from harness.runner.records.mteb_files import dataset_revision, write_mteb_result

mteb = pytest.importorskip("mteb")

TASKS = ("STSBenchmark", "STSBenchmarkMultilingualSTS")
KEY = {"cosine": "cosine", "dot": "dot", "manhattan": "manhattan", "euclidean": "euclidean"}


def records(out: Path) -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted((out / "runs").glob("*.json"))]


def mteb_kwargs(rec: dict) -> dict:
    """What MTEB records for the row's setting, from the record's own fields: load_model(embed_dim=k) for a cut,
    CompressionWrapper's output_dtypes (one binary for both bit layouts), and the calibration set's name."""
    vector, kwargs = rec["vector"], {}
    if vector["dims"] != "full":
        kwargs["embed_dim"] = vector["dims"]
    if vector["precision"] != "fp32":
        kwargs["output_dtypes"] = {"ubinary": "binary"}.get(vector["precision"], vector["precision"])
    if "calibration" in vector:
        kwargs["calibration"] = vector["calibration"]["name"]
    return kwargs


def meta_of(rec: dict, out: Path):
    """MTEB's ModelMeta of the row: the full vector's model (read from its own model_meta.json), with the row's
    experiment kwargs."""
    full = next(p for p in (out / "mteb").glob("*/*/model_meta.json"))
    meta = mteb.models.model_meta.ModelMeta.model_validate_json_resolved(full.read_text())
    return meta.model_copy(update={"experiment_kwargs": mteb_kwargs(rec) or None})


@pytest.fixture(scope="module")
def settings_run(tmp_path_factory, hub_root, tiny_bert):
    import run_bench

    base = tmp_path_factory.mktemp("mteb-settings")
    code = run_bench.main(["--source", "mteb", "--hub-root", str(hub_root), "--tasks", *TASKS, "--methods", "avg",
                           "--backbone", str(tiny_bert), "--dims", "8", "full", "--precision", "fp32", "int8", "binary",
                           "ubinary", "--similarity", "cosine", "dot", "manhattan", "euclidean", "--fit-set", "train",
                           "--cache-dir", str(base / "cache"), "--output-dir", str(base / "out"), "--no-progress",
                           "--no-plots", "--bootstrap", "0"])
    assert code == 0
    return base


def test_each_setting_is_an_experiment_of_the_same_model(settings_run, tmp_path):
    out = settings_run / "out"
    recs = records(out)
    assert len(recs) == 2 * (2 * 2 * 4 + 2 * 2)  # per task: (fp32, int8) × 2 dims × 4 similarities, 2 bit kinds × 2
    cache = mteb.ResultCache(cache_path=tmp_path / "cache")
    shutil.copytree(out / "mteb", tmp_path / "cache" / "results")
    for rec in recs:
        meta = meta_of(rec, out)
        task = rec["task"]["mteb_name"] or rec["task"]["name"]
        # The folder MTEB itself computes for this model and experiment holds the row's file.
        assert cache.get_task_result_path(task, meta).is_file(), rec["method"]["label"]
    loaded = cache.load_results(include_remote=False, load_experiments="match_name")
    by_experiment = {m.experiment_name: m for m in loaded.model_results}
    expected = {meta_of(rec, out).experiment_name for rec in recs}
    assert set(by_experiment) == expected and len(expected) == 6  # full (None), 8d, int8, 8d int8, binary, 8d binary
    assert {(m.model_name, m.model_revision) for m in loaded.model_results} == {(meta_of(recs[0], out).name,
                                                                                 meta_of(recs[0], out).revision)}
    for rec in recs:
        model = by_experiment[meta_of(rec, out).experiment_name]
        assert {t.task_name for t in model.task_results} == set(TASKS)
        assert model.model_meta.embed_dim == rec["embed_dim"]
        dtype = mteb_kwargs(rec).get("output_dtypes")
        assert model.model_meta.output_dtypes == ([dtype] if dtype else None)
        assert model.model_meta.experiment_kwargs == (mteb_kwargs(rec) or None)
    # MTEB's default leaves experiments out: only the full vector, as before settings existed.
    default = cache.load_results(include_remote=False)
    assert [m.experiment_name for m in default.model_results] == [None]
    # Each experiment's model_meta.json is a valid ModelMeta of its own.
    for path in (out / "mteb").rglob("model_meta.json"):
        mteb.models.model_meta.ModelMeta.model_validate_json_resolved(path.read_text())


def subsets(rec: dict) -> dict[str, np.ndarray]:
    labels = rec["pairs"]["subset"]
    if rec["task"]["source"] != "mteb" or labels is None:
        return {"default": np.arange(len(rec["pairs"]["gold"]))}
    return {s: np.flatnonzero(np.asarray(labels) == s) for s in set(labels)}


def test_each_similarity_is_under_mtebs_key(settings_run, tmp_path):
    out = settings_run / "out"
    recs = records(out)
    cache = mteb.ResultCache(cache_path=tmp_path)
    cosine_rows = {(meta_of(r, out).experiment_name, r["task"]["name"]) for r in recs
                   if r["vector"]["similarity"] == "cosine"}
    checked = 0
    for rec in recs:
        task = rec["task"]["mteb_name"] or rec["task"]["name"]
        path = cache.get_task_result_path(task, meta_of(rec, out)).relative_to(tmp_path / "results")
        result = mteb.TaskResult.from_disk(out / "mteb" / path)
        entries = {e["hf_subset"]: e for e in result.scores["test"]}
        sim = np.asarray(rec["pairs"]["similarity"], dtype=np.float64)
        gold = np.asarray(rec["pairs"]["gold"], dtype=np.float64)
        compared = rec["vector"]["similarity"]
        for subset, idx in subsets(rec).items():
            entry = entries[subset]
            expected = ({"manhattan": sim[idx], "euclidean": -np.sqrt(-sim[idx])} if compared == "hamming"
                        else {KEY[compared]: sim[idx]})
            for prefix, values in expected.items():
                assert entry[f"{prefix}_spearman"] == pytest.approx(spearmanr(values, gold[idx])[0], abs=1e-6)
                assert entry[f"{prefix}_pearson"] == pytest.approx(pearsonr(values, gold[idx])[0], abs=1e-6)
                checked += 1
            has_cosine = (meta_of(rec, out).experiment_name, rec["task"]["name"]) in cosine_rows
            # MTEB's main score of an STS task is cosine_spearman; bits (compared by Hamming) have no cosine here.
            assert entry["main_score"] == (entry["cosine_spearman"] if has_cosine else None)
            assert ("spearman" in entry) == has_cosine and (compared != "hamming" or not has_cosine)
        if compared == "cosine" and len(entries) == 1:  # one subset: MTEB's main score is the row's Spearman
            assert result.get_score() * 100 == pytest.approx(rec["scores"]["spearman"], abs=1e-3)
    assert checked > len(recs)


def test_binary_rows_match_mtebs_compression_wrapper(settings_run, hub_root, tiny_bert, tmp_path):
    """MTEB's own binary experiment of the same model (CompressionWrapper on harness.mteb_model, evaluated by
    mteb.evaluate): its Manhattan and Euclidean scores of the 0/1 vectors are our Hamming row's, and the file it saves
    lands at our file's path."""
    from mteb.models import CompressionWrapper
    from mteb.types import OutputDType
    from test_mteb import stsb_task

    class Settable:
        """harness.mteb_model with a settable mteb_model_meta, which CompressionWrapper replaces."""

        def __init__(self, model):
            self.model, self.mteb_model_meta = model, model.mteb_model_meta

        def encode(self, *args, **kwargs):
            return self.model.encode(*args, **kwargs)

        def similarity(self, a, b):
            return self.model.similarity(a, b)

        def similarity_pairwise(self, a, b):
            return self.model.similarity_pairwise(a, b)

    task = stsb_task(hub_root)
    inner = harness.mteb_model("avg", backbone=str(tiny_bert), tasks=[task],
                               settings={"cache_dir": str(settings_run / "cache")})
    model = CompressionWrapper(Settable(inner), OutputDType.BINARY)
    cache = mteb.ResultCache(cache_path=tmp_path / "mteb-cache")
    theirs = mteb.evaluate(model, task, cache=cache, show_progress_bar=False).task_results[0].scores["test"][0]
    saved = cache.get_task_result_path("STSBenchmark", model.mteb_model_meta)
    assert saved.is_file() and model.mteb_model_meta.experiment_name == "output_dtypes_binary"
    ours_path = settings_run / "out" / "mteb" / saved.relative_to(tmp_path / "mteb-cache" / "results")
    ours = json.loads(ours_path.read_text())["scores"]["test"][0]
    for key in ("manhattan_spearman", "manhattan_pearson", "euclidean_spearman", "euclidean_pearson"):
        assert ours[key] == pytest.approx(theirs[key], abs=1e-5), key
    # MTEB's main score of the bits is their cosine, which sts-bench does not compute: null, not another metric.
    assert ours["main_score"] is None and theirs["main_score"] == theirs["cosine_spearman"]


OLD_KEYS = ["pearson", "spearman", "cosine_pearson", "cosine_spearman", "main_score", "hf_subset", "languages",
            "mteb_version"]


def test_a_cosine_only_run_writes_the_full_vectors_files_as_before(settings_run, bench, hub_root, tiny_bert, tmp_path):
    """The full vector's files keep their path and layout: a run without settings writes exactly the keys files had
    before settings existed, in their order, and a run with settings adds its other similarities' keys to that file
    without changing one of those values (or its model_meta.json)."""
    code, _, err = bench("--source", "mteb", "--hub-root", str(hub_root), "--tasks", *TASKS, "--methods", "avg",
                         "--backbone", str(tiny_bert), "--cache-dir", str(settings_run / "cache"), "--no-plots",
                         "--bootstrap", "0", "--output-dir", str(tmp_path / "plain"))
    assert code == 0, err
    plain, full = tmp_path / "plain" / "mteb", settings_run / "out" / "mteb"
    files = sorted(p.relative_to(plain) for p in plain.rglob("*.json"))
    assert len(files) == 3 and not any("experiments" in p.parts for p in files)
    for rel in files:
        assert (full / rel).is_file()
        if rel.name == "model_meta.json":
            assert (plain / rel).read_bytes() == (full / rel).read_bytes()
            continue
        before, after = (json.loads((folder / rel).read_text())["scores"]["test"] for folder in (plain, full))
        for old, new in zip(before, after, strict=True):
            assert list(old) == OLD_KEYS
            assert {k: new[k] for k in OLD_KEYS} == old
            assert set(new) - set(old) == {f"{s}_{c}" for s in ("dot", "manhattan", "euclidean")
                                           for c in ("pearson", "spearman")}


def assert_written_as_mteb_writes(path: Path, scratch: Path) -> None:
    """``path`` (a result file the run wrote without importing mteb) is byte for byte what mteb's own TaskResult writes
    for what it loads from it (key order, 6-digit rounding, the date as a timestamp, every field), plus a newline."""
    again = scratch / f"again-{path.name}"
    mteb.TaskResult.from_disk(path).to_disk(again)
    assert path.read_text(encoding="utf-8") == again.read_text(encoding="utf-8") + "\n", path


def test_every_file_is_what_mtebs_own_objects_write(settings_run, tmp_path):
    """The run writes these files without importing mteb (its import costs seconds, more than a warm run), so they
    are held to mteb's writers here: every result file (merged similarities, experiments, a null main score, language
    subsets) to TaskResult's to_disk, every model_meta.json to ModelMeta's to_dict (the same keys in its order)."""
    files = sorted((settings_run / "out" / "mteb").rglob("*.json"))
    metas = [p for p in files if p.name == "model_meta.json"]
    assert len(files) - len(metas) == 2 * 6 and len(metas) == 6  # 2 tasks × 6 settings, a meta per setting
    for path in files:
        if path.name != "model_meta.json":
            assert_written_as_mteb_writes(path, tmp_path)
    for path in metas:
        written = json.loads(path.read_text(encoding="utf-8"))
        theirs = mteb.models.model_meta.ModelMeta.model_validate_json_resolved(path.read_text()).to_dict()
        assert list(theirs) == list(written) and theirs == written, path  # max_tokens: theirs 128.0, == 128


@pytest.mark.parametrize(("source", "origin", "expected"), [
    ("mteb", "mteb/stsbenchmark-sts@b0fddb56", "b0fddb56"),  # MTEB's dataset at its pinned revision
    ("hub", "mteb/sts12-sts@a0d554a6", "a0d554a6"),
    ("mteb", "/data/stsbenchmark-sts", "mteb-0123456789ab"),  # --hub-root's files: not MTEB's copy
    ("hub", "mteb/sts12-sts@", "hub-0123456789ab"),  # no revision named
    ("file", "pairs@v2.tsv", "file-0123456789ab"),  # a local file names no revision, whatever its name
])
def test_dataset_revision_is_mtebs_pin_only_for_data_read_at_one(source, origin, expected):
    assert dataset_revision({"source": source, "origin": origin, "fingerprint": "0123456789abcdef" * 4}) == expected


def test_rows_merge_into_their_settings_file_in_any_order(settings_run, tmp_path):
    """Rows of one setting written in reverse order give the same scores; a file of other data (another dataset
    revision) is replaced, not merged into."""
    out = settings_run / "out"
    recs = [r for r in records(out) if r["task"]["name"] == "stsb" and r["vector"]["dims"] == 8
            and r["vector"]["precision"] == "int8"]
    assert len(recs) == 4
    for rec in reversed(recs):
        path = write_mteb_result(tmp_path / "mteb", rec)
    rel = path.relative_to(tmp_path / "mteb")
    assert json.loads(path.read_text())["scores"] == json.loads((out / "mteb" / rel).read_text())["scores"]
    stale = json.loads(path.read_text())
    stale["dataset_revision"] = "other-data"
    path.write_text(json.dumps(stale))
    dot = next(r for r in recs if r["vector"]["similarity"] == "dot")
    write_mteb_result(tmp_path / "mteb", dot)
    (entry,) = json.loads(path.read_text())["scores"]["test"]
    assert set(entry) == {"dot_pearson", "dot_spearman", "main_score", "hf_subset", "languages", "mteb_version"}
    assert entry["main_score"] is None


@pytest.mark.real
def test_the_packaged_models_settings_are_its_mteb_experiments(bench, real_cache, tmp_path):
    """On the packaged MiniLM: the row "avg · 64d int8" is in the folder MTEB computes for the full vector's model
    (its model_meta.json: the same name and revision) with the experiment kwargs embed_dim 64, output_dtypes int8 and
    the calibration set's name. (harness.mteb_model's identity is checked on MTEB's own data, above: a packaged STS-B
    run is
    another task source, so another revision.)"""
    # calibrated on the scored split (--fit-set target, the default): no sentence beyond the shared cache's to encode
    code, _, err = bench("--methods", "avg", "--dims", "64", "--precision", "int8",
                         "--cache-dir", str(real_cache), "--no-plots", "--bootstrap", "0")
    assert code == 0, err
    (meta_path,) = (tmp_path / "out" / "mteb").glob("*/*/model_meta.json")
    meta = mteb.models.model_meta.ModelMeta.model_validate_json_resolved(meta_path.read_text())
    assert meta.name == "sts-bench/avg-minilm"
    kwargs = {"embed_dim": 64, "output_dtypes": "int8", "calibration": "target"}
    experiment = meta.model_copy(update={"experiment_kwargs": kwargs})
    cache = mteb.ResultCache(cache_path=tmp_path / "out")  # bench's output: <out>/mteb, MTEB's <cache>/results
    path = Path(str(cache.get_task_result_path("STSBenchmark", experiment)).replace("/results/", "/mteb/", 1))
    assert experiment.experiment_name == "calibration_target__embed_dim_64__output_dtypes_int8"
    result = json.loads(path.read_text())["scores"]["test"][0]
    (rec,) = [r for r in records(tmp_path / "out") if r["method"]["label"] == "avg · 64d int8"]
    gold, sim = np.asarray(rec["pairs"]["gold"]), np.asarray(rec["pairs"]["similarity"])
    assert result["main_score"] == result["cosine_spearman"] == pytest.approx(spearmanr(sim, gold)[0], abs=1e-6)
    full = json.loads((path.parents[2] / "STSBenchmark.json").read_text())["scores"]["test"][0]
    (avg,) = [r for r in records(tmp_path / "out") if r["method"]["label"] == "avg"]
    assert full["main_score"] * 100 == pytest.approx(avg["scores"]["spearman"], abs=1e-3)
