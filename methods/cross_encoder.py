"""``cross-encoder``: the DSE teacher, a pair scorer, not an embedding method.

It reads both sentences in one forward pass ("[CLS] s1 [SEP] s2 [SEP]") and regresses a score, so
it has no ``encode``: it implements ``score_pairs`` and the leaderboard marks it ``pair-scorer``,
the upper reference the sentence encoders are measured against. It either loads a published
cross-encoder (sentence-transformers' STS-B cross-encoders end in a sigmoid) or is trained here
from ``--backbone`` on STS-B train (gold/5, MSE; 4 epochs, lr 2e-5, batch 16, 10 % warm-up).

Scored on a pair-classification task with a train split (GLUE's MRPC, QQP, QNLI, RTE, MNLI), a
teacher trained here is instead fine-tuned on that task's train split as a classifier, one logit
per class (microsoft/Distilled-Sentence-Embedding's finetune_bert.py: BertForSequenceClassification
with ``num_labels`` the task's classes, 2 for a binary task, cross-entropy), and classifies pairs
itself (:meth:`CrossEncoder.classify_pairs`: the logits; the decision is their argmax). MNLI and
MNLI-mm share one teacher (the same train split). Scores and logits of every pair are cached,
keyed on the checkpoint's fingerprint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.api import MethodContext, MethodSpec, Option, PairScoringMethod, SpecRequest
from harness.core.encoding import BackboneRef, read_model_json
from harness.core.errors import UserError
from harness.core.kinds import kind_of
from methods.trained import TRAINING_PRECISION, TrainedMethod

if TYPE_CHECKING:
    from harness.core.artifacts import ArtifactDir
    from harness.core.data.fitsets import FitSet
    from harness.core.data.splits import SplitData, TaskSpec
    from harness.core.vector_store import VectorStore

PUBLISHED = "cross-encoder/stsb-roberta-base"
TRAIN = "train"
CROSS_ENCODER_SCHEMA = 1  # bump whenever the training code changes what it produces


def positive_log_odds(logits: np.ndarray, positive: int) -> np.ndarray:
    """Per row, the positive class's logit minus the log-sum-exp of the others: log p / (1 − p)
    of the positive class under the softmax (for two classes, the logit difference)."""
    others = np.delete(logits.astype(np.float64), positive, axis=1)
    peak = others.max(axis=1, keepdims=True)
    rest = peak[:, 0] + np.log(np.exp(others - peak).sum(axis=1))
    return (logits[:, positive] - rest).astype(np.float32)


def check_classes(task: TaskSpec, classes: Sequence[str]) -> None:
    """The classes asked for are the ones the model was trained on, in the same order."""
    if tuple(classes) != tuple(task.classes):
        raise ValueError(
            f"asked to classify into {tuple(classes)}, but trained on {task.title}'s classes "
            f"{tuple(task.classes)}"
        )


def published_activation(folder: Path) -> str:
    """sentence-transformers' cross-encoders apply a sigmoid to their single logit by default."""
    config = read_model_json(Path(folder) / "config.json")
    name = str(config.get("sbert_ce_default_activation_function", "Sigmoid"))
    return "identity" if "Identity" in name else "sigmoid"


