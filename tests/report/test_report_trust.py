"""Issue 33.1: a report that knows when not to be believed — host contention recorded per prompt (injected
readers, never the machine's), cells and pairs flagged when measured under different load or across a resume,
a ratio-of-totals vs geometric-mean disagreement flagged, and no method called "fastest" when it is slower
than its baseline."""
import json
import math
import re
import subprocess
import sys

import pytest

from cellproc import ROOT, env
from harness.analysis import trust
from harness.analysis.load import read_results
from harness.run.contention import ContentionReader
from harness.report import build_report
from harness.report import main as report_main
from synth_results import write_cell


# ---- the reader --------------------------------------------------------------------------------------------

def test_reader_turns_two_samples_into_a_prompt_s_host_fields():
    times = iter([(100.0, 1.0, 200.0), (160.0, 7.0, 300.0)])  # busy, steal, total jiffies
    loads = iter([3.0, 5.0])
    r = ContentionReader(loadavg=lambda: (next(loads), 0.0, 0.0), cpu_times=lambda: next(times),
                         cpu_mhz=lambda: 2400.0, cpus=lambda: 2)
    fields = r.between(r.sample(), r.sample())
    assert fields == {"load_1m": 4.0, "cpus": 2, "cpu_busy": 0.6, "cpu_steal": 0.06, "cpu_mhz": 2400.0,
                      "reason": None}


def test_an_unreadable_source_is_nan_with_its_reason_never_an_error():
    def broken():
        raise OSError("no /proc here")
    r = ContentionReader(loadavg=lambda: (1.0, 1.0, 1.0), cpu_times=broken, cpu_mhz=broken, cpus=lambda: None)
    fields = r.between(r.sample(), r.sample())
    assert fields["load_1m"] == 1.0 and math.isnan(fields["cpu_busy"]) and math.isnan(fields["cpu_mhz"])
    assert "/proc/stat: OSError" in fields["reason"] and "CPU frequency" in fields["reason"]


# ---- flags from records -----------------------------------------------------------------------------------

def _host(load):
    return lambda i: {"host.load_1m": load(i) if callable(load) else load, "host.cpus": 2, "host.cpu_busy": 0.9,
                      "host.cpu_steal": 0.0, "host.cpu_mhz": 2500.0}


def _report(tmp_path):
    out = build_report(tmp_path / "results", tmp_path / "report", n_resamples=200)
    return out, out["md"].read_text()


def test_a_cell_and_its_baseline_under_different_load_are_flagged_and_never_called_fastest(tmp_path):
    res = tmp_path / "results"
    write_cell(res, "ar", "ar_sampling", secs=1.0, summary={"lossless": True}, record_extra=_host(2.0))
    write_cell(res, "sd", "sd", {"gamma": 4}, secs=2.5, summary={"lossless": True}, record_extra=_host(12.0))
    out, text = _report(tmp_path)
    head = text[text.index("## Overview"):text.index("## Speed-ups")]
    assert "none faster than the baseline" in head and "⚠ load 6.00 vs 1.00 per CPU" in head
    assert "Timings to distrust: 1 paired comparison" in text[:text.index("## Overview")]
    kinds = set(out["flags"]["kind"])
    assert "measured under different load than its baseline" in kinds
    speed = text[text.index("## Speed-ups"):text.index("## Energy")]
    assert "⚠ load 6.00 vs 1.00 per CPU" in speed


