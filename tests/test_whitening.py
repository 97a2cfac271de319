from __future__ import annotations

import numpy as np
import pytest

from methods.whitening import whitening_transform


def anisotropic(n: int = 2000, d: int = 16, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mixing = rng.normal(size=(d, d)) @ np.diag(np.logspace(0, 2, d))
    return rng.normal(size=(n, d)) @ mixing.T + 5.0


def test_whitened_vectors_have_zero_mean_and_identity_covariance():
    x = anisotropic()
    mu, w, rank = whitening_transform(x)
    y = (x - mu) @ w
    assert rank == 16
    np.testing.assert_allclose(y.mean(axis=0), 0, atol=1e-3)
    np.testing.assert_allclose(np.cov(y.T), np.eye(16), atol=1e-3)


def test_worked_example_of_the_docstring_scales_each_column_by_its_std():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200000, 2)) * np.array([2.0, 1.0])
    _, w, _ = whitening_transform(x)
    np.testing.assert_allclose(np.abs(w), np.diag([0.5, 1.0]), atol=0.01)


def test_top_k_keeps_the_largest_variance_directions():
    x = anisotropic()
    mu, w, _ = whitening_transform(x, k=4)
    y = (x - mu) @ w
    assert y.shape == (2000, 4)
    np.testing.assert_allclose(np.cov(y.T), np.eye(4), atol=1e-3)


def test_fewer_sentences_than_dimensions_keeps_only_the_rank(caplog):
    x = anisotropic(n=5, d=16)
    mu, w, rank = whitening_transform(x)
    assert rank == 4  # 5 centred points span 4 dimensions
    assert w.shape == (16, 4)
    assert np.isfinite((x - mu) @ w).all()
    assert "rank 4 of 16" in caplog.text


def test_identical_vectors_cannot_be_whitened():
    from harness.core.errors import UserError

    with pytest.raises(UserError, match="identical"):  # a user's fit set, not a bug: exit 2
        whitening_transform(np.ones((10, 4)))


def test_whitening_and_diagnostics_never_call_the_svd(monkeypatch):
    """LAPACK's SVD of a finite rank-deficient covariance failed to converge on one machine (numpy
    2.4.6, OpenBLAS 0.3.31, Zen 5); the symmetric eigensolver is used instead."""
    from harness.runner.studies.diagnostics import anisotropy

    def no_svd(*args, **kwargs):
        raise np.linalg.LinAlgError("SVD did not converge")

    monkeypatch.setattr(np.linalg, "svd", no_svd)
    x = np.random.default_rng(3).normal(size=(60, 80))  # rank 59 < 80 dimensions, as in the failing case
    mu, w, rank = whitening_transform(x)
    assert rank == 59
    np.testing.assert_allclose(np.cov(((x - mu) @ w).T), np.eye(rank), atol=1e-4)
    singular = np.linalg.eigvalsh((x - x.mean(0)).T @ (x - x.mean(0)))[::-1][:59] ** 0.5
    np.testing.assert_allclose(anisotropy(x)["singular_values"][:59], singular, rtol=1e-6)
