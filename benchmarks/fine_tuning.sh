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
# test frames; also the base model untouched on the same test frames.
#
# Environment: BASE_MINUTES (5), MINUTES (3), NEW (16), TARGET (meV/A), KEEP (1: keep the folder).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init fine_tuning "${1:-}" mlip-trainer

trainer=$build/bin/mlip-trainer
base_minutes=${BASE_MINUTES:-5}
minutes=${MINUTES:-3}
new=${NEW:-16}
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
train base
new_block="  train:
    - path: $work/new-train.xyz
  validation:
    - path: $work/new-val.xyz"
config scratch "$new_block" "$minutes"
train scratch
config finetune "$new_block" "$minutes"
train finetune --set "training.init_from=$work/base/model.pt" \
  --set "training.optimizer.lr=5.0e-4" --set "training.lr_schedule.final_lr=1.0e-4"

# Best validation force RMSE (meV/A) of a run, and the first elapsed_s at which it was <= target.
best_f() { awk -F, 'NR > 1 && ($8 < b || b == "") { b = $8 } END { printf "%.1f", 1e3 * b }' "$1/metrics.csv"; }
best_e() { awk -F, 'NR > 1 && ($7 < b || b == "") { b = $7 } END { printf "%.2f", 1e3 * b }' "$1/metrics.csv"; }
reach() {
  awk -F, -v t="$2" 'NR > 1 && 1e3 * $8 <= t + 1e-9 { printf "%.0f", $3; found = 1; exit }
                     END { if (!found) printf "not reached" }' "$1/metrics.csv"
}
target=${TARGET:-$(best_f scratch)}
test_line() {
  "$trainer" test "$1" new-test.xyz > "$2.test" 2>&1 || { cat "$2.test" >&2; exit 1; }
  local e f
  e=$(sed -nE 's/^energy RMSE +([0-9.]+) meV\/atom.*/\1/p' "$2.test")
  f=$(sed -nE 's/^force RMSE +([0-9.]+) meV\/A.*/\1/p' "$2.test")
  echo "$e | $f"
}

n_test=$(( 80 - new - 8 ))
echo
echo "water se_e2_a (examples/configs/water-demo.yaml), 2 MPI ranks; new data: $new frames of data_2,"
echo "8 for validation, $n_test for the test; base model: data_0 + data_1, $base_minutes min"
echo "target: validation force RMSE <= $target meV/A"
echo
echo "| run | training wall (s) | time to target (s) | best validation E (meV/atom) / F (meV/A) | test E RMSE (meV/atom) | test F RMSE (meV/A) |"
echo "|---|---|---|---|---|---|"
echo "| base model, not trained on the new frames | $(cat base.wall) | - | $(best_e base) / $(best_f base) | $(test_line "$work/base/model.pt" base) |"
echo "| scratch on $new frames, $minutes min | $(cat scratch.wall) | $(reach scratch "$target") | $(best_e scratch) / $(best_f scratch) | $(test_line "$work/scratch/model.pt" scratch) |"
echo "| fine-tuned from the base on $new frames, $minutes min | $(cat finetune.wall) | $(reach finetune "$target") | $(best_e finetune) / $(best_f finetune) | $(test_line "$work/finetune/model.pt" finetune) |"
