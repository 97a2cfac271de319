"""Encode work as units that any process can run: windows of sentences.

The sentences a backbone must encode are sorted by (character length, text) and cut into windows
of ``EncodeSettings.window``. A window is the unit of work and of caching: it is encoded as a whole
(its own length-sorted batches) and stored as one part file per view. Because windows and their
batches depend only on the job's sentences, a window gives the same vectors whether it runs here,
on another GPU, or on a dask/ray worker, and whether or not an earlier run was killed half-way:
finished windows are skipped, unfinished ones are encoded again from scratch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from harness.core.artifacts import ArtifactStore
from harness.core.codekeys import package_versions
from harness.core.encoding.backbone import BackboneRef
from harness.core.encoding.engines import resolve_impl
from harness.core.encoding.pooling import View
from harness.core.encoding.settings import EncodeSettings

if TYPE_CHECKING:
    from harness.core.encoding.forward import ForwardPass


def make_windows(sentences: Iterable[str], size: int) -> list[list[str]]:
    """Unique sentences sorted by (len, text), cut into windows of ``size``.

    >>> make_windows(["ccc", "a", "bb", "a"], 2)
    [['a', 'bb'], ['ccc']]
    """
    ordered = sorted(set(sentences), key=lambda text: (len(text), text))
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


# The code that computes a view's vectors (the forward pass, both encoders, pooling, the built-in
# backbone families and their native loaders); the vector store's key holds the digest of it and of
# everything it imports (harness.core.codekeys).
ENCODER_CODE = ("harness.core.encoding.forward",)


def encoder_code(ref: BackboneRef) -> tuple[str, ...]:
    """:data:`ENCODER_CODE` and the modules of the family that runs ``ref``: a family registered
    from outside the harness (:func:`harness.core.encoding.families.register_family`) is not
    among what the forward pass imports, yet its code computes the vectors. For a built-in family
    the digest is :data:`ENCODER_CODE`'s (its modules are in that closure already)."""
    from harness.core.encoding.families import family_of_folder

    return tuple(sorted({*ENCODER_CODE, *family_of_folder(ref.path).code}))


@dataclass(frozen=True)
class WindowTask:
    """Everything a worker needs to encode windows into the shared cache (plain, picklable data)."""

    ref: BackboneRef
    settings: EncodeSettings
    views: tuple[View, ...]
    windows: tuple[tuple[str, ...], ...]
    artifacts: ArtifactStore
    # The modules the vectors' key digests (encoder_code(ref), asked where the task is made: a
    # worker may not have the family of a plugin registered).
    code: tuple[str, ...] = ENCODER_CODE

    def on_device(self, device: str) -> WindowTask:
        return replace(self, settings=replace(self.settings, device=device))

    def run(self) -> int:
        """Encode its windows into the cache here: :func:`run_window_task`."""
        return run_window_task(self)

    @staticmethod
    def cut(sentences: Iterable[str], size: int) -> list[list[str]]:
        """The windows of ``sentences``: :func:`make_windows`."""
        return make_windows(sentences, size)

    @staticmethod
    def deal(windows: Sequence[Sequence[str]], parts: int) -> list[list[Sequence[str]]]:
        """Windows dealt round-robin to ``parts`` devices: :func:`split_across`."""
        return split_across(windows, parts)


# Libraries whose code computes vectors too: torch's kernels, the tokenizer; transformers' models.
ENCODER_LIBRARIES = {
    "native": ("torch", "tokenizers"),
    "transformers": ("torch", "tokenizers", "transformers"),
}


def view_cache_key(
    ref: BackboneRef, settings: EncodeSettings, impl: str, view: View
) -> dict[str, Any]:
    """Everything that changes a view's vectors but the harness's own code (which the store adds):
    weights (and the dtype they are loaded in), the prompt, pooling, layer, max_length, dtype, the
    implementation (native and transformers agree to ~1e-6, not bit for bit) and the versions of the
    libraries it runs on."""
    return {
        "kind": "view",
        **ref.key(),
        "prompt": view.prompt.key(),
        "pooling": view.pooling,
        # a decoder without its causal mask says so; a causal view keeps the key it always had
        **({"attention": "bidirectional"} if view.bidirectional else {}),
        "layer": view.layer,
        "max_length": settings.max_length,
        "dtype": settings.dtype,
        "impl": impl,
        "weights": ref.weight_dtype(settings.dtype),
        "libraries": package_versions(*ENCODER_LIBRARIES.get(impl, ("torch",))),
    }


_PASSES: dict[tuple[BackboneRef, EncodeSettings], ForwardPass] = {}


def run_window_task(task: WindowTask) -> int:
    """Encode the task's windows and store them; returns sentences run through the model.

    Runs in the main process or in a worker. A worker keeps its loaded model between tasks.
    """
    from harness.core.encoding.forward import ForwardPass

    key = (task.ref, task.settings)
    if key not in _PASSES:
        _PASSES[key] = ForwardPass(task.ref, task.settings)
    forward = _PASSES[key]
    before = forward.sentences_forwarded
    impl = resolve_impl(task.ref, task.settings.impl)
    stores = {
        view: task.artifacts.vectors(
            view_cache_key(task.ref, task.settings, impl, view), code=task.code
        )
        for view in task.views
    }
    for texts, arrays in forward.encode_windows(task.windows, task.views):
        for view in task.views:
            stores[view].add(texts, arrays[view])
    return forward.sentences_forwarded - before


def split_across(tasks_windows: Sequence[Sequence[str]], parts: int) -> list[list[Sequence[str]]]:
    """Deal windows round-robin into ``parts`` groups (one per device)."""
    groups: list[list[Sequence[str]]] = [[] for _ in range(parts)]
    for index, window in enumerate(tasks_windows):
        groups[index % parts].append(window)
    return [g for g in groups if g]
