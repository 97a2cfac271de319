"""Training and running the two sides of DSE (imported lazily: uses torch).

* The teacher, a cross-encoder: one forward pass over "[CLS] s1 [SEP] s2 [SEP]" and a regression
  head; trained with MSE against gold/5, AdamW with 10 % linear warm-up then linear decay (the
  sentence-transformers recipe for STS-B cross-encoders).
* The student (Barkan et al. 2020): a sentence encoder whose similarity of u = f(s1), v = f(s2)
  is trained to reproduce the teacher's score of (s1, s2):
  ``loss = (1 − w)·(sim(u, v) − teacher)² + w·(sim(u, v) − gold/5)²`` (w > 0 only on pairs with
  gold), where sim is cosine, or a small head over [u, v, u·v, |u−v|] as in
  microsoft/Distilled-Sentence-Embedding. The student pools the mean of its top-k layers
  concatenated, [CLS] excluded (the repo's pooling), or a plain masked mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from harness.core.encoding import Checkpoint, EncodeSettings
from methods.training.loop import LoopResult, resolve_precision, run_loop

# -- the teacher ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CrossEncoderConfig:
    epochs: float = 4.0
    lr: float = 2e-5
    batch_size: int = 16
    warmup: float = 0.1
    max_length: int = 128
    precision: str = "auto"
    weight_decay: float = 0.0
    save_every: int = 200


def train_cross_encoder(
    base: Path,
    workdir: Path,
    s1: Sequence[str],
    s2: Sequence[str],
    gold01: Sequence[float],
    config: CrossEncoderConfig,
    seed: int,
    device: str,
    progress: bool,
) -> LoopResult:
    """Fine-tune ``base`` as a 1-output regressor on (s1, s2) → gold/5; saves to
    ``workdir/model``."""
    torch.manual_seed(seed)
    checkpoint = Checkpoint.open(base, head="sequence-classification", num_labels=1)
    tokenizer, model = checkpoint.tokenizer, checkpoint.model.to(device)
    model.train()
    target = torch.tensor(list(gold01), dtype=torch.float32)
    length = checkpoint.usable_length(config.max_length)
    precision = resolve_precision(config.precision, device)

    def batch_loss(indices: list[int]) -> torch.Tensor:
        inputs = tokenizer(
            [s1[i] for i in indices],
            [s2[i] for i in indices],
            padding=True,
            truncation=True,
            max_length=length,
            return_tensors="pt",
        ).to(device)
        predicted = model(**inputs).logits.squeeze(-1).float()
        return F.mse_loss(predicted, target[indices].to(device))

    identity = {"config": asdict(config), "seed": seed, "n": len(s1)}
    result = run_loop(
        workdir,
        identity,
        {"model": model},
        len(s1),
        config.batch_size,
        config.epochs,
        config.lr,
        config.warmup,
        seed,
        precision,
        device,
        progress,
        "train cross-encoder",
        config.save_every,
        batch_loss,
        weight_decay=config.weight_decay,
    )
    model.eval()
    model.save_pretrained(workdir / "model", safe_serialization=True)
    tokenizer.save_pretrained(workdir / "model")
    return result


class PairScorer:
    """Runs a cross-encoder checkpoint over sentence pairs, length-sorted, in batches."""

    def __init__(
        self, folder: Path, device: str, dtype: str, max_length: int, activation: str
    ) -> None:
        checkpoint = Checkpoint.open(folder, head="sequence-classification")
        self.tokenizer = checkpoint.tokenizer
        self.model = checkpoint.model.to(device).eval()
        self.device = device
        self.autocast_dtype = EncodeSettings(dtype=dtype).autocast_dtype()
        self.max_length = checkpoint.usable_length(max_length)
        self.activation = activation

    def score(self, s1: Sequence[str], s2: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """One score per pair. Batches hold pairs of one token length, tiny ones topped up with
        repeats, so a pair's score does not depend on its batch-mates (the scores are cached)."""
        if not len(s1):
            return np.empty(0, dtype=np.float32)
        lengths = [
            len(ids)
            for ids in self.tokenizer(
                list(s1), list(s2), truncation=True, max_length=self.max_length
            )["input_ids"]
        ]
        out = np.empty(len(s1), dtype=np.float32)
        device_type = self.device.split(":")[0]
        for ids, rows in Checkpoint.batches(lengths, batch_size):
            inputs = self.tokenizer(
                [s1[i] for i in rows],
                [s2[i] for i in rows],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            ).to(self.device)
            with (
                torch.inference_mode(),
                torch.autocast(
                    device_type,
                    dtype=self.autocast_dtype or torch.float32,
                    enabled=self.autocast_dtype is not None,
                ),
            ):
                logits = self.model(**inputs).logits[: len(ids), 0].float()
            if self.activation == "sigmoid":
                logits = torch.sigmoid(logits)
            out[ids] = logits.cpu().numpy()
        return out


