"""``dse``: Distilled Sentence Embedding (Barkan et al., AAAI 2020).

A sentence encoder (``--backbone``) trained so that the similarity of its embeddings reproduces
the teacher's (the run's ``cross-encoder``) scores of sentence pairs. Training pairs are the STS-B
train pairs (labels unused unless ``--dse-gold-weight``) plus as many shuffled cross-pairs of
fit-set sentences, so the student also sees unrelated pairs. The teacher scores every pair once
(cached). The student pools like microsoft/Distilled-Sentence-Embedding — the mean of its top 4
layers, concatenated, [CLS] excluded — or a plain masked mean (``--dse-pooling mean``).

With ``--dse-objective head`` the similarity is the repo's small head over [u, v, u·v, |u−v|]; the
method then scores pairs with that head (over cached embeddings) instead of cosine.
Each result records the teacher's score on the same task and the relative degradation,
100 · (teacher − student) / teacher: the paper's headline measure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from methods.base import Method, MethodSpec, Option

if TYPE_CHECKING:
    from harness.config import BenchConfig
    from harness.context import RunContext
    from harness.fitsets import FitSet
    from harness.tasks import SplitData
    from methods.cross_encoder import CrossEncoder

DSE_SCHEMA = 1  # bump whenever the training code changes what it produces


class DSE(Method):
    name = "dse"
    summary = "Distilled Sentence Embedding: a sentence encoder trained to reproduce the cross-encoder's pair scores"
    uses_fit_set = True
    post = "dse"
    options = (
        Option("pooling", "top4-concat", "top4-concat (DSE repo: top-k layer means, [CLS] excluded) or mean",
               choices=("top4-concat", "mean")),
        Option("top_k", 4, "layers concatenated by top4-concat (4)", type=int),
        Option("objective", "cosine", "cosine (MSE of cosine vs teacher) or head ([u, v, u·v, |u−v|] head)",
               choices=("cosine", "head")),
        Option("gold_weight", 0.0, "weight of gold/5 on the labelled STS-B train pairs (DSE repo: 0.5)", type=float),
        Option("cross_pairs", 1.0, "shuffled fit-set pairs per STS-B train pair (1.0)", type=float),
        Option("epochs", 1.0, "epochs over the training pairs (1)", type=float),
        Option("lr", 2e-5, "peak learning rate (2e-5)", type=float),
        Option("batch_size", 32, "pairs per batch (32)", type=int),
        Option("max_length", 128, "tokens per sentence in training (128)", type=int),
        Option("precision", "auto", "training precision: auto, fp32, bf16", choices=("auto", "fp32", "bf16")),
    )

    def __init__(self, spec: MethodSpec, ctx: RunContext) -> None:
        super().__init__(spec, ctx)
        self.kind = "pair-scorer" if spec.params["objective"] == "head" else "embedding"
        self._trained: MethodSpec | None = None
        self._head = None
        self._teacher: CrossEncoder | None = None

    @classmethod
    def make_spec(cls, cfg: BenchConfig, ctx: RunContext) -> MethodSpec:
        spec = super().make_spec(cfg, ctx)
        layers_available = ctx.backbone(spec.backbone, spec.revision).num_layers
        if spec.params["pooling"] == "top4-concat" and not 1 <= spec.params["top_k"] <= layers_available:
            from harness.errors import UserError

            raise UserError(f"dse: --dse-top-k {spec.params['top_k']} does not fit {spec.backbone}, which has "
                            f"{layers_available} layers; pass a value from 1 to {layers_available}")
        pooling = "mean_nocls" if spec.params["pooling"] == "top4-concat" else "mean"
        layers = tuple(range(-spec.params["top_k"], 0)) if pooling == "mean_nocls" else (-1,)
        return replace(spec, pooling=pooling, layers=layers, params={**spec.params, "seed": cfg.seed})

    def teacher(self) -> CrossEncoder:
        """The run's cross-encoder configuration (its --cross-encoder-* flags), as the teacher."""
        if self._teacher is None:
            from methods.cross_encoder import CrossEncoder

            self._teacher = CrossEncoder(CrossEncoder.make_spec(self.ctx.cfg, self.ctx), self.ctx)
        return self._teacher

    def training_pairs(self, fit_set: FitSet) -> tuple[list[str], list[str], list[float | None]]:
        """STS-B train pairs (with gold/5) + shuffled cross-pairs of fit-set sentences (no gold)."""
        from harness.tasks import stsb_train_split

        cfg = self.ctx.cfg
        train = stsb_train_split(cfg.source, cfg.senteval_dir, cfg.hub_root)
        s1, s2 = list(train.s1), list(train.s2)
        gold: list[float | None] = [g / 5 for g in train.gold]
        pool = list(fit_set.sentences)
        rng = np.random.default_rng(int(self.spec.params["seed"]))
        n_cross = round(self.spec.params["cross_pairs"] * len(train))
        if n_cross and len(pool) > 1:
            first = rng.integers(0, len(pool), n_cross)
            second = (first + rng.integers(1, len(pool), n_cross)) % len(pool)  # never a sentence with itself
            s1 += [pool[i] for i in first]
            s2 += [pool[i] for i in second]
            gold += [None] * n_cross
        return s1, s2, gold

    def _artifact(self, fit_set: FitSet):
        """The student's cache folder; the key names the teacher without training or running it."""
        from harness.cache import ArtifactDir
        from harness.tasks import fingerprint_pairs

        s1, s2, gold = self.training_pairs(fit_set)
        teacher = self.teacher()
        teacher_id = teacher.artifact()[0].key if teacher.trains else teacher.spec.to_dict()
        base = self.ctx.backbone(self.spec.backbone, self.spec.revision)
        key = {"base": base.key(), "teacher": teacher_id,
               "pairs": fingerprint_pairs(s1, s2, [-1.0 if g is None else g for g in gold], None),
               "params": dict(self.spec.params), "schema": DSE_SCHEMA}
        return ArtifactDir(self.ctx.cache_dir, "dse", key), base, (s1, s2, gold)

    def describe_fit(self, fit_set: FitSet | None) -> str:
        store, _, (s1, _, _) = self._artifact(fit_set)
        if store.complete():
            return "student cached"
        return f"to train on {len(s1)} pairs; teacher: {self.teacher().describe_fit(None)}"

    def fit(self, fit_set: FitSet) -> None:
        if self.fit_info and self.fit_info["fit_set"]["fingerprint"] == fit_set.fingerprint:
            return
        store, base, (s1, s2, gold) = self._artifact(fit_set)
        teacher = self.teacher()
        if store.complete():
            info: dict[str, Any] = {**store.meta()["info"], "loaded_from_cache": True}
        else:
            teacher_scores = teacher.score_pairs(s1, s2)
            info = {**self._train(Path(base.path), store, s1, s2, teacher_scores, gold), "loaded_from_cache": False}
        self._trained = replace(self.spec, backbone=str(store.path("model")), revision=None)
        if self.spec.params["objective"] == "head":
            self._head = self._load_head(store.path("head.safetensors"))
        self.fit_info = {"fit_set": fit_set.describe(), "checkpoint": str(store.path("model")),
                         "teacher": teacher.label(), **info}

    def _train(self, base: Path, store, s1, s2, teacher_scores, gold) -> dict[str, Any]:
        from harness.devices import resolve_device
        from methods.pair_training import StudentConfig, train_student

        p, cfg = self.spec.params, self.ctx.cfg
        config = StudentConfig(pooling=p["pooling"], top_k=p["top_k"], objective=p["objective"],
                               gold_weight=p["gold_weight"], epochs=p["epochs"], lr=p["lr"],
                               batch_size=p["batch_size"], max_length=p["max_length"], precision=p["precision"])
        result, _ = train_student(base, store.dir, s1, s2, teacher_scores.tolist(), gold, config, int(p["seed"]),
                                  resolve_device(cfg.device), cfg.progress)
        self.ctx.count_trained()
        info = {"train_pairs": len(s1), "steps": result.steps, "first_loss": result.first_loss,
                "final_loss": result.last_loss, "train_seconds": round(result.seconds, 2),
                "precision": result.precision}
        store.commit({}, info)
        return info

    def _load_head(self, path: Path):
        from safetensors.torch import load_file

        from methods.pair_training import PairHead

        weights = load_file(str(path))
        head = PairHead(weights["net.0.weight"].shape[1] // 4, weights["net.0.weight"].shape[0])
        head.load_state_dict(weights)
        return head.eval()

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        if self._trained is None:
            raise RuntimeError("dse: fit() must run before encode()")
        from harness.views import View

        provider = self.ctx.views(self._trained)
        layers = [provider.ref.layer_index(layer) for layer in self.spec.layers]
        return np.concatenate([provider.get(sentences, View(self.spec.pooling, layer)) for layer in layers], axis=1)

    def score_pairs(self, s1: Sequence[str], s2: Sequence[str]) -> np.ndarray:
        import torch

        u, v = torch.from_numpy(self.encode(s1)), torch.from_numpy(self.encode(s2))
        with torch.no_grad():
            return self._head(u, v).numpy()

    def annotate(self, split: SplitData, similarity: np.ndarray) -> dict[str, Any]:
        """The teacher's Spearman on the same pairs, same aggregation, and the student's relative
        degradation 100 · (teacher − student) / teacher."""
        from harness.scoring import score_split

        cfg, teacher = self.ctx.cfg, self.teacher()

        def rho(values: np.ndarray) -> float:
            return score_split(values, split.gold, split.subsets, cfg.aggregation, bootstrap=0).spearman

        teacher_rho, student_rho = rho(teacher.score_pairs(split.s1, split.s2)), rho(similarity)
        return {"teacher": {"label": teacher.label(), "checkpoint": str(teacher.checkpoint()),
                            "spearman": teacher_rho,
                            "degradation_pct": 100 * (teacher_rho - student_rho) / teacher_rho}}

    def encoder_impl(self) -> str | None:
        return self.ctx.views(self._trained).impl if self._trained is not None else None
