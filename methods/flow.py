"""BERT-flow (Li et al. 2020): a Glow normalizing flow fit on pooled sentence vectors; the
embedding is the flow's latent z, compared by cosine.

Fitting runs on the *cached* (dropout-free) vectors of the fit set: cheap, and the flow sees
exactly the vectors it will transform at test time. The original code kept BERT's dropout on
while fitting; ``--flow-fit-dropout`` does that (it re-encodes the fit set every epoch).
Trained weights are stored as safetensors in the cache, keyed on the view cache keys, the fit
set's fingerprint, every flow setting and the seed, so a re-run loads instead of training.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.api import MethodContext, MethodSpec, Option, SpecRequest
from harness.core.errors import UserError
from methods.pooling import BASE_VIEWS, SAME, PostProcessor
from methods.trained import TrainedMethod

if TYPE_CHECKING:
    from harness.core.artifacts import ArtifactDir
    from harness.core.data.fitsets import FitSet

FLOW_SCHEMA = 1  # bump whenever the training code changes what it produces


def _flag(text: str) -> bool:
    return str(text).lower() in ("1", "true", "yes", "on")


class BertFlow(TrainedMethod, PostProcessor):
    name = "flow"
    summary = "BERT-flow: Glow flow fit on --fit-set, cosine on the latent z (Li et al. 2020)"
    post = "flow"
    artifact_kind = "flows"
    artifact_noun = "flow weights"
    options = (
        Option("view", "first-last", "pooled view the flow transforms", choices=BASE_VIEWS),
        Option("levels", 2, "multi-scale levels (paper Table 7: 2)", type=int),
        Option("depth", 3, "flow steps per level (3)", type=int),
        Option("width", 32, "hidden width of the coupling network (32)", type=int),
        Option(
            "coupling", "additive", "additive or affine coupling", choices=("additive", "affine")
        ),
        Option(
            "mixing",
            "permute",
            "channel mixing: permute (BERT-flow) or conv1x1 (Glow)",
            choices=("permute", "conv1x1"),
        ),
        Option(
            "lr",
            1e-3,
            "constant learning rate (1e-3; BERT-flow's NLI setting used 2e-5)",
            type=float,
        ),
        Option("batch_size", 32, "fit batch size (32)", type=int),
        Option(
            "epochs",
            1.0,
            "epochs over the fit set; fractions allowed (NLI setting: 0.15)",
            type=float,
        ),
        Option(
            "batches",
            "sentences",
            "sentences (batches of fit-set sentences) or pairs (BERT-flow's code: "
            "batches of pairs, loss = side a + side b, remainder dropped)",
            choices=("sentences", "pairs"),
        ),
        Option(
            "fit_dropout",
            False,
            "fit on vectors encoded with the backbone's dropout on, re-encoded every "
            "epoch (the original's behaviour; slow)",
            type=_flag,
        ),
    )

    def __init__(self, spec: MethodSpec, ctx: MethodContext) -> None:
        super().__init__(spec, ctx)
        self._flow = None
        self._weights: bytes | None = None
        self._dim = 0

    @classmethod
    def make_spec(cls, request: SpecRequest, ctx: MethodContext) -> MethodSpec:
        spec = super().make_spec(request, ctx)
        if spec.params["prompt2"] not in (SAME, spec.params["prompt"]):
            raise UserError(
                "flow: prompt2 (a second prompt for the second sentence of each pair) is not "
                "supported: the flow fits one distribution of vectors; give both sides one --set "
                "flow.prompt=..."
            )
        return replace(spec, params={**spec.params, "seed": request.seed})

    def _config(self):
        from methods.training.flow_fit import FlowConfig

        return self.options_into(FlowConfig)

    # needs one: uses_fit_set
    def artifact_key(self, fit_set: FitSet) -> dict[str, Any]:  # type: ignore[override]
        provider = self.ctx.views(self.spec)
        return {
            "views": [provider.cache_key(v) for v in self.backbone_views()],
            "fit_set": fit_set.fingerprint,
            "params": dict(self.spec.params),
            "flow_schema": FLOW_SCHEMA,
        }

    # needs one: uses_fit_set
    def training_plan(self, fit_set: FitSet) -> str:  # type: ignore[override]
        p = self.spec.params
        if p["batches"] == "pairs":
            return (
                f"to train: ~{int(p['epochs'] * len(fit_set.pairs) / p['batch_size'])} flow steps "
                f"on {len(fit_set.pairs)} pairs"
            )
        steps = -(-int(p["epochs"] * len(fit_set.sentences)) // p["batch_size"])
        return f"to train: ~{steps} flow steps on {len(fit_set.sentences)} sentences"

    def fit_details(self, folder: ArtifactDir) -> dict[str, Any]:
        return {"weights": str(folder.dir)}

    def load(self, folder: ArtifactDir, info: dict[str, Any]) -> None:
        # The weights' bytes, checked against meta.json as they are read; the torch module is built
        # only when latents are not already cached (_model), so a warm run never imports torch.
        self._weights = folder.read("flow.safetensors")
        self._dim = int(info["dim"])
        self._flow = None

    def _model(self):
        if self._flow is None:
            from safetensors.torch import load

            flow = self._config().build(self._dim, int(self.spec.params["seed"]))
            # set by load(), which fit() ran
            flow.load_state_dict(load(self._weights))  # type: ignore[arg-type]
            self._flow = flow.eval()
        return self._flow

    def train(
        self,
        folder: ArtifactDir,
        fit_set: FitSet,  # type: ignore[override]  # needs one: uses_fit_set
    ) -> tuple[dict[str, bytes], dict[str, Any]]:
        from safetensors.torch import save

        from methods.training.flow_fit import train_flow

        config, seed = self._config(), int(self.spec.params["seed"])
        sentences, pairs = list(fit_set.sentences), None
        if self.spec.params["batches"] == "pairs":
            if not fit_set.pairs:
                raise UserError(
                    "--flow-batches pairs needs a fit set made of pairs (target, target-pairs, "
                    f"train, test, nli); '{fit_set.name}' is a plain list of sentences"
                )
            sentences = list(dict.fromkeys(s for pair in fit_set.pairs for s in pair))
            row = {s: i for i, s in enumerate(sentences)}
            pairs = (
                np.array([row[a] for a, _ in fit_set.pairs]),
                np.array([row[b] for _, b in fit_set.pairs]),
            )
        if self.spec.params["fit_dropout"]:
            provider, views = self.ctx.views(self.spec), self.backbone_views()

            def epoch_vectors(epoch: int) -> np.ndarray:
                arrays = provider.with_dropout(sentences, views, seed + epoch)
                return np.mean([arrays[v] for v in views], axis=0)
        else:
            cached = self.pooled(sentences)

            def epoch_vectors(epoch: int) -> np.ndarray:
                return cached

        dim = self.ctx.backbone(self.spec.backbone, self.spec.revision).hidden_size
        if not self.spec.params["fit_dropout"]:
            # the view's own width (OPT-350m projects its last layer to 512)
            dim = int(cached.shape[1])
        flow, stats = train_flow(
            epoch_vectors,
            dim,
            len(sentences),
            config,
            seed,
            progress=self.ctx.encode.progress,
            pairs=pairs,
        )
        if (
            not math.isfinite(stats.last_bits_per_dim)
            or stats.last_bits_per_dim > stats.first_bits_per_dim + 1.0
        ):
            # A diverged flow still yields latents, and a meaningless score; refuse it (and cache
            # nothing).
            raise UserError(
                f"flow: the fit on fit set '{fit_set.name}' diverged (bits/dim "
                f"{stats.first_bits_per_dim:.2f} -> {stats.last_bits_per_dim:.2f}); lower "
                f"--flow-lr (currently {config.lr:g}; --flow-mixing conv1x1 at {dim} dims needs "
                "about 1e-4)"
            )
        info = {
            "dim": dim,
            "steps": stats.steps,
            "first_bits_per_dim": stats.first_bits_per_dim,
            "final_bits_per_dim": stats.last_bits_per_dim,
            "train_seconds": round(stats.seconds, 3),
            "fit_dropout": bool(self.spec.params["fit_dropout"]),
            "recipe": stats.recipe,
        }
        weights = {k: v.contiguous() for k, v in flow.state_dict().items()}
        return {"flow.safetensors": save(weights)}, info

    def transform(self, x: np.ndarray) -> np.ndarray:
        """The latents z of the pooled vectors, memoised in the cache by the content of the weights
        and of the vectors (a warm re-run reads them instead of building the flow in torch)."""
        if self._weights is None:
            raise RuntimeError("flow: fit() must run before encode()")
        import hashlib

        from harness.core.hashing import npy_bytes

        x = np.ascontiguousarray(x, dtype=np.float32)
        folder = self.ctx.artifacts.folder(
            "flow-latents",
            {
                "weights": hashlib.sha256(self._weights).hexdigest(),
                "vectors": hashlib.sha256(x.tobytes()).hexdigest(),
                "shape": list(x.shape),
                "flow_schema": FLOW_SCHEMA,
            },
            code=self.code(),
        )
        if folder.complete():  # every file checked against its sha256
            z = np.load(folder.path("z.npy"), allow_pickle=False)
            if z.shape == x.shape and z.dtype == np.float32:  # a flow keeps the dimension
                return z
        from methods.training.flow_fit import latents

        z = latents(self._model(), x)
        folder.commit({"z.npy": npy_bytes(z)}, {})
        return z
