from __future__ import annotations

import json

import numpy as np
import pytest

from harness.runner.studies.diagnostics import anisotropy


def test_isotropic_vectors_look_isotropic():
    x = np.random.default_rng(0).normal(size=(4000, 16))
    d = anisotropy(x)
    assert abs(d["mean_cos_random_pairs"]) < 0.02
    assert d["effective_rank"] > 15.5 and d["eigenvalue_ratio"] < 1.5
    assert sum(d["cosine_histogram"]["counts"]) == 20000


def test_a_narrow_cone_is_detected():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2000, 16)) @ np.diag(np.logspace(0, 2, 16)) * 0.01 + 1.0
    d = anisotropy(x)
    assert d["mean_cos_random_pairs"] > 0.8 and d["mean_cos_to_centroid"] > 0.9
    assert d["eigenvalue_ratio"] > 1000 and d["effective_rank"] < 8


def test_worked_example_of_the_docstring():
    d = anisotropy(np.array([[1.0, 0.0], [0.0, 1.0]]))
    assert d["effective_rank"] == pytest.approx(1.0)
    assert d["mean_cos_random_pairs"] == pytest.approx(0.0)


def test_cli_writes_diagnostics_table_plot_and_json(bench, senteval_root, tiny_bert, tmp_path):
    code, _, err = bench("--methods", "avg", "whitening", "--tasks", "sts12", "--source", "senteval",
                         "--senteval-dir", str(senteval_root), "--backbone", str(tiny_bert), "--diagnostics")
    assert code == 0, err
    table = (tmp_path / "out" / "diagnostics.md").read_text()
    assert "## STS12" in table and "| whitening" in table
    assert (tmp_path / "out" / "plots" / "diagnostics-sts12.png").stat().st_size > 1000
    record = json.loads(next((tmp_path / "out" / "runs").glob("whitening__*.json")).read_text())
    # LayerNorm outputs lie on a hyperplane, so whitening keeps rank = 31 of the 32 dimensions
    assert record["diagnostics"]["n_sentences"] == 60 and record["fit"]["dims_kept"] == 31
    assert len(record["diagnostics"]["singular_values"]) == 31
    # whitening is fitted on these very sentences (target = the test split here): isotropic
    assert record["diagnostics"]["effective_rank"] > 30
