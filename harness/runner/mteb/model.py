"""Any sts-bench method as an MTEB model, for ``mteb.evaluate`` on any MTEB task::

    import mteb, harness
    model = harness.mteb_model("whitening", backbone="bert-base-uncased", k=256)
    mteb.evaluate(model, mteb.get_tasks(tasks=["STS17", "BIOSSES"]))

Method options go by their option names (``k``, ``view``, ``levels``... as in ``--list``), with the
CLI's defaults; run-wide settings (``device``, ``dtype``, ``max_length``, ``cache_dir``,
``first_last_layers``, ``seed``, ``hub_root``...) go in ``settings`` under their config names.
The method is built exactly as a run builds it (a ``SpecRequest`` and a ``RunContext``), so the
embedding cache, trained artifacts and every protocol choice are shared with the CLI.

Methods that fit (whitening, flow, DSE, simcse-train) fit per MTEB task on their fit set, as in a
run: ``fit_set="target"`` (the default) is every sentence of every split of the task being
evaluated; ``heldout``, ``test``, ``train`` likewise; ``corpus:FILE``, ``nli`` or a list of
sentences are one fit set for all tasks. The task's data is the task object the caller lists in
``tasks`` (its data loaded, or set directly as MTEB's tests do), or else MTEB's task of that name
loaded through the ``mteb`` source (MTEB's pinned revision, or ``settings["hub_root"]``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np
from mteb.models.abs_encoder import AbsEncoder

from harness.core.api import EmbeddingMethod
from harness.core.errors import UserError, did_you_mean
from harness.runner.execution.context import RunContext
from harness.runner.settings.config import BenchConfig

if TYPE_CHECKING:
    from mteb.models.model_meta import ModelMeta

    from harness.core.data.fitsets import FitSet
    from harness.core.data.splits import LoadedTask

# Fit sets that do not depend on the task: fitted once for every task.
TASK_FREE = ("corpus:", "wiki1m:", "nli")


def _config(method: str, backbone: str, fit_set: str, settings: Mapping[str, Any],
            options: dict[str, Any]) -> BenchConfig:
    from harness.runner.settings.validate import check_method_params

    # What MTEB decides (tasks and their data) or mteb_model's own arguments decide is not a setting.
    names = {f.name for f in fields(BenchConfig)} - {"methods", "tasks", "source", "backbone", "fit_set",
                                                      "method_params", "history", "dry_run", "baseline", "paper",
                                                      "explicit"}
    for key in settings:
        if key not in names:
            raise UserError(f"mteb_model: unknown setting '{key}'{did_you_mean(key, sorted(names))}; method options "
                            "go as keyword arguments, run-wide settings in settings={...}")
    from methods import method_name

    method = method_name(method)  # a plugin by reference (x.py:Class): its options go by its name
    options = check_method_params({method: options}, "mteb_model")[method]
    cfg = replace(BenchConfig(progress=False, plots=False), **{**dict(settings), "methods": (method,), "source": "mteb",
                                                                 "backbone": backbone, "fit_set": fit_set,
                                                                 "method_params": {method: dict(options)}})
    from harness.runner.execution.preflight import applied_max_length

    cfg = cfg.validate()
    return replace(cfg, max_length=applied_max_length(cfg))  # as a run applies it: capped at the model's reach


def mteb_model(method: str, backbone: str = "minilm", *, fit_set: str | Sequence[str] = "target",
               tasks: Iterable[Any] = (), settings: Mapping[str, Any] | None = None, **options: Any) -> MtebEncoder:
    """An MTEB encoder (``mteb.EncoderProtocol``) computing ``method`` on ``backbone``; see the module
    docstring. ``fit_set`` may also be a list of sentences."""
    from harness.core.data.fitsets import make_fit_set

    custom = None
    if not isinstance(fit_set, str):
        sentences = list(dict.fromkeys(str(s).strip() for s in fit_set if str(s).strip()))
        if not sentences:
            raise UserError("mteb_model: fit_set holds no sentence")
        custom = make_fit_set("sentences", sentences, f"{len(sentences)} sentences given to mteb_model")
    cfg = _config(method, backbone, fit_set if isinstance(fit_set, str) else "target", settings or {}, options)
    return MtebEncoder(cfg, custom, tasks)


class MtebEncoder(AbsEncoder):
    """One sts-bench method behind MTEB's encoder protocol: ``encode`` a DataLoader of texts to float32."""

    def __init__(self, cfg: BenchConfig, custom_fit_set: FitSet | None = None, tasks: Iterable[Any] = ()) -> None:
        self.cfg = cfg
        self.ctx = RunContext(cfg)
        method = self.ctx.sibling(cfg.methods[0])
        if not isinstance(method, EmbeddingMethod):
            raise UserError(f"{method.name} scores pairs and embeds no sentence; MTEB evaluates it as a "
                            "cross-encoder, which this wrapper does not offer: use an embedding method")
        self.method: EmbeddingMethod = method
        self._custom = custom_fit_set
        self._tasks = {task.metadata.name: task for task in tasks}
        self._fitted_on: str | None = None  # the task (or "*" for a task-free fit set) the method is fitted for

    @property
    def mteb_model_meta(self) -> ModelMeta:  # type: ignore[override]  # AbsEncoder's is a settable attribute
        from mteb.models.model_meta import ModelMeta, ScoringFunction

        from harness.runner.records.mteb_files import model_identity

        spec = self.method.spec
        weights = None if spec.backbone == "none" else {"fingerprint": self.ctx.backbone(spec.backbone,
                                                                                        spec.revision).fingerprint}
        name, revision = model_identity(self.method.label(), spec.to_dict(), weights, self.protocol())
        return ModelMeta.create_empty(overwrites={
            "name": name, "revision": revision, "similarity_fn_name": ScoringFunction.COSINE,
            "framework": ["PyTorch"], "max_tokens": spec.max_length, "adapted_from": self.cfg.backbone,
            "use_instructions": False, "modalities": ["text"]})

    def protocol(self) -> dict[str, Any]:
        """The run-wide settings that shape this model's vectors, as a result record states them."""
        protocol = self.cfg.protocol()
        protocol["fit_set"] = self.fit_set_name() if self.method.uses_fit_set else None
        return protocol

    def fit_set_name(self) -> str:
        return self._custom.name if self._custom is not None else self.method.fit_set_name()

    def encode(self, inputs: Any, *, task_metadata: Any, hf_split: str, hf_subset: str, prompt_type: Any = None,
               **kwargs: Any) -> np.ndarray:
        """Float32 (n, d) vectors of every text in ``inputs``, in order (MTEB's prompts do not apply:
        sts-bench methods take no instruction)."""
        texts = [str(text) for batch in inputs for text in batch["text"]]
        if self.method.uses_fit_set:
            self._fit_for(task_metadata.name)
        return np.asarray(self.method.encode(texts), dtype=np.float32)

    def _fit_for(self, task_name: str) -> None:
        from harness.core.data.fitsets import build_fit_set

        name = self.fit_set_name()
        task_free = self._custom is not None or name.startswith(TASK_FREE)
        key = "*" if task_free else task_name
        if self._fitted_on == key:
            return
        fit_set = self._custom or build_fit_set(name, self._task_data(task_name), self.cfg.hub_root)
        self.method.fit(fit_set)
        self._fitted_on = key

    def _task_data(self, task_name: str) -> LoadedTask:
        """The evaluated task's data: the task object the caller gave, or MTEB's task loaded by name."""
        from harness.core.data.fitsets import splits_needed
        from harness.core.data.sources.mteb_tasks import loaded_task
        from harness.core.data.splits import unique
        from harness.core.data.tasks import get_task, load_task

        if task_name in self._tasks:
            return loaded_task(self._tasks[task_name])
        spec = get_task(task_name, "mteb")
        splits = unique([spec.eval_split, *splits_needed(self.fit_set_name(), spec)])
        return load_task(spec, "mteb", splits, hub_root=self.cfg.hub_root)
