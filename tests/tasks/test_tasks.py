"""Task registry, shipped data, prompts and per-task scoring (no model needed)."""
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from harness.errors import ConfigError
from harness.tasks import load_task, task_registry
from harness.tasks.base import Example, Task
from harness.tasks.spider import extract_sql

CONF = Path(__file__).resolve().parents[2] / "conf" / "dataset"
SHIPPED = {"squad": 1190, "spider": 1034, "cnndm": 80, "xsum": 1000, "humaneval": 164, "gsm8k": 1319,
           "mt_bench": 160, "alpaca": 80, "chatgpt_prompts": 220, "spec_bench": 480}  # mt_bench: 80 questions x 2 turns


# generated code runs in whatever isolation this machine has (tests/sandbox/ test the minimum)
ANY_ISOLATION = {"humaneval": {"min_isolation": "weak"}}


def task(name: str, **overrides) -> Task:
    return load_task({**yaml.safe_load((CONF / f"{name}.yaml").read_text()), **ANY_ISOLATION.get(name, {}), **overrides})


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_dataset_config_loads_its_shipped_data(name):
    t = task(name, num_prompts=None)
    assert type(t).kind in task_registry() and t.name == name
    examples = t.examples()
    assert len(examples) == SHIPPED[name]
    assert len({e.id for e in examples}) == len(examples)
    assert all(e.prompt.strip() and e.messages and e.messages[-1]["role"] == "user" for e in examples)
    assert all(isinstance(v, (str, int, float)) for e in examples for v in e.meta.values())  # flat record fields
    turns = getattr(t, "turns", 1)  # MT-Bench: num_prompts counts questions, each `turns` prompts
    assert len(task(name).examples()) == min(SHIPPED[name], task(name).num_prompts * turns)


def test_bad_configs_fail_with_the_valid_choices():
    with pytest.raises(ConfigError, match="Valid task kinds: .*spider"):
        load_task({"task": "spyder", "name": "x"})
    with pytest.raises(ConfigError, match="Valid keys: .*template"):
        load_task({"task": "squad", "name": "x", "temperature": 1})
    with pytest.raises(ConfigError, match="Valid: auto, plain, chat"):
        load_task({"task": "squad", "name": "x", "prompt_format": "html"})
    with pytest.raises(ConfigError, match="Valid placeholders: .*question"):
        load_task({"task": "squad", "name": "x", "template": "{query}"}).examples()
    with pytest.raises(ConfigError, match="columns"):
        load_task({"task": "cnndm", "name": "x", "columns": {"document": "text"}}).examples()
    with pytest.raises(ConfigError, match="path"):
        load_task({"task": "spider", "name": "x", "hf_dataset": "xlangai/spider"})


def test_seeded_sampling_spreads_over_groups():
    a, b = task("spider").examples(), task("spider").examples()
    assert [e.id for e in a] == [e.id for e in b] and len(a) == 100
    assert len({e.meta["db_id"] for e in a}) >= 10  # the first 100 would all be concert_singer / pets_1
    assert [e.id for e in task("spider", sample_seed=None).examples()] == \
        [e.id for e in task("spider", num_prompts=None).examples()[:100]]


def test_spec_bench_has_13_categories():
    counts = {}
    for e in task("spec_bench").examples():
        counts[e.meta["category"]] = counts.get(e.meta["category"], 0) + 1
    assert len(counts) == 13
    assert {k: v for k, v in counts.items() if v == 80}.keys() == {"translation", "summarization", "qa",
                                                                  "math_reasoning", "rag"}
    assert sum(counts.values()) == 480


def test_prompts_follow_the_documented_formats():
    squad = task("squad").examples()[0]
    assert squad.prompt.endswith(f"Question: {squad.messages[-1]['content'].split('Question: ')[-1]}\nAnswer:")
    spider = task("spider").examples()[0]
    assert spider.prompt.startswith("### SQLite SQL tables") and spider.prompt.endswith("\nSELECT")
    assert spider.response_prefix == "SELECT" and "# singer(" in task("spider", sample_seed=None).examples()[0].prompt
    xsum = task("xsum").examples()[0]
    assert xsum.prompt.startswith("You write two sentence summaries") and xsum.messages[0]["role"] == "system"
    he = task("humaneval").examples()[0]
    assert he.prompt == he.reference["prompt"] and he.response_prefix == "```python\n" + he.prompt
    assert task("gsm8k").examples()[0].prompt.startswith("You are given a math question")
    assert task("mt_bench").examples()[0].prompt.endswith(" ASSISTANT:")
    assert task("cnndm", max_document_words=5).examples()[0].prompt.count(" ") < 10


def test_squad_scoring_uses_the_first_line():
    t = task("squad")
    ex = t.examples()[0]
    output = f"  {ex.reference[0]}\nQuestion: something else"
    assert t.score(ex, t.truncate(output)) == {"exact_match": 1.0, "f1": 1.0}
    assert t.score(ex, t.truncate("\nno idea"))["exact_match"] == 0.0


def test_spider_gold_sql_scores_100_percent_on_the_shipped_databases():
    t = task("spider", num_prompts=None)
    scores = [t.score(ex, ex.reference)["execution_accuracy"] for ex in t.examples()]
    scorable = [s for s in scores if not math.isnan(s)]
    assert len(scorable) == 972 and sum(scorable) == 972
    unscorable = [ex for ex in t.examples() if "unscorable" in ex.meta]
    assert len(unscorable) == 62 and {ex.meta["db_id"] for ex in unscorable} == {"wta_1"}


