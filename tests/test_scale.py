"""Scheduler and scale: dry runs, token-budget batches, OOM back-off, worker processes, dask, ray,
SIGKILL resumption and concurrent runs on one cache."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from fixtures import WORDS

import harness
from harness.core.artifacts import ArtifactStore
from harness.core.encoding.backbone import resolve_backbone
from harness.core.encoding.forward import KERNEL_CACHE_CAPACITY, bound_kernel_cache, plan_batches
from harness.core.encoding.pooling import View
from harness.core.encoding.provider import ViewProvider
from harness.core.encoding.settings import EncodeSettings
from harness.core.encoding.windows import WindowTask, make_windows, run_window_task
from harness.runner.settings.config import BenchConfig


def corpus(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return list(dict.fromkeys(" ".join(rng.choice(WORDS, size=int(rng.integers(3, 12)))) + f" {i}"
                              for i in range(n)))


def test_dry_run_prints_the_plan_and_computes_nothing(bench, senteval_root, tiny_bert, tmp_path):
    code, out, err = bench("--methods", "avg", "whitening", "flow", "--tasks", "sts12", "stsb", "--source",
                           "senteval", "--senteval-dir", str(senteval_root), "--backbone", str(tiny_bert),
                           "--dry-run")
    assert code == 0, err
    assert "plan (dry run): 3 method(s) × 2 task(s)" in out and "encode jobs" in out and "score jobs: 6" in out
    assert "mean@1 0/" in out and "to encode:" in out and "flow × STS12 on target" in out and "to train" in out
    assert not (tmp_path / "out").exists() and not list((tmp_path / "cache").glob("vectors/*/part-*"))


def test_the_kernel_cache_is_capped_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    bound_kernel_cache()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == KERNEL_CACHE_CAPACITY
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "7")
    bound_kernel_cache()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "7"


def test_token_budget_batches():
    assert plan_batches([5, 3, 3, 2], 0, 8) == [[0], [1, 2], [3]]
    assert plan_batches([1, 9, 4, 9], 2, 0) == [[1, 3], [2], [0]]  # one token length per batch
    lengths = list(np.random.default_rng(0).integers(1, 60, 500))
    batches = plan_batches(lengths, 0, 512)
    assert sorted(i for b in batches for i in b) == list(range(500))
    assert all(len({lengths[i] for i in b}) == 1 and len(b) * lengths[b[0]] <= max(512, lengths[b[0]])
               for b in batches)



@pytest.mark.parametrize("batch_size", [0, 7])
def test_packed_batches_mix_lengths_longest_first_within_the_budget(batch_size):
    """The native encoder's batches: every index once, lengths non-increasing through the batches,
    each within the budget (or one item alone), and fewer batches than one length per batch."""
    lengths = [int(n) for n in np.random.default_rng(1).integers(1, 60, 500)]
    batches = plan_batches(lengths, batch_size, 512, packs_rows=True)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(500))
    assert [lengths[i] for i in flat] == sorted(lengths, reverse=True)
    if batch_size:
        assert all(len(b) == batch_size for b in batches[:-1])
    else:
        assert all(sum(lengths[i] for i in b) <= 512 or len(b) == 1 for b in batches)
        assert all(sum(lengths[i] for i in [*b, nxt[0]]) > 512 for b, nxt in itertools.pairwise(batches))
    assert len(batches) < len(plan_batches(lengths, batch_size, 512))


def test_tiny_batches_are_topped_up_to_the_minimum_of_tokens():
    from harness.core.encoding.batching import MIN_BATCH_TOKENS, topped_up

    lengths = [9, 5, 3]
    rows = topped_up([0, 1, 2], lengths)
    assert rows[:3] == [0, 1, 2] and sum(lengths[i] for i in rows) >= MIN_BATCH_TOKENS
    assert sum(lengths[i] for i in rows[:-1]) < MIN_BATCH_TOKENS  # no more rows than needed
    assert topped_up([0], [70]) == [0]


def test_auto_batch_size_gives_the_same_scores(bench, senteval_root, tiny_bert, tmp_path):
    runs = []
    for batch in ("3", "auto"):
        code, _, err = bench("--methods", "avg", "--tasks", "sts13", "--source", "senteval", "--senteval-dir",
                             str(senteval_root), "--backbone", str(tiny_bert), "--batch-size", batch,
                             "--max-tokens", "64", "--cache-dir", str(tmp_path / f"c{batch}"))
        assert code == 0, err
        runs.append(json.loads(next((tmp_path / "out" / "runs").glob("avg__*.json")).read_text()))
    assert runs[0]["scores"]["spearman"] == pytest.approx(runs[1]["scores"]["spearman"], abs=1e-4)


def test_out_of_memory_halves_the_batch_and_retries(tiny_bert, tmp_path, monkeypatch, caplog):
    import torch

    from harness.core.encoding.engines import NativeEngine

    sentences = corpus(40)
    reference = ViewProvider(resolve_backbone(str(tiny_bert)), EncodeSettings(batch_size=16, progress=False),
                             tmp_path / "a").get(sentences, View("mean", 2))
    original = NativeEngine.forward

    def small_gpu(self, batch, **options):  # more than 4 distinct sentences do not fit (repeats topping a batch up do)
        if len({tuple(row) for row in batch["input_ids"].tolist()}) > 4:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return original(self, batch, **options)

    monkeypatch.setattr(NativeEngine, "forward", small_gpu)
    provider = ViewProvider(resolve_backbone(str(tiny_bert)), EncodeSettings(batch_size=16, progress=False),
                            tmp_path / "b")
    got = provider.get(sentences, View("mean", 2))
    np.testing.assert_allclose(got, reference, atol=1e-6)
    assert "retrying it in halves" in caplog.text and 0 < provider.forward._cap <= 4


def test_worker_processes_write_the_same_vectors_as_this_process(tiny_bert, tmp_path):
    """The per-device path (one loky worker per device), run on two 'cpu' devices."""
    from harness.runner.execution.backends import Backend

    ref = resolve_backbone(str(tiny_bert))
    settings = EncodeSettings(device="cpu", window=16, threads=1, progress=False)
    sentences = corpus(100)
    local = ViewProvider(ref, settings, tmp_path / "local")
    local.ensure(sentences, [View("mean", 2), View("cls", 2)])
    backend = Backend("local", "cpu", None)
    backend.devices = ["cpu", "cpu"]
    remote = ViewProvider(ref, settings, tmp_path / "workers")
    remote.executor = backend.executor()
    remote.ensure(sentences, [View("mean", 2), View("cls", 2)])
    assert remote.forwarded == len(sentences) and remote._forward is None  # all in the workers
    for view in (View("mean", 2), View("cls", 2)):
        assert remote.get(sentences, view).tobytes() == local.get(sentences, view).tobytes()


def test_windows_are_deterministic_whatever_is_cached(tiny_bert, tmp_path):
    ref = resolve_backbone(str(tiny_bert))
    settings = EncodeSettings(window=10, threads=1, progress=False)
    sentences = corpus(35)
    assert [len(w) for w in make_windows(sentences, 10)] == [10, 10, 10, 5]
    whole = ViewProvider(ref, settings, tmp_path / "whole")
    whole.ensure(sentences, [View("mean", 2)])
    piecewise = tmp_path / "piecewise"
    windows = make_windows(sentences, 10)
    run_window_task(WindowTask(ref, settings, (View("mean", 2),), (tuple(windows[2]),),
                               ArtifactStore(piecewise)))
    resumed = ViewProvider(ref, settings, piecewise)
    resumed.ensure(sentences, [View("mean", 2)])
    assert resumed.forwarded == 25  # the stored window is skipped
    assert resumed.get(sentences, View("mean", 2)).tobytes() == whole.get(sentences, View("mean", 2)).tobytes()


def run_cfg(root, model, tmp_path, name, **extra):
    return BenchConfig(methods=("avg", "first-last", "whitening"), tasks=("sts12", "sts14", "stsb"),
                       backbone=str(model), source="senteval", senteval_dir=str(root), fit_set="test",
                       cache_dir=str(tmp_path / f"cache-{name}"), output_dir=str(tmp_path / f"out-{name}"),
                       progress=False, plots=False, bootstrap=100, threads=1, **extra)


def scores_of(outcome) -> list:
    return [(r["method"]["label"], r["task"]["name"], r["scores"]) for r in outcome.records]


@pytest.mark.slow
@pytest.mark.cluster
def test_dask_local_cluster_results_are_byte_equal_to_the_local_backend(senteval_root, tiny_bert, tmp_path):
    pytest.importorskip("dask.distributed")
    from dask.distributed import LocalCluster

    local = harness.run(run_cfg(senteval_root, tiny_bert, tmp_path, "local"))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        cfg = run_cfg(senteval_root, tiny_bert, tmp_path, "dask", backend="dask",
                      scheduler_address=cluster.scheduler_address)
        distributed = harness.run(cfg)
    assert distributed.sentences_forwarded == local.sentences_forwarded > 0
    assert json.dumps(scores_of(distributed)) == json.dumps(scores_of(local))
    view_files = sorted(p.name for p in (tmp_path / "cache-local").glob("vectors/*/part-*.npy"))
    assert view_files == sorted(p.name for p in (tmp_path / "cache-dask").glob("vectors/*/part-*.npy"))


@pytest.mark.slow
@pytest.mark.cluster
def test_ray_local_results_are_byte_equal_to_the_local_backend(senteval_root, tiny_bert, tmp_path):
    """--backend ray with no address starts a local ray for the run, and stops it at the end."""
    ray = pytest.importorskip("ray")

    local = harness.run(run_cfg(senteval_root, tiny_bert, tmp_path, "local"))
    distributed = harness.run(run_cfg(senteval_root, tiny_bert, tmp_path, "ray", backend="ray"))
    assert not ray.is_initialized()
    assert distributed.sentences_forwarded == local.sentences_forwarded > 0
    assert json.dumps(scores_of(distributed)) == json.dumps(scores_of(local))
    view_files = sorted(p.name for p in (tmp_path / "cache-local").glob("vectors/*/part-*.npy"))
    assert view_files == sorted(p.name for p in (tmp_path / "cache-ray").glob("vectors/*/part-*.npy"))
    assert distributed.records[0]["env"]["devices"] == ["ray workers (auto)"]


def test_start_ray_sizes_a_local_ray_and_words_a_failure_as_one_line(monkeypatch):
    """What ``--backend ray`` asks of ray, without starting one (the cluster test above does): a local
    ray gets a slot per core this process may use, no dashboard and a 256 MiB object store; an
    address is joined as given; a failure to start or reach one is one UserError naming where."""
    import types

    from harness.core.errors import UserError
    from harness.core.machine import available_cpus
    from harness.runner.execution.ray_local import start_ray

    calls, failure = [], []

    def init(**kwargs):
        calls.append(kwargs)
        if failure:
            raise failure[0]

    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(init=init))
    assert start_ray(None) is True
    assert calls[-1]["num_cpus"] == available_cpus() and calls[-1]["include_dashboard"] is False
    assert calls[-1]["object_store_memory"] == 256 * 1024 * 1024
    assert start_ray("10.0.0.1:6379") is False and calls[-1]["address"] == "10.0.0.1:6379"
    failure.append(ConnectionError("could not connect to 10.0.0.1:6379\nsecond line"))
    with pytest.raises(UserError, match=r"reach --scheduler-address 10\.0\.0\.1:6379 \(could not connect to \S+\);"):
        start_ray("10.0.0.1:6379")
    failure[0] = RuntimeError("")
    with pytest.raises(UserError, match=r"cannot start or reach a local ray \(RuntimeError\); start a cluster"):
        start_ray(None)


def test_dask_without_an_address_is_one_clear_line(bench):
    code, _, err = bench("--methods", "random", "avg", "--backend", "dask")
    assert code == 2 and "--backend dask needs --scheduler-address" in err


def cli(args: list[str], **kw) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen([sys.executable, str(ROOT / "run_bench.py"), *args, "--no-progress"], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def corpus_args(tmp_path: Path, senteval_root: Path, model: Path, cache: Path, out: Path) -> list[str]:
    """whitening fit on a 3,000-sentence corpus: enough windows to kill a run between them."""
    corpus_file = tmp_path / "corpus.txt"
    if not corpus_file.exists():
        corpus_file.write_text("\n".join(corpus(3000, seed=5)) + "\n")
    return ["--methods", "whitening", "--tasks", "stsb", "--source", "senteval", "--senteval-dir", str(senteval_root),
            "--fit-set", f"corpus:{corpus_file}", "--backbone", str(model), "--cache-dir", str(cache),
            "--output-dir", str(out), "--threads", "1", "--batch-size", "8", "--bootstrap", "0", "--no-plots"]


@pytest.mark.slow
def test_sigkill_mid_encode_resumes_to_the_same_vectors(senteval_root, tiny_bert, tmp_path):
    args = corpus_args(tmp_path, senteval_root, tiny_bert, tmp_path / "killed", tmp_path / "o1")
    victim = cli(args)
    parts = tmp_path / "killed" / "vectors"
    deadline = time.time() + 120
    while time.time() < deadline and len(list(parts.glob("*/part-*.npy"))) < 2:
        time.sleep(0.05)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    assert victim.returncode == -signal.SIGKILL
    done_before = len(list(parts.glob("*/part-*.npy")))
    resumed = cli(args)
    _out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    straight = cli(corpus_args(tmp_path, senteval_root, tiny_bert, tmp_path / "straight", tmp_path / "o2"))
    straight.communicate(timeout=300)
    assert straight.returncode == 0 and done_before >= 2
    ref = resolve_backbone(str(tiny_bert))
    texts = corpus(3000, seed=5)
    settings = EncodeSettings(max_length=ref.max_positions)  # the run capped --max-length at the model's 64
    vectors = [ViewProvider(ref, settings, tmp_path / name).store(View("mean", 1)) for name in
               ("killed", "straight")]
    assert vectors[0].get(texts).tobytes() == vectors[1].get(texts).tobytes()


@pytest.mark.slow
def test_two_runs_sharing_one_cache_at_once_never_corrupt_it(senteval_root, tiny_bert, tmp_path):
    shared = tmp_path / "shared"
    runs = [cli(corpus_args(tmp_path, senteval_root, tiny_bert, shared, tmp_path / f"out{i}")) for i in range(2)]
    results = [run.communicate(timeout=300) for run in runs]
    for run, (_, err) in zip(runs, results):
        assert run.returncode == 0, err
        assert "corrupt" not in err and "does not match" not in err
    scores = [json.loads(next((tmp_path / f"out{i}" / "runs").glob("*.json")).read_text())["scores"] for i in range(2)]
    assert scores[0] == scores[1]
    check = cli(corpus_args(tmp_path, senteval_root, tiny_bert, shared, tmp_path / "out3"))
    _, err = check.communicate(timeout=300)
    assert check.returncode == 0 and "corrupt" not in err and "passes 0 sentence(s) encoded" in err


def test_an_own_model_method_encodes_only_its_own_sentences(bench, senteval_root, tiny_st, tmp_path):
    """sbert through sentence-transformers needs the eval sentences only, even next to a method (simcse-train)
    that trains on a corpus."""
    corpus_file = tmp_path / "corpus.txt"
    corpus_file.write_text("\n".join(corpus(50, seed=3)) + "\n")
    common = ("--tasks", "stsb", "--source", "senteval", "--senteval-dir", str(senteval_root), "--backbone",
              str(tiny_st), "--sbert-model", "auto", "--set", "sbert.pipeline=sentence-transformers",
              "--fit-set", f"corpus:{corpus_file}", "--dry-run")
    counts = []
    for methods in (["sbert"], ["sbert", "simcse-train"]):
        code, out, err = bench("--methods", *methods, *common)
        assert code == 0, err
        line = next(line for line in out.splitlines() if "sbert" in line and "(own model)" in line)
        counts.append(int(line.split("cached, ")[1].split(" to encode")[0]))
    assert counts[0] == counts[1] > 0
