"""SimCSE checkpoints (Gao et al. 2021), read through the pooler their authors evaluate with.

Supervised SimCSE trained an MLP over [CLS] and copied it into BERT's pooler, so its embedding is
``pooler_output``; unsupervised SimCSE drops the MLP at test time, so its embedding is the [CLS]
vector before the pooler (``cls_before_pooler`` = last_hidden_state[:, 0]). SimCSE's own tool
decides by the name ("unsup" → cls_before_pooler) and so do we; ``--simcse-pooler`` overrides.
MTEB loads sup-SimCSE without the MLP, which is why its numbers for it are lower.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.core.api import MethodContext, MethodSpec, Option, SpecRequest
from harness.core.errors import UserError
from methods.pooling import ViewMethod

DEFAULT_CHECKPOINT = "princeton-nlp/sup-simcse-bert-base-uncased"
POOLERS = ("auto", "pooler", "cls_before_pooler")


def choose_pooler(model: str, requested: str) -> str:
    """``auto``: cls_before_pooler when the checkpoint's name says "unsup", else pooler.

    >>> choose_pooler("princeton-nlp/unsup-simcse-bert-base-uncased", "auto")
    'cls_before_pooler'
    """
    if requested != "auto":
        return requested
    return (
        "cls_before_pooler"
        if "unsup" in Path(model).name.lower() or "unsup" in model.lower()
        else "pooler"
    )


class SimCSE(ViewMethod):
    name = "simcse"
    summary = (
        "a SimCSE checkpoint with its own pooler (sup: pooler, unsup: cls_before_pooler); "
        f"{DEFAULT_CHECKPOINT}"
    )
    options = (
        Option("model", DEFAULT_CHECKPOINT, "SimCSE checkpoint: HF id or local folder"),
        Option(
            "pooler",
            "auto",
            "auto (by name: 'unsup' → cls_before_pooler, else pooler), pooler, cls_before_pooler",
            choices=POOLERS,
        ),
    )

    @classmethod
    def make_spec(cls, request: SpecRequest, ctx: MethodContext) -> MethodSpec:
        spec = super().make_spec(request, ctx)
        model = spec.params["model"]
        revision = request.revision if model == request.backbone else None
        pooler = choose_pooler(model, spec.params["pooler"])
        ref = ctx.backbone(model, revision)
        if pooler == "pooler" and ref.pooler_weights is False:
            raise UserError(
                f"simcse: {model} has no trained pooler weights (pooler.dense.*), so 'pooler' "
                "would read a randomly initialised layer; pass --simcse-pooler cls_before_pooler "
                "(unsupervised SimCSE) or a supervised checkpoint"
            )
        pooling = "pooler" if pooler == "pooler" else "cls"
        return replace(
            spec,
            backbone=model,
            revision=revision,
            pooling=pooling,
            layers=(-1,),
            params={**spec.params, "pooler_used": pooler},
        )

    def label(self) -> str:
        """The checkpoint's own name is the row: two SimCSE checkpoints are two different
        methods."""
        base = f"simcse[{Path(self.spec.params['model']).name}"
        return base + (
            f",{self.spec.params['pooler_used']}]" if self.spec.params["pooler"] != "auto" else "]"
        )
