"""Issue 29.4: a linter (ruff) and a type checker (mypy), configured in pyproject.toml, on harness/, with a baseline
that only shrinks: more problems than tests/static_baseline.json allows fail here (fix them, or lower the baseline
when you fix older ones; never raise it). Each test skips, saying so, when its tool is not installed (the [dev]
extra has both)."""
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASELINE = json.loads((ROOT / "tests" / "static_baseline.json").read_text())


def _tool(module: str) -> list[str]:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed in this environment (pip install -e '.[dev]' installs it)")
    return [sys.executable, "-m", module]


def _within(tool: str, found: int, listing: str) -> None:
    allowed = BASELINE[tool]
    assert found <= allowed, (f"{tool} finds {found} problems, the baseline allows {allowed} "
                              f"(tests/static_baseline.json): fix the new ones\n{listing[-6000:]}")
    if found < allowed:
        print(f"{tool}: {found} problems, baseline {allowed}: lower tests/static_baseline.json to {found}")


def test_ruff_finds_no_more_than_the_baseline():
    r = subprocess.run([*_tool("ruff"), "check", "harness", "--output-format", "json"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode in (0, 1), r.stderr
    problems = json.loads(r.stdout or "[]")
    listing = "\n".join(f"{p['filename']}:{p['location']['row']}: {p['code']} {p['message']}" for p in problems)
    _within("ruff", len(problems), listing)


def test_mypy_finds_no_more_than_the_baseline(tmp_path):
    r = subprocess.run([*_tool("mypy"), "--python-executable", sys.executable, "--cache-dir", str(tmp_path),
                        "--no-error-summary"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-3000:]
    errors = [line for line in r.stdout.splitlines() if re.search(r": error: ", line)]
    _within("mypy", len(errors), "\n".join(errors))
