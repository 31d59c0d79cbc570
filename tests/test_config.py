"""Bad configuration fails early with a message that lists the valid choices."""
import subprocess
import sys

import pytest

from harness.cli import check_overrides, config_groups
from harness.decoders import build_decoder, registry
from harness.decoders.base import make_params
from harness.errors import ConfigError
from harness.tasks import load_task
from harness.testing import toy_pair


def test_unknown_method_lists_valid_choices():
    with pytest.raises(ConfigError) as e:
        check_overrides(["method=nope"])
    msg = str(e.value)
    assert "nope" in msg and "ar_greedy" in msg and "beam_sampling" in msg


def test_unknown_method_in_a_sweep_list():
    with pytest.raises(ConfigError, match="'bogus'"):
        check_overrides(["-m", "method=ar,bogus"])


def test_bad_method_key_lists_valid_keys():
    with pytest.raises(ConfigError) as e:
        check_overrides(["method=beam_sampling", "method.widht=3"])
    assert "widht" in str(e.value) and "width" in str(e.value) and "top_p" in str(e.value)


def test_bad_root_key_lists_valid_keys():
    with pytest.raises(ConfigError) as e:
        check_overrides(["sed=3"])
    assert "seed" in str(e.value) and "method" in str(e.value)


def test_valid_overrides_pass():
    check_overrides(["-m", "method=ar,beam", "method.width=2", "seed=0,1", "runner.warmup_generations=0",
                     "hydra.verbose=true", "+method.extra=1"])


def test_every_method_config_matches_its_decoder_params():
    """Each conf/method/*.yaml names a registered decoder and only that decoder's parameters."""
    import yaml

    from harness.cli import CONF_DIR

    methods = registry()
    for option in config_groups()["method"]:
        cfg = yaml.safe_load((CONF_DIR / "method" / f"{option}.yaml").read_text())
        name = cfg.pop("name")
        assert name in methods, f"method/{option}.yaml names unknown decoder {name}"
        make_params(methods[name], cfg)  # raises on a key the decoder does not take


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


def test_cli_exits_2_with_clear_message(tmp_path):
    r = subprocess.run([sys.executable, "-m", "harness", "method=nope", f"results_dir={tmp_path}"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "Valid choices for method" in r.stderr and "ar_sampling" in r.stderr
