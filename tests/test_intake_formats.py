"""Every format read from outside, fed its hostile set (issue 51): a FIFO, a link to /dev/zero, a
100 MB file, a 10,000-deep nesting, NaN, 1e400 and a field of the wrong type. Each goes through the
one intake (:func:`harness.core.hashing.read_json`: a regular file, its size bounded before a byte
is read, nesting bounded, then the format's one declared schema, held to by
:func:`harness.core.typecheck.held_to`); docs/CACHE_AND_FAULTS.md ("One intake for what is read
from outside") lists what each format does:

* a file of a model's or an adapter's folder: one ``error:`` line naming the file (and the field),
  exit 2, before anything loads;
* a cache's metadata: discarded (the cache is computed again), never an error;
* an endpoint's answer: a wrong answer, exit 6 (its size is bounded by the transfer: test_endpoint).

Each format runs in a child process that reports what every case raised and its own peak memory
(``VmHWM``): a case that read 100 MB or /dev/zero, or hung on the FIFO, fails here. Another
test drives the real command line for the formats a run reads first, and a hypothesis test feeds
each schema malformed instances and finds only the intake's own error, never another exception.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_faults import one_error_line

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("fifo", "zero", "big", "deep", "nan", "huge", "wrong type")
NUMBER = "@@NUMBER@@"  # where NaN or 1e400 goes in a format's valid document
# Peak memory of a child that read nothing big: its imports (numpy; torch for the training state)
# and the cases. A child that read the 100 MB file or /dev/zero whole would hold over 100 MB more.
MEMORY_BOUND = {"training state.json": 330 << 20}  # measured: 230 MiB (torch)
DEFAULT_BOUND = 100 << 20  # measured: 50 MiB

# Each format: the file's name, a valid document, the same with the number slot (NaN or 1e400 goes
# there), the same with a field of the wrong type, the field named in the error line, and how it ends.
FORMATS: dict[str, dict] = {
    "config.json": dict(
        file="config.json", valid={"model_type": "bert", "hidden_size": 8, "num_hidden_layers": 1},
        number={"model_type": "bert", "hidden_size": NUMBER}, wrong={"hidden_size": "8"}, field="hidden_size",
        ends="error"),
    "tokenizer_config.json": dict(
        file="tokenizer_config.json", valid={"model_max_length": 512}, number={"model_max_length": NUMBER},
        wrong={"add_bos_token": "yes"}, field="model_max_length|add_bos_token", ends="error"),
    "tokenizer.json": dict(
        file="tokenizer.json", valid={"post_processor": None},
        number={"post_processor": {"type": "BertProcessing", "cls": ["[CLS]", NUMBER]}},
        wrong={"post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": 5}}]}},
        field=r"post_processor\.(cls\[1\]|single\[0\]\.SpecialToken\.id)", ends="error"),
    "model.safetensors.index.json": dict(
        file="model.safetensors.index.json", valid={"weight_map": {}}, number={"weight_map": {"a": NUMBER}},
        wrong={"weight_map": ["model.safetensors"]}, field="weight_map", ends="error"),
    "adapter_config.json": dict(
        file="adapter_config.json", valid={"peft_type": "LORA", "r": 4, "lora_alpha": 8},
        number={"peft_type": "LORA", "r": 4, "lora_alpha": NUMBER}, wrong={"peft_type": "LORA", "r": True,
                                                                          "lora_alpha": 8},
        field="lora_alpha|r is not an integer", ends="error"),
    "modules.json": dict(
        file="modules.json", valid=[], number=[{"idx": NUMBER, "type": "x", "path": ""}],
        wrong=[{"idx": 0, "type": 5, "path": ""}], field=r"\[0\]\.(idx|type)", ends="error"),
    "sentence_bert_config.json": dict(
        file="sentence_bert_config.json", valid={"max_seq_length": 128}, number=[NUMBER], wrong=[1],
        field="is not an object", ends="error"),
    "vector store meta.json": dict(
        file="meta.json", valid=None, number={"key": {}, "dim": NUMBER}, wrong={"key": {}, "dim": "8"},
        field="", ends="discarded"),
    "artifact meta.json": dict(
        file="meta.json", valid=None, number={"key": {}, "info": {}, "files": {"a": NUMBER}, "checksum": "x"},
        wrong={"key": {}, "info": {}, "files": [], "checksum": "x"}, field="", ends="discarded"),
    "code digest memo": dict(
        file="code-digests.json", valid=None, number={"schema": NUMBER, "files": {}, "check": "x"},
        wrong={"schema": 2, "files": {"a": {"digest": 1, "imports": []}}, "check": "x"}, field="", ends="discarded"),
    "fingerprint memo": dict(
        file="fingerprints.json", valid=None, number={"/m": {"stamp": [], "sha256": NUMBER}},
        wrong={"/m": {"stamp": "x", "sha256": "x"}}, field="", ends="discarded"),
    "training state.json": dict(
        file="state.json", valid=None,
        number={"identity": {}, "step": NUMBER, "scheduler_last_epoch": 0, "param_groups": [], "extra": {},
                "sha256": "x"},
        wrong={"identity": {}, "step": "1", "scheduler_last_epoch": 0, "param_groups": [], "extra": {},
               "sha256": "x"}, field="", ends="discarded"),
}

# The child: plants each hostile case for one format, calls the format's real reader, reports.
CHILD = r'''
import json, os, sys
from pathlib import Path

fmt, folder, cases = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])

def reader(fmt):
    if fmt == "config.json":
        from harness.core.encoding.backbone import resolve_backbone
        return lambda d: resolve_backbone(str(d))
    if fmt == "tokenizer_config.json":
        from harness.core.encoding.tokenizer import tokenizer_reason
        return lambda d: ((d / "tokenizer.json").write_text("{}"), tokenizer_reason(d))[1]
    if fmt == "tokenizer.json":
        from harness.core.encoding.tokenizer import template_specials
        return template_specials
    if fmt == "model.safetensors.index.json":
        from harness.core.encoding.backbone import weight_files
        return weight_files
    if fmt == "adapter_config.json":
        from harness.core.encoding.adapters import resolve_adapter
        def read(d):
            (d / "adapter_model.safetensors").write_bytes(b"")
            return resolve_adapter(str(d), lambda p: {})
        return read
    if fmt == "modules.json":
        from methods.st_pipeline import read_pipeline
        return read_pipeline
    if fmt == "sentence_bert_config.json":
        from methods.sbert import st_max_seq_length
        return st_max_seq_length
    if fmt == "vector store meta.json":
        from harness.core.vector_store import read_meta
        return lambda d: read_meta(d, {"k": 1})
    if fmt == "artifact meta.json":
        from harness.core.artifacts import ArtifactDir
        def verify(d):
            folder = ArtifactDir(d, "x", {})
            folder.dir.mkdir(parents=True, exist_ok=True)
            os.replace(d / "meta.json", folder.dir / "meta.json")
            return folder.verify()
        return verify
    if fmt == "code digest memo":
        from harness.core.codekeys import _read_memo
        return lambda d: _read_memo(d / "code-digests.json")
    if fmt == "fingerprint memo":
        from harness.core.hashing import fingerprint_dir
        def fingerprint(d):
            (d / "model").mkdir()
            (d / "model" / "w").write_text("w")
            return fingerprint_dir(d / "model", d / "fingerprints.json")
        return fingerprint
    if fmt == "training state.json":
        from methods.training.loop import TrainState
        def load(d):
            (d / "partial").mkdir()
            os.replace(d / "state.json", d / "partial" / "state.json")
            (d / "partial" / "state.safetensors").write_bytes(b"")
            return TrainState(d, {}).load({}, None, None)
        return load
    raise KeyError(fmt)

from harness.runner.cli.exits import classify
read, report = reader(fmt), []
for n, (kind, name, text) in enumerate(cases):
    d = folder / f"case{n}"
    d.mkdir()
    path = d / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "big":
        with open(path, "wb") as handle:
            handle.truncate(100 * 1000 * 1000)
    else:
        path.write_text(text, encoding="utf-8")
    try:
        value = read(d)
        report.append({"kind": kind, "raised": None, "value": repr(value)[:300]})
    except BaseException as err:
        code, line = classify(err)
        report.append({"kind": kind, "raised": type(err).__name__, "code": code, "line": line, "path": str(path)})
# VmHWM: this process's own peak since its exec (ru_maxrss keeps the parent's peak across the exec
# of a forked child: a pytest worker that has imported torch would be measured instead)
hwm = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmHWM:"))
report.append({"maxrss": int(hwm.split()[1]) * 1024})
print(json.dumps(report))
'''


def document(value, number: str) -> str:
    return json.dumps(value).replace(json.dumps(NUMBER), number)


def cases_of(fmt: str) -> list[tuple[str, str, str]]:
    spec = FORMATS[fmt]
    text = {
        "deep": '{"a": ' + "[" * 10_000 + "]" * 10_000 + "}",
        "nan": document(spec["number"], "NaN"),
        "huge": document(spec["number"], "1e400"),
        "wrong type": json.dumps(spec["wrong"]),
    }
    return [(kind, spec["file"], text.get(kind, "")) for kind in KINDS]


def run_child(fmt: str, tmp_path: Path) -> tuple[list[dict], int]:
    """The child's report per case and its peak memory; a hang (the FIFO) is a timeout, a failure."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, fmt, str(tmp_path), json.dumps(cases_of(fmt))],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    *report, memory = json.loads(done.stdout.strip().splitlines()[-1])
    return report, memory["maxrss"]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_intake_format_meets_its_hostile_set_as_documented(fmt, tmp_path):
    """On the commit before (checked by calling its readers): a FIFO ``tokenizer_config.json``
    hung ``tokenizer_reason`` forever; a 10,000-deep ``config.json`` or ``modules.json`` was a
    RecursionError traceback (exit 4); a ``sentence_bert_config.json`` holding a list an
    AttributeError; a NaN shard name in the safetensors index gave no shards to check, and
    ``tokenizer_config.json``'s ``add_bos_token: "yes"`` or ``config.json``'s
    ``max_position_embeddings: "512"`` were taken silently. Now each file of a model's folder is one
    line naming the file (and the field) and the fix, exit 2; a cache's damage is discarded; no
    case reads the 100 MB file or /dev/zero (the child's peak memory)."""
    import re

    spec = FORMATS[fmt]
    report, memory = run_child(fmt, tmp_path)
    assert memory < MEMORY_BOUND.get(fmt, DEFAULT_BOUND), f"{memory / 2**20:.0f} MiB"
    for case in report:
        if spec["ends"] == "discarded":
            assert case["raised"] is None, case  # a cache's damage costs a recomputation, no error
            continue
        assert case["raised"] == "UserError" and case["code"] == 2, case
        line = case["line"]
        assert "\n" not in line and case["path"] in line, case
        said = {"fifo": "is a FIFO, not a regular file", "zero": "is a device, not a regular file",
                "big": "is 100,000,000 bytes, over the", "deep": "nested too deep"}.get(case["kind"], spec["field"])
        assert re.search(said, line), case
        assert "; " in line, case  # the fix follows


