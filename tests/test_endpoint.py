"""The ``endpoint`` method against a real HTTP server on 127.0.0.1 (tests/endpoint_server.py): the
vectors a run scores are the server's model's, to the bit, whatever batches, retries and faults it
took; the score is the Spearman of their cosines computed here with numpy and scipy; a warm run sends
no request; a failing endpoint is one ``error:`` line, exit 6, with what came back kept; the API key
reaches the server and nothing the run writes. The ``real`` test scores the packaged MiniLM's STS-B
vectors served by the endpoint and equals the same model's local score to every digit.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from endpoint_server import EmbeddingsServer, shortened, words
from fixtures import pairs
from scipy.stats import spearmanr

import methods.endpoint.http as endpoint_http
from harness.core.errors import EndpointError
from methods.endpoint.wire import WrongAnswer, read_answer

KEY = "sk-test-0123456789abcdefSECRET"


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    """Retries wait milliseconds, not seconds (the policy is the same: BACKOFF_S · 2^attempt)."""
    monkeypatch.setattr(endpoint_http, "BACKOFF_S", 0.01)


@pytest.fixture
def task_file(tmp_path) -> Path:
    rows = pairs(np.random.default_rng(3), 40)
    path = tmp_path / "pairs.tsv"
    path.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{g}\n" for a, b, g in rows), encoding="utf-8")
    return path


def run_args(server, task_file, *extra):
    return ("--backbone", server.url, "--methods", "endpoint", "--set", "endpoint.model=words", "--tasks",
            f"file:{task_file}", "--no-plots", "--bootstrap", "0", *extra)


def task_rows(task_file):
    lines = task_file.read_text(encoding="utf-8").splitlines()[1:]
    return [line.split("\t") for line in lines]


def expected_spearman(task_file, model, dimensions=None):
    """Spearman ×100 of the cosines of ``model``'s vectors, from the pairs file, with numpy and scipy."""
    rows = task_rows(task_file)
    a = shortened(model([r[0] for r in rows]), dimensions).astype(np.float64)
    b = shortened(model([r[1] for r in rows]), dimensions).astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    cos = np.divide((a * b).sum(1), norms, out=np.zeros(len(rows)), where=norms > 0)  # a zero vector: 0
    return 100 * spearmanr(cos, [float(r[2]) for r in rows]).statistic


def the_record(out: Path, label: str | None = None) -> dict:
    """The endpoint's record under ``out`` (the one labelled ``label`` when there are several)."""
    records = [json.loads(p.read_text(encoding="utf-8")) for p in (out / "runs").glob("endpoint*.json")]
    (record,) = [r for r in records if label is None or r["method"]["label"] == label]
    return record


def exported(root: Path) -> tuple[list[str], np.ndarray]:
    from harness.runner.execution.export import read_embeddings

    (backbone,) = list(root.iterdir())  # the endpoint's "model @ host:port", as a folder name
    (method,) = list(backbone.iterdir())
    (task,) = list(method.iterdir())
    read = read_embeddings(task / "test")
    return read.sentences, read.vectors


def unique_sentences(task_file):
    return list(dict.fromkeys(s for r in task_rows(task_file) for s in r[:2]))


