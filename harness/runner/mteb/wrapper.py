"""The MTEB encoder behind :func:`harness.runner.mteb.model.mteb_model`: one sts-bench method behind
MTEB's encoder protocol, its ``ModelMeta`` (hub id, embedding dimension, parameter count) and
:meth:`MtebEncoder.evaluate`, ``mteb.evaluate`` with MTEB's and the datasets library's caches under
the cache folder the caller chose. Imports mteb (seconds): imported only when a model is made."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from mteb.models.abs_encoder import AbsEncoder

from harness.core.api import EmbeddingMethod
from harness.core.data.hf_places import caches_under, describe
from harness.core.errors import UserError, spelled
from harness.runner.execution.context import RunContext
from harness.runner.mteb.spelling import PYTHON_NAMES
from harness.runner.settings.config import BenchConfig
from harness.runner.settings.console import say

if TYPE_CHECKING:
    from mteb.models.model_meta import ModelMeta
    from mteb.results import ModelResult

    from harness.core.data.fitsets import FitSet
    from harness.core.data.splits import LoadedTask

# Fit sets that do not depend on the task: fitted once for every task.
TASK_FREE = ("corpus:", "wiki1m:", "nli")
# Encoded to learn the embedding dimension when no task's sentence is at hand.
PROBE = "a sentence"


class MtebEncoder(AbsEncoder):
    """One sts-bench method behind MTEB's encoder protocol: ``encode`` a DataLoader of texts to
    float32."""

    def __init__(
        self, cfg: BenchConfig, custom_fit_set: FitSet | None = None, tasks: Iterable[Any] = ()
    ) -> None:
        self.cfg = cfg
        self.ctx = RunContext(cfg)
        method = self.ctx.sibling(cfg.methods[0])
        if not isinstance(method, EmbeddingMethod):
            raise UserError(
                f"{method.name} scores pairs and embeds no sentence; MTEB evaluates it as a "
                "cross-encoder, which this wrapper does not offer: use an embedding method"
            )
        self.method: EmbeddingMethod = method
        if method.reads_backbone():  # a missing model fails here, not in mteb.evaluate
            self.ctx.backbone(method.spec.backbone, method.spec.revision)
        self._custom = custom_fit_set
        self._tasks = {task.metadata.name: task for task in tasks}
        # the task (or "*" for a task-free fit set) the method is fitted for
        self._fitted_on: str | None = None
        self._dim: int | None = None  # the width of the vectors, once encoded
        self._n_parameters: int | None = None

    @property
    # AbsEncoder's is a settable attribute
    def mteb_model_meta(self) -> ModelMeta:  # type: ignore[override]
        """MTEB's description of this model: its sts-bench identity (the folder a run writes its
        results to), the hub id of the weights where known (``adapted_from``), the width of its
        vectors (``embed_dim``) and the backbone's parameter count (a fitted transform's are not
        counted: MTEB's ``n_parameters`` is the model's size)."""
        from mteb.models.model_meta import ModelMeta, ScoringFunction

        from harness.runner.records.mteb_files import model_identity

        spec = self.method.spec
        reads = self.method.reads_backbone()
        ref = self.ctx.backbone(spec.backbone, spec.revision) if reads else None
        weights = None if ref is None else {"fingerprint": ref.fingerprint}
        name, revision = model_identity(
            self.method.label(), spec.to_dict(), weights, self.protocol()
        )
        if ref is not None and self._n_parameters is None:
            self._n_parameters = ref.parameter_count()
        return ModelMeta.create_empty(
            overwrites={
                "name": name,
                "revision": revision,
                "similarity_fn_name": ScoringFunction.COSINE,
                "framework": ["PyTorch"],
                "max_tokens": spec.max_length,
                "use_instructions": False,
                "adapted_from": None if ref is None else ref.hub_id(),
                "embed_dim": self.embed_dim(),
                "n_parameters": self._n_parameters,
                "modalities": ["text"],
            }
        )

    def embed_dim(self) -> int | None:
        """The width of this method's vectors, measured by encoding one sentence: a sentence of the
        first task given (its vector is needed anyway, so it comes from the cache), else a probe. A
        method that fits on the evaluated task's sentences, given no task, cannot encode before
        ``mteb.evaluate`` names one: None until then."""
        if self._dim is None:
            # A task object whose data MTEB has not loaded yet (it loads it after reading this) is
            # no help.
            given = next(
                (
                    name
                    for name, task in self._tasks.items()
                    if task.data_loaded or task.dataset is not None
                ),
                None,
            )
            if self.method.uses_fit_set and self._fitted_on is None:
                if (
                    self._custom is None
                    and not self.fit_set_name().startswith(TASK_FREE)
                    and given is None
                ):
                    return None
                self._fit_for(given or "*")
            sentence = self._task_data(given).eval.s1[0] if given is not None else PROBE
            with spelled(PYTHON_NAMES), caches_under(self.ctx.artifacts):
                self._dim = int(np.asarray(self.method.encode([sentence])).shape[1])
        return self._dim

    def protocol(self) -> dict[str, Any]:
        """The run-wide settings that shape this model's vectors, as a result record states them."""
        protocol = self.cfg.protocol()
        protocol["fit_set"] = self.fit_set_name() if self.method.uses_fit_set else None
        return protocol

    def fit_set_name(self) -> str:
        return self._custom.name if self._custom is not None else self.method.fit_set_name()

    def encode(
        self,
        inputs: Any,
        *,
        task_metadata: Any,
        hf_split: str,
        hf_subset: str,
        prompt_type: Any = None,
        **kwargs: Any,
    ) -> np.ndarray:
        """Float32 (n, d) vectors of every text in ``inputs``, in order (MTEB's prompts do not
        apply: sts-bench methods take no instruction)."""
        texts = [str(text) for batch in inputs for text in batch["text"]]
        with spelled(PYTHON_NAMES), caches_under(self.ctx.artifacts):
            if self.method.uses_fit_set:
                self._fit_for(task_metadata.name)
            vectors = np.asarray(self.method.encode(texts), dtype=np.float32)
        self._dim = vectors.shape[1] if vectors.ndim == 2 else self._dim
        return vectors

    def evaluate(self, tasks: str | Any | Sequence[str | Any], **kwargs: Any) -> ModelResult:
        """``mteb.evaluate(self, tasks, **kwargs)`` with MTEB's result cache and the datasets cache
        under this model's ``cache_dir`` (one line says where; ``cache=`` passed here wins). A task
        may be named: it is MTEB's task of that name, read from ``settings["hub_root"]``'s local
        files when set (or ``settings["data_dir"]``'s ``mteb`` or ``hub`` entry, as ``--source
        mteb --hub-root`` reads it), else loaded by MTEB."""
        import mteb

        from harness.core.data.sources.mteb_tasks import loaded_mteb_task

        listed = (
            [tasks] if isinstance(tasks, str) or not isinstance(tasks, Sequence) else list(tasks)
        )
        with spelled(PYTHON_NAMES), caches_under(self.ctx.artifacts) as places:
            say(describe(places))
            objects = [
                loaded_mteb_task(t, self._location()) if isinstance(t, str) else t for t in listed
            ]
            self._tasks.update({task.metadata.name: task for task in objects})
            if "cache" not in kwargs:
                kwargs["cache"] = mteb.ResultCache(places["MTEB_CACHE"])
                say(f"mteb: results in {kwargs['cache'].cache_path / 'results'}")
            return mteb.evaluate(self, objects, **kwargs)

    def _fit_for(self, task_name: str) -> None:
        from harness.core.data.fitsets import build_fit_set

        name = self.fit_set_name()
        task_free = self._custom is not None or name.startswith(TASK_FREE)
        key = "*" if task_free else task_name
        if self._fitted_on == key:
            return
        with spelled(PYTHON_NAMES), caches_under(self.ctx.artifacts):
            fit_set = self._custom or build_fit_set(
                name, self._task_data(task_name), self.cfg.locations()
            )
        self.method.fit(fit_set)
        self._fitted_on = key

    def _task_data(self, task_name: str) -> LoadedTask:
        """The evaluated task's data: the task object the caller gave, or MTEB's task loaded by
        name."""
        from harness.core.data.fitsets import splits_needed
        from harness.core.data.sources.mteb_tasks import loaded_task
        from harness.core.data.splits import unique
        from harness.core.data.tasks import get_task, load_task

        if task_name in self._tasks:
            return loaded_task(self._tasks[task_name])
        spec = get_task(task_name, "mteb")
        splits = unique([spec.eval_split, *splits_needed(self.fit_set_name(), spec)])
        with spelled(PYTHON_NAMES), caches_under(self.ctx.artifacts):
            return load_task(spec, "mteb", splits, locations=self.cfg.locations())

    def _location(self) -> str | None:
        """Where the mteb source reads tasks: ``settings["data_dir"]["mteb"]``, else the hub's
        (``settings["hub_root"]``); None: MTEB loads them."""
        from harness.core.data.sources import SOURCES

        return SOURCES["mteb"].location_in(self.cfg.locations())
