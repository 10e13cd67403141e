#!/usr/bin/env bash
# MD of each build with the model files its own mlip_test_inputs writes (the model code differs:
# 1930378's se_e2_a models call mlip::se_environment, which 489c303 cannot load), alternating
# builds, 2 rounds, the second in the reverse order. Run from the repository root.
set -euo pipefail
R=$(dirname "$0")
export OMP_NUM_THREADS=1
run() { local label=$1 dir=$2 round=$3
  INPUTS=$(realpath "$dir/bin/mlip_test_inputs") RESULTS=$(realpath "$R")/$label-$round SIZES=1k RANKS=1 PAINN=0 COMPRESSED=1 \
    FLOAT32=0 SNAP=0 KOKKOS=0 CHUNKS= PAINN_CHUNKS= benchmarks/bench_pair.sh "$dir" > "$R/$label-$round.log" 2>&1
  tail -n +2 "$R/$label-$round/md.tsv" | awk -v l="$label" -v r="$round" -F'\t' '{print l, "round", r, $1, $2, $3, $6}'
}
run 489c303 /work/base489/build 1; run 1930378 build 1
run 1930378 build 2; run 489c303 /work/base489/build 2
