"""The one interface every method implements, and the frozen spec that is a method's identity.

A method is *backbone × pooling × post-processor*. Methods that read the shared backbone pass
(``ViewMethod``) declare the pooled views they need; the scheduler encodes the union of all views
of all methods in one forward pass per sentence, and the method only combines cached arrays.
Methods with a model of their own (sbert, random) encode in ``prepare``/``encode`` themselves.

Modules under ``methods/`` must not import torch at module level: ``--list`` and ``--help`` import
every method class to collect its options.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    from harness.config import BenchConfig
    from harness.context import RunContext
    from harness.fitsets import FitSet
    from harness.tasks import SplitData
    from harness.views import View


@dataclass(frozen=True)
class Option:
    """A method-specific setting. It becomes the CLI flag ``--<method>-<name>``, the config-file
    key ``[<method>] <name>``, a field of ``MethodSpec.params`` and part of the result JSON."""

    name: str
    default: Any
    help: str
    type: Callable[[str], Any] = str
    choices: tuple[Any, ...] | None = None
    in_label: bool = True  # False when another leaderboard column already shows it (e.g. the fit set)


@dataclass(frozen=True)
class MethodSpec:
    """The identity of a configured method: two runs with equal specs compute the same vectors.

    ``layers`` are ``hidden_states`` indices as the user wrote them (0 = embedding layer, 1 = first
    transformer layer, -1 = last); ``(1, -1)`` is BERT-flow's "first-last", ``(0, -1)`` SimCSE's.
    """

    name: str
    backbone: str
    revision: str | None = None
    pooling: str = "mean"
    layers: tuple[int, ...] = (-1,)
    max_length: int = 128
    post: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["layers"] = list(self.layers)
        out["params"] = dict(self.params)
        return out


class Method:
    """Base class. Subclasses set the class attributes and override what they need."""

    name: ClassVar[str]
    summary: ClassVar[str]
    kind: ClassVar[str] = "embedding"  # "embedding" (encode) or "pair-scorer" (score_pairs)
    options: ClassVar[tuple[Option, ...]] = ()
    uses_fit_set: ClassVar[bool] = False
    pooling: ClassVar[str] = "mean"
    layers: ClassVar[tuple[int, ...]] = (-1,)
    post: ClassVar[str | None] = None

    def __init__(self, spec: MethodSpec, ctx: RunContext) -> None:
        self.spec = spec
        self.ctx = ctx
        self.fit_info: dict[str, Any] | None = None

    @classmethod
    def make_spec(cls, cfg: BenchConfig, ctx: RunContext) -> MethodSpec:
        """Build this method's spec from the run config (backbone, max_length, its own options).
        ``ctx`` resolves backbones for methods whose spec depends on what a checkpoint is."""
        return MethodSpec(name=cls.name, backbone=cfg.backbone, revision=cfg.revision, pooling=cls.pooling,
                          layers=cls.layers, max_length=cfg.max_length, post=cls.post,
                          params=cls.params_from(cfg))

    @classmethod
    def params_from(cls, cfg: BenchConfig) -> dict[str, Any]:
        given = cfg.method_params.get(cls.name, {})
        return {opt.name: given.get(opt.name, opt.default) for opt in cls.options}

    def label(self) -> str:
        """Leaderboard row name: the method name plus any option that differs from its default."""
        changed = [f"{o.name}={self.spec.params[o.name]}" for o in self.options
                   if o.in_label and self.spec.params.get(o.name) != o.default]
        return f"{self.name}[{','.join(changed)}]" if changed else self.name

    def encoder_impl(self) -> str | None:
        """What computed the vectors, for the record: the view provider's implementation for
        backbone-view methods, the method's own model otherwise (None: no model at all)."""
        return self.ctx.views(self.spec).impl if self.backbone_views() else None

    def backbone_views(self) -> list[View]:
        """Pooled views this method reads from the shared backbone pass ([] if it has its own model)."""
        return []

    def prepare(self, sentences: Sequence[str]) -> None:
        """Encode-ahead hook for methods with their own model: called once with every sentence
        (all tasks, all fit sets) so they can batch and cache in one go."""

    def fit_set_name(self) -> str:
        """Which fit set this method fits on (``uses_fit_set`` methods): the run's ``--fit-set``
        unless the method has a setting of its own (simcse-train's corpus)."""
        return self.ctx.cfg.fit_set

    def fit(self, fit_set: FitSet) -> None:
        """Fit on unlabeled sentences (only called when ``uses_fit_set``)."""

    def describe_fit(self, fit_set: FitSet | None) -> str:
        """For ``--dry-run``: what fitting will cost, or that its result is cached."""
        return "fitted in process (seconds)"

    def describe_encode(self, sentences: Sequence[str]) -> str | None:
        """For ``--dry-run``, methods with their own model: how many sentences they still encode."""
        return None

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        """Float32 (n, d) embeddings of ``sentences``, in order (``kind == "embedding"``)."""
        raise NotImplementedError

    def score_pairs(self, s1: Sequence[str], s2: Sequence[str]) -> np.ndarray:
        """A similarity score per pair (``kind == "pair-scorer"``: cross-encoders, heads over pairs)."""
        raise NotImplementedError

    def annotate(self, split: SplitData, similarity: np.ndarray) -> dict[str, Any]:
        """Extra fields for this (method, task) result record, given the similarities just scored."""
        return {}
