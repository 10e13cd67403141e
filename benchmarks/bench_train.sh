#!/usr/bin/env bash
# Training throughput of mlip-trainer on 1 and 2 MPI ranks, side by side with the same model
# driven by a Python training loop (benchmarks/bench_train_python.py: the build's own torch package
# - the venv's PyPI torch, or Debian's python3-torch beside LibTorch 1.13 - loading the trainable
# TorchScript module of an mlip-trainer checkpoint, same batch size, same loss). PYTHON=0 skips it.
#
#   benchmarks/bench_train.sh [BUILD_DIR]          (default: <repo>/build)
#
# Model: se_e2_a water, float32, default hyperparameters (rc 6 A, embedding 25-50-100, axis 16,
# fitting 240x3). Data: data/water-deepmd (192-atom frames), global batch BATCH (2) frames, one
# epoch of EPOCH_FRAMES (288, the training split) frames per run, after one untimed warm-up epoch.
# Runs: mlip-trainer 1 rank x 1 thread, 1 rank x 2 threads, 2 ranks x 1 thread (mpirun), and
# the Python loop with 1 and 2 threads. For mlip-trainer the figures are its own epoch log:
# frames/s over the whole training loop, and the share of that wall time outside the model's
# forward/backward and the optimiser (batching, gradient all-reduce, everything else).
# Machines here are noisy: compare figures taken in one run, and check `uptime` before trusting.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init bench_train "${1:-}" mlip-trainer
trainer=$build/bin/mlip-trainer
BATCH=${BATCH:-2}
PY_STEPS=${PY_STEPS:-144}

cat >"$work/bench.yaml" <<EOF
model:
  architecture: se_e2_a
  species: [O, H]
  cutoff: 6.0
  dtype: float32
data:
  train:
    - path: $src/data/water-deepmd
  validation_fraction: 0.1
  cache_dir: $work/cache
  batch:
    frames: $BATCH
training:
  epochs: 2
  optimizer: {type: adam, lr: 1.0e-4}
output:
  dir: $work/run
  keep_checkpoints: 1
  log_every: 0
EOF

# Prints "frames/s outside%" of the second (warm) epoch of one mlip-trainer run.
run_trainer() {
  local label=$1 threads=$2; shift 2
  rm -rf "$work/run"
  "$@" train "$work/bench.yaml" --threads "$threads" >"$work/$label.log" 2>&1 || { cat "$work/$label.log" >&2; exit 1; }
  grep "throughput" "$work/$label.log" | tail -1 |
    sed -E 's/.*throughput ([0-9.]+) frames\/s.*outside model and optimizer: ([0-9.]+)%.*/\1 \2/'
}

echo "== mlip-trainer training throughput, water se_e2_a float32, batch $BATCH frames (192 atoms each)"
uptime
read -r f1 o1 < <(run_trainer r1t1 1 "$trainer")
read -r f1t2 o1t2 < <(run_trainer r1t2 2 "$trainer")
read -r f2 o2 < <(run_trainer r2t1 1 mpirun -np 2 "$trainer")
checkpoint=$(ls -d "$work"/run/checkpoints/epoch-* | tail -1)/model.pt

# The Python loop gets the glibc malloc settings mlip-trainer makes for itself (tune_allocator in
# trainer/src/main.cpp): without them it was 1.7x slower here, from page faults alone.
torch_python=$(sed -n 's/^MLIP_TORCH_PYTHON:FILEPATH=//p' "$build/CMakeCache.txt")
py=(env MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824 MALLOC_TOP_PAD_=268435456
    "${torch_python:-/usr/bin/python3}" -W ignore)
p1=nan p2=nan
if [[ ${PYTHON:-1} == 1 ]]; then
p1=$("${py[@]}" "$src/benchmarks/bench_train_python.py" "$checkpoint" "$src/data/water-deepmd" --batch-frames "$BATCH" \
  --steps "$PY_STEPS" --threads 1 --ops "$build/lib/libmlip_ops.so" | tee "$work/py1.log" | sed -E 's/python loop: ([0-9.]+) frames.*/\1/')
p2=$("${py[@]}" "$src/benchmarks/bench_train_python.py" "$checkpoint" "$src/data/water-deepmd" --batch-frames "$BATCH" \
  --steps "$PY_STEPS" --threads 2 --ops "$build/lib/libmlip_ops.so" | tee "$work/py2.log" | sed -E 's/python loop: ([0-9.]+) frames.*/\1/')
fi

printf '%-34s %10s %22s\n' "run" "frames/s" "outside model+optim"
printf '%-34s %10.2f %21.1f%%\n' "mlip-trainer 1 rank x 1 thread" "$f1" "$o1"
printf '%-34s %10.2f %21.1f%%\n' "mlip-trainer 1 rank x 2 threads" "$f1t2" "$o1t2"
printf '%-34s %10.2f %21.1f%%\n' "mlip-trainer 2 ranks x 1 thread" "$f2" "$o2"
printf '%-34s %10.2f %22s\n' "Python loop, 1 thread" "$p1" "-"
printf '%-34s %10.2f %22s\n' "Python loop, 2 threads" "$p2" "-"
awk -v a="$f2" -v b="$f1" -v c="$f1t2" -v p="$p1" -v q="$p2" -v f="$f1" 'BEGIN {
  printf "2 ranks / 1 rank x 1 thread: %.2fx (target >= 1.8x); 2 ranks / 1 rank x 2 threads: %.2fx\n", a / b, a / c;
  # below 1: a second thread slows the step (as the prefetching thread did before f32e8cc)
  printf "1 rank x 2 threads / 1 rank x 1 thread: %.2fx (below 1: the second thread slows training)\n", c / b;
  printf "mlip-trainer / Python loop: %.2fx at 1 thread, %.2fx at 2 threads (2 threads: 1 rank x 2 threads)\n", f / p, c / q }'
