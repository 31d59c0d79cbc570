"""harness-report on a committed fixture results folder (contract names, one old-format cell, one
corrupted, one failed and one killed cell): the report builds, the HTML parses and is self-contained."""
import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from harness.report import build_report, main

FIXTURE = Path(__file__).parent.parent / "fixtures" / "results_small"
OLD_CELL = "dsbd__tiny__mini_bench__h100__s0__fxold"
BAD_CELL = "sd__tiny__mini_bench__h100__s1__fxbad"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    results = tmp / "results"
    shutil.copytree(FIXTURE, results)
    out = build_report(results, tmp / "report", n_resamples=200)
    return out, results, tmp


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.imgs, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "img":
            self.imgs.append(dict(attrs))

    def handle_data(self, data):
        self.text.append(data)


def test_report_html_parses_and_embeds_its_figures(report):
    out, _, _ = report
    parser = _Collect()
    parser.feed(out["html"].read_text(encoding="utf-8"))
    parser.close()
    text = " ".join(parser.text)
    assert parser.tags.count("table") >= 8 and len(parser.imgs) >= 5
    assert all(img["src"].startswith("data:image/png;base64,") for img in parser.imgs)  # opens from disk
    assert all(img.get("alt") for img in parser.imgs)
    for heading in ("Speed-ups against the baseline (paired)", "Quality and Pareto fronts", "Iso-quality comparisons",
                    "Theory checks", "Acceptance diagnostics", "The papers' tables", "Measurement quality",
                    "Provenance"):
        assert heading in text
    assert "could not be computed" not in text
    md = out["md"].read_text(encoding="utf-8")
    assert "](plots/speedup.png)" in md and (out["md"].parent / "plots" / "speedup.png").stat().st_size > 1000


def test_one_bad_cell_is_named_and_the_others_are_reported(report):
    out, _, _ = report
    assert len(out["cells"]) == 5 and OLD_CELL in set(out["cells"]["cell_id"])
    problems = out["problems"].set_index("cell_id")["problem"].to_dict()
    assert problems == {BAD_CELL: "unreadable", "mtad__tiny__mini_bench__h100__s0__fxoom": "failed",
                        "spectr__tiny__mini_bench__h100__s0__fxkill": "incomplete"}
    flags = out["flags"]
    assert set(flags[flags["severity"] == "error"]["cell_id"]) == set(problems)
    not_interleaved = set(flags[flags["kind"] == "not interleaved"]["cell_id"])
    assert not_interleaved == {OLD_CELL, "beam_sampling__tiny__mini_bench__h100__s0__fx3"}
    text = out["md"].read_text(encoding="utf-8")
    assert BAD_CELL in text and "unreadable cell" in text


def test_old_format_cell_is_read_in_contract_names(report):
    out, _, _ = report
    cell = out["cells"].set_index("cell_id").loc[OLD_CELL]
    assert cell["method"] == "dsbd(draft_width=4, gamma=3, threshold=0.9, min_width=1, temperature=1.0, top_k=10, " \
                             "top_p=0.8)"  # the library_version fact is not a parameter
    recs = out["records"][out["records"]["cell_id"] == OLD_CELL]
    assert (recs["rounds"] == 3).all() and recs["round_gammas_source"].eq("inferred").all()
    theorem = pd.read_parquet(out["md"].parent / "tables" / "theory_dsbd.parquet").iloc[0]
    assert theorem["cell_id"] == OLD_CELL and 0 < theorem["pass_rate_mle"] < 1


def test_ratios_and_theory_on_the_fixture(report):
    out, _, _ = report
    r = out["ratios"]
    sd = r[(r["label"] == "sd") & (r["category"] == "overall")].iloc[0]
    assert sd["baseline_method"] == "ar_sampling" and sd["speedup_lo"] < sd["speedup"] < sd["speedup_hi"]
    assert sd["energy_ratio"] < 1
    assert set(r[r["label"] == "sd"]["category"]) == {"overall", "writing", "math"}
    sdt = pd.read_parquet(out["md"].parent / "tables" / "theory_sd.parquet").set_index("label").loc["sd"]
    assert sdt["c"] > 0 and sdt["v"] > 0 and sdt["speedup_theory"] > 0  # timing fields present: predicted
    iso = pd.read_parquet(out["md"].parent / "tables" / "iso_quality.parquet")
    # issue 22.3: families are method specs; the old DSBD cell predates memory_constrained, so it is not guessed
    # into the unconstrained family
    assert {"dsbd[memory_constrained=false]"} <= set(iso["family_a"]) and iso["note"].str.contains("no mtad cells").any()
    assert iso["note"].str.contains("no dsbd[memory_constrained=false] cells", regex=False).any()


