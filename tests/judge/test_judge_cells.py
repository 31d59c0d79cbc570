"""Issue 25 item 3 through the runner, on the embedded tiny pair: MT-Bench's second turn generated on the
cell's own first answer (and resumed correctly), judging after generation into files beside the records
(never changing them, never in the cell's identity), re-judging from the cache, pairwise grading against
a reference method, the tiny local HF judge, the analysis joining the judgments, and the CLI refusing a
bad judge config before anything loads."""
import dataclasses
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.results import store
from harness.analysis import quality
from harness.analysis.load import read_results
from harness.methods import build_decoder
from harness.errors import ConfigError
from harness.judge.config import PRESETS
from harness.judge.results import JUDGE_SUMMARY, JUDGMENTS, read_judgments
from harness.run.runner import run_cell
from harness.tasks import load_task
from judge_stub import StubServer, completion, rating

CONF = Path(__file__).resolve().parents[2] / "conf"
KEY = "sk-cells-SENTINEL-0a1b2c3d4e"


def conf(group: str, name: str) -> dict:
    return yaml.safe_load((CONF / group / f"{name}.yaml").read_text())


def cell(method="ar_greedy", judge=None, questions=2, **method_kw) -> dict:
    return {"method": {"name": method, **method_kw}, "pair": conf("pair", "tiny"),
            "dataset": {**conf("dataset", "mt_bench"), "num_prompts": questions}, "gpu": conf("gpu", "cpu"),
            "energy": {"name": "off", "source": "none"}, "seed": 0, "max_new_tokens": 6,
            "runner": {"warmup_generations": 0, "progress": False}, **({"judge": judge} if judge else {})}


def stub_judge(stub: StubServer, **kw) -> dict:
    return {**dataclasses.asdict(PRESETS["openai"]), "base_url": stub.base_url, "api_key_env": "JUDGE_CELLS_KEY",
            "model": "stub", "backoff_s": 0.001, "backoff_max_s": 0.01, **kw}


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("JUDGE_CELLS_KEY", KEY)
    return KEY


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lines(cell_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (cell_dir / JUDGMENTS).read_text().splitlines()]


# ---- two turns ---------------------------------------------------------------------------------------------

def test_mt_bench_examples_are_both_turns_of_the_selected_questions():
    task = load_task({**conf("dataset", "mt_bench"), "num_prompts": 3})
    examples = task.examples()
    assert [e.id for e in examples] == ["81", "81-t2", "82", "82-t2", "83", "83-t2"]
    assert [e.meta["turn"] for e in examples] == [1, 2] * 3 and examples[1].history == ["81"]
    assert examples[1].meta == {"category": "writing", "question_id": 81, "turn": 2}
    sampled = load_task({**conf("dataset", "mt_bench"), "num_prompts": 4, "sample_seed": 1}).examples()
    assert all(b.id == f"{a.id}-t2" for a, b in zip(sampled[::2], sampled[1::2]))  # a question keeps its turns
    first = load_task({**conf("dataset", "mt_bench"), "num_prompts": None, "turns": 1}).examples()
    assert len(first) == 80 and not any(e.history for e in first)
    with pytest.raises(ConfigError, match="dataset.turns"):
        load_task({**conf("dataset", "mt_bench"), "turns": 0})
    assert task.primary_metric == "mt_bench_score" and task.higher_is_better
    assert load_task(conf("dataset", "spec_bench")).primary_metric is None


def test_second_turn_is_generated_on_the_cells_own_first_answer(tiny_pair, tmp_path):
    out = run_cell(cell(), tmp_path)
    assert out.status == "done", out.error
    records = store.read_records(out.cell_dir)
    assert [r["example_id"] for r in records] == ["81", "81-t2", "82", "82-t2"]
    task = load_task(cell()["dataset"])
    examples = task.examples()
    for first, second, ex in zip(records[::2], records[1::2], examples[1::2]):
        answer = task.truncate(first["output_text"]).strip()
        assert second["prompt"] == first["prompt"] + f" {answer}</s>USER: {ex.prompt.split('USER: ')[-1]}"
        assert second["meta.turn"] == 2 and second["prompt_tokens"] > first["prompt_tokens"]
        # the record is what the decoder makes of that prompt
        ids = tiny_pair.tokenizer(second["prompt"])["input_ids"]
        gen = build_decoder("ar_greedy", tiny_pair).generate(ids, 6, seed=0, stop=task.stop)
        assert tiny_pair.tokenizer.decode(gen.output_ids, skip_special_tokens=True) == second["output_text"]


