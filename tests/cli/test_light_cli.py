"""Issue 33.5: ``harness --help`` and ``harness ls`` import no torch, transformers, numpy, scipy or pandas (the
methods' keys come from the torch-free :mod:`harness.decoders.params`), and list exactly what the full registry
holds."""
import json
import subprocess
import sys

import pytest

from cellproc import ROOT, env

HEAVY = ("torch", "transformers", "numpy", "scipy", "pandas", "pyarrow")

#: runs the CLI with a finder that records every heavy top-level package anything tries to import
PROBE = """import json, runpy, sys
HEAVY = set(json.loads(sys.argv[1])); tried = set()
class Spy:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            tried.add(name.split(".")[0])
        return None
sys.meta_path.insert(0, Spy())
sys.argv = ["harness", *json.loads(sys.argv[2])]
try:
    runpy.run_module("harness", run_name="__main__")
except SystemExit as e:
    assert not e.code, e.code
print("HEAVY:" + json.dumps(sorted(tried | {m.split(".")[0] for m in sys.modules} & HEAVY)))
"""


def _light(*argv: str) -> str:
    r = subprocess.run([sys.executable, "-c", PROBE, json.dumps(HEAVY), json.dumps(argv)], cwd=ROOT, env=env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out, _, last = r.stdout.rstrip("\n").rpartition("\n")
    assert last == "HEAVY:[]", f"harness {' '.join(argv)} imported {last}"
    return out


def _options(text: str, group: str) -> list[str]:
    line = next(x for x in text.splitlines() if x.startswith(f"{group}: "))
    return line.split(": ", 1)[1].split(", ")


def _registered() -> list[str]:
    from harness.config.aliases import ALIASES
    from harness.decoders.base import registry

    return sorted([*registry(), *ALIASES])


def test_help_imports_nothing_heavy_and_lists_every_registered_method():
    out = _light("--help")
    from harness.adaptive.policies import POLICIES

    assert _options(out, "method") == _registered()
    assert _options(out, "gamma_policy") == sorted(POLICIES.names())
    assert "\nmethod:\n  name: ar\n" in out  # the composed default cell


@pytest.mark.parametrize("argv", [("ls",), ("ls", "methods"), ("ls", "method", "medusa"), ("ls", "method", "eagle2"),
                                  ("ls", "policy", "specdecpp"), ("ls", "draft_selection", "ols")])
def test_ls_imports_nothing_heavy(argv):
    out = _light(*argv)
    if argv == ("ls",):
        assert _options(out, "method") == _registered()
    if argv == ("ls", "methods"):
        from harness.decoders.base import registry

        listed = [line.split()[0] for line in out.splitlines()[1:]]
        assert listed == _registered()
        doc = sys.modules[registry()["sd"].__module__].__doc__.split("\n")[0]
        assert next(x for x in out.splitlines() if x.split()[0] == "sd").split(None, 1)[1].startswith(doc[:40])


def test_the_light_params_are_the_decoders_params():
    """Every decoder of the package takes the Params its params module names, and every params module has its
    decoder: what ``--help`` lists is what runs."""
    from harness.decoders.base import registry
    from harness.decoders.params import method_params

    assert {n: c.Params for n, c in registry().items()} == method_params()


def test_a_decoder_whose_params_differ_from_its_params_module_cannot_register():
    from harness.decoders.base import Decoder, register
    from harness.decoders.params import SamplingParams

    class Stray(Decoder[SamplingParams]):
        method = "sd"  # harness/decoders/params/sd.py names SDParams

    Stray.__module__ = "harness.decoders.stray"
    with pytest.raises(TypeError, match="params/sd.py names SDParams"):
        register(Stray)
