#!/usr/bin/env bash
# CPU speed of the same mlip on several stacks (LibTorch and LAMMPS versions), side by side in one
# run, interleaved (these machines are noisy: compare ratios from one run only).
#
#   benchmarks/compare_stacks.sh LABEL=BUILD_DIR [LABEL=BUILD_DIR ...]
#   e.g. benchmarks/compare_stacks.sh 1.13=build-1.13 2.11=build 2.15=build-2.15
#
# Per build: bench_potentials (se_e2_a and PaiNN, float64, 1536 water atoms, 1 thread, default
# chunks; ROUNDS rounds, default 2), benchmarks/bench_train.sh with PYTHON=0 (mlip-trainer
# frames/s), and, for builds with LAMMPS, benchmarks/bench_pair.sh on 1152 water atoms with 1 and
# 2 ranks (se_e2_a and PaiNN; us/atom-step and peak memory per rank). STAGES picks a subset
# ("potentials train pair").
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ $# -ge 1 ] || { sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
stages=${STAGES:-"potentials train pair"}
uptime
if [[ $stages == *potentials* ]]; then
  echo "### bench_potentials: us/atom-step (float64, 1536 atoms, 1 thread)"
  for round in $(seq "${ROUNDS:-2}"); do
    for spec in "$@"; do
      for arch in se_e2_a painn; do
        row=$("${spec#*=}/bin/bench_potentials" --arch $arch --dtype float64 --atoms 1536 --threads 1 2>&1 |
              grep -E "^$arch " | head -n1)
        echo "round $round ${spec%%=*} $row"
      done
    done
  done
fi
if [[ $stages == *train* ]]; then
  echo "### bench_train.sh (PYTHON=0): mlip-trainer frames/s"
  for spec in "$@"; do
    echo "-- ${spec%%=*}"
    PYTHON=0 "$src/benchmarks/bench_train.sh" "${spec#*=}" 2>&1 | grep -E "^mlip-trainer|ranks /"
  done
fi
if [[ $stages == *pair* ]]; then
  echo "### bench_pair.sh: 1152 water atoms, 1 and 2 ranks"
  for spec in "$@"; do
    [ -x "${spec#*=}/bin/lmp" ] || continue
    echo "-- ${spec%%=*}"
    SIZES=1k RANKS="1 2" PAINN=1 SNAP=0 KOKKOS=0 FLOAT32=0 CHUNKS= PAINN_CHUNKS= \
      "$src/benchmarks/bench_pair.sh" "${spec#*=}" 2>&1 | grep -E "^\| mlip"
  done
fi
uptime
