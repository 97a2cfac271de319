"""One declaration per setting and per option, end to end: a run-wide setting reaches the engine and
the method specs without a hand copy at the runner→core boundary, and a trained method's options are
its training config (issue 39)."""

from __future__ import annotations

import dataclasses

import pytest

from harness.core.api import SpecRequest
from harness.core.encoding import EncodeSettings
from harness.runner.settings.config import BenchConfig
from harness.runner.settings.declaration import declared, reached

# Fields of EncodeSettings no flag sets: the window is the unit of caching, fixed for a run.
ENGINE_ONLY = {"window"}


def test_every_encode_setting_is_reached_by_exactly_one_declaration():
    targets = [reach.partition(".")[2] or s.name for s in declared(BenchConfig) for reach in s.reaches
               if reach.partition(".")[0] == "encode"]
    assert sorted(targets) == sorted({f.name for f in dataclasses.fields(EncodeSettings)} - ENGINE_ONLY)


def test_every_spec_request_field_but_the_options_is_reached():
    targets = {reach.partition(".")[2] or s.name for s in declared(BenchConfig) for reach in s.reaches
               if reach.partition(".")[0] == "spec"}
    assert targets == {f.name for f in dataclasses.fields(SpecRequest)} - {"params"}


def test_the_run_values_are_the_config_values_resolved():
    """Against a hand-built EncodeSettings and SpecRequest (what the copies used to be)."""
    cfg = BenchConfig(device="cpu", dtype="bf16", batch_size=8, max_tokens=512, max_length=64, threads=3,
                      trust_remote_code=True, progress=False, encoder_impl="transformers", verify_cache=5,
                      backbone="bert-base-uncased", revision="main", seed=7, first_last_layers=(0, -1),
                      method_params={"whitening": {"k": 16}})
    assert cfg.encode_settings() == EncodeSettings(
        device="cpu", dtype="bf16", batch_size=8, max_tokens=512, max_length=64, threads=3,
        trust_remote_code=True, progress=False, impl="transformers", verify_cache=5)
    assert cfg.spec_request() == SpecRequest(backbone="bert-base-uncased", revision="main", max_length=64,
                                             first_last_layers=(0, -1), seed=7,
                                             params={"whitening": {"k": 16}})


def test_resolved_values_follow_their_rules(monkeypatch):
    from harness.core import machine

    monkeypatch.setattr(machine, "available_cpus", lambda: 5)
    assert BenchConfig().encode_settings().threads == 5  # 0: the cores this process may use
    assert BenchConfig(threads=2).encode_settings().threads == 2
    assert BenchConfig(baseline="b.csv").encode_settings().verify_cache == BenchConfig(
        baseline="b.csv").cache_checks() > 0  # a gate re-checks the cache unless told otherwise
    assert BenchConfig().encode_settings().verify_cache == 0


def test_a_new_setting_reaching_the_engine_is_one_declaration():
    """A field added to a config class with ``reaches=`` arrives in EncodeSettings with nothing else
    written: the declaration is the whole change (here under another field's name)."""
    from harness.runner.settings.declaration import setting

    @dataclasses.dataclass(frozen=True)
    class Config(BenchConfig):
        tokens: int = setting(99, group="encoding", help="a budget", reaches=("encode.max_tokens",))

    cfg = Config()
    assert reached(cfg, "encode")["max_tokens"] == 99
    assert EncodeSettings(**reached(cfg, "encode")).max_tokens == 99


def trained_methods():
    from methods.cross_encoder import CrossEncoder
    from methods.dse import DSE
    from methods.flow import BertFlow
    from methods.simcse_train import SimCSETrain
    from methods.training.flow_fit import FlowConfig
    from methods.training.pair_training import CrossEncoderConfig, StudentConfig
    from methods.training.simcse_loop import SimCSEConfig

    return [(BertFlow, FlowConfig), (SimCSETrain, SimCSEConfig), (DSE, StudentConfig),
            (CrossEncoder, CrossEncoderConfig)]


@pytest.mark.parametrize("index", range(4))
def test_a_trained_methods_options_reach_its_config(index):
    """Every option named like a config field arrives, off its default, and nothing else moves."""
    from harness.core.api import MethodSpec

    method, config_type = trained_methods()[index]
    fields = {f.name: f for f in dataclasses.fields(config_type)}
    shared = [o for o in method.options if o.name in fields]
    assert len(shared) >= 6, (method.name, [o.name for o in shared])

    def off_default(option):
        if option.choices:
            return next(c for c in option.choices if c != option.default)
        return option.default * 3 + 1 if not isinstance(option.default, str) else option.default + "x"

    params = {o.name: o.default for o in method.options} | {o.name: off_default(o) for o in shared}
    config = method(MethodSpec(method.name, "none", params=params), None).options_into(config_type)
    for o in shared:
        assert getattr(config, o.name) == params[o.name], o.name
    for name, f in fields.items():
        if name not in params:
            assert getattr(config, name) == f.default, name