def test_spider_output_extraction():
    assert extract_sql(" name FROM singer;\n-- done") == "SELECT name FROM singer"
    assert extract_sql("```sql\nSELECT count(*) FROM singer\n```") == "SELECT count(*) FROM singer"
    assert extract_sql("with t as (select 1) select * from t") == "with t as (select 1) select * from t"
    t = task("spider", sample_seed=None)
    ex = t.examples()[0]
    assert t.score(ex, t.truncate(ex.reference[len("SELECT"):] + "; SELECT nonsense"))["execution_accuracy"] == 1.0
    assert t.score(ex, t.truncate(" nonsense FROM nowhere"))["execution_accuracy"] == 0.0


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_humaneval_canonical_solutions_pass_and_broken_ones_fail():
    t = task("humaneval")
    examples = t.examples()
    with ThreadPoolExecutor(2) as pool:  # programs run in subprocesses: two at a time
        canonical = list(pool.map(lambda e: t.score(e, t.truncate(e.reference["canonical_solution"]))["pass@1"],
                                  examples))
        broken = list(pool.map(lambda e: t.score(e, "    return None\n")["pass@1"], examples[::8]))
    assert sum(canonical) == len(examples) == 164
    assert sum(broken) == 0 and len(broken) == 21


@pytest.mark.parametrize("completion", [
    "    while True:\n        pass\n",
    "    import os\n    while True:\n        os.fork()\n",
    "    import shutil\n    shutil.rmtree({victim!r})\n    return True\n",
    "    import socket\n    socket.create_connection(('127.0.0.1', 9), timeout=1)\n    return True\n",
], ids=["infinite-loop", "fork-bomb", "delete-outside", "socket"])
def test_hostile_completions_score_zero_and_harm_nothing(tmp_path, completion):
    victim = tmp_path / "keep"
    victim.mkdir()
    (victim / "file.txt").write_text("precious")
    t = task("humaneval", timeout_s=2.0)
    ex = t.examples()[0]
    assert t.score(ex, completion.format(victim=str(victim)))["pass@1"] == 0.0
    assert (victim / "file.txt").read_text() == "precious"


def test_gsm8k_and_summaries_score_their_references_perfectly():
    g = task("gsm8k")
    assert all(g.score(e, e.reference)["accuracy"] == 1.0 for e in g.examples()[:50])
    assert g.score(g.examples()[0], "The answer is 1000000.")["accuracy"] == 0.0
    for name in ("cnndm", "xsum", "alpaca"):
        t = task(name)
        ex = t.examples()[0]
        assert t.score(ex, ex.reference) == pytest.approx({"rouge1": 1, "rouge2": 1, "rougeL": 1, "rougeLsum": 1})
    assert task("mt_bench").score(task("mt_bench").examples()[0], "anything") == {}


def test_full_splits_load_through_hf_datasets(tmp_path, monkeypatch):
    """The hub path is ``datasets.load_dataset``; a local dataset folder exercises the same call offline."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    folder = tmp_path / "cnn_dailymail"
    folder.mkdir()
    (folder / "test.jsonl").write_text('{"id": "a1", "article": "Rain fell. Roads closed.", "highlights": "Rain."}\n')
    t = load_task({"task": "cnndm", "name": "cnndm_full", "hf_dataset": str(folder), "hf_split": "test"})
    [ex] = t.examples()
    assert ex.id == "a1" and ex.reference == "Rain." and "Rain fell. Roads closed." in ex.prompt
    squad_rows = [{"id": "q1", "title": "T", "context": "Paris is in France.", "question": "Where is Paris?",
                   "answers": {"text": ["France", "in France"], "answer_start": [12, 9]}}]
    monkeypatch.setattr("harness.tasks.templated.hf_rows", lambda dataset, config, split: squad_rows)
    [q] = load_task({"task": "squad", "name": "squad_full", "hf_dataset": "rajpurkar/squad"}).examples()
    assert q.reference == ["France", "in France"]


class ChatTokenizer:
    """Just enough tokenizer for prompt rendering: a chat template and a BOS it adds itself."""

    chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert not tokenize and add_generation_prompt
        return "<s>" + "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": ([0] if add_special_tokens else []) + [ord(c) for c in text]}


def test_chat_template_rendering():
    t = task("spider")
    ex = t.examples()[0]
    chat = ChatTokenizer()
    text = t.prompt_text(ex, chat)
    assert text.startswith("<s><user>Write one SQLite query") and text.endswith("<assistant>SELECT")
    assert t.prompt_ids(ex, chat) == [ord(c) for c in text]  # no second BOS
    plain = task("spider", prompt_format="plain")
    assert plain.prompt_text(ex, chat) == ex.prompt and plain.prompt_ids(ex, chat)[0] == 0

    class NoTemplate(ChatTokenizer):
        chat_template = None

    assert t.prompt_text(ex, NoTemplate()) == ex.prompt
    with pytest.raises(ConfigError, match="no chat template"):
        task("spider", prompt_format="chat").prompt_text(ex, NoTemplate())
    kjv = Example(id="1", prompt="In the beginning")  # tasks without messages stay plain
    assert t.prompt_text(kjv, chat) == "In the beginning"


def test_mt_bench_second_turn_takes_the_cells_first_answer_and_refuses_without_one():
    t = task("mt_bench")
    ex = next(e for e in t.examples() if e.history)
    with pytest.raises(ValueError, match="needs the cell's answers"):
        t.with_history(ex, [{"example_id": ex.history[0], "output_text": None}])  # not written: missing
    turn2 = t.with_history(ex, [{"example_id": ex.history[0], "output_text": " ANSWER-ONE "}, {"output_text": "x"}])
    assert "ANSWER-ONE" in turn2.prompt
