"""One base for methods that train an artifact (flow, simcse-train, cross-encoder, dse).

The sequence is the same for all of them, so it lives here once:

    key → folder in the artifact store → complete and every checksum right? load it
        : (discard a damaged folder with one warning) train (resumable) → save → checksum
          → mark complete → load

A subclass says only what differs: its artifact key, how to train into the folder, how to load
from it, and a line for ``--dry-run``. Fitting twice on the same fit set is a no-op, and loading
right after training reads back exactly what the next run will read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from harness.core.api import Method, MethodContext, MethodSpec, Option
from harness.core.artifacts import ArtifactCorrupt

if TYPE_CHECKING:
    from harness.core.artifacts import ArtifactDir
    from harness.core.data.fitsets import FitSet

# The option of every method that fine-tunes a transformer here (the training loops'
# methods.training.loop.resolve_precision reads it).
TRAINING_PRECISION = Option(
    "precision",
    "auto",
    "training precision: auto (bf16 autocast where the hardware has it), fp32, bf16",
    choices=("auto", "fp32", "bf16"),
)


class TrainedMethod(Method):
    artifact_kind: ClassVar[str]  # the artifact store's folder for this kind ("flows", "dse", ...)
    artifact_noun: ClassVar[str]  # what ``--dry-run`` calls a cached artifact ("flow weights")

    def __init__(self, spec: MethodSpec, ctx: MethodContext) -> None:
        super().__init__(spec, ctx)
        self._fitted_on: str | None = None  # fingerprint of the fit set of the loaded artifact

    # -- what a subclass defines --------------------------------------------------------------
    # fit_set is None for a method that trains on fixed data (the cross-encoder). A method that fits
    # on one (uses_fit_set: the runner then always passes one) takes `fit_set: FitSet` in its hooks,
    # with `# type: ignore[override]`: narrowing the type by an assert or a helper would change its
    # code, and so the cache key of everything it trained (harness.core.codekeys).
    def artifact_key(self, fit_set: FitSet | None) -> dict[str, Any]:
        """Everything that changes the trained artifact (inputs, settings, seed, a schema
        number)."""
        raise NotImplementedError

    def train(
        self, folder: ArtifactDir, fit_set: FitSet | None
    ) -> tuple[dict[str, bytes], dict[str, Any]]:
        """Train, writing large files straight into ``folder.dir``; return the small files to commit
        and the facts to record (steps, losses, seconds...)."""
        raise NotImplementedError

    def load(self, folder: ArtifactDir, info: dict[str, Any]) -> None:
        """Make the method usable from a complete folder."""
        raise NotImplementedError

    def training_plan(self, fit_set: FitSet | None) -> str:
        """For ``--dry-run``: what training will do."""
        raise NotImplementedError

    def fit_details(self, folder: ArtifactDir) -> dict[str, Any]:
        """Extra fields of the result record's ``fit`` entry (e.g. the checkpoint's folder)."""
        return {"artifact": str(folder.dir)}

    # -- the shared sequence --------------------------------------------------------------------
    def artifact(self, fit_set: FitSet | None) -> ArtifactDir:
        return self.ctx.artifacts.folder(
            self.artifact_kind, self.artifact_key(fit_set), code=self.code()
        )

    def describe_fit(self, fit_set: FitSet | None) -> str:
        return (
            f"{self.artifact_noun} cached"
            if self.artifact(fit_set).complete()
            else self.training_plan(fit_set)
        )

    def fit(self, fit_set: FitSet | None) -> None:
        marker = fit_set.fingerprint if fit_set is not None else ""
        if self._fitted_on == marker:
            return  # already fitted on exactly these sentences (e.g. a corpus shared by all tasks)
        folder = self.artifact(fit_set)
        intact, problem = folder.verify()  # sha256 of every file against meta.json
        if problem:
            folder.discard(problem)  # one warning line; trained again below, never loaded
        info = None
        if intact:
            info = {**folder.meta()["info"], "loaded_from_cache": True}
            try:
                self.load(folder, info)
            except ArtifactCorrupt as err:  # changed between the check and the read
                folder.discard(str(err))
                info = None
        if info is None:
            files, trained = self.train(folder, fit_set)
            folder.commit(files, trained)
            self.ctx.count_trained()
            info = {**trained, "loaded_from_cache": False}
            self.load(folder, info)
        described = {"fit_set": fit_set.describe()} if fit_set is not None else {}
        self.fit_info = {**described, **self.fit_details(folder), **info}
        self._fitted_on = marker
