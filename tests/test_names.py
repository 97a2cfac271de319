"""No silent defaults on names (issue 50): a labelled task whose classes are names names its positive
class (``positive=``), and a prompt's only placeholder is ``{sentence}``. Each road in is refused with
one ``error:`` line and exit 2, at the one place it passes: the labelled task's spec
(``declared._labelled_spec``: ``classes=``, ``[[task]]`` tables, ``hf:``) and the :class:`Prompt`
(``--set prompt/prompt2``, prompt sets, ``task_prompts``)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from sklearn.metrics import average_precision_score
from test_faults import one_error_line

from harness.core.data.declared import parse_entry
from harness.core.data.tasks import get_task, load_task
from harness.core.encoding.prompts import PROMPTEOL, Prompt
from harness.core.errors import UserError
from harness.runner.cli.parser import from_cli
from harness.runner.execution.prompt_sets import read_prompt_set
from methods import task_prompts

# 12 pairs labelled by name; a pair of equal sentences is a "yes"
WORDS = ["a dog runs", "a cat sleeps", "the man sings", "two kids play", "a bird flies", "the sun sets"]
ROWS = [(w, w, "yes") for w in WORDS] + [(w, WORDS[i - 1], "no") for i, w in enumerate(WORDS)]


def names_file(tmp_path, rows=ROWS, name="pairs.tsv"):
    path = tmp_path / name
    path.write_text("sentence1\tsentence2\tlabel\n" + "".join(f"{a}\t{b}\t{c}\n" for a, b, c in rows), "utf-8")
    return path


@pytest.fixture
def base_args(senteval_root, tiny_bert, tmp_path):
    root = tmp_path / "se"
    shutil.copytree(senteval_root, root)
    return ["--methods", "avg", "--source", "senteval", "--senteval-dir", str(root), "--backbone", str(tiny_bert),
            "--bootstrap", "0", "--no-plots"]


def nothing_written(tmp_path) -> bool:
    return not list(tmp_path.glob("cache/vectors/*/part-*.npy")) and not list(tmp_path.glob("out/runs/*.json"))


# -- labelled tasks: classes that are names name their positive class ----------------------------------------

@pytest.mark.parametrize("query", ["classes=yes,no", "label=label&classes=yes,no", "classes=yes,no&metric=roc_auc"])
def test_classes_that_are_names_without_positive_are_refused_at_the_spec(tmp_path, query):
    path = names_file(tmp_path)
    with pytest.raises(UserError) as err:
        parse_entry(f"file:{path}?{query}")
    assert str(err.value) == (f"--tasks file:{path}?{query}: classes yes, no: none is positive by default; say "
                              "which one a high similarity predicts: positive=yes (or positive=no)")


def test_three_classes_and_an_hf_dataset_are_refused_alike():
    with pytest.raises(UserError, match=r"positive=contradiction \(or positive=neutral, positive=entailment\)$"):
        parse_entry("hf:org/nli?classes=contradiction,neutral,entailment")
    with pytest.raises(UserError, match=r"classes 0, 1, 2: none is positive by default"):
        parse_entry("hf:org/nli?classes=0,1,2")
    assert parse_entry("hf:org/nli?classes=contradiction,neutral,entailment&positive=entailment").positive_index == 2
    with pytest.raises(UserError, match=r"classes a, b: positive=c is none of them; .*positive=a \(or positive=b\)$"):
        parse_entry("hf:org/nli?classes=a,b&positive=c")


@pytest.mark.parametrize(("classes", "positive"), [
    ("", "1"), ("0,1", "1"), ("1,0", "1"), ("false,true", "true"), ("TRUE,false", "TRUE"), ("No,Yes", None),
])
def test_zero_one_and_true_false_keep_their_obvious_positive(tmp_path, classes, positive):
    """1 and true are positive in either order and any case (the last class was before: 1,0 made 0 positive)."""
    path = names_file(tmp_path, [(a, b, "1" if c == "yes" else "0") for a, b, c in ROWS])
    entry = f"file:{path}?label=label" + (f"&classes={classes}" if classes else "")
    if positive is None:
        with pytest.raises(UserError, match=r"positive=No \(or positive=Yes\)"):
            parse_entry(entry)
        return
    spec = parse_entry(entry)
    assert spec.positive == positive and spec.classes[spec.positive_index] == positive


def test_an_explicit_positive_is_kept_and_its_labels_read_by_name(tmp_path):
    path = names_file(tmp_path)
    task = load_task(get_task(f"file:{path}?classes=yes,no&positive=yes"), "packaged", ["test"])
    assert task.spec.positive_index == 0
    assert task.eval.gold == tuple(float(["yes", "no"].index(c)) for _, _, c in ROWS)


def test_a_zero_one_label_file_reads_as_before(tmp_path):
    path = names_file(tmp_path, [(a, b, "1" if c == "yes" else "0") for a, b, c in ROWS])
    task = load_task(get_task(f"file:{path}"), "packaged", ["test"])
    assert (task.spec.kind, task.spec.classes, task.spec.positive) == ("pairclass", ("0", "1"), "1")
    assert task.eval.gold == tuple(1.0 if c == "yes" else 0.0 for _, _, c in ROWS)


def test_a_label_column_of_names_without_classes_names_both_keys(tmp_path):
    """The header makes the file labelled (its label column holds names); with no classes= its labels are
    not 0/1, and the line says what to add: the classes and the positive one."""
    path = names_file(tmp_path)
    with pytest.raises(UserError, match=r"pairs\.tsv:2: label 'yes' is not one of the classes 0, 1 .*"
                                        r"classes=A,B&positive=B$"):
        load_task(get_task(f"file:{path}"), "packaged", ["test"])


def test_a_task_table_of_a_config_file_is_refused_alike(tmp_path):
    names_file(tmp_path)
    (tmp_path / "bench.toml").write_text('[[task]]\nfile = "pairs.tsv"\nclasses = ["yes", "no"]\n', "utf-8")
    cfg, _ = from_cli(["--config", str(tmp_path / "bench.toml")])
    assert cfg.tasks == (f"file:{tmp_path / 'pairs.tsv'}?classes=yes,no",)  # a TOML list, as range = [0, 5]
    with pytest.raises(UserError, match=r"say which one a high similarity predicts: positive=yes"):
        get_task(cfg.tasks[0])


def test_the_cli_refuses_classes_without_positive_in_one_line(bench, base_args, tmp_path):
    path = names_file(tmp_path)
    code, _out, err = bench(*base_args, "--tasks", f"file:{path}?classes=yes,no")
    assert code == 2, err
    assert one_error_line(err).endswith("positive=yes (or positive=no)")
    (tmp_path / "bench.toml").write_text('[[task]]\nfile = "pairs.tsv"\nclasses = "yes,no"\n', "utf-8")
    code, _out, err = bench(*base_args, "--config", str(tmp_path / "bench.toml"))
    assert code == 2, err
    assert one_error_line(err).endswith("positive=yes (or positive=no)")
    assert nothing_written(tmp_path)


def test_the_named_positive_class_is_the_one_ap_ranks(bench, base_args, tmp_path):
    """positive=yes on classes yes,no (index 0, not the last class): the record's AP is scikit-learn's with
    label == "yes" as the positive, on the record's own similarities."""
    path = names_file(tmp_path)
    code, _out, err = bench(*base_args, "--tasks", f"file:{path}?classes=yes,no&positive=yes")
    assert code == 0, err
    (record,) = [json.loads(p.read_text()) for p in (tmp_path / "out" / "runs").glob("*.json")]
    assert (record["task"]["classes"], record["task"]["positive"]) == (["yes", "no"], "yes")
    similarity = np.asarray(record["pairs"]["similarity"])
    expected = 100 * average_precision_score([c == "yes" for _, _, c in ROWS], similarity)
    assert record["scores"]["metrics"]["ap"]["value"] == pytest.approx(expected)


