"""Authenticated cache entries: a checksum proves a file whole, an HMAC proves who wrote it.

A cache shared between people or machines (a team's NFS folder, a CI cache restored from a pull
request) can be written by someone else. Every entry is already checked against its own sha256,
but a planted entry can carry a correct sha256 of its forged content. With a secret in the
environment variable :data:`SECRET_ENV`, sts-bench tags what it writes with
``HMAC-SHA256(secret, content)`` and uses only entries whose tag verifies: vector parts (the tag
names the file), artifact folders (the tag covers meta.json, which holds the sha256 of every file)
and the memoised reports, records and history lines; an entry without a valid tag is left alone
(computed again, or not shown). Without the secret nothing changes. Which threats this answers,
and which it does not, is in docs/CACHE_AND_FAULTS.md ("Shared caches").

>>> tag(b"k", b"data")[:16]
'98755ce7a0d431b5'
>>> valid(b"k", b"data", tag(b"k", b"data")), valid(b"other", b"data", tag(b"k", b"data"))
(True, False)
"""

from __future__ import annotations

import hashlib
import hmac
import os

SECRET_ENV = "STS_BENCH_CACHE_SECRET"


def secret_from_env() -> bytes | None:
    """The cache secret, or None when :data:`SECRET_ENV` is unset or empty."""
    value = os.environ.get(SECRET_ENV, "")
    return value.encode("utf-8") if value else None


def tag(secret: bytes, data: bytes) -> str:
    """HMAC-SHA256 of ``data`` under ``secret``, hex."""
    return hmac.new(secret, data, hashlib.sha256).hexdigest()


def valid(secret: bytes, data: bytes, claimed: object) -> bool:
    """Whether ``claimed`` is ``data``'s tag under ``secret`` (constant-time comparison)."""
    return isinstance(claimed, str) and hmac.compare_digest(tag(secret, data), claimed)
