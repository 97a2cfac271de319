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

from harness.core.errors import UserError, did_you_mean, spelled
from harness.runner.mteb.spelling import PYTHON_NAMES
from harness.runner.settings.config import BenchConfig

if TYPE_CHECKING:
    from harness.runner.mteb.wrapper import MtebEncoder


def _config(
    method: str, backbone: str, fit_set: str, settings: Mapping[str, Any], options: dict[str, Any]
) -> BenchConfig:
    from harness.runner.settings.validate import check_method_params

    # What MTEB decides (tasks and their data) or mteb_model's own arguments decide is not a
    # setting.
    names = {f.name for f in fields(BenchConfig)} - {
        "methods",
        "tasks",
        "source",
        "backbone",
        "fit_set",
        "method_params",
        "history",
        "dry_run",
        "baseline",
        "paper",
        "explicit",
        "dtype_picked",
    }
    for key in settings:
        if key not in names:
            raise UserError(
                f"mteb_model: unknown setting '{key}'{did_you_mean(key, sorted(names))}; method "
                "options go as keyword arguments, run-wide settings in settings={...}"
            )
    from methods import method_name

    method = method_name(method)  # a plugin by reference (x.py:Class): its options go by its name
    options = check_method_params({method: options}, "mteb_model")[method]
    cfg = replace(
        BenchConfig(progress=False, plots=False),
        **{
            **dict(settings),
            "methods": (method,),
            "source": "mteb",
            "backbone": backbone,
            "fit_set": fit_set,
            "method_params": {method: dict(options)},
        },
    )
    from harness.runner.execution.preflight import applied_dtype, applied_max_length

    cfg = cfg.validate()
    # as a run applies them: capped at the model's reach, --dtype fastest made concrete
    return applied_dtype(replace(cfg, max_length=applied_max_length(cfg)))


def mteb_model(
    method: str,
    backbone: str = "minilm",
    *,
    fit_set: str | Sequence[str] = "target",
    tasks: Iterable[Any] = (),
    settings: Mapping[str, Any] | None = None,
    **options: Any,
) -> MtebEncoder:
    """An MTEB encoder (``mteb.EncoderProtocol``) computing ``method`` on ``backbone``; see the
    module docstring. ``fit_set`` may also be a list of sentences."""
    from harness.core.artifacts import ArtifactStore
    from harness.core.data.fitsets import make_fit_set
    from harness.core.data.hf_places import caches_under

    with spelled(PYTHON_NAMES):
        custom = None
        if not isinstance(fit_set, str):
            sentences = list(dict.fromkeys(str(s).strip() for s in fit_set if str(s).strip()))
            if not sentences:
                raise UserError("mteb_model: fit_set holds no sentence")
            custom = make_fit_set(
                "sentences", sentences, f"{len(sentences)} sentences given to mteb_model"
            )
        cfg = _config(
            method,
            backbone,
            fit_set if isinstance(fit_set, str) else "target",
            settings or {},
            options,
        )
        # mteb imported here for the first time makes its default result cache under cache_dir, not
        # ~/.cache/mteb.
        with caches_under(ArtifactStore(cfg.cache_dir)):
            from harness.runner.mteb.wrapper import MtebEncoder

            return MtebEncoder(cfg, custom, tasks)
