#!/usr/bin/env bash
# Sets up what is missing (scripts/install-deps.sh), builds (scripts/build.sh), says which LibTorch
# and LAMMPS it tests, then runs every test with ctest and prints its summary.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MLIP_BUILD_DIR:-$here/build}"
"$here/scripts/install-deps.sh"
"$here/scripts/build.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "== testing with"
sed -n 's/^MLIP_TORCH_PYTHON:FILEPATH=/   LibTorch of: /p; s/^LAMMPS_SOURCE_DIR:PATH=/   LAMMPS source: /p' "$build/CMakeCache.txt"
help="$("$build/bin/lmp" -h)"
echo "   $(grep -m1 -E '^Large-scale|LAMMPS \(' <<<"$help" || true)"
echo "   LAMMPS packages: $(sed -n '/^Installed packages:/,/^List of/p' <<<"$help" | grep -vE '^(Installed|List)' | xargs)"
ctest --test-dir "$build" -j "${MLIP_JOBS:-$(nproc)}" --output-on-failure --timeout 600 "$@"
