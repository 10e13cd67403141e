#!/usr/bin/env bash
# MACE in mlip against mace-torch, side by side in one run, on the same model and data.
#
#   benchmarks/bench_mace.sh [BUILD_DIR]          (default: <repo>/build)
#
# The model: mace-torch's `--model MACE` with CHANNELS (32) channels, max_L 1, max_ell 3,
# correlation 3, 2 interactions, r_max 5 A, 8 Bessel functions, radial MLP [64, 64, 64], float64,
# on water (data/water-deepmd, 192-atom frames; energies and forces).
#
# 1. Training throughput, frames/s, at equal cores: mace_run_train on 1 and 2 torch threads, and
#    mlip-trainer (architecture mace, the same hyperparameters, batch 4 frames, Adam) on 1 rank x 1
#    thread, 1 rank x 2 threads and 2 ranks x 1 thread, each for EPOCHS (2) epochs over the first
#    TRAIN_FRAMES (40) frames of data_0 (10% held out by each for validation, as each does it).
#    mace-torch: the time between its epoch lines less its validation pass (timed before the
#    first epoch); mlip: its throughput line (validation excluded). mace-torch's multi-process
#    training needs torchrun and is not run here.
# 2. MD speed and memory on the model mace-torch trained in (1), imported into mlip by
#    python/mace_to_mlip.py (the import checks that both give the same energy on a random
#    structure): liquid water of 1152, 3456 and 10368 atoms (frame 0 of data_0, replicated;
#    MD_ATOMS picks some of them).
#    mlip: LAMMPS, pair_style mlip (per-layer ghost exchange), NVE, 1 rank x 1 thread, 1 rank x
#    2 threads and 2 ranks x 1 thread, us/atom-step of the MD loop, peak RSS of the largest rank.
#    mace-torch (not at 10368 atoms: about all of this machine's memory): its fastest CPU route
#    that can be had here is its ASE calculator (its LAMMPS route, ML-IAP, needs a LAMMPS built
#    with Python and ML-IAP, which this build has not): one energy-and-forces call per step on
#    the same structure, wall us/atom per call (the first call, which compiles, left out), with
#    1 and 2 torch threads (no MPI), peak RSS of the process. The two sides differ in how the
#    step is made (LAMMPS's neighbour lists and integration against ASE's neighbour list and no
#    integration), as stated beside the table.
# REPEATS (3) of each measurement of (1) and (2) (mace-torch: 3 calls per repeat at 1152 atoms,
#    1 at 3456).
# 3. Memory of a large model: mlip, a 128-channel, max_L 2, float32 MACE (the other
#    hyperparameters as above; weights after one epoch on 4 frames: memory does not depend on
#    them), water of 10368 atoms, 1 and 2 ranks, default chunks, 5 MD steps: peak RSS of the
#    largest rank and us/atom-step. mlip only (no mace-torch figure at this size).
# 4. Test errors after the same wall time: both train the model of (1) on the 80 frames of data_0
#    (10% held out by each for validation) for WALL_MINUTES (15), at the same time, one core each
#    (1 thread; the two runs share the machine's memory bandwidth), each with its own recommended
#    recipe: mace-torch Adam with AMSGrad, lr 0.01, reduce-on-plateau and EMA 0.99 (--ema, as its
#    docs recommend) for as many epochs as fit (estimated from the throughput of (1), or MACE_RATE
#    frames/s without it); mlip the same optimiser with a cosine schedule to 1e-4 over
#    training.max_minutes, EMA 0.99. Both with batch 4, loss weights 1 (energy per atom) and 100
#    (forces). Then energy RMSE per atom and force RMSE on the 80 frames of data_2, which neither
#    saw, through each code's ASE calculator (benchmarks/test_errors.py), beside the E0-only
#    baseline (per-element energies fitted by least squares to the training frames, zero forces).
#    ACC_REPEATS (REPEATS) runs, each side with seeds 1, 2, 3...
# PARTS ("train md memory accuracy") picks which parts run; (2) trains mace-torch once for its
# model when (1) does not run.
#
# On a GPU (DEVICE=cuda; scripts/gpu-check.sh's mace stage): both train on DEVICE (1 rank, 1
# thread each), and (2) runs pair_style mlip ... device DEVICE, 1 rank, with the peak GPU memory
# (nvidia-smi, sampled every 100 ms), against two mace-torch routes on the same GPU: its ASE
# calculator as above, and its model alone on a graph built once (forces only: no neighbour list,
# no stress; benchmarks/mace_torch_md.py), with PyTorch's peak allocated GPU memory. No size is
# left out for memory there (an out-of-memory call gives a row saying so). DTYPE (float64) is both
# sides' dtype; LAYOUTS ("1x1 1x2 2x1" on the CPU: mlip's ranks x threads) and MACE_THREADS
# ("1 2") the layouts; MD_STEPS (per size: 20 at most 2000 atoms, 5 at most 5000, 3 above) and MACE_CALLS
# (mace-torch's timed calls: 3 at most 2000 atoms, 1 above) how long each is timed, MD_REPEATS
# ("SIZE=N ...") fewer repeats at some sizes, MACE_ROUTES (ase on the CPU, "ase graph" on a GPU)
# mace-torch's routes. A failed MD run gives a row saying so, the others
# still run, and the script exits 1 at the end; mace-torch out of GPU memory gives "oom".
#
# mace-torch comes from MACE_PYTHON (default: the torch venv's python, where
# scripts/install-deps.sh installs mace-torch 0.3.16 as the import test's oracle); it is never a
# dependency of mlip. Results: benchmarks/results/bench_mace/<date>-<commit>/ (train.tsv, md.tsv,
# memory.tsv, accuracy.tsv).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init bench_mace "${1:-}" lmp mlip-trainer mlip_test_inputs
py=${MACE_PYTHON:-$src/third_party/torch-2.11.0/bin/python3}
"$py" -c 'import mace' 2>/dev/null || { echo "bench_mace: no mace-torch in $py (MACE_PYTHON)" >&2; exit 1; }
CHANNELS=${CHANNELS:-32}
EPOCHS=${EPOCHS:-2}
TRAIN_FRAMES=${TRAIN_FRAMES:-40}
REPEATS=${REPEATS:-3}
PARTS=${PARTS:-train md memory accuracy}
MD_ATOMS=${MD_ATOMS:-1152 3456 10368}
WALL_MINUTES=${WALL_MINUTES:-15}
DEVICE=${DEVICE:-cpu}
DTYPE=${DTYPE:-float64}
# the layouts compared: mlip's "RANKSxTHREADS" (LAYOUTS) and mace-torch's torch threads
# (MACE_THREADS); on one GPU 1x1 and 1
if [[ $DEVICE == cpu ]]; then
  LAYOUTS=${LAYOUTS:-"1x1 1x2 2x1"} MACE_THREADS=${MACE_THREADS:-"1 2"}
