"""Config: the decoders' and the γ policies' Params are the single source of the method and gamma_policy configs
(Hydra's ConfigStore), Hydra validates keys and types, every method and policy is reachable from the CLI with its
defaults, and bad input fails early with a message naming the key and the valid choices."""
import dataclasses
import sys
import warnings

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf

from harness.cli.app import CONF_DIR
from harness.config.groups import register_configs
from harness.adaptive.policies import POLICIES
from harness.decoders import registry
from harness.decoding import PRESETS as DECODINGS
from harness.errors import ConfigError
from harness.config.legacy import upgrade_method_params, upgrade_overrides
from harness.methods import build_decoder, cell_method_spec, make_params, resolve_method
from harness.tasks import load_task
from harness.testing import toy_pair


def _compose(*overrides):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


@pytest.mark.parametrize("method", sorted(registry()))
def test_every_registered_method_is_reachable_with_its_defaults(method):
    """compose(method=<name>, decoding=<each one it supports>) gives exactly the decoder's Params defaults
    with the decoding's warp (no weights loaded)."""
    cls = registry()[method]
    for decoding in cls.decodings:
        cfg = OmegaConf.to_container(_compose(f"method={method}", f"decoding={decoding}"), resolve=True)
        assert cfg["method"]["name"] == method
        resolved, params = resolve_method(cfg["method"].pop("name"), cfg["method"], cfg["decoding"])
        assert resolved is cls
        warp = DECODINGS[decoding].warp_params() if "temperature" in params else {}
        assert make_params(cls, params) == cls.Params(**warp)


def test_aliases_compose_and_follow_the_decoding():
    cfg = _compose("method=ar")
    assert OmegaConf.to_container(cfg.method) == {"name": "ar"} and cfg.decoding.name == "sampling"
    assert resolve_method("ar", {}, cfg.decoding)[0].method == "ar_sampling"
    assert resolve_method("ar", {}, "greedy")[0].method == "ar_greedy"
    beam = _compose("method=beam", "method.width=2").method
    assert beam.name == "beam" and beam.width == 2 and beam.length_penalty == 1.0
    beam = OmegaConf.to_container(beam)
    beam.pop("name")
    cls, params = resolve_method("beam", beam, "greedy")
    assert cls.method == "beam_search" and params == {"width": 2, "length_penalty": 1.0, "early_stopping": False}
    cls, params = resolve_method("beam", beam, "sampling")  # beam search's own keys at their defaults drop out
    assert cls.method == "beam_sampling" and params == {"width": 2, **DECODINGS["sampling"].warp_params()}
    with pytest.raises(ConfigError, match="length_penalty"):
        resolve_method("beam", {**beam, "length_penalty": 0.5}, "sampling")


def test_overrides_are_typed():
    cfg = _compose("method=mcsd", "method.k_config=[3,2,1]", "method.replacement=true")
    assert list(cfg.method.k_config) == [3, 2, 1] and cfg.method.replacement is True
    assert _compose("method=dsbd", "method.width=null").method.width is None
    assert _compose("method=beam_search", "method.early_stopping=never").method.early_stopping == "never"


def test_unknown_method_lists_valid_choices():
    with pytest.raises(MissingConfigException) as e:
        _compose("method=nope")
    msg = str(e.value)
    assert "nope" in msg and "ar_greedy" in msg and "beam_sampling" in msg


def test_bad_method_key_names_the_key():
    with pytest.raises(ConfigCompositionException) as e:
        _compose("method=beam_sampling", "method.widht=3")
    assert "widht" in str(e.value.__cause__ or e.value)


def test_bad_value_type_names_the_key():
    with pytest.raises(ConfigCompositionException) as e:
        _compose("method=sd", "method.gamma=abc")
    assert "gamma" in str(e.value.__cause__ or e.value)


def test_bad_root_key_is_refused():
    with pytest.raises(ConfigCompositionException, match="sed"):
        _compose("sed=3")


