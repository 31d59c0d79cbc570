"""Issue 14 (config side): one decoding setting for every method, model loading a real user expects, and
the Python API on par with the CLI (aliases, decoding presets, chat templates, final beams)."""
import json
import shutil
import subprocess
import sys

import pytest
import torch

from harness import DECODINGS, build_decoder, encode_prompt
from harness.methods import resolve_method
from harness.decoders import registry
from harness.errors import ConfigError, NotApplicable
from harness.models import TINY_PAIR_DIR, PairSpec, load_pair, resolve_dtype
from harness.run.runner import gpu_label, run_cell
from harness.tasks import load_task
from harness.testing import toy_pair

CELL = {"method": {"name": "sd", "gamma": 3}, "seed": 0, "max_new_tokens": 6,
        "pair": {"name": "tiny", "target": "tiny/target", "draft": "tiny/draft", "dtype": "auto", "device": "cpu"},
        "dataset": {"name": "kjv_heldout", "task": "text_continuation", "num_prompts": 2, "max_new_tokens": 48,
                    "stop": [], "prompt_words": 12},
        "gpu": {"name": "cpu"}, "energy": {"name": "off", "source": "none"},
        "runner": {"warmup_generations": 0, "progress": False}}


def cell(method: dict, decoding: str, **overrides) -> dict:
    return {**CELL, "method": method, "decoding": DECODINGS[decoding].as_dict(), **overrides}


# ---------------------------------------------------------------- 14.1 one decoding setting for every method
def test_every_method_follows_the_decoding_or_says_it_cannot():
    from harness.methods import ALIASES, method_names

    for method in method_names():  # every decoder and alias, by what each declares it can decode
        for name, preset in DECODINGS.items():
            decodes = method in ALIASES or preset.kind in registry()[method].decodings
            if not decodes:
                with pytest.raises(NotApplicable, match="only"):
                    resolve_method(method, {}, name)
                continue
            cls, params = resolve_method(method, {}, name)
            if "temperature" in params:
                assert {k: params[k] for k in ("temperature", "top_k", "top_p")} == preset.warp_params()
            assert preset.kind in cls.decodings
    assert resolve_method("ar", {}, "greedy")[0].method == "ar_greedy"
    assert resolve_method("beam", {}, "sampling_dsbd")[0].method == "beam_sampling"


def test_decoding_overrides_and_explicit_warp():
    _, params = resolve_method("sd", {}, {"name": "sampling", "temperature": 1.0, "top_k": 10, "top_p": 0.9})
    assert params["top_k"] == 10
    _, params = resolve_method("sd", {"top_p": 0.5}, "sampling")  # an explicit parameter wins
    assert params["top_p"] == 0.5 and params["top_k"] == 20
    with pytest.raises(ConfigError, match="Valid decodings: greedy, sampling, sampling_dsbd"):
        resolve_method("sd", {}, "greedy_ish")


def test_params_defaults_are_the_sampling_preset():
    """No method carries warp defaults of its own that differ from the decoding group's."""
    sampling = DECODINGS["sampling"].warp_params()
    for name, cls in registry().items():
        params = cls.Params()
        if hasattr(params, "temperature"):
            assert {k: getattr(params, k) for k in sampling} == sampling, name


def test_a_sweep_pairs_methods_with_their_decoding(tmp_path):
    """sd runs under both decodings (two cells), ar resolves to ar_greedy / ar_sampling, dsbd under greedy is
    not applicable (nothing written); the summary says how the cell decoded."""
    greedy = run_cell(cell({"name": "sd", "gamma": 3}, "greedy"), tmp_path)
    sampling = run_cell(cell({"name": "sd", "gamma": 3}, "sampling"), tmp_path)
    assert greedy.status == sampling.status == "done" and greedy.cell_id != sampling.cell_id
    assert "__greedy__" in greedy.cell_id
    summary = json.loads((greedy.cell_dir / "summary.json").read_text())
    assert summary["decoding"] == "greedy" and summary["params"]["temperature"] == 0.0
    assert summary["params"]["gamma"] == 3 and summary["method_name"] == "sd"
    assert json.loads((sampling.cell_dir / "summary.json").read_text())["decoding"] == "sampling"
    ar = run_cell(cell({"name": "ar"}, "greedy"), tmp_path)
    assert json.loads((ar.cell_dir / "summary.json").read_text())["method_name"] == "ar_greedy"
    na = run_cell(cell({"name": "dsbd"}, "greedy"), tmp_path)
    assert na.status == "n/a" and "sampling only" in na.error and not na.cell_dir.exists()


