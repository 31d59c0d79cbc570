"""A pair with several drafts sharing the target's tokenizer (seed 004 §5), and the committed draft4."""
from __future__ import annotations

import json

import pytest
import torch

from harness.errors import ConfigError
from harness.models import TINY_PAIR_DIR, load_pair


@pytest.fixture(scope="module")
def multi_pair():
    return load_pair("tiny/target", drafts=["tiny/draft", "tiny/draft4"], device="cpu", name="tiny_multi")


def test_multi_draft_pair_loads_each_draft_once_and_defaults_to_the_first(multi_pair):
    assert list(multi_pair.drafts) == ["tiny/draft", "tiny/draft4"]
    assert multi_pair.draft is multi_pair.drafts["tiny/draft"] and multi_pair.draft_id == "tiny/draft"
    other = multi_pair.with_draft("tiny/draft4")
    assert other.draft is multi_pair.drafts["tiny/draft4"] and other.target is multi_pair.target
    assert other.tokenizer is multi_pair.tokenizer
    assert multi_pair.draft.config.num_hidden_layers == 2 and other.draft.config.num_hidden_layers == 4
    with pytest.raises(ConfigError, match="no draft 'tiny/nope'"):
        multi_pair.with_draft("tiny/nope")


def test_single_draft_pair_lists_its_draft(tiny_pair):
    assert tiny_pair.drafts == {"tiny/draft": tiny_pair.draft}


def test_pair_drafts_errors_before_loading():
    with pytest.raises(ConfigError, match="not among pair.drafts"):
        load_pair("tiny/target", "tiny/draft", drafts=["tiny/draft4"], device="cpu")
    with pytest.raises(ConfigError, match="empty"):
        load_pair("tiny/target", None, drafts=[], device="cpu")


def test_draft4_sits_between_draft_and_target(multi_pair):
    """The committed figures (scripts/train_extra_draft.py): more agreement than the 2-layer draft, at a cost."""
    report = json.loads((TINY_PAIR_DIR / "drafts_report.json").read_text())
    d2, d4 = report["drafts"]["draft"], report["drafts"]["draft4"]
    assert d2["params"] < d4["params"] < report["target_params"]
    assert d2["c"] < d4["c"] < 1
    assert d4["greedy_top1_agreement"] > d2["greedy_top1_agreement"]
    n = sum(p.numel() for p in multi_pair.drafts["tiny/draft4"].parameters())
    assert n == d4["params"]
    ids = multi_pair.tokenizer("In the beginning God created")["input_ids"]
    with torch.no_grad():
        logits = multi_pair.drafts["tiny/draft4"](torch.tensor([ids])).logits
    assert logits.shape[-1] == multi_pair.target.config.vocab_size


def test_embedded_assets_stay_under_30_mb():
    total = sum(f.stat().st_size for f in TINY_PAIR_DIR.rglob("*") if f.is_file())
    assert total < 30 * 2 ** 20, f"harness/assets/tiny_pair is {total / 2 ** 20:.1f} MiB"