# -- the student ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StudentConfig:
    pooling: str = "top4-concat"  # or "mean"
    top_k: int = 4
    objective: str = "cosine"  # or "head"
    gold_weight: float = 0.0
    epochs: float = 1.0
    lr: float = 2e-5
    batch_size: int = 32
    warmup: float = 0.1
    max_length: int = 128
    precision: str = "auto"
    head_width: int = 256  # hidden width of the [u, v, u·v, |u−v|] head (DSE repo: 512)
    weight_decay: float = 0.0  # DSE repo's BertAdam: 0.01
    select_every: int = 0  # > 0 steps, or -1 once per epoch: keep the best weights on the dev pairs
    save_every: int = 200


def student_pool(
    hidden_states: Sequence[torch.Tensor], mask: torch.Tensor, pooling: str, top_k: int
) -> torch.Tensor:
    """``mean``: masked mean of the last layer. ``top4-concat``: masked means of the last k layers
    with position 0 ([CLS]) excluded, concatenated (k·H dims). Both through the one pooling table,
    as :meth:`methods.dse.DSE.encode` reads the trained student."""
    if pooling == "mean":
        return Checkpoint.pool(hidden_states, mask, "mean", [-1])
    return Checkpoint.pool(hidden_states, mask, "mean_nocls", range(-top_k, 0))


class PairHead(nn.Module):
    """DSE's pair head: [u, v, u·v, |u−v|] → hidden → 1."""

    def __init__(self, dim: int, hidden: int = 256) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4 * dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([u, v, u * v, (u - v).abs()], dim=-1)).squeeze(-1)


def student_similarity(u: torch.Tensor, v: torch.Tensor, head: PairHead | None) -> torch.Tensor:
    return head(u, v) if head is not None else F.cosine_similarity(u, v, dim=-1)


def train_student(
    base: Path,
    workdir: Path,
    s1: Sequence[str],
    s2: Sequence[str],
    teacher: Sequence[float],
    gold01: Sequence[float | None],
    config: StudentConfig,
    seed: int,
    device: str,
    progress: bool,
    dev: tuple[Sequence[str], Sequence[str], Sequence[float]] | None = None,
    dev_name: str = "STS-B dev",
) -> tuple[LoopResult, PairHead | None]:
    """Distil the teacher's pair scores into a sentence encoder; saves it to ``workdir/model``. With
    ``config.select_every`` and ``dev`` pairs, the saved student (and head) is the best on
    ``dev``."""
    torch.manual_seed(seed)
    checkpoint = Checkpoint.open(base)
    tokenizer, model = checkpoint.tokenizer, checkpoint.model.to(device)
    model.train()
    dim = model.config.hidden_size * (config.top_k if config.pooling == "top4-concat" else 1)
    head = PairHead(dim, config.head_width).to(device) if config.objective == "head" else None
    teacher_t = torch.tensor(list(teacher), dtype=torch.float32)
    length = checkpoint.usable_length(config.max_length)
    gold_t = torch.tensor([math.nan if g is None else g for g in gold01], dtype=torch.float32)
    precision = resolve_precision(config.precision, device)

    def batch_loss(indices: list[int]) -> torch.Tensor:
        texts = [s1[i] for i in indices] + [s2[i] for i in indices]
        inputs = tokenizer(
            texts, padding=True, truncation=True, max_length=length, return_tensors="pt"
        ).to(device)
        states = model(**inputs, output_hidden_states=True).hidden_states
        pooled = student_pool(
            states, inputs["attention_mask"], config.pooling, config.top_k
        ).float()
        u, v = pooled[: len(indices)], pooled[len(indices) :]
        similarity = student_similarity(u, v, head)
        loss = F.mse_loss(similarity, teacher_t[indices].to(device))
        gold = gold_t[indices].to(device)
        labelled = ~torch.isnan(gold)
        if config.gold_weight > 0 and labelled.any():
            gold_loss = F.mse_loss(similarity[labelled], gold[labelled])
            loss = (1 - config.gold_weight) * loss + config.gold_weight * gold_loss
        return loss

    selection = None
    if config.select_every and dev is not None:
        from methods.training.loop import DevSelection
        from methods.training.select import dev_spearman

        def embed(texts: list[str]) -> torch.Tensor:
            inputs = tokenizer(
                texts, padding=True, truncation=True, max_length=length, return_tensors="pt"
            ).to(device)
            states = model(**inputs, output_hidden_states=True).hidden_states
            return student_pool(states, inputs["attention_mask"], config.pooling, config.top_k)

        selection = DevSelection(
            config.select_every,
            lambda: dev_spearman(embed, *dev, lambda u, v: student_similarity(u, v, head)),
            dev_name,
        )
    modules: dict[str, nn.Module] = {"model": model, **({"head": head} if head is not None else {})}
    identity = {"config": asdict(config), "seed": seed, "n": len(s1)}
    result = run_loop(
        workdir,
        identity,
        modules,
        len(s1),
        config.batch_size,
        config.epochs,
        config.lr,
        config.warmup,
        seed,
        precision,
        device,
        progress,
        "distil student",
        config.save_every,
        batch_loss,
        selection=selection,
        weight_decay=config.weight_decay,
    )
    model.eval()
    model.save_pretrained(workdir / "model", safe_serialization=True)
    tokenizer.save_pretrained(workdir / "model")
    if head is not None:
        from safetensors.torch import save_file

        head.eval()
        save_file(
            {k: v.contiguous() for k, v in head.state_dict().items()},
            str(workdir / "head.safetensors"),
        )
    return result, head
