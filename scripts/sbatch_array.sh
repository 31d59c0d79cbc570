#!/usr/bin/env bash
# Plain SLURM job arrays for clusters without submitit: one array task per unit of the sweep's plan.
#
#   scripts/sbatch_array.sh OVERRIDES...      e.g.  scripts/sbatch_array.sh method=ar,sd,dsbd decoding=greedy \
#                                                       pair=my_pair gpu=a100 results_dir=/shared/results
#
# Submitting (SLURM_ARRAY_TASK_ID unset): `harness plan --todo OVERRIDES` validates every cell (invalid
# overrides: their problems are printed, nothing is submitted, exit 2) and lists the units that still
# have a cell to run (finished cells are not resubmitted; partial ones resume at their next prompt;
# corrupt ones are repaired), and this script submits itself as `sbatch --array=<those units>%$MAX_PARALLEL`.
# The plan is composed once, at submission (`harness plan --write PLAN`, in <results_dir>/_plans/ or
# $HARNESS_PLAN), and every task reads its unit from it: `harness task --plan PLAN $SLURM_ARRAY_TASK_ID`
# runs that unit (one cell, or with runner.interleave=true one interleaved comparison of the methods)
# without composing the sweep again (an 886-cell plan takes minutes to compose).
#
# Results: every task writes its own cell folders under results_dir, each under a per-cell lock (two
# tasks given one cell never both run it) with atomic files, so tasks can share one results_dir on a
# shared file system; `harness-report --results DIR` then reads them all (that is the merge).
# With LOCAL_RESULTS=/node/scratch/dir a task writes there instead and then merges its finished cells
# into the shared results_dir with `harness merge LOCAL --into SHARED` (per-cell lock, records then
# summary, atomic renames: concurrent mergers never lose or tear a row).
#
# Preemption: --requeue puts a preempted task back in the queue; it resumes its cell at the next prompt.
# A task that hit its time limit is not requeued by SLURM: run this script again with the same
# overrides, and only the units with work left are submitted.
#
# Environment: HARNESS (default `harness`; e.g. "python -m harness"), MAX_PARALLEL (default 32),
# SBATCH_ARGS (extra sbatch flags, e.g. "--partition=gpu --gres=gpu:1 --time=4:00:00"), LOCAL_RESULTS.
# Pin gpu=<profile> on clusters: `gpu=auto` names the cell after the machine that computes the plan.
#SBATCH --job-name=harness
#SBATCH --output=harness-%A_%a.out
#SBATCH --requeue
set -euo pipefail
HARNESS=${HARNESS:-harness}

shared=results
for a in "$@"; do [[ $a == results_dir=* ]] && shared=${a#results_dir=}; done

if [[ -n "${SLURM_ARRAY_TASK_ID:-}" ]]; then
  unit=("$SLURM_ARRAY_TASK_ID" "$@")
  [[ -n "${HARNESS_PLAN:-}" ]] && unit=(--plan "$HARNESS_PLAN" "$SLURM_ARRAY_TASK_ID")
  if [[ -n "${LOCAL_RESULTS:-}" ]]; then
    rc=0
    $HARNESS task "${unit[@]}" "results_dir=$LOCAL_RESULTS" || rc=$?
    $HARNESS merge "$LOCAL_RESULTS" --into "$shared"
    exit $rc
  fi
  exec $HARNESS task "${unit[@]}"
fi

mkdir -p "$shared/_plans"
HARNESS_PLAN=${HARNESS_PLAN:-$(cd "$shared/_plans" && pwd)/plan-$(date +%Y%m%d-%H%M%S)-$$.json}
export HARNESS_PLAN
rc=0
todo=$($HARNESS plan --todo --write "$HARNESS_PLAN" "$@") || rc=$?
if (( rc != 0 )); then
  # exit 2: the overrides are invalid (the problems are printed above); anything else: plan itself failed
  if (( rc == 2 )); then
    echo "sbatch_array: the overrides are invalid (see above); nothing was submitted" >&2
  else
    echo "sbatch_array: \`$HARNESS plan --todo\` failed (exit $rc); nothing was submitted" >&2
  fi
  exit "$rc"
fi
if [[ -z "$todo" ]]; then
  echo "sbatch_array: every cell of this sweep is already done (see: $HARNESS plan $*)"
  exit 0
fi
echo "sbatch_array: submitting units $todo (plan: $HARNESS_PLAN)"
# shellcheck disable=SC2086
sbatch --array="${todo}%${MAX_PARALLEL:-32}" ${SBATCH_ARGS:-} "$0" "$@"
echo "sbatch_array: follow with \`$HARNESS plan $*\`; when done: harness-report --results <results_dir>"
