#!/usr/bin/env bash
# One command for a fresh Debian 12 machine: installs the dependencies (as root or via sudo),
# builds mlip and LAMMPS with the MLIP package, and checks that LAMMPS knows pair_style mlip.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MLIP_BUILD_DIR:-$here/build}"
echo "== [1/3] dependencies"
"$here/scripts/install-deps.sh"
echo "== [2/3] build (mlip and LAMMPS: most of a first set-up, docs/benchmarks.md; ccache makes rebuilds fast)"
"$here/scripts/build.sh"
echo "== [3/3] check"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Capture first: grep -q would stop reading early and, under pipefail, fail the pipeline.
help="$("$build/bin/lmp" -h)"
if grep -qw mlip <<<"$help"; then
  echo "LAMMPS at $build/bin/lmp has pair_style mlip"
else
  echo "error: $build/bin/lmp does not list pair_style mlip" >&2
  exit 1
fi
