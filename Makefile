# Two commands (see README):  make sweep   |   make test
# Both create .venv on first use. Without a GPU, torch is the CPU build (torch==2.13.0), never the CUDA one.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-done
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
# the default sweep's methods come from the registry, by each decoder's declaration (harness.methods.sweep_methods)
SWEEP_METHODS = $(shell $(PY) -c 'from harness.methods import sweep_methods; print(",".join(sweep_methods()))' 2>/dev/null)
SWEEP ?= method=$(SWEEP_METHODS) decoding=greedy,sampling runner.interleave=true
PYTEST_ARGS ?=
# `make test` runs on every core (pytest-xdist; TEST_WORKERS=0 for one process); the slow tier runs in one process
# (the real SLURM cluster and the wheel build are machine-wide)
TEST_WORKERS ?= auto

.PHONY: setup setup-slurm browser sweep report test test-slow clean-results
setup: $(STAMP) browser

# headless Chromium for the report's browser test (tests/report/test_report_browser.py skips, saying why, without it):
# installed where missing and this runs as root with apt-get (Debian's `chromium`); never fails the setup
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "setup: installing chromium (report browser test)"; \
	    apt-get install -y chromium >/dev/null 2>&1 || echo "setup: chromium could not be installed: the browser test will skip"; \
	  else echo "setup: no chromium (Debian: apt-get install -y chromium): the report's browser test will skip"; fi

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	@if $(PY) -c "import torch" 2>/dev/null; then \
	  echo "setup: torch $$($(PY) -c 'import torch; print(torch.__version__)') already installed"; \
	elif nvidia-smi -L >/dev/null 2>&1; then \
	  echo "setup: GPU found: installing $(TORCH_SPEC) (CUDA build)"; $(PY) -m pip install $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"; \
	else \
	  echo "setup: no GPU: installing the CPU build $(TORCH_SPEC)"; $(PY) -m pip install $(TORCH_PIP_ARGS) "$(TORCH_SPEC)"; \
	fi
	$(PY) -m pip install -e ".[dev]"
	@touch $@

# Debian's slurm-wlm + munge for the real-SLURM tests (tests/test_slurm.py; they skip with the reason without them)
setup-slurm:
	bash scripts/install_slurm.sh

sweep: setup
	$(VENV)/bin/harness -m $(SWEEP)
	$(VENV)/bin/harness-report --plots plots

report: setup
	$(VENV)/bin/harness-report --plots plots

test: setup
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

test-slow: setup
	$(VENV)/bin/pytest -q -m slow $(PYTEST_ARGS)

clean-results:
	rm -rf results plots report
