"""Every cache folder under one root, and the folders of trained artifacts.

``ArtifactStore`` is the one place that decides where things are cached: sentence vectors and pair
scores (``vectors/<key hash>/``), trained artifacts (``<kind>/<key hash>/``: flow weights,
fine-tuned checkpoints), the memo of model-folder fingerprints (``fingerprints.json``) and that of
bootstrap resamples (``bootstrap/``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.core.encoding.cache import CACHE_SCHEMA, VectorStore
from harness.core.hashing import atomic_write_bytes, atomic_write_text, key_hash


class ArtifactStore:
    """The cache root. Plain data (a path), so it travels to dask/ray workers.

    >>> store = ArtifactStore("/tmp/c")
    >>> store.folder("flows", {"a": 1}).dir.parent.name
    'flows'
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser()

    def vectors(self, key: Mapping[str, Any]) -> VectorStore:
        return VectorStore(self.root, key)

    def folder(self, kind: str, key: Mapping[str, Any]) -> ArtifactDir:
        return ArtifactDir(self.root, kind, key)

    @property
    def resample_memo(self) -> Path:
        """Where bootstrap resamples are memoised by content (:mod:`harness.core.bootstrap`)."""
        return self.root / "bootstrap"

    @property
    def fingerprint_memo(self) -> Path:
        """Where model-folder fingerprints are memoised against file sizes and mtimes."""
        return self.root / "fingerprints.json"


class ArtifactDir:
    """A folder of trained artifacts (flow weights, fine-tuned checkpoints) for one cache key.

    ``<cache>/<kind>/<key hash>/`` holds the files plus ``meta.json``, written last: a folder
    without a meta.json matching its key is an interrupted write and is never used as complete.
    """

    def __init__(self, root: Path, kind: str, key: Mapping[str, Any]) -> None:
        self.key = {"schema": CACHE_SCHEMA, "kind": kind, **key}
        self.dir = Path(root) / kind / key_hash(self.key)

    def complete(self) -> bool:
        meta = self.dir / "meta.json"
        try:
            stored = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        return stored.get("key") == json.loads(json.dumps(self.key))

    def path(self, name: str) -> Path:
        return self.dir / name

    def meta(self) -> dict[str, Any]:
        return json.loads((self.dir / "meta.json").read_text(encoding="utf-8"))

    def commit(self, files: Mapping[str, bytes], info: Mapping[str, Any]) -> None:
        """Write every file atomically, then meta.json (key + ``info``) to mark the folder complete."""
        for name, data in files.items():
            atomic_write_bytes(self.dir / name, data)
        meta = {"key": self.key, "info": dict(info)}
        atomic_write_text(self.dir / "meta.json", json.dumps(meta, indent=1, sort_keys=True))
