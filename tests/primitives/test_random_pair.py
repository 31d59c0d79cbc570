"""Random-weight pairs built from a config (issue 28.5): ``random/<shape>`` and a draft cut from its first layers."""
import pytest
import torch

from harness.errors import ConfigError
from harness.methods import build_decoder
from harness.models import PairSpec, load_pair


@pytest.fixture(scope="module")
def mini():
    return load_pair("random/mini", "random/mini/first2", device="cpu", progress=False)


def test_the_draft_is_the_targets_first_layers_and_head(mini):
    t, d = mini.target, mini.draft
    assert len(d.model.layers) == 2 and len(t.model.layers) == 8
    assert all(a is b for a, b in zip(d.model.layers, t.model.layers[:2]))
    assert d.lm_head is t.lm_head and d.model.embed_tokens is t.model.embed_tokens


def test_logits_are_cut_to_the_tokenizer_and_the_head_keeps_its_shape(mini):
    assert mini.target.lm_head.weight.shape[0] == 8192 and mini.vocab_size == len(mini.tokenizer) == 4096
    assert torch.all(mini.target.lm_head.weight[4096:] == 0)


def test_speculative_decoding_on_it_is_lossless_and_accepts_often(mini):
    ids = mini.tokenizer("And God said")["input_ids"]
    ar = build_decoder("ar_greedy", mini).generate(ids, 24)
    sd = build_decoder("sd", mini, decoding="greedy").generate(ids, 24)
    assert sd.output_ids == ar.output_ids
    assert sd.stats.target_calls < ar.stats.target_calls  # the cut draft agrees often enough to save target calls


@pytest.mark.parametrize("target,draft,match", [
    ("random/llama9-1t", None, "shapes"),
    ("random/mini", "random/mini/first99", "valid 1..7"),
    ("tiny/target", "random/mini/first2", "cut from the target"),
    ("random/mini", "random/llama2-7b/first2", "cut from the target"),
])
def test_bad_random_references_are_config_errors(target, draft, match):
    with pytest.raises(ConfigError, match=match):
        PairSpec(target=target, draft=draft)


@pytest.mark.parametrize("pair", ["llama2_7b_shape_random", "mini_shape_random"])
@pytest.mark.parametrize("execution", ["eager", "graphs"])
def test_a_random_pair_validates_offline_without_a_hub_probe(pair, execution, monkeypatch):
    """``random/...`` is no hub reference: validation neither probes the hub nor reports it missing."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from harness import models
    from harness.cli.app import CONF_DIR
    from harness.config.groups import register_configs
    from harness.config.validation import validate_cell

    monkeypatch.setattr(models, "hub_unreachable", lambda *a, **k: "offline (test)")
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = OmegaConf.to_container(compose(config_name="config", overrides=[
            f"pair={pair}", f"pair.execution={execution}", "method=sd", "decoding=greedy", "dataset.num_prompts=1",
            "gpu=cpu"]), resolve=True)
    assert validate_cell(cfg) == []
