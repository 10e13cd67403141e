#!/usr/bin/env bash
# MACE in mlip against mace-torch, side by side in one run, on the same model and data.
#
#   benchmarks/bench_mace.sh [BUILD_DIR]          (default: <repo>/build)
#
# The model: mace-torch's `--model MACE` with CHANNELS (32) channels, max_L 1, max_ell 3,
# correlation 3, 2 interactions, r_max 5 A, 8 Bessel functions, radial MLP [64, 64, 64], float64,
# on water (data/water-deepmd, 192-atom frames; energies and forces).
#
# 1. Training throughput, frames/s, 1 thread: mace_run_train and mlip-trainer (architecture mace,
#    the same hyperparameters, batch 4 frames, Adam), each for EPOCHS (2) epochs over the first
#    TRAIN_FRAMES (40) frames of data_0 (10% held out by each for validation, as each does it).
#    mace-torch: the time between its epoch lines less its validation pass (timed before the
#    first epoch); mlip: its throughput line (validation excluded). mlip also on 2 MPI ranks;
#    mace-torch's multi-process training needs torchrun and is not run here.
# 2. MD speed and memory on the model mace-torch trained in (1), imported into mlip by
#    python/mace_to_mlip.py (the import checks that both give the same energy on a random
#    structure): liquid water of 1152 and 10368 atoms (frame 0 of data_0, replicated).
#    mlip: LAMMPS, pair_style mlip (per-layer ghost exchange), NVE, 1 and 2 MPI ranks x 1 thread,
#    us/atom-step of the MD loop, peak RSS of the largest rank. mace-torch: its fastest CPU route
#    that can be had here is its ASE calculator (its LAMMPS route, ML-IAP, needs a LAMMPS built
#    with Python and ML-IAP, which this build has not): one energy-and-forces call per step on
#    the same structure, wall us/atom per call (the first call, which compiles, left out), with
#    1 and 2 torch threads (no MPI), peak RSS of the process. The two sides differ in how the
#    step is made (LAMMPS's neighbour lists and integration against ASE's neighbour list and no
#    integration), as stated beside the table.
# REPEATS (3) of each MD measurement (1 for mace-torch at 10368 atoms: one call takes minutes).
#
# mace-torch comes from MACE_PYTHON (default: the torch venv's python, where
# scripts/install-deps.sh installs mace-torch 0.3.16 as the import test's oracle); it is never a
# dependency of mlip. Results: benchmarks/results/bench_mace/<date>-<commit>/ (train.tsv, md.tsv).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init bench_mace "${1:-}" lmp mlip-trainer mlip_test_inputs
py=${MACE_PYTHON:-$src/third_party/torch-2.11.0/bin/python3}
"$py" -c 'import mace' 2>/dev/null || { echo "bench_mace: no mace-torch in $py (MACE_PYTHON)" >&2; exit 1; }
mace_bin=$(dirname "$py")
CHANNELS=${CHANNELS:-32}
EPOCHS=${EPOCHS:-2}
TRAIN_FRAMES=${TRAIN_FRAMES:-40}
REPEATS=${REPEATS:-3}
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 PYTHONWARNINGS=ignore
cd "$work"

# ---- data: the same frames for both (mace-torch reads extended XYZ)
"$py" "$src/benchmarks/deepmd_to_extxyz.py" all.xyz "$src/data/water-deepmd/data_0" > /dev/null
"$py" - "$TRAIN_FRAMES" <<'EOF'
import sys
from ase.io import read, write
write("train.xyz", read("all.xyz", index=f":{sys.argv[1]}"), format="extxyz")
EOF
sed -e 's/REF_energy/energy/' -e 's/REF_forces/forces/g' train.xyz > train-mlip.xyz

# ---- 1. training throughput
echo "== mace-torch: $EPOCHS epochs on $TRAIN_FRAMES frames, 1 thread" >&2
OMP_NUM_THREADS=1 "$mace_bin/mace_run_train" --name mace --train_file train.xyz --valid_fraction 0.1 \
  --energy_key REF_energy --forces_key REF_forces --E0s average --model MACE --num_channels "$CHANNELS" \
  --max_L 1 --max_ell 3 --correlation 3 --num_interactions 2 --r_max 5.0 --num_radial_basis 8 \
  --batch_size 4 --valid_batch_size 4 --max_num_epochs "$EPOCHS" --device cpu --default_dtype float64 --seed 1 \
  --eval_interval 1 --num_workers 0 --lr 0.01 --energy_weight 1 --forces_weight 100 > mace-train.log 2>&1 ||
  { tail -20 mace-train.log >&2; exit 1; }
