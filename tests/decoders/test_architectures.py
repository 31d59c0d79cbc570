"""Decoders go through one path for every causal-LM architecture (no Llama-specific code):
greedy and beam search match HF generate on tiny random GPT-2, OPT, Qwen2 and Llama models."""
import pytest
import torch

from harness.methods import build_decoder
from harness.models import ModelPair
from harness.testing import ToyTokenizer


def tiny_model(arch: str, vocab: int = 50):
    import transformers as tf

    torch.manual_seed(0)
    common = dict(vocab_size=vocab)
    configs = {
        "gpt2": lambda: tf.GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=128, **common),
        "opt": lambda: tf.OPTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, ffn_dim=64,
                                    word_embed_proj_dim=32, max_position_embeddings=128, **common),
        "qwen2": lambda: tf.Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1, **common),
        "llama": lambda: tf.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1, **common),
    }
    model = tf.AutoModelForCausalLM.from_config(configs[arch]()).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)  # sharper than the default init, so argmax ties do not occur
    return model


@pytest.mark.parametrize("arch", ["gpt2", "opt", "qwen2", "llama"])
def test_greedy_and_beam_match_hf_for_architecture(arch):
    model = tiny_model(arch)
    pair = ModelPair(target=model, draft=None, tokenizer=ToyTokenizer(50, eos_token_id=None), name=arch)
    for prompt in ([3, 7, 1], [10, 2], [5, 5, 5, 9, 1]):
        ids = torch.tensor([prompt])
        mask = torch.ones_like(ids)
        greedy = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=10, eos_token_id=None,
                                pad_token_id=0)[0, len(prompt):].tolist()
        assert build_decoder("ar_greedy", pair).generate(prompt, 10).output_ids == greedy
        beam = model.generate(ids, attention_mask=mask, num_beams=3, do_sample=False, max_new_tokens=10,
                              eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
        assert build_decoder("beam_search", pair, width=3).generate(prompt, 10).output_ids == beam
