"""Every cache folder under one root, and the folders of trained artifacts.

``ArtifactStore`` is the one place that decides where things are cached: sentence vectors and pair
scores (``vectors/<key hash>/``), sparse vectors (``sparse-vectors/<key hash>/``), trained
artifacts (``<kind>/<key hash>/``: flow weights, fine-tuned checkpoints), the memo of model-folder
fingerprints (``fingerprints.json``), that of bootstrap resamples (``bootstrap/``) and that of
parsed sources (``code-digests.json``, through the store's own
:class:`~harness.core.codekeys.CodeDigests`: nothing of it is process-wide).

Every vector store and artifact folder is keyed on the code that fills it as well as on its inputs:
callers name the modules (``code=``) and :func:`harness.core.codekeys.code_digest` of them and of
everything they import joins the key, so a changed method is recomputed, never served warm.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from harness.core import authenticity
from harness.core.authenticity import secret_from_env
from harness.core.codekeys import CodeDigests
from harness.core.errors import UserError
from harness.core.hashing import (
    NotAFile,
    atomic_write_bytes,
    atomic_write_text,
    canonical_json,
    file_sha256,
    key_hash,
    read_json,
    read_regular,
    strict_json,
)
from harness.core.vector_store import CACHE_SCHEMA, VectorStore

if TYPE_CHECKING:
    from harness.core.sparse_store import SparseVectorStore

log = logging.getLogger("sts_bench.artifacts")
UNAUTHENTICATED = "is not authenticated"


class ArtifactStore:
    """The cache root. Plain data (a path, a secret, its code digests), so it travels to dask/ray
    workers.

    >>> from harness.core.codekeys import code_digest
    >>> store = ArtifactStore("/tmp/c")
    >>> folder = store.folder("flows", {"a": 1}, code=("methods.flow",))
    >>> folder.dir.parent.name, folder.key["code"] == code_digest("methods.flow")
    ('flows', True)
    """

    def __init__(self, root: str | Path, secret: bytes | None = None) -> None:
        self.root = Path(root).expanduser()
        # The cache secret ($STS_BENCH_CACHE_SECRET unless given): entries are tagged with it and
        # read only when their tag verifies (harness.core.authenticity). It travels with the store.
        self.secret = secret if secret is not None else secret_from_env()
        # Speed memos (parsed code digests, model-folder fingerprints) are not authenticated: with
        # a secret they are not read, so a planted one cannot make changed code or weights look
        # unchanged (costs a re-parse and a re-hash per run). The digests are this store's own:
        # another store (another cache) never reads or writes this one's memo file.
        self.code_digests = CodeDigests(None if self.secret else self.code_digest_memo)

    @property
    def code_digest_memo(self) -> Path:
        """Where this cache memoises parsed sources (read only without a cache secret)."""
        return self.root / "code-digests.json"

    def vectors(self, key: Mapping[str, Any], *, code: Sequence[str]) -> VectorStore:
        """The vector store of ``key`` as computed by the modules ``code`` (and what they
        import)."""
        return VectorStore(self.root, {**key, "code": self.code_digests.digest(*code)}, self.secret)

    def sparse_vectors(self, key: Mapping[str, Any], *, code: Sequence[str]) -> SparseVectorStore:
        """The sparse vector store of ``key`` as computed by the modules ``code``
        (``sparse-vectors/<key hash>/``)."""
        from harness.core.sparse_store import SparseVectorStore

        return SparseVectorStore(
            self.root, {**key, "code": self.code_digests.digest(*code)}, self.secret
        )

    def folder(self, kind: str, key: Mapping[str, Any], *, code: Sequence[str]) -> ArtifactDir:
        """The artifact folder of ``key`` as made by the modules ``code`` (and what they import)."""
        return ArtifactDir(
            self.root, kind, {**key, "code": self.code_digests.digest(*code)}, self.secret
        )

    @property
    def resample_memo(self) -> Path:
        """Where bootstrap resamples are memoised by content (:mod:`harness.core.bootstrap`)."""
        return self.root / "bootstrap"

    @property
    def datasets_cache(self) -> Path:
        """The HuggingFace datasets library's cache while sts-bench loads data
        (:mod:`harness.core.data.hf_places`)."""
        return self.root / "hf-datasets"

    @property
    def mteb_cache(self) -> Path:
        """MTEB's result cache (``MTEB_CACHE``: ``results/<model>/<revision>/<Task>.json``) for MTEB
        runs."""
        return self.root / "mteb"

    @property
    def fingerprint_memo(self) -> Path | None:
        """Where model-folder fingerprints are memoised against file sizes and mtimes (None with a
        cache secret: the memo is not authenticated, so every run hashes the folders)."""
        return None if self.secret else self.root / "fingerprints.json"


class ArtifactDir:
    """A folder of trained artifacts (flow weights, fine-tuned checkpoints) for one cache key.

    ``<cache>/<kind>/<key hash>/`` holds the files plus ``meta.json``, written last. meta.json holds
    the key, the training facts, the sha256 of **every** file in the folder (those committed here
    and those a trainer wrote directly, such as ``model/``) and a checksum of itself. A folder
    without meta.json is an interrupted write (its ``partial/`` training state may still resume);
    a folder whose meta.json or files do not match is corrupt: :meth:`verify` says why, and
    :meth:`discard` removes it with one warning line, so it is trained again and never loaded.
    """

    def __init__(
        self, root: Path, kind: str, key: Mapping[str, Any], secret: bytes | None = None
    ) -> None:
        self.key = {"schema": CACHE_SCHEMA, "kind": kind, **key}
        self.dir = Path(root) / kind / key_hash(self.key)
        self.secret = secret  # with one, meta.json carries an HMAC tag that must verify

    # -- reading ----------------------------------------------------------------------------------
    def verify(self) -> tuple[bool, str | None]:
        """``(True, None)``: complete and intact. ``(False, None)``: nothing committed yet.
        ``(False, reason)``: committed but damaged — discard it."""
        meta_path = self.dir / "meta.json"
        if not meta_path.is_file():
            return False, None if not meta_path.exists() else f"{meta_path} is not a file"
        try:
            meta = read_json(meta_path, ArtifactMeta, "written by an older sts-bench or damaged")
        except UserError as err:
            return False, str(err)
        if meta["checksum"] != _meta_checksum(meta):
            return False, f"{meta_path} does not match its own checksum"
        if self.secret and not authenticity.valid(self.secret, _tagged_body(meta), meta.get("tag")):
            return False, (
                f"{meta_path} {UNAUTHENTICATED} by ${authenticity.SECRET_ENV} (written without the "
                "secret, or by someone else)"
            )
        if meta.get("key") != json.loads(json.dumps(self.key)):
            return False, f"{meta_path} belongs to another key"
        for name, digest in meta["files"].items():
            path = self.dir / name
            if not path.is_file() or path.is_symlink():
                return False, f"{path} is missing"
            try:
                actual = file_sha256(path)
            except OSError as err:  # a FIFO or a device under the name: never hashed
                return False, f"{path} is unreadable ({err.strerror or err.__class__.__name__})"
            if actual != digest:
                return False, f"{path} does not match its checksum (altered or truncated)"
        return True, None

    def complete(self) -> bool:
        """Committed and intact (reads every file: a flipped byte anywhere makes it incomplete); a
        folder not authenticated by the cache secret says so in one warning; the caller computes it
        again."""
        intact, reason = self.verify()
        # a planted folder is worth a line; a damaged memo is just redone
        if reason and UNAUTHENTICATED in reason:
            log.warning("artifact: %s; computing it again", reason)
        return intact

    def path(self, name: str) -> Path:
        return self.dir / name

    def meta(self) -> dict[str, Any]:
        fix = f"delete {self.dir}: the next run computes it again"
        return read_json(self.dir / "meta.json", ArtifactMeta, fix)

    def read(self, name: str) -> bytes:
        """The bytes of committed file ``name``, checked against meta.json as they are read."""
        try:
            data = read_regular(self.dir / name)
        except NotAFile as err:  # swapped for a FIFO or a device after verify(): never read
            raise ArtifactCorrupt(f"{self.dir / name} {err.strerror}") from None
        if hashlib.sha256(data).hexdigest() != self.meta()["files"].get(name):
            raise ArtifactCorrupt(f"{self.dir / name} does not match its checksum")
        return data

    # -- writing ----------------------------------------------------------------------------------
    def discard(self, reason: str) -> None:
        """Remove a damaged folder (one warning line): the caller trains it again."""
        log.warning("artifact: %s; discarding %s and training it again", reason, self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)

    def commit(self, files: Mapping[str, bytes], info: Mapping[str, Any]) -> None:
        """Write every file atomically, then meta.json (key + ``info`` + the sha256 of every file in
        the folder) to mark the folder complete."""
        for name, data in files.items():
            atomic_write_bytes(self.dir / name, data)
        checksums = {str(path.relative_to(self.dir)): file_sha256(path) for path in self._payload()}
        meta: dict[str, Any] = {
            "key": self.key,
            "info": strict_json(dict(info)),
            "files": checksums,
        }
        if self.secret:  # the tag covers the key, the facts and every file's sha256
            meta["tag"] = authenticity.tag(self.secret, _tagged_body(meta))
        meta["checksum"] = _meta_checksum(meta)
        atomic_write_text(
            self.dir / "meta.json", json.dumps(meta, indent=1, sort_keys=True, allow_nan=False)
        )

    def _payload(self) -> list[Path]:
        """Every file of the artifact: all but meta.json, resumable state and in-flight temp
        files."""
        if not self.dir.is_dir():
            return []
        out = []
        for path in sorted(self.dir.rglob("*")):
            rel = path.relative_to(self.dir)
            if (
                rel.parts[0] in ("meta.json", "partial")
                or path.name.startswith(".tmp-")
                or not path.is_file()
            ):
                continue
            out.append(path)
        return out


class ArtifactCorrupt(Exception):
    """A committed artifact file changed after its checksum was recorded (caught by
    TrainedMethod)."""


def _tagged_body(meta: Mapping[str, Any]) -> bytes:
    """What an artifact's HMAC tag is computed over: meta.json without its checksum and tag."""
    return canonical_json({k: v for k, v in meta.items() if k not in ("checksum", "tag")}).encode(
        "utf-8"
    )


# A committed folder's meta.json (ArtifactDir.commit); tag: its HMAC, with the cache secret
class ArtifactMeta(TypedDict):
    key: dict[str, Any]
    info: dict[str, Any]
    files: dict[str, str]
    checksum: str
    tag: NotRequired[str]


def _meta_checksum(meta: Mapping[str, Any]) -> str:
    """sha256 of meta.json's content without its own checksum field."""
    body = {k: v for k, v in meta.items() if k != "checksum"}
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()