def test_the_scored_vectors_are_the_servers_and_a_warm_run_sends_nothing(bench, embeddings_server, task_file,
                                                                         tmp_path):
    server = embeddings_server
    code, out, err = bench(*run_args(server, task_file, "--set", "endpoint.batch_size=7",
                                     "--export-embeddings", str(tmp_path / "vectors")))
    assert code == 0, err
    sentences, vectors = exported(tmp_path / "vectors")
    np.testing.assert_array_equal(vectors, words(sentences))  # to the bit, in order
    unique = unique_sentences(task_file)
    assert sorted(server.inputs()) == sorted(unique)  # each distinct sentence sent once
    assert max(len(b["input"]) for b in server.bodies) == 7 and all("dimensions" not in b for b in server.bodies)
    assert server.requests == -(-len(unique) // 7)
    record = the_record(tmp_path / "out")
    assert record["scores"]["spearman"] == pytest.approx(expected_spearman(task_file, words), abs=1e-9)
    assert record["endpoint"]["url"] == server.url and record["endpoint"]["model"] == "words"
    assert record["endpoint"]["vector_dim"] == 16 and "served_model" not in record["endpoint"]
    tokens = sum(len(s.split()) for s in unique)  # the server's usage: words per input
    assert record["endpoint"]["usage"] == {"requests": server.requests, "retries": 0, "inputs": len(unique),
                                           "prompt_tokens": tokens, "total_tokens": tokens}
    assert record["method"]["label"] == "endpoint[model=words]"
    assert re.search(rf"other encodes {len(unique)};", err + out)

    sent = server.requests
    code, out, err = bench(*run_args(server, task_file, "--set", "endpoint.batch_size=7"))
    assert code == 0, err
    assert server.requests == sent  # warm: nothing sent
    warm = the_record(tmp_path / "out")
    assert warm["scores"]["spearman"] == record["scores"]["spearman"]
    assert warm["endpoint"]["usage"]["requests"] == 0 and warm["endpoint"]["usage"]["prompt_tokens"] is None


def test_429_500_a_timeout_and_a_garbled_body_are_retried_to_the_same_vectors(bench, embeddings_server, task_file,
                                                                               tmp_path):
    server = embeddings_server
    server.faults = ["429", "500", "slow", "malformed", "500", "429"]
    server.slow_s = 1.5
    code, _, err = bench(*run_args(server, task_file, "--set", "endpoint.batch_size=10", "--set",
                                     "endpoint.timeout=0.5", "--set", "endpoint.concurrency=3",
                                     "--export-embeddings", str(tmp_path / "vectors")))
    assert code == 0, err
    sentences, vectors = exported(tmp_path / "vectors")
    np.testing.assert_array_equal(vectors, words(sentences))
    record = the_record(tmp_path / "out")
    assert record["scores"]["spearman"] == pytest.approx(expected_spearman(task_file, words), abs=1e-9)
    batches = -(-len(unique_sentences(task_file)) // 10)
    assert record["endpoint"]["usage"]["retries"] == 6 and record["endpoint"]["usage"]["requests"] == batches + 6


def test_dimensions_are_asked_for_and_cached_apart(bench, embeddings_server, task_file, tmp_path):
    server = embeddings_server
    code, _, err = bench(*run_args(server, task_file))
    assert code == 0, err
    full = server.requests
    code, _, err = bench(*run_args(server, task_file, "--set", "endpoint.dimensions=8", "--export-embeddings",
                                   str(tmp_path / "vectors")))
    assert code == 0, err
    assert server.requests > full and all(b.get("dimensions") == 8 for b in server.bodies[full:])
    sentences, vectors = exported(tmp_path / "vectors")
    np.testing.assert_array_equal(vectors, shortened(words(sentences), 8))
    record = the_record(tmp_path / "out", "endpoint[model=words,dimensions=8]")
    assert record["endpoint"]["dimensions"] == 8 and record["endpoint"]["vector_dim"] == 8
    assert record["scores"]["spearman"] == pytest.approx(expected_spearman(task_file, words, 8), abs=1e-9)


def test_a_batch_the_endpoint_finds_too_large_is_halved(bench, embeddings_server, task_file, tmp_path):
    server = embeddings_server
    server.max_batch = 3
    code, _, err = bench(*run_args(server, task_file, "--set", "endpoint.batch_size=8", "--export-embeddings",
                                   str(tmp_path / "vectors")))
    assert code == 0, err
    sentences, vectors = exported(tmp_path / "vectors")
    np.testing.assert_array_equal(vectors, words(sentences))
    assert {len(b["input"]) for b in server.bodies} >= {8, 4, 2}


def test_the_key_is_sent_and_written_nowhere(bench, embeddings_server, task_file, tmp_path, monkeypatch):
    server = embeddings_server
    server.key = KEY
    monkeypatch.setenv("MY_EMBEDDINGS_KEY", KEY)
    code, out, err = bench(*run_args(server, task_file, "--set", "endpoint.key_env=MY_EMBEDDINGS_KEY",
                                     "--export-embeddings", str(tmp_path / "vectors")))
    assert code == 0, err
    assert set(server.authorized) == {f"Bearer {KEY}"}
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) > 20 and any(p.suffix == ".html" for p in written)
    assert not [p for p in written if KEY.encode() in p.read_bytes() or b"SECRET" in p.read_bytes()]
    assert "SECRET" not in out + err
    assert the_record(tmp_path / "out")["endpoint"]["key_env"] == "MY_EMBEDDINGS_KEY"

    # A wrong key: the server's 401 echoes it, the error line masks it
    monkeypatch.setenv("MY_EMBEDDINGS_KEY", "sk-wrong-SECRET2")
    code, out, err = bench(*run_args(server, task_file, "--set", "endpoint.key_env=MY_EMBEDDINGS_KEY", "--set",
                                     "endpoint.cache_key=v2"))
    assert code == 6 and "Traceback" not in err, (err, server.errors)
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert f"endpoint {server.url} (model words): HTTP 401: Incorrect API key provided: ***." in line
    assert "the key in $MY_EMBEDDINGS_KEY was sent" in line and "SECRET2" not in out + err
    monkeypatch.delenv("MY_EMBEDDINGS_KEY")
    code, _, err = bench(*run_args(server, task_file, "--set", "endpoint.key_env=MY_EMBEDDINGS_KEY", "--set",
                                   "endpoint.cache_key=v2"))
    assert code == 6 and "no key was sent ($MY_EMBEDDINGS_KEY is not set)" in err


@pytest.mark.parametrize(("fault", "says"), [
    ("count", "the answer holds 4 embeddings for 5 inputs (HTTP 200 to a request of 5 inputs)"),
    ("width", "an answer has 15 dimensions after 16; the served model changed"),
])
def test_a_wrong_answer_is_one_line_and_what_came_back_is_kept(fault, says, bench, embeddings_server, task_file,
                                                             tmp_path):
    server = embeddings_server
    server.faults = [None, None, fault]  # the third request: the first two batches are fine
    args = run_args(server, task_file, "--set", "endpoint.batch_size=5", "--set", "endpoint.concurrency=1")
    code, _, err = bench(*args)
    assert code == 6 and "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], err
    assert errors[0].startswith(f"error: endpoint {server.url} (model words): ")
    assert not (tmp_path / "out" / "runs").exists() or not list((tmp_path / "out" / "runs").glob("endpoint*"))
    before = len(server.inputs())
    kept = before - 5  # every batch answered well: the two before, and one in flight when the third failed
    assert kept >= 10
    code, _, err = bench(*args)  # what was kept comes from the cache
    assert code == 0, err
    assert len(server.inputs()) - before == len(unique_sentences(task_file)) - kept


def test_retries_spent_and_an_unreachable_endpoint_are_one_line_exit_6(bench, embeddings_server, task_file,
                                                                       tmp_path):
    server = embeddings_server
    server.faults = ["500"] * 3
    code, _, err = bench(*run_args(server, task_file, "--set", "endpoint.attempts=3", "--set",
                                   "endpoint.concurrency=1", "--methods", "endpoint", "random"))
    assert code == 6 and "Traceback" not in err, (err, server.errors)
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert line == (f"error: endpoint {server.url} (model words): HTTP 500: The server had an error while processing "
                    "your request. on each of 3 attempts; try again later, or allow more: --set endpoint.attempts=N, "
                    "endpoint.timeout=SECONDS (not recorded: endpoint[model=words] on every task; the other results "
                    f"were written to {tmp_path / 'out' / 'runs'})")
    # the other method's result and the reports are written
    assert [p.name.split("__")[0] for p in (tmp_path / "out" / "runs").glob("*.json")] == ["random"]
    assert (tmp_path / "out" / "leaderboard.md").is_file()


def test_a_port_where_nothing_listens_is_one_line_at_once_and_claims_no_other_results(bench, task_file):
    """A refused connection is not retried (6 attempts took 25 s), and with no other method nothing was written:
    the line does not say the other results were."""
    closed = EmbeddingsServer()
    url = closed.url  # bound, then closed: nothing listens there
    closed.httpd.server_close()
    began = time.monotonic()
    code, _, err = bench("--backbone", url, "--methods", "endpoint", "--set", "endpoint.model=words", "--tasks",
                         f"file:{task_file}", "--no-plots")
    assert code == 6 and "Traceback" not in err, err
    assert time.monotonic() - began < 5
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert line == (f"error: endpoint {url} (model words): connection refused: nothing listens there; start the "
                    "server, or give the URL it listens at (not recorded: endpoint[model=words] on every task)")


@pytest.mark.parametrize(("args", "says"), [
    (("--backbone", "https://me:sk-SECRET@api.example.com/v1", "--set", "endpoint.model=m"),
     "endpoint https://api.example.com/v1: the URL holds a user name, password, query or fragment"),
    (("--backbone", "https://api.example.com/v1?key=SECRET", "--set", "endpoint.model=m"),
     "endpoint https://api.example.com/v1: the URL holds"),
    (("--backbone", "http://127.0.0.1:9/v1"), "endpoint http://127.0.0.1:9/v1: name the model it serves: "
                                             "--set endpoint.model=NAME"),
    (("--set", "endpoint.model=m"), "endpoint: --backbone minilm is not an endpoint's URL"),
    (("--backbone", "http://127.0.0.1:9/v1", "--set", "endpoint.model=m", "--set", "endpoint.key_env=sk-SECRET"),
     "--set endpoint.key_env: expected the name of the environment variable holding the key"),
    (("--backbone", "http://127.0.0.1:9/v1", "--set", "endpoint.model=m", "--set", "endpoint.batch_size=0"),
     "--set endpoint.batch_size=0: expected a positive integer"),
    (("--backbone", "http://127.0.0.1:9/v1", "--set", "endpoint.model=m", "--set", "endpoint.timeout=0"),
     "--set endpoint.timeout=0.0: expected seconds > 0"),
    (("--backbone", "http://[::1/v1", "--set", "endpoint.model=m"),
     "--backbone 'http://[::1/v1' is not an http(s) URL with a host"),
    (("--set", "endpoint.url=http://[::1/v1", "--set", "endpoint.model=m"),
     "--set endpoint.url 'http://[::1/v1' is not an http(s) URL with a host"),
    (("--backbone", "http://127.0.0.1:x/v1", "--set", "endpoint.model=m"),
     "--backbone 'http://127.0.0.1:x/v1' is not an http(s) URL with a host"),
])
def test_a_wrong_endpoint_setting_is_one_line_before_anything_is_sent(args, says, bench, tmp_path):
    code, out, err = bench("--methods", "endpoint", *args)
    assert code == 2 and "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert says in line and "SECRET" not in out + err


def test_a_checkpoint_method_on_an_endpoint_backbone_says_which_method_reads_it(bench):
    code, _, err = bench("--backbone", "http://127.0.0.1:9/v1", "--methods", "avg")
    assert code == 2
    assert ("error: backbone 'http://127.0.0.1:9/v1' is an embeddings endpoint: only the endpoint method reads one "
            "(--methods endpoint --set endpoint.model=NAME)") in err


def test_the_endpoint_runs_beside_checkpoint_methods_and_its_row_names_its_model_and_host(
        bench, embeddings_server, task_file, tiny_bert, tmp_path):
    server = embeddings_server
    code, out, err = bench("--backbone", str(tiny_bert), "--methods", "avg", "endpoint", "--set",
                           f"endpoint.url={server.url}/embeddings", "--set", "endpoint.model=words", "--tasks",
                           f"file:{task_file}", "--no-plots", "--bootstrap", "0")
    assert code == 0, err
    record = the_record(tmp_path / "out")
    assert record["endpoint"]["url"] == server.url  # the route dropped: the API's root
    assert record["scores"]["spearman"] == pytest.approx(expected_spearman(task_file, words), abs=1e-9)
    assert len(list((tmp_path / "out" / "runs").glob("avg*.json"))) == 1
    # The backbone column names the endpoint (issue 52: it said "none"): its model and host:port, not
    # the URL's path; the checkpoint method beside it keeps its folder.
    shown = f"words @ 127.0.0.1:{server.httpd.server_address[1]}"
    board = pd.read_csv(tmp_path / "out" / "leaderboard.csv")
    assert dict(zip(board["method"], board["backbone"])) == {"avg": str(tiny_bert), "endpoint[model=words]": shown}
    assert shown in out and shown in (tmp_path / "out" / "leaderboard.md").read_text(encoding="utf-8")
    assert record["backbone"] is None  # no checkpoint was resolved for it
    assert "/v1" not in shown and "none" not in set(board["backbone"])


@pytest.mark.real
def test_minilm_served_by_an_endpoint_scores_stsb_as_run_locally(bench, real_cache, tmp_path):
    """The packaged MiniLM's STS-B vectors (the harness's own ``avg``) served over HTTP, through 429s
    and 500s: the endpoint's Spearman equals the local one to every digit, and a warm run sends
    nothing."""
    code, _, err = bench("--methods", "avg", "--cache-dir", str(real_cache), "--export-embeddings",
                         str(tmp_path / "local"), "--output-dir", str(tmp_path / "local-out"), "--no-plots")
    assert code == 0, err
    from harness.runner.execution.export import read_embeddings

    local = read_embeddings(tmp_path / "local" / "minilm" / "avg" / "stsb" / "test")
    table = dict(zip(local.sentences, local.vectors))
    local_rho = json.loads(next((tmp_path / "local-out" / "runs").glob("avg*.json")).read_text())["scores"]["spearman"]

    with EmbeddingsServer({"all-MiniLM-L6-v2": lambda texts: np.stack([table[t] for t in texts])}) as server:
        server.faults = ["429", "500", "429", "500"]
        args = ("--backbone", server.url, "--methods", "endpoint", "--set", "endpoint.model=all-MiniLM-L6-v2",
                "--set", "endpoint.batch_size=256", "--no-plots")
        code, _, err = bench(*args)
        assert code == 0, err
        rho = the_record(tmp_path / "out")["scores"]["spearman"]
        assert rho == local_rho == pytest.approx(82.03, abs=0.005)
        sent = server.requests
        # each sentence sent once, and the four refused batches of 256 again
        assert set(server.inputs()) == set(local.sentences)
        assert len(server.inputs()) == len(local.sentences) + 4 * 256
        code, _, err = bench(*args)
        assert code == 0 and server.requests == sent
        assert the_record(tmp_path / "out")["scores"]["spearman"] == local_rho


class Waits:
    """A stand-in for the client's stop event: records each wait instead of sleeping."""

    def __init__(self):
        self.waits = []

    def is_set(self):
        return False

    def wait(self, seconds):
        self.waits.append(seconds)
        return False


def client(server, attempts=6, timeout=5.0):
    limits = endpoint_http.Limits(batch_size=8, max_chars=1000, concurrency=1, attempts=attempts, timeout=timeout)
    return endpoint_http.Client(server.url, "words", 0, None, limits, "endpoint test", "OPENAI_API_KEY")


def test_the_waits_between_attempts_are_the_servers_or_doubling_backoff_with_jitter(embeddings_server):
    """BACKOFF_S · 2^attempt times a factor in [0.5, 1] when the server names no wait; its Retry-After when it does."""
    server = embeddings_server
    server.faults = ["500", "500", "429 after 7", "500", "slow"]
    server.slow_s = 0.0
    waits = Waits()
    answer = client(server).fetch(["a dog runs", "two cats"], waits)
    np.testing.assert_array_equal(answer.vectors, words(["a dog runs", "two cats"]))
    base = endpoint_http.BACKOFF_S
    assert len(waits.waits) == 4 and waits.waits[2] == 7.0
    for attempt in (0, 1, 3):
        assert base * 2 ** attempt * 0.5 <= waits.waits[attempt] <= base * 2 ** attempt
    server.faults = ["429 after 86400"]  # a day: fails at once rather than idling
    with pytest.raises(EndpointError, match=r"endpoint test: HTTP 429 asks to wait 86400 s \(Retry-After\)"):
        client(server).fetch(["a"], Waits())
    server.faults = ["500"] * 3
    waits = Waits()
    with pytest.raises(EndpointError, match="on each of 3 attempts"):
        client(server, attempts=3).fetch(["a"], waits)
    assert len(waits.waits) == 2  # no wait after the last attempt


def test_a_number_no_float32_holds_is_a_wrong_answer_and_the_other_results_are_written(bench, embeddings_server,
                                                                                       task_file, tmp_path):
    """An answer holding 10**400 (valid JSON, no float holds it) was an OverflowError: exit 4, nothing written."""
    server = embeddings_server
    server.faults = ["overflow"]
    code, _, err = bench(*run_args(server, task_file, "--set", "endpoint.concurrency=1", "--methods", "endpoint",
                                   "random"))
    assert code == 6 and "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: endpoint {server.url} (model words): the answer: data[0].embedding["), line
    assert "] is not a number; " in line and "(HTTP 200 to a request of " in line  # its schema names the number
    assert line.endswith(f"the other results were written to {tmp_path / 'out' / 'runs'})")
    assert [p.name.split("__")[0] for p in (tmp_path / "out" / "runs").glob("*.json")] == ["random"]
    assert (tmp_path / "out" / "leaderboard.md").is_file()


