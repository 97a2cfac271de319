"""``--dtype fastest`` (issue 44): the fastest dtype this machine computes natively, resolved once
per run from the CPU probe (oneDNN's own bf16 test) or the GPU's compute capability, recorded as
the concrete dtype it picked and that it was picked, and refused where this machine cannot know
(workers elsewhere). The probe is monkeypatched, so each CPU kind is tested on any CPU: an AMX or
AVX512-BF16 CPU (oneDNN says bf16 is supported) gets bf16, an AVX2-only one fp32."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import harness.core.machine as machine
from harness.core.errors import UserError


def cpu_kind(monkeypatch, bf16: bool) -> list[str]:
    """Make this CPU look like one with (``bf16``) or without bf16 instructions to oneDNN's probe;
    the tests the harness asked are kept, to show the real probe was consulted."""
    asked: list[str] = []

    def supports(namespace, test, logger=None) -> bool:
        asked.append(test)
        return bf16 if test == "_is_mkldnn_bf16_supported" else False

    monkeypatch.setattr(machine, "mkldnn_supports", supports)
    return asked


@pytest.mark.parametrize(("bf16", "expected"), [(True, "bf16"), (False, "fp32")])
def test_fastest_on_a_cpu_is_bf16_where_onednn_computes_it_else_fp32(monkeypatch, bf16, expected):
    asked = cpu_kind(monkeypatch, bf16)
    assert machine.fastest_dtype("cpu") == (expected, "fastest on this CPU")
    assert asked == ["_is_mkldnn_bf16_supported"]  # oneDNN's own bf16 test, not a flag list
    assert machine.fastest_cpu_dtype() == expected


def test_fastest_on_auto_without_a_gpu_is_the_cpus(monkeypatch):
    import torch

    cpu_kind(monkeypatch, False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert machine.fastest_dtype("auto") == ("fp32", "fastest on this CPU")


@pytest.mark.parametrize(
    ("capabilities", "expected"),
    [
        ([(9, 0)], "bf16"),  # Hopper
        ([(8, 0)], "bf16"),  # Ampere: bf16 tensor cores
        ([(7, 5)], "fp16"),  # Turing: fp16 tensor cores, no bf16
        ([(6, 1)], "fp32"),  # Pascal: no tensor cores
        ([(8, 6), (7, 0)], "fp16"),  # two GPUs: the dtype both run fast
    ],
)
def test_fastest_on_gpus_follows_their_compute_capability(monkeypatch, capabilities, expected):
    import torch

    monkeypatch.setattr(machine, "resolve_device", lambda device: device)
    by_index = dict(enumerate(capabilities))
    monkeypatch.setattr(
        torch.cuda, "get_device_capability", lambda device: by_index[device.index or 0]
    )
    requested = "cuda:" + ",".join(str(i) for i in range(len(capabilities)))
    dtype, why = machine.fastest_dtype(requested)
    assert dtype == expected
    assert why.startswith("fastest on this GPU" if len(capabilities) == 1 else "fastest on these")
    assert all(f"{major}.{minor}" in why for major, minor in capabilities)


def test_fastest_is_refused_with_workers_elsewhere(monkeypatch):
    from harness.runner.execution.preflight import applied_dtype
    from harness.runner.settings.config import BenchConfig

    cpu_kind(monkeypatch, True)
    cfg = BenchConfig(dtype="fastest", backend="dask", scheduler_address="tcp://10.0.0.9:8786")
    with pytest.raises(UserError, match=r"--dtype fastest: .*tcp://10\.0\.0\.9:8786.*give their"):
        applied_dtype(cfg)
    # a local cluster runs on this machine: resolved here
    local = applied_dtype(BenchConfig(dtype="fastest", backend="dask"))
    assert (local.dtype, local.dtype_picked) == ("bf16", "fastest on this CPU")
    # any other dtype is left as given, and says nothing was picked
    assert applied_dtype(BenchConfig(dtype="bf16")) == BenchConfig(dtype="bf16")


def test_the_cli_takes_fastest_and_refuses_a_misspelling(bench):
    code, _, err = bench("--methods", "avg", "--dtype", "fast", "--dry-run")
    assert code != 0 and "fastest" in err and "Traceback" not in err


def records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]


@pytest.mark.parametrize(("bf16", "expected"), [(False, "fp32"), (True, "bf16")])
def test_a_fastest_run_records_the_dtype_it_picked_and_caches_as_that_dtype(
    bench, monkeypatch, senteval_root, tiny_bert, tmp_path, bf16, expected
):
    """The record holds the concrete dtype (protocol, so tables group it with an explicit run of
    it) and ``env.dtype_picked``; the vectors are cached under the concrete dtype, so a run that
    names it explicitly reads every vector back and scores exactly the same."""
    cpu_kind(monkeypatch, bf16)
    data = ["--tasks", "stsb", "--source", "senteval", "--senteval-dir", str(senteval_root)]
    data += ["--backbone", str(tiny_bert), "--bootstrap", "50", "--no-plots"]
    fastest, explicit = tmp_path / "fastest", tmp_path / "explicit"
    code, _, err = bench("--methods", "avg", "--dtype", "fastest", *data, "--output-dir", str(fastest))
    assert code == 0, err
    assert f"--dtype fastest: {expected} (fastest on this CPU" in err
    (picked,) = records(fastest)
    assert picked["protocol"]["dtype"] == expected and picked["env"]["dtype"] == expected
    assert picked["env"]["dtype_picked"] == "fastest on this CPU"
    code, _, err = bench("--methods", "avg", "--dtype", expected, *data, "--output-dir", str(explicit))
    assert code == 0, err
    assert "backbone passes 0 sentence(s) encoded" in err  # the cache key is the concrete dtype
    (given,) = records(explicit)
    assert "dtype_picked" not in given["env"]
    assert given["pairs"]["similarity"] == picked["pairs"]["similarity"]
    assert given["scores"]["spearman"] == picked["scores"]["spearman"]


def test_mteb_model_resolves_fastest_as_a_run_does(monkeypatch, tmp_path):
    from harness.runner.mteb.model import _config

    cpu_kind(monkeypatch, False)
    cfg = _config("avg", "minilm", "target", {"dtype": "fastest", "cache_dir": str(tmp_path)}, {})
    assert (cfg.dtype, cfg.dtype_picked) == ("fp32", "fastest on this CPU")
    assert cfg.protocol()["dtype"] == "fp32"
    with pytest.raises(UserError, match="unknown setting 'dtype_picked'"):
        _config("avg", "minilm", "target", {"dtype_picked": "mine"}, {})
