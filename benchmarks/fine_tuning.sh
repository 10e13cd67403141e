#!/usr/bin/env bash
# Fine-tuning against training from scratch on a small water data set: the same wall time on the
# same 2 cores, tested on frames neither run trained on.
#
#   benchmarks/fine_tuning.sh [BUILD_DIR]          (default: <repo>/build)
#
# Base model: examples/configs/water-demo.yaml (se_e2_a, float32, 2 MPI ranks) trained on
# data/water-deepmd/data_0 and data_1 (240 frames) for BASE_MINUTES.
# New data: NEW frames of data_2 (the first ones) to train on, the next 8 to validate (the
# trainer's learning curve and best epoch), the remaining ones to test.
# Two runs of MINUTES each on the new data, one after the other:
#   scratch    the demo's recipe (learning rate 2e-3 -> 3e-4) from a fresh initialisation;
#   fine-tune  training.init_from the base model (its energy shift re-fitted on the new frames),
#              learning rate 5e-4 -> 1e-4 (the weights are already good: a large rate undoes them).
# Reported: for each run, the wall time (from its metrics.csv: seconds since its training
# started) at which the validation force RMSE first reached TARGET (default: the best the
# scratch run reached in MINUTES), its best validation errors, and `mlip-trainer test` on the
# test frames; also the base model untouched on the same test frames. The three runs are
# repeated REPEATS times (a new base model each time; the target is each repeat's own).
# Results: benchmarks/results/fine_tuning/<date>-<commit>/ (lib.sh): rows.tsv, logs/ (training,
# metrics.csv and test logs of every run); the docs' table: benchmarks/tables.py.
#
# Environment: BASE_MINUTES (5), MINUTES (3), NEW (16), TARGET (meV/A), REPEATS (3), KEEP, RESULTS.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init fine_tuning "${1:-}" mlip-trainer

trainer=$build/bin/mlip-trainer
base_minutes=${BASE_MINUTES:-5}
minutes=${MINUTES:-3}
new=${NEW:-16}
REPEATS=${REPEATS:-3}
data=$src/data/water-deepmd
cd "$work"

# The new data as extended XYZ: train, validation and test frames of data_2 (80 frames).
for k in $(seq 0 79); do
  "$trainer" convert "$data/data_2" "frame.xyz" --frame "$k" > /dev/null
  if (( k < new )); then cat frame.xyz >> new-train.xyz
  elif (( k < new + 8 )); then cat frame.xyz >> new-val.xyz
  else cat frame.xyz >> new-test.xyz; fi
done
rm frame.xyz

# config NAME DATA MINUTES [--set ...]: the demo's config with this data, time and output folder.
config() {
  local name=$1 data_block=$2 mins=$3
  awk -v block="$data_block" '
    /^data:/ { print "data:"; print block; skip = 1; next }
    skip && /^  (validation_fraction|split_seed):/ { next }
    skip && /^  train:/ { intrain = 1; next }
    intrain && /^    - / { next }
    { intrain = 0; print }' "$src/examples/configs/water-demo.yaml" |
    sed -e "s|max_minutes: .*|max_minutes: $mins|" -e "s|epochs: .*|epochs: 100000|" \
        -e "s|dir: runs/demo/train|dir: $work/$name|" -e "s|cache_dir: .*|cache_dir: $work/cache|" \
        -e "s|log_every: .*|log_every: 0|" > "$name.yaml"
}
train() {  # train NAME [--set ...]
  local name=$1; shift
  local t0; t0=$(date +%s)
  mpirun --oversubscribe -np 2 "$trainer" train "$name.yaml" --threads 1 "$@" > "$name.log" 2>&1 ||
    { tail -20 "$name.log" >&2; exit 1; }
  echo $(( $(date +%s) - t0 )) > "$name.wall"
}

config base "  train:
    - path: $data/data_0
    - path: $data/data_1
  validation:
    - path: $work/new-val.xyz" "$base_minutes"
new_block="  train:
    - path: $work/new-train.xyz
  validation:
    - path: $work/new-val.xyz"
config scratch "$new_block" "$minutes"
config finetune "$new_block" "$minutes"
# Best validation force RMSE (meV/A, to 0.01) of a run, and the first elapsed_s at which it was <= target
# (within the rounding of best_f: a run reaches its own best).
best_f() { awk -F, 'NR > 1 && ($8 < b || b == "") { b = $8 } END { printf "%.2f", 1e3 * b }' "$1/metrics.csv"; }
best_e() { awk -F, 'NR > 1 && ($7 < b || b == "") { b = $7 } END { printf "%.3f", 1e3 * b }' "$1/metrics.csv"; }
reach() {
  awk -F, -v t="$2" 'NR > 1 && 1e3 * $8 <= t + 0.005 { printf "%.0f", $3; found = 1; exit }
                     END { if (!found) printf "not reached" }' "$1/metrics.csv"
}
# test_errors MODEL NAME: "E F" of `mlip-trainer test` on the test frames (meV/atom, meV/A)
test_errors() {
  "$trainer" test "$1" new-test.xyz > "$2.test" 2>&1 || { cat "$2.test" >&2; exit 1; }
  echo "$(sed -nE 's/^energy RMSE +([0-9.]+) meV\/atom.*/\1/p' "$2.test") $(sed -nE 's/^force RMSE +([0-9.]+) meV\/A.*/\1/p' "$2.test")"
}
# result NAME LABEL REPEAT TARGET: the run's row, its logs kept
result() {
  local errors test_e test_f
  errors=$(test_errors "$work/$1/model.pt" "$1")
  read -r test_e test_f <<< "$errors"
  local time_to=-; [[ $1 == base ]] || time_to=$(reach "$1" "$4")
  row "$2" "$3" "$4" "$(cat "$1.wall")" "$time_to" "$(best_e "$1")" "$(best_f "$1")" "$test_e" "$test_f"
  keep_log "$1.log" "$1-$3-train.log"
  keep_log "$1/metrics.csv" "$1-$3-metrics.csv"
  keep_log "$1.test" "$1-$3-test.log"
}

n_test=$(( 80 - new - 8 ))
row run repeat target_f_mev_a wall_s time_to_target_s val_e_mev_atom val_f_mev_a test_e_mev_atom test_f_mev_a
for rep in $(seq "$REPEATS"); do
  echo "== repeat $rep of $REPEATS" >&2
  rm -rf base scratch finetune
  train base
  train scratch
  train finetune --set "training.init_from=$work/base/model.pt" \
    --set "training.optimizer.lr=5.0e-4" --set "training.lr_schedule.final_lr=1.0e-4"
  target=${TARGET:-$(best_f scratch)}
  result base "base model ($base_minutes min on data_0 + data_1), not trained on the new frames" "$rep" "$target"
  result scratch "from scratch on the $new new frames, $minutes min" "$rep" "$target"
  result finetune "fine-tuned from the base on the $new new frames, $minutes min" "$rep" "$target"
done
echo
echo "water se_e2_a (examples/configs/water-demo.yaml), 2 MPI ranks; new data: $new frames of data_2,"
echo "8 for validation, $n_test for the test; base model: data_0 + data_1, $base_minutes min; $REPEATS repeats"
python3 "$src/benchmarks/tables.py" "$results"
