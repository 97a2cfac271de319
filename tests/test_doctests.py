"""The worked examples in docstrings are run: an example that no longer holds fails here."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                 for folder in ("harness", "methods") for path in (ROOT / folder).rglob("*.py")
                 if ">>>" in path.read_text(encoding="utf-8"))


def test_the_examples_are_found():
    assert "harness.core.encoding.batching" in MODULES and len(MODULES) >= 10


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
