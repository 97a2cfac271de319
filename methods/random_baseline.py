"""A floor every real method must beat: deterministic random vectors, one per distinct text.

Each sentence's vector is drawn from a generator seeded with sha256(seed, text), so the same
sentence always gets the same vector, across runs and machines, and equal sentences score 1.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from harness.core.api import EmbeddingMethod, MethodContext, MethodSpec, Option, SpecRequest


class RandomBaseline(EmbeddingMethod):
    name = "random"
    summary = "hash-seeded random vectors: the floor (and a deterministic method for tests)"
    options = (Option("dim", 384, "vector dimension", type=int),)

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        dim = int(self.spec.params["dim"])
        out = np.empty((len(sentences), dim), dtype=np.float32)
        for i, text in enumerate(sentences):
            seed = hashlib.sha256(f"{self.ctx.seed}\0{text}".encode()).digest()[:8]
            out[i] = np.random.default_rng(int.from_bytes(seed, "little")).standard_normal(dim)
        return out

    @classmethod
    def make_spec(cls, request: SpecRequest, ctx: MethodContext) -> MethodSpec:
        """No backbone: the vectors depend on the text and the seed only."""
        return replace(
            super().make_spec(request, ctx),
            backbone="none",
            revision=None,
            pooling="none",
            layers=(),
        )
