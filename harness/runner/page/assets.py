"""The report page's CSS and JavaScript: package data files (``static/page.css``,
``static/page.js``) that :mod:`.html` inlines into ``results/index.html``, so nothing is fetched at
view time and the page works from a file, an archived CI artifact, or offline.

They are read from the installed package (:mod:`importlib.resources`), not from the source tree:
``pyproject.toml``'s ``[tool.setuptools.package-data]`` ships them in the wheel."""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

from markupsafe import Markup

PACKAGE = "harness.runner.page"
# What would end a <style> or <script> element early, or open a comment, inside its raw text: the
# browser reads neither entities nor escapes there, so such a file cannot be inlined as is.
ENDS_RAW_TEXT = re.compile(r"</(style|script)|<!--", re.IGNORECASE)


@cache
def static_text(name: str) -> Markup:
    """The file ``static/<name>`` of the package, as markup to inline in a ``<style>`` or
    ``<script>`` element.

    It is Markup (not escaped by the template) because a raw-text element decodes no entities:
    escaped, ``details > summary`` would reach the browser as ``details &gt; summary``. That is safe
    only because the text is the package's own file, never anything a run or a user wrote, and it
    is refused if it holds a sequence that would end its element (:data:`ENDS_RAW_TEXT`)."""
    text = files(PACKAGE).joinpath("static", name).read_text(encoding="utf-8")
    found = ENDS_RAW_TEXT.search(text)
    if found:
        raise ValueError(f"static/{name} holds {found.group(0)!r}, which would end its element")
    return Markup(text)  # the package's own file, checked above (see the docstring)


def css() -> Markup:
    """The page's stylesheet (``static/page.css``)."""
    return static_text("page.css")


def js() -> Markup:
    """The page's script (``static/page.js``): a ``table.sortable`` sorts by a click on a header."""
    return static_text("page.js")