def test_deprecated_names_map_to_the_new_ones_through_one_table(caplog):
    """Old names work for one release (Python API and command line), each with a message naming the new key; they
    are all in harness.config.legacy."""
    pair = toy_pair(vocab_size=5)
    for method, old, new, value in (("mtjd", "k", "gamma", 2), ("mtjd", "num_beams", "width", 3),
                                    ("mtad", "num_beams", "draft_width", 2), ("specinfer", "num_sequences",
                                                                               "num_drafts", 3),
                                    ("spectr", "num_sequences", "num_drafts", 3)):
        with pytest.warns(DeprecationWarning, match=f"'{old}'.*'{new}'"):
            decoder = build_decoder(method, pair, **{old: value})
        assert getattr(decoder.params, new) == value
    with pytest.warns(DeprecationWarning):
        argv = upgrade_overrides(["method=specinfer", "method.num_sequences=3", "method.gamma_policy=qlearning",
                                  "method.q_lr=0.1", "method.temperature=0", "method.draft_selection=none", "-m"])
    assert argv == ["method=specinfer", "method.num_drafts=3", "gamma_policy=qlearning", "gamma_policy.lr=0.1",
                    "decoding.temperature=0", "draft_selection=none", "-m"]
    cfg = _compose(*argv[:-1])
    assert cfg.method.num_drafts == 3 and cfg.gamma_policy.lr == 0.1 and cfg.decoding.temperature == 0
    assert "method.num_drafts" in caplog.text
    with pytest.warns(DeprecationWarning, match="sampling_dsbd"):
        spec = cell_method_spec(OmegaConf.to_container(_compose("method=dsbd", "decoding=sampling_seed000")))
    assert spec.params.top_k == 10 and spec.params.top_p == 0.8
    with pytest.raises(ConfigError, match="both"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            upgrade_method_params("mtjd", {"gamma": 3, "k": 2})


@pytest.mark.parametrize("policy", sorted(POLICIES.all()))
def test_every_policy_is_reachable_with_its_defaults(policy):
    """gamma_policy=<name> composes exactly the policy's Params defaults, and the cell's method spec carries it."""
    cfg = OmegaConf.to_container(_compose("method=sd", f"gamma_policy={policy}"), resolve=True)
    node = dict(cfg["gamma_policy"])
    assert node.pop("name") == policy and POLICIES.get(policy)(**node) == POLICIES.get(policy)()
    assert cell_method_spec(cfg).gamma_policy == POLICIES.get(policy)()


def test_the_groups_compose_only_what_is_chosen():
    """method=sd composes SD's keys only; a policy and draft selection are their own groups, unset by default."""
    cfg = OmegaConf.to_container(_compose("method=sd"))
    # the typed schema (harness/config/schema.py) declares both groups' slots: unchosen, they hold null and nothing else
    assert cfg["method"] == {"name": "sd", "gamma": 4} and cfg["gamma_policy"] is None and cfg["draft_selection"] is None
    cfg = OmegaConf.to_container(_compose("method=sd", "gamma_policy=online", "gamma_policy.acc_history=9",
                                          "draft_selection=ols", "draft_selection.fit_prompts=3"))
    assert cfg["gamma_policy"]["acc_history"] == 9 and cfg["draft_selection"] == {"name": "ols", "fit_prompts": 3,
                                                                                   "features": 8}
    with pytest.raises(ConfigCompositionException):
        _compose("method=sd", "gamma_policy=online", "gamma_policy.lr=0.1")  # a qlearning key


def test_params_carry_help_for_every_field():
    from harness.selection import SELECTIONS

    groups = [*((f"method {n}", c.Params) for n, c in registry().items()),
              *((f"gamma_policy {n}", c) for n, c in POLICIES.all().items()),
              *((f"draft_selection {n}", c) for n, c in SELECTIONS.items())]
    for name, params in groups:
        for f in dataclasses.fields(params):
            assert f.metadata.get("help"), f"{name}.{f.name} has no help text"


def test_build_decoder_errors():
    pair = toy_pair(with_draft=False)
    with pytest.raises(ConfigError, match="Valid methods"):
        build_decoder("nope", pair)
    with pytest.raises(ConfigError, match="Valid parameters: early_stopping, length_penalty, width"):
        build_decoder("beam_search", pair, gama=3)


def test_unknown_task_and_task_key():
    with pytest.raises(ConfigError, match="text_continuation"):
        load_task({"task": "nope"})
    with pytest.raises(ConfigError, match="prompt_words"):
        load_task({"task": "text_continuation", "prompt_wrds": 3})


def _cli(*args, monkeypatch):
    """The ``harness`` command, run in this process (what is tested is its config handling, not a new interpreter):
    (exit status, stdout, stderr)."""
    import contextlib
    import io
    from types import SimpleNamespace

    from harness.cli import app as cli

    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "argv", ["harness", *args])
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def test_cli_cfg_job_prints_the_composed_config(monkeypatch):
    r = _cli("method=sd", "method.gamma=3", "--cfg", "job", monkeypatch=monkeypatch)
    assert r.returncode == 0, r.stderr
    cfg = OmegaConf.create(r.stdout)
    assert cfg.method.name == "sd" and cfg.method.gamma == 3 and cfg.decoding.top_k == 20
    assert OmegaConf.to_container(cfg.method) == {"name": "sd", "gamma": 3}  # SD's keys only
    r = _cli("method=sd", "gamma_policy=qlearning", "gamma_policy.lr=0.1", "--cfg", "job", monkeypatch=monkeypatch)
    assert OmegaConf.create(r.stdout).gamma_policy.lr == 0.1 and OmegaConf.create(r.stdout).method.gamma == 4


