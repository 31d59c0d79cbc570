"""The graphs execution mode (pair.execution=graphs, issue 28.3), on a CPU: the static caches, the shape buckets and
the masks run exactly as on a GPU, without the capture. Every registered method gives the same tokens in both
modes (greedy and, under the same seed, sampling); a method that cannot run in graphs mode is refused clearly;
the mode is part of the cell's identity (eager keeps every existing id)."""
import pytest
import torch

from harness.decoders import registry
from harness.errors import ConfigError
from harness.methods import build_decoder
from harness.models import PairSpec, load_pair
from harness.primitives.forward import CountedModel
from harness.primitives.graphs import GraphRunner, graph_runner, set_execution
from harness.primitives.kv_cache import cache_length, gather_positions, keep_positions, new_cache, reorder, truncate
from harness.primitives.static_cache import StaticKV
from harness.primitives.tree import tree_attention_mask, tree_position_ids
from harness.testing.heads import random_head_params

REFUSED = sorted(m for m, c in registry().items() if c.graphs_refusal)
RUNS = sorted(m for m in registry() if m not in REFUSED)
PROMPTS = ["And God said, Let there be light", "The LORD is my shepherd; I shall not"]


@pytest.fixture(scope="module")
def pair():
    """A pair of its own: the mode is set on the models (the session's tiny pair stays eager)."""
    return load_pair("tiny/target", "tiny/draft", device="cpu", progress=False)


@pytest.fixture(scope="module")
def pair64():
    """The tiny pair in float64, for the sampled comparison (:func:`test_every_method_gives_the_same_tokens_in_both_modes`)."""
    p = load_pair("tiny/target", "tiny/draft", device="cpu", progress=False)
    p.target.double()
    p.draft.double()
    return p


def _run(pair, mode: str, method: str, decoding: str, n: int = 14) -> list[list[int]]:
    """The outputs of PROMPTS; in graphs mode, every target forward must have gone through the static path."""
    pair.set_execution(mode)
    try:
        decoder = build_decoder(method, pair, decoding=decoding, **random_head_params(method, pair))
        runner = graph_runner(pair.target)
        before = runner.stats["uncaptured"] if runner else 0
        gens = [decoder.generate(pair.tokenizer(p)["input_ids"], n, seed=11 + i) for i, p in enumerate(PROMPTS)]
        if runner:
            assert runner.stats["uncaptured"] - before == sum(g.stats.target_calls for g in gens) > 0
        return [g.output_ids for g in gens]
    finally:
        pair.set_execution("eager")


@pytest.mark.parametrize("method", RUNS)
def test_every_method_gives_the_same_tokens_in_both_modes(pair, pair64, method):
    """Greedy: token-identical (float32, the pair as loaded); sampling: the same tokens under the same seed (the same
    law a fortiori), compared in float64. The static path's float32 logits differ from eager's by ~1e-5 (another
    summation order), which moves a top-k/top-p cut now and then; a method drawing many tokens per round (DSBD's
    beams: 1 of 8 seeds before its device walk, 2 of 16 after) then samples another token from the same law. In
    float64 the two modes' rounding is ~1e-14 and the sampled tokens must be equal: same function, same draws."""
    cls = registry()[method]
    for decoding in cls.decodings:
        models = pair if decoding == "greedy" else pair64
        eager = _run(models, "eager", method, decoding)
        graphs = _run(models, "graphs", method, decoding)
        assert graphs == eager, f"{method} {decoding}: graphs mode changed the output"
    runners = [r for r in (getattr(m.target, "_harness_graph_runner", None) for m in (pair, pair64)) if r]
    assert runners and all(r.stats["captures"] == 0 for r in runners)  # a CPU: the static path without capture


def test_the_pair_reports_its_execution_facts(pair):
    assert pair.execution_facts() == {"mode": "eager"}
    pair.set_execution("graphs")
    try:
        facts = pair.execution_facts()
        assert facts["mode"] == "graphs" and facts["target"]["capture"] is False and "replays" in facts["draft"]
    finally:
        pair.set_execution("eager")


HEADS = ["eagle2", "medusa", "medusa_typical"]