def test_a_cell_resumed_between_turns_writes_what_an_uninterrupted_one_writes(tiny_pair, tmp_path):
    whole = run_cell(cell(), tmp_path / "a")
    cut = tmp_path / "b" / "cells" / whole.cell_dir.name
    shutil.copytree(whole.cell_dir, cut)
    (cut / store.SUMMARY).unlink()
    first = (cut / store.RECORDS).read_text().splitlines()[0]
    (cut / store.RECORDS).unlink()
    (cut / store.PARTIAL).write_text(first + "\n")  # killed after turn 1 of the first question
    assert run_cell(cell(), tmp_path / "b").status == "done"
    strip = lambda rs: [(r["prompt"], r["output_text"], r["new_tokens"]) for r in rs]  # noqa: E731
    assert strip(store.read_records(cut)) == strip(store.read_records(whole.cell_dir))


# ---- judging through the runner ----------------------------------------------------------------------------

def test_judging_follows_generation_and_changes_no_record(tiny_pair, tmp_path, key):
    plain = run_cell(cell(), tmp_path)
    records_sha, summary = sha(plain.cell_dir / store.RECORDS), (plain.cell_dir / store.SUMMARY).read_bytes()
    with StubServer(rating("8")) as stub:
        judged = run_cell(cell(judge=stub_judge(stub)), tmp_path)  # the same cell: the judge is not in its id
    assert judged.status == "skipped" and judged.cell_id == plain.cell_id
    assert sha(plain.cell_dir / store.RECORDS) == records_sha and (plain.cell_dir / store.SUMMARY).read_bytes() == summary
    got = lines(plain.cell_dir)
    assert [g["metric.mt_bench_score"] for g in got] == [8.0] * 4
    assert [g["judge.prompt"] for g in got] == ["single-v1", "single-v1-multi-turn"] * 2
    assert "metric.mt_bench_score_turn1" in got[0] and "metric.mt_bench_score_turn2" in got[1]
    assert len(stub.requests) == 4 and all(r["headers"]["Authorization"] == f"Bearer {key}" for r in stub.requests)
    turn2 = stub.requests[1]["body"]["messages"][1]["content"]
    first_answer = load_task(cell()["dataset"]).truncate(store.read_records(plain.cell_dir)[0]["output_text"]).strip()
    assert f"### Assistant A:\n{first_answer}\n\n### User:\nRewrite your previous response" in turn2
    # a cell judged in the same run: every request comes after its records and summary were written
    with StubServer(rating("6")) as stub:
        fresh = run_cell(cell(judge=stub_judge(stub), questions=1), tmp_path / "fresh")
    assert fresh.status == "done" and stub.requests
    assert min(r["wall"] for r in stub.requests) >= (fresh.cell_dir / store.SUMMARY).stat().st_mtime - 0.01


def test_rejudging_uses_the_cache_and_failures_are_nan_with_their_reason(tiny_pair, tmp_path, key):
    with StubServer(lambda r: (503, {"error": "overloaded"}, {})) as stub:
        out = run_cell(cell(judge=stub_judge(stub, max_retries=1)), tmp_path)
    assert out.status == "done" and len(stub.requests) == 8  # 4 judgments x 2 attempts
    assert all(math.isnan(g["metric.mt_bench_score"] or math.nan) and "HTTP 503" in g["judge.reason"]
               for g in lines(out.cell_dir))
    assert json.loads((out.cell_dir / JUDGE_SUMMARY).read_text())["failed"] == 4
    with StubServer(rating("7")) as stub:
        judge = stub_judge(stub)
        run_cell(cell(judge=judge), tmp_path)  # failures were not cached: asked again
        assert len(stub.requests) == 4 and [g["judge.cached"] for g in lines(out.cell_dir)] == [False] * 4
        run_cell(cell(judge=judge), tmp_path)  # complete and current: nothing to do
        (out.cell_dir / JUDGE_SUMMARY).unlink()
        run_cell(cell(judge=judge), tmp_path)  # judgments rebuilt from the cache alone
        assert len(stub.requests) == 4 and [g["judge.cached"] for g in lines(out.cell_dir)] == [True] * 4
        run_cell(cell(judge={**judge, "use_cache": False}), tmp_path)
        assert len(stub.requests) == 8
        run_cell(cell(judge={**judge, "model": "another"}), tmp_path)  # another judge: its own judgments
        assert len(stub.requests) == 12


