"""What ``--cost`` compares: a pair scorer over all Q·C pairs against a sentence encoder over Q + C
sentences. A method that has such a pair declares it (``Method.cost_subjects``); the runner times
it.

FLOPs are estimated from the model shape: a BERT forward over a sequence of n tokens costs
≈ 2·P·n + 4·L·n²·H (P non-embedding parameters, L layers, H hidden size: the matrix products plus
attention's QKᵀ and AV). Worked example: MiniLM (L 6, H 384, intermediate 1536) has P = 6·(4·384² +
2·384·1536) ≈ 10.6 M, so a 14-token sentence costs ≈ 2·10.6e6·14 + 4·6·14²·384 ≈ 0.30 GFLOP.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ModelShape:
    layers: int
    hidden: int
    intermediate: int

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelShape:
        return cls(config["num_hidden_layers"], config["hidden_size"], config["intermediate_size"])

    def forward_flops(self, lengths: Sequence[int]) -> float:
        """≈ FLOPs of one forward pass over sequences of these token lengths."""
        params = self.layers * (4 * self.hidden**2 + 2 * self.hidden * self.intermediate)
        n = np.asarray(lengths, dtype=np.float64)
        return float((2 * params * n + 4 * self.layers * n**2 * self.hidden).sum())


@dataclass(frozen=True)
class CostSubjects:
    """The two sides of a cost comparison, as plain callables over fresh compute (no caches)."""

    title: str
    pair_score: Callable[[list[str], list[str]], np.ndarray]
    encode: Callable[[list[str]], np.ndarray]
    tokens: Callable[[list[str]], list[int]]
    cross_shape: ModelShape
    student_shape: ModelShape
    # How query and candidate vectors are compared: None = one cosine matrix product; a pair head
    # instead runs on all Q·C pairs, at this many FLOPs each.
    match: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
    match_flops_per_pair: float | None = None
