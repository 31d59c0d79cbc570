"""Early-stop decision models (seed 003 §3.3): features, the stop rule, AUC, save/load of the committed models."""
import json
import math

import pytest
import torch

from harness.errors import ConfigError
from harness.decoders.decision_model import (ASSETS_DIR, DEFAULT_THRESHOLD, DecisionModel, available_decision_models,
                                               early_stop, roc_auc, stop_depth, topk_entropy_features)


def test_threshold_default_is_the_seeds():
    assert DEFAULT_THRESHOLD == 0.4  # seed 003 §3.3, Fig. 2


def test_topk_entropy_features():
    probs = torch.tensor([[0.5, 0.25, 0.25, 0.0], [1.0, 0.0, 0.0, 0.0]])
    f = topk_entropy_features(probs, top_k=2)
    assert f.shape == (2, 3)
    torch.testing.assert_close(f[:, :2], torch.tensor([[0.5, 0.25], [1.0, 0.0]]))
    torch.testing.assert_close(f[:, 2], torch.tensor([1.5 * math.log(2), 0.0]))  # nats; 0 log 0 = 0
    with pytest.raises(ValueError, match="top_k"):
        topk_entropy_features(probs, top_k=5)


def test_early_stop_needs_every_sequence_below_the_threshold():
    assert early_stop(torch.tensor([0.1, 0.39]))
    assert not early_stop(torch.tensor([0.1, 0.4]))  # one sequence at β keeps drafting
    assert early_stop(torch.tensor([0.5, 0.6]), threshold=0.7)
    with pytest.raises(ConfigError, match="threshold"):
        early_stop(torch.tensor([0.1]), threshold=1.5)


def test_stop_depth():
    # (contexts, W=2, D=4): predicted acceptance of token j+1 of each sequence
    pred = torch.tensor([
        [[0.9, 0.9, 0.9, 0.9], [0.9, 0.9, 0.9, 0.9]],  # never fires → γ = D
        [[0.9, 0.1, 0.9, 0.9], [0.9, 0.2, 0.9, 0.9]],  # token 2 low in both
        [[0.9, 0.9, 0.1, 0.9], [0.9, 0.5, 0.3, 0.1]],  # token 3 low in both
        [[0.1, 0.9, 0.9, 0.1], [0.1, 0.9, 0.9, 0.2]],  # tokens 1 and 4 low in both
    ])
    # T2-like (lookahead 1): after turn d it judges token d+1; token 1 is never judged (γ >= 1)
    assert stop_depth(pred, lookahead=1).tolist() == [4, 1, 2, 3]
    # T1-like (lookahead 0): after turn d it judges token d; token D is never judged (the round ends anyway)
    assert stop_depth(pred, lookahead=0).tolist() == [4, 2, 3, 1]
    assert stop_depth(pred[:, :1], lookahead=1).tolist() == [4, 1, 2, 3]  # W = 1: the first sequence alone
    assert stop_depth(pred, threshold=0.0).tolist() == [4, 4, 4, 4]
    with pytest.raises(ValueError, match="lookahead"):
        stop_depth(pred, lookahead=2)


def test_roc_auc_matches_pairwise_definition():
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 5, (60,), generator=g).float()  # ties on purpose
    labels = torch.rand(60, generator=g) < 0.4
    pos, neg = scores[labels], scores[~labels]
    pairs = (pos[:, None] > neg[None]).float() + 0.5 * (pos[:, None] == neg[None]).float()
    assert roc_auc(scores, labels) == pytest.approx(float(pairs.mean()))
    assert roc_auc(torch.tensor([0.1, 0.9]), torch.tensor([0, 1])) == 1.0
    assert math.isnan(roc_auc(torch.tensor([0.1, 0.9]), torch.tensor([1, 1])))


def test_save_load_roundtrip(tmp_path):
    torch.manual_seed(0)
    model = DecisionModel("t2", 11, top_k=10)
    model.set_standardisation(torch.randn(50, 11))
    model.save(tmp_path, "toy_t2", {"threshold": 0.3, "note": float("nan")})
    meta = json.loads((tmp_path / "toy_t2.json").read_text())
    assert meta["note"] is None and meta["architecture"]["kind"] == "t2"
    loaded = DecisionModel.load(tmp_path / "toy_t2")
    assert DecisionModel.load(tmp_path / "toy_t2.json").info["name"] == "toy_t2"
    x = torch.randn(7, 11)
    torch.testing.assert_close(loaded.predict(x), model.predict(x))
    assert loaded.threshold == 0.3
    with pytest.raises(ConfigError, match="not found"):
        DecisionModel.load(tmp_path / "missing")
    with pytest.raises(ConfigError, match="kind"):
        DecisionModel("t3", 4)


