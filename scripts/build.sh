#!/usr/bin/env bash
# Configures (once) and builds mlip and LAMMPS with the MLIP package into build/.
#   scripts/build.sh [extra cmake -D options for the first configure]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MLIP_BUILD_DIR:-$here/build}"
jobs="${MLIP_JOBS:-$(nproc)}"
# ccache keys relative to the checkout, so that clones at other paths share the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$here}"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLIP_LAMMPS_JOBS="$jobs" "$@"
fi
cmake --build "$build" -j "$jobs"
