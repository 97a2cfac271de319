"""The method contract (harness.method_api, docs/ARCHITECTURE.md "The method contract"): each way a
class can break it is refused when it is registered, as ONE PluginError line naming the method, its
file and what to add; every built-in keeps it (a built-in that breaks it is a bug of ours)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.core.errors import PluginError, UserError
from harness.method_api import BASE_VIEWS, EmbeddingMethod, Option, PairScoringMethod, PostProcessor
from methods import PROCESS, builtin_methods
from methods.plugins import check_class, check_contract

HERE = "test_method_contract.py"


def embedding(**attributes):
    """A working embedding method class with ``attributes`` changed (None removes one)."""
    body = {"name": "bad", "summary": "a method", "options": (),
            "encode": lambda self, sentences: np.ones((len(sentences), 2), dtype=np.float32)}
    body.update(attributes)
    return type("Bad", (EmbeddingMethod,), {k: v for k, v in body.items() if v is not None})


def post(options):
    return type("Bad", (PostProcessor,), {"name": "bad", "summary": "s", "options": options,
                                          "fit": lambda self, fit_set: None,
                                          "encode": lambda self, sentences: self.pooled(sentences)})


@pytest.mark.parametrize(("cls", "says"), [
    (embedding(name="Not A Name"), "Bad.name = 'Not A Name'; set a class attribute name"),
    (embedding(summary=""), "Bad has no summary; set a class attribute summary"),
    (embedding(kind="vectors"), "Bad.kind = 'vectors'; a EmbeddingMethod's kind is 'embedding'"),
    (embedding(options=[("dim", 8, "width")]), "Bad.options[0] is ('dim', 8, 'width'), not an Option"),
    (embedding(options=(Option("dim", 8, "w", type=int), Option("dim", 4, "again", type=int))),
     "Bad has two options named 'dim'; give each option its own name"),
    (embedding(options=(Option("dim", "8", "width", type=int),)),
     "Bad's option 'dim' has default '8' of type str, not int; give it a default of its type"),
    (embedding(options=(Option("mode", "c", "m", choices=("a", "b")),)),
     "Bad's option 'mode' has default 'c', not one of its choices ('a', 'b')"),
    (embedding(encode=None), "Bad defines no encode(sentences)"),
    (type("Bad", (PairScoringMethod,), {"name": "bad", "summary": "s"}), "Bad defines no score_pairs(s1, s2)"),
    (embedding(uses_fit_set=True), "Bad has uses_fit_set = True but no fit(fit_set); define fit"),
    (post(()), "Bad derives from PostProcessor but has no 'view' option; add Option(\"view\""),
    (post((Option("view", "avg", "v"),)), "Bad's 'view' option (default 'avg', choices None) must choose among"),
])
def test_each_violation_is_one_line_naming_the_method_its_file_and_the_fix(cls, says):
    with pytest.raises(PluginError) as caught:
        PROCESS.layer(cls)
    line = str(caught.value)
    assert "\n" not in line and says in line, line
    assert line.startswith("register_method") and f"plugin method '{cls.name}'" in line and HERE in line, line
    assert "bad" not in PROCESS.plugins()


def test_a_class_that_is_not_a_method_at_all_is_refused_too():
    with pytest.raises(PluginError, match=f"is not a method class.*{HERE}"):
        PROCESS.layer(type("Bad", (), {"name": "bad"}))  # type: ignore[arg-type]
    with pytest.raises(UserError, match="is not a method class"):
        PROCESS.layer(42)  # type: ignore[arg-type]


def test_the_smallest_classes_that_keep_it_are_accepted():
    layer = PROCESS.layer(embedding(options=(Option("dim", 8, "width", type=int), Option("scale", 1, "s", type=float))),
                          post((Option("view", "avg", "pooled view", choices=BASE_VIEWS),)))
    assert layer.get("bad").__mro__[1] is PostProcessor  # the later class replaced the earlier one
    assert "bad" not in PROCESS.plugins()


@pytest.mark.parametrize("cls", builtin_methods(), ids=lambda cls: cls.name)
def test_every_builtin_keeps_the_contract(cls):
    check_class(cls, f"built-in {cls.name}")
    check_contract(cls, f"built-in {cls.name}")
