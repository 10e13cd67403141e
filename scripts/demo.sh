#!/usr/bin/env bash
# The main demo, from a fresh machine to molecular dynamics with a trained potential:
#   1. installs what is missing and builds (scripts/setup.sh);
#   2. trains an se_e2_a water potential on data/water-deepmd with mlip-trainer on all cores
#      (MPI data parallelism, 11 min);
#   3. exports model.pt and tests it on the held-out validation frames;
#   4. runs NVT MD of liquid water at 300 K in LAMMPS with pair_style mlip on all cores (MPI);
#   5. writes plots (learning curve, force parity, O-O RDF, temperature and energy) and prints
#      a summary.
# Output: runs/demo/ (MLIP_DEMO_DIR). MLIP_DEMO_QUICK=1: a shortened run for CI (1 epoch, 200 MD
# steps; the physics checks are printed but not enforced). MLIP_DEMO_SKIP_SETUP=1: skip step 1.
# Each step's seconds go to runs/demo/phases.tsv; MLIP_DEMO_KEEP=1 keeps the run (phases, summary,
# the trainer's opening and epoch lines, LAMMPS's log) under benchmarks/results/demo/<date>-<commit>/,
# where the README's figures of the demo come from.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MLIP_BUILD_DIR:-$here/build}"
out="${MLIP_DEMO_DIR:-$here/runs/demo}"
quick="${MLIP_DEMO_QUICK:-0}"
ranks="${MLIP_DEMO_RANKS:-$(nproc)}"
start=$(date +%s)
stamp() { printf '[%4ds] ' $(( $(date +%s) - start )); }
phase_start=$start
phases=()
results=""
if [[ ${MLIP_DEMO_KEEP:-0} == 1 ]]; then
  # the results folder and its record of the tree (commit, changes) as the demo starts
  # shellcheck source=../benchmarks/lib.sh
  source "$here/benchmarks/lib.sh"
  BENCH_COMMAND="MLIP_DEMO_KEEP=1 scripts/demo.sh"
  mkdir -p "$out"
  src=$here work=$out results_open demo
fi
# phase NAME: the seconds since the last phase ended, recorded as NAME's
phase() { phases+=("$1	$(( $(date +%s) - phase_start ))"); phase_start=$(date +%s); }

if [[ ${MLIP_DEMO_SKIP_SETUP:-0} != 1 ]]; then
  echo "$(stamp)== [1/5] setup: dependencies and build"
  "$here/scripts/setup.sh"
fi
phase setup
trainer="$build/bin/mlip-trainer"
lmp="$build/bin/lmp"
for f in "$trainer" "$lmp"; do
  [[ -x $f ]] || { echo "demo: $f not found; run scripts/setup.sh first" >&2; exit 1; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
cd "$here"    # the config's data paths are relative to the repository

echo "$(stamp)== [2/5] training: mlip-trainer train examples/configs/water-demo.yaml"
train_args=(--set "output.dir=$out/train")
md_steps=4000
if [[ $quick == 1 ]]; then
  train_args+=(--set training.epochs=1 --set data.validation_fraction=0.05)
  md_steps=200
fi
rm -rf "$out/train"
# Data parallel over all cores, one LibTorch thread per rank: here 2 ranks train faster than one
# rank with 2 threads (docs/benchmarks.md, "Speed and memory across the stacks").
mpirun --oversubscribe -np "$ranks" "$trainer" train examples/configs/water-demo.yaml "${train_args[@]}" --threads 1 2>&1 |
  tee "$out/train.log"
model="$out/train/model.pt"
phase training

echo "$(stamp)== [3/5] validation: mlip-trainer test on the held-out frames"
"$trainer" test "$model" "$out/train/validation.xyz" --forces "$out/validation_forces.csv" 2>&1 | tee "$out/test.log"
phase validation

echo "$(stamp)== [4/5] MD: 384 atoms (128 H2O), NVT 300 K, $md_steps x 0.5 fs, $ranks MPI ranks"
"$trainer" convert data/water-deepmd/data_0 "$out/water.data" --types O H --replicate 2 1 1
(
  cd "$out"
  mpirun --oversubscribe -np "$ranks" "$lmp" -in "$here/examples/lammps/water/in.water" -log md.log -nocite \
    -var model "$model" -var data water.data -var steps "$md_steps" |
    grep --line-buffered -E "^ +[0-9]+ +[0-9.]+ +[0-9.-]+|Step|Loop time|Performance|ERROR"
)
phase md

echo "$(stamp)== [5/5] plots and summary"
MLIP_DEMO_QUICK=$quick /usr/bin/python3 "$here/scripts/demo_report.py" "$out"
phase report
{ printf 'phase\tseconds\n'; printf '%s\n' "${phases[@]}"; printf 'total\t%s\n' $(( $(date +%s) - start )); } >"$out/phases.tsv"
echo "$(stamp)demo finished: $(( $(date +%s) - start )) s; results in $out"
if [[ -n $results ]]; then
  cp "$out/phases.tsv" "$out/summary.tsv" "$out/test.log" "$results/"
  # what the checkout holds after the demo: the torch venv, LAMMPS's source, the build
  { printf 'path\tbytes\n'; (cd "$here" && du -sb third_party/* "$(basename "$build")" 2>/dev/null | awk '{ print $2 "\t" $1; s += $1 } END { printf "total\t%.0f\n", s }'); } >"$results/disk.tsv"
  grep -E '^epoch [0-9]+/|throughput' "$out/train.log" >"$results/logs/train-epochs.log" || true
  # the trainer's lines before its first step (device, threads, data) and LAMMPS's whole log (its
  # settings, threads, timing breakdown): what a later run's different figures are read against
  awk '/^ *epoch [0-9]/ { exit } { print }' "$out/train.log" >"$results/logs/train-start.log" || true
  cp "$out/md.log" "$results/logs/md.log"
  grep -E 'Loop time|Performance|^Step|^ +[0-9]+ +[-0-9.]+ ' "$out/md.log" >"$results/logs/md-thermo.log" || true
fi