def test_the_valid_documents_pass(tmp_path):
    """The schemas refuse the hostile set, not the ordinary file (each valid document reads)."""
    from harness.core.encoding.model_files import AdapterConfig, ModelConfig, TokenizerConfig, TokenizerFile
    from harness.core.typecheck import fits

    for fmt, schema in [("config.json", ModelConfig), ("tokenizer_config.json", TokenizerConfig),
                        ("tokenizer.json", TokenizerFile), ("adapter_config.json", AdapterConfig)]:
        assert fits(FORMATS[fmt]["valid"], schema), fmt
        assert not fits(json.loads(document(FORMATS[fmt]["number"], "NaN")), schema), fmt
    # HF's "no limit" model_max_length (an integer past 64 bits) stays readable, a float
    assert fits({"model_max_length": int(1e30)}, TokenizerConfig)
    assert not fits({"hidden_size": 1 << 63}, ModelConfig) and fits({"hidden_size": (1 << 63) - 1}, ModelConfig)


def test_an_endpoint_answer_meets_its_hostile_set_as_a_wrong_answer():
    """An answer is bytes from a socket, its size bounded there (test_endpoint: over 3 MiB for 2
    inputs is refused as it streams); its nesting, numbers and types are the schema's: each a
    WrongAnswer, which the run reports as one line, exit 6."""
    from harness.core.errors import EndpointError
    from harness.runner.cli.exits import classify
    from methods.endpoint.wire import Malformed, WrongAnswer, read_answer

    good = {"data": [{"index": 0, "embedding": [0.5, NUMBER]}]}
    for payload, says in [
        ('{"data": ' + "[" * 10_000 + "]" * 10_000 + "}", "nested too deep"),
        (document(good, "NaN"), r"data\[0\]\.embedding\[1\] is not a number"),
        (document(good, "1e400"), r"data\[0\]\.embedding\[1\] is not a number"),
        (document(good, "1" + "0" * 400), r"data\[0\]\.embedding\[1\] is not a number"),
        ('{"data": [{"index": "0", "embedding": [1]}]}', r"data\[0\]\.index is not an integer"),
        ('{"data": {"embedding": [1]}}', "data is not a list"),
        ("[1, 2]", "the answer: is not an object"),
    ]:
        with pytest.raises(WrongAnswer, match=says) as caught:
            read_answer(payload.encode(), 1, None)
        assert "\n" not in str(caught.value)
        assert classify(EndpointError(f"endpoint x: {caught.value}"))[0] == 6
    assert read_answer(document(good, "0.25").encode(), 1, None).vectors.tolist() == [[0.5, 0.25]]
    with pytest.raises(Malformed):
        read_answer(b'{"data": [', 1, None)


