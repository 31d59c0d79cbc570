"""Issue 22.14: the report in a real browser. ``index.html`` is rendered by headless Chromium (Debian's
``chromium``; ``make setup`` installs it where it can) at 1400 × 900; a script in the page measures every table,
figure, image and preformatted block after load and writes the result into the DOM, which ``--dump-dom``
returns: nothing may overflow the page and every image must load. Skipped, with the reason, where no Chromium
runs."""
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.report import build_report
from synth_results import GREEDY, SAMPLING, write_cell

FIXTURE = Path(__file__).parent.parent / "fixtures" / "results_small"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
MEASURE = """<script>
window.addEventListener('load', function () {
  var W = document.documentElement.clientWidth, out = {width: W, overflow: [], broken: [], images: 0, tables: 0};
  document.querySelectorAll('table, figure, img, pre, nav, p, ul').forEach(function (el) {
    var r = el.getBoundingClientRect();
    if (el.tagName === 'TABLE') out.tables++;
    if (r.right > W + 1 || el.scrollWidth > el.clientWidth + 1)
      out.overflow.push({tag: el.tagName, right: r.right, scroll: el.scrollWidth, client: el.clientWidth,
                         text: (el.textContent || el.alt || '').replace(/\\s+/g, ' ').slice(0, 100)});
  });
  document.querySelectorAll('img').forEach(function (img) {
    out.images++;
    if (!img.complete || img.naturalWidth === 0) out.broken.push(img.alt);
  });
  var pre = document.createElement('pre'); pre.id = 'layout-measurements';
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script>"""

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium here (Debian: apt-get install -y "
                                                          "chromium; `make setup` installs it where it runs as root)")


def measure(html_path: Path, tmp_path: Path) -> dict:
    page = tmp_path / "measured.html"
    page.write_text(html_path.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
           "--window-size=1400,900", "--virtual-time-budget=10000", "--dump-dom", page.as_uri()]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.skip("chromium did not finish rendering within 120 s")
    found = re.search(r'<pre id="layout-measurements">([^<]*)</pre>', proc.stdout)
    if proc.returncode != 0 and not found:
        pytest.skip(f"chromium cannot run here (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    assert found, f"the measuring script did not run: {proc.stderr[-500:]}"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                      .replace("&gt;", ">"))


def _twenty_methods(results: Path) -> None:
    """20 cells of 9 methods in two regimes, long labels and long cell ids: the widest report a sweep makes."""
    write_cell(results, "ar_greedy__greedy__tiny__kjv_heldout__cpu__s0__000000000000", "ar_greedy", decoding=GREEDY)
    write_cell(results, "ar_sampling__sampling__tiny__kjv_heldout__cpu__s0__000000000001", "ar_sampling")
    for g in range(1, 9):
        for dec, kind in ((GREEDY, "greedy"), (None, "sampling")):
            if g % 2 and kind == "sampling":
                continue
            write_cell(results, f"sd__{kind}__tiny__kjv_heldout__cpu__s0__{g:012d}", "sd",
                       {"gamma": g, "gamma_policy": "fixed"}, decoding=dec or SAMPLING, secs=1 / (1 + g / 8),
                       gamma=g, accept=2)
    for w in (2, 3, 4, 5, 6):
        write_cell(results, f"dsbd__sampling__tiny__kjv_heldout__cpu__s0__{w:012d}", "dsbd",
                   {"gamma": 3, "draft_width": w, "threshold": 0.9, "min_width": 1, "memory_constrained": False},
                   secs=0.9, gamma=3, accept=3, ppl=2 - w / 10)


@pytest.mark.parametrize("which", ["fixture", "twenty_methods"])
def test_report_fits_1400px_and_every_image_loads(tmp_path, which):
    results = tmp_path / "results"
    if which == "fixture":
        shutil.copytree(FIXTURE, results)
    else:
        _twenty_methods(results)
    out = build_report(results, tmp_path / "report", n_resamples=100)
    m = measure(out["html"], tmp_path)
    assert m["width"] >= 1350
    assert m["tables"] >= 5 and m["images"] >= 4
    assert m["images"] == len(out["plots"])  # one embedded image per figure written
    assert not m["broken"], f"images that did not load: {m['broken']}"
    assert not m["overflow"], "overflowing at 1400 px:\n" + "\n".join(map(str, m["overflow"]))
