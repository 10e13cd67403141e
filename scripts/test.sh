#!/usr/bin/env bash
# Builds what is missing, then runs every test with ctest and prints its summary.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MLIP_BUILD_DIR:-$here/build}"
"$here/scripts/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "$build" -j "${MLIP_JOBS:-$(nproc)}" --output-on-failure --timeout 600 "$@"
