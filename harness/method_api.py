"""The public method API: everything a method needs, built-in or plugin, from one module.

A plugin (docs/PLUGINS.md) imports only from here; the built-in methods in ``methods/`` use
nothing beyond what this module exposes (they import the same objects from where they are
defined, ``harness.core.api``, the engine's front door :mod:`harness.core.encoding` and their
neighbours, which :mod:`harness.core.codekeys` digests; ``tests/test_layers.py`` checks that every
name a built-in imports from ``harness`` is one of this module's, the same object). So a plugin can
do whatever a built-in does: trainers open a model with :class:`Checkpoint`, batch and pool as the
engine does. Importing it loads numpy, not torch.

Reference
---------

**A method class** derives from :class:`EmbeddingMethod` or :class:`PairScoringMethod` and sets
class attributes:

``name``
    what ``--methods``, ``--set NAME.OPTION=VALUE``, ``[NAME]`` config tables, records and
    leaderboards call it: lower case letters, digits, ``-`` and ``_``; not a built-in's name.
``summary``
    one line for ``--list`` and ``sts-bench list NAME``.
``options``
    a tuple of :class:`Option` (name, default, help, type, choices, in_label). The user's values,
    converted by ``type`` and checked against ``choices``, arrive in ``self.spec.params``; an option
    off its default is part of the leaderboard label (``rp[dim=64]``) unless ``in_label=False``.
``uses_fit_set`` True for a method that fits on unlabelled sentences: the run calls ``fit(fit_set)``
    before scoring each task, with ``--fit-set`` (default ``target``: the task's own sentences,
    marked as such in every table); ``fit_set.sentences`` is a list of strings,
    ``fit_set.fingerprint`` its hash.
``pooling``, ``layers``
    the spec's view of the backbone (``"mean"``/``"cls"``; ``hidden_states`` indices, -1 the last).
``labelled_training``
    labelled ``(task, split)`` pairs it trains on, so a score on the same pairs is marked.

**Its instance** has ``self.spec`` (:class:`MethodSpec`: name, backbone, revision, pooling, layers,
max_length, params) and ``self.ctx`` (:class:`MethodContext`), and implements:

``EmbeddingMethod.encode(sentences) -> np.ndarray``
    float32 (n, d), one row per sentence in order; pairs are compared by cosine.
``SparseEmbeddingMethod.encode_sparse(sentences) -> SparseVectors``
    sparse vectors (CSR: one dimension per vocabulary entry, SPLADE's), kept sparse by the run and
    compared by ``sparse_similarity()`` (``dot`` unless overridden); reported with their active
    dimensions and FLOPS.
``PairScoringMethod.score_pairs(s1, s2) -> np.ndarray``
    one score per pair ``(s1[i], s2[i])``, correlated with gold as is.
``fit(fit_set)``
    only called when ``uses_fit_set``; may be called again with another fit set.
``backbone_views() -> list[View]``
    the pooled views it reads from the run's shared backbone pass, so the run encodes each
    sentence once for every method; ``[]`` (the default) for a method with its own model.
``views_by_task(tasks) -> dict[str, list[View]]``
    the views it reads on each task (by name), asked once at planning; the default is
    ``backbone_views()`` on every task. A :class:`ViewMethod` with per-task prompts
    (``task_prompts``) answers each task's own, and each task's sentences are encoded under them.
``make_spec(request, ctx)`` (classmethod)
    the spec from the run's :class:`SpecRequest` (backbone, revision, max_length,
    first_last_layers, seed, options); override to change pooling or layers by an option, or to
    set ``backbone="none"`` for a method that reads no backbone (or another name for the tables'
    backbone column, with ``reads_backbone()`` answering False, as the endpoint's model @ host).
``code() -> tuple[str, ...]``
    the modules whose code makes its cached results; the default, its own module, is followed
    through every first-party import (a plugin file's own source included), so editing the
    plugin recomputes what it cached.
``annotate(split, similarity) -> dict``
    extra record fields; ``{"columns": {title: number}}`` become leaderboard columns.
``classify_pairs(s1, s2, classes) -> np.ndarray`` (optional)
    float32 (n, len(classes)) logits of a method that classifies labelled pairs itself (a
    fine-tuned classifier): on a ``pairclass`` task the run records accuracy / F1 of their argmax
    and ranks by the positive class's log-odds. ``classifies() -> bool`` (optional) says whether
    it does so for the task begun; without it, it always does.
``begin_task(task)``
    called with the :class:`TaskSpec` before the method is fitted and scored on it (the default
    does nothing): a method trained on the scored task's own labelled split switches to it.
``labelled_training_for(task) -> tuple``
    the labelled ``(task, split)`` pairs it trains on when scored on ``task`` (default:
    ``labelled_training``); one that is ``task`` itself marks a pair-classification score ‡.

**The context** (:class:`MethodContext`) is all a method may use of the run:

``ctx.views(spec).get(sentences, view) -> np.ndarray``
    a pooled view of the shared backbone pass, cached by content (float32 (n, hidden)).
``ctx.backbone(name, revision) -> BackboneRef``
    the resolved backbone: ``layer_index(-1)``, ``num_layers``, ``hidden_size``, ``path``,
    ``fingerprint``.
``ctx.artifacts`` (:class:`ArtifactStore`)
    every cache folder. ``ctx.artifacts.folder(kind, key, code=self.code())`` is an
    :class:`ArtifactDir` keyed on ``key`` and on the method's code: ``complete()``,
    ``path(name)``, ``meta()["info"]``, ``commit({file: bytes}, info)`` (atomic, checksummed,
    verified on read; store arrays with :func:`npy_bytes`, read them with
    ``np.load(path, allow_pickle=False)``).
``ctx.seed``, ``ctx.fit_set``, ``ctx.aggregation``, ``ctx.encode`` (:class:`EncodeSettings`:
device, dtype, batch_size, max_length, threads, progress)
    the run's settings a method may read.
``ctx.task_split(task, split) -> SplitData``, ``ctx.sibling(name) -> Method``
    labelled pairs to train on; another method configured as in this run.
``ctx.count_trained()``, ``ctx.count_forwarded(n, device)``, ``ctx.count_pairs_scored(n)``
    for the run's summary, when the method runs a model of its own.

Raise :class:`UserError` with one line (what, where, how to fix) for bad input: the run prints
``error: ...`` and exits 2. A method that calls a remote service raises :class:`EndpointError`
when the service fails (exit 6). ``harness.register_method(cls)`` makes a class built at run time
runnable by its name in this process (it is not re-exported here: this module's code is part of
every plugin's cache key, and the registry's table must not be).

The method contract
-------------------

What the run relies on, checked when a class is registered (``--methods file.py:Class``, an entry
point, ``harness.register_method``, ``harness.evaluate``: ``methods.plugins.check_class`` and
``check_contract``), so a class that breaks it is refused before anything is computed. Each
violation is ONE ``error:`` line naming the method, its file and what to add (a ``PluginError``,
exit 5); a built-in that broke it would be a bug of sts-bench (tests/test_method_contract.py).

1. It derives from :class:`EmbeddingMethod` (and defines ``encode`` or ``encode_sides``) or from
   :class:`PairScoringMethod` (and defines ``score_pairs``), and leaves ``kind`` to its base.
2. ``name``: lower case letters, digits, ``-`` and ``_``, not a built-in's, not an installed
   plugin's, not held by another class; ``summary``: a non-empty line.
3. ``options``: a tuple of :class:`Option`, one name each (a Python identifier), each default a
   value of its ``type`` (str, int, float, bool; any for a type of your own) and one of its
   ``choices`` when it has them.
4. ``uses_fit_set = True`` needs ``fit(fit_set)``. The leaderboard's fit-set column is read from
   ``self.fit_info["fit_set"]`` only: set ``self.fit_info = {"fit_set": fit_set.describe(), ...}``
   in ``fit`` (a plugin that leaves it out gets the run's fit set added; a dict of JSON values).
5. A :class:`PostProcessor` has an option ``view`` whose choices are among :data:`BASE_VIEWS` and
   whose default is one of them (its base reads it to build the spec; without it, a KeyError).

At run time a plugin's hooks must answer with what the run reads (``label()`` a non-empty str,
``backbone_views()`` a list of :class:`View`, vectors float32 (n, d), one score per pair):
checked once, up front, each wrong answer one ``PluginError`` line.

The smallest complete method, registered in a registry for one run (a layer over the process
registry, as ``harness.evaluate`` does; ``harness.runner.execution.run.run(cfg, registry=...)``
takes one), and one violation with its line:

>>> import numpy as np
>>> from harness.method_api import EmbeddingMethod, Option, PostProcessor
>>> class Ones(EmbeddingMethod):
...     name, summary = "ones", "every sentence is the same vector"
...     options = (Option("dim", 4, "vector size", type=int),)
...     def encode(self, sentences):
...         return np.ones((len(sentences), self.spec.params["dim"]), dtype=np.float32)
>>> Ones.options[0].type("8")
8
>>> from methods import PROCESS
>>> run_registry = PROCESS.layer(Ones)
>>> run_registry.get("ones") is Ones, "ones" in PROCESS.plugins()
(True, False)
>>> class NoView(PostProcessor):
...     name, summary = "no-view", "a post-processor that forgot its view"
...     def fit(self, fit_set): ...
...     def encode(self, sentences): ...
>>> try:
...     PROCESS.layer(NoView)
... except UserError as err:
...     print(type(err).__name__, str(err).split(";")[0])
PluginError register_method: NoView derives from PostProcessor but has no 'view' option
"""

