#!/usr/bin/env bash
# Install what the real-SLURM tests need (tests/test_slurm.py: a one-node cluster started by the tests):
# Debian's slurm-wlm (slurmctld, slurmd, sbatch, ...) and munge. Idempotent: does nothing when they are
# there; says why and exits 0 where it cannot install (not root, no apt-get) — those tests then skip with
# the reason. Called by `make setup-slurm` (and CI's .ci/run).
set -euo pipefail
need=()
for b in slurmctld slurmd sbatch scontrol munged; do
  command -v "$b" >/dev/null 2>&1 || [[ -x /usr/sbin/$b ]] || need+=("$b")
done
if [[ ${#need[@]} -eq 0 ]]; then
  echo "install_slurm: slurm-wlm and munge already installed ($(/usr/sbin/slurmctld -V 2>/dev/null || true))"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install_slurm: not root: cannot install slurm-wlm and munge (missing: ${need[*]}); the SLURM tests will skip"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_slurm: no apt-get: install slurm-wlm and munge by hand (missing: ${need[*]}); the SLURM tests will skip"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
echo "install_slurm: installed $(/usr/sbin/slurmctld -V)"
