#!/usr/bin/env bash
# Water time-to-accuracy, mlip-trainer against DeePMD-kit, the same wall time on the same 2 cores,
# tested on frames neither code trained on, two ways, each repeated:
#
#   (a) the same model: DeePMD-kit's water example (examples/water/se_e2_a/input.json: rc 6 A,
#       smoothing from 0.5 A, embedding 25-50-100, one net per pair of species, axis 16, fitting
#       240x3, float64, Adam from 1e-3 decayed exponentially to 3.51e-8 over the run, energy
#       prefactor 0.02 -> 1, force prefactor 1000 -> 1, no virial), batch 1 frame, one process
#       with 2 threads on both sides, final weights on both sides. mlip's descriptor sum is
#       divided by 138, DeePMD's sel (46 + 92), as DeePMD does, and its environment is shifted
#       as DeePMD's (`sel: [46, 92]`). DeePMD's energy term is p_E dE^2 / N (its default,
#       intensive_ener_virial false), mlip's p_E (dE / N)^2: mlip's energy prefactors are
#       multiplied by N (192 atoms in every frame) to give the same loss. A second mlip row,
#       "same model, no shift", leaves out `sel` (mlip's default environment, only scaled).
#   (b) each code's own recipe: mlip's examples/configs/water-se_e2_a.yaml (rc 5 A, 16-32-64 / 8
#       / 120x3, float32, ZBL prior, EMA, force prefactor 1000 -> 500, Adam 2e-3 -> 2e-5, the best
#       epoch on its 10% held-out frames, 2 MPI ranks x 1 thread, batch 2); DeePMD-kit's recipe
#       is its example, the run of (a).
#
# Differences that remain in (a): DeePMD's learning rate falls in steps (every numb_steps / 200
# steps), mlip's smoothly, and mlip's follows the clock (training.max_minutes) while DeePMD's
# follows the step count its measured rate fits into MINUTES; DeePMD's fitting net has a trainable
# timestep on its residual connections (resnet_dt), mlip's has none; DeePMD takes its environment
# statistics from 10 frames, mlip from its first 200; mlip holds 3 of the 240 frames out for its
# validation line (which steers nothing), DeePMD validates on 3 batches of data_2 at each display
# (which steers nothing).
#
#   benchmarks/time_to_accuracy.sh [BUILD_DIR]          (default: <repo>/build)
#
# Data: both train on data/water-deepmd/data_0 and data_1 (240 frames); data_2 (80 frames) is the
# test set (`mlip-trainer test`, `dp test`): energy RMSE per atom and force RMSE.
# DeePMD-kit 3.2.0 (TensorFlow backend) from the scratch venv of benchmarks/bench_deepmd.sh.
# Results: benchmarks/results/time_to_accuracy/<date>-<commit>/ (lib.sh): rows.tsv, logs/.
# Environment: MINUTES (5), REPEATS (2), SCRATCH (/tmp/mlip-bench-deepmd), KEEP, RESULTS.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init time_to_accuracy "${1:-}" mlip-trainer
minutes=${MINUTES:-5}
REPEATS=${REPEATS:-2}
scratch=${SCRATCH:-/tmp/mlip-bench-deepmd}
venv=$scratch/venv
[[ -x $venv/bin/dp ]] || { echo "time_to_accuracy.sh: no DeePMD-kit in $venv: run benchmarks/bench_deepmd.sh once" >&2; exit 1; }
site=$(ls -d "$venv"/lib/python3*/site-packages)
dp=(env "LD_LIBRARY_PATH=$site/nvidia/cuda_runtime/lib:${LD_LIBRARY_PATH:-}" CUDA_VISIBLE_DEVICES=
    OMP_NUM_THREADS=2 DP_INTRA_OP_PARALLELISM_THREADS=2 DP_INTER_OP_PARALLELISM_THREADS=1
    TF_INTRA_OP_PARALLELISM_THREADS=2 TF_INTER_OP_PARALLELISM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=2 "$venv/bin/dp")
data=$src/data/water-deepmd
cd "$work"