else
  LAYOUTS=${LAYOUTS:-1x1} MACE_THREADS=${MACE_THREADS:-1}
fi
MACE_ROUTES=${MACE_ROUTES:-$([[ $DEVICE == cpu ]] && echo ase || echo "ase graph")}
mlip_layouts=()
for layout in $LAYOUTS; do mlip_layouts+=("${layout%x*} ${layout#*x}"); done
read -ra mace_threads <<< "$MACE_THREADS"
has_part() { [[ " $PARTS " == *" $1 "* ]]; }
# bind THREADS: mpirun's binding option: a rank of several threads must not be bound to one core
# (Open MPI's default for 2 or fewer ranks)
bind() { (( $1 == 1 )) || echo --bind-to none; }
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

# mace_train NAME FRAMES EPOCHS [THREADS [ARGUMENTS...]]: mace_run_train on THREADS (1) torch
# threads, the model of the header (NAME.model); ARGUMENTS come last (they win over the defaults)
mace_train() {
  OMP_NUM_THREADS=${4:-1} "$py" -m mace.cli.run_train --name "$1" --train_file "$2" --valid_fraction 0.1 \
    --energy_key REF_energy --forces_key REF_forces --E0s average --model MACE --num_channels "$CHANNELS" \
    --max_L 1 --max_ell 3 --correlation 3 --num_interactions 2 --r_max 5.0 --num_radial_basis 8 \
    --batch_size 4 --valid_batch_size 4 --max_num_epochs "$3" --device "$DEVICE" --default_dtype "$DTYPE" --seed 1 \
    --eval_interval 1 --num_workers 0 --lr 0.01 --energy_weight 1 --forces_weight 100 "${@:5}" > "$1.log" 2>&1 ||
    { tail -20 "$1.log" >&2; exit 1; }
  keep_log "$1.log"
}

