#!/usr/bin/env bash
# Water accuracy of the message-passing models (PaiNN, MACE) against se_e2_a at the same cutoff
# (5 A), each trained for the same wall time on the same 2 MPI ranks, one after the other.
#
#   benchmarks/mp_accuracy.sh [BUILD_DIR]          (default: <repo>/build)
#
# Both start from examples/configs/water-demo.yaml (float32, ZBL repulsion, its loss and learning
# rate schedule), trained on data/water-deepmd/data_0 and data_1 (240 frames; 10% of them for
# the trainer's validation); the architecture block is all that differs:
#   se_e2_a  the demo's (embedding 16-32-64, axis 8, fitting 120x3);
#   painn    PaiNN with FEATURES features (32), 3 layers, 8 radial functions;
#   mace     MACE as examples/configs/ethanol-mace.yaml (32 channels, max_L 1, max_ell 3,
#            correlation 3, 2 interactions), with the demo's optimiser and loss, not mace-torch's;
#   mace_mt  (not in the default MODELS) the same MACE with mace-torch's default loss weights
#            (energy 1, forces 100, constant) in place of the demo's DeePMD-style ones (energy
#            0.02 -> 1, forces 1000 -> 500).
# Reported: best validation errors and `mlip-trainer test` on data_2 (80 frames neither saw),
# steps trained, and the MD cost of each model (pair_style mlip, us/atom-step, 1 rank, 1536 atoms),
# each repeated REPEATS times, the models taking turns.
# Results: benchmarks/results/mp_accuracy/<date>-<commit>/ (lib.sh): rows.tsv, logs/ (training,
# metrics.csv, test and MD logs of every repeat); the docs' table: benchmarks/tables.py.
# Environment: MINUTES (7), FEATURES (32), MODELS ("se_e2_a painn mace"), REPEATS (3), KEEP, RESULTS.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init mp_accuracy "${1:-}" mlip-trainer
trainer=$build/bin/mlip-trainer
minutes=${MINUTES:-7}
features=${FEATURES:-32}
REPEATS=${REPEATS:-3}
data=$src/data/water-deepmd
cd "$work"

# config NAME: the demo's config on data_0 + data_1 for MINUTES, output in NAME/.
config() {
  sed -e "s|    - path: data/water-deepmd|    - path: $data/data_0\n    - path: $data/data_1|" \
      -e "s|max_minutes: .*|max_minutes: $minutes|" -e "s|epochs: .*|epochs: 100000|" \
      -e "s|dir: runs/demo/train|dir: $work/$1|" -e "s|cache_dir: .*|cache_dir: $work/cache|" \
      -e "s|log_every: .*|log_every: 0|" "$src/examples/configs/water-demo.yaml" > "$1.yaml"
}
# hyperparameters NAME ARCHITECTURE LINE...: NAME.yaml with the architecture and these
# hyperparameter lines in place of the demo's (the lines after 'hyperparameters:').
hyperparameters() {
  local name=$1 arch=$2
  shift 2
  config "$name"
  awk -v a="$arch" -v h="$(printf '%s\n' "$@")" '
    /^  architecture:/ { print "  architecture: " a; next }
    /^  hyperparameters:/ { print; print h; skip = 1; next }
    skip && /^    / { next }
    { skip = 0; print }' "$name.yaml" > "$name.tmp" && mv "$name.tmp" "$name.yaml"
}
config se_e2_a
hyperparameters painn painn "    features: $features" "    layers: 3" "    radial_basis: 8"
hyperparameters mace mace "    num_channels: 32" "    max_L: 1" "    max_ell: 3" "    correlation: 3" \
  "    num_interactions: 2"
sed -e "s|dir: $work/mace\$|dir: $work/mace_mt|" -e "s|energy: {start: 0.02, limit: 1.0}|energy: {start: 1.0, limit: 1.0}|" \
    -e "s|forces: {start: 1000.0, limit: 500.0}|forces: {start: 100.0, limit: 100.0}|" mace.yaml > mace_mt.yaml

best() { awk -F, -v c="$2" 'NR > 1 && ($c < b || b == "") { b = $c } END { printf "%.3f", 1e3 * b }' "$1/metrics.csv"; }
steps() { awk -F, 'END { print $2 }' "$1/metrics.csv"; }
# test_rmse DIR: "E F" of `mlip-trainer test` on data_2 (meV/atom, meV/A)
test_rmse() {
  "$trainer" test "$1/model.pt" "$data/data_2" > "$1.test" 2>&1 || { cat "$1.test" >&2; exit 1; }
  echo "$(sed -nE 's/^energy RMSE +([0-9.]+) meV\/atom.*/\1/p' "$1.test") $(sed -nE 's/^force RMSE +([0-9.]+) meV\/A.*/\1/p' "$1.test")"
}
# MD cost: 1536 water atoms (data_1 frame 0, 2x2x2), 1 rank, 20 steps after 5 of warm-up.
"$trainer" convert "$data/data_1" water.data --types O H --replicate 2 2 2 > /dev/null
cat > in.md <<'IN'
units metal
atom_style atomic
atom_modify map array
read_data water.data
mass 1 15.999
mass 2 1.008
pair_style mlip ${model}
pair_coeff * * O H
velocity all create 300 4928459 dist gaussian
fix 1 all nve
timestep 0.0005
run 5
run 20
IN
md_cost() {
  mpirun -np 1 "$build/bin/lmp" -in in.md -log "$1.md.log" -screen none -nocite -var model "$1/model.pt" > /dev/null
  us_per_atom_step "$1.md.log"
}

# The models take turns, so that a slow spell of this shared machine falls on both.
row model repeat steps val_e_mev_atom val_f_mev_a test_e_mev_atom test_f_mev_a md_us_per_atom_step
for rep in $(seq "$REPEATS"); do
  for name in ${MODELS:-se_e2_a painn mace}; do
    echo "== repeat $rep of $REPEATS: $name" >&2
    rm -rf "$name"
    mpirun --oversubscribe -np 2 "$trainer" train "$name.yaml" --threads 1 > "$name.log" 2>&1 ||
      { tail -20 "$name.log" >&2; exit 1; }
    errors=$(test_rmse "$name")
    read -r test_e test_f <<< "$errors"
    md=$(md_cost "$name")
    keep_log "$name.log" "$name-$rep-train.log"
    keep_log "$name/metrics.csv" "$name-$rep-metrics.csv"
    keep_log "$name.test" "$name-$rep-test.log"
    keep_log "$name.md.log" "$name-$rep-md.log"
    label=$name; [[ $name == painn ]] && label="PaiNN, $features features, 3 layers, 8 radial functions"
    [[ $name == se_e2_a ]] && label="se_e2_a (the demo's: embedding 16-32-64, fitting 120x3)"
    [[ $name == mace ]] && label="MACE, 32 channels, max_L 1, correlation 3, 2 interactions"
    [[ $name == mace_mt ]] && label="MACE as above, mace-torch's loss weights (energy 1, forces 100)"
    row "$label" "$rep" "$(steps "$name")" "$(best "$name" 7)" "$(best "$name" 8)" "$test_e" "$test_f" "$md"
  done
done
echo
echo "water, rc 5 A, float32, $minutes min each on 2 MPI ranks (data_0 + data_1; test: data_2, 80 frames), $REPEATS repeats"
python3 "$src/benchmarks/tables.py" "$results"
