"""Issue 33.7 (the report's part): a memory section (peak GPU / CPU memory was recorded, never shown), and CO₂
beside J/token from the measured energy and a grid-intensity setting (CodeCarbon's gCO₂eq/kWh; a config key with
a documented default, per-region entries, and a command-line override)."""
import pytest

from harness.config.schema import GRID_INTENSITY, GRID_REGION, carbon_problems, field_problems
from harness.report import build_report, main
from synth_results import write_cell

GIB = 2**30


def _section(text, title):
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 3)
    return text[start:end if end > 0 else None]


def test_memory_section_shows_peak_gpu_and_cpu_memory(tmp_path):
    res = tmp_path / "results"
    write_cell(res, "ar", "ar_sampling", summary={"lossless": True, "cpu_peak_rss_bytes": 3 * GIB},
               record_extra=lambda i: {"peak_gpu_mem_bytes": (1 + i / 11) * GIB})  # 1 GiB .. 2 GiB
    write_cell(res, "sd", "sd", {"gamma": 4}, secs=0.5, summary={"lossless": True, "cpu_peak_rss_bytes": 3.5 * GIB},
               record_extra=lambda i: {"peak_gpu_mem_bytes": 1.25 * GIB})
    out = build_report(res, tmp_path / "report", n_resamples=100)
    mem = _section(out["md"].read_text(), "Memory")
    ar = next(line for line in mem.splitlines() if line.startswith("| ar_sampling"))
    assert "2 GiB" in ar and "1.5 GiB" in ar and "3 GiB" in ar  # peak, median prompt, process RSS
    assert "3.5 GiB" in mem and "1.25 GiB" in mem
    assert (tmp_path / "report" / "tables" / "memory.parquet").is_file()


def test_co2_beside_j_per_token_from_the_measured_energy_and_the_grid_setting(tmp_path):
    res = tmp_path / "results"
    fr = {"baselines": {"greedy": None, "sampling": None}, "iso": [], "tables": [],
          "carbon": {"region": "FR", "intensity_g_per_kwh": {"world": 475.0, "FR": 56.0}}}
    write_cell(res, "ar", "ar_sampling", jpt=0.36, summary={"lossless": True})  # default grid: world, 475 g/kWh
    write_cell(res, "sd", "sd", {"gamma": 4}, secs=0.5, jpt=0.36, report=fr, summary={"lossless": True})
    out = build_report(res, tmp_path / "report", n_resamples=100)
    co2 = out["analysis"].tables["co2"].set_index("cell_id")
    # 0.36 J/token × 1000 tokens = 360 J = 1e-4 kWh
    assert co2.loc["ar", "g_per_1k_tokens"] == pytest.approx(1e-4 * 475)
    assert co2.loc["sd", "g_per_1k_tokens"] == pytest.approx(1e-4 * 56) and co2.loc["sd", "region"] == "FR"
    assert co2.loc["ar", "total_g"] == pytest.approx(120 * 0.36 / 3.6e6 * 475)  # 12 prompts × 10 tokens
    text = _section(out["md"].read_text(), "CO₂ beside J/token")
    assert "world (475 g/kWh)" in text and "FR (56 g/kWh)" in text and "0.0475" in text and "5.7 mg" in text
    # the command line's intensity wins for every cell
    assert main(["--results", str(res), "--out", str(tmp_path / "pl"), "--bootstrap", "100",
                 "--grid-intensity", "PL=700"]) == 0
    assert "PL (700 g/kWh)" in (tmp_path / "pl" / "report.md").read_text()
    with pytest.raises(SystemExit) as e:
        main(["--results", str(res), "--grid-intensity", "PL=-3"])
    assert e.value.code == 2


def test_no_energy_no_co2_section(tmp_path):
    res = tmp_path / "results"
    write_cell(res, "ar", "ar_sampling", summary={"lossless": True})
    out = build_report(res, tmp_path / "report", n_resamples=100)
    assert "## CO₂" not in out["md"].read_text()


def test_grid_intensity_config_has_a_documented_default_and_checks_regions():
    assert GRID_REGION == "world" and GRID_INTENSITY == {"world": 475.0}
    assert carbon_problems({}) == []
    assert carbon_problems({"region": "FR", "intensity_g_per_kwh": {"world": 475.0, "FR": 56}}) == []
    (p,) = carbon_problems({"region": "FR"})
    assert p.key == "report.carbon.region" and "+report.carbon.intensity_g_per_kwh.FR=G" in str(p)
    (p,) = field_problems({"seed": 0, "report": {"carbon": {"intensity_g_per_kwh": {"world": -1}}}})
    assert p.key == "report.carbon.intensity_g_per_kwh.world"


# ---- Spec-Bench's prompt sets by category, and their report rows ---------------------------------------------

def _spec_bench(**overrides):
    import yaml

    from harness.resources import conf_dir
    from harness.tasks import load_task

    return load_task({**yaml.safe_load((conf_dir() / "dataset" / "spec_bench.yaml").read_text()), **overrides})


def test_spec_bench_prompt_sets_by_category():
    from harness.errors import ConfigError

    small = _spec_bench(per_category=2).examples()
    counts = {}
    for e in small:
        counts[e.meta["category"]] = counts.get(e.meta["category"], 0) + 1
    assert len(small) == 26 and len(counts) == 13 and set(counts.values()) == {2}
    two = _spec_bench(categories=["qa", "rag"]).examples()
    assert len(two) == 160 and {e.meta["category"] for e in two} == {"qa", "rag"}
    with pytest.raises(ConfigError) as e:
        _spec_bench(categories=["poetry"]).examples()
    assert e.value.key == "dataset.categories" and "math_reasoning" in str(e.value)
    with pytest.raises(ConfigError) as e:
        _spec_bench(per_category=0)
    assert e.value.key == "dataset.per_category"


def test_per_category_rows_in_the_report(tmp_path):
    res = tmp_path / "results"
    cats = ["qa", "rag", "translation"]
    extra = lambda i: {"meta.category": cats[i % 3]}  # noqa: E731
    write_cell(res, "ar", "ar_sampling", dataset="spec_bench", summary={"lossless": True}, record_extra=extra)
    write_cell(res, "sd", "sd", {"gamma": 4}, secs=0.5, gamma=4, dataset="spec_bench", summary={"lossless": True},
               record_extra=extra)
    md = build_report(res, tmp_path / "report", n_resamples=100)["md"].read_text()
    table = md[md.index("### Per category (Spec-Bench's table)"):]
    header = next(line for line in table.splitlines() if line.startswith("| method"))
    assert all(f" {c} " in header for c in cats) and " Overall " in header
    assert any(line.startswith("| sd ") for line in table.splitlines())
