#!/usr/bin/env bash
# scripts/sanitize.sh [ctest arguments]: builds mlip's LAMMPS-free parts and unit tests with
# AddressSanitizer and UndefinedBehaviorSanitizer (GCC) into build-asan/ and runs the tests under
# them. Any report fails the run: UBSan halts on the first error, ASan on any memory error.
#
# LibTorch is not instrumented (a prebuilt library): memory errors inside it are not seen, and
# its allocations are ASan's only through the malloc it calls. Leak checking is off: LibTorch and
# the CUDA loader keep global allocations to the end of the process by design.
# Environment: MLIP_JOBS (parallel jobs, default all cores).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$here/build-asan"
jobs="${MLIP_JOBS:-$(nproc)}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$here}"
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMLIP_BUILD_LAMMPS=OFF \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
fi
cmake --build "$build" -j "$jobs"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:detect_odr_violation=0:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "$build" -j "$jobs" --output-on-failure --timeout 900 "$@"
