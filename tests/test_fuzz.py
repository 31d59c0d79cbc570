"""Issue 15 item 6: property-based fuzz (hypothesis) of configs and inputs.

Random method × parameter values × decoding warp × dataset × max_new_tokens × num_prompts, boundary and
invalid values included, composed by Hydra exactly as the CLI does and validated without loading weights:

* every combination an independent oracle calls invalid is refused with a problem naming an offending key,
  and the CLI's exit path exits with status 2 printing that key;
* every combination validation accepts gets through the runner's pre-load steps (plan, data, max_new_tokens,
  the context budget) without a configuration error;
* a few valid combinations really run on the tiny pair (1-2 prompts, few tokens) and write a record set that
  passes the store's reader (:func:`harness.analysis.load.read_cell`).
"""
import contextlib
import dataclasses
import io

import pytest
from hydra import compose, initialize_config_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from harness.run import context

from harness.config import validation
from harness.cli.app import CONF_DIR
from harness.config.groups import register_configs
from harness.decoders import registry
from harness.methods import ALIASES
from harness.errors import NotApplicable
from harness.run.runner import plan_cell
from harness.tasks import load_task

N_POSITIONS = 1024  # the tiny pair's trained context
DATASETS = ["kjv_heldout", "alpaca", "chatgpt_prompts", "cnndm", "gsm8k", "mt_bench", "spec_bench", "squad", "xsum",
            "spider", "humaneval"]
METHODS = sorted(registry()) + sorted(ALIASES)
INT_PARAMS = ("gamma", "width", "num_drafts", "draft_width")
SMALL_INTS = st.sampled_from([-2, -1, 0, 1, 2, 3])
SHARED = validation._Cache()  # datasets and tokenizers once for the whole fuzz


def compose_cell(overrides: list[str]) -> dict:
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return OmegaConf.to_container(compose(config_name="config", overrides=overrides), resolve=True)


def _method_fields(method: str) -> dict[str, type]:
    cls = registry()[ALIASES[method]["greedy"] if method in ALIASES else method]
    return {f.name: f.type for f in dataclasses.fields(cls.Params)}


@st.composite
def cells(draw):
    method = draw(st.sampled_from(METHODS))
    overrides = [f"method={method}", f"decoding={draw(st.sampled_from(['greedy', 'sampling', 'sampling_dsbd']))}",
                 f"dataset={draw(st.sampled_from(DATASETS))}", "gpu=cpu", "pair.device=cpu"]
    for name, kind in _method_fields(method).items():
        if name in INT_PARAMS and "int" in str(kind) and draw(st.booleans()):
            overrides.append(f"method.{name}={draw(SMALL_INTS)}")
    if draw(st.booleans()):
        overrides.append(f"decoding.temperature={draw(st.sampled_from([-1.0, 0.0, 0.5, 1.0]))}")
    if draw(st.booleans()):
        overrides.append(f"decoding.top_k={draw(st.sampled_from([-3, 0, 1, 20]))}")
    if draw(st.booleans()):
        overrides.append(f"decoding.top_p={draw(st.sampled_from([-0.1, 0.0, 0.5, 1.0, 1.5]))}")
    max_new = draw(st.sampled_from([None, -5, -1, 0, 1, 4, 64, 1000, 1022, 1023, 5000]))
    overrides.append(f"max_new_tokens={'null' if max_new is None else max_new}")
    num = draw(st.sampled_from([None, -1, 0, 1, 2]))
    overrides.append(f"dataset.num_prompts={'null' if num is None else num}")
    return overrides


def oracle(cfg: dict) -> set[str]:
    """Keys that are invalid by the documented ranges alone (independent of the harness's checks)."""
    bad = set()
    m, d = cfg["max_new_tokens"], cfg["dataset"]
    if m is not None and m < 1:
        bad.add("max_new_tokens")
    num = d.get("num_prompts")
    if num is not None and num < 1:
        bad.add("dataset.num_prompts")
    dec = cfg["decoding"]
    if dec["temperature"] < 0:
        bad.add("decoding.temperature")
    if dec["top_k"] < 0:
        bad.add("decoding.top_k")
    if not 0 < dec["top_p"] <= 1:
        bad.add("decoding.top_p")
    for name in INT_PARAMS:
        value = cfg["method"].get(name)
        if isinstance(value, int) and value < 1:
            bad.add(f"method.{name}")
    if "max_new_tokens" not in bad:
        effective = d["max_new_tokens"] if m is None else m
        depth = max([v for k, v in cfg["method"].items() if k.startswith("gamma") and isinstance(v, int)] +
                    [len(cfg["method"].get("k_config") or [])] + [0])
        if effective + depth + 1 >= N_POSITIONS:
            bad.add("max_new_tokens")
    return bad


def _applies(cfg: dict) -> bool:
    try:
        plan_cell(cfg)
    except NotApplicable:
        return False
    except Exception:  # noqa: BLE001 — invalid: not our question here
        return True
    return True


@contextlib.contextmanager
def no_weights():
    """Validation never loads weights: any attempt fails the test."""
    import harness.models as models

    def refuse(*a, **k):
        raise AssertionError("validation loaded model weights")
    real, models.load_model = models.load_model, refuse
    try:
        yield
    finally:
        models.load_model = real


