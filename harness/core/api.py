"""The method API: what a method is, what it may ask of a run, and nothing more.

A method is *backbone × pooling × post-processor*, identified by a frozen :class:`MethodSpec`.
It sees the run through a narrow :class:`MethodContext` (views of the shared backbone pass, the
resolved encode settings, an artifact store that owns every cache folder, the seed, counters),
never through the runner's config. Two shapes of method exist, as two base classes:

* :class:`EmbeddingMethod` — ``encode(sentences)`` → float32 (n, d); pairs are compared by cosine.
* :class:`PairScoringMethod` — ``score_pairs(s1, s2)`` → one score per pair (cross-encoders, heads).

Modules under ``methods/`` must not import torch at module level: ``--list`` and ``--help`` import
every method class to collect its options.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import numpy as np

if TYPE_CHECKING:
    from harness.core.artifacts import ArtifactStore
    from harness.core.cost_model import CostSubjects
    from harness.core.data.fitsets import FitSet
    from harness.core.data.splits import SplitData, TaskSpec
    from harness.core.encoding import BackboneRef, EncodeSettings, View, ViewProvider
    from harness.core.sparse import SparseVectors


T = TypeVar("T")


@dataclass(frozen=True)
class Option:
    """A method-specific setting. It becomes the CLI flag ``--<method>-<name>``, the config-file
    key ``[<method>] <name>``, a field of ``MethodSpec.params`` and part of the result JSON."""

    name: str
    default: Any
    help: str
    type: Callable[[str], Any] = str
    choices: tuple[Any, ...] | None = None
    # False when another leaderboard column already shows it (e.g. the fit set)
    in_label: bool = True


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


@dataclass(frozen=True)
class SpecRequest:
    """The run-wide settings a method builds its spec from; the runner fills it from its config.

    ``params`` maps a method name to the options the user gave it (defaults are the method's).
    """

    backbone: str = "minilm"
    revision: str | None = None
    max_length: int = 128
    first_last_layers: tuple[int, ...] = (1, -1)
    seed: int = 1234
    params: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def given(self, method: str) -> Mapping[str, Any]:
        return self.params.get(method, {})

    def spec_fields(self) -> dict[str, Any]:
        """The run-wide values a :class:`MethodSpec` takes as they are (its fields of the same
        name: backbone, revision, max_length), so neither class copies the other field by field.

        >>> SpecRequest(backbone="bert-base-uncased", max_length=64).spec_fields()
        {'backbone': 'bert-base-uncased', 'revision': None, 'max_length': 64}
        """
        # ``params`` differ: every method's options here, one method's (defaults filled) there
        shared = {f.name for f in fields(MethodSpec)} - {"params"}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name in shared}


@dataclass(frozen=True)
class PromptOfSet:
    """Which prompt of a prompt set (``--set METHOD.prompt=@FILE``) a method instance reads. The
    run builds one instance per prompt of the set, each configured exactly as a run given that one
    prompt, and sets this on it: the set as the user named it (``source``), its content's sha256,
    this prompt's ``name`` and every name of the set in the file's order. The row is labelled by the
    prompt's name (``last[prompt=query]``). ``select``: the named protocol that chooses one prompt
    per task (``dev``: on the task's dev split); the instances then share one row, labelled by the
    set (``last[prompt=@prompts.toml,prompt_select=dev]``), and its records say which was chosen.
    """

    source: str
    sha256: str
    name: str
    names: tuple[str, ...]
    select: str | None = None

    def shown(self) -> str:
        """The ``prompt`` value the row label shows: the prompt's name, or the set's when the run
        chooses one prompt per task."""
        return self.source if self.select else self.name

    def record(self) -> dict[str, Any]:
        """As the record's ``protocol.prompt_set`` keeps it."""
        return {
            "set": self.source,
            "sha256": self.sha256,
            "name": self.name,
            "names": list(self.names),
            "select": self.select,
        }


class MethodContext(Protocol):
    """All a method may use of the run. The runner's ``RunContext`` implements it; tests pass a
    small fake (``tests/fakes.py``) to build a method with no CLI and no config."""

    seed: int
    # the run's --fit-set: what methods that fit use unless they have their own setting
    fit_set: str
    # the run's aggregation, for methods that report a second score (DSE's teacher)
    aggregation: str
    # resolved: dtype, device as requested, threads, batching, max_length, progress
    encode: EncodeSettings
    artifacts: ArtifactStore

    def backbone(self, name: str, revision: str | None = None) -> BackboneRef: ...

    def views(self, spec: MethodSpec) -> ViewProvider: ...

    def task_split(self, task: str, split: str) -> SplitData: ...

    def sibling(self, name: str) -> Method: ...

    def count_trained(self) -> None: ...

    def count_forwarded(self, n: int, device: str) -> None: ...

    def count_pairs_scored(self, n: int) -> None: ...


class Method:
    """Base of every method. Subclasses set the class attributes and override what they need;
    concrete methods derive from :class:`EmbeddingMethod` or :class:`PairScoringMethod`."""

    name: ClassVar[str]
    summary: ClassVar[str]
    kind: ClassVar[str]  # for records and tables only: "embedding" or "pair-scorer"
    options: ClassVar[tuple[Option, ...]] = ()
    uses_fit_set: ClassVar[bool] = False
    pooling: ClassVar[str] = "mean"
    layers: ClassVar[tuple[int, ...]] = (-1,)
    post: ClassVar[str | None] = None
    # Labelled (task, split)s the method trains on, e.g. STS-B train: the runner warns and marks a
    # score on a task built from the same pairs (STS-B was assembled from STS 2012-2017).
    labelled_training: ClassVar[tuple[tuple[str, str], ...]] = ()
    # Set by the run on each instance it builds from a prompt set (one per prompt); None otherwise
    prompt_of_set: PromptOfSet | None = None

    def __init__(self, spec: MethodSpec, ctx: MethodContext) -> None:
        self.spec = spec
        self.ctx = ctx
        self.fit_info: dict[str, Any] | None = None

    @classmethod
    def make_spec(cls, request: SpecRequest, ctx: MethodContext) -> MethodSpec:
        """Build this method's spec from the run's settings (backbone, max_length, its own options).
        ``ctx`` resolves backbones for methods whose spec depends on what a checkpoint is."""
        return MethodSpec(
            name=cls.name,
            pooling=cls.pooling,
            layers=cls.layers,
            post=cls.post,
            params=cls.params_from(request),
            **request.spec_fields(),
        )

    @classmethod
    def params_from(cls, request: SpecRequest) -> dict[str, Any]:
        given = request.given(cls.name)
        return {opt.name: given.get(opt.name, opt.default) for opt in cls.options}

    def options_into(self, config_type: Callable[..., T], **fixed: Any) -> T:
        """``config_type`` (a dataclass: a training loop's config) with every field that is one of
        this method's options taken from the spec, and ``fixed`` for the others (or an option
        converted first); the rest keep the dataclass's defaults. A trained method's options are
        its config: nothing is copied field by field, so an option cannot fail to arrive.

        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class Config:
        ...     lr: float = 1e-3
        ...     epochs: int = 1
        ...     clip: float = 1.0
        >>> class Fit(EmbeddingMethod):
        ...     name, summary = "fit", "a method that trains"
        ...     options = (Option("lr", 2e-5, "learning rate", type=float), Option("seed", 1, ""))
        >>> Fit(MethodSpec("fit", "none", params={"lr": 0.5, "seed": 7}), None).options_into(
        ...     Config, epochs=3)
        Config(lr=0.5, epochs=3, clip=1.0)
        """
        names = {f.name for f in fields(config_type)}  # type: ignore[arg-type]
        taken = {o.name: self.spec.params[o.name] for o in self.options if o.name in names}
        return config_type(**{**taken, **fixed})

    @classmethod
    def create(cls, spec: MethodSpec, ctx: MethodContext) -> Method:
        """The instance for ``spec``: a method whose shape depends on an option picks its class
        here."""
        return cls(spec, ctx)

    @classmethod
    def build(cls, request: SpecRequest, ctx: MethodContext) -> Method:
        return cls.create(cls.make_spec(request, ctx), ctx)

    def code(self) -> tuple[str, ...]:
        """The modules whose code makes this method's cached results (fits, trained weights, its own
        vectors), for :meth:`ArtifactStore.folder`'s ``code=``: its own module, whose first-party
        imports :mod:`harness.core.codekeys` follows. A method whose results also depend on code it
        does not import names that module too."""
        return (type(self).__module__,)

    def label(self) -> str:
        """Leaderboard row name: the method name plus any option that differs from its default (a
        prompt of a prompt set by its name in the set: :class:`PromptOfSet`)."""
        of_set = self.prompt_of_set
        shown = {**self.spec.params, **({"prompt": of_set.shown()} if of_set else {})}
        changed = [
            f"{o.name}={shown[o.name]}"
            for o in self.options
            if o.in_label
            and (self.spec.params.get(o.name) != o.default or (of_set and o.name == "prompt"))
        ]
        return f"{self.name}[{','.join(changed)}]" if changed else self.name

    def encoder_impl(self) -> str | None:
        """What computed the vectors, for the record: the view provider's implementation for
        backbone-view methods, the method's own model otherwise (None: no model at all)."""
        return self.ctx.views(self.spec).impl if self.backbone_views() else None

    def reads_backbone(self) -> bool:
        """Whether ``spec.backbone`` names a checkpoint the run resolves and records: not for
        ``"none"`` (the method is its own model), nor the endpoint's ``model @ host``."""
        return self.spec.backbone != "none"

    def backbone_views(self) -> list[View]:
        """Pooled views this method reads from the shared backbone pass ([] if it has its own
        model)."""
        return []

    def views_by_task(self, tasks: Sequence[TaskSpec]) -> dict[str, list[View]]:
        """The views this method reads on each of ``tasks`` (by task name), asked once at planning,
        before any task begins, so each task's sentences are encoded under the views that task
        reads. The default: :meth:`backbone_views` on every task; a method whose prompt depends on
        the task (per-task prompts) says which. It leaves the method as it found it."""
        views = self.backbone_views()
        return {task.name: views for task in tasks}

    def prepare(self, sentences: Sequence[str]) -> None:
        """Encode-ahead hook for methods with their own model: called once with every sentence
        (all tasks, all fit sets) so they can batch and cache in one go."""

    def begin_task(self, task: TaskSpec) -> None:
        """Called before the method is fitted and scored on ``task``, every time: a method that
        trains on the scored task's own labelled split (DSE's teacher and student on a GLUE task)
        switches to what it trained for that task here. The default does nothing."""

    def labelled_training_for(self, task: TaskSpec) -> tuple[tuple[str, str], ...]:
        """The labelled ``(task, split)``s the method trains on when it is scored on ``task``: the
        run marks the score ‡ when one is ``task`` itself, or STS-B for a task STS-B was built
        from. The default: :attr:`labelled_training`, whatever the task."""
        return self.labelled_training

    def fit_set_name(self) -> str:
        """Which fit set this method fits on (``uses_fit_set`` methods): the run's ``--fit-set``
        unless the method has a setting of its own (simcse-train's corpus)."""
        return self.ctx.fit_set

    def fit(self, fit_set: FitSet) -> None:
        """Fit on unlabeled sentences (only called when ``uses_fit_set``)."""

    def describe_fit(self, fit_set: FitSet | None) -> str:
        """For ``--dry-run``: what fitting will cost, or that its result is cached."""
        return "fitted in process (seconds)"

    def describe_encode(self, sentences: Sequence[str]) -> str | None:
        """For ``--dry-run``, methods with their own model: how many sentences they still encode."""
        return None

    def annotate(self, split: SplitData, similarity: np.ndarray) -> dict[str, Any]:
        """Extra fields for this (method, task) result record, given the similarities just scored.
        A ``"columns"`` entry ({title: number}) becomes leaderboard columns of the method's own."""
        return {}

    def cost_subjects(self) -> CostSubjects | None:
        """What ``--cost`` times for this method (a pair scorer against a sentence encoder), or
        None."""
        return None

    def inputs(self) -> str | None:
        """The prompt the backbone reads each sentence under, for the record and the protocol header
        (None: the sentence as it is)."""
        return None

    def selected_on(self) -> str | None:
        """Labelled data one of the method's settings was chosen on (PromptEOL's demonstration:
        STS-B dev), for the record and the leaderboard's § mark; None when nothing was."""
        return None


class EmbeddingMethod(Method):
    """A method that maps each sentence to a vector; pairs are compared by cosine."""

    kind = "embedding"

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        """Float32 (n, d) embeddings of ``sentences``, in order."""
        raise NotImplementedError

    def encode_sides(self, s1: Sequence[str], s2: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The vectors of both sentences of each pair (``s1[i]``, ``s2[i]``): :meth:`encode` of each
        side, unless the method reads the sides differently (per-side prompts)."""
        return self.encode(s1), self.encode(s2)


class SparseEmbeddingMethod(EmbeddingMethod):
    """An embedding method whose vectors are sparse (one dimension per vocabulary entry, nearly
    all zero: SPLADE's): :meth:`encode_sparse` gives them as
    :class:`~harness.core.sparse.SparseVectors`, which the run keeps sparse and compares by
    :meth:`sparse_similarity` (dot product unless the method says otherwise), reporting their
    active dimensions and FLOPS. ``--dims``/``--precision``/``--similarity`` do not apply to
    them. :meth:`encode` gives the same vectors dense, for a caller that needs an array."""

    def encode_sparse(self, sentences: Sequence[str]) -> SparseVectors:
        """The sparse vectors of ``sentences``, in order."""
        raise NotImplementedError

    def sparse_similarity(self) -> str:
        """How pairs of its vectors are compared: ``dot`` or ``cosine``
        (:data:`harness.core.sparse.SIMILARITIES`)."""
        return "dot"

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        return self.encode_sparse(sentences).to_dense()


class PairScoringMethod(Method):
    """A method that scores a pair as a whole (a cross-encoder, or a head over two embeddings)."""

    kind = "pair-scorer"

    def score_pairs(self, s1: Sequence[str], s2: Sequence[str]) -> np.ndarray:
        """One similarity score per pair (s1[i], s2[i])."""
        raise NotImplementedError
