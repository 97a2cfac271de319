"""sts-bench: compare sentence-embedding methods on Semantic Textual Similarity.

The package has floors (``tests/test_layers.py`` keeps them): :mod:`harness.core` below the
methods, :mod:`methods` (the adapters), :mod:`harness.runner` above them. Importing this package is
cheap on purpose (no torch, no transformers, not even the runner): names are resolved on first use.

>>> import harness
>>> cfg = harness.BenchConfig(methods=("avg",), tasks=("stsb",))   # doctest: +SKIP
>>> outcome = harness.run(cfg)                                       # doctest: +SKIP
>>> model = harness.mteb_model("whitening", k=256)                   # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from harness.core import __version__
from harness.core.errors import UserError

if TYPE_CHECKING:
    from harness.core.api import Method
    from harness.runner.execution.run import RunOutcome
    from harness.runner.settings.config import BenchConfig

__all__ = ["BenchConfig", "UserError", "__version__", "mteb_model", "register_method", "run"]


def run(cfg: BenchConfig) -> RunOutcome:
    """Plan and execute one benchmark run (:mod:`harness.runner.execution.run`), or with ``cfg.paper`` every
    row of that paper's protocol (:mod:`harness.runner.papers.run`)."""
    if cfg.paper:
        from harness.runner.papers.run import run_paper

        return run_paper(cfg)
    from harness.runner.execution.run import run as _run

    return _run(cfg)


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