keep_log mace-train.log
mace_model=$(ls "$work"/mace.model 2>/dev/null || ls "$work"/*.model | head -1)
table=train
row code ranks threads frames_per_s frames steps seconds
"$py" - "$TRAIN_FRAMES" "$EPOCHS" > mace-rate.txt <<'EOF'
import re, sys
from datetime import datetime
frames, epochs = int(sys.argv[1]), int(sys.argv[2])
train = frames - round(0.1 * frames)
stamps = {}
for line in open("mace-train.log"):
    m = re.match(r"(\S+ \S+) INFO: (.*)", line)
    if not m:
        continue
    t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f")
    text = m.group(2)
    if text.startswith("Started training"):
        stamps["start"] = t
    elif text.startswith("Initial:"):
        stamps["initial"] = t
    elif re.match(r"Epoch (\d+):", text):
        stamps[int(re.match(r"Epoch (\d+):", text).group(1))] = t
last = max(k for k in stamps if isinstance(k, int))
evaluation = (stamps["initial"] - stamps["start"]).total_seconds()
seconds = (stamps[last] - stamps["initial"]).total_seconds() - (last + 1) * evaluation
print(f"{train * (last + 1) / seconds:.4g} {train * (last + 1)} {seconds:.1f}")
EOF
read -r rate frames seconds < mace-rate.txt
row mace-torch 1 1 "$rate" "$frames" - "$seconds"
echo "mace-torch training: $rate frames/s ($frames frames in $seconds s)" >&2

cat > mlip-train.yaml <<EOF
model:
  architecture: mace
  species: [O, H]
  cutoff: 5.0
  dtype: float64
  hyperparameters: {num_channels: $CHANNELS, max_L: 1, max_ell: 3, correlation: 3, num_interactions: 2,
                    num_radial_basis: 8, radial_MLP: [64, 64, 64]}
data:
  train: [{path: $work/train-mlip.xyz}]
  validation_fraction: 0.1
  batch: {frames: 4}
  cache_dir: $work/cache
training:
  epochs: $EPOCHS
  seed: 1
  optimizer: {type: adam, lr: 1.0e-2}
  loss: {energy: {start: 1.0, limit: 1.0}, forces: {start: 100.0, limit: 100.0}}
output: {dir: $work/mlip-run, log_every: 1000}
EOF
for ranks in 1 2; do
  echo "== mlip-trainer: $EPOCHS epochs on $TRAIN_FRAMES frames, $ranks rank(s) x 1 thread" >&2
  OMP_NUM_THREADS=1 mpirun --oversubscribe -np "$ranks" "$build/bin/mlip-trainer" train mlip-train.yaml --threads 1 \
    --set output.dir="$work/mlip-run-$ranks" > "mlip-train-$ranks.log" 2>&1 || { tail -20 "mlip-train-$ranks.log" >&2; exit 1; }
  keep_log "mlip-train-$ranks.log"
  rate=$(grep -o 'throughput [0-9.]* frames/s' "mlip-train-$ranks.log" | tail -1 | awk '{print $2}')
  row mlip "$ranks" 1 "$rate" - - -
  echo "mlip training, $ranks rank(s): $rate frames/s" >&2
done

# ---- 2. MD on the model mace-torch trained, imported
"$py" "$src/python/mace_to_mlip.py" "$mace_model" -o model.pt --mlip-trainer "$build/bin/mlip-trainer" \
  --ops "$build/lib/libmlip_ops.so" > import.log 2>&1 || { cat import.log >&2; exit 1; }
keep_log import.log
grep check import.log >&2
table=md
row code atoms ranks threads repeat us_per_atom_step peak_rss_mib
water_md_input md.in
for reps in "3 2 1" "6 3 3"; do
  # shellcheck disable=SC2086
  "$build/bin/mlip_test_inputs" water water.data $reps > /dev/null
  atoms=$(awk '/ atoms/ {print $1; exit}' water.data)
  steps=$((atoms > 5000 ? 5 : 20))
  "$py" - water.data water.xyz <<'EOF'
import sys
from ase.io import read, write
write(sys.argv[2], read(sys.argv[1], format="lammps-data", atom_style="atomic", Z_of_type={1: 8, 2: 1}), format="extxyz")
EOF
  for repeat in $(seq 1 "$REPEATS"); do
    for ranks in 1 2; do
      water_md_vars water.data "mlip model.pt" "$steps"
      log=md-$atoms-$ranks-$repeat.log
      "$py" "$src/benchmarks/peak_rss.py" rss.txt mpirun --oversubscribe -np "$ranks" "$build/bin/lmp" -nocite \
        -screen none -log "$log" -in md.in "${md_vars[@]}" || { tail -5 "$log" >&2; exit 1; }
      keep_log "$log"
      row mlip "$atoms" "$ranks" 1 "$repeat" "$(us_per_atom_step "$log")" "$(awk '{printf "%.0f", $2 / 1024}' rss.txt)"
    done
    (( atoms > 5000 && repeat > 1 )) && continue
    for threads in 1 2; do
      "$py" "$src/benchmarks/peak_rss.py" rss.txt "$py" - "$mace_model" water.xyz "$threads" > mace-md.txt <<'EOF'
import sys, time
import torch
from ase.io import read
from mace.calculators import MACECalculator
torch.set_num_threads(int(sys.argv[3]))
atoms = read(sys.argv[2])
atoms.calc = MACECalculator(model_paths=sys.argv[1], device="cpu", default_dtype="float64")
atoms.get_forces()                       # the first call compiles
calls = 3 if len(atoms) < 5000 else 1
start = time.perf_counter()
for k in range(calls):
    atoms.positions[0, 0] += 1e-4        # a new configuration each call
    atoms.get_forces()
print(f"{(time.perf_counter() - start) / calls / len(atoms) * 1e6:.4g}")
EOF
      row mace-torch "$atoms" 1 "$threads" "$repeat" "$(tail -1 mace-md.txt)" "$(awk '{printf "%.0f", $2 / 1024}' rss.txt)"
    done
  done
done
echo "== results: $results" >&2
column -t "$results/train.tsv" >&2
column -t "$results/md.tsv" >&2
