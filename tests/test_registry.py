from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

from harness.core.data.tasks import get_task
from harness.core.errors import UserError
from methods import METHODS, all_methods, get_method


def test_every_registered_name_resolves_to_its_class():
    for name in METHODS:
        cls = get_method(name)
        assert cls.name == name
        assert cls.summary


def test_unknown_method_suggests_the_closest_name():
    with pytest.raises(UserError, match=r"unknown method 'whitenning' \(did you mean 'whitening'\?\)"):
        get_method("whitenning")


def test_task_names_forgive_case_and_dashes_and_suggest():
    assert get_task("STS-B").name == "stsb"
    assert get_task("SICK-R").name == "sickr"
    assert get_task("stsbenchmark").name == "stsb"
    with pytest.raises(UserError, match=r"did you mean 'sickr'"):
        get_task("sickk")


def test_method_options_become_flags():
    flags = {f"--{m.name}-{o.name}" for m in all_methods() for o in m.options}
    assert {"--whitening-k", "--whitening-view", "--sbert-model"} <= flags


def test_import_harness_does_not_import_torch():
    code = ("import sys, harness, harness.runner.settings.config, harness.core.data.tasks, methods; "
            "from methods import all_methods; all_methods(); "
            "print(sorted(m for m in ('torch', 'transformers', 'datasets', 'mteb') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
