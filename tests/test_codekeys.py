"""Caches keyed on code (harness.core.codekeys): the digest follows what computes a result and
ignores what does not (docstrings, comments, annotations-only imports)."""

from __future__ import annotations

import json
import sys

import pytest

from harness.core import codekeys


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A throwaway first-party-looking package ``plugpkg`` (a method and a helper) on sys.path."""
    root = tmp_path / "src"
    (root / "plugpkg").mkdir(parents=True)
    (root / "plugpkg" / "__init__.py").write_text("")
    (root / "plugpkg" / "helper.py").write_text("def scale(x):\n    return x * 2\n")
    (root / "plugpkg" / "types_only.py").write_text("X = 1\n")
    (root / "plugpkg" / "method.py").write_text(
        '"""A method."""\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from plugpkg import types_only\n\n'
        "def fit(x):\n    from plugpkg.helper import scale  # imported where it is used\n    return scale(x)\n")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(codekeys, "_IN_MEMORY", codekeys.CodeDigests(None))
    codekeys.source_path.cache_clear()
    yield root / "plugpkg"
    codekeys.source_path.cache_clear()
    sys.modules.pop("plugpkg", None)


def digest(digests: codekeys.CodeDigests | None = None) -> str:
    digests = digests or codekeys._IN_MEMORY
    digests.forget()
    return digests.digest("plugpkg.method")


def test_a_method_digest_covers_its_helpers_but_not_annotation_imports(package):
    assert codekeys.code_modules("plugpkg.method") == ["plugpkg.helper", "plugpkg.method"]
    before = digest()
    (package / "types_only.py").write_text("X = 2\n")  # under TYPE_CHECKING: never runs
    assert digest() == before
    (package / "helper.py").write_text("def scale(x):\n    return x * 3\n")  # a helper the method calls
    assert digest() != before


def test_docstrings_comments_and_layout_do_not_change_the_digest_code_does(package):
    before = digest()
    method = package / "method.py"
    text = method.read_text()
    method.write_text(text.replace('"""A method."""', '"""A method, documented at length."""')
                      .replace("# imported where it is used", "# another comment") + "\n\n# trailing\n")
    assert digest() == before
    method.write_text(text.replace("return scale(x)", "return scale(x) + 0"))
    assert digest() != before


def test_the_memo_on_disk_is_checked_and_a_damaged_one_only_costs_a_parse(package, tmp_path, caplog):
    memo = tmp_path / "code-digests.json"
    first = digest(codekeys.CodeDigests(memo))
    assert first == digest()  # the same value with or without a memo file
    data = json.loads(memo.read_text())
    assert data["files"] and data["check"]
    entry = next(iter(data["files"].values()))
    entry["digest"] = "0" * 64  # a lie: caught by the checksum, never believed
    memo.write_text(json.dumps(data))
    assert digest(codekeys.CodeDigests(memo)) == first and "does not match its checksum" in caplog.text


def test_the_memo_file_is_the_objects_own_and_the_convenience_digest_writes_none(package, tmp_path):
    """Two CodeDigests with two files (two caches) each write their own; code_digest writes no file."""
    one, two = tmp_path / "one" / "code-digests.json", tmp_path / "two" / "code-digests.json"
    first = codekeys.CodeDigests(one)
    assert digest(first) == digest()
    assert one.is_file() and not two.exists()
    before = one.read_bytes()
    assert digest(codekeys.CodeDigests(two)) == digest(first) and two.is_file()
    assert one.read_bytes() == before  # the second object never wrote the first one's file
    assert sorted(p.name for p in tmp_path.rglob("*.json")) == ["code-digests.json"] * 2


def test_every_cache_folder_carries_the_digest_of_its_code(tmp_path):
    from harness.core.artifacts import ArtifactStore

    store = ArtifactStore(tmp_path)
    whitening = store.folder("whitening", {"a": 1}, code=("methods.whitening",))
    flow = store.folder("whitening", {"a": 1}, code=("methods.flow",))
    assert whitening.key["code"] == codekeys.code_digest("methods.whitening") != flow.key["code"]
    assert whitening.dir != flow.dir  # same inputs, other code: another folder
    assert "methods.training.flow_fit" in codekeys.code_modules("methods.flow")  # imported inside a function
    vectors = store.vectors({"a": 1}, code=("harness.core.encoding.forward",))
    assert vectors.key["code"] == codekeys.code_digest("harness.core.encoding.forward")


def test_digesting_imports_nothing_heavy():
    import subprocess

    code = ("import sys; from harness.core.codekeys import code_digest; code_digest('methods.flow', "
            "'harness.core.encoding.forward'); print(sorted(m for m in ('torch', 'transformers', 'numpy', "
            "'methods.flow') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
