"""The images the page embeds, as ``data:`` URIs: only PNGs this tool wrote (:func:`tool_png`).

A regular file in ``plots/`` (read without following a link: a link to ``~/.ssh/id_rsa`` named
``plots/x.png`` would otherwise ship that file, base64, inside the page), a whole PNG (signature,
every chunk's CRC, ``IEND`` last) and one that carries the text chunk the tool's renderer writes.
Anything else is left out with one warning."""

from __future__ import annotations

import base64
import logging
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from harness.runner.records.lock import NotAFile, link_target, read_inside
from harness.runner.tables.plots import INPUT_KEY

log = logging.getLogger("sts_bench.report")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Text chunks the tool's renderer (harness.runner.tables.plots.save_figure) writes: the digest of a
# figure's inputs where it has one (history.png), and matplotlib's own "Software" line on every
# figure.
TOOL_TEXT = (INPUT_KEY.encode("latin-1") + b"\0", b"Software\0Matplotlib version")
ONLY_OURS = "it embeds only PNGs sts-bench wrote"


@dataclass(frozen=True)
class Figure:
    """An embedded image: its caption (also its ``alt``) and its ``data:`` URI."""

    caption: str
    uri: str


def png_problem(data: bytes, texts: dict[bytes, bytes] | None = None) -> str | None:
    """Why ``data`` is not a PNG the tool wrote (None: it is one): the PNG signature, an ``IHDR``
    first, every chunk whole with its CRC right, ``IEND`` last and nothing after it, and a text
    chunk of :data:`TOOL_TEXT`. Its ``tEXt`` chunks go into ``texts`` (keyword: text) when given.

    >>> png_problem(b"-----BEGIN OPENSSH PRIVATE KEY-----")
    'not a PNG (no PNG signature)'
    """
    if not data.startswith(PNG_SIGNATURE):
        return "not a PNG (no PNG signature)"
    offset, first, ours = len(PNG_SIGNATURE), True, False
    while offset + 12 <= len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind, body = data[offset + 4 : offset + 8], data[offset + 8 : offset + 8 + length]
        crc = data[offset + 8 + length : offset + 12 + length]
        whole = len(body) == length and len(crc) == 4
        if not whole or zlib.crc32(kind + body) != struct.unpack(">I", crc)[0]:
            return f"a damaged PNG (chunk {kind.decode('latin-1')!r} at byte {offset})"
        if first and kind != b"IHDR":
            return "not a PNG (no IHDR chunk first)"
        first = False
        ours = ours or (kind == b"tEXt" and body.startswith(TOOL_TEXT))
        if kind == b"tEXt" and texts is not None:
            keyword, _, text = body.partition(b"\0")
            texts[keyword] = text
        offset += 12 + length
        if kind == b"IEND":
            if offset != len(data):
                return f"a PNG with {len(data) - offset} byte(s) after its end"
            return None if ours else "a PNG sts-bench did not write (no text chunk of its renderer)"
    return "a truncated PNG (no IEND chunk)"


def tool_png(path: Path, out_dir: Path) -> bytes | None:
    """The bytes of ``path`` when it is a PNG this tool wrote inside ``out_dir`` (see the module
    docstring), else None after one warning naming the file and why it is left out."""
    try:
        data = read_inside(path, out_dir)
    except NotAFile as err:
        log.warning("report: %s %s; left out of the page (%s)", path, err.strerror, ONLY_OURS)
        return None
    except OSError as err:
        log.warning(
            "report: %s cannot be read (%s); left out of the page", path, err.strerror or err
        )
        return None
    problem = png_problem(data)
    if problem is not None:
        log.warning("report: %s is %s; left out of the page (%s)", path, problem, ONLY_OURS)
        return None
    return data


def png_uri(data: bytes) -> str:
    """A PNG as a ``data:`` URI (base64: letters, digits, ``+``, ``/`` and ``=`` only)."""
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def plots(out_dir: Path) -> dict[str, bytes]:
    """Every PNG of ``plots/`` the page may embed, by file stem (see :func:`tool_png`); a ``plots/``
    that is a link is left out whole, with one warning (its target is never listed)."""
    folder = out_dir / "plots"
    if folder.is_symlink():
        log.warning(
            "report: %s is a symbolic link (to %s); its images are left out of the page",
            folder,
            link_target(folder),
        )
        return {}
    found = {path.stem: tool_png(path, out_dir) for path in sorted(folder.glob("*.png"))}
    return {stem: data for stem, data in found.items() if data is not None}