# DeePMD's example input, for N steps (decay over the run as in the example).
dp_input() {
  local steps=$1 decay=$(( $1 / 200 > 1 ? $1 / 200 : 1 ))
  cat <<EOF
{
  "model": {
    "type_map": ["O", "H"],
    "descriptor": {"type": "se_e2_a", "sel": [46, 92], "rcut_smth": 0.50, "rcut": 6.00,
                   "neuron": [25, 50, 100], "resnet_dt": false, "axis_neuron": 16, "seed": 1},
    "fitting_net": {"neuron": [240, 240, 240], "resnet_dt": true, "seed": 1}
  },
  "learning_rate": {"type": "exp", "decay_steps": $decay, "start_lr": 0.001, "stop_lr": 3.51e-8},
  "loss": {"type": "ener", "start_pref_e": 0.02, "limit_pref_e": 1, "start_pref_f": 1000, "limit_pref_f": 1,
           "start_pref_v": 0, "limit_pref_v": 0},
  "training": {
    "training_data": {"systems": ["$data/data_0", "$data/data_1"], "batch_size": "auto"},
    "validation_data": {"systems": ["$data/data_2"], "batch_size": 1, "numb_btch": 3},
    "numb_steps": $steps, "seed": 10, "disp_file": "lcurve.out", "disp_freq": 100, "save_freq": 1000
  }
}
EOF
}

# mlip's run of (a): DeePMD's example as an mlip config (OUT_DIR [HYPERPARAMETERS]).
atoms=$(wc -w < "$data/data_0/type.raw")
e_start=$(awk -v n="$atoms" 'BEGIN { print 0.02 * n }')
mlip_same_model() {
  cat <<EOF
model:
  architecture: se_e2_a
  species: [O, H]
  cutoff: 6.0
  dtype: float64
  seed: 1
  hyperparameters: {rcut_smth: 0.5, embedding: [25, 50, 100], axis_neurons: 16, fitting: [240, 240, 240],
                    type_one_side: false, neighbor_norm: 138${2:-}}
data:
  train:
    - path: $data/data_0
    - path: $data/data_1
  validation_fraction: 0.0125
  cache_dir: $work/cache-same
  batch: {frames: 1}
training:
  epochs: 100000
  max_minutes: $minutes
  optimizer: {type: adam, lr: 1.0e-3}
  lr_schedule: {type: exponential, final_lr: 3.51e-8}
  loss: {energy: {start: $e_start, limit: $atoms}, forces: {start: 1000.0, limit: 1.0}}
output: {dir: $1, keep_checkpoints: 1, log_every: 0}
EOF
}

# test MODEL_OR_FROZEN LABEL: "energy force" RMSEs on data_2, meV/atom and meV/A
mlip_test() {
  "$build/bin/mlip-trainer" test "$1" "$data/data_2" > "$2-test.log" 2>&1 || { cat "$2-test.log" >&2; exit 1; }
  keep_log "$2-test.log"
  echo "$(sed -nE 's/^energy RMSE +([0-9.]+) meV\/atom.*/\1/p' "$2-test.log") $(sed -nE 's/^force RMSE +([0-9.]+) meV\/A.*/\1/p' "$2-test.log")"
}

# 1. DeePMD-kit's step rate on these 2 cores (300 steps; its own average leaves out the first 10).
mkdir pilot && (cd pilot && dp_input 300 > input.json && "${dp[@]}" --tf train input.json > log 2>&1) ||
  { tail -20 pilot/log >&2; exit 1; }
keep_log pilot/log dp-pilot.log
rate=$(sed -nE 's/.*average training time: ([0-9.]+) s\/batch.*/\1/p' pilot/log | awk '{ printf "%.3f", 1 / $1 }')
dp_steps=$(awk -v r="$rate" -v m="$minutes" 'BEGIN { printf "%d", 0.97 * r * 60 * m }')
echo "DeePMD-kit: $rate steps/s on 2 threads -> $dp_steps steps in $minutes minutes" >&2

