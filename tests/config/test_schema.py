"""The typed cell config (issue 21 item 4): one dataclass tree in the ConfigStore holds the top-level and
``runner`` keys' types, defaults and help; errors carry their key; the CLI's typed conversion gives the same
cell (and id) as the plain one."""
import dataclasses

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from harness.config import schema
from harness.cli.app import CONF_DIR
from harness.config.groups import register_configs
from harness.config.identity import cell_id


def _compose(*overrides):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_runner_keys_are_typed_and_defaulted_once():
    cfg = _compose()
    assert OmegaConf.to_container(cfg.runner) == dataclasses.asdict(schema.RunnerConfig())
    import yaml

    assert set(yaml.safe_load((CONF_DIR / "config.yaml").read_text())) == {"defaults", "hydra"}  # presets only
    for bad in ("runner.threads=abc", "runner.bogus=1", "seed=abc", "max_new_tokens=many"):
        with pytest.raises(ConfigCompositionException):
            _compose(bad)
    assert all(f.metadata.get("help") for cls in (schema.CellConfig, schema.RunnerConfig)
               for f in dataclasses.fields(cls))


def test_the_typed_conversion_gives_the_same_cell():
    for overrides in [(), ("method=sd", "decoding=greedy"), ("method=dsbd", "dataset=squad", "seed=3")]:
        cfg = _compose(*overrides)
        plain = OmegaConf.to_container(cfg, resolve=True)
        typed = schema.as_cell_dict(cfg)
        assert typed == plain and cell_id({**typed, "gpu": {**typed["gpu"], "name": "cpu"}}) == \
            cell_id({**plain, "gpu": {**plain["gpu"], "name": "cpu"}})


def test_range_errors_carry_their_key():
    problems = schema.field_problems({"seed": -1, "max_new_tokens": 0, "force": 3,
                                      "runner": {"threads": 0, "progress": "yes", "speed": 2}})
    assert sorted(p.key for p in problems) == ["force", "max_new_tokens", "runner.progress", "runner.speed",
                                               "runner.threads", "seed"]
    from harness.models import PairSpec
    from harness.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        PairSpec(target="/no/such/dir")
    assert e.value.key == "pair.target"
