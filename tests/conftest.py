import pytest
import torch

from harness.models import TINY_PAIR_DIR

# Tests run tiny models, where a second intra-op thread costs more than it gives (about 10x slower
# per forward on a loaded 2-core machine). Benchmarks set their own thread count.
torch.set_num_threads(1)


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

    from harness.cli import CONF_DIR
    from harness.configs import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return OmegaConf.to_container(compose(config_name="config", overrides=[f"method={method}"]).method)


@pytest.fixture(scope="session")
def method_config():
    return composed_method_config