row way code repeat wall_s steps energy_rmse_mev_atom force_rmse_mev_a
for rep in $(seq "$REPEATS"); do
  echo "== repeat $rep of $REPEATS" >&2
  # (a) mlip on DeePMD's example, final weights: with DeePMD's shifted environment, and without.
  for variant in same noshift; do
    hyper=", sel: [46, 92]" way="same model"
    [[ $variant == noshift ]] && hyper="" way="same model, no shift"
    mlip_same_model "$work/$variant-$rep" "$hyper" > "$variant.yaml"
    t0=$(date +%s)
    OMP_NUM_THREADS=2 "$build/bin/mlip-trainer" train "$variant.yaml" --threads 2 > "$variant-$rep-train.log" 2>&1 ||
      { tail -20 "$variant-$rep-train.log" >&2; exit 1; }
    wall=$(( $(date +%s) - t0 ))
    keep_log "$variant-$rep-train.log"
    last=$(ls -d "$work/$variant-$rep"/checkpoints/epoch-* | tail -1)
    "$build/bin/mlip-trainer" export "$last" -o "$variant-$rep-final.pt" > /dev/null
    read -r e f <<< "$(mlip_test "$variant-$rep-final.pt" "$variant-$rep")"
    steps=$(grep -oE 'step [0-9]+' "$variant-$rep-train.log" | tail -1 | cut -d' ' -f2)
    row "$way" "mlip-trainer, 1 process x 2 threads" "$rep" "$wall" "${steps:--}" "$e" "$f"
    echo "   (a) mlip $variant: $wall s, $e meV/atom, $f meV/A" >&2
  done

  # (b) mlip's recipe.
  sed -e "s|    - path: data/water-deepmd|    - path: $data/data_0\n    - path: $data/data_1|" \
      -e "s|max_minutes: .*|max_minutes: $minutes|" \
      -e "s|dir: runs/water-se_e2_a|dir: $work/recipe-$rep|" -e "s|cache_dir: .*|cache_dir: $work/cache-recipe|" \
      "$src/examples/configs/water-se_e2_a.yaml" > recipe.yaml
  t0=$(date +%s)
  OMP_NUM_THREADS=1 mpirun --oversubscribe -np 2 "$build/bin/mlip-trainer" train recipe.yaml --threads 1 \
    > "recipe-$rep-train.log" 2>&1 || { tail -20 "recipe-$rep-train.log" >&2; exit 1; }
  wall=$(( $(date +%s) - t0 ))
  keep_log "recipe-$rep-train.log"
  read -r e f <<< "$(mlip_test "$work/recipe-$rep/model.pt" "recipe-$rep")"
  steps=$(grep -oE 'step [0-9]+' "recipe-$rep-train.log" | tail -1 | cut -d' ' -f2)
  row "own recipe" "mlip-trainer, its recipe, 2 ranks x 1 thread" "$rep" "$wall" "${steps:--}" "$e" "$f"
  echo "   (b) mlip recipe: $wall s, $e meV/atom, $f meV/A" >&2

  # DeePMD-kit's example scaled to the same time: (a) and (b) for DeePMD.
  rm -rf dp && mkdir dp && cd dp
  dp_input "$dp_steps" > input.json
  t0=$(date +%s)
  "${dp[@]}" --tf train input.json > train.log 2>&1 || { tail -20 train.log >&2; exit 1; }
  wall=$(( $(date +%s) - t0 ))
  "${dp[@]}" --tf freeze -o frozen.pb > freeze.log 2>&1 || { tail -20 freeze.log >&2; exit 1; }
  "${dp[@]}" --tf test -m frozen.pb -s "$data/data_2" -n 80 > test.log 2>&1 || { tail -20 test.log >&2; exit 1; }
  keep_log train.log "dp-$rep-train.log"
  keep_log test.log "dp-$rep-test.log"
  e=$(sed -nE 's/.*Energy RMSE\/Natoms *: *([0-9.e+-]+) eV.*/\1/p' test.log | tail -1 | awk '{ printf "%.3f", 1e3 * $1 }')
  f=$(sed -nE 's/.*Force  RMSE *: *([0-9.e+-]+) eV.*/\1/p' test.log | tail -1 | awk '{ printf "%.2f", 1e3 * $1 }')
  cd ..
  for way in "same model" "own recipe"; do
    row "$way" "DeePMD-kit TF, its example, 1 process x 2 threads" "$rep" "$wall" "$dp_steps" "$e" "$f"
  done
  echo "   DeePMD-kit: $wall s, $e meV/atom, $f meV/A" >&2
done
python3 "$src/benchmarks/tables.py" "$results" || true
