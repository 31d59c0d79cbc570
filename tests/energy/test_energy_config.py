"""Issue 21 items 4-5 (energy part): one source for energy defaults and GPU facts, typed configs in the
ConfigStore, and the energy package cut by concern — protocols over a state module, a real ABC,
console tools above the library, no import from energy up into decoders."""
from __future__ import annotations

import inspect
import os

import pytest
from omegaconf import OmegaConf

from harness.energy import EnergyConfig
from harness.energy.hardware import GpuProfile
from harness.energy.meter import EnergyMeter
from harness.errors import ConfigError
from test_layout import import_graph

CONF = os.path.join(os.path.dirname(__file__), "..", "..", "conf")


def _composed(*override_sets: list[str]) -> list[dict]:
    """The composed config for each list of overrides (one Hydra initialisation for all)."""
    from hydra import compose, initialize_config_dir

    from harness.config.groups import register_configs
    from harness.resources import conf_dir

    register_configs()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return [OmegaConf.to_container(compose(config_name="config", overrides=list(o)), resolve=True)
                for o in override_sets]


def test_configs_load_and_bad_options_list_valid_choices():
    presets = sorted(p.removesuffix(".yaml") for p in os.listdir(os.path.join(CONF, "gpu")))
    protocol, naive, off, *profiles = _composed([], ["energy=naive"], ["energy=off"], *[[f"gpu={p}"] for p in presets])
    for name, cfg in (("protocol", protocol), ("naive", naive), ("off", off)):
        assert EnergyConfig.from_any(cfg["energy"]).name == name
    # energy=off stays the small node it was (its cells keep their ids); naive extends the defaults
    assert set(off["energy"]) == {"name", "source", "gpu"}
    # one source of defaults (issue 21.4): the composed default preset is the dataclass's defaults
    assert EnergyConfig.from_any({**protocol["energy"], "gpu": None}) == EnergyConfig.from_any(None)
    assert not os.path.exists(os.path.join(CONF, "energy", "protocol.yaml"))
    with pytest.raises(ConfigError, match="Valid options:.*min_window_s"):
        EnergyConfig.from_any({"min_windw_s": 5})
    with pytest.raises(ConfigError, match="counter, power"):
        EnergyConfig.from_any({"source": "rapl"})
    for name, composed in zip(presets, profiles):
        assert {"name", "power_reading", "power_update_s", "power_window_s", "notes"} <= set(composed["gpu"])
        # one source of GPU facts: a preset names the GPU, the figures are harness/energy/hardware.py's
        raw = OmegaConf.to_container(OmegaConf.load(os.path.join(CONF, "gpu", f"{name}.yaml")))
        assert raw["power_update_s"] is None and raw["power_window_s"] is None, name
        OmegaConf.merge(OmegaConf.structured(GpuProfile), raw)  # conforms to the schema (types, no unknown key)


def test_the_energy_package_imports_nothing_above_it():
    """energy sits below decoders and the runner: the console tools (which build decoders) live in
    harness/tools, and nothing in the library imports them."""
    allowed = ("harness.energy", "harness.errors", "harness.resources")
    graph = import_graph()
    for module, edges in graph.items():
        if module.startswith("harness.energy"):
            assert not sorted(e for e in edges if not e.startswith(allowed)), module
        if not module.startswith("harness.tools"):
            assert not any(e.startswith("harness.tools") for e in edges), module
    assert "harness.tools.gpu_check" in graph and "harness.tools.probe" in graph


def test_one_module_per_protocol_over_a_state_module_and_a_real_abc():
    from harness.energy import counter, meter, plain, polled

    for protocol in (counter, polled, plain):
        names = dict(inspect.getmembers(protocol, inspect.isfunction))
        assert "reading" in names or "window_reading" in names, protocol.__name__
    assert callable(counter.run) and callable(polled.run)
    with pytest.raises(TypeError):
        EnergyMeter()  # abstract
    assert {"measure", "start_window", "stop_window", "describe", "gpu_state"} <= EnergyMeter.__abstractmethods__
    assert len(inspect.getsource(meter).splitlines()) <= 200