def test_malformed_verdicts_become_nan_with_their_reason(tiny_pair, tmp_path, key):
    texts = iter(["Rating: [[9]]", "I cannot rate this.", "Rating: [[12]]", "[[3]]"])
    with StubServer(lambda r: (200, completion(next(texts)), {})) as stub:
        out = run_cell(cell(judge=stub_judge(stub)), tmp_path)
    got = lines(out.cell_dir)
    assert [g["metric.mt_bench_score"] for g in got] == [9.0, None, None, 3.0]  # NaN is null in JSON
    assert "no [[rating]]" in got[1]["judge.reason"] and "outside the 1-10 scale" in got[2]["judge.reason"]
    assert got[1]["judge.text"] == "I cannot rate this."


def test_the_api_key_is_written_nowhere(tiny_pair, tmp_path, key, capfd, caplog):
    with StubServer(lambda r: (401, {"error": f"bad key {key}"}, {})) as stub:
        run_cell(cell(judge=stub_judge(stub), questions=1), tmp_path)
    with StubServer(rating("5")) as stub:
        run_cell(cell(judge=stub_judge(stub, use_cache=False), questions=1), tmp_path)
    assert list(tmp_path.rglob(JUDGMENTS)) and list(tmp_path.rglob("judge_cache/*/*.json"))
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    captured = capfd.readouterr()
    assert KEY not in captured.out + captured.err + caplog.text


def test_pairwise_against_a_reference_method(tiny_pair, tmp_path, key):
    """The stub prefers the longer last answer, so the expected outcome of every game is known."""
    def last(block: str) -> str:
        return block.rsplit(":\n", 1)[-1].strip() if "###" in block else block

    def reply(request):
        user = request["body"]["messages"][1]["content"]
        if "Assistant A's" not in user or "Assistant B" not in user:
            return 200, completion("[[5]]"), {}
        a = re.search(r"Assistant A's (?:Answer\]|Conversation with User\|>)\n(.*?)\n(?:\[|<\|)The End of Assistant A", user, re.S)
        b = re.search(r"Assistant B's (?:Answer\]|Conversation with User\|>)\n(.*?)\n(?:\[|<\|)The End of Assistant B", user, re.S)
        la, lb = len(last(a.group(1))), len(last(b.group(1)))
        return 200, completion("[[A]]" if la > lb else "[[B]]" if lb > la else "[[C]]"), {}

    with StubServer(reply) as stub:
        judge = stub_judge(stub, mode="both", reference="ar_greedy")
        early = run_cell(cell("beam_search", judge=judge, width=2), tmp_path)
        assert all("no finished cell of the reference method" in g["judge.pair_reason"] for g in lines(early.cell_dir))
        ref = run_cell(cell("ar_greedy", judge=judge), tmp_path)
        assert all(g["judge.pair_reason"] == "this cell is the reference method's" for g in lines(ref.cell_dir))
        assert all(g["metric.mt_bench_score"] == 5.0 for g in lines(ref.cell_dir))
        again = run_cell(cell("beam_search", judge=judge, width=2), tmp_path)  # the reference exists now
    assert again.status == "skipped"
    task = load_task(cell()["dataset"])
    mine = [task.truncate(r["output_text"]).strip() for r in store.read_records(again.cell_dir)]
    theirs = [task.truncate(r["output_text"]).strip() for r in store.read_records(ref.cell_dir)]
    expected = [1.0 if len(m) > len(t) else 0.0 if len(m) < len(t) else 0.5 for m, t in zip(mine, theirs)]
    got = lines(again.cell_dir)
    assert [g["metric.mt_bench_win_rate"] for g in got] == expected
    assert [g["judge.pair_prompt"] for g in got] == ["pair-v2", "pair-v2-multi-turn"] * 2
    summary = json.loads((again.cell_dir / JUDGE_SUMMARY).read_text())
    assert summary["state"]["reference_cell"] == ref.cell_id and summary["failed"] == 0