@pytest.mark.parametrize("number", ["1" + "0" * 400, "-1" + "0" * 400, "1" + "0" * 5000, "1e400", "-3.5e38",
                                    "NaN", "-Infinity"])
def test_an_answers_numbers_must_be_finite_and_fit_float32(number):
    payload = b'{"data": [{"index": 0, "embedding": [0.5, %s]}]}' % number.encode()
    # NaN, ±inf, past float64: the answer's schema (issue 51) names the number; past float32: the cast
    with pytest.raises(WrongAnswer, match=r"data\[0\]\.embedding\[1\] is not a number|values beyond float32's range"):
        read_answer(payload, 1, None)
    assert read_answer(b'{"data": [{"index": 0, "embedding": [0.5, 3e38]}]}', 1, None).vectors[0, 1] == np.float32(3e38)


def test_an_answer_nested_past_any_embedding_is_a_wrong_answer():
    with pytest.raises(WrongAnswer, match="nested too deep"):
        read_answer(b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", 1, None)


@pytest.mark.parametrize("fault", ["trickle", "trickle headers"])
def test_a_trickled_answer_ends_at_the_timeout_however_often_a_byte_comes(fault, embeddings_server):
    """A byte every 0.2 s never let a socket read time out: the timeout is the whole request's, connect to last
    byte (the server stops trickling after 4 s by itself)."""
    server = embeddings_server
    server.faults = [fault]
    began = time.monotonic()
    with pytest.raises(EndpointError, match=r"endpoint test: no answer within 1 s \(timeout\) on each of 1 attempts"):
        client(server, attempts=1, timeout=1.0).fetch(["a dog runs", "two cats"], Waits())
    assert time.monotonic() - began < 2.5


def test_an_answer_larger_than_its_bound_is_refused_at_once(embeddings_server):
    """A body is read up to 1 MiB an input and 1 MiB more; a larger one is refused, not retried."""
    server = embeddings_server
    server.faults = ["huge", None]
    with pytest.raises(EndpointError, match=r"endpoint test: an answer of more than 3 MiB to a request of 2 inputs "
                                            r"\(1 MiB an input and 1 more\)"):
        client(server).fetch(["a dog runs", "two cats"], Waits())
    assert server.requests == 1
    answer = client(server).fetch(["a dog runs", "two cats"], Waits())  # the bound passes a whole answer
    np.testing.assert_array_equal(answer.vectors, words(["a dog runs", "two cats"]))


def test_a_server_echoing_the_key_as_its_model_name_gets_it_written_nowhere(bench, embeddings_server, task_file,
                                                                            tmp_path, monkeypatch):
    """The record keeps the model the request asked for, never the answer's own ``model`` field."""
    server = embeddings_server
    server.key, server.echo_key = KEY, True
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    code, out, err = bench(*run_args(server, task_file))
    assert code == 0, err
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and not [p for p in written if b"SECRET" in p.read_bytes()]
    assert "SECRET" not in out + err
    assert the_record(tmp_path / "out")["endpoint"]["model"] == "words"


def test_a_redirect_is_refused_not_followed(embeddings_server):
    """The key is never sent to the host a redirect names (the opener that holds each request's deadline also
    refuses redirects)."""
    server = embeddings_server
    server.faults = ["302"]
    with pytest.raises(EndpointError, match=r"endpoint test: HTTP 302: \(empty body\); a redirect; give the URL it "
                                            r"points to as the endpoint's URL"):
        client(server).fetch(["a"], Waits())
    assert server.requests == 1


class SilentTLS:
    """A TCP server on 127.0.0.1 for an https:// URL that accepts and never completes the TLS handshake: it
    says nothing, or (``trickle``) starts a TLS record of 16 KiB and sends one byte of it every 0.2 s, so no
    socket read of the handshake ever times out (for at most 4 s, then it closes)."""

    def __init__(self, trickle: bool = False) -> None:
        import socket
        import threading

        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self.listener.getsockname()[1]}/v1"
        self.trickle, self.accepted = trickle, 0
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed
                return
            self.accepted += 1
            with conn:
                try:
                    if self.trickle:
                        conn.sendall(b"\x16\x03\x03\x40\x00")  # a handshake record of 16,384 bytes begins
                    for _ in range(20):
                        time.sleep(0.2)
                        if self.trickle:
                            conn.sendall(b"\x00")
                except OSError:  # the client gave up
                    continue

    def close(self) -> None:
        self.listener.close()


