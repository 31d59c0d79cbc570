"""Model pairs: the embedded pair loads offline; a pair whose tokenizers differ is refused up front."""
import shutil

import pytest

from harness.errors import TokenizerMismatchError
from harness.models import TINY_PAIR_DIR, check_tokenizers, load_pair
from harness.testing import ToyTokenizer


def test_tiny_pair_loads_with_shared_vocab(tiny_pair):
    assert tiny_pair.draft is not None and tiny_pair.vocab_size == len(tiny_pair.tokenizer)
    n_target = sum(p.numel() for p in tiny_pair.target.parameters())
    n_draft = sum(p.numel() for p in tiny_pair.draft.parameters())
    assert 8e6 <= n_target <= 15e6 and 0.5e6 <= n_draft <= 2e6


def test_check_tokenizers_names_the_differences():
    with pytest.raises(TokenizerMismatchError, match="vocabularies differ"):
        check_tokenizers(ToyTokenizer(5), ToyTokenizer(6))
    with pytest.raises(TokenizerMismatchError, match="eos_token_id"):
        check_tokenizers(ToyTokenizer(5, eos_token_id=1), ToyTokenizer(5, eos_token_id=2))
    check_tokenizers(ToyTokenizer(5, eos_token_id=1), ToyTokenizer(5, eos_token_id=1))


def test_load_pair_refuses_mismatched_tokenizers_before_loading_weights(tmp_path, monkeypatch):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    other = Tokenizer(models.BPE(unk_token="<unk>"))
    other.pre_tokenizer = pre_tokenizers.ByteLevel()
    other.train_from_iterator(["a different corpus entirely"] * 10,
                              trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>", "<unk>"]))
    draft_dir = tmp_path / "draft"
    shutil.copytree(TINY_PAIR_DIR / "draft", draft_dir)
    for f in draft_dir.glob("tokenizer*"):
        f.unlink()
    PreTrainedTokenizerFast(tokenizer_object=other, bos_token="<s>", eos_token="</s>").save_pretrained(draft_dir)

    import harness.models as hm

    def no_weights(*a, **k):
        raise AssertionError("weights were loaded before the tokenizer check")
    monkeypatch.setattr(hm, "load_model", no_weights)
    with pytest.raises(TokenizerMismatchError, match="do not share a tokenizer"):
        load_pair("tiny/target", str(draft_dir), device="cpu")