@pytest.mark.parametrize("method", HEADS)
@pytest.mark.parametrize("decoding", ["greedy", "sampling"])
def test_the_heads_forwards_go_through_their_graph_runner(pair, method, decoding):
    """Graphs mode takes in the trained heads too (issue 28.3): every head call (the method's draft calls) is a
    forward of the head's own runner — EAGLE's on a static cache at a bucketed width, Medusa's at its fixed
    shape — and the outputs equal eager's."""
    eager = _run(pair, "eager", method, decoding)
    pair.set_execution("graphs")
    try:
        decoder = build_decoder(method, pair, decoding=decoding, **random_head_params(method, pair))
        gens = [decoder.generate(pair.tokenizer(p)["input_ids"], 14, seed=11 + i) for i, p in enumerate(PROMPTS)]
        runner = graph_runner(decoder.head.module)
        assert runner is not None and decoder.head.runner is runner
        calls = sum(g.stats.draft_calls for g in gens)
        assert calls > 0 and runner.stats["uncaptured"] + runner.stats["replays"] == calls, (runner.stats, calls)
        assert runner.stats["captures"] == 0 and (runner.stats["slots"] == 1) == (method == "eagle2")
        assert [g.output_ids for g in gens] == eager
        facts = decoder.execution_facts()  # the run's facts carry the head's runner beside the target's
        assert facts["mode"] == "graphs" and facts["head"]["uncaptured"] == calls and "target" in facts
        pair.set_execution("eager")  # the head follows the pair at the next generation
        decoder.generate(pair.tokenizer(PROMPTS[0])["input_ids"], 6, seed=1)
        assert graph_runner(decoder.head.module) is None and runner.stats["uncaptured"] == calls
    finally:
        pair.set_execution("eager")


@pytest.mark.parametrize("method", REFUSED)
def test_a_method_that_cannot_run_in_graphs_mode_is_refused(pair, method):
    pair.set_execution("graphs")
    try:
        with pytest.raises(ConfigError, match="pair.execution=graphs"):
            build_decoder(method, pair)
    finally:
        pair.set_execution("eager")


def test_validation_refuses_hf_assisted_in_graphs_mode_before_loading():
    from harness.config.validation import validate_cell

    problems = validate_cell(_cell_config({"method": "hf_assisted", "pair.execution": "graphs",
                                           "dataset.num_prompts": 1}))
    assert any(p.key == "pair.execution" and "hf_assisted" in p.message for p in problems), problems


def test_unknown_execution_is_a_config_error():
    with pytest.raises(ConfigError, match="pair.execution"):
        PairSpec(execution="cudagraph")
    with pytest.raises(ConfigError, match="device_map"):
        PairSpec(execution="graphs", device_map="auto")


def test_execution_is_in_the_identity_and_eager_keeps_existing_ids():
    from harness.config.identity import cell_id

    base = _cell_config({})
    base["pair"].pop("execution", None)
    eager, graphs = _cell_config({"pair.execution": "eager"}), _cell_config({"pair.execution": "graphs"})
    assert cell_id(eager) == cell_id(base) != cell_id(graphs)
    assert cell_id(eager, version=1) == cell_id(base, version=1) != cell_id(graphs, version=1)  # results of 0.2/0.3