def _harness(*args, tmp_path):
    return subprocess.run([sys.executable, "-m", "harness", *args, f"results_dir={tmp_path}", "gpu=cpu",
                           "pair.device=cpu", "energy=off", "dataset.num_prompts=1", "max_new_tokens=4",
                           "runner.warmup_generations=0", "runner.progress=false"],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_cli_sweep_over_decodings_skips_what_does_not_apply(tmp_path):
    r = _harness("-m", "method=ar,dsbd", "decoding=greedy", tmp_path=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("[done]") == 1 and r.stdout.count("[n/a]") == 1
    r = _harness("method=dsbd", "decoding=greedy", tmp_path=tmp_path)  # a single run: an error
    assert r.returncode == 2 and "dsbd" in r.stderr and "sampling only" in r.stderr


# ---------------------------------------------------------------- 14.2 model loading
def test_pair_configs_are_validated_before_any_weights_load(tmp_path):
    with pytest.raises(ConfigError, match="Valid: auto, float32, float16, bfloat16"):
        PairSpec(dtype="fp16")
    with pytest.raises(ConfigError, match="Valid: auto, cpu, cuda"):
        PairSpec(device="gpu0")
    with pytest.raises(ConfigError, match="directory not found"):
        PairSpec(target=str(tmp_path / "no_such_model"))
    with pytest.raises(ConfigError, match="directory not found"):
        PairSpec(target="models/llama/7b")
    with pytest.raises(ConfigError, match="Valid: tiny/target, tiny/draft"):
        PairSpec(draft="tiny/drafts")
    with pytest.raises(ConfigError, match="Valid keys"):
        PairSpec.from_config({"target": "tiny/target", "dtyp": "auto"})
    PairSpec(target="meta-llama/Llama-2-7b-hf", draft="JackFram/llama-68m")  # hub ids: well formed
    with pytest.raises(ConfigError, match="float61"):  # issue 15: a config error is raised, never a failed cell
        run_cell({**CELL, "pair": {**CELL["pair"], "dtype": "float61"}}, tmp_path)
    assert not list(tmp_path.glob("cells/*/*"))


def test_dtype_auto_is_the_checkpoints(tmp_path):
    assert resolve_dtype("auto", "tiny/target", "cpu") == "float32"  # a float16 checkpoint on a CPU
    model = tmp_path / "bf16"
    shutil.copytree(TINY_PAIR_DIR / "target", model, ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "dtype": "bfloat16"}))
    assert resolve_dtype("auto", str(model), "cpu") == "bfloat16"
    assert resolve_dtype("float16", str(model), "cpu") == "float16"


def test_loading_bars_are_silenced(capfd):
    load_pair(device="cpu", progress=False)
    assert "Loading weights" not in capfd.readouterr().err
    load_pair(device="cpu", progress=True)
    assert "Loading weights" in capfd.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the label on a machine without a GPU")
def test_gpu_auto_label_is_cpu_without_a_gpu():
    assert gpu_label({"name": "auto"}) == "cpu" and gpu_label({"name": "h100"}) == "h100"


def test_runner_threads(tmp_path):
    before = torch.get_num_threads()
    try:
        out = run_cell({**CELL, "runner": {**CELL["runner"], "threads": 2}}, tmp_path)
        assert json.loads((out.cell_dir / "summary.json").read_text())["env"]["torch_threads"] == 2
    finally:
        torch.set_num_threads(before)


# ---------------------------------------------------------------- 14.4 the Python API on par with the CLI
class ChatTokenizer:
    chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return "<s>" + "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": ([0] if add_special_tokens else []) + [ord(c) for c in text]}


def test_encode_prompt_is_what_the_tasks_do():
    tok = ChatTokenizer()
    task = load_task({"task": "mt_bench", "name": "mt_bench", "num_prompts": 1})
    ex = task.examples()[0]
    assert encode_prompt(tok, ex.messages) == task.prompt_ids(ex, tok)  # chat template, no second BOS
    assert encode_prompt(tok, "hi") == [0, ord("h"), ord("i")]  # a string is a plain prompt
    assert encode_prompt(tok, "hi", prompt_format="chat")[:4] == [ord(c) for c in "<s><"]
    assert encode_prompt(tok, ex.messages, prompt_format="plain") == tok(ex.messages[-1]["content"])["input_ids"] \
        or len(ex.messages) > 1


def test_api_aliases_presets_and_explicit_parameters():
    pair = toy_pair(vocab_size=6)
    assert build_decoder("ar", pair, decoding="greedy").method == "ar_greedy"
    assert build_decoder("ar", pair).method == "ar_sampling"  # the default decoding is sampling, as on the CLI
    assert build_decoder("beam", pair, decoding="greedy", width=2).params.width == 2
    dec = build_decoder("dsbd", pair, decoding="sampling_dsbd")
    assert (dec.params.top_k, dec.params.top_p) == (10, 0.8)
    assert build_decoder("sd", pair, decoding="greedy").decoding == "greedy"
    with pytest.raises(NotApplicable):
        build_decoder("dsbd", pair, decoding="greedy")


def test_beam_search_returns_hf_final_beams():
    """Generation.beams: every final beam with its score, as HF generate(num_return_sequences=W) returns them."""
    pair = toy_pair(vocab_size=6, eos_token_id=2, with_draft=False, sharpness=0.5)
    for width, prompt in ((2, [1, 3]), (3, [4, 4, 5])):
        gen = build_decoder("beam_search", pair, width=width).generate(prompt, 6)
        ids = torch.tensor([prompt])
        ref = pair.target.generate(ids, attention_mask=torch.ones_like(ids), num_beams=width, do_sample=False,
                                   num_return_sequences=width, max_new_tokens=6, eos_token_id=2, pad_token_id=2,
                                   output_scores=True, return_dict_in_generate=True)
        assert len(gen.beams) == width and gen.beams[0].tokens == gen.output_ids
        for beam, seq, score in zip(gen.beams, ref.sequences, ref.sequences_scores):
            new = seq[len(prompt):].tolist()
            assert beam.tokens == new[: len(beam.tokens)] and all(t == 2 for t in new[len(beam.tokens):])
            assert beam.score == pytest.approx(float(score), abs=1e-4)


def test_sampling_beam_decoders_return_their_final_beams():
    pair = toy_pair(vocab_size=6)
    for method, params in (("beam_sampling", dict(width=3)), ("dsbd", dict(width=2, draft_width=3, gamma=2))):
        gen = build_decoder(method, pair, **params).generate([1, 2], 6, seed=0)
        assert gen.beams[0].tokens == gen.output_ids
        assert [b.score for b in gen.beams] == sorted((b.score for b in gen.beams), reverse=True)
