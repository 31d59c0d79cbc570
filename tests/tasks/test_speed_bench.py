"""Issue 33.7: SPEED-Bench's qualitative split (not shipped: its licence) loads from the hub through the real
``datasets`` loader into the Spec-Bench task (categories, per_category); without the hub, validation refuses it in
seconds, naming ``dataset.hf_dataset`` and how to get the data."""
import json
from pathlib import Path

import pytest
import yaml

from harness.errors import ConfigError
from harness.tasks import load_task

CONF = Path(__file__).resolve().parents[2] / "conf" / "dataset" / "speed_bench.yaml"
ROWS = [{"question_id": f"{cat}-{i}", "category": cat, "sub_category": "", "turns": [f"{cat} question {i}", "again"],
         "source": "s", "src_id": str(i), "difficulty": "", "multiturn": True}
        for cat in ("coding", "math", "roleplay") for i in range(3)]


def _speed_bench(**overrides):
    return load_task({**yaml.safe_load(CONF.read_text()), **overrides})


def test_speed_bench_is_the_hub_s_qualitative_split_by_category(monkeypatch):
    calls = []

    def rows(dataset, config, split):
        calls.append((dataset, config, split))
        return ROWS

    monkeypatch.setattr("harness.tasks.templated.hf_rows", rows)
    examples = _speed_bench(per_category=2).examples()
    assert calls == [("nvidia/SPEED-Bench", "qualitative", "test")]
    assert "datasets" in _speed_bench().required_modules()  # validation's install line when it is missing
    assert [e.meta["category"] for e in examples] == ["coding", "coding", "math", "math", "roleplay", "roleplay"]
    assert "coding question 0" in examples[0].prompt and "again" not in examples[0].prompt  # first turns
    [e] = _speed_bench(categories=["math"], per_category=1).examples()
    assert e.id == "math-0"


def test_a_local_copy_loads_through_datasets(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    folder = tmp_path / "SPEED-Bench"
    folder.mkdir()
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    examples = _speed_bench(hf_dataset=str(folder), hf_config=None, per_category=1).examples()
    assert [e.id for e in examples] == ["coding-0", "math-0", "roleplay-0"]


def test_offline_it_is_a_config_error_on_hf_dataset_before_the_hub_client_retries(monkeypatch):
    import datasets

    def no_load(*args, **kwargs):
        raise AssertionError("load_dataset called: the hub client would retry for half a minute")

    monkeypatch.setattr(datasets, "load_dataset", no_load)
    monkeypatch.setattr("harness.models.hub_unreachable", lambda *a, **k: "HF_HUB_OFFLINE is set")
    monkeypatch.setattr("huggingface_hub.try_to_load_from_cache", lambda *a, **k: None)
    with pytest.raises(ConfigError, match="hub cannot be reached .*hf download --repo-type dataset") as e:
        _speed_bench().examples()
    assert e.value.key == "dataset.hf_dataset"
