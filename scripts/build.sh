#!/usr/bin/env bash
# Configures (once) and builds mlip and LAMMPS with the MLIP package into build/.
#   scripts/build.sh [extra cmake -D options for the first configure]
# MLIP_BUILD_DIR picks the build directory; MLIP_TORCH_VERSION (e.g. 2.15.0) another LibTorch
# (run scripts/install-deps.sh with the same variable first), which needs its own build directory.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MLIP_BUILD_DIR:-$here/build}"
jobs="${MLIP_JOBS:-$(nproc)}"
# ccache keys relative to the checkout, so that clones at other paths share the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$here}"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLIP_LAMMPS_JOBS="$jobs" "$@"
elif [ -n "${MLIP_TORCH_VERSION:-}" ]; then
  configured="$(sed -n 's/^MLIP_TORCH_PYTHON:FILEPATH=//p' "$build/CMakeCache.txt")"
  [ -n "$configured" ] || configured="$(sed -n 's/^Torch_DIR:PATH=//p' "$build/CMakeCache.txt")"
  case "$MLIP_TORCH_VERSION:$configured" in
    *:*/torch-"$MLIP_TORCH_VERSION"/* | debian:/usr/lib/*) ;;
    *) echo "error: $build was configured with LibTorch from '${configured:-Torch_DIR}', not torch $MLIP_TORCH_VERSION;" \
            "use another MLIP_BUILD_DIR" >&2; exit 1 ;;
  esac
fi
cmake --build "$build" -j "$jobs"
