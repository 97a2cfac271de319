"""Training and running the two sides of DSE (imported lazily: uses torch).

* The teacher, a cross-encoder: one forward pass over "[CLS] s1 [SEP] s2 [SEP]" and a head;
  on STS-B a 1-output regressor trained with MSE against gold/5, on a pair-classification task a
  classifier with one logit per class trained with cross-entropy on the labels
  (microsoft/Distilled-Sentence-Embedding's finetune_bert.py: BertForSequenceClassification,
  ``num_labels`` = the task's classes, 2 for a binary task). AdamW with 10 % linear warm-up then
  linear decay.
* The student (Barkan et al. 2020): a sentence encoder whose similarity of u = f(s1), v = f(s2)
  is trained to reproduce the teacher's score of (s1, s2):
  ``loss = (1 − w)·(sim(u, v) − teacher)² + w·(sim(u, v) − gold/5)²`` (w > 0 only on pairs with
  gold), where sim is cosine, or a small head over [u, v, u·v, |u−v|] as in
  microsoft/Distilled-Sentence-Embedding. On a pair-classification task the head has one output
  per class (one output for a binary task: the teacher's logit difference, positive minus
  negative, as the repo's dse_configurable_trainer.py reduces BERT's two logits), and
  ``loss = (1 − w)·Σ_k (out_k − teacher_k)² + w·task loss`` (binary cross-entropy on the positive
  label, or cross-entropy on the class: the repo's dse_trainer.py with ``distillation_coeff`` =
  1 − w). The student pools the mean of its top-k layers concatenated, [CLS] excluded (the repo's
  pooling), or a plain masked mean.
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
from methods.training.loop import LoopResult, run_loop

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
    targets: Sequence[float],
    config: CrossEncoderConfig,
    seed: int,
    device: str,
    progress: bool,
    num_labels: int = 1,
) -> LoopResult:
    """Fine-tune ``base`` on (s1, s2) pairs; saves to ``workdir/model``. ``num_labels`` 1: a
    regressor of ``targets`` (gold/5) by MSE; ≥ 2: a classifier with one logit per class,
    ``targets`` the class indices, trained by cross-entropy (the repo's finetune_bert.py)."""
    torch.manual_seed(seed)
    checkpoint = Checkpoint.open(base, head="sequence-classification", num_labels=num_labels)
    tokenizer, model = checkpoint.tokenizer, checkpoint.model.to(device)
    model.train()
    classify = num_labels > 1
    target = torch.tensor(
        [int(t) for t in targets] if classify else list(targets),
        dtype=torch.long if classify else torch.float32,
    )
    length = checkpoint.usable_length(config.max_length)

    def batch_loss(indices: list[int]) -> torch.Tensor:
        inputs = tokenizer(
            [s1[i] for i in indices],
            [s2[i] for i in indices],
            padding=True,
            truncation=True,
            max_length=length,
            return_tensors="pt",
        ).to(device)
        logits = model(**inputs).logits.float()
        if classify:
            return F.cross_entropy(logits, target[indices].to(device))
        return F.mse_loss(logits.squeeze(-1), target[indices].to(device))

    identity = {"config": asdict(config), "seed": seed, "n": len(s1), "num_labels": num_labels}
    result = run_loop(
        workdir,
        identity,
        {"model": model},
        len(s1),
        config,
        seed,
        device,
        progress,
        "train cross-encoder",
        batch_loss,
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
        """One score per pair: the first logit, through the activation."""
        scores = torch.from_numpy(self.logits(s1, s2, batch_size)[:, 0].copy())
        return (torch.sigmoid(scores) if self.activation == "sigmoid" else scores).numpy()

    def logits(self, s1: Sequence[str], s2: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Every logit of every pair, (n, num_labels) float32. Batches hold pairs of one token
        length, tiny ones topped up with repeats, so a pair's logits do not depend on its
        batch-mates (they are cached)."""
        labels = self.model.config.num_labels
        if not len(s1):
            return np.empty((0, labels), dtype=np.float32)
        lengths = [
            len(ids)
            for ids in self.tokenizer(
                list(s1), list(s2), truncation=True, max_length=self.max_length
            )["input_ids"]
        ]
        out = np.empty((len(s1), labels), dtype=np.float32)
        for ids, rows in Checkpoint.batches(lengths, batch_size):
            inputs = self.tokenizer(
                [s1[i] for i in rows],
                [s2[i] for i in rows],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            ).to(self.device)
            with Checkpoint.inference(self.device, self.autocast_dtype):
                logits = self.model(**inputs).logits[: len(ids)].float()
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
    # 0: regress the teacher's score (STS); 2: one output, the teacher's logit difference, with
    # binary cross-entropy on gold (1 = the positive class); K ≥ 3: K logits, cross-entropy on the
    # class index. Classes need the head.
    classes: int = 0


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
    """DSE's pair head: [u, v, u·v, |u−v|] → hidden → ReLU → outputs (the repo's ``--fc_dims 512
    1``; ``512 3`` for MNLI). One output comes back as (n,), several as (n, outputs)."""

    def __init__(self, dim: int, hidden: int = 256, outputs: int = 1) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4 * dim, hidden), nn.ReLU(), nn.Linear(hidden, outputs))

    @classmethod
    def from_weights(cls, weights: dict[str, torch.Tensor]) -> PairHead:
        """A head of the shape its saved weights have, loaded with them."""
        first, last = weights["net.0.weight"], weights["net.2.weight"]
        head = cls(first.shape[1] // 4, first.shape[0], last.shape[0])
        head.load_state_dict(weights)
        return head

    def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([u, v, u * v, (u - v).abs()], dim=-1)).squeeze(-1)


def task_loss(output: torch.Tensor, gold: torch.Tensor, classes: int) -> torch.Tensor:
    """The loss on the labels: MSE on gold/5 (STS), binary cross-entropy on the logit (2 classes,
    gold 1 = positive), cross-entropy on the class index (3 or more): the repo's task losses."""
    if classes == 0:
        return F.mse_loss(output, gold)
    if classes == 2:
        return F.binary_cross_entropy_with_logits(output, gold)
    return F.cross_entropy(output, gold.long())


def student_similarity(u: torch.Tensor, v: torch.Tensor, head: PairHead | None) -> torch.Tensor:
    return head(u, v) if head is not None else F.cosine_similarity(u, v, dim=-1)


def train_student(
    base: Path,
    workdir: Path,
    s1: Sequence[str],
    s2: Sequence[str],
    teacher: Sequence[float] | np.ndarray,
    gold01: Sequence[float | None],
    config: StudentConfig,
    seed: int,
    device: str,
    progress: bool,
    dev: tuple[Sequence[str], Sequence[str], Sequence[float]] | None = None,
    dev_name: str = "STS-B dev",
) -> tuple[LoopResult, PairHead | None]:
    """Distil the teacher's pair scores into a sentence encoder; saves it to ``workdir/model``.
    ``teacher``: one score per pair (STS; a binary teacher's logit difference), or (n, K) logits
    for K ≥ 3 classes; ``gold01``: gold/5, 1/0 for positive/negative, or the class index, None
    on unlabelled pairs (``config.classes`` says which). With ``config.select_every`` and ``dev``
    pairs (STS only), the saved student (and head) is the best on ``dev``."""
    torch.manual_seed(seed)
    checkpoint = Checkpoint.open(base)
    tokenizer, model = checkpoint.tokenizer, checkpoint.model.to(device)
    model.train()
    dim = model.config.hidden_size * (config.top_k if config.pooling == "top4-concat" else 1)
    outputs = config.classes if config.classes > 2 else 1
    if config.classes and config.objective != "head":
        raise ValueError("a student of a classifier teacher needs the head (objective='head')")
    head = (
        PairHead(dim, config.head_width, outputs).to(device) if config.objective == "head" else None
    )
    teacher_t = torch.as_tensor(np.asarray(teacher, dtype=np.float32))
    if tuple(teacher_t.shape[1:]) != ((outputs,) if outputs > 1 else ()):
        raise ValueError(
            f"teacher targets of shape {tuple(teacher_t.shape)} for {outputs} output(s)"
        )
    length = checkpoint.usable_length(config.max_length)
    gold_t = torch.tensor([math.nan if g is None else g for g in gold01], dtype=torch.float32)

    def embed(texts: list[str]) -> torch.Tensor:
        """The student's pooled vectors of ``texts``: in training and for the dev selection."""
        inputs = tokenizer(
            texts, padding=True, truncation=True, max_length=length, return_tensors="pt"
        ).to(device)
        states = model(**inputs, output_hidden_states=True).hidden_states
        return student_pool(states, inputs["attention_mask"], config.pooling, config.top_k)

    def batch_loss(indices: list[int]) -> torch.Tensor:
        pooled = embed([s1[i] for i in indices] + [s2[i] for i in indices]).float()
        u, v = pooled[: len(indices)], pooled[len(indices) :]
        similarity = student_similarity(u, v, head)
        target = teacher_t[indices].to(device)
        # the repo's distillation loss: squared error summed over the outputs, mean over the batch
        loss = ((similarity - target) ** 2).reshape(len(indices), -1).sum(dim=1).mean()
        gold = gold_t[indices].to(device)
        labelled = ~torch.isnan(gold)
        if config.gold_weight > 0 and labelled.any():
            gold_loss = task_loss(similarity[labelled], gold[labelled], config.classes)
            loss = (1 - config.gold_weight) * loss + config.gold_weight * gold_loss
        return loss

    selection = None
    if config.select_every and dev is not None and not config.classes:
        from methods.training.loop import DevSelection
        from methods.training.select import dev_spearman

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
        config,
        seed,
        device,
        progress,
        "distil student",
        batch_loss,
        selection=selection,
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
