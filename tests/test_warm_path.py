"""What a warm re-run reuses instead of recomputing: bootstrap resamples and the whitening fit,
both memoised in the cache by the content of their inputs."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import FakeContext
from test_methods_direct import SENTENCES, TRAIN

from harness.core import bootstrap
from harness.core.api import SpecRequest
from harness.core.data.fitsets import make_fit_set
from methods import get_method


def test_resampled_scores_are_memoised_in_memory_and_on_disk(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    gold = rng.normal(size=60)
    cos = gold + rng.normal(size=60)
    labels = ["a"] * 30 + ["b"] * 30
    memo = bootstrap.ResampleMemo(tmp_path, secret=b"k")  # a memo on disk is read only under a secret
    first = bootstrap.resampled_scores(cos, gold, labels, "wmean", 200, 1, memo)
    assert len(list(tmp_path.glob("*.npy"))) == 1 and len(memo.entries) == 1
    memo = bootstrap.ResampleMemo(tmp_path, secret=b"k")  # a new process: only the disk remains

    def recompute(*args):
        raise AssertionError("recomputed although the inputs were memoised")

    monkeypatch.setattr(bootstrap, "_resampled_scores", recompute)
    np.testing.assert_array_equal(bootstrap.resampled_scores(cos, gold, labels, "wmean", 200, 1, memo), first)
    with pytest.raises(AssertionError):  # any input changed: a different memo entry
        bootstrap.resampled_scores(cos, gold, labels, "mean", 200, 1, memo)
    monkeypatch.undo()  # a damaged memo file is checked, removed and computed again, never read
    (path,) = tmp_path.glob("*.npy")
    path.write_bytes(path.read_bytes()[:-8] + np.float64(1e9).tobytes())
    memo = bootstrap.ResampleMemo(tmp_path, secret=b"k")
    np.testing.assert_array_equal(bootstrap.resampled_scores(cos, gold, labels, "wmean", 200, 1, memo), first)
    assert [p.name for p in tmp_path.glob("*.npy")] == [path.name]  # rewritten whole, same content


def test_whitening_fit_is_read_back_from_the_cache(tiny_bert, tmp_path, monkeypatch):
    import methods.whitening as whitening

    fit_set = make_fit_set("test", SENTENCES, "fixture")

    def build():
        request = SpecRequest(backbone=str(tiny_bert), max_length=32, params={"whitening": {"k": 8}})
        ctx = FakeContext(tmp_path / "cache", request, splits={("stsb", "train"): TRAIN})
        return get_method("whitening").build(request, ctx)

    first = build()
    first.fit(fit_set)
    expected = first.encode(SENTENCES)
    monkeypatch.setattr(whitening, "whitening_transform", lambda *a: (_ for _ in ()).throw(AssertionError))
    again = build()
    again.fit(fit_set)
    np.testing.assert_array_equal(again.encode(SENTENCES), expected)
    assert again.fit_info["rank"] == first.fit_info["rank"]


@pytest.mark.heavy  # two CLI runs in subprocesses
def test_a_warm_rerun_copies_its_reports_without_importing_torch(tiny_bert, tmp_path):
    """Same records → the same leaderboard files, copied from the cache in a fresh process that
    imports neither torch, pandas nor scipy.stats (the report page, rebuilt every run, is pure
    Python); a changed record (another seed) rebuilds them."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    code = ("import json, sys, harness; "
            "cfg = harness.BenchConfig(methods=('cls', 'avg', 'whitening'), backbone=sys.argv[1], fit_set='test', "
            "cache_dir=sys.argv[2], output_dir=sys.argv[3], progress=False, plots=False, seed=int(sys.argv[4])); "
            "out = harness.run(cfg); "
            "print(json.dumps({'forwarded': out.sentences_forwarded, 'table': out.table, "
            "'imported': sorted(m for m in ('pandas', 'torch', 'scipy.stats') if m in sys.modules)}))")

    def run(out: str, seed: int = 1234) -> dict:
        done = subprocess.run([sys.executable, "-c", code, str(tiny_bert), str(tmp_path / "cache"),
                               str(tmp_path / out), str(seed)], cwd=root, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    cold, warm = run("cold"), run("warm")
    assert cold["imported"] == ["torch"] and warm["imported"] == []  # pandas only reads a --baseline
    assert warm["forwarded"] == 0 and warm["table"] == cold["table"]
    for name in ("leaderboard.csv", "leaderboard.md", "scores.csv", "significance.csv"):
        assert (tmp_path / "warm" / name).read_bytes() == (tmp_path / "cold" / name).read_bytes()
    # The page differs only in its build time and in each row's record (run time, devices, timings),
    # shown on hover and under "settings".
    def page(out: str) -> str:
        import re

        text = (tmp_path / out / "index.html").read_text(encoding="utf-8")
        text = re.sub(r"<details><summary>settings</summary>.*?</details>", "", text, flags=re.S)
        return re.sub(r"Built [^<]*? from|title='[^']*'", "", text)
    assert page("warm") == page("cold") and "paired tests" in page("warm")
    run("reseeded", seed=7)  # other bootstrap draws: intervals change, reports are rebuilt
    assert (tmp_path / "reseeded" / "scores.csv").read_bytes() != (tmp_path / "cold" / "scores.csv").read_bytes()


def test_reports_do_not_depend_on_when_records_were_written():
    """A cold run whose records straddle a second boundary and a warm one written within one second
    must key (and build) the same reports: the digest and the tables ignore write order and times."""
    import copy

    from harness.runner.tables.frames import long_rows
    from harness.runner.tables.frames import records_digest as _records_digest

    def rec(method: str, created: str) -> dict:
        return {"method": {"label": method, "kind": "embedding", "spec": {"backbone": "m"}}, "fit": None,
                "protocol": {"aggregation": "all", "source": "packaged", "dtype": "fp32", "max_length": 128,
                             "first_last_layers": [1, -1]},
                "task": {"title": "STS-B", "n_pairs": 3}, "created": created,
                "scores": {"spearman": float(len(method)), "pearson": 1.0, "spearman_ci95": None}}

    cold = [rec("cls", "2026-01-01T00:00:59"), rec("avg", "2026-01-01T00:01:00"),
            rec("whitening", "2026-01-01T00:01:00")]
    warm = [copy.deepcopy(r) | {"created": "2026-01-01T00:05:00"} for r in (cold[1], cold[0], cold[2])]
    assert _records_digest(cold) == _records_digest(warm)
    assert [r["method"] for r in long_rows(cold)[0]] == [r["method"] for r in long_rows(warm)[0]]
    changed = copy.deepcopy(warm)
    changed[0]["scores"]["spearman"] += 1e-9
    assert _records_digest(changed) != _records_digest(warm)
