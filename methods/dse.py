"""``dse``: Distilled Sentence Embedding (Barkan et al., AAAI 2020).

A sentence encoder (``--backbone``) trained so that the similarity of its embeddings reproduces the
teacher's (the run's ``cross-encoder``) scores of sentence pairs. Training pairs are the STS-B train
pairs (labels unused unless ``--dse-gold-weight``) plus as many shuffled cross-pairs of
``--dse-pool`` sentences (default ``heldout``: never a sentence it is scored on), so the student
also sees unrelated pairs. The teacher scores every pair once (cached). The student pools like
microsoft/Distilled-Sentence-Embedding — the mean of its top 4 layers, concatenated, [CLS] excluded
— or a plain masked mean (``--dse-pooling mean``).

With ``--dse-objective head`` the similarity is the repo's small head over [u, v, u·v, |u−v|]; the
method is then a pair scorer (:class:`DSEHead`) that scores pairs with that head over cached
embeddings. Each result records the teacher's score on the same task and the relative degradation,
100 · (teacher − student) / teacher: the paper's headline measure.

On a pair-classification task whose teacher is fine-tuned on its train split (GLUE: see
:mod:`methods.cross_encoder`), the student is distilled per task, as the repo's dse_train_runner.py
does: its training pairs are that task's train pairs (plus ``--dse-cross-pairs`` pool pairs, none
in the repo), its targets the teacher's logits on them (run_distillation_logits_creator.py). The
head then has one output per class, one for a binary task: z regressed on the teacher's logit
difference, positive minus negative (dse_configurable_trainer.py), with binary cross-entropy on
the label; the student classifies with logits [0, z] over (negative, positive), so its decision is
z > 0, the repo's sigmoid(z) > 0.5 (``--tune_positive_thresholds 0.5``). With the cosine objective
(sts-bench's, not the repo's) the cosine regresses the teacher's probability of the positive class
and the student is scored as an embedding method.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.api import (
    EmbeddingMethod,
    MethodContext,
    MethodSpec,
    Option,
    PairScoringMethod,
    SpecRequest,
)
from harness.core.errors import UserError
from methods.trained import TRAINING_PRECISION, TrainedMethod

if TYPE_CHECKING:
    from harness.core.artifacts import ArtifactDir
    from harness.core.cost_model import CostSubjects
    from harness.core.data.fitsets import FitSet
    from harness.core.data.splits import SplitData, TaskSpec
    from methods.cross_encoder import CrossEncoder

DSE_SCHEMA = 1  # bump whenever the training code changes what it produces


def _selection(text: str) -> str:
    """``off``, ``epoch`` or a positive step count (kept as text: it is a name or a number)."""
    text = str(text).strip().lower()
    if text in ("off", "epoch") or (text.isdigit() and int(text) > 0):
        return text
    raise ValueError(f"expected off, epoch or a positive number of steps, got {text!r}")


def selection_steps(value: str) -> int:
    """The training loop's ``select_every``: 0 off, -1 once per epoch, else every N steps."""
    return {"off": 0, "epoch": -1}[value] if value in ("off", "epoch") else int(value)


VS_TEACHER = "vs teacher (%)"


def decision_scores(logits: np.ndarray, gold: np.ndarray, positive: int) -> dict[str, float | None]:
    """Accuracy of the argmax of ``logits`` against the class indices ``gold``, and F1 of the
    positive class (predicted positive vs gold positive), ×100 as the records hold them; F1 is
    None when neither side has a positive."""
    predicted = np.asarray(logits).argmax(axis=1)
    accuracy = float((predicted == gold).mean()) * 100 if len(gold) else None
    hit = predicted == positive
    truth = gold == positive
    both = int((hit & truth).sum())
    denominator = int(hit.sum()) + int(truth.sum())
    f1 = 100 * 2 * both / denominator if denominator else None
    return {"accuracy": accuracy, "f1": f1}


def relative_degradation(teacher: float | None, student: float | None) -> float | None:
    """100 · (teacher − student) / teacher; None when either is undefined or the teacher's is 0."""
    if teacher is None or student is None or teacher == 0:
        return None
    return 100 * (teacher - student) / teacher


