"""The trained-head modules (harness/heads): loaders of the published layouts and of the embedded tiny heads,
EAGLE-2's draft-tree construction, Medusa's static tree and SpecDec++'s stop rule."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from harness.errors import ConfigError, HarnessError
from harness.heads import (MC_SIM_7B_63, AcceptanceHead, EagleHead, SpecDecPPStop, eagle_draft_tree,
                           load_acceptance_head, load_eagle, load_medusa, medusa_tree, medusa_tree_tokens,
                           rejection_probability, stop_drafting)
from harness.heads.eagle import causal_mask, check_tree_params, new_head_cache, rerank

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- embedded tiny heads


def test_embedded_heads_load_and_fit_the_tiny_pair(tiny_pair):
    medusa, eagle = load_medusa("tiny/medusa"), load_eagle("tiny/eagle")
    acc = load_acceptance_head("tiny/specdecpp")
    hidden, vocab = tiny_pair.target.config.hidden_size, tiny_pair.vocab_size
    assert medusa.config.hidden_size == hidden and medusa.config.vocab_size == vocab
    assert medusa(torch.zeros(2, 5, hidden)).shape == (medusa.config.num_heads, 2, 5, vocab)
    assert eagle.config.hidden_size == hidden and eagle.config.num_hidden_layers == 1
    assert acc.hidden_size == tiny_pair.draft.config.hidden_size
    assert acc.accept_probability(torch.zeros(4, acc.hidden_size)).shape == (4,)
    total = sum(p.stat().st_size for p in (ROOT / "harness/assets/heads").rglob("*") if p.is_file())
    assert total < 9e6  # the shipped heads stay small
    for name in ("medusa", "eagle", "specdecpp"):
        report = json.loads((ROOT / "harness/assets/heads" / name / "training_report.json").read_text())
        assert report["evaluation"] and report["training"]["seconds"] > 0


def test_embedded_eagle_head_drafts_a_tree_on_the_tiny_target(tiny_pair):
    target = tiny_pair.target
    ids = tiny_pair.tokenizer("In the beginning God created the heaven")["input_ids"]
    with torch.no_grad():
        feats = target.model(input_ids=torch.tensor([ids])).last_hidden_state
        stem = int(target.lm_head(feats[0, -1]).argmax())
    tree = eagle_draft_tree(load_eagle("tiny/eagle"), target.get_input_embeddings(), target.lm_head, feats,
                            torch.tensor([ids[1:] + [stem]]), top_k=4, depth=3, total_tokens=12,
                            vocab_size=tiny_pair.vocab_size)
    assert tree.tokens.shape == (12,) and int(tree.depths.max()) <= 3
    assert bool((tree.tokens < tiny_pair.vocab_size).all())


# ---------------------------------------------------------------- published layouts, written synthetically


def _medusa_state(num_heads, hidden, vocab, num_layers=1, seed=0):
    g = torch.Generator().manual_seed(seed)
    state = {}
    for k in range(num_heads):
        w, b = torch.randn(hidden, hidden, generator=g) * 0.1, torch.randn(hidden, generator=g) * 0.1
        for j in range(num_layers):  # the reference repeats ONE block: every copy holds the same tensors
            state[f"{k}.{j}.linear.weight"], state[f"{k}.{j}.linear.bias"] = w, b
        state[f"{k}.{num_layers}.weight"] = torch.randn(vocab, hidden, generator=g)
    return state


def _write(folder: Path, config: dict, weights: dict, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    if name.endswith(".safetensors"):
        from safetensors.torch import save_file

        save_file(weights, str(folder / name))
    else:
        torch.save(weights, folder / name)
    return folder


def test_medusa_loader_reads_the_reference_layout_and_trusts_the_weights_over_the_config(tmp_path):
    state = _medusa_state(3, 8, 11, num_layers=2)
    ckpt = _write(tmp_path / "m", {"medusa_num_heads": 2, "medusa_num_layers": 2,
                                   "base_model_name_or_path": "lmsys/vicuna-7b-v1.3"}, state, "medusa_lm_head.pt")
    with pytest.warns(UserWarning, match="medusa_num_heads=2"):
        heads = load_medusa(str(ckpt))
    assert heads.config.num_heads == 3 and heads.config.config_num_heads == 2
    x = torch.randn(4, 8)
    for k in range(3):
        w, b, v = state[f"{k}.0.linear.weight"], state[f"{k}.0.linear.bias"], state[f"{k}.2.weight"]
        h = x
        for _ in range(2):
            h = h + F.silu(h @ w.T + b)
        torch.testing.assert_close(heads(x)[k], h @ v.T)


def test_medusa_save_load_round_trip_and_layout_errors(tmp_path):
    heads = load_medusa(str(_write(tmp_path / "a", {"medusa_num_layers": 1}, _medusa_state(2, 8, 11),
                                   "medusa_lm_head.safetensors")))
    heads.save_pretrained(tmp_path / "b")
    again = load_medusa(str(tmp_path / "b"))
    x = torch.randn(3, 8)
    torch.testing.assert_close(again(x), heads.half().float()(x))
    assert json.loads((tmp_path / "b/config.json").read_text())["medusa_num_heads"] == 2
    bad = _medusa_state(2, 8, 11, num_layers=2)
    bad["1.1.linear.weight"] = bad["1.1.linear.weight"] + 1  # unshared copies cannot be this layout
    with pytest.raises(HarnessError, match="shares one block"):
        load_medusa(str(_write(tmp_path / "c", {"medusa_num_layers": 2}, bad, "medusa_lm_head.pt")))
    extra = _medusa_state(2, 8, 11) | {"0.9.weight": torch.zeros(1)}
    with pytest.raises(HarnessError, match="unexpected"):
        load_medusa(str(_write(tmp_path / "d", {"medusa_num_layers": 1}, extra, "medusa_lm_head.pt")))
    with pytest.raises(HarnessError, match="no Medusa checkpoint"):
        load_medusa(str(_write(tmp_path / "e", {"hidden_size": 8}, {}, "medusa_lm_head.pt")))


def _eagle_config(**over):
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
           "num_hidden_layers": 1, "vocab_size": 50, "rms_norm_eps": 1e-6, "max_position_embeddings": 256,
           "model_type": "llama", "rope_scaling": None, "tie_word_embeddings": False, "torch_dtype": "float16"}
    return cfg | over


def test_eagle_loader_reads_the_reference_layout_with_its_embedding_copy(tmp_path):
    torch.manual_seed(0)
    from transformers import LlamaConfig

    ref = EagleHead(LlamaConfig(**_eagle_config()))  # EAGLE-Vicuna's config: no num_key_value_heads, no bias key
    state = {k: v.clone() for k, v in ref.state_dict().items()} | {"embed_tokens.weight": torch.randn(50, 32)}
    assert "layers.0.input_layernorm.weight" not in state and {"fc.weight", "fc.bias"} <= set(state)
    head = load_eagle(str(_write(tmp_path / "e", _eagle_config(), state, "pytorch_model.bin")))
    f, e = torch.randn(1, 5, 32), torch.randn(1, 5, 32)
    pos, mask = torch.arange(5)[None], causal_mask(5, 0, torch.float32)
    torch.testing.assert_close(head(f, e, pos, mask), ref(f, e, pos, mask))
    head.save_pretrained(tmp_path / "s")
    assert json.loads((tmp_path / "s/config.json").read_text())["bias"] is True
    load_eagle(str(tmp_path / "s"))
    missing = {k: v for k, v in state.items() if k != "fc.bias"}
    with pytest.raises(HarnessError, match="fc.bias"):
        load_eagle(str(_write(tmp_path / "m", _eagle_config(), missing, "model.safetensors")))


def test_acceptance_head_loader_reads_the_hub_mixin_layout(tmp_path):
    g = torch.Generator().manual_seed(1)
    w, b = torch.randn(6, 6, generator=g) * 0.2, torch.randn(6, generator=g) * 0.2
    wo, bo = torch.randn(2, 6, generator=g), torch.randn(2, generator=g)
    state = {f"model.{j}.linear.{n}": t for j in range(3) for n, t in (("weight", w), ("bias", b))}
    state |= {"model.3.weight": wo, "model.3.bias": bo}
    head = load_acceptance_head(str(_write(tmp_path / "h", {"hidden_size": 6, "num_layers": 3}, state,
                                           "pytorch_model.bin")))
    x = torch.randn(5, 6)
    h = x
    for _ in range(3):
        h = h + F.silu(h @ w.T + b)
    torch.testing.assert_close(head.accept_probability(x), torch.softmax(h @ wo.T + bo, -1)[:, 1])
    head.save_pretrained(tmp_path / "s")  # safetensors keeps the shared block once; the loader restores it
    torch.testing.assert_close(load_acceptance_head(str(tmp_path / "s")).accept_probability(x),
                               head.half().float().accept_probability(x))


def test_hub_ids_are_fetched_with_hf_hub_download(tmp_path, monkeypatch):
    """A hub id goes through huggingface_hub (faked here: no network): the first weight file the repository
    has is used (the reference's medusa_lm_head.pt when there is no .safetensors)."""
    import huggingface_hub
    from huggingface_hub.utils import EntryNotFoundError

    repo = _write(tmp_path / "repo", {"medusa_num_layers": 1}, _medusa_state(2, 8, 11), "medusa_lm_head.pt")
    asked = []

    def fake_download(repo_id, filename, **kwargs):
        asked.append((repo_id, filename))
        if not (repo / filename).is_file():
            raise EntryNotFoundError(f"{filename} not in {repo_id}")
        return str(repo / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    heads = load_medusa("FasterDecoding/medusa-test")
    assert heads.config.num_heads == 2
    assert asked == [("FasterDecoding/medusa-test", "config.json"),
                     ("FasterDecoding/medusa-test", "medusa_lm_head.safetensors"),
                     ("FasterDecoding/medusa-test", "medusa_lm_head.pt")]
    with pytest.raises(HarnessError, match="no EAGLE head: its config.json lacks hidden_size"):
        load_eagle("FasterDecoding/medusa-test")  # a Medusa checkpoint is refused before any weights are built
    (repo / "config.json").write_text(json.dumps(_eagle_config()))
    with pytest.raises(HarnessError, match="has none of model.safetensors, pytorch_model.bin"):
        load_eagle("FasterDecoding/medusa-test")


def test_head_references_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="unknown embedded head 'tiny/nope'.*tiny/medusa"):
        load_medusa("tiny/nope")
    with pytest.raises(ConfigError, match="directory not found"):
        load_eagle(str(tmp_path / "absent"))
    with pytest.raises(HarnessError, match="none of config.json"):
        load_acceptance_head(str(tmp_path))


# ---------------------------------------------------------------- EAGLE-2 tree construction


@pytest.fixture(scope="module")
def toy_eagle():
    from transformers import LlamaConfig

    torch.manual_seed(3)
    head = EagleHead(LlamaConfig(**_eagle_config(num_key_value_heads=2))).eval()
    embed, lm_head = torch.nn.Embedding(50, 32), torch.nn.Linear(32, 50, bias=False)
    lm_head.weight.data *= 4  # peaked distributions: a tree with a clear order
    feats, toks = torch.randn(1, 6, 32), torch.randint(0, 50, (1, 6))
    return head, embed, lm_head, feats, toks


@torch.no_grad()
def _path_log_probs(toy, path_tokens: list[int]) -> torch.Tensor:
    """log q(· | prefix, path) by running the head sequentially on its own features (no tree attention)."""
    head, embed, lm_head, feats, toks = toy
    f, t = feats, toks
    out = head(f, embed(t), torch.arange(f.size(1))[None], causal_mask(f.size(1), 0, f.dtype))
    for tok in path_tokens:
        f = torch.cat([f, out[:, -1:]], dim=1)
        t = torch.cat([t, torch.tensor([[tok]])], dim=1)
        out = head(f, embed(t), torch.arange(f.size(1))[None], causal_mask(f.size(1), 0, f.dtype))
    return torch.log_softmax(lm_head(out[0, -1]), -1)


def _paths(tree):
    parents, tokens = tree.parents.tolist(), tree.tokens.tolist()
    paths = []
    for i, p in enumerate(parents):
        paths.append((paths[p] if p >= 0 else []) + [tokens[i]])
    return paths


def test_eagle_tree_is_topological_and_scores_are_path_log_probs(toy_eagle):
    head, embed, lm_head, feats, toks = toy_eagle
    tree = eagle_draft_tree(head, embed, lm_head, feats, toks, top_k=3, depth=3, total_tokens=21)
    parents, depths = tree.parents.tolist(), tree.depths.tolist()
    assert len(parents) == 21  # everything generated: 3 + 2·3²
    for i, p in enumerate(parents):
        assert -1 <= p < i and depths[i] == (1 if p < 0 else depths[p] + 1)
    for path, score in zip(_paths(tree), tree.scores.tolist()):
        expected = sum(float(_path_log_probs(toy_eagle, path[:d])[tok]) for d, tok in enumerate(path))
        assert score == pytest.approx(expected, abs=1e-4)


def test_eagle_tree_expands_the_most_confident_nodes_and_reranks_by_score(toy_eagle):
    head, embed, lm_head, feats, toks = toy_eagle
    full = eagle_draft_tree(head, embed, lm_head, feats, toks, top_k=3, depth=4, total_tokens=3 + 3 * 9)
    parents, depths, scores = full.parents.tolist(), full.depths.tolist(), full.scores
    for d in (1, 2, 3):  # the nodes with children at depth d are that depth's top-k by cumulative score
        at_d = [i for i in range(len(parents)) if depths[i] == d]
        expanded = {p for p in parents if p >= 0 and depths[p] == d}
        best = sorted(at_d, key=lambda i: -float(scores[i]))[:3]
        assert expanded == set(best)
    for total in (1, 5, 12):
        kept = eagle_draft_tree(head, embed, lm_head, feats, toks, top_k=3, depth=4, total_tokens=total)
        order = torch.sort(scores, descending=True, stable=True).indices[:total].sort().values
        assert kept.tokens.tolist() == full.tokens[order].tolist()
        assert torch.equal(kept.scores, scores[order])
        assert float(kept.scores.min()) >= float(torch.sort(scores, descending=True).values[total - 1])


def test_rerank_breaks_ties_toward_parents():
    # a child with log-prob 0 ties with its parent: the parent must be kept first
    tree = rerank(torch.tensor([5, 6, 7]), torch.tensor([-1, -1, 0]), torch.tensor([-1.0, -2.0, -1.0]),
                  torch.tensor([1, 1, 2]), total_tokens=2)
    assert tree.tokens.tolist() == [5, 7] and tree.parents.tolist() == [-1, 0]


def test_eagle_tree_with_cache_equals_without_and_top1_is_the_greedy_chain(toy_eagle):
    head, embed, lm_head, feats, toks = toy_eagle
    plain = eagle_draft_tree(head, embed, lm_head, feats, toks, top_k=4, depth=3, total_tokens=10)
    cache = new_head_cache(head)
    eagle_draft_tree(head, embed, lm_head, feats[:, :4], toks[:, :4], top_k=4, depth=3, total_tokens=10, cache=cache)
    assert cache.get_seq_length() == 4  # the prefix pairs only, tree nodes dropped
    cached = eagle_draft_tree(head, embed, lm_head, feats[:, 4:], toks[:, 4:], top_k=4, depth=3, total_tokens=10,
                              cache=cache)  # only the pairs the cache lacks
    assert cache.get_seq_length() == 6
    assert cached.tokens.tolist() == plain.tokens.tolist() and cached.parents.tolist() == plain.parents.tolist()
    torch.testing.assert_close(cached.scores, plain.scores, atol=1e-5, rtol=0)
    chain = eagle_draft_tree(head, embed, lm_head, feats, toks, top_k=1, depth=4, total_tokens=4)
    greedy = []
    for _ in range(4):
        greedy.append(int(_path_log_probs(toy_eagle, greedy).argmax()))
    assert chain.tokens.tolist() == greedy and chain.parents.tolist() == [-1, 0, 1, 2]


def test_eagle_tree_parameters_are_checked():
    with pytest.raises(ConfigError, match="total_tokens must be in \\[1, 21\\]"):
        check_tree_params(top_k=3, depth=3, total_tokens=22)
    for bad in ({"top_k": 0, "depth": 2, "total_tokens": 1}, {"top_k": 2, "depth": 0, "total_tokens": 1}):
        with pytest.raises(ConfigError):
            check_tree_params(**bad)


# ---------------------------------------------------------------- Medusa's static tree


def test_medusa_tree_of_the_default_choices():
    tree = medusa_tree(MC_SIM_7B_63)
    assert len(tree.parents) == 63 and max(tree.depths) == 4 and tree.top_k == 10
    for i, (p, path) in enumerate(zip(tree.parents, tree.choices)):
        assert (p == -1) == (len(path) == 1) and (p < 0 or tree.choices[p] == path[:-1]) and p < i
    assert len(medusa_tree(MC_SIM_7B_63, num_heads=3).parents) == 61  # (0,0,0,0) and (0,0,0,1) dropped
    logits = torch.randn(4, 30)
    tokens = medusa_tree_tokens(tree, logits)
    top = torch.topk(logits, 10, dim=-1).indices
    for i, (d, r) in enumerate(zip(tree.depths, tree.ranks)):
        assert int(tokens[i]) == int(top[d - 1, r])
    with pytest.raises(ConfigError, match="lack the parents"):
        medusa_tree([(0,), (1, 0)])
    with pytest.raises(ConfigError, match="only 2 heads"):
        medusa_tree_tokens(tree, logits[:2])


# ---------------------------------------------------------------- SpecDec++ stop rule


class _Fixed(AcceptanceHead):
    """An acceptance head that predicts p̂ = ``p`` everywhere."""

    def __init__(self, p: float):
        super().__init__(4, 0)
        self.p = p

    def accept_probability(self, hidden):
        return torch.full(hidden.shape[:-1], self.p)


def test_rejection_probability_and_the_bounds():
    assert float(rejection_probability(torch.tensor([0.9, 0.8]))) == pytest.approx(1 - 0.72)
    assert float(rejection_probability(torch.tensor([]))) == 0.0
    assert stop_drafting(20, 0.0, threshold=0.3, min_gamma=2, max_gamma=20)
    assert not stop_drafting(1, 1.0, threshold=0.3, min_gamma=2, max_gamma=20)
    assert stop_drafting(3, 0.31, threshold=0.3) and not stop_drafting(3, 0.3, threshold=0.3)  # strictly above
    with pytest.raises(ConfigError, match="min_gamma <= max_gamma"):
        stop_drafting(1, 0.5, min_gamma=3, max_gamma=2)
    with pytest.raises(ConfigError, match="threshold"):
        SpecDecPPStop(_Fixed(0.5), threshold=1.5)


def test_stop_rule_follows_the_reference_timing():
    # p̂ = 0.9: P(reject) after j judged candidates is 1 − 0.9^j; > 0.3 first at j = 4, and the k-th
    # decision judges candidates 1 … k − 1, so the round stops with 5 candidates
    rule = SpecDecPPStop(_Fixed(0.9), threshold=0.3, min_gamma=2, max_gamma=20)
    decisions = [rule.after_draft(torch.zeros(1, 4)) for _ in range(5)]
    assert decisions == [False, False, False, False, True] and len(rule.accept_probs) == 4
    rule.reset()
    assert rule.drafted == 0 and rule.accept_probs == []
    eager = SpecDecPPStop(_Fixed(0.1), threshold=0.0, min_gamma=2, max_gamma=20)  # any rejection risk: stop at min
    assert [eager.after_draft(torch.zeros(4)) for _ in range(2)] == [False, True]
    capped = SpecDecPPStop(_Fixed(1.0), threshold=0.3, min_gamma=1, max_gamma=3)
    assert [capped.after_draft(torch.zeros(4)) for _ in range(3)] == [False, False, True]


# ---------------------------------------------------------------- training scripts


@pytest.mark.slow
@pytest.mark.parametrize("script,loader", [("train_medusa_heads.py", load_medusa), ("train_eagle_head.py", load_eagle),
                                           ("train_specdecpp_head.py", load_acceptance_head)])
def test_training_script_smoke_writes_a_loadable_head(tmp_path, script, loader):
    out = tmp_path / "head"
    subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--smoke", "--out", str(out)], check=True,
                   cwd=ROOT, capture_output=True, timeout=600)
    report = json.loads((out / "training_report.json").read_text())
    assert report["training"]["args"]["smoke"] is True and report["evaluation"]
    loader(str(out))
