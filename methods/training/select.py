"""Scoring the weights being trained on a dev split (for
:class:`methods.training.loop.DevSelection`).

SimCSE evaluates on STS-B dev every 125 steps and keeps the best checkpoint; DSE keeps the best dev
checkpoint too. The dev split is never the scored one: callers pass STS-B dev, and the method says
so in its record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F


def dev_spearman(
    embed: Callable[[list[str]], torch.Tensor],
    s1: Sequence[str],
    s2: Sequence[str],
    gold: Sequence[float],
    similarity: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
    batch: int = 128,
) -> float:
    """Spearman ×100 of ``similarity(embed(s1), embed(s2))`` (cosine by default) against ``gold``.
    ``embed`` runs in batches of distinct sentences; call it under ``torch.no_grad``."""
    from harness.core.scoring import spearman

    texts = list(dict.fromkeys([*s1, *s2]))
    vectors = torch.cat([embed(texts[i : i + batch]).float() for i in range(0, len(texts), batch)])
    row = {text: i for i, text in enumerate(texts)}
    a = vectors[[row[t] for t in s1]]
    b = vectors[[row[t] for t in s2]]
    scores = similarity(a, b) if similarity is not None else F.cosine_similarity(a, b, dim=-1)
    return 100 * spearman(scores.cpu().numpy(), gold)