def test_architectures_follow_the_seed():
    t1 = DecisionModel("t1", 192)
    t2 = DecisionModel("t2", 11, top_k=10)
    assert sum(isinstance(m, torch.nn.Linear) for m in t1.net) == 3  # three-layer MLP on hidden states
    assert sum(isinstance(m, torch.nn.Linear) for m in t2.net) == 2  # two-layer MLP on top-k + entropy
    assert (t1.lookahead, t2.lookahead) == (0, 1)


COMMITTED = ["tiny_t1_temp1", "tiny_t2_temp1", "tiny_t1_temp0.7", "tiny_t2_temp0.7", "tiny_t1_temp0", "tiny_t2_temp0"]


@pytest.mark.parametrize("name", COMMITTED)
def test_committed_models_load_and_predict(name):
    assert name in available_decision_models()
    model = DecisionModel.load(name)
    meta = model.info
    assert (ASSETS_DIR / f"{name}.safetensors").stat().st_size < 200_000  # small
    assert meta["threshold"] == DEFAULT_THRESHOLD
    assert "training split" in meta["data"]["corpus"] and "never read" in meta["data"]["corpus"]
    assert 0.5 < meta["evaluation"]["auc_vs_sampled_outcome"] <= 1.0
    w = 16
    hidden, probs = torch.randn(w, 192), torch.softmax(torch.randn(w, 4096), -1)
    pred = model.predict(model.features(hidden, probs))
    assert pred.shape == (w,) and bool(((pred >= 0) & (pred <= 1)).all())
    assert model.should_stop(hidden, probs, threshold=1.0)  # every prediction is below 1
    assert not model.should_stop(hidden, probs, threshold=0.0)
    with pytest.raises(ValueError, match="features"):
        model.predict(torch.randn(w, 5))


def _script():
    import importlib.util
    import sys
    from pathlib import Path

    scripts = Path(__file__).resolve().parents[2] / "scripts"
    sys.path.insert(0, str(scripts))
    spec = importlib.util.spec_from_file_location("train_decision_models", scripts / "train_decision_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _TextIds:
    """A stand-in tokenizer: one id per chapter text, so chapters can be traced through the split."""
    bos_token_id = -1

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [hash(text)]}


def test_labels_come_from_training_split_chapters_only():
    script = _script()
    from train_tiny_pair import chapter_text, is_heldout, load_kjv_chapters

    chapters = load_kjv_chapters()
    parts = script.split_training_chapters(_TextIds())
    seen = [ids[1] for part in parts.values() for ids in part]
    heldout = {hash(chapter_text(c)) for i, c in enumerate(chapters) if is_heldout(i)}
    assert len(seen) == sum(not is_heldout(i) for i in range(len(chapters)))
    assert heldout and not heldout & set(seen)
    assert not {ids[1] for ids in parts["eval"]} & {ids[1] for part in ("fit", "val") for ids in parts[part]}


def test_collected_labels_on_a_toy_pair():
    from harness.primitives.sampling import make_generator
    from harness.primitives.warping import Warp
    from harness.testing import toy_pair

    script = _script()
    pair = toy_pair(vocab_size=6)
    data = script.collect(pair, [[1, 2, 3], [4, 5]], width=3, depth=4, warp=Warp(0.9), top_k=3,
                          generator=make_generator(0, "cpu"))
    assert data["hidden"].shape == (2, 3, 4, 16) and data["t2"].shape == (2, 3, 4, 4)
    torch.testing.assert_close(data["accept_prob"], torch.clamp(data["p_x"] / data["q_x"], max=1.0))
    assert data["accepted"].dtype == torch.bool and bool((data["q_x"] > 0).all())
    # T2 features: descending top-k probabilities of a distribution, then its entropy
    top = data["t2"][..., :3]
    assert bool((top[..., :-1] >= top[..., 1:]).all()) and bool((top.sum(-1) <= 1 + 1e-5).all())
