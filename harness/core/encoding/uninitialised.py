"""``nn.Linear`` and ``nn.Embedding`` that skip their random initialisation, for modules whose
every weight is then loaded from a checkpoint (strictly: a weight the checkpoint lacks raises).

torch fills a new Linear with Kaiming-uniform numbers and an Embedding with normal ones, only for
the native loaders to overwrite them: 0.1 s of a cold MiniLM run, seconds for a large model. On
the meta device (the decoder loader builds there, then assigns the checkpoint's tensors) it is
worse: the first ``normal_`` of a meta Embedding imports torch's Python decompositions and sympy,
821 modules, 0.87 s. The classes are still ``nn.Linear`` / ``nn.Embedding`` (same parameters,
same state-dict keys, same forward), so everything that takes one takes these.

>>> import torch
>>> layer = Linear(2, 3)
>>> layer.load_state_dict({"weight": torch.ones(3, 2), "bias": torch.zeros(3)})
<All keys matched successfully>
>>> layer(torch.ones(1, 2)).tolist()
[[2.0, 2.0, 2.0]]
"""

from __future__ import annotations

from torch import nn


class Linear(nn.Linear):
    """An ``nn.Linear`` whose weight and bias are left as allocated (uninitialised memory)."""

    def reset_parameters(self) -> None:
        """Nothing: the checkpoint's weights are loaded next."""


class Embedding(nn.Embedding):
    """An ``nn.Embedding`` whose table is left as allocated (uninitialised memory)."""

    def reset_parameters(self) -> None:
        """Nothing: the checkpoint's table is loaded next."""