# -- through the command line: the formats a run reads first -----------------------------------------

# Runs its arguments as a command in a forked child and ends with its exit code, after writing the
# child's own peak memory (wait4's ru_maxrss, bytes) as stderr's last line.
LAUNCHER = """import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
sys.stderr.write(f"\\n@peak {usage.ru_maxrss * 1024}\\n")
sys.exit(os.waitstatus_to_exitcode(status) % 256)
"""


def measured(argv: list[str], cwd: Path) -> tuple[int, str, int]:
    """(exit code, stderr, peak memory in bytes) of a child: ``os.wait4`` gives this child's own
    usage (``RUSAGE_CHILDREN`` would be the largest of every child this worker ever waited for)."""
    with open(cwd / "stderr", "w+") as err:
        # Through a small launcher that forks and execs the command: a child's ru_maxrss starts from
        # the peak of the process it was forked from (kept across exec), here a small one, not this
        # pytest worker (hundreds of MiB once a test imported torch).
        proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, *argv], cwd=cwd, stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True)
        timer = threading.Timer(120, os.killpg, (proc.pid, 9))  # a hang (the FIFO) ends as a failure, not a hung suite
        timer.start()
        proc.wait()
        timer.cancel()
        err.seek(0)
        text, marked, peak = err.read().rpartition("\n@peak ")
        return proc.returncode, text if marked else peak, int(peak) if marked else -1


