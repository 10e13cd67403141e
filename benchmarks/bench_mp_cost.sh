#!/usr/bin/env bash
# What the 3-layer equivariant model costs in MD next to se_e2_a at the same cutoff, side by side
# in one run: pair_style mlip (PaiNN with ghost exchange, its default) on water boxes.
#
#   benchmarks/bench_mp_cost.sh [BUILD_DIR]            (default: <repo>/build)
#
# Models (random weights, O H, rc 5 A; tests/support/test_models.h 'ARCH@CUTOFF:...'):
#   se_e2_a  default hyperparameters (embedding 25-50-100, axis 16, fitting 240x3);
#   painn    FEATURES (32) features, 3 layers, 8 radial functions.
# Reported per row: wall us/atom-step of the MD loop, the ratio to se_e2_a of the same dtype,
# size and ranks, and the pair style's peak resident memory per rank ('timing yes').
# Environment: SIZES ("12288"; multiples of 192, data_1 frame 0 replicated in the most compact
# box: 1536 = 2x2x2, 10368 = 3x3x6, 12288 = 4x4x4), RANKS
# ("1 2"), STEPS (3), DTYPES ("f64 f32"), FEATURES (32), CHUNKS (PaiNN chunk sizes: "default"),
# REPEATS (3: the whole grid, repeated). Results: benchmarks/results/bench_mp_cost/<run>/cost.tsv
# (one row per measurement and repeat) and the logs; benchmarks/tables.py makes the docs' table.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init bench_mp_cost "${1:-}" lmp mlip_test_inputs mlip-trainer
cd "$work"
features=${FEATURES:-32}
for d in ${DTYPES:-f64 f32}; do
  suffix=$([[ $d == f32 ]] && echo /f32 || true)
  "$build/bin/mlip_test_inputs" model "se_e2_a@5$suffix" "se_e2_a-$d.pt"
  "$build/bin/mlip_test_inputs" model "painn@5:{\"features\":$features,\"layers\":3,\"radial_basis\":8}$suffix" "painn-$d.pt"
done
for n in ${SIZES:-12288}; do
  # n = 192 a b c with a <= b <= c and c as small as it can be (the most compact box).
  r=$(awk -v n="$n" 'BEGIN { m = n / 192; best = ""
        if (m != int(m)) exit
        for (a = 1; a * a * a <= m; ++a) for (b = a; a * b * b <= m; ++b)
          if (m % (a * b) == 0) { c = m / (a * b); if (best == "" || c < bc) { best = a " " b " " c; bc = c } }
        print best }')
  [[ -n $r ]] || { echo "bench_mp_cost.sh: SIZES: $n is not a multiple of 192 (the frame's atoms)" >&2; exit 1; }
  # shellcheck disable=SC2086
  "$build/bin/mlip-trainer" convert "$src/data/water-deepmd/data_1" "water$n.data" --types O H --replicate $r > /dev/null
done
cat > in.bench <<'IN'
units metal
atom_style atomic
atom_modify map array
newton on
read_data ${data}
mass 1 15.999
mass 2 1.008
pair_style mlip ${model} ${options} timing yes
pair_coeff * * O H
velocity all create 300 4928459 dist gaussian
fix 1 all nve
timestep 0.0002
run 1
run ${steps}
IN
steps=${STEPS:-3}
measure() {  # measure MODEL ATOMS RANKS OPTIONS LOG -> "us peak"
  mpirun --oversubscribe -np "$3" "$build/bin/lmp" -in in.bench -log "$5" -screen none -nocite \
    -var data "water$2.data" -var model "$1" -var steps "$steps" -var options "$4" || { tail -5 "$5" >&2; exit 1; }
  keep_log "$5"
  local peak
  peak=$(grep 'peak RSS' "$5" | tail -1 | sed -nE 's/.*peak RSS ([0-9.]+) MiB max.*/\1/p')
  echo "$(us_per_atom_step "$5") $peak"
}
table=cost
row atoms ranks dtype model repeat us_per_atom_step peak_rss_mib
for repeat in $(seq 1 "${REPEATS:-3}"); do
for n in ${SIZES:-12288}; do
  for ranks in ${RANKS:-1 2}; do
    for d in ${DTYPES:-f64 f32}; do
      read -r base peak < <(measure "se_e2_a-$d.pt" "$n" "$ranks" "" "se_e2_a-$n-$ranks-$d-$repeat.log")
      row "$n" "$ranks" "$d" se_e2_a "$repeat" "$base" "$peak"
      for c in ${CHUNKS:-default}; do
        options=$([[ $c == default ]] && true || echo "chunk $c")
        read -r us peak < <(measure "painn-$d.pt" "$n" "$ranks" "$options" "painn-$n-$ranks-$d-$c-$repeat.log")
        row "$n" "$ranks" "$d" "PaiNN F=$features L=3, chunk $c" "$repeat" "$us" "$peak"
        echo "$n atoms, $ranks ranks, $d, chunk $c, repeat $repeat: se_e2_a $base, PaiNN $us us/atom-step" >&2
      done
    done
  done
done
done
column -t -s $'\t' "$results/cost.tsv"
