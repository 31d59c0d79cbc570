"""Issue 33.3: defaults that surprise — a paper's section only when its experiment's cells are present, no all-n/a
rows, perplexity under sampling as a diagnostic (never a quality front), gpu / prompts / token-length columns
in the quality and latency tables, only cells differing in nothing but the seed pooled as seeds, and numbers in
readable units that a column never splits."""
import re

from harness.report import build_report
from synth_results import GREEDY, write_cell


def _build(tmp_path, **kw):
    out = build_report(tmp_path / "results", tmp_path / "report", n_resamples=100, **kw)
    return out, out["md"].read_text(), out["html"].read_text()


def _section(text, title):
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 3)
    return text[start:end if end > 0 else None]


def test_papers_without_their_experiment_s_cells_are_named_once_not_stubbed(tmp_path):
    res = tmp_path / "results"
    write_cell(res, "ar", "ar_sampling", summary={"lossless": True})
    write_cell(res, "sd", "sd", {"gamma": 4}, secs=0.6, gamma=4, summary={"lossless": True})
    write_cell(res, "dsbd", "dsbd", {"gamma": 4, "beam_width": 2}, secs=0.7, gamma=4, summary={"lossless": False})
    write_cell(res, "mtad", "mtad", {"gamma": 4, "draft_width": 8, "tau": 0.1}, secs=0.5, gamma=4,
               summary={"lossless": False})
    out, md, html = _build(tmp_path)
    papers = _section(md, "The papers' tables")
    assert "No cells for this table" not in md and "No cells for this table" not in html
    assert not re.findall(r"^### ", papers, flags=re.M)  # the default sweep's dsbd and mtad cells make no tables
    assert papers.count("Not shown") == 1 and "dsbd, mtad" in papers and "+experiment=dsbd_tables" in papers
    assert not [p for p in out["plots"] if p.name.startswith(("dsbd_", "mtad_"))]  # nor figures
    # asked for (--tables), a paper shows only the tables with cells and names the others once
    out, md, html = _build(tmp_path, tables=["mtad"])
    papers = _section(md, "The papers' tables")
    assert "### MTAD (mtad)" in papers and "No cells for this table" not in md
    assert papers.count("these tables have no cells here") == 1


def test_iso_rows_without_a_ratio_are_named_once_not_listed_as_n_a(tmp_path):
    res = tmp_path / "results"
    declare = {"lossless": True, "primary_metric": "rouge", "primary_metric_higher_is_better": True}
    write_cell(res, "ar", "ar_sampling", summary=declare, metrics={"rouge": 0.3})
    for g in (2, 4):  # sd swept over gamma; no mtad cell: the MTAD-vs-SD pair has no ratio
        write_cell(res, f"sd{g}", "sd", {"gamma": g}, secs=0.5 + g / 10, gamma=g, summary=declare,
                   metrics={"rouge": 0.3})
    out, md, _ = _build(tmp_path)
    iso = _section(md, "Iso-quality comparisons")
    assert "| mtad" not in iso and "n/a" not in iso
    assert iso.count("no mtad cells") == 1


def test_under_sampling_perplexity_is_a_diagnostic_not_a_quality_front(tmp_path):
    res = tmp_path / "results"
    write_cell(res, "ar", "ar_sampling", ppl=3.0, summary={"lossless": True, "primary_metric_recorded": True})
    write_cell(res, "typ", "typical", {"gamma": 4}, ppl=1.5, secs=0.4, gamma=4, summary={"lossless": False})
    write_cell(res, "sd", "sd", {"gamma": 4}, ppl=3.0, secs=0.6, gamma=4, summary={"lossless": True})
    out, md, _ = _build(tmp_path)
    assert not [p for p in out["plots"] if "output_ppl" in p.name]  # no PPL front for sampling cells
    quality = _section(md, "Quality and Pareto fronts")
    assert "distance-from-the-target diagnostic, not quality" in quality
    assert "PPL: " not in quality and "(diagnostic)" in quality
    # greedy cells keep their perplexity front
    res2 = tmp_path / "greedy" / "results"
    write_cell(res2, "ar", "ar_greedy", decoding=GREEDY, summary={"lossless": True})
    write_cell(res2, "beam", "beam_search", {"num_beams": 2}, decoding=GREEDY, ppl=1.8, secs=1.5,
               summary={"lossless": False})
    out2 = build_report(res2, tmp_path / "greedy" / "report", n_resamples=100)
    assert [p for p in out2["plots"] if "output_ppl" in p.name]


def test_cells_differing_in_more_than_the_seed_are_not_pooled_as_seeds(tmp_path):
    res = tmp_path / "results"
    write_cell(res, "a16", "ar_sampling", secs=1.0, max_new_tokens=16, summary={"lossless": True})
    write_cell(res, "a64", "ar_sampling", secs=3.0, max_new_tokens=64, summary={"lossless": True})
    out, md, _ = _build(tmp_path)
    assert not out["flags"]["detail"].str.contains("across 2 seeds").any()
    res2 = tmp_path / "seeds" / "results"
    write_cell(res2, "s0", "ar_sampling", secs=1.0, seed=0, summary={"lossless": True})
    write_cell(res2, "s1", "ar_sampling", secs=3.0, seed=1, summary={"lossless": True})
    out2 = build_report(res2, tmp_path / "seeds" / "report", n_resamples=100)
    assert out2["flags"]["detail"].str.contains("across 2 seeds").any()


def test_quality_and_latency_tables_name_gpu_prompts_and_token_length(tmp_path):
    res = tmp_path / "results"
    write_cell(res, "ar_cpu", "ar_sampling", gpu="cpu", prompts=12, summary={"lossless": True})
    write_cell(res, "ar_l40", "ar_sampling", gpu="l40", prompts=6, max_new_tokens=32, summary={"lossless": True})
    out, md, _ = _build(tmp_path)
    for title in ("Quality and Pareto fronts", "Latency percentiles"):
        header = next(line for line in _section(md, title).splitlines() if line.startswith("| method"))
        for col in ("gpu", "prompts", "max new tokens"):
            assert f" {col} " in header, (title, col, header)


def test_latency_in_readable_units_and_numbers_never_split(tmp_path):
    res = tmp_path / "results"
    write_cell(res, "ar", "ar_sampling", secs=1.04, summary={"lossless": True})
    write_cell(res, "sd", "sd", {"gamma": 4}, secs=0.0004, gamma=4, summary={"lossless": True})
    out, md, html = _build(tmp_path)
    lat = _section(md, "Latency percentiles")
    text = re.sub(r'src="data:image/png;base64,[^"]*"', "", html)  # the figures' bytes are no numbers
    assert not re.search(r"\de[+-]\d", lat) and not re.search(r"\de[+-]\d", text)
    assert " s " in lat and (" µs " in lat or " ms " in lat)
    assert "overflow-wrap:anywhere" not in html and ".n{white-space:nowrap}" in html
    assert re.search(r'<span class="n">1\.\d+ s</span>', html)