class CrossEncoder(TrainedMethod, PairScoringMethod):
    name = "cross-encoder"
    summary = (
        f"pair scorer (the DSE teacher): {PUBLISHED}, or trained here from --backbone on STS-B "
        "train"
    )
    post = "cross-encoder"
    artifact_kind = "cross-encoder"
    artifact_noun = "trained teacher"
    options = (
        Option(
            "model",
            "auto",
            f"HF id or folder of a cross-encoder, or '{TRAIN}' to train one from --backbone; "
            f"auto = train for the packaged MiniLM (offline), else {PUBLISHED}",
        ),
        Option("epochs", 4.0, "training epochs over STS-B train (4)", type=float),
        Option("lr", 2e-5, "peak learning rate (2e-5)", type=float),
        Option("batch_size", 16, "pairs per batch (16)", type=int),
        Option("warmup", 0.1, "linear warm-up, fraction of the steps (0.1)", type=float),
        Option("max_length", 128, "tokens per pair (128)", type=int),
        TRAINING_PRECISION,
        Option(
            "base",
            "",
            "model the teacher is trained from with model=train (default: --backbone; DSE's "
            "teacher: bert-large-uncased-whole-word-masking)",
            in_label=False,
        ),
        Option("weight_decay", 0.0, "AdamW weight decay (DSE repo's BertAdam: 0.01)", type=float),
    )

    def __init__(self, spec: MethodSpec, ctx: MethodContext) -> None:
        super().__init__(spec, ctx)
        self._store: VectorStore | None = None
        # the pair-classification task the teacher is a classifier of (begin_task), or None: the
        # STS-B regressor
        self.classifier: TaskSpec | None = None

    @classmethod
    def make_spec(cls, request: SpecRequest, ctx: MethodContext) -> MethodSpec:
        spec = super().make_spec(request, ctx)
        model = spec.params["model"]
        if model == "auto":
            model = TRAIN if BackboneRef.is_packaged(request.backbone) else PUBLISHED
        trains = model == TRAIN
        base = spec.params["base"] or request.backbone
        backbone = base if trains else model
        revision = request.revision if trains and base == request.backbone else None
        return replace(
            spec,
            backbone=backbone,
            revision=revision,
            pooling="joint",
            layers=(),
            params={**spec.params, "model_used": model, "seed": request.seed},
        )

    @property
    def labelled_training(self) -> tuple[tuple[str, str], ...]:  # type: ignore[override]
        """Trained here on STS-B train; the published default (stsb-roberta-base) was trained on it
        too."""
        return (("stsb", "train"),) if self.trains or self.spec.backbone == PUBLISHED else ()

    def labelled_training_for(self, task: TaskSpec) -> tuple[tuple[str, str], ...]:
        classifier = self.classifier_for(task)
        return ((classifier.name, "train"),) if classifier else self.labelled_training

    @property
    def trains(self) -> bool:
        return self.spec.params["model_used"] == TRAIN

    def classifier_for(self, task: TaskSpec | None) -> TaskSpec | None:
        """The task a teacher trained here is fine-tuned on as a classifier when scored on
        ``task``: ``task`` itself when it is a pair-classification task with a train split; None
        otherwise (STS tasks, MTEB's pair tasks, which have no train split, a published model):
        the STS-B regressor, whose score is then the similarity."""
        if task is None or not self.trains or not kind_of(task).labelled:
            return None
        return task if "train" in task.splits else None

    def begin_task(self, task: TaskSpec) -> None:
        """Switch to the teacher of ``task``: its classifier, or the STS-B regressor."""
        classifier = self.classifier_for(task)
        if classifier != self.classifier:
            self._fitted_on, self._store = None, None  # another checkpoint: fit() finds it
        self.classifier = classifier

    def train_split(self) -> SplitData:
        """The labelled pairs the teacher trains on: the classified task's train split, or STS-B
        train."""
        return self.ctx.task_split(self.classifier.name if self.classifier else "stsb", "train")

    def classifies(self) -> bool:
        """Whether :meth:`classify_pairs` answers for the task begun: a teacher trained here on a
        pair-classification task's train split."""
        return self.classifier is not None

    def checkpoint(self) -> Path:
        """The folder of the scoring model: the published checkpoint, or the one trained here."""
        if not self.trains:
            return Path(self.ctx.backbone(self.spec.backbone, self.spec.revision).path)
        self.fit(None)
        return self.artifact(None).path("model")

    def artifact_key(self, fit_set: FitSet | None) -> dict[str, Any]:
        ref = self.ctx.backbone(self.spec.backbone, self.spec.revision)
        train = self.train_split()
        classes = {"classes": list(self.classifier.classes)} if self.classifier else {}
        return {
            "base": ref.key(),
            "train": train.fingerprint,
            **classes,
            "params": dict(self.spec.params),
            "schema": CROSS_ENCODER_SCHEMA,
        }

    def describe_fit(self, fit_set: FitSet | None = None) -> str:
        return (
            super().describe_fit(None)
            if self.trains
            else f"published checkpoint {self.spec.backbone}"
        )

    def training_plan(self, fit_set: FitSet | None) -> str:
        train, p = self.train_split(), self.spec.params
        steps = -(-int(p["epochs"] * len(train)) // p["batch_size"])
        if self.classifier:
            return (
                f"to train a {len(self.classifier.classes)}-class classifier on "
                f"{len(train)} {self.classifier.title} train pairs (~{steps} steps)"
            )
        return f"to train on {len(train)} STS-B pairs (~{steps} steps)"

    def load(self, folder: ArtifactDir, info: dict[str, Any]) -> None:
        """Nothing to hold: the checkpoint is read from its folder when pairs are scored."""

    def train(
        self, folder: ArtifactDir, fit_set: FitSet | None
    ) -> tuple[dict[str, bytes], dict[str, Any]]:
        from methods.training.pair_training import CrossEncoderConfig, train_cross_encoder

        ref = self.ctx.backbone(self.spec.backbone, self.spec.revision)
        train, p = self.train_split(), self.spec.params
        config = self.options_into(CrossEncoderConfig)
        classes = self.classifier.classes if self.classifier else ()
        result = train_cross_encoder(
            Path(ref.path),
            folder.dir,
            train.s1,
            train.s2,
            [int(g) for g in train.gold] if classes else [g / 5 for g in train.gold],
            config,
            int(p["seed"]),
            self.ctx.encode.device_now(),
            self.ctx.encode.progress,
            num_labels=len(classes) or 1,
        )
        info = {
            "train_task": self.classifier.name if self.classifier else "stsb",
            "classes": list(classes) or None,
            "train_pairs": len(train),
            "train_fingerprint": train.fingerprint,
            "steps": result.steps,
            "first_loss": result.first_loss,
            "final_loss": result.last_loss,
            "train_seconds": round(result.seconds, 2),
            "precision": result.precision,
            "recipe": result.recipe,
        }
        return {}, info

    def activation(self) -> str:
        return "identity" if self.trains else published_activation(self.checkpoint())

    def _scores_store(self) -> VectorStore:
        if self._store is None:
            ref = self.ctx.backbone(str(self.checkpoint()))
            key = {
                # a classifier's rows are its logits, one per class
                "kind": "pair-logits" if self.classifier else "pair-scores",
                "fingerprint": ref.fingerprint,
                "max_length": self.spec.params["max_length"],
                "dtype": self.ctx.encode.dtype,
                "activation": self.activation(),
            }
            self._store = self.ctx.artifacts.vectors(key, code=self.code())
        return self._store

    def _cached(self, s1: Sequence[str], s2: Sequence[str]) -> np.ndarray:
        """The teacher's row of each (s1[i], s2[i]), computed once per pair, then cached: (n, 1)
        scores, or (n, classes) logits of a classifier."""
        keys = [f"{a}\x00{b}" for a, b in zip(s1, s2)]
        store = self._scores_store()
        missing = store.missing(keys)
        if missing:
            from methods.training.pair_training import PairScorer

            position = {key: i for i, key in enumerate(keys)}
            rows = [position[key] for key in missing]
            scorer = PairScorer(
                self.checkpoint(),
                self.ctx.encode.device_now(),
                self.ctx.encode.dtype,
                self.spec.params["max_length"],
                self.activation(),
            )
            for start in range(0, len(rows), 4096):  # chunks: an interrupt keeps what was scored
                chunk = rows[start : start + 4096]
                left, right = [s1[i] for i in chunk], [s2[i] for i in chunk]
                batch = self.ctx.encode.fixed_batch_size()
                values = (
                    scorer.logits(left, right, batch)
                    if self.classifier
                    else scorer.score(left, right, batch)[:, None]
                )
                store.add([keys[i] for i in chunk], values)
                self.ctx.count_pairs_scored(len(chunk))
        return store.get(keys)

    def score_pairs(self, s1: Sequence[str], s2: Sequence[str]) -> np.ndarray:
        """The teacher's score of each (s1[i], s2[i]); computed once per pair, then cached. A
        classifier's score is its logit of the positive class minus the log-sum-exp of the others
        (the log-odds of the positive class)."""
        if self.classifier:
            return positive_log_odds(self._cached(s1, s2), self.classifier.positive_index)
        return self._cached(s1, s2)[:, 0]

    def classify_pairs(
        self, s1: Sequence[str], s2: Sequence[str], classes: Sequence[str]
    ) -> np.ndarray:
        """The logits (n, len(classes)) of the teacher fine-tuned on the task begun, in the
        task's class order; the decision is their argmax (finetune_bert.py's ``np.argmax``)."""
        if self.classifier is None:
            raise UserError(
                "cross-encoder: it classifies pairs only as a teacher trained here on a "
                "pair-classification task's train split (--cross-encoder-model train)"
            )
        check_classes(self.classifier, classes)
        return np.ascontiguousarray(self._cached(s1, s2), dtype=np.float32)

    def annotate(self, split: SplitData, scores: np.ndarray) -> dict[str, Any]:
        """Reported, never asserted: how much the score depends on the order of the pair."""
        from harness.core.scoring import spearman

        swapped = self.score_pairs(split.s2, split.s1)
        return {
            "symmetry": {
                "spearman_ab_vs_ba": spearman(scores, swapped),
                "mean_abs_difference": float(np.abs(scores - swapped).mean()),
            },
            "activation": self.activation(),
        }  # applied to the logit: changes Pearson, not Spearman

    def encoder_impl(self) -> str:
        return "transformers (pair scorer)"
