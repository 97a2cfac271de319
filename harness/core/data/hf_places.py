"""The HuggingFace datasets cache and MTEB's result cache, placed under sts-bench's cache folder.

Left alone, ``datasets`` writes every table it prepares (even one read from local ``--hub-root``
files) under ``~/.cache/huggingface/datasets``, and ``import mteb`` creates ``~/.cache/mteb`` where
``mteb.evaluate`` then writes its results: files in the user's home that no sts-bench setting
named. Inside :func:`caches_under` both go under the cache folder the user chose
(:attr:`ArtifactStore.datasets_cache`, :attr:`ArtifactStore.mteb_cache`), unless the user set
``HF_DATASETS_CACHE`` / ``MTEB_CACHE`` themselves, which then win; everything is restored on exit.

``datasets`` reads ``HF_DATASETS_CACHE`` once, at import, into ``datasets.config``; the loaders read
``datasets.config`` at call time, so both the variable and, when imported, the config are set.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.core.artifacts import ArtifactStore

# datasets.config attributes derived from HF_DATASETS_CACHE at import, relative to it.
_DATASETS_PATHS = {
    "HF_DATASETS_CACHE": (),
    "DOWNLOADED_DATASETS_PATH": ("downloads",),
    "EXTRACTED_DATASETS_PATH": ("downloads", "extracted"),
}


def cache_places(store: ArtifactStore) -> dict[str, Path]:
    """Where the datasets cache and MTEB's cache go: the user's own variables if set, else under
    ``store``."""
    return {
        "HF_DATASETS_CACHE": Path(
            os.environ.get("HF_DATASETS_CACHE") or store.datasets_cache
        ).expanduser(),
        "MTEB_CACHE": Path(os.environ.get("MTEB_CACHE") or store.mteb_cache).expanduser(),
    }


def describe(places: dict[str, Path]) -> str:
    """The log line that says where the two caches are."""
    return (
        f"caches: HuggingFace datasets in {places['HF_DATASETS_CACHE']}, MTEB in "
        f"{places['MTEB_CACHE']} (set HF_DATASETS_CACHE / MTEB_CACHE to use others)"
    )


@contextlib.contextmanager
def caches_under(store: ArtifactStore) -> Iterator[dict[str, Path]]:
    """Inside: ``datasets`` and ``mteb`` cache under :func:`cache_places`; yields those places."""
    places = cache_places(store)
    saved_env = {name: os.environ.get(name) for name in places}
    os.environ.update({name: str(path) for name, path in places.items()})
    config = sys.modules.get("datasets.config")
    saved_config = {
        name: getattr(config, name) for name in _DATASETS_PATHS if hasattr(config, name)
    }
    if config is not None:
        for name, parts in _DATASETS_PATHS.items():
            setattr(config, name, places["HF_DATASETS_CACHE"].joinpath(*parts))
    try:
        yield places
    finally:
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if config is not None:
            for name, value in saved_config.items():
                setattr(config, name, value)
        # imported inside: back to its default
        elif (loaded := sys.modules.get("datasets.config")) is not None:
            default = Path(os.environ.get("HF_DATASETS_CACHE") or loaded.DEFAULT_HF_DATASETS_CACHE)
            for name, parts in _DATASETS_PATHS.items():
                setattr(loaded, name, default.joinpath(*parts))
