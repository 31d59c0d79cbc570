import os
import sys
import warnings
from pathlib import Path

import pytest
import torch

from harness.models import TINY_PAIR_DIR

# tests mirror the package (tests/config, tests/run, ...); a test module stays importable by its name from any test
# (`from test_validation import composed`) whichever files a run collects
for _room in sorted(p for p in Path(__file__).parent.iterdir() if p.is_dir() and any(p.glob("test_*.py"))):
    if str(_room) not in sys.path:
        sys.path.append(str(_room))

# Tests run tiny models, where a second intra-op thread costs more than it gives (about 10x slower
# per forward on a loaded 2-core machine). Benchmarks set their own thread count.
torch.set_num_threads(1)

# A deprecated library API called by the project's own code fails the test (issue 24.2: e.g. transformers'
# `past_key_values=`, removed in 5.40 inside our allowed range). Pytest records warnings per test; inside
# that, this hook sees each FutureWarning/DeprecationWarning with its stack: when it was issued by library
# code and the nearest project frame is in the package (not a test calling the library itself), it
# raises at the call. The project's own deprecation messages (issued in harness/) are left to the tests
# that check them with pytest.warns.
_ROOT = Path(__file__).resolve().parents[1]
_PACKAGE_DIRS = tuple(str(_ROOT / d) + "/" for d in ("harness", "hydra_plugins"))
_TEST_DIRS = (str(_ROOT / "tests") + "/", str(_ROOT / "scripts") + "/")


class DeprecatedCallFromProject(AssertionError):
    pass


def _project_caller(frame):
    """(file, line) of the nearest frame in the package or the tests, and whether it is the package."""
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_PACKAGE_DIRS):
            return f"{name}:{frame.f_lineno}", True
        if name.startswith(_TEST_DIRS):
            return f"{name}:{frame.f_lineno}", False
        frame = frame.f_back
    return None, False


def _strict_showwarning(message, category, filename, lineno, file=None, line=None):
    if issubclass(category, (FutureWarning, DeprecationWarning)):
        issuer = sys._getframe(1)
        while issuer is not None and issuer.f_code.co_filename == warnings.__file__:
            issuer = issuer.f_back  # the frame that called warnings.warn
        if issuer is not None and not issuer.f_code.co_filename.startswith(_PACKAGE_DIRS):
            caller, in_package = _project_caller(issuer)
            if in_package:
                raise DeprecatedCallFromProject(f"{category.__name__} from a library call made at {caller}: {message}")
    warnings._showwarnmsg_impl(warnings.WarningMessage(message, category, filename, lineno, file, line))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    previous = warnings.showwarning
    warnings.showwarning = _strict_showwarning
    try:
        yield
    finally:
        warnings.showwarning = previous


@pytest.fixture(scope="session")
def tiny_pair():
    """The embedded tiny Llama pair (offline)."""
    from harness.models import load_pair

    if not (TINY_PAIR_DIR / "target" / "model.safetensors").exists():
        pytest.fail(f"embedded tiny pair missing in {TINY_PAIR_DIR}; run scripts/train_tiny_pair.py")
    return load_pair("tiny/target", "tiny/draft", device="cpu")


class _ARGreedyReferences:
    """AR greedy's 40 tokens for the held-out prompts on the tiny pair, computed on first use: ``refs[:n]``."""

    def __init__(self, pair, prompts):
        from harness.methods import build_decoder

        self.ar, self.prompts, self.cache = build_decoder("ar_greedy", pair), prompts, {}

    def __getitem__(self, index):
        indices = range(len(self.prompts))[index]
        for i in indices:
            if i not in self.cache:
                self.cache[i] = self.ar.generate(self.prompts[i], 40).output_ids
        return [self.cache[i] for i in indices]


@pytest.fixture(scope="session")
def tiny_ar_greedy(tiny_pair, heldout_prompts):
    """AR greedy's references for the greedy-identity tests (``tiny_ar_greedy[:n]``)."""
    return _ARGreedyReferences(tiny_pair, heldout_prompts)


@pytest.fixture(scope="session")
def heldout_prompts(tiny_pair):
    """Token ids of 24 held-out prompts from the default dataset."""
    from harness.tasks import load_task

    task = load_task({"task": "text_continuation", "name": "kjv_heldout", "num_prompts": 24, "prompt_words": 10})
    return [tiny_pair.tokenizer(ex.prompt)["input_ids"] for ex in task.examples()]


def composed_method_config(method: str) -> dict:
    """The CLI's ``method`` config for ``method=<name>`` with its defaults (Hydra compose; no weights)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from harness.cli.app import CONF_DIR
    from harness.config.groups import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return OmegaConf.to_container(compose(config_name="config", overrides=[f"method={method}"]).method)


@pytest.fixture(scope="session")
def method_config():
    return composed_method_config


@pytest.fixture(scope="module")
def sandbox_root_opt_in():
    """The sandbox's fallback runs here as root, maybe with the interpreter in a root-only folder (CI): opted in
    with HARNESS_SANDBOX_ROOT=allow for the module (tests/sandbox/test_sandbox_hold.py checks the refusal without it)."""
    before = os.environ.get("HARNESS_SANDBOX_ROOT")
    os.environ["HARNESS_SANDBOX_ROOT"] = "allow"
    yield
    if before is None:
        os.environ.pop("HARNESS_SANDBOX_ROOT", None)
    else:
        os.environ["HARNESS_SANDBOX_ROOT"] = before