def test_a_resumed_cell_under_two_loads_and_a_totals_vs_geo_disagreement_are_flagged(tmp_path):
    res = tmp_path / "results"
    write_cell(res, "ar", "ar_sampling", secs=1.0, summary={"lossless": True}, record_extra=_host(2.0))
    # sd: prompts 0-5 in one run at load 14, 6-11 after a kill and resume at load 2; prompt 0 took 40 s
    extra = lambda i: {**_host(14.0 if i < 6 else 2.0)(i), **({"wall_time_s": 40.0} if i == 0 else {})}  # noqa: E731
    write_cell(res, "sd", "sd", {"gamma": 4}, secs=0.5, summary={
        "lossless": True, "resumed": True, "segments": [{"from_index": 0, "at": "t0"}, {"from_index": 6, "at": "t1"}]},
        record_extra=extra)
    out, text = _report(tmp_path)
    flags = out["flags"][out["flags"]["cell_id"] == "sd"]
    details = dict(zip(flags["kind"], flags["detail"]))
    assert "prompts 0–5, 6–11" in details["measured across a resume"]
    assert "ranged 1.00–7.00" in details["load varied within the cell"]
    assert "outside the other's 95 % CI" in details["ratio of totals and geometric mean disagree"]
    speed = text[text.index("## Speed-ups"):text.index("## Energy")]
    assert "across a resume" in speed and "ratio of totals ≠ geo. mean" in speed


def test_records_without_host_fields_are_not_flagged_as_equal_or_different(tmp_path):
    res = tmp_path / "results"
    write_cell(res, "ar", "ar_sampling", summary={"lossless": True})
    write_cell(res, "sd", "sd", {"gamma": 4}, secs=0.5, summary={"lossless": True})
    r = read_results(res)
    t = trust.assess(r.records, None)
    assert t.flags.empty and t.conditions["load"].isna().all()


# ---- end to end from the command line -----------------------------------------------------------------------

WRAPPED_CLI = """
import sys
from harness.run import contention
calls = [0]

def loadavg():  # the first cell's prompts (2 prompts, 2 samples each) run at load 1, the next cell's at 12
    calls[0] += 1
    return (1.0 if calls[0] <= 4 else 12.0, 0.0, 0.0)

ticks = [0.0]

def cpu_times():
    ticks[0] += 100.0
    return (0.9 * ticks[0], 0.0, ticks[0])

contention.use(contention.ContentionReader(loadavg=loadavg, cpu_times=cpu_times, cpu_mhz=lambda: 2500.0,
                                           cpus=lambda: 2))
from harness.cli.app import main
sys.argv = ["harness", *sys.argv[1:]]
main()
"""


@pytest.mark.slow  # a CLI sweep (two cells of the tiny pair)
def test_contention_flags_end_to_end_from_the_cli(tmp_path):
    results = tmp_path / "results"
    r = subprocess.run([sys.executable, "-c", WRAPPED_CLI, "-m", "method=ar,sd", "dataset.num_prompts=2",
                        "max_new_tokens=8", "gpu=cpu", "pair.device=cpu", "energy=off", "runner.progress=false",
                        "runner.warmup_generations=0", f"results_dir={results}"],
                       cwd=ROOT, env=env(), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    recs = {}
    for cell in (p for p in (results / "cells").iterdir() if p.is_dir()):  # not .integrity.key
        method = cell.name.split("__")[0]  # `method=ar` is the ar_sampling cell under the default decoding
        recs["ar" if method.startswith("ar_") else method] = [
            json.loads(x) for x in (cell / "records.jsonl").read_text().splitlines()]
    assert {x["host.load_1m"] for x in recs["ar"]} == {1.0} and {x["host.load_1m"] for x in recs["sd"]} == {12.0}
    assert all(x["host.cpu_busy"] == pytest.approx(0.9) and x["host.cpus"] == 2 for x in recs["sd"])
    out = tmp_path / "report"
    assert report_main(["--results", str(results), "--out", str(out), "--bootstrap", "100"]) == 0
    text = (out / "report.md").read_text()
    assert "Timings to distrust" in text and "⚠ load 6.00 vs 0.50 per CPU" in text
    assert "measured under different load than its baseline" in text[text.index("## Measurement quality"):]
    html = re.sub(r"<[^>]+>", "", (out / "index.html").read_text())  # numbers sit in no-wrap spans
    assert "⚠ load 6.00 vs 0.50 per CPU" in html