class DSE(TrainedMethod, EmbeddingMethod):
    name = "dse"
    summary = (
        "Distilled Sentence Embedding: a sentence encoder trained to reproduce the cross-encoder's "
        "pair scores"
    )
    uses_fit_set = True
    post = "dse"
    artifact_kind = "dse"
    artifact_noun = "student"
    options = (
        Option(
            "pooling",
            "top4-concat",
            "top4-concat (DSE repo: top-k layer means, [CLS] excluded) or mean",
            choices=("top4-concat", "mean"),
        ),
        Option("top_k", 4, "layers concatenated by top4-concat (4)", type=int),
        Option(
            "objective",
            "cosine",
            "cosine (MSE of cosine vs teacher) or head ([u, v, u·v, |u−v|] head)",
            choices=("cosine", "head"),
        ),
        Option(
            "gold_weight",
            0.0,
            "weight of gold/5 on the labelled STS-B train pairs (DSE repo: 0.5)",
            type=float,
        ),
        Option("cross_pairs", 1.0, "shuffled pool pairs per STS-B train pair (1.0)", type=float),
        Option(
            "pool",
            "heldout",
            "fit set the cross-pairs are drawn from (heldout: never a scored sentence; "
            "target/test mark the score transductive)",
            in_label=False,
        ),
        Option("epochs", 1.0, "epochs over the training pairs (1)", type=float),
        Option("lr", 2e-5, "peak learning rate (2e-5)", type=float),
        Option("batch_size", 32, "pairs per batch (32)", type=int),
        Option("max_length", 128, "tokens per sentence in training (128)", type=int),
        Option(
            "head_width",
            256,
            "hidden width of the head with --dse-objective head (DSE repo: 512)",
            type=int,
        ),
        Option("weight_decay", 0.0, "AdamW weight decay (DSE repo's BertAdam: 0.01)", type=float),
        Option(
            "select_every",
            "off",
            "keep the best student on STS-B dev, scored every N steps or every 'epoch' "
            "('off': keep the last step)",
            type=_selection,
        ),
        TRAINING_PRECISION,
    )

    def __init__(self, spec: MethodSpec, ctx: MethodContext) -> None:
        super().__init__(spec, ctx)
        self._trained: MethodSpec | None = None
        # the pair-classification task the student is distilled on (its teacher's), or None: STS-B
        self.classifier: TaskSpec | None = None

    @classmethod
    def make_spec(cls, request: SpecRequest, ctx: MethodContext) -> MethodSpec:
        spec = super().make_spec(request, ctx)
        layers_available = ctx.backbone(spec.backbone, spec.revision).num_layers
        if (
            spec.params["pooling"] == "top4-concat"
            and not 1 <= spec.params["top_k"] <= layers_available
        ):
            raise UserError(
                f"dse: --dse-top-k {spec.params['top_k']} does not fit {spec.backbone}, which has "
                f"{layers_available} layers; pass a value from 1 to {layers_available}"
            )
        pooling = "mean_nocls" if spec.params["pooling"] == "top4-concat" else "mean"
        layers = tuple(range(-spec.params["top_k"], 0)) if pooling == "mean_nocls" else (-1,)
        return replace(
            spec, pooling=pooling, layers=layers, params={**spec.params, "seed": request.seed}
        )

    @classmethod
    def create(cls, spec: MethodSpec, ctx: MethodContext) -> DSE:
        return DSEHead(spec, ctx) if spec.params["objective"] == "head" else cls(spec, ctx)

    labelled_training = (("stsb", "train"),)

    def labelled_training_for(self, task: TaskSpec) -> tuple[tuple[str, str], ...]:
        """STS-B train, or the train split of the task its teacher classifies."""
        classifier = self.teacher().classifier_for(task)
        return ((classifier.name, "train"),) if classifier else self.labelled_training

    def begin_task(self, task: TaskSpec) -> None:
        """The student of ``task``'s teacher: distilled on the task when the teacher classifies
        it, else the STS-B student."""
        teacher = self.teacher()
        teacher.begin_task(task)
        if teacher.classifier != self.classifier:
            self._fitted_on = None  # another student: fit() trains or loads it
        self.classifier = teacher.classifier

    def fit_set_name(self) -> str:
        return self.spec.params["pool"]

    def teacher(self) -> CrossEncoder:
        """The run's cross-encoder (its --cross-encoder-* flags), as the teacher."""
        # that method's class: CrossEncoder
        return self.ctx.sibling("cross-encoder")  # type: ignore[return-value]

    def training_pairs(self, fit_set: FitSet) -> tuple[list[str], list[str], list[float | None]]:
        """The labelled pairs + shuffled cross-pairs of pool sentences (no gold). Labelled: STS-B
        train with gold/5, or the classified task's train split with its class index."""
        if self.classifier is not None:
            train = self.ctx.task_split(self.classifier.name, "train")
            gold: list[float | None] = list(train.gold)
        else:
            train = self.ctx.task_split("stsb", "train")
            gold = [g / 5 for g in train.gold]
        s1, s2 = list(train.s1), list(train.s2)
        pool = list(fit_set.sentences)
        rng = np.random.default_rng(int(self.spec.params["seed"]))
        n_cross = round(self.spec.params["cross_pairs"] * len(train))
        if n_cross and len(pool) > 1:
            first = rng.integers(0, len(pool), n_cross)
            # never a sentence with itself
            second = (first + rng.integers(1, len(pool), n_cross)) % len(pool)
            s1 += [pool[i] for i in first]
            s2 += [pool[i] for i in second]
            gold += [None] * n_cross
        return s1, s2, gold

    # needs one: uses_fit_set
    def artifact_key(self, fit_set: FitSet) -> dict[str, Any]:  # type: ignore[override]
        """The key names the teacher without training or running it."""
        from harness.core.data.splits import fingerprint_pairs

        s1, s2, gold = self.training_pairs(fit_set)
        teacher = self.teacher()
        teacher_id = teacher.artifact(None).key if teacher.trains else teacher.spec.to_dict()
        base = self.ctx.backbone(self.spec.backbone, self.spec.revision)
        classes = (
            {"classes": list(self.classifier.classes), "positive": self.classifier.positive}
            if self.classifier
            else {}
        )
        return {
            "base": base.key(),
            "teacher": teacher_id,
            "pairs": fingerprint_pairs(s1, s2, [-1.0 if g is None else g for g in gold], None),
            **classes,
            "params": dict(self.spec.params),
            "schema": DSE_SCHEMA,
        }

    # needs one: uses_fit_set
    def training_plan(self, fit_set: FitSet) -> str:  # type: ignore[override]
        s1, _, _ = self.training_pairs(fit_set)
        on = f" of {self.classifier.title}" if self.classifier else ""
        return f"to train on {len(s1)} pairs{on}; teacher: {self.teacher().describe_fit(None)}"

    def fit_details(self, folder: ArtifactDir) -> dict[str, Any]:
        return {
            "checkpoint": str(folder.path("model")),
            "teacher": self.teacher().label(),
            "train_task": self.classifier.name if self.classifier else "stsb",
        }

    def load(self, folder: ArtifactDir, info: dict[str, Any]) -> None:
        self._trained = replace(self.spec, backbone=str(folder.path("model")), revision=None)

    def train(
        self,
        folder: ArtifactDir,
        fit_set: FitSet,  # type: ignore[override]  # needs one: uses_fit_set
    ) -> tuple[dict[str, bytes], dict[str, Any]]:
        from methods.training.pair_training import StudentConfig, train_student

        s1, s2, gold = self.training_pairs(fit_set)
        base = self.ctx.backbone(self.spec.backbone, self.spec.revision)
        p = self.spec.params
        targets, gold, classes = self.distillation_targets(s1, s2, gold)
        config = self.options_into(
            StudentConfig, select_every=selection_steps(p["select_every"]), classes=classes
        )
        dev = None
        if p["select_every"] != "off" and self.classifier is None:
            split = self.ctx.task_split("stsb", "dev")
            dev = (split.s1, split.s2, [g / 5 for g in split.gold])
        result, _ = train_student(
            Path(base.path),
            folder.dir,
            s1,
            s2,
            targets,
            gold,
            config,
            int(p["seed"]),
            self.ctx.encode.device_now(),
            self.ctx.encode.progress,
            dev,
        )
        selection = result.selection
        if p["select_every"] != "off" and self.classifier is not None:
            # the repo keeps the best epoch on GLUE dev, which is the split scored here
            selection = {"not_applied": "the dev split of a GLUE task is the split it is scored on"}
        info = {
            "train_task": self.classifier.name if self.classifier else "stsb",
            "train_pairs": len(s1),
            "steps": result.steps,
            "first_loss": result.first_loss,
            "final_loss": result.last_loss,
            "train_seconds": round(result.seconds, 2),
            "precision": result.precision,
            "selection": selection,
            "recipe": {
                **result.recipe,
                "head_width": config.head_width if p["objective"] == "head" else None,
                "head_outputs": (classes if classes > 2 else 1)
                if p["objective"] == "head"
                else None,
                "loss": self.loss_text(classes),
            },
        }
        return {}, info

    def distillation_targets(
        self, s1: list[str], s2: list[str], gold: list[float | None]
    ) -> tuple[np.ndarray, list[float | None], int]:
        """What the student regresses, the labels of its task loss, and the number of classes
        (0: a score) for :func:`methods.training.pair_training.train_student`. STS-B: the
        teacher's score and gold/5. A classifier teacher's task: its logits on every pair (run
        once, cached) — with the head, their difference positive − negative for a binary task
        (label 1 = positive), all of them for 3 classes or more (label = the class index); with
        the cosine, its probability of the positive class (label 1 = positive)."""
        from methods.cross_encoder import positive_log_odds

        teacher = self.teacher()
        if self.classifier is None:
            return teacher.score_pairs(s1, s2), gold, 0
        task = self.classifier
        logits = teacher.classify_pairs(s1, s2, task.classes)
        positive = task.positive_index
        is_positive = [None if g is None else float(int(g) == positive) for g in gold]
        if self.spec.params["objective"] != "head":
            probability = 1 / (1 + np.exp(-positive_log_odds(logits, positive).astype(np.float64)))
            return probability.astype(np.float32), is_positive, 0
        if len(task.classes) == 2:
            return positive_log_odds(logits, positive), is_positive, 2
        return logits, gold, len(task.classes)

    def loss_text(self, classes: int) -> str:
        w = self.spec.params["gold_weight"]
        if classes == 0 and self.classifier is not None:
            return f"(1 - w)·MSE(cos, teacher p(positive)) + w·MSE(cos, positive 1/0), w = {w}"
        if classes == 2:
            return f"(1 - w)·(z - teacher logit difference)² + w·BCE(z, positive 1/0), w = {w}"
        if classes > 2:
            return f"(1 - w)·Σ_k (out_k - teacher logit_k)² + w·CE(out, class), w = {w}"
        return f"(1 - w)·MSE(sim, teacher) + w·MSE(sim, gold/5), w = {w}"

    def _provider_views(self):
        from harness.core.encoding import View

        if self._trained is None:
            raise RuntimeError("dse: fit() must run before encode()")
        provider = self.ctx.views(self._trained)
        return provider, [
            View(self.spec.pooling, provider.ref.layer_index(layer)) for layer in self.spec.layers
        ]

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        """The student's vectors: each view of the student's layers, concatenated (the pooling the
        student trained with: :meth:`harness.core.encoding.Checkpoint.pool`)."""
        provider, views = self._provider_views()
        return np.concatenate([provider.get(sentences, view) for view in views], axis=1)

    def annotate(self, split: SplitData, similarity: np.ndarray) -> dict[str, Any]:
        """The teacher's Spearman on the same pairs, same aggregation, and the student's relative
        degradation 100 · (teacher − student) / teacher: a leaderboard column of DSE's own. On a
        classified task, the same for accuracy and F1 (:meth:`annotate_classes`)."""
        from harness.core.scoring import score_split

        teacher = self.teacher()
        if self.classifier is not None:
            return self.annotate_classes(split)

        def rho(values: np.ndarray) -> float | None:
            return score_split(
                values, split.gold, split.subsets, self.ctx.aggregation, bootstrap=0
            ).spearman

        teacher_rho, student_rho = rho(teacher.score_pairs(split.s1, split.s2)), rho(similarity)
        # Undefined (None) when either score is, or the teacher's is 0: no relative degradation
        # then.
        degradation = relative_degradation(teacher_rho, student_rho)
        return {
            "teacher": {
                "label": teacher.label(),
                "checkpoint": str(teacher.checkpoint()),
                "spearman": teacher_rho,
                "degradation_pct": degradation,
            },
            "columns": {VS_TEACHER: degradation} if degradation is not None else {},
        }

    def annotate_classes(self, split: SplitData) -> dict[str, Any]:
        """The teacher's and the student's accuracy and F1 (of the positive class; ×100) on the
        scored pairs, each deciding by the argmax of its logits, and the relative degradation of
        each. The leaderboard's column is the accuracy's (DSE reports accuracy on every task, and
        F1 beside it on MRPC and QQP). A cosine student decides by a threshold the harness picks,
        so it has no degradation here."""
        teacher, task = self.teacher(), self.classifier
        assert task is not None  # annotate() asks only then
        gold = np.asarray(split.gold, dtype=np.int64)
        teacher_scores = decision_scores(
            teacher.classify_pairs(split.s1, split.s2, task.classes), gold, task.positive_index
        )
        student_scores: dict[str, float | None] = {"accuracy": None, "f1": None}
        if isinstance(self, DSEHead):
            student_scores = decision_scores(
                self.classify_pairs(split.s1, split.s2, task.classes), gold, task.positive_index
            )
        degradation = {
            name: relative_degradation(teacher_scores[name], student_scores[name])
            for name in teacher_scores
        }
        headline = degradation["accuracy"]
        return {
            "teacher": {
                "label": teacher.label(),
                "checkpoint": str(teacher.checkpoint()),
                "task": task.name,
                "decision": "argmax",
                "metrics": teacher_scores,
                "student_metrics": student_scores,
                "degradation": degradation,
                "degradation_pct": headline,
            },
            "columns": {VS_TEACHER: headline} if headline is not None else {},
        }

    def encoder_impl(self) -> str | None:
        return self.ctx.views(self._trained).impl if self._trained is not None else None

    def cost_subjects(self) -> CostSubjects:
        """``--cost``: the teacher over all Q·C pairs against this student encoding Q + C
        sentences."""
        from harness.core.cost_model import CostSubjects, ModelShape
        from harness.core.encoding import ForwardPass, read_model_json
        from methods.training.pair_training import PairScorer

        if self._trained is None:
            raise UserError(
                "--cost: the dse student was not trained in this run (no task evaluated it)"
            )
        provider, views = self._provider_views()
        teacher = self.teacher()
        # Both sides through the same engine (transformers) and the same batching (length-sorted,
        # fixed batches), on fresh compute: neither may read the score or vector caches while timed.
        settings = replace(
            provider.settings,
            progress=False,
            impl="transformers",
            batch_size=provider.settings.fixed_batch_size(),
        )
        device = settings.device_now()
        scorer = PairScorer(
            teacher.checkpoint(),
            device,
            settings.dtype,
            teacher.spec.params["max_length"],
            teacher.activation(),
        )
        forward = ForwardPass(provider.ref, settings)

        def encode(texts: list[str]) -> np.ndarray:
            arrays = forward.encode_all(texts, views)
            return np.concatenate([arrays[v] for v in views], axis=1)

        def shape(folder: Path) -> ModelShape:
            return ModelShape.from_config(read_model_json(Path(folder) / "config.json"))

        return CostSubjects(
            title=f"{teacher.label()} vs {self.label()}, {device}, {settings.dtype}, both sides "
            f"transformers, length-sorted batches of {settings.batch_size}",
            pair_score=lambda a, b: scorer.score(a, b, settings.batch_size),
            encode=encode,
            tokens=forward.token_lengths,
            cross_shape=shape(teacher.checkpoint()),
            student_shape=shape(Path(provider.ref.path)),
        )


