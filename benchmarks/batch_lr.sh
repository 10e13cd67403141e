#!/usr/bin/env bash
# Accuracy per frame seen against the training batch, and the learning-rate rule that keeps it
# (issue 54: a GPU trains fast only with large batches; its target asks that the errors after a
# fixed number of frames be no worse than at the small batch, and which batch and rule give that).
# The accuracy reached after N frames does not depend on the device, so this runs on the CPU.
#
#   benchmarks/batch_lr.sh [BUILD_DIR]          (default: <repo>/build)
#
# The water se_e2_a example (examples/configs/water-se_e2_a.yaml: its model, loss, optimizer,
# schedule and EMA) on data/water-deepmd/data_0 and data_1 (240 frames, 10% held out for the
# validation that picks the best epoch), for EPOCHS epochs (20: 20 x 216 frames seen) with no time
# limit, tested on data_2 (80 frames: `mlip-trainer test`, energy RMSE per atom, force RMSE).
# Batches BATCHES ("2 16 64" frames; 2 is the example's; an entry B@E trains batch B for E epochs
# instead of EPOCHS: the same wall time on a GPU that runs batch B faster) and rules RULES
# ("none sqrt linear"):
# lr = lr0 * (B / 2)^p with p = 0, 1/2, 1 (batch 1 and 2: p = 0 alone), the final rate alike, and the EMA decay per step
# 0.99^(B / 2) (the same window in frames seen); B = 2 is the same under every rule and runs once.
# Each run one process with 2 threads (the same for every batch; frames/s here are CPU figures).
# REPEATS (1): each repeat with training.seed = repeat (the model's initial weights stay the same);
# REPEAT_FROM (1): the first repeat run (REPEAT_FROM=2 REPEATS=2: the second alone, to add to a run
# that stopped after its first).
# Results: benchmarks/results/batch_lr/<date>-<commit>/ (lib.sh): rows.tsv, logs/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init batch_lr "${1:-}" mlip-trainer
EPOCHS=${EPOCHS:-20}
BATCHES=${BATCHES:-2 16 64}
RULES=${RULES:-none sqrt linear}
REPEATS=${REPEATS:-1}
REPEAT_FROM=${REPEAT_FROM:-1}
data=$src/data/water-deepmd
cd "$work"

# the rule's factor for batch B: (B / 2)^p
factor() {
  python3 -c "import sys; b, r = int(sys.argv[1]), sys.argv[2]; print((b / 2) ** {'none': 0, 'sqrt': 0.5, 'linear': 1}[r])" "$1" "$2"
}

row rule batch epochs repeat lr ema_decay steps wall_s frames_per_s energy_rmse_mev_atom force_rmse_mev_a
for rep in $(seq "$REPEAT_FROM" "$REPEATS"); do
  for entry in $BATCHES; do
    b=${entry%@*} epochs=$EPOCHS
    [[ $entry == *@* ]] && epochs=${entry#*@}
    for rule in $RULES; do
      # every rule is the identity at the example's batch; below it (batch 1) the example's rate too
      ((b <= 2)) && [[ $rule != none ]] && continue
      f=$(factor "$b" "$rule")
      lr=$(python3 -c "print(2.0e-3 * $f)")
      final=$(python3 -c "print(2.0e-5 * $f)")
      ema=$(python3 -c "print(round(0.99 ** ($b / 2), 6))")
      name=b$b-e$epochs-$rule-$rep
      echo "== batch $b, $epochs epochs, rule $rule, repeat $rep: lr $lr, ema_decay $ema" >&2
      t0=$(date +%s.%N)
      OMP_NUM_THREADS=2 "$build/bin/mlip-trainer" train "$src/examples/configs/water-se_e2_a.yaml" --threads 2 \
        --set "data.train=[{path: $data/data_0}, {path: $data/data_1}]" --set data.cache_dir="$work/cache" \
        --set data.batch.frames="$b" --set training.max_minutes=0 --set training.epochs="$epochs" \
        --set training.seed="$rep" --set training.optimizer.lr="$lr" --set training.lr_schedule.final_lr="$final" \
        --set training.ema_decay="$ema" --set output.dir="$work/$name" --set output.log_every=0 \
        > "$name-train.log" 2>&1 || { tail -20 "$name-train.log" >&2; exit 1; }
      wall=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
      keep_log "$name-train.log"
      "$build/bin/mlip-trainer" test "$work/$name/model.pt" "$data/data_2" > "$name-test.log" 2>&1 ||
        { cat "$name-test.log" >&2; exit 1; }
      keep_log "$name-test.log"
      e=$(sed -nE 's/^energy RMSE +([0-9.]+) meV\/atom.*/\1/p' "$name-test.log")
      fr=$(sed -nE 's/^force RMSE +([0-9.]+) meV\/A.*/\1/p' "$name-test.log")
      per_epoch=$(sed -nE 's/.* ([0-9]+) steps per epoch.*/\1/p' "$name-train.log" | head -1)
      train=$(sed -nE 's/^data: ([0-9]+) training and.*/\1/p' "$name-train.log" | head -1)
      steps=$((per_epoch * epochs))
      frames=$(python3 -c "print(round($train * $epochs / $wall, 1))")
      row "$rule" "$b" "$epochs" "$rep" "$lr" "$ema" "${steps:--}" "$wall" "$frames" "$e" "$fr"
      echo "   energy $e meV/atom, forces $fr meV/A, $wall s" >&2
    done
  done
done
echo "batch_lr.sh: rows in $results/rows.tsv" >&2
