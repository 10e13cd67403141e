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
# The GPU code paths are compiled on every machine with a CUDA build of LibTorch: the trainer's
# NCCL backend, and the device choice that loads LibTorch's CUDA backend (mlip/model/device.h). A CUDA
# LibTorch with the CUDA toolkit here but no NCCL backend built is an error, not a skip.
nccl="$(sed -n 's/^MLIP_NCCL_LIBRARY:FILEPATH=//p' "$build/CMakeCache.txt")"
cuda_torch="$(sed -n 's/^MLIP_LIBTORCH_HAS_CUDA:INTERNAL=//p' "$build/CMakeCache.txt")"
echo "   LibTorch CUDA build: ${cuda_torch:-OFF}; trainer NCCL backend: ${nccl:-not built}"
if [[ $cuda_torch == ON && -f /usr/local/cuda/include/nccl.h && ( -z $nccl || $nccl == *NOTFOUND ) ]]; then
  echo "error: a CUDA LibTorch and the CUDA toolkit are here, but the trainer's NCCL backend was not built" >&2
  exit 1
fi
if nvidia-smi -L >/dev/null 2>&1; then
  echo "   GPU: $(nvidia-smi -L | head -1)"
else
  echo "   GPU: none (the GPU tests are skipped, saying 'no GPU')"
fi
ctest --test-dir "$build" -j "${MLIP_JOBS:-$(nproc)}" --output-on-failure --timeout 600 "$@"
