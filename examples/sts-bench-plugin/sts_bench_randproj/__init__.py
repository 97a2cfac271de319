"""``randproj``: the mean-pooled layer (``avg``) times a fixed Gaussian matrix, d → ``dim``.

A Johnson-Lindenstrauss projection keeps cosines close in expectation: with ``R`` of shape
(d, dim) and entries drawn from N(0, 1/dim), ``E[(xR)·(yR)] = x·y``, so Spearman's rho on STS
moves by little at dim 128 and drifts as dim shrinks. The matrix is drawn from the run's
``--seed``, so a run is reproducible and the seed is part of the record.

Worked example: d = 2, dim = 1, R = [[a], [b]] → x = (1, 0) ↦ a and y = (0, 1) ↦ b; with a, b
independent N(0, 1), E[ab] = 0 = x·y.

Everything it uses comes from :mod:`harness.method_api` (sts-bench's public method API).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from harness.method_api import (
    EmbeddingMethod,
    MethodContext,
    MethodSpec,
    Option,
    SpecRequest,
    UserError,
    View,
)


class RandomProjection(EmbeddingMethod):
    name = "randproj"
    summary = (
        "avg (masked mean of a layer) times a seeded Gaussian d x dim matrix "
        "(Johnson-Lindenstrauss)"
    )
    options = (
        Option("dim", 128, "output dimension", type=int),
        Option(
            "layer", -1, "hidden_states index to mean-pool (0 = embeddings, -1 = last)", type=int
        ),
    )

    @classmethod
    def make_spec(cls, request: SpecRequest, ctx: MethodContext) -> MethodSpec:
        spec = super().make_spec(request, ctx)
        if spec.params["dim"] < 1:
            raise UserError(
                f"--set randproj.dim={spec.params['dim']}: the output dimension must be at least 1"
            )
        return replace(spec, pooling="mean", layers=(spec.params["layer"],))

    def backbone_views(self) -> list[View]:
        ref = self.ctx.backbone(self.spec.backbone, self.spec.revision)
        return [View("mean", ref.layer_index(self.spec.layers[0]))]

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        (view,) = self.backbone_views()
        x = self.ctx.views(self.spec).get(sentences, view)
        return (x @ self.matrix(x.shape[1])).astype(np.float32)

    def matrix(self, d: int) -> np.ndarray:
        """The (d, dim) projection: N(0, 1/dim) entries from the run's seed."""
        dim = int(self.spec.params["dim"])
        return np.random.default_rng(self.ctx.seed).standard_normal((d, dim)) / np.sqrt(dim)