ROADS = {  # how a run is pointed at a file of each format
    "config.json": ("config.json", lambda model, path: ["--backbone", str(path.parent)]),
    "adapter_config.json": ("adapter_config.json", lambda model, path: ["--backbone", str(model), "--set",
                                                                        f"avg.adapter={path.parent}"]),
    "--config": ("bench.toml", lambda model, path: ["--config", str(path)]),
}
TOML = {"nan": "seed = nan\n", "huge": "seed = 1e400\n", "wrong type": 'seed = "8"\n',
        "deep": "x = " + "[" * 10_000 + "]" * 10_000 + "\n"}


@pytest.mark.heavy
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("road", list(ROADS))
def test_the_hostile_set_through_the_command_line_is_one_line(road, kind, tiny_bert, tmp_path):
    """The real CLI (``run_bench.py --dry-run``): one ``error:`` line, exit 2, no traceback, and
    the process's peak memory bounded (nothing read the 100 MB file or /dev/zero)."""
    import shutil

    name, args = ROADS[road]
    folder = tmp_path / "given"
    if road == "config.json":
        shutil.copytree(tiny_bert, folder)
    else:
        folder.mkdir()
        (folder / "adapter_model.safetensors").write_bytes(b"")  # read after its config
    path = folder / name
    path.unlink(missing_ok=True)
    spec = FORMATS.get(road, {})
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "big":
        with open(path, "wb") as handle:
            handle.truncate(100 * 1000 * 1000)
    elif road == "--config":
        path.write_text(TOML[kind], encoding="utf-8")
    else:
        base = json.loads((tiny_bert / "config.json").read_text()) if road == "config.json" else {}
        text = {"deep": '{"a": ' + "[" * 10_000 + "]" * 10_000 + "}",
                "nan": document({**base, **spec["number"]}, "NaN"),
                "huge": document({**base, **spec["number"]}, "1e400"),
                "wrong type": json.dumps({**base, **spec["wrong"]})}[kind]
        path.write_text(text, encoding="utf-8")
    argv = [sys.executable, str(ROOT / "run_bench.py"), *args(tiny_bert, path), "--methods", "avg", "--tasks",
            "stsb", "--dry-run", "--no-progress", "--output-dir", str(tmp_path / "out"), "--cache-dir",
            str(tmp_path / "cache")]
    code, err, memory = measured(argv, tmp_path)
    line = one_error_line(err)
    assert code == 2 and str(path) in line, err
    # measured 409 MiB for every case (the run's imports); reading the 100 MB file would add 200 MB
    assert memory < 500 << 20, f"{memory / 2**20:.0f} MiB"