def test_tiny_local_judge(tiny_pair, tmp_path):
    """The embedded target as a judge: garbage verdicts, but the plumbing holds (NaN unless a [[n]] is read)."""
    judge = {**dataclasses.asdict(PRESETS["hf"]), "model": "tiny/target", "max_tokens": 8, "device": "cpu"}
    out = run_cell(cell(judge=judge, questions=1), tmp_path)
    got = lines(out.cell_dir)
    assert len(got) == 2 and all(g["judge.ms"] > 0 and not g["judge.cached"] for g in got)
    for g in got:
        score = g["metric.mt_bench_score"]
        assert (score is None and g["judge.reason"]) or (1 <= score <= 10 and g["judge.reason"] is None)
    summary = json.loads((out.cell_dir / JUDGE_SUMMARY).read_text())
    assert summary["asked"] == 2 and summary["ms_per_asked_judgment"] > 0
    run_cell(cell(judge=judge, questions=1), tmp_path)
    assert [g["judge.text"] for g in lines(out.cell_dir)] == [g["judge.text"] for g in got]
    from harness.judge.client import JudgeFailure
    from harness.judge.config import JudgeConfig
    from harness.judge.local import LocalJudge

    local = LocalJudge(JudgeConfig.from_config(judge))
    with pytest.raises(JudgeFailure, match="context is 1024"):
        local.complete([{"role": "user", "content": "word " * 2000}])


# ---- analysis and the CLI -----------------------------------------------------------------------------------

def test_the_analysis_joins_the_judgments_with_cis_per_category(tiny_pair, tmp_path, key):
    scores = iter(["[[8]]", "[[6]]", "[[4]]", "[[2]]"])
    with StubServer(lambda r: (200, completion(next(scores)), {})) as stub:
        out = run_cell(cell(judge=stub_judge(stub)), tmp_path)
    results = read_results(tmp_path)
    recs = results.records
    assert recs["metric.mt_bench_score"].tolist() == [8.0, 6.0, 4.0, 2.0]
    assert recs["metric.mt_bench_score_turn2"].dropna().tolist() == [6.0, 2.0]
    summary = quality.cell_summary(recs, results.cells, n_resamples=200)
    assert summary.loc[0, "metric.mt_bench_score"] == 5.0 and summary.loc[0, "metric.mt_bench_score_lo"] <= 5.0
    table = quality.by_category(recs, results.cells, "metric.mt_bench_score", n_resamples=200)
    assert set(table["category"]) == {"overall", "writing"} and (table["n"] > 0).all()
    assert table.set_index("category").loc["overall", "metric.mt_bench_score"] == 5.0
    # judgments made for other records (a cell rerun since) are not joined
    judge_summary = json.loads((out.cell_dir / JUDGE_SUMMARY).read_text())
    assert read_judgments(out.cell_dir, judge_summary["state"]["records_sha256"])
    assert read_judgments(out.cell_dir, "0" * 64) == {}


def _cli(*args, env_extra=None):
    env = dict(os.environ, HYDRA_FULL_ERROR="1", **(env_extra or {}))
    env.pop("NO_SUCH_JUDGE_KEY", None)
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, env=env, timeout=600)


def test_cli_refuses_a_bad_judge_before_anything_loads(tmp_path):
    """Every judge problem at once (one process: the CLI starts slowly), each with its key; exit 2, nothing written."""
    r = _cli("dataset=mt_bench", "judge=openai", "judge.base_url=localhost:8000", "judge.api_key_env=NO_SUCH_JUDGE_KEY",
             "judge.mode=pairwise", f"results_dir={tmp_path / 'r'}")
    assert r.returncode == 2, r.stdout + r.stderr
    for key in ("judge.base_url", "judge.api_key_env", "NO_SUCH_JUDGE_KEY", "judge.reference"):
        assert key in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "r").exists()
