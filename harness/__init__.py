"""sts-bench: compare sentence-embedding methods on Semantic Textual Similarity.

The package has floors (``tests/test_layers.py`` keeps them): :mod:`harness.core` below the
methods, :mod:`methods` (the adapters), :mod:`harness.runner` above them. Importing this package is
cheap on purpose (no torch, no transformers, not even the runner): names are resolved on first use.

>>> import harness
>>> cfg = harness.BenchConfig(methods=("avg",), tasks=("stsb",))   # doctest: +SKIP
>>> outcome = harness.run(cfg)                                       # doctest: +SKIP
>>> outcome = harness.evaluate(my_encoder, tasks=["stsb"], output_dir="out", cache_key="v1",
...                            methods=["avg"])                      # doctest: +SKIP
>>> outcome.scores                                                   # doctest: +SKIP
>>> model = harness.mteb_model("whitening", k=256)                   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core import __version__
from harness.core.errors import UserError

if TYPE_CHECKING:
    from harness.core.api import Method
    from harness.runner.execution.run import RunOutcome
    from harness.runner.settings.config import BenchConfig

__all__ = [
    "BenchConfig",
    "UserError",
    "__version__",
    "evaluate",
    "mteb_model",
    "register_method",
    "run",
]


def run(cfg: BenchConfig) -> RunOutcome:
    """Plan and execute one benchmark run (:mod:`harness.runner.execution.run`), or with
    ``cfg.paper`` every row of that paper's protocol (:mod:`harness.runner.papers.run`), as the CLI
    does (it calls this).

    Returns a :class:`~harness.runner.execution.run.RunOutcome`: ``records`` (typed result records,
    one per method × task), ``scores`` (the same as a pandas DataFrame), the files written
    (``result_paths``, ``leaderboard_paths``, ``embedding_dirs``), the printed ``table``,
    ``exit_code`` (1 on a regression against ``cfg.baseline``) and what was computed rather than
    cached (``sentences_forwarded``, ``models_trained``, ``pairs_scored``). Bad settings or data
    raise :class:`UserError` with one line; ``cfg.output_dir`` defaults to ``results`` in the
    current folder.
    """
    if cfg.paper:
        from harness.runner.papers.run import run_paper

        return run_paper(cfg)
    from harness.runner.execution.run import run as _run

    return _run(cfg)


def evaluate(
    encoder: Any,
    *,
    output_dir: str | Path,
    tasks: str | Sequence[str] = ("stsb",),
    name: str | None = None,
    cache_key: str | None = None,
    methods: str | Sequence[str] = (),
    **settings: Any,
) -> RunOutcome:
    """Score any object with ``encode(list[str]) -> array-like (n, d)`` as a method of a run, beside
    built-in ``methods``, with the CLI's statistics and reports; see
    :func:`harness.runner.execution.from_python.evaluate` (``output_dir`` is required; vectors are
    cached only under the ``cache_key`` you name; they are exported to ``<output_dir>/embeddings``).
    ``settings`` are the run-wide settings by their config-file names (``source``, ``bootstrap``,
    ``seed``, ...): every setting declared in ``BenchConfig`` but the modes, checked as the command
    line checks them; that docstring lists them with their defaults."""
    from harness.runner.execution.from_python import evaluate as _evaluate

    return _evaluate(
        encoder,
        output_dir=output_dir,
        tasks=tasks,
        name=name,
        cache_key=cache_key,
        methods=methods,
        **settings,
    )


def mteb_model(method: str, backbone: str = "minilm", **kwargs: Any) -> Any:
    """Any sts-bench method as an MTEB model (``mteb.evaluate`` accepts it); method options by their
    names, e.g. ``harness.mteb_model("whitening", k=256)``. See :mod:`harness.runner.mteb.model`."""
    from harness.runner.mteb.model import mteb_model as _mteb_model

    return _mteb_model(method, backbone, **kwargs)


def register_method(cls: type[Method]) -> None:
    """Make a method class built at run time runnable by its ``cls.name`` in this process, as a
    built-in is: ``harness.run``, ``--set``-style options, records, ``mteb_model``. See
    :func:`methods.register_method` and docs/PLUGINS.md."""
    from methods import register_method as _register

    _register(cls)


def __getattr__(name: str) -> Any:
    if name == "BenchConfig":
        from harness.runner.settings.config import BenchConfig

        return BenchConfig
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