class DSEHead(PairScoringMethod, DSE):
    """DSE with the repo's head: pairs are scored by the head over the two cached embeddings."""

    def __init__(self, spec: MethodSpec, ctx: MethodContext) -> None:
        super().__init__(spec, ctx)
        # a PairHead once load() ran. Typed by a type comment, not an annotation (that would change
        # this module's cache digest, and with it every trained artifact's key); PairHead is not
        # imported here (an import would too), so the type is Any
        self._head = None  # type: Any

    def load(self, folder: ArtifactDir, info: dict[str, Any]) -> None:
        from safetensors.torch import load

        from methods.training.pair_training import PairHead

        super().load(folder, info)
        weights = load(folder.read("head.safetensors"))  # bytes checked against meta.json
        self._head = PairHead.from_weights(weights).eval()

    def _outputs(self, s1: Sequence[str], s2: Sequence[str]) -> np.ndarray:
        """The head over each pair's two embeddings: (n,) for one output, (n, k) for k."""
        import torch

        u, v = torch.from_numpy(self.encode(s1)), torch.from_numpy(self.encode(s2))
        with torch.no_grad():
            return self._head(u, v).numpy()

    def score_pairs(self, s1: Sequence[str], s2: Sequence[str]) -> np.ndarray:
        """The head's output; for a classifying student, the log-odds of the positive class (a
        binary head's z itself)."""
        return self._as_score(self._outputs(s1, s2))

    def _as_score(self, out: np.ndarray) -> np.ndarray:
        """One score per pair from the head's outputs (pairs on the first axes, outputs last when
        there are several): a 3-class head's log-odds of the positive class."""
        if (
            self.classifier is None
            or out.ndim == 1
            or out.shape[-1] != len(self.classifier.classes)
        ):
            return out
        from methods.cross_encoder import positive_log_odds

        flat = out.reshape(-1, out.shape[-1])
        return positive_log_odds(flat, self.classifier.positive_index).reshape(out.shape[:-1])

    def classifies(self) -> bool:
        """Whether :meth:`classify_pairs` answers for the task begun: a student distilled from a
        classifier teacher on that task."""
        return self.classifier is not None

    def classify_pairs(
        self, s1: Sequence[str], s2: Sequence[str], classes: Sequence[str]
    ) -> np.ndarray:
        """The student's logits (n, len(classes)) in the task's class order. A binary head has one
        output z (the teacher's positive − negative logit difference): its logits are z for the
        positive class and 0 for the negative, so softmax gives sigmoid(z) and the argmax decides
        positive when z > 0 (the repo's threshold 0.5 on sigmoid(z))."""
        from methods.cross_encoder import check_classes

        if self.classifier is None:
            raise UserError(
                "dse: it classifies pairs only as the student of a teacher fine-tuned on the "
                "task's train split (--cross-encoder-model train, a task with a train split)"
            )
        check_classes(self.classifier, classes)
        out = self._outputs(s1, s2)
        if out.ndim == 2:
            return np.ascontiguousarray(out, dtype=np.float32)
        logits = np.zeros((len(out), len(classes)), dtype=np.float32)
        logits[:, self.classifier.positive_index] = out
        return logits

    def head_matrix(self, queries: np.ndarray, candidates: np.ndarray) -> np.ndarray:
        """The head over every (query, candidate) pair: Q·C evaluations, one query row at a time."""
        import torch

        c = torch.from_numpy(np.ascontiguousarray(candidates))
        with torch.no_grad():
            return np.stack(
                [
                    self._as_score(self._head(torch.from_numpy(q).expand_as(c), c).numpy())
                    for q in queries
                ]
            )

    def cost_subjects(self) -> CostSubjects:
        """As DSE's, but (b) and (c) run the head on all Q·C pairs instead of one matrix product:
        2·(4d·h + h·k) FLOPs a pair for the two layers (d the embedding size, h the head width, k
        its outputs: 1, or a class each)."""
        subjects = super().cost_subjects()
        first, last = self._head.net[0], self._head.net[2]
        dim, width = first.in_features // 4, first.out_features
        return replace(
            subjects,
            title=subjects.title + ", head over all Q·C pairs",
            match=self.head_matrix,
            match_flops_per_pair=2.0 * (4 * dim * width + width * last.out_features),
        )
