#!/usr/bin/env bash
# One prepared GPU run (issue 28.5), offline, in about 8 minutes: from this checkout plus wheelhouse/ (filled by
# scripts/make_wheelhouse.sh) on a bare CUDA machine that has torch, transformers, pandas and nvidia-ml-py:
#   1. installs hydra-core, omegaconf and antlr4 from wheelhouse/ (pip --no-index) and this package (--no-deps);
#   2. runs harness/tools/gpu_run.py: harness-gpu-check, the metered interleaved sweep of every method on the tiny
#      pair in both execution modes, the Llama-2-7B-shaped random pair built on the GPU, HF parity ratios, AR's
#      fraction of the measured-bandwidth roofline, the report, and prints the markdown table for the README.
# Everything goes under $OUT when set (else ./gpu_run_out). Arguments go to the driver (--dry-run: the same steps
# on a CPU with tiny sizes; --plan: print the steps; --budget-s N).
#   OUT=/path scripts/gpu_run.sh [--dry-run] [--plan] [--budget-s 480]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/gpu_run_out}"
wheelhouse="${WHEELHOUSE:-$root/wheelhouse}"
py="${PYTHON:-python3}"
mkdir -p "$out"
export OUT="$out"
cd "$root"

missing=()
for module in hydra omegaconf antlr4; do
  "$py" -c "import $module" 2>/dev/null || missing+=("$module")
done
if ((${#missing[@]})); then
  if [[ ! -d "$wheelhouse" ]]; then
    echo "gpu_run: ${missing[*]} missing and no wheelhouse at $wheelhouse (fill it: scripts/make_wheelhouse.sh)" >&2
    exit 2
  fi
  "$py" -m pip install --no-index --find-links "$wheelhouse" hydra-core omegaconf antlr4-python3-runtime \
    >"$out/install.log" 2>&1 || { echo "gpu_run: offline install failed, see $out/install.log" >&2; exit 2; }
fi
# the package itself, without touching its dependencies; where it cannot be built offline the checkout is used
if ! "$py" -m pip install --no-index --no-deps --no-build-isolation "$root" >>"$out/install.log" 2>&1; then
  echo "gpu_run: package not installed (see $out/install.log); running from the checkout" >&2
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's code either way

absent=$("$py" - <<'PY'
import importlib.util
need = ["torch", "transformers", "pandas", "numpy", "scipy", "yaml", "hydra", "omegaconf", "pyarrow", "tabulate",
        "jinja2", "matplotlib", "safetensors", "tokenizers"]
print(" ".join(m for m in need if importlib.util.find_spec(m) is None))
PY
)
if [[ -n "$absent" ]]; then
  echo "gpu_run: missing on this machine: $absent (add their wheels: scripts/make_wheelhouse.sh <requirement>)" >&2
  exit 2
fi

exec "$py" -m harness.tools.gpu_run --out "$out" "$@"
