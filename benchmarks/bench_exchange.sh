#!/usr/bin/env bash
# Message passing in LAMMPS: the halo path (ghost shell L x cutoff + skin, each chunk with its
# (L-1)-hop halo) against per-layer ghost exchange ('exchange yes': ghost shell cutoff + skin),
# side by side in one run, on water boxes, for PaiNN with FEATURES features (64), 16 radial
# functions, rc 5 A, L layers (tests/support/test_models.h's 'painn@5:{...}'; random weights: the
# cost does not depend on them).
#
#   benchmarks/bench_exchange.sh [BUILD_DIR]            (default: <repo>/build)
#
# Reported per row: wall us/atom-step of the MD loop (LAMMPS's "Loop time"), the pair style's
# peak resident memory per rank (its 'timing yes' report: the largest rank), the ghost atoms per
# rank (the last rank's), and the MB a rank sends per MD step, counted from its ghosts: 3 values
# per ghost for positions and 3 for forces, plus, with exchange, 2 (L - 1) x 4F feature values
# (forward after each layer but the last, reverse in the backward pass), 8 bytes each (on 1 rank
# these are copies to its own periodic images). Environment: SIZES (atoms: "1536"; 1536 = data_1
# frame 0 replicated 2x2x2, 12288 = 4x4x4, 98304 = 8x8x8), RANKS ("1 2"), STEPS (5), LAYERS
# ("2 3"), FEATURES (64), OPTIONS (more pair_style keywords for both paths, e.g. "chunk 256"),
# PATHS ("no yes": exchange no = halo, yes = exchange), REPEATS (3: the whole grid, repeated).
# Results: benchmarks/results/bench_exchange/<date>-<commit>/exchange.tsv and the logs
# (benchmarks/tables.py makes the docs' table of it, and the cost model's from its 1-rank rows).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init bench_exchange "${1:-}" lmp mlip_test_inputs mlip-trainer
cd "$work"
features=${FEATURES:-64}
for layers in ${LAYERS:-2 3}; do
  "$build/bin/mlip_test_inputs" model "painn@5:{\"features\":$features,\"layers\":$layers}" "l$layers.pt"
done
for n in ${SIZES:-1536}; do
  r=$(awk -v n="$n" 'BEGIN { printf "%d", (n / 192) ^ (1 / 3) + 0.5 }')
  "$build/bin/mlip-trainer" convert "$src/data/water-deepmd/data_1" "water$n.data" --types O H --replicate "$r" "$r" "$r" > /dev/null
done
cat > in.bench <<'EOF'
units metal
atom_style atomic
atom_modify map array
newton on
read_data ${data}
mass 1 15.999
mass 2 1.008
pair_style mlip ${model} exchange ${exchange} ${options} timing yes
pair_coeff * * O H
velocity all create 300 4928459 dist gaussian
fix 1 all nve
timestep 0.0002
thermo ${steps}
run 1
run ${steps}
EOF
table=exchange
row atoms layers ranks path repeat us_per_atom_step peak_rss_mib ghosts_per_rank mb_sent_per_rank_step
for repeat in $(seq 1 "${REPEATS:-3}"); do
for n in ${SIZES:-1536}; do
  for layers in ${LAYERS:-2 3}; do
    for ranks in ${RANKS:-1 2}; do
      for exchange in ${PATHS:-no yes}; do
        path=$([[ $exchange == yes ]] && echo exchange || echo halo)
        log=md-$n-L$layers-$ranks-$path-$repeat.log
        mpirun --oversubscribe -np "$ranks" "$build/bin/lmp" -in in.bench -log "$log" -screen none -nocite \
          -var data "water$n.data" -var model "l$layers.pt" -var exchange "$exchange" -var steps "${STEPS:-5}" -var options "${OPTIONS:-}" ||
          { tail -5 "$log" >&2; exit 1; }
        keep_log "$log"
        peak=$(grep 'peak RSS' "$log" | tail -1 | sed -nE 's/.*peak RSS ([0-9.]+) MiB max.*/\1/p')
        ghosts=$(grep -A3 '^Nlocal:' "$log" | tail -4 | awk '/^Nghost:/ { print $2 }' | tail -1)
        values=6
        [[ $exchange == yes ]] && values=$(( 6 + 2 * (layers - 1) * 4 * features ))
        mb=$(awk -v g="$ghosts" -v v="$values" 'BEGIN { printf "%.1f", g * v * 8 / 1e6 }')
        row "$n" "$layers" "$ranks" "$path" "$repeat" "$(us_per_atom_step "$log")" "$peak" "$ghosts" "$mb"
        echo "$n atoms, L $layers, $ranks ranks, $path, repeat $repeat: $(us_per_atom_step "$log") us/atom-step" >&2
      done
    done
  done
done
done
column -t "$results/exchange.tsv"