# -- prompts: {sentence} is the only placeholder -----------------------------------------------------------

@pytest.mark.parametrize(("template", "placeholder"), [
    ("query: {sent}", "{sent}"), ("{Sentence}", "{Sentence}"), ("Instruct: {task}\nQuery: {sentence}", "{task}"),
    ('{"a": 1} {text_1}', "{text_1}"),
])
def test_a_placeholder_other_than_sentence_is_refused_by_the_prompt(template, placeholder):
    with pytest.raises(UserError) as err:
        Prompt(template)
    assert str(err.value) == (f"{placeholder}: no such placeholder; a prompt's one placeholder is {{sentence}}: "
                              "write it once where the sentence goes, or leave it out for a prefix")


@pytest.mark.parametrize(("template", "text"), [
    ('{"a": 1} {sentence}', '{"a": 1} two dogs'), ("{} ", "{} two dogs"), ("{{sent}} ", "{{sent}} two dogs"),
    ("{0}: ", "{0}: two dogs"), ("q: {sentence}.", "q: two dogs."), ("{ sentence }", "{ sentence }two dogs"),
])
def test_braces_that_are_no_placeholder_are_the_prompts_text(template, text):
    assert Prompt(template).apply("two dogs") == text


def test_prompteols_template_still_reads_as_its_paper_writes_it():
    assert PROMPTEOL.apply('a "dog" runs') == "This sentence : \"a 'dog' runs.\" means in one word:\""


@pytest.mark.parametrize("option", ["prompt", "prompt2"])
def test_the_cli_refuses_a_misspelt_placeholder_in_one_line(bench, base_args, tmp_path, option):
    code, _out, err = bench(*base_args, "--tasks", "stsb", "--set", f"avg.{option}=query: {{sent}}")
    assert code == 2, err
    assert one_error_line(err) == (f"error: --set avg.{option}=query: {{sent}}: {{sent}}: no such placeholder; a "
                                   "prompt's one placeholder is {sentence}: write it once where the sentence goes, "
                                   "or leave it out for a prefix")
    assert nothing_written(tmp_path)


def test_a_prompt_set_and_task_prompts_name_their_file_and_entry(bench, base_args, tmp_path):
    prompts = tmp_path / "prompts.toml"
    prompts.write_text('plain = ""\nquery = "query: {sent}"\n', "utf-8")
    with pytest.raises(UserError, match=r"avg\.prompt=@.*: prompt 'query' in .*prompts\.toml: \{sent\}: no such"):
        read_prompt_set(f"@{prompts}", "avg")
    with pytest.raises(ValueError, match=r"prompts\.toml: query: \{sent\}: no such placeholder; .* is \{sentence\}"):
        task_prompts.read(f"@{prompts}")
    for option in ("prompt", "task_prompts"):
        code, _out, err = bench(*base_args, "--tasks", "stsb", "--set", f"avg.{option}=@{prompts}")
        assert code == 2, err
        assert "query" in one_error_line(err) and "{sent}: no such placeholder" in err
    assert nothing_written(tmp_path)