from __future__ import annotations

from harness.core.api import (
    EmbeddingMethod,
    Method,
    MethodContext,
    MethodSpec,
    Option,
    PairScoringMethod,
    SparseEmbeddingMethod,
    SpecRequest,
)
from harness.core.artifacts import ArtifactCorrupt, ArtifactDir, ArtifactStore
from harness.core.cost_model import CostSubjects, ModelShape
from harness.core.data.fitsets import FitSet
from harness.core.data.splits import SplitData, TaskSpec, fingerprint_pairs
from harness.core.encoding import (
    BackboneRef,
    Checkpoint,
    EncodeSettings,
    ForwardPass,
    Prompt,
    View,
    ViewProvider,
    read_model_json,
)
from harness.core.errors import EndpointError, UserError
from harness.core.hashing import (
    atomic_write_bytes,
    atomic_write_text,
    npy_bytes,
    read_json,
    read_table,
)
from harness.core.kinds import kind_of
from harness.core.progress import progress_bar
from harness.core.scoring import score_split, spearman
from harness.core.sparse import SparseVectors
from harness.core.sparse_store import SparseVectorStore
from harness.core.typecheck import held_to
from harness.core.vector_store import VectorStore
from methods.pooling import BASE_VIEWS, PostProcessor, ViewMethod, base_view

__all__ = [
    "BASE_VIEWS",
    "ArtifactCorrupt",
    "ArtifactDir",
    "ArtifactStore",
    "BackboneRef",
    "Checkpoint",
    "CostSubjects",
    "EmbeddingMethod",
    "EncodeSettings",
    "EndpointError",
    "FitSet",
    "ForwardPass",
    "Method",
    "MethodContext",
    "MethodSpec",
    "ModelShape",
    "Option",
    "PairScoringMethod",
    "PostProcessor",
    "Prompt",
    "SparseEmbeddingMethod",
    "SparseVectorStore",
    "SparseVectors",
    "SpecRequest",
    "SplitData",
    "TaskSpec",
    "UserError",
    "VectorStore",
    "View",
    "ViewMethod",
    "ViewProvider",
    "atomic_write_bytes",
    "atomic_write_text",
    "base_view",
    "fingerprint_pairs",
    "held_to",
    "kind_of",
    "npy_bytes",
    "progress_bar",
    "read_json",
    "read_model_json",
    "read_table",
    "score_split",
    "spearman",
]
