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
    assert codekeys.CodeDigests(None).modules("plugpkg.method") == ["plugpkg.helper", "plugpkg.method"]
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
    # flow_fit is imported inside a function
    assert "methods.training.flow_fit" in codekeys.CodeDigests(None).modules("methods.flow")
    vectors = store.vectors({"a": 1}, code=("harness.core.encoding.forward",))
    assert vectors.key["code"] == codekeys.code_digest("harness.core.encoding.forward")


def test_digesting_imports_nothing_heavy():
    import subprocess

    code = ("import sys; from harness.core.codekeys import code_digest; code_digest('methods.flow', "
            "'harness.core.encoding.forward'); print(sorted(m for m in ('torch', 'transformers', 'numpy', "
            "'methods.flow') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def _reference_parsed(data: bytes, package: str) -> tuple[str, list[str]]:
    """The digest and imports written the plain way, as the module computed them before its single
    pass: ``ast.walk`` over every node, ``ast.dump`` of the whole stripped tree."""
    import ast
    import hashlib

    tree = ast.parse(data)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    imports: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            imports.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            module = ".".join(x for x in (base, node.module or "") if x)
            imports.add(module)
            imports.update(f"{module}.{alias.name}" for alias in node.names)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            node.returns = None
        elif isinstance(node, ast.arg):
            node.annotation = None
        elif isinstance(node, ast.AnnAssign):
            node.annotation = ast.Name(id="_", ctx=ast.Load())
    return hashlib.sha256(ast.dump(tree).encode("utf-8")).hexdigest(), sorted(imports)


EVERY_SHAPE = '''"""Module docstring."""
from __future__ import annotations
import os.path as p, json
from . import sibling
from ..up import thing as t
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from heavy import Types
    if True:
        import deeper
else:
    import only_at_runtime
x: int = 1
y: "list[int]"
class C(Base, metaclass=M):
    """Class docstring."""
    field: dict[str, int] = {}
    async def m(self, a: int, /, b: str = "s", *args: int, c: float, **kw: object) -> None:
        """Method docstring."""
        import inside_method
        async with open(p) as f:
            async for line in f:
                pass
def only_doc():
    """Nothing but this."""
try:
    import optional
except* ImportError as err:
    optional = None
else:
    z = lambda q, *r, s=1: q
finally:
    del x
match command:
    case {"go": [a, *rest]} if a:
        import in_match
    case Point(x=0) | None:
        pass
while y:
    w = [i async for i in g() if i] if False else {k: v for k, v in d}
'''


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="ast.dump leaves empty fields out from 3.13 on")
def test_the_single_pass_equals_the_plain_walk_and_dump_on_every_module_and_every_statement_shape():
    """The one-pass normaliser (quicker, the cold run pays it for ~110 modules) keeps every digest and
    import list of the plain computation, so no cache key moved: on every module of the tree and
    on a module with every statement that can hold a block, an import or an annotation."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sources = [(p.read_bytes(), "harness.x.y")
               for d in ("harness", "methods", "tests") for p in (root / d).rglob("*.py")]
    sources.append((EVERY_SHAPE.encode(), "pkg.sub"))
    assert len(sources) > 200
    for data, package in sources:
        assert codekeys._parsed(data, package) == _reference_parsed(data, package)
    digest, imports = codekeys._parsed(EVERY_SHAPE.encode(), "pkg.sub")
    assert "heavy" not in imports and "deeper" not in imports and "only_at_runtime" in imports
    expected = {"inside_method", "in_match", "optional", "pkg.sub", "pkg.sub.sibling", "pkg.up.thing", "os.path"}
    assert expected <= set(imports)
    annotated = EVERY_SHAPE.replace("c: float", "c: int").replace("-> None", "-> int").replace("x: int", "x: str")
    assert codekeys._parsed(annotated.encode(), "pkg.sub")[0] == digest
    assert codekeys._parsed(EVERY_SHAPE.replace("case Point(x=0)", "case Point(x=1)").encode(), "pkg.sub")[0] != digest