def _cell_config(overrides: dict) -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from harness.cli.app import CONF_DIR
    from harness.config.groups import register_configs

    register_configs()
    args = [f"{k}={v}" for k, v in overrides.items()] + ["gpu=cpu"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return OmegaConf.to_container(compose(config_name="config", overrides=args), resolve=True)


# --- the static cache and the buckets, forward by forward -------------------------------------------------

@pytest.fixture()
def models(pair):
    """(eager CountedModel, graphs CountedModel) of the target; a small first capacity, so that it grows."""
    model = pair.target
    set_execution(model, "graphs")
    model._harness_graph_runner = GraphRunner(model, capacity=8)
    yield CountedModel(model, pair.vocab_size)
    set_execution(model, "eager")


def _ids(n, seed=0):
    return torch.randint(3, 4000, (1, n), generator=torch.Generator().manual_seed(seed))


def _both(counted, steps):
    """Run ``steps`` (a function of (model, cache) yielding logits) on a dynamic and on a static cache."""
    runner = counted.model._harness_graph_runner
    outs = {}
    for mode in ("eager", "graphs"):
        runner.active = mode == "graphs"
        cache = new_cache(counted.model)
        assert isinstance(cache, StaticKV) == (mode == "graphs")
        outs[mode] = list(steps(counted, cache))
    runner.active = True
    for a, b in zip(outs["eager"], outs["graphs"]):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
    return outs


def test_crop_moves_the_valid_length_and_never_reallocates(models):
    cache = new_cache(models.model)
    models(_ids(20), cache)
    ptr, cap = cache.layers[0].keys.data_ptr(), cache.get_max_length()
    truncate(cache, 13)
    assert cache_length(cache) == 13 and cache.layers[0].keys.data_ptr() == ptr and cache.get_max_length() == cap
    models(_ids(3, 1), cache)
    assert cache_length(cache) == 16 and cache.layers[0].keys.data_ptr() == ptr


def test_verification_widths_padded_to_buckets_match_eager(models):
    """k = 1..9 tokens after a prefill and a rollback: each padded to its bucket, logits equal eager's."""
    def steps(m, cache):
        yield m(_ids(11), cache)
        for k in range(1, 10):
            start = cache_length(cache)
            yield m(_ids(k, k), cache)
            truncate(cache, start + k // 2)
            yield m(_ids(1, 50 + k), cache, keep=1)
    _both(models, steps)


def test_tree_masks_and_path_rollback_match_eager(models):
    parents = [-1, 0, 0, 1, 2, 2, 3]

    def steps(m, cache):
        yield m(_ids(9), cache)
        n = cache_length(cache)
        mask = tree_attention_mask(parents, n, torch.float32)
        yield m(_ids(len(parents), 3), cache, position_ids=tree_position_ids(parents, n), attention_mask=mask)
        keep_positions(cache, torch.tensor([*range(n), n + 0, n + 2, n + 5]))
        yield m(_ids(2, 4), cache)
    _both(models, steps)


def test_rows_reorder_and_per_row_gathers_match_eager(models):
    """A prompt row fanned out to 3 beams, reordered, then a per-row gather (DSBD's forest), each followed by
    a forward under a 2-D padding mask; the capacity grows on the way (first capacity 8)."""
    def steps(m, cache):
        yield m(_ids(6), cache)
        reorder(cache, torch.tensor([0, 0, 0]))
        yield m(_ids(3, 1).T.contiguous(), cache)
        reorder(cache, torch.tensor([2, 0, 0]))
        n = cache_length(cache)
        pad = torch.ones(3, n + 2, dtype=torch.long)
        pad[1, 2] = 0
        yield m(torch.cat([_ids(3, 2), _ids(3, 3)]).reshape(3, 2), cache, attention_mask=pad)
        n = cache_length(cache)
        gather_positions(cache, torch.tensor([1, 2]), torch.tensor([list(range(n - 1)), [*range(n - 2), n - 1]]))
        yield m(_ids(2, 5).T.contiguous(), cache)
        for i in range(300):  # past the first capacity: the static cache grows and keeps its entries
            out = m(_ids(2, 6 + i).T.contiguous(), cache)
        yield out
    _both(models, steps)
    assert models.model._harness_graph_runner.stats["growths"] >= 1


def test_a_new_cache_reuses_the_slot_of_a_dropped_one(models):
    runner = models.model._harness_graph_runner
    cache = new_cache(models.model)
    models(_ids(4), cache)
    slot = cache.slot
    del cache
    assert new_cache(models.model).slot is slot
    held = new_cache(models.model)
    assert new_cache(models.model).slot is not held.slot and runner.stats["slots"] == 2


# --- the capture's bookkeeping, with a stand-in for CUDA graphs -------------------------------------------

class _StandInGraph:
    """Replays by running the captured forward again on the same static buffers and writing its outputs into the
    tensors the capture returned — what a CUDA graph does with fixed addresses (the kernels themselves unverified)."""

    def replay(self):
        logits, hidden = self.run()
        self.out[0].copy_(logits)
        if hidden is not None:
            self.out[1].copy_(hidden)


class _Stream:
    def wait_stream(self, other):
        return None


@pytest.fixture()
def stand_in_cuda(monkeypatch):
    import contextlib

    original = GraphRunner._run

    @contextlib.contextmanager
    def graph(g, pool=None, capture_error_mode="global"):
        def recording(self, cache, static, return_hidden):
            out = original(self, cache, static, return_hidden)
            if cache is None:  # a cacheless call (Medusa's heads): the static arguments alone
                g.run, g.out = (lambda: original(self, None, static, return_hidden)), out
                return out
            # a graph holds buffer addresses, not the cache: replay through a stand-in bound to the same buffers
            shadow = StaticKV(self, cache.slot, self.num_layers)
            shadow.bind(cache.batch)
            shadow.write_idx = cache.write_idx
            g.run, g.out = (lambda: original(self, shadow, static, return_hidden)), out
            return out
        monkeypatch.setattr(GraphRunner, "_run", recording)
        yield
        monkeypatch.setattr(GraphRunner, "_run", original)

    for name, value in {"graph": graph, "CUDAGraph": _StandInGraph, "Stream": lambda device=None: _Stream(),
                        "current_stream": lambda device=None: _Stream(), "stream": lambda s: contextlib.nullcontext(),
                        "graph_pool_handle": lambda: object()}.items():
        monkeypatch.setattr(torch.cuda, name, value)


@pytest.mark.parametrize("method", ["ar_greedy", "sd", "specinfer", "beam_search", "eagle2", "medusa"])
def test_captured_shapes_replay_with_the_inputs_of_each_call(pair, stand_in_cuda, method):
    """Capture on (with the stand-in): the same tokens as eager, most forwards replayed, and repeated generations
    replay the graphs captured before (slots and static inputs reused) — the heads' forwards too (their runners
    capture as the target's does)."""
    eager = _run(pair, "eager", method, "greedy")
    for model in {id(m): m for m in (pair.target, pair.draft)}.values():
        set_execution(model, "eager")
        model._harness_graph_runner = GraphRunner(model, capacity=8, capture=True)
    pair.set_execution("graphs")
    try:
        decoder = build_decoder(method, pair, decoding="greedy", **random_head_params(method, pair))
        graphs = [decoder.generate(pair.tokenizer(p)["input_ids"], 14, seed=11 + i).output_ids
                  for i, p in enumerate(PROMPTS)]
        stats = pair.target._harness_graph_runner.stats
        captured = stats["captures"]
        assert graphs == eager and captured > 0 and stats["replays"] > stats["captures"]
        again = [decoder.generate(pair.tokenizer(p)["input_ids"], 14, seed=11 + i).output_ids
                 for i, p in enumerate(PROMPTS)]  # shapes whose first call came before any buffer existed: now
        captured = stats["captures"]
        assert again == eager
        head = getattr(decoder, "head", None)
        head_stats = dict(head.runner.stats) if head else None
        for i, p in enumerate(PROMPTS):
            decoder.generate(pair.tokenizer(p)["input_ids"], 14, seed=11 + i)
        assert (stats["captures"], stats["slots"]) == (captured, 1), stats  # every shape replayed; one slot reused
        if head:
            now = head.runner.stats
            assert head_stats["captures"] > 0 and now["captures"] == head_stats["captures"], (head_stats, now)
            assert now["replays"] - head_stats["replays"] > now["uncaptured"] - head_stats["uncaptured"], now
    finally:
        pair.set_execution("eager")
        for model in (pair.target, pair.draft):
            del model._harness_graph_runner


@pytest.mark.parametrize("method", ["ar_greedy", "sd", "specinfer", "eagle2", "medusa"])
def test_graphs_mode_adds_no_host_synchronisation(method):
    """The static path reads no device value on the host (the valid length is a host int; masks, positions and
    write indices are built on the device): per generation, graphs mode counts no more synchronising calls than
    eager (issue 28.2's counter, :mod:`harness.testing.host_sync`)."""
    from harness.testing import near_pair
    from harness.testing.host_sync import counting

    toy = near_pair()
    counts = {}
    for mode in ("eager", "graphs"):
        toy.set_execution(mode)
        decoder = build_decoder(method, toy, decoding="greedy", **random_head_params(method, toy))
        decoder.generate([1, 2, 3], 3, seed=0)  # a first generation allocates the static buffers
        with counting() as counter:
            decoder.generate([1, 2, 3], 12, seed=0)
        counts[mode] = counter.total
    toy.set_execution("eager")
    assert 0 < counts["graphs"] <= counts["eager"], counts
