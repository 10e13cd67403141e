#!/usr/bin/env bash
# Water time-to-accuracy: mlip's recipe against DeePMD-kit's example, the same wall time on the
# same 2 cores, tested on frames neither code trained on.
#
#   benchmarks/time_to_accuracy.sh [BUILD_DIR]          (default: <repo>/build)
#
# Data: both train on data/water-deepmd/data_0 and data_1 (240 frames); data_2 (80 frames) is the
# test set, never seen in training (mlip's recipe holds 10% of its training frames out to choose
# the best epoch; DeePMD validates on data_2 for its learning curve only, which does not steer it).
# mlip: examples/configs/water-se_e2_a.yaml (2 MPI ranks x 1 thread, its own ZBL prior, float32)
# with training.max_minutes = MINUTES. DeePMD-kit 3.2.0 (TensorFlow backend, in the scratch venv
# of benchmarks/bench_deepmd.sh): its examples/water/se_e2_a/input.json unchanged but for the
# length, 2 threads in one process: numb_steps = the steps its measured rate fits into MINUTES,
# and decay_steps = numb_steps / 200 so that the learning rate falls from 1e-3 to 3.51e-8 over
# the run as it does over the example's 1,000,000 steps. Then `mlip-trainer test` and
# `dp test` on data_2: energy RMSE per atom and force RMSE. One code after the other.
#
# Environment: MINUTES (10), SCRATCH (/tmp/mlip-bench-deepmd), KEEP (1: keep the work folder).
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
minutes=${MINUTES:-10}
scratch=${SCRATCH:-/tmp/mlip-bench-deepmd}
venv=$scratch/venv
[[ -x $venv/bin/dp ]] || { echo "time_to_accuracy.sh: no DeePMD-kit in $venv: run benchmarks/bench_deepmd.sh once" >&2; exit 1; }
site=$(ls -d "$venv"/lib/python3*/site-packages)
dp=(env "LD_LIBRARY_PATH=$site/nvidia/cuda_runtime/lib:${LD_LIBRARY_PATH:-}" CUDA_VISIBLE_DEVICES=
    OMP_NUM_THREADS=2 DP_INTRA_OP_PARALLELISM_THREADS=2 DP_INTER_OP_PARALLELISM_THREADS=1
    TF_INTRA_OP_PARALLELISM_THREADS=2 TF_INTER_OP_PARALLELISM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=2 "$venv/bin/dp")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
data=$src/data/water-deepmd
work=$(mktemp -d "$scratch/tta.XXXXXX")
[[ ${KEEP:-0} == 1 ]] || trap 'rm -rf "$work"' EXIT
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

# 1. DeePMD-kit's step rate on these 2 cores (300 steps; the last 200 timed).
mkdir pilot && (cd pilot && dp_input 300 > input.json && "${dp[@]}" --tf train input.json > log 2>&1) ||
  { tail -20 pilot/log >&2; exit 1; }
rate=$(sed -nE 's/.*average training time: ([0-9.]+) s\/batch.*/\1/p' pilot/log | awk '{ printf "%.3f", 1 / $1 }')
dp_steps=$(awk -v r="$rate" -v m="$minutes" 'BEGIN { printf "%d", 0.97 * r * 60 * m }')
echo "DeePMD-kit: $rate steps/s on 2 threads -> $dp_steps steps in $minutes minutes" >&2

# 2. mlip-trainer, the recipe, MINUTES of training.
sed -e "s|    - path: data/water-deepmd|    - path: $data/data_0\n    - path: $data/data_1|" \
    -e "s|max_minutes: .*|max_minutes: $minutes|" \
    -e "s|dir: runs/water-se_e2_a|dir: $work/mlip|" -e "s|cache_dir: .*|cache_dir: $work/cache|" \
    "$src/examples/configs/water-se_e2_a.yaml" > mlip.yaml
t0=$(date +%s)
mpirun --oversubscribe -np 2 "$build/bin/mlip-trainer" train mlip.yaml --threads 1 > mlip-train.log 2>&1 ||
  { tail -20 mlip-train.log >&2; exit 1; }
mlip_wall=$(( $(date +%s) - t0 ))
"$build/bin/mlip-trainer" test mlip/model.pt "$data/data_2" > mlip-test.log 2>&1 || { cat mlip-test.log >&2; exit 1; }

# 3. DeePMD-kit, the example scaled to the same time.
mkdir dp && cd dp
dp_input "$dp_steps" > input.json
t0=$(date +%s)
"${dp[@]}" --tf train input.json > train.log 2>&1 || { tail -20 train.log >&2; exit 1; }
dp_wall=$(( $(date +%s) - t0 ))
"${dp[@]}" --tf freeze -o frozen.pb > freeze.log 2>&1 || { tail -20 freeze.log >&2; exit 1; }
"${dp[@]}" --tf test -m frozen.pb -s "$data/data_2" -n 80 > test.log 2>&1 || { tail -20 test.log >&2; exit 1; }
cd ..

mlip_e=$(sed -nE 's/^energy RMSE +([0-9.]+) meV\/atom.*/\1/p' mlip-test.log)
mlip_f=$(sed -nE 's/^force RMSE +([0-9.]+) meV\/A.*/\1/p' mlip-test.log)
dp_e=$(sed -nE 's/.*Energy RMSE\/Natoms *: *([0-9.e+-]+) eV.*/\1/p' dp/test.log | tail -1 | awk '{ printf "%.2f", 1e3 * $1 }')
dp_f=$(sed -nE 's/.*Force  RMSE *: *([0-9.e+-]+) eV.*/\1/p' dp/test.log | tail -1 | awk '{ printf "%.1f", 1e3 * $1 }')
echo
echo "water, $minutes minutes of training on 2 cores each, tested on data/water-deepmd/data_2 (80 frames never trained on)"
echo
echo "| code | training wall (s) | steps | energy RMSE (meV/atom) | force RMSE (meV/A) |"
echo "|---|---|---|---|---|"
echo "| mlip-trainer, examples/configs/water-se_e2_a.yaml, 2 ranks | $mlip_wall | $(grep -oE 'step [0-9]+' mlip-train.log | tail -1 | cut -d' ' -f2) | $mlip_e | $mlip_f |"
echo "| DeePMD-kit TF, example input scaled, 2 threads | $dp_wall | $dp_steps | $dp_e | $dp_f |"