def test_cli_writes_parquet_and_exports_specbench(report, tmp_path):
    _, results, _ = report
    before = sorted((p.relative_to(results), p.stat().st_mtime_ns) for p in results.rglob("*"))
    assert main(["--results", str(results), "--out", str(tmp_path / "rep"), "--bootstrap", "100"]) == 0
    # issue 33.5: the exports go to the report folder; the results folder is left as it was
    assert sorted((p.relative_to(results), p.stat().st_mtime_ns) for p in results.rglob("*")) == before
    cells = pd.read_parquet(tmp_path / "rep" / "cells.parquet")
    assert len(cells) == 5 and (tmp_path / "rep" / "index.html").is_file()
    assert len(pd.read_csv(tmp_path / "rep" / "cells.csv")) == 5 and (tmp_path / "rep" / "records.parquet").is_file()
    assert json.loads((tmp_path / "rep" / "results.json").read_text())["sweep"]["argv"][0] == "harness-report"
    assert main(["--results", str(results), "--export", "specbench", str(tmp_path / "sb")]) == 0
    files = sorted((tmp_path / "sb").glob("*.jsonl"))
    assert len(files) == 5
    line = json.loads(files[0].read_text().splitlines()[0])
    assert set(line) == {"question_id", "category", "answer_id", "model_id", "choices", "tstamp"}
    assert set(line["choices"][0]) == {"index", "turns", "decoding_steps", "new_tokens", "wall_time", "accept_lengths"}
    with pytest.raises(SystemExit):
        main(["--results", str(results), "--export", "csv", str(tmp_path / "x")])
    with pytest.raises(SystemExit):
        main(["--results", str(results), "--baseline", "greedy"])


def test_empty_results_folder_is_a_clear_message(tmp_path, capsys):
    """Issue 22.13: a folder without cell folders is a mistyped --results: exit 2, nothing written."""
    assert main(["--results", str(tmp_path), "--out", str(tmp_path / "rep")]) == 2
    assert "no cell folders" in capsys.readouterr().out and not (tmp_path / "rep").exists()


def test_report_imports_neither_torch_nor_decoders():
    code = ("import sys, harness.report, harness.analysis.plots; "
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith('harness.decoders')]; "
            "sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


# ---- issue 22.11: lossless marking; 22.13: the command line never destroys work --------------------------------

def test_lossy_methods_are_marked_and_the_overview_names_the_fastest_lossless_one(tmp_path):
    from synth_results import write_cell

    res = tmp_path / "results"
    write_cell(res, "ar", "ar_sampling", summary={"lossless": True})
    write_cell(res, "sd", "sd", {"gamma": 4}, secs=0.6, summary={"lossless": True})
    write_cell(res, "typ", "typical", {"gamma": 4}, secs=0.3, summary={"lossless": False})  # faster, but lossy
    write_cell(res, "old", "specinfer", {"gamma": 4}, secs=0.2)  # an older summary: lossless unknown
    out = build_report(res, tmp_path / "report", n_resamples=100)
    labels = out["cells"].set_index("cell_id")["label"]
    assert labels["typ"] == "typical †" and labels["sd"] == "sd" and labels["old"] == "specinfer"  # never guessed
    text = out["md"].read_text()
    head = text[text.index("## Overview"):text.index("## Speed-ups")]
    row = [line for line in head.splitlines() if line.startswith("| T 1")][0]
    assert "sd (tiny, d)" in row.split("|")[2]  # the fastest *lossless* method
    assert "typical † 3.33×" in row.split("|")[3]  # lossy ones apart, at their speed-up
    assert "specinfer" not in row.split("|")[2] and row.split("|")[4].strip() == "1"  # unknown: counted, not ranked


@pytest.mark.slow  # whole processes / CLI sweeps (issue 21.10: `make test` in minutes; CI runs -m slow too)
def test_two_results_folders_in_one_parent_get_two_reports_and_nothing_is_overwritten(tmp_path, capsys):
    for name in ("results", "results_b"):
        shutil.copytree(FIXTURE, tmp_path / name)
    assert main(["--results", str(tmp_path / "results"), "--bootstrap", "100"]) == 0
    assert main(["--results", str(tmp_path / "results_b"), "--bootstrap", "100"]) == 0
    assert (tmp_path / "report" / "index.html").is_file() and (tmp_path / "report_results_b" / "index.html").is_file()
    marker = json.loads((tmp_path / "report" / "report.json").read_text())
    assert marker["results"] == str((tmp_path / "results").resolve())
    before = (tmp_path / "report" / "index.html").read_text()
    # another results folder aimed at this report folder: refused, the report stays
    assert main(["--results", str(tmp_path / "results_b"), "--out", str(tmp_path / "report")]) == 2
    assert "another results folder" in capsys.readouterr().out
    assert (tmp_path / "report" / "index.html").read_text() == before
    # a mistyped --results: exit 2, the existing report untouched
    assert main(["--results", str(tmp_path / "resluts"), "--out", str(tmp_path / "report")]) == 2
    assert (tmp_path / "report" / "index.html").read_text() == before
    assert main(["--results", str(tmp_path / "results_b"), "--out", str(tmp_path / "report"), "--force",
                 "--bootstrap", "100"]) == 0
