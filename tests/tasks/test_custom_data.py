"""Issue 24.5-24.6: your own data through HF `datasets` (offline, local json/csv/parquet files), its category
in the per-category table, latency percentiles, CSV beside parquet, and provenance of what was loaded."""
import json
import re

import numpy as np
import pandas as pd
import pytest

from harness.analysis.latency import latency_table
from harness.errors import ConfigError
from harness.config.identity import cell_id
from harness.results.provenance import checkpoint_revision, directory_hash, environment
from harness.run.runner import run_cell
from harness.tasks import load_task

ROWS = [{"q": "In the beginning God created the", "a": "heaven", "topic": "genesis", "key": "g1"},
        {"q": "The Lord is my", "a": ["shepherd", "Shepherd"], "topic": "psalms", "key": "p1"},
        {"q": "And God said, Let there be", "a": "light", "topic": "genesis", "key": "g2"},
        {"q": "Blessed are the", "a": "meek", "topic": "matthew", "key": "m1"}]


@pytest.fixture()
def hf_cache(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def _write(tmp_path, fmt):
    path = tmp_path / f"data.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    else:
        df = pd.DataFrame([{**r, "a": r["a"] if isinstance(r["a"], str) else r["a"][0]} for r in ROWS])
        df.to_csv(path, index=False) if fmt == "csv" else df.to_parquet(path, index=False)
    return path


def _cfg(source, **extra):
    return {"task": "generic", "name": "mine", "hf_dataset": str(source), "columns": {"question": "q"},
            "template": "Q: {question}\nA:", "reference": "a", "category": "topic", "id_field": "key",
            "metric": "exact_match", "num_prompts": None, "max_new_tokens": 4, **extra}


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_local_files_become_examples_with_template_reference_category(tmp_path, hf_cache, fmt):
    task = load_task(_cfg(_write(tmp_path, fmt)))
    examples = task.examples()
    assert [e.id for e in examples] == ["g1", "p1", "g2", "m1"]
    assert examples[0].prompt == "Q: In the beginning God created the\nA:"
    assert [e.meta["category"] for e in examples] == ["genesis", "psalms", "genesis", "matthew"]
    assert task.score(examples[0], " Heaven.\n") == {"exact_match": 1.0}
    assert task.primary_metric == "exact_match" and task.higher_is_better


def test_sample_count_split_folder_glob_and_metrics(tmp_path, hf_cache):
    path = _write(tmp_path, "jsonl")
    assert len(load_task(_cfg(path, num_prompts=2, sample_seed=3)).examples()) == 2
    assert len(load_task(_cfg(tmp_path / "*.jsonl")).examples()) == 4
    assert len(load_task(_cfg(tmp_path)).examples()) == 4  # a folder of one kind of file
    ex = load_task(_cfg(path)).examples()[1]
    for metric, output, expected in (("contains", "he is my shepherd", {"contains": 1.0}),
                                     ("f1", "my shepherd", {"f1": pytest.approx(2 / 3)}),
                                     ("accuracy", "42", {"accuracy": 0.0})):
        assert load_task(_cfg(path, metric=metric)).score(ex, output) == expected
    rouge = load_task(_cfg(path, metric="rouge")).score(ex, "shepherd")
    assert rouge["rougeL"] == 1.0 and load_task(_cfg(path, metric="rouge")).primary_metric == "rougeL"
    assert load_task(_cfg(path, metric="none", reference=None)).score(ex, "x") == {}


@pytest.mark.parametrize("change,says", [({"metric": "bleu"}, "dataset.metric"),
                                         ({"hf_dataset": "/nowhere/data.jsonl"}, "file not found"),
                                         ({"reference": "answer"}, "column(s) ['answer']"),
                                         ({"metric": "f1", "reference": None}, "dataset.reference"),
                                         ({"template": "{nope}"}, "unknown placeholder"),
                                         ({"path": "x.jsonl"}, "dataset.hf_dataset")])
def test_bad_config_names_the_key(tmp_path, hf_cache, change, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        load_task(_cfg(_write(tmp_path, "jsonl"), **change)).examples()


def test_cell_on_custom_data_records_category_metric_latency_and_provenance(tmp_path, hf_cache):
    cfg = {"method": {"name": "ar_greedy"}, "seed": 0, "max_new_tokens": 3,
           "pair": {"name": "tiny", "target": "tiny/target", "draft": "tiny/draft", "dtype": "float32", "device": "cpu",
                    "revision": None},
           "dataset": _cfg(_write(tmp_path, "jsonl"), metric="contains"), "gpu": {"name": "cpu"},
           "runner": {"warmup_generations": 0, "progress": False}}
    out = run_cell(cfg, tmp_path / "r")
    assert out.status == "done", out.error
    records = [json.loads(line) for line in (out.cell_dir / "records.jsonl").read_text().splitlines()]
    assert [r["meta.category"] for r in records] == ["genesis", "psalms", "genesis", "matthew"]
    assert all("metric.contains" in r for r in records)
    env = json.loads((out.cell_dir / "summary.json").read_text())["env"]
    assert env["checkpoints"]["target"] == checkpoint_revision("tiny/target")
    assert env["checkpoints"]["target"]["revision"].startswith("sha256:") and env["cpu_model"]
    assert {"numpy", "tokenizers", "accelerate", "harness"} <= set(env)
    # a null revision keeps the id of configs written before the key existed; a pinned one is another cell
    no_key = {**cfg, "pair": {k: v for k, v in cfg["pair"].items() if k != "revision"}}
    assert cell_id(cfg) == cell_id(no_key) != cell_id({**cfg, "pair": {**cfg["pair"], "revision": "abc123"}})
    from harness.analysis.load import read_results
    from harness.analysis.paired import paired_ratios

    res = read_results(tmp_path / "r")
    ratios = paired_ratios(res.records, res.cells)  # the cell is its own baseline (ar_greedy): one row per category
    assert {"overall", "genesis", "psalms", "matthew"} <= set(ratios["category"])


def test_directory_hash_sees_content_not_just_the_path(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    first = directory_hash(str(tmp_path / "m"))
    directory_hash.cache_clear()
    (tmp_path / "m" / "config.json").write_text('{"x": 1}')
    assert directory_hash(str(tmp_path / "m")) != first
    assert checkpoint_revision("org/name")["kind"] == "unknown"  # no model loaded: nothing to say
    assert environment()["cpu_count"] >= 1


def test_latency_percentiles_from_prefill_and_decode_times():
    recs = pd.DataFrame({"cell_id": ["a"] * 5 + ["b"], "prefill_time_s": [0.1, 0.2, 0.3, 0.4, 0.5, np.nan],
                         "decode_time_s": [0.9, 0.9, 0.9, 0.9, 0.9, np.nan], "new_tokens": [10, 10, 10, 10, 1, 5],
                         "wall_time_s": [1.0, 1.1, 1.2, 1.3, 1.4, 2.0]})
    t = latency_table(recs).set_index("cell_id")
    assert t.loc["a", "ttft_ms_p50"] == pytest.approx(300) and t.loc["a", "ttft_ms_p90"] == pytest.approx(460)
    assert t.loc["a", "tpot_ms_p50"] == pytest.approx(100)  # 0.9 s over 9 tokens after the first; 1-token prompt out
    assert t.loc["a", "e2e_ms_p99"] == pytest.approx(1396)
    assert np.isnan(t.loc["b", "ttft_ms_p50"]) and t.loc["b", "n_prompts"] == 1