@pytest.mark.parametrize(("trickle", "connect_s"), [(False, 0.0), (True, 0.0), (False, 0.7)],
                         ids=["silent", "trickled handshake", "slow connect, then silent"])
def test_a_tls_handshake_that_never_completes_ends_at_the_timeout(trickle, connect_s, monkeypatch):
    """The connect and the TLS handshake are inside the request's one deadline: a server that accepts and never
    completes the handshake (silent, or a byte of it every 0.2 s) is a timeout at endpoint.timeout (issue 51).
    A TCP connect that takes 0.7 s leaves the handshake 0.3 s, not a timeout of its own (that was 1.7 s)."""
    import socket

    connect = socket.create_connection
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: (time.sleep(connect_s), connect(*a, **k))[1])
    server = SilentTLS(trickle)
    try:
        began = time.monotonic()
        with pytest.raises(EndpointError, match=r"endpoint test: no answer within 1 s \(timeout\) on each of 1 "
                                                r"attempts"):
            client(server, attempts=1, timeout=1.0).fetch(["a dog runs"], Waits())
        assert 0.9 < time.monotonic() - began < 1.4 and server.accepted == 1
    finally:
        server.close()


def test_a_tls_handshake_past_the_timeout_is_one_line_exit_6_and_the_rest_is_written(bench, task_file, tmp_path):
    """From the command line: one error line, exit 6, the other method's record and the leaderboards written."""
    server = SilentTLS(trickle=True)
    try:
        began = time.monotonic()
        code, _, err = bench("--backbone", server.url, "--methods", "endpoint", "random", "--set",
                             "endpoint.model=words", "--set", "endpoint.timeout=1", "--set", "endpoint.attempts=1",
                             "--tasks", f"file:{task_file}", "--no-plots", "--bootstrap", "0")
        assert time.monotonic() - began < 30
    finally:
        server.close()
    assert code == 6 and "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: endpoint {server.url} (model words): no answer within 1 s (timeout) on each of "
                           "1 attempts"), line
    assert [p.name.split("__")[0] for p in (tmp_path / "out" / "runs").glob("*.json")] == ["random"]
    assert (tmp_path / "out" / "leaderboard.md").is_file()