def test_cli_maps_deprecated_keys_before_hydra_composes(monkeypatch, caplog):
    r = _cli("method=specinfer", "method.num_sequences=3", "method.gamma_policy=fsm", "method.gamma_max=5",
             "--cfg", "job", monkeypatch=monkeypatch)
    assert r.returncode == 0, r.stderr
    cfg = OmegaConf.create(r.stdout)
    assert cfg.method.num_drafts == 3 and cfg.gamma_policy.name == "fsm" and cfg.gamma_policy.gamma_max == 5
    assert "use method.num_drafts" in caplog.text and "use gamma_policy.gamma_max" in caplog.text


def test_cli_unknown_method_fails_with_the_valid_choices(tmp_path, monkeypatch):
    r = _cli("method=nope", f"results_dir={tmp_path}", monkeypatch=monkeypatch)
    assert r.returncode != 0
    assert "method/nope" in r.stderr and "ar_sampling" in r.stderr and "specinfer" in r.stderr
    assert not (tmp_path / "cells").exists()


def test_cli_user_config_directories(tmp_path, monkeypatch):
    """A lab keeps its pairs outside the package: --config-dir and hydra.searchpath both add config groups."""
    (tmp_path / "pair").mkdir()
    (tmp_path / "pair" / "mine.yaml").write_text("defaults:\n  - tiny\n  - _self_\nname: mine\ndtype: float16\n")
    r = _cli(f"--config-dir={tmp_path}", "pair=mine", "--cfg", "job", monkeypatch=monkeypatch)
    assert r.returncode == 0, r.stderr
    assert OmegaConf.create(r.stdout).pair.name == "mine"
    r = _cli(f"hydra.searchpath=[file://{tmp_path}]", "pair=mine", "--cfg", "job", monkeypatch=monkeypatch)
    assert r.returncode == 0, r.stderr
    pair = OmegaConf.create(r.stdout).pair
    assert pair.name == "mine" and pair.dtype == "float16" and pair.target == "tiny/target"
