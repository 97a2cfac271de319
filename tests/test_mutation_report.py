"""benchmarks/tools/mutation_report.py on fixed mutmut output (no mutmut run here), and pyproject.toml's
[tool.mutmut] naming files that exist."""

from __future__ import annotations

import tomllib
from pathlib import Path

from benchmarks.tools import mutation_report as report

ROOT = Path(__file__).resolve().parent.parent

ORIGINAL = '''import math


def half(x):
    """Docstring."""
    y = x / 2
    return y


class Box:
    def area(self, w, h=1):
        return w * h
'''
# mutmut's copy of ORIGINAL: the function as <mangled>__mutmut_orig and each mutant beside it.
MUTATED = '''import math
def x_half__mutmut_orig(x):
    """Docstring."""
    y = x / 2
    return y
def x_half__mutmut_1(x):
    """Docstring."""
    y = x * 2
    return y
class Box:
    def xǁBoxǁarea__mutmut_orig(self, w, h=1):
        return w * h
    def xǁBoxǁarea__mutmut_2(self, w, h=2):
        return w * h
'''


def test_results_are_parsed_from_mutmut_results_lines():
    text = ("    harness.core.scoring.x_spearman__mutmut_3: survived\n"
            "    harness.core.scoring.xǁBoxǁarea__mutmut_12: not checked\n"
            "progress noise\n    harness.core.significance.x_t__mutmut_1: killed\n")
    assert report.parse_results(text) == {
        "harness.core.scoring.x_spearman__mutmut_3": "survived",
        "harness.core.scoring.xǁBoxǁarea__mutmut_12": "not checked",
        "harness.core.significance.x_t__mutmut_1": "killed",
    }


def test_a_mutant_name_gives_its_module_file_and_function():
    assert report.split_name("harness.core.scoring.x_spearman__mutmut_3") == ("harness/core/scoring.py",
                                                                             "x_spearman")
    assert report.split_name("methods.flow.xǁFlowǁencode__mutmut_10") == ("methods/flow.py", "xǁFlowǁencode")


def test_a_survivor_is_located_at_its_line_in_the_original_module():
    # `y = x / 2` is line 6 of ORIGINAL; the method's def line (a default argument) is line 11.
    assert report.locate(MUTATED, ORIGINAL, "m.x_half__mutmut_1") == (6, "y = x / 2", "y = x * 2")
    assert report.locate(MUTATED, ORIGINAL, "m.xǁBoxǁarea__mutmut_2") == (
        11, "def xǁBoxǁarea(self, w, h=1):", "def xǁBoxǁarea(self, w, h=2):")


def test_the_table_counts_each_status_and_scores_killed_and_timeouts_over_the_checked():
    statuses = {"a.x_f__mutmut_1": "killed", "a.x_f__mutmut_2": "timeout", "a.x_f__mutmut_3": "survived",
                "a.x_f__mutmut_4": "not checked", "b.x_g__mutmut_1": "killed", "b.x_g__mutmut_2": "no tests"}
    text = report.render(statuses, {"a.x_f__mutmut_3": (7, "y = 1", "y = 2")}, "header")
    # a.py: 4 mutants, 3 checked, 2 caught (killed + timeout) -> 66.7 %; b.py: 1 of 2; all: 3 of 5.
    assert "| `a.py` | 4 | 1 | 1 | 1 | 0 | 1 | 66.7 % (2/3) |" in text
    assert "| `b.py` | 2 | 1 | 0 | 0 | 1 | 0 | 50.0 % (1/2) |" in text
    assert "| **all** | 6 | 2 | 1 | 1 | 1 | 1 | 60.0 % (3/5) |" in text
    assert "- `a.py:7` `x_f__mutmut_3`: `y = 1` → `y = 2`" in text
    assert text.startswith(report.BEGIN) and text.endswith(report.END)


def test_the_mutmut_config_names_paths_that_exist():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["mutmut"]
    targets = [a for a in config["pytest_add_cli_args_test_selection"] if a.startswith("tests/")]
    paths = [*config["source_paths"], *config["only_mutate"], *config["also_copy"],
             *(t.split("::")[0] for t in targets)]
    assert targets and config["only_mutate"]
    assert [p for p in paths if not (ROOT / p).exists()] == []
    assert all(any(m.startswith(s) for s in config["source_paths"]) for m in config["only_mutate"])