# mace_rate LOG FRAMES: "frames/s frames seconds" of a mace_run_train log: the time between its
# epoch lines less its validation pass (timed before the first epoch). On a GPU the first
# validation pass and epoch hold CUDA's start (cuBLAS, kernels loaded): there the median time
# between consecutive epoch lines after the first (a warm epoch and its 4-frame validation pass).
mace_rate() {
  "$py" - "$1" "$2" "$DEVICE" <<'EOF'
import re, statistics, sys
from datetime import datetime
frames = int(sys.argv[2])
train = frames - round(0.1 * frames)
stamps = {}
for line in open(sys.argv[1]):
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
if sys.argv[3] != "cpu" and last >= 1:   # epochs 1..last, each after a warm epoch
    gap = statistics.median((stamps[k] - stamps[k - 1]).total_seconds() for k in range(1, last + 1))
    print(f"{train / gap:.4g} {train * last} {gap * last:.1f}")
    sys.exit()
evaluation = (stamps["initial"] - stamps["start"]).total_seconds()
seconds = (stamps[last] - stamps["initial"]).total_seconds() - (last + 1) * evaluation
print(f"{train * (last + 1) / seconds:.4g} {train * (last + 1)} {seconds:.1f}")
EOF
}

# mlip_config FILE DATA [LINE...]: mlip-trainer's config of the same model and loss; each LINE
# (KEY: VALUE) goes into its training section
mlip_config() {
  local file=$1 data=$2
  shift 2
  cat > "$file" <<EOF
model:
  architecture: mace
  species: [O, H]
  cutoff: 5.0
  dtype: $DTYPE
  hyperparameters: {num_channels: $CHANNELS, max_L: 1, max_ell: 3, correlation: 3, num_interactions: 2,
                    num_radial_basis: 8, radial_MLP: [64, 64, 64]}
data:
  train: [{path: $data}]
  validation_fraction: 0.1
  batch: {frames: 4}
  cache_dir: $work/cache
training:
  seed: ${SEED:-1}
  device: $DEVICE
  loss: {energy: {start: 1.0, limit: 1.0}, forces: {start: 100.0, limit: 100.0}}
EOF
  printf '  %s\n' "$@" >> "$file"
  echo "output: {dir: $work/mlip-run, log_every: 1000}" >> "$file"
}

# ---- 1. training throughput
mace_rates=()
if has_part train; then
  table=train
  row code ranks threads repeat frames_per_s frames seconds device
  mlip_config mlip-train.yaml "$work/train-mlip.xyz" "epochs: $EPOCHS" "optimizer: {type: adam, lr: 1.0e-2, amsgrad: true}"
  for repeat in $(seq 1 "$REPEATS"); do
    for threads in "${mace_threads[@]}"; do
      echo "== mace-torch: $EPOCHS epochs on $TRAIN_FRAMES frames, $threads thread(s) (repeat $repeat)" >&2
      mace_train "mace-$threads-$repeat" train.xyz "$EPOCHS" "$threads"
      read -r rate frames seconds < <(mace_rate "mace-$threads-$repeat.log" "$TRAIN_FRAMES")
      (( threads == 1 )) && mace_rates+=("$rate")
      row mace-torch 1 "$threads" "$repeat" "$rate" "$frames" "$seconds" "$DEVICE"
      echo "mace-torch training, $threads thread(s): $rate frames/s ($frames frames in $seconds s)" >&2
    done
    for layout in "${mlip_layouts[@]}"; do
      read -r ranks threads <<< "$layout"
      echo "== mlip-trainer: $EPOCHS epochs on $TRAIN_FRAMES frames, $ranks rank(s) x $threads thread(s) (repeat $repeat)" >&2
      log=mlip-train-$ranks-$threads-$repeat.log
      # shellcheck disable=SC2046
      OMP_NUM_THREADS=$threads mpirun --oversubscribe $(bind "$threads") -np "$ranks" "$build/bin/mlip-trainer" train mlip-train.yaml \
        --threads "$threads" --set output.dir="$work/mlip-run-$ranks-$threads-$repeat" > "$log" 2>&1 ||
        { tail -20 "$log" >&2; exit 1; }
      keep_log "$log"
      rate=$(grep -o 'throughput [0-9.]* frames/s' "$log" | tail -1 | awk '{print $2}')
      row mlip "$ranks" "$threads" "$repeat" "$rate" - - "$DEVICE"
      echo "mlip training, $ranks rank(s) x $threads thread(s): $rate frames/s" >&2
    done
  done
  mace_model=$work/mace-1-1.model
