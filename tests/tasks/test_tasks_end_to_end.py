"""Every task runs end to end offline on the embedded tiny pair, through the runner: prompts →
greedy decoding → truncation → task metrics + target perplexity in the records."""
import math
from pathlib import Path

import pytest
import yaml

from harness.methods import build_decoder
from harness.run.runner import run_cell
from harness.results.store import read_records
from harness.tasks import load_task

CONF = Path(__file__).resolve().parents[2] / "conf"
ROUGE = {"rouge1", "rouge2", "rougeL", "rougeLsum"}
METRICS = {"squad": {"exact_match", "f1"}, "spider": {"execution_accuracy", "flag_query_killed"}, "cnndm": ROUGE,
           "xsum": ROUGE, "humaneval": {"pass@1", "suspicious", "flag_dunder", "flag_patch", "flag_introspect",
                                       "flag_nonplain", "flag_opened_files", "flag_denied"},
           "gsm8k": {"accuracy"}, "alpaca": ROUGE,
           "mt_bench": set(), "chatgpt_prompts": set(), "spec_bench": set()}  # these: target perplexity only


def conf(group: str, name: str) -> dict:
    return yaml.safe_load((CONF / group / f"{name}.yaml").read_text())


@pytest.mark.parametrize("dataset", sorted(METRICS))
def test_task_runs_end_to_end_on_the_tiny_pair(tiny_pair, tmp_path, dataset):
    dataset_cfg = {**conf("dataset", dataset), "num_prompts": 2}
    if dataset == "humaneval":
        dataset_cfg["min_isolation"] = "weak"  # whatever isolation this machine has
    if "max_document_words" in dataset_cfg:
        dataset_cfg["max_document_words"] = 150  # the tiny pair was trained on 256-token windows
    cfg = {"method": {"name": "ar_greedy"}, "pair": conf("pair", "tiny"), "dataset": dataset_cfg,
           "gpu": conf("gpu", "cpu"), "energy": {"name": "off", "source": "none"}, "seed": 0, "max_new_tokens": 6,
           "runner": {"warmup_generations": 0, "progress": False}}
    outcome = run_cell(cfg, tmp_path)
    assert outcome.status == "done", outcome.error
    records = read_records(outcome.cell_dir)
    assert len(records) == 2 * dataset_cfg.get("turns", 1)  # mt_bench: both turns of 2 questions
    for record in records:
        assert {k[len("metric."):] for k in record if k.startswith("metric.")} == METRICS[dataset]
        assert 0 < record["new_tokens"] <= 6
        assert math.isfinite(record["output_ppl"]) and record["output_ppl"] > 1
        for name in METRICS[dataset]:
            value = record[f"metric.{name}"]
            assert (math.isnan(value) and "meta.unscorable" in record) or 0 <= value <= 1


def test_chat_template_prompts_decode_and_score(tiny_pair):
    """A tokenizer with a chat template gets the rendered conversation, primed with the response prefix."""
    tokenizer = tiny_pair.tokenizer
    original = tokenizer.chat_template
    tokenizer.chat_template = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                               "{% if add_generation_prompt %}<s>assistant: {% endif %}")
    try:
        task = load_task({**conf("dataset", "spider"), "num_prompts": 1})
        [example] = task.examples()
        text = task.prompt_text(example, tokenizer)
        assert text.startswith("<s>user: Write one SQLite query") and text.endswith("assistant: SELECT")
        ids = task.prompt_ids(example, tokenizer)
        assert ids[0] == tokenizer.bos_token_id and ids[1] != tokenizer.bos_token_id  # the template's BOS only
        generation = build_decoder("ar_greedy", tiny_pair).generate(ids, 6)
        output = task.truncate(tokenizer.decode(generation.output_ids, skip_special_tokens=True))
        assert task.score(example, output)["execution_accuracy"] in (0.0, 1.0)
    finally:
        tokenizer.chat_template = original
