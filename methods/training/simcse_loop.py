"""Unsupervised SimCSE training (Gao et al. 2021), resumable (imported lazily: uses torch).

Each sentence goes through the encoder twice in one batch; dropout makes the two views differ.
With z = MLP(h_[CLS]) the loss of a batch of n sentences is

    ℓ = mean_i −log( exp(cos(z_i, z'_i)/τ) / Σ_j exp(cos(z_i, z'_j)/τ) )

i.e. cross-entropy over the n × n cosine matrix divided by τ, the diagonal being the right answer
(in-batch negatives). The MLP (dense + tanh) is used in training only; the saved checkpoint is the
encoder, read at test time through ``cls_before_pooler``. Optimiser as SimCSE's HF Trainer run:
AdamW (weight decay 0, ε 1e-8), linear decay to 0, no warm-up, gradient norm clipped at 1.0.

Training state is saved every ``save_every`` steps (:class:`methods.training.loop.TrainState`), so
an interrupted run resumes where it stopped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from harness.core.encoding import Checkpoint
from methods.training.loop import DevSelection, LoopResult, run_loop


def simcse_loss(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """Cross-entropy of the (n, n) cosine-similarity matrix / τ against the diagonal."""
    similarity = F.cosine_similarity(z1[:, None, :], z2[None, :, :], dim=-1) / temperature
    return F.cross_entropy(similarity, torch.arange(len(z1), device=z1.device))


@dataclass(frozen=True)
class SimCSEConfig:
    temperature: float = 0.05
    lr: float = 3e-5
    batch_size: int = 64
    max_length: int = 32
    epochs: float = 1.0
    precision: str = "auto"  # "auto" | "fp32" | "bf16"
    save_every: int = 50
    # > 0: score STS-B dev every this many steps and keep the best weights (SimCSE: 125)
    select_every: int = 0
    # truncation when scoring dev: the evaluation's, not training's max_length
    eval_max_length: int = 128
    # SimCSE's HF Trainer run: no warm-up, no weight decay (class constants, so they stay out of
    # the training identity, asdict())
    warmup: ClassVar[float] = 0.0
    weight_decay: ClassVar[float] = 0.0


class _Mlp(nn.Module):
    def __init__(self, hidden: int, std: float, generator: torch.Generator) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        with torch.no_grad():
            self.dense.weight.copy_(torch.randn(hidden, hidden, generator=generator) * std)
            self.dense.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(x))


class SimCSETrainer:
    """Trains ``base`` (a local model folder) on ``sentences``; state lives under ``workdir``."""

    def __init__(
        self,
        base: Path,
        workdir: Path,
        config: SimCSEConfig,
        seed: int,
        device: str = "cpu",
        progress: bool = True,
        on_step=None,
    ) -> None:
        self.base, self.workdir, self.config, self.seed = base, workdir, config, seed
        self.device, self.progress = device, progress
        self.on_step = on_step  # called with the steps done in this run (tests interrupt with it)

    def train(
        self,
        sentences: list[str],
        dev: tuple[Sequence[str], Sequence[str], Sequence[float]] | None = None,
        dev_name: str = "STS-B dev",
    ) -> LoopResult:
        """Run the recipe; the fine-tuned encoder (no MLP) is saved to ``workdir/model``. With
        ``config.select_every`` and ``dev`` pairs, the saved encoder is the best on ``dev``."""
        config = self.config
        torch.manual_seed(self.seed)
        checkpoint = Checkpoint.open(self.base)
        tokenizer, model = checkpoint.tokenizer, checkpoint.model.to(self.device)
        model.train()
        std = getattr(model.config, "initializer_range", 0.02)
        mlp = _Mlp(model.config.hidden_size, std, torch.Generator().manual_seed(self.seed)).to(
            self.device
        )

        def cls_vectors(texts: list[str], max_length: int) -> torch.Tensor:
            """[CLS] through the pooling table: what cls_before_pooler reads at evaluation."""
            inputs = tokenizer(
                texts,
                padding=True,
                truncation=True,
                max_length=checkpoint.usable_length(max_length),
                return_tensors="pt",
            ).to(self.device)
            return cls_of(model(**inputs).last_hidden_state, inputs["attention_mask"])

        def batch_loss(indices: list[int]) -> torch.Tensor:
            # each twice: two dropout masks
            doubled = [sentences[i] for i in indices for _ in (0, 1)]
            z = mlp(cls_vectors(doubled, config.max_length)).float()
            return simcse_loss(z[0::2], z[1::2], config.temperature)

        selection = None
        if config.select_every and dev is not None:
            from methods.training.select import dev_spearman

            def embed(texts: list[str]) -> torch.Tensor:
                return cls_vectors(texts, config.eval_max_length)

            selection = DevSelection(
                config.select_every, lambda: dev_spearman(embed, *dev), dev_name
            )
        identity = {"config": asdict(config), "seed": self.seed, "n": len(sentences)}
        result = run_loop(
            self.workdir,
            identity,
            {"model": model, "mlp": mlp},
            len(sentences),
            config,
            self.seed,
            self.device,
            self.progress,
            "simcse-train",
            batch_loss,
            self.on_step,
            selection,
        )
        model.eval()
        model.save_pretrained(self.workdir / "model", safe_serialization=True)
        tokenizer.save_pretrained(self.workdir / "model")
        return result


def cls_of(last_hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[CLS] of the last layer through the engine's pooling table: what ``cls_before_pooler``
    reads at evaluation."""
    return Checkpoint.pool([last_hidden], mask, "cls", [-1])
