#!/usr/bin/env bash
# Fill wheelhouse/ (gitignored) with the pure-Python wheels a bare CUDA machine lacks, for scripts/gpu_run.sh's
# offline install (issue 28.5): hydra-core, omegaconf, antlr4-python3-runtime (pip download --no-deps; the
# versions are the ones pyproject.toml allows). Run it where PyPI is reachable, then copy the checkout with its
# wheelhouse/ to the GPU machine. More packages: pass their requirement strings as arguments.
#   scripts/make_wheelhouse.sh [requirement ...]        (WHEELHOUSE=dir to write elsewhere, PYTHON=python3)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
wheelhouse="${WHEELHOUSE:-$root/wheelhouse}"
py="${PYTHON:-python3}"
mkdir -p "$wheelhouse"
# pure-Python wheels only: they install on any platform and Python the GPU machine has
"$py" -m pip download --no-deps --only-binary=:all: --dest "$wheelhouse" \
  "hydra-core>=1.3.2,<1.4" "omegaconf>=2.3,<2.4" "antlr4-python3-runtime==4.9.*" "$@"
ls -l "$wheelhouse"