@settings(max_examples=50, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
@given(overrides=cells())
def test_fuzz_invalid_combinations_fail_before_loading_and_valid_ones_pass(overrides):
    cfg = compose_cell(overrides)
    with no_weights():
        problems = validation.validate_cell(cfg, SHARED, " ".join(overrides), single=False)
    keys = {p.key for p in problems}
    bad = oracle(cfg)
    if bad and _applies(cfg):
        assert problems, f"invalid {sorted(bad)} passed validation: {overrides}"
        assert keys & bad or any(k.startswith("method.") for k in keys) and any(b.startswith("method.") for b in bad), \
            f"problems {sorted(keys)} name none of the invalid keys {sorted(bad)}: {overrides}"
        err = io.StringIO()
        with pytest.raises(SystemExit) as exit_info, contextlib.redirect_stderr(err):
            validation.exit_on_problems(problems, 1)
        assert exit_info.value.code == 2
        assert any(k in err.getvalue() for k in keys)
    if not problems:
        assert not bad or not _applies(cfg), f"oracle says {sorted(bad)} but validation passed: {overrides}"
        try:
            plan = plan_cell(cfg)
        except NotApplicable:
            return
        task = load_task(cfg["dataset"])
        max_new = context.resolve_max_new_tokens(cfg, task.max_new_tokens)
        assert task.examples()
        assert context.prompt_budget(N_POSITIONS, max_new, plan.method.lookahead) >= 1


@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(method=st.sampled_from(["ar", "sd", "specinfer", "mtjd", "beam", "typical"]),
       decoding=st.sampled_from(["greedy", "sampling"]), max_new=st.integers(1, 4), num=st.integers(1, 2),
       gamma=st.integers(1, 3))
def test_fuzz_valid_combinations_run_and_pass_the_store_reader(tmp_path_factory, method, decoding, max_new, num, gamma):
    from harness.analysis.load import read_cell
    from harness.run.runner import run_cell

    overrides = [f"method={method}", f"decoding={decoding}", f"max_new_tokens={max_new}", f"dataset.num_prompts={num}",
                 "gpu=cpu", "pair.device=cpu", "energy=off", "runner.progress=false", "runner.warmup_generations=0"]
    if "gamma" in _method_fields(method):
        overrides.append(f"method.gamma={gamma}")
    cfg = compose_cell(overrides)
    if validation.validate_cell(cfg, SHARED, single=False) or not _applies(cfg):
        return
    out = run_cell(cfg, tmp_path_factory.mktemp("fuzz"))
    assert out.status == "done", out.error
    row, records = read_cell(out.cell_dir)
    assert len(records) == num and all(0 < r["new_tokens"] <= max_new for r in records)
    assert row["prompts"] == num


# ---- hostile inputs: data files and result files ------------------------------------------------------------

_JSONL_ROWS = st.one_of(
    st.binary(max_size=200),
    st.lists(st.one_of(st.dictionaries(st.sampled_from(["text", "citation", "x"]),
                                       st.one_of(st.text(max_size=60), st.integers(), st.none())),
                       st.integers(), st.text(max_size=20), st.lists(st.integers(), max_size=3)),
             max_size=4).map(lambda rows: "\n".join(__import__("json").dumps(r) for r in rows).encode()),
)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(data=_JSONL_ROWS)
def test_fuzz_dataset_file_either_loads_or_names_the_file(tmp_path_factory, data):
    """Random bytes or JSON rows of the wrong shape in a data file: the prompts load, or a ConfigError names
    the file — never a bare UnicodeDecodeError/KeyError/TypeError."""
    from harness.errors import ConfigError

    path = tmp_path_factory.mktemp("data") / "rows.jsonl"
    path.write_bytes(data)
    task = load_task({"task": "text_continuation", "name": "fuzz", "path": str(path), "prompt_words": 1})
    try:
        examples = task.examples()
    except ConfigError as e:
        assert str(path) in str(e)
    else:
        assert all(isinstance(ex.prompt, str) and ex.prompt for ex in examples)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(partial=st.binary(max_size=300), records=st.one_of(st.none(), st.binary(max_size=300)),
       summary=st.one_of(st.none(), st.binary(max_size=100)))
def test_fuzz_corrupted_result_files_never_stop_the_reader(tmp_path_factory, partial, records, summary):
    """A crash on a full disk leaves arbitrary bytes in records.partial.jsonl (and a hand edit or a torn copy in
    records.jsonl / summary.json): the reader never raises; each such cell is a named problem."""
    from harness.results import store
    from harness.analysis.load import read_results

    root = tmp_path_factory.mktemp("results")
    cell = root / "cells" / "some_cell"
    cell.mkdir(parents=True)
    (cell / store.PARTIAL).write_bytes(partial)
    if records is not None:
        (cell / store.RECORDS).write_bytes(records)
    if summary is not None:
        (cell / store.SUMMARY).write_bytes(summary)
    res = read_results(root)
    if res.cells.empty:
        assert list(res.problems.cell_id) == ["some_cell"]
        if summary is not None:
            assert res.problems.problem.iloc[0] == "unreadable"
            assert "some_cell" in res.problems.error.iloc[0]  # the report names the cell (and the file)
        else:
            assert res.problems.problem.iloc[0] == "incomplete"
