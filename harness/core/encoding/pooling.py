"""The one pooling table: every way of turning a layer's token vectors into a sentence vector.

Inference (:mod:`harness.core.encoding.forward`) and every training loop (DSE's student, SimCSE)
pool through :data:`POOLINGS`, so a model is evaluated exactly as it was trained. Adding a pooling
is one entry here. The functions use tensor methods only: this module does not import torch.

A *view* is one pooling of one hidden layer: ``mean@12`` is the masked mean of ``hidden_states[12]``.
``pooler`` is BERT's pooler output (dense + tanh over [CLS]) and ignores the layer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import torch


def cls_token(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The vector at position 0 ([CLS]); SimCSE's ``cls_before_pooler``."""
    return hidden[:, 0]


def masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over non-padding positions, so a sentence's vector does not depend on its batch-mates'
    lengths. Worked example: tokens (1, 3) and (5, 7) with mask (1, 0) → 1 and 3, padding ignored."""
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)


def masked_mean_no_cls(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The masked mean without position 0 ([CLS]): DSE's pooling."""
    mask = mask.clone()
    mask[:, 0] = 0
    return masked_mean(hidden, mask)


POOLINGS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "cls": cls_token,
    "mean": masked_mean,
    "mean_nocls": masked_mean_no_cls,
}
POOLER = "pooler"  # BERT's pooler output: not a function of one layer, served by the engine


@dataclass(frozen=True, order=True)
class View:
    """``pooling`` of ``hidden_states[layer]`` (layer already made non-negative; see
    ``BackboneRef.layer_index``)."""

    pooling: str
    layer: int

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS and self.pooling != POOLER:
            raise ValueError(f"unknown pooling {self.pooling!r}; known: {', '.join([*POOLINGS, POOLER])}")

    def __str__(self) -> str:
        return f"{self.pooling}@{self.layer}"


def pool_layers(states: Sequence[torch.Tensor], mask: torch.Tensor, pooling: str,
                layers: Sequence[int]) -> torch.Tensor:
    """``pooling`` of each of ``layers`` (hidden_states ids, negative from the end), concatenated:
    the tensor form of reading the views (pooling, layer) one by one and joining them."""
    import torch

    parts = [POOLINGS[pooling](states[layer], mask) for layer in layers]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def pool_view(states: Sequence[torch.Tensor], pooled: torch.Tensor | None, mask: torch.Tensor,
              view: View) -> np.ndarray | None:
    """One view of a batch as float32 numpy (None for ``pooler`` when the engine has no trained pooler)."""
    if view.pooling == POOLER:
        return None if pooled is None else pooled.float().cpu().numpy()
    return POOLINGS[view.pooling](states[view.layer].float(), mask).cpu().numpy()
