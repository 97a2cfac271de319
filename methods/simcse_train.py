"""``simcse-train``: unsupervised SimCSE trained here, on any backbone, then evaluated like any
checkpoint (``cls_before_pooler``). The training corpus comes from the fit-set mechanism, so the
same sentences can feed whitening, flow and SimCSE for a like-for-like comparison.

The fine-tuned checkpoint (safetensors + config + tokenizer) is stored in the cache under a key of
the base backbone's fingerprint, the corpus fingerprint, every setting and the seed; a folder
counts as complete only once its meta.json is written, and an interrupted training resumes from
its last saved step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.api import EmbeddingMethod, MethodContext, MethodSpec, Option, SpecRequest
from methods.trained import TRAINING_PRECISION, TrainedMethod

if TYPE_CHECKING:
    from harness.core.artifacts import ArtifactDir
    from harness.core.data.fitsets import FitSet

SIMCSE_TRAIN_SCHEMA = 2  # bump whenever the training code changes what it produces


class SimCSETrain(TrainedMethod, EmbeddingMethod):
    name = "simcse-train"
    summary = (
        "unsupervised SimCSE fine-tuned here on the fit-set sentences, then read as "
        "cls_before_pooler"
    )
    uses_fit_set = True
    pooling = "cls"
    post = "simcse-train"
    artifact_kind = "simcse-train"
    artifact_noun = "fine-tuned checkpoint"
    options = (
        Option(
            "corpus",
            "heldout",
            "training sentences: a fit set (heldout, train, corpus:FILE, nli, wiki1m:FILE; "
            "target/test hold the scored sentences and mark the score transductive)",
            in_label=False,
        ),
        Option("temperature", 0.05, "softmax temperature τ (0.05)", type=float),
        Option("lr", 3e-5, "peak learning rate, linear decay to 0 (3e-5)", type=float),
        Option("batch_size", 64, "sentences per batch (64)", type=int),
        Option("max_length", 32, "training truncation in tokens (32)", type=int),
        Option("epochs", 1.0, "epochs over the corpus (1)", type=float),
        Option(
            "select_every",
            0,
            "every N steps score STS-B dev and keep the best weights (SimCSE: 125; 0 = keep "
            "the last step)",
            type=int,
        ),
        TRAINING_PRECISION,
    )

    def __init__(self, spec: MethodSpec, ctx: MethodContext) -> None:
        super().__init__(spec, ctx)
        self._trained: MethodSpec | None = None

    @classmethod
    def make_spec(cls, request: SpecRequest, ctx: MethodContext) -> MethodSpec:
        spec = super().make_spec(request, ctx)
        return replace(spec, params={**spec.params, "seed": request.seed})

    def fit_set_name(self) -> str:
        return self.spec.params["corpus"]

    def _config(self):
        from methods.training.simcse_loop import SimCSEConfig

        return self.options_into(SimCSEConfig, eval_max_length=self.spec.max_length)

    # needs one: uses_fit_set
    def artifact_key(self, fit_set: FitSet) -> dict[str, Any]:  # type: ignore[override]
        base = self.ctx.backbone(self.spec.backbone, self.spec.revision)
        return {
            "base": base.key(),
            "corpus": fit_set.fingerprint,
            "params": dict(self.spec.params),
            "schema": SIMCSE_TRAIN_SCHEMA,
        }

    # needs one: uses_fit_set
    def training_plan(self, fit_set: FitSet) -> str:  # type: ignore[override]
        steps = -(
            -int(self.spec.params["epochs"] * len(fit_set.sentences))
            // self.spec.params["batch_size"]
        )
        return f"to train: ~{steps} SimCSE steps on {len(fit_set.sentences)} sentences"

    def fit_details(self, folder: ArtifactDir) -> dict[str, Any]:
        return {"checkpoint": str(folder.path("model"))}

    def load(self, folder: ArtifactDir, info: dict[str, Any]) -> None:
        self._trained = replace(self.spec, backbone=str(folder.path("model")), revision=None)

    def train(
        self,
        folder: ArtifactDir,
        fit_set: FitSet,  # type: ignore[override]  # needs one: uses_fit_set
    ) -> tuple[dict[str, bytes], dict[str, Any]]:
        from pathlib import Path

        from methods.training.simcse_loop import SimCSETrainer

        base = self.ctx.backbone(self.spec.backbone, self.spec.revision)
        trainer = SimCSETrainer(
            Path(base.path),
            folder.dir,
            self._config(),
            int(self.spec.params["seed"]),
            device=self.ctx.encode.device_now(),
            progress=self.ctx.encode.progress,
        )
        dev = None
        if self.spec.params["select_every"]:
            split = self.ctx.task_split("stsb", "dev")
            dev = (split.s1, split.s2, split.gold)
        result = trainer.train(list(fit_set.sentences), dev)
        info = {
            "steps": result.steps,
            "first_loss": result.first_loss,
            "final_loss": result.last_loss,
            "train_seconds": round(result.seconds, 2),
            "sentences_per_second": round(result.items_per_second, 2),
            "resumed_from_step": result.resumed_from_step,
            "precision": result.precision,
            "recipe": {**result.recipe, "temperature": self.spec.params["temperature"]},
            "selection": result.selection,
        }
        return {}, info  # the checkpoint files are in place: meta.json marks the folder complete

    def encoder_impl(self) -> str | None:
        return self.ctx.views(self._trained).impl if self._trained is not None else None

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        if self._trained is None:
            raise RuntimeError("simcse-train: fit() must run before encode()")
        from harness.core.encoding import View

        provider = self.ctx.views(self._trained)
        last = provider.ref.layer_index(-1)
        return provider.get(sentences, View("cls", last))
