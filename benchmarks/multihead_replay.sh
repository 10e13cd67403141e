#!/usr/bin/env bash
# Multi-head fine-tuning with replay data against plain fine-tuning: does the source model's
# head keep what it knew? (mace-torch's multi-head fine-tuning; docs/config.md.)
#
#   benchmarks/multihead_replay.sh [BUILD_DIR]          (default: <repo>/build)
#
# Base model: a small MACE (16 channels, max_L 1, correlation 2, 2 interactions, r 5 A, float32)
# trained on liquid water (data/water-deepmd data_0, 80 frames of 192 atoms) for BASE_EPOCHS.
# New task: gas-phase ethanol (data/ethanol-rmd17: NEW frames to train on, the next 50 to
# validate, 200 more to test), with a species the base never had (C: its weights start fresh). Two runs of EPOCHS each from the
# base (training.init_from; the same optimiser, learning rate and schedule):
#   single-head  the ethanol frames alone: the one head learns ethanol
#   multi-head   heads [new, pt]: the ethanol frames train head `new`, REPLAY frames of the
#                base's own training set (data_0's first ones) train head `pt`, in the same
#                batches (weight 1), every head's energy shift re-fitted on its own frames
# Tested with `mlip-trainer test` on frames none of them trained on: water data_2 (80 frames)
# and the 200 ethanol test frames: the base model on water; the single-head model on both; the
# multi-head model's `pt` head on water and its `new` head on ethanol. Runs by epochs, not
# minutes: the figures do not depend on how busy the machine is. 1 rank, 1 thread each.
# Results: benchmarks/results/multihead_replay/<date>-<commit>/ (lib.sh): rows.tsv, logs/;
# the docs' table: benchmarks/tables.py.
#
# Environment: BASE_EPOCHS (30), EPOCHS (20), NEW (200), REPLAY (16), REPEATS (1: seeds 1, 2, ...).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init multihead_replay "${1:-}" mlip-trainer
trainer=$build/bin/mlip-trainer
BASE_EPOCHS=${BASE_EPOCHS:-30}
EPOCHS=${EPOCHS:-20}
NEW=${NEW:-200}
REPLAY=${REPLAY:-16}
REPEATS=${REPEATS:-1}
water=$src/data/water-deepmd
ethanol=$src/data/ethanol-rmd17/rmd17_ethanol_1000.xyz
cd "$work"

# The ethanol frames (extended XYZ, 11 lines each), the replay frames (water, data_0's first)
lines=$(( $(head -1 "$ethanol") + 2 ))
frames() { sed -n "$(( $1 * lines + 1 )),$(( ($1 + $2) * lines ))p" "$ethanol"; }   # frames FIRST COUNT
frames 0 "$NEW" > eth-train.xyz
frames "$NEW" 50 > eth-val.xyz
frames $(( NEW + 50 )) 200 > eth-test.xyz
for k in $(seq 0 $(( REPLAY - 1 ))); do
  "$trainer" convert "$water/data_0" frame.xyz --frame "$k" > /dev/null
  cat frame.xyz >> replay.xyz
done

# config NAME SEED EPOCHS SPECIES HEADS DATA: the model and recipe every run shares
config() {
  cat > "$1.yaml" <<EOF
model:
  architecture: mace
  species: [$4]
  cutoff: 5.0
  dtype: float32
  seed: $2
  hyperparameters: {num_channels: 16, max_L: 1, max_ell: 3, correlation: 2, num_interactions: 2$5}
data:
$6
  batch: {frames: 4}
  cache_dir: $work/cache
training:
  seed: $2
  epochs: $3
  optimizer: {type: adam, lr: 5.0e-3, amsgrad: true}
  lr_schedule: {type: cosine, final_lr: 1.0e-4}
  loss: {energy: {start: 1.0, limit: 1.0}, forces: {start: 100.0, limit: 100.0}}
  ema_decay: 0.99
output: {dir: $work/$1, log_every: 0}
EOF
}
train() {  # train NAME [--set ...]
  local name=$1
  shift
  OMP_NUM_THREADS=1 "$trainer" train "$name.yaml" --threads 1 "$@" > "$name.log" 2>&1 || { tail -20 "$name.log" >&2; exit 1; }
}
# test MODEL DATA NAME [--head H]: "E F" of `mlip-trainer test` (meV/atom, meV/A)
test_errors() {
  local model=$1 data=$2 name=$3
  shift 3
  "$trainer" test "$model" "$data" "$@" > "$name.test" 2>&1 || { cat "$name.test" >&2; exit 1; }
  keep_log "$name.test"
  echo "$(sed -nE 's/^energy RMSE +([0-9.]+) meV\/atom.*/\1/p' "$name.test") $(sed -nE 's/^force RMSE +([0-9.]+) meV\/A.*/\1/p' "$name.test")"
}
# result REPEAT MODEL TEST E F: a row
result() { row "$2" "$3" "$1" $4; }

row model test repeat energy_rmse_mev_per_atom force_rmse_mev_per_a
for rep in $(seq "$REPEATS"); do
  echo "== repeat $rep of $REPEATS" >&2
  rm -rf base single multi
  config base "$rep" "$BASE_EPOCHS" "H, O" "" "  train: [{path: $water/data_0}]
  validation: [{path: $work/replay.xyz}]"
  train base
  config single "$rep" "$EPOCHS" "H, C, O" "" "  train: [{path: $work/eth-train.xyz, units: {energy: kcal/mol}}]
  validation: [{path: $work/eth-val.xyz, units: {energy: kcal/mol}}]"
  train single --set "training.init_from=$work/base/model.pt"
  config multi "$rep" "$EPOCHS" "H, C, O" ", heads: [new, pt], head: new" "  train:
    - {path: $work/eth-train.xyz, units: {energy: kcal/mol}, head: new}
    - {path: $work/replay.xyz, head: pt}
  validation: [{path: $work/eth-val.xyz, units: {energy: kcal/mol}, head: new}]"
  train multi --set "training.init_from=$work/base/model.pt"
  for name in base single multi; do keep_log "$name.log" "$name-$rep-train.log"; done
  result "$rep" "base (water, $BASE_EPOCHS epochs)" water "$(test_errors base/model.pt "$water/data_2" "base-water-$rep")"
  result "$rep" "single-head fine-tune on ethanol" water "$(test_errors single/model.pt "$water/data_2" "single-water-$rep")"
  result "$rep" "single-head fine-tune on ethanol" ethanol \
    "$(test_errors single/model.pt eth-test.xyz "single-ethanol-$rep" --energy-unit kcal/mol)"
  result "$rep" "multi-head with replay: head pt" water "$(test_errors multi/model.pt "$water/data_2" "multi-water-$rep" --head pt)"
  result "$rep" "multi-head with replay: head new" ethanol \
    "$(test_errors multi/model.pt eth-test.xyz "multi-ethanol-$rep" --head new --energy-unit kcal/mol)"
done
echo "MACE 16 channels, max_L 1, float32; base: water data_0, $BASE_EPOCHS epochs; fine-tuning: $NEW ethanol frames,"
echo "$EPOCHS epochs, replay: $REPLAY water frames (multi-head); tests: water data_2 (80 frames), 200 ethanol frames"
python3 "$src/benchmarks/tables.py" "$results"