# -- property: malformed instances of each schema meet only the intake's error ------------------------

JSON_SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(1 << 70), max_value=1 << 70) | st.floats()
                | st.text(max_size=8) | st.sampled_from([10**400, -(10**400), 1 << 63]))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=6), inner, max_size=4), max_leaves=20)


def schemas() -> dict:
    from harness.core.artifacts import ArtifactMeta
    from harness.core.codekeys import ParseMemo
    from harness.core.encoding.model_files import (
        AdapterConfig,
        ModelConfig,
        PostProcessor,
        TokenizerConfig,
        TokenizerFile,
        WeightIndex,
    )
    from harness.core.hashing import FingerprintMemo
    from harness.core.vector_store import StoreMeta
    from methods.endpoint.wire import EmbeddingsAnswer
    from methods.st_pipeline import StModule

    return {"config.json": ModelConfig, "tokenizer_config.json": TokenizerConfig, "tokenizer.json": TokenizerFile,
            "post_processor": PostProcessor, "index": WeightIndex, "adapter_config.json": AdapterConfig,
            "modules.json": list[StModule], "vector store meta.json": StoreMeta, "artifact meta.json": ArtifactMeta,
            "code digest memo": ParseMemo, "fingerprint memo": dict[str, FingerprintMemo],
            "answer": EmbeddingsAnswer}


