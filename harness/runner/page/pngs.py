"""The images the page embeds, as ``data:`` URIs: only PNGs this tool wrote (:func:`tool_png`).

A regular file in ``plots/`` (read without following a link: a link to ``~/.ssh/id_rsa`` named
``plots/x.png`` would otherwise ship that file, base64, inside the page), a whole PNG (signature,
every chunk's CRC, ``IEND`` last) and one that carries the text chunk the tool's renderer writes.
Anything else is left out with one warning."""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from pathlib import Path

from harness.runner.records.lock import NotAFile, link_target, read_inside
from harness.runner.tables.plots import png_problem

log = logging.getLogger("sts_bench.report")
ONLY_OURS = "it embeds only PNGs sts-bench wrote"


@dataclass(frozen=True)
class Figure:
    """An embedded image: its caption (also its ``alt``) and its ``data:`` URI."""

    caption: str
    uri: str


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