fi

# ---- 2. MD on the model mace-torch trained, imported
if has_part md; then
if [[ -z ${mace_model:-} ]]; then
  mace_train mace-md train.xyz "$EPOCHS"
  mace_model=$work/mace-md.model
fi
"$py" "$src/python/mace_to_mlip.py" "$mace_model" -o model.pt --mlip-trainer "$build/bin/mlip-trainer" \
  --ops "$build/lib/libmlip_ops.so" > import.log 2>&1 || { cat import.log >&2; exit 1; }
keep_log import.log
grep check import.log >&2
table=md
md_failed=0
row code atoms ranks threads repeat us_per_atom_step peak_rss_mib device peak_gpu_mib
water_md_input md.in
pair="mlip model.pt"
[[ $DEVICE == cpu ]] || pair="mlip model.pt device $DEVICE"
declare -A replicas=([1152]="3 2 1" [3456]="3 3 2" [10368]="6 3 3" [23040]="6 5 4" [98304]="8 8 8")
# gpu_peak COMMAND...: COMMAND, with the largest GPU memory in use while it runs (nvidia-smi
# every 100 ms; "-" without a GPU) in gpu.txt
gpu_peak() {
  local sampler="" rc=0
  if [[ $DEVICE != cpu ]] && command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > gpu.samples 2> /dev/null &
    sampler=$!
  fi
  "$@" || rc=$?
  [[ -n $sampler ]] && { kill "$sampler" 2> /dev/null || true; wait "$sampler" 2> /dev/null || true; }
  if [[ -n $sampler && -s gpu.samples ]]; then sort -n gpu.samples | tail -1 > gpu.txt; else echo - > gpu.txt; fi
  return $rc
}
for size in $MD_ATOMS; do
  [[ -n ${replicas[$size]:-} ]] || { echo "bench_mace: MD_ATOMS: $size is not one of ${!replicas[*]}" >&2; exit 1; }
  # shellcheck disable=SC2086
  "$build/bin/mlip_test_inputs" water water.data ${replicas[$size]} > /dev/null
  atoms=$(awk '/ atoms/ {print $1; exit}' water.data)
  steps=$((atoms > 5000 ? 3 : atoms > 2000 ? 5 : 20))
  calls=$((atoms > 2000 ? 1 : 3))
  for kv in ${MD_STEPS:-}; do [[ ${kv%%=*} == "$atoms" ]] && steps=${kv#*=}; done
  calls=${MACE_CALLS:-$calls}
  repeats=$REPEATS
  for kv in ${MD_REPEATS:-}; do [[ ${kv%%=*} == "$atoms" ]] && repeats=${kv#*=}; done
  "$py" - water.data water.xyz <<'EOF2'
import sys
from ase.io import read, write
write(sys.argv[2], read(sys.argv[1], format="lammps-data", atom_style="atomic", Z_of_type={1: 8, 2: 1}), format="extxyz")
EOF2
  for repeat in $(seq 1 "$repeats"); do
    for layout in "${mlip_layouts[@]}"; do
      read -r ranks threads <<< "$layout"
      water_md_vars water.data "$pair" "$steps"
      log=md-$atoms-$ranks-$threads-$repeat.log
      # shellcheck disable=SC2046
      if ! OMP_NUM_THREADS=$threads gpu_peak "$py" "$src/benchmarks/peak_rss.py" rss.txt mpirun --oversubscribe $(bind "$threads") \
        -np "$ranks" "$build/bin/lmp" -nocite -screen none -log "$log" -in md.in "${md_vars[@]}"; then
        tail -5 "$log" >&2
        keep_log "$log"
        row mlip "$atoms" "$ranks" "$threads" "$repeat" failed - "$DEVICE" -   # the others still run; exit 1 at the end
        md_failed=1
        continue
      fi
      keep_log "$log"
      row mlip "$atoms" "$ranks" "$threads" "$repeat" "$(us_per_atom_step "$log")" "$(awk '{printf "%.0f", $2 / 1024}' rss.txt)" \
        "$DEVICE" "$(cat gpu.txt)"
    done
    # mace-torch needs about 2 GB of memory per 1000 atoms: on the CPUs here not above 5000
    [[ $DEVICE == cpu ]] && (( atoms > 5000 )) && continue
    for route in $MACE_ROUTES; do
      for threads in "${mace_threads[@]}"; do
        code=mace-torch
        [[ $route == graph ]] && code=mace-torch-graph
        if ! gpu_peak "$py" "$src/benchmarks/peak_rss.py" rss.txt "$py" "$src/benchmarks/mace_torch_md.py" "$mace_model" \
          water.xyz "$threads" "$DEVICE" "$DTYPE" "$route" "$calls" > mace-md.txt 2> mace-md.err; then
          tail -5 mace-md.err >&2
          row "$code" "$atoms" 1 "$threads" "$repeat" failed - "$DEVICE" -
          md_failed=1
          continue
        fi
        read -r us _ < <(tail -1 mace-md.txt)
        # the GPU's memory in use (nvidia-smi), as for mlip: context and allocator's cache included
        row "$code" "$atoms" 1 "$threads" "$repeat" "$us" "$(awk '{printf "%.0f", $2 / 1024}' rss.txt)" "$DEVICE" "$(cat gpu.txt)"
      done
    done
  done
done
fi

# ---- 3. memory of a 128-channel, max_L 2, float32 model at 10368 atoms
if has_part memory; then
  table=memory
  row atoms ranks repeat us_per_atom_step peak_rss_mib
  "$py" - <<'EOF'
from ase.io import read, write
write("four.xyz", read("all.xyz", index=":4"), format="extxyz")
EOF
  sed -e 's/REF_energy/energy/' -e 's/REF_forces/forces/g' four.xyz > four-mlip.xyz
  CHANNELS=128 mlip_config big.yaml "$work/four-mlip.xyz" "epochs: 1"
  sed -i -e 's/max_L: 1/max_L: 2/' -e 's/dtype: float64/dtype: float32/' -e 's/frames: 4/frames: 1/' \
    -e 's/validation_fraction: 0.1/validation_fraction: 0.25/' -e "s|mlip-run|big-run|" big.yaml
  "$build/bin/mlip-trainer" train big.yaml --threads 1 > big-train.log 2>&1 || { tail -20 big-train.log >&2; exit 1; }
  keep_log big-train.log
  water_md_input md.in
  "$build/bin/mlip_test_inputs" water water.data 6 3 3 > /dev/null
  atoms=$(awk '/ atoms/ {print $1; exit}' water.data)
  for repeat in $(seq 1 "$REPEATS"); do
    for ranks in 1 2; do
      water_md_vars water.data "mlip $work/big-run/model.pt" 5
      log=big-md-$ranks-$repeat.log
      "$py" "$src/benchmarks/peak_rss.py" rss.txt mpirun --oversubscribe -np "$ranks" "$build/bin/lmp" -nocite \
        -screen none -log "$log" -in md.in "${md_vars[@]}" || { tail -5 "$log" >&2; exit 1; }
      keep_log "$log"
      row "$atoms" "$ranks" "$repeat" "$(us_per_atom_step "$log")" "$(awk '{printf "%.0f", $2 / 1024}' rss.txt)"
    done
  done
fi

# ---- 4. test errors after the same wall time
if has_part accuracy; then
  table=accuracy
  row code repeat minutes epochs energy_rmse_mev_per_atom force_rmse_mev_per_a
  "$py" "$src/benchmarks/deepmd_to_extxyz.py" acc-train.xyz "$src/data/water-deepmd/data_0" > /dev/null
  "$py" "$src/benchmarks/deepmd_to_extxyz.py" acc-test.xyz "$src/data/water-deepmd/data_2" > /dev/null
  if [[ -n ${ACC_FRAMES:-} ]]; then  # a smaller run (a check of this script)
    "$py" -c "from ase.io import read, write; write('acc-train.xyz', read('acc-train.xyz', index=':$ACC_FRAMES'))"
    "$py" -c "from ase.io import read, write; write('acc-test.xyz', read('acc-test.xyz', index=':$ACC_FRAMES'))"
  fi
  "$py" "$src/benchmarks/deepmd_to_extxyz.py" acc-test.xyz "$src/data/water-deepmd/data_2" > /dev/null
  sed -e 's/REF_energy/energy/' -e 's/REF_forces/forces/g' acc-train.xyz > acc-train-mlip.xyz
  n_train=$(grep -c Lattice acc-train.xyz)
  rate=${MACE_RATE:-0.25}
  (( ${#mace_rates[@]} )) && rate=$(median_of "${mace_rates[@]}")
  epochs=$("$py" -c "print(max(1, int($WALL_MINUTES * 60 * $rate / ($n_train - round(0.1 * $n_train)))))")
  for repeat in $(seq "${ACC_REPEATS:-$REPEATS}"); do
    SEED=$repeat mlip_config acc.yaml "$work/acc-train-mlip.xyz" "epochs: 100000" "max_minutes: $WALL_MINUTES" \
      "optimizer: {type: adam, lr: 1.0e-2, amsgrad: true}" "lr_schedule: {type: cosine, final_lr: 1.0e-4}" \
      "ema_decay: 0.99"
    sed -i "s|mlip-run|acc-run-$repeat|" acc.yaml
    echo "== same wall time ($repeat), $WALL_MINUTES min each, side by side: mace-torch $epochs epochs, mlip max_minutes" >&2
    start=$(date +%s)
    ( mace_train "mace-acc-$repeat" acc-train.xyz "$epochs" 1 --ema --ema_decay 0.99 --seed "$repeat"
      echo $(( $(date +%s) - start )) > "mace-acc-$repeat.seconds" ) &
    mace_pid=$!
    OMP_NUM_THREADS=1 "$build/bin/mlip-trainer" train acc.yaml --threads 1 > "mlip-acc-$repeat.log" 2>&1 ||
      { tail -20 "mlip-acc-$repeat.log" >&2; exit 1; }
    echo $(( $(date +%s) - start )) > "mlip-acc-$repeat.seconds"
    wait "$mace_pid"  # not a bare wait: that also waits for the output tees of bench_init
    keep_log "mlip-acc-$repeat.log"
    mlip_epochs=$(( $(wc -l < "acc-run-$repeat/metrics.csv") - 1 ))
    "$py" "$src/benchmarks/test_errors.py" acc-test.xyz "$work/mace-acc-$repeat.model" "$work/acc-run-$repeat/model.pt" \
      "$build/lib/libmlip_ops.so" acc-train.xyz > "acc-errors-$repeat.txt"
    keep_log "acc-errors-$repeat.txt"
    read -r mace_e mace_f mlip_e mlip_f base_e base_f < <(tail -1 "acc-errors-$repeat.txt")
    row mace-torch "$repeat" "$(awk '{printf "%.1f", $1 / 60}' "mace-acc-$repeat.seconds")" "$epochs" "$mace_e" "$mace_f"
    row mlip "$repeat" "$(awk '{printf "%.1f", $1 / 60}' "mlip-acc-$repeat.seconds")" "$mlip_epochs" "$mlip_e" "$mlip_f"
    row E0-baseline "$repeat" 0 0 "$base_e" "$base_f"
  done
fi

echo "== results: $results" >&2
# (column is util-linux's: a machine without it gets the tab-separated rows as they are)
for t in train md memory accuracy; do
  [[ -f $results/$t.tsv ]] && { column -t "$results/$t.tsv" 2>/dev/null || cat "$results/$t.tsv"; } >&2
done
(( ${md_failed:-0} == 0 )) || { echo "bench_mace: an MD run failed (its row says so)" >&2; exit 1; }