def malformed(schema) -> st.SearchStrategy:
    """An instance of ``schema`` with arbitrary JSON (NaN, ±inf, integers past 64 bits, nesting,
    wrong types) under its own field names, or any JSON value at all."""
    import typing

    origin, args = typing.get_origin(schema), typing.get_args(schema)
    if origin is list:
        return st.lists(malformed(args[0]), max_size=3) | JSON_VALUES
    if origin is dict:
        return st.dictionaries(st.text(max_size=6), malformed(args[1]), max_size=3) | JSON_VALUES
    hints = typing.get_type_hints(schema)
    fields = st.fixed_dictionaries({}, optional={key: JSON_VALUES for key in hints})
    return fields | JSON_VALUES | st.lists(fields, max_size=3)


@pytest.mark.parametrize("name", list(schemas()))
def test_malformed_instances_of_each_schema_meet_only_the_intakes_error(name, tmp_path_factory):
    """hypothesis: a generated document is read by the one intake (the file written as JSON, NaN
    and Infinity included) and either fits its schema (the checker agrees) or raises the one
    UserError line; no other exception, ever. An endpoint answer's only error is WrongAnswer."""
    from harness.core.errors import UserError
    from harness.core.hashing import read_json
    from harness.core.typecheck import fits
    from methods.endpoint.wire import Malformed, WrongAnswer, read_answer

    schema = schemas()[name]
    folder = tmp_path_factory.mktemp("schema")

    @settings(max_examples=40, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(malformed(schema))
    def check(value):
        text = json.dumps(value, allow_nan=True)
        if name == "answer":
            try:
                read_answer(text.encode(), 1, None)
            except (WrongAnswer, Malformed) as err:
                assert "\n" not in str(err)
            return
        path = folder / "x.json"
        path.write_text(text, encoding="utf-8")
        try:
            read = read_json(path, schema, "the fix")
        except UserError as err:
            assert "\n" not in str(err) and str(err).startswith(str(path)) and str(err).endswith("the fix")
            assert not fits(value, schema)
        else:
            assert fits(read, schema)

    check()



def test_a_400_digit_integer_for_a_float_setting_is_one_line(tmp_path):
    """``tolerance = 1000…0`` (400 digits) in ``--config``: the checker's ``math.isfinite`` raised
    OverflowError, exit 4 with a traceback; now "expected a number", exit 2."""
    (tmp_path / "bench.toml").write_text("tolerance = 1" + "0" * 400 + "\n", encoding="utf-8")
    argv = [sys.executable, str(ROOT / "run_bench.py"), "--config", str(tmp_path / "bench.toml"), "--methods", "avg",
            "--tasks", "stsb", "--dry-run", "--no-progress", "--output-dir", str(tmp_path / "out")]
    code, err, _ = measured(argv, tmp_path)
    assert code == 2 and one_error_line(err).endswith("0: expected a number"), err


@pytest.mark.parametrize(("header", "says"), [
    (b'{"a": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", "has a header that is not valid JSON"),  # was RecursionError
    (b'{"a": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 4]}}', r"a\.shape\[0\] is not an integer"),
    (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [true, 4]}}', r"a\.data_offsets\[0\] is not an integer"),
    (b'{"a": {"dtype": 5, "shape": [1], "data_offsets": [0, 4]}}', r"a\.dtype is not a string"),
])
def test_a_safetensors_header_is_held_to_its_schema(header, says, tmp_path):
    """A safetensors file's JSON header is read from outside too: its entries are held to
    ``TensorEntry``; a 10,000-deep header was a RecursionError traceback (exit 4)."""
    from harness.core.encoding.backbone import check_safetensors
    from harness.core.errors import UserError

    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
    with pytest.raises(UserError, match=says) as caught:
        check_safetensors(tmp_path, "m")
    assert "\n" not in str(caught.value) and str(tmp_path / "model.safetensors") in str(caught.value)
