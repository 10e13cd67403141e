#!/usr/bin/env bash
# Installs everything mlip needs to build, test and run its demo on Debian 12 (bookworm), as root.
# Idempotent: when every package is present and the LAMMPS source is unpacked, it changes nothing.
#
#   scripts/install-deps.sh            # packages + LAMMPS source into third_party/
#   MLIP_LAMMPS_SRC=/path scripts/...  # unpack LAMMPS elsewhere
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lammps_parent="${MLIP_LAMMPS_SRC:-$here/third_party}"

packages=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config dpkg-dev
  # LibTorch (CPU) and an optimised BLAS: Debian's LibTorch calls the system libblas.so.3,
  # and the reference BLAS a fresh machine has makes matrix products ~30x slower.
  libtorch-dev libopenblas0-openmp
  # MPI, Kokkos (Serial), config, tests
  libopenmpi-dev openmpi-bin libtrilinos-kokkos-dev libyaml-cpp-dev libyaml-dev
  libgtest-dev libgmock-dev
  # small libraries used by mlip
  libcli11-dev libfmt-dev libspdlog-dev nlohmann-json3-dev
  # cross-checks in tests (ASE neighbour lists and extxyz, torch.jit.load) and the demo's plots
  python3 python3-numpy python3-ase python3-torch python3-matplotlib
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if [ ${#missing[@]} -gt 0 ]; then
  echo "[install-deps] installing: ${missing[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "[install-deps] all ${#packages[@]} packages present"
fi

# Fail loudly if the reference BLAS is still the active alternative.
blas="$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || true)"
case "$blas" in
  *openblas*|*blis*|*mkl*) ;;
  *) echo "[install-deps] error: libblas.so.3 -> $blas is the reference BLAS; install libopenblas0-openmp" >&2
     exit 1 ;;
esac

# LAMMPS source (Debian's 29Sep2021 update 2) unless the user brings their own tree.
if [ -n "${LAMMPS_SOURCE_DIR:-}" ]; then
  echo "[install-deps] using LAMMPS_SOURCE_DIR=$LAMMPS_SOURCE_DIR"
elif compgen -G "$lammps_parent/lammps-*/src/version.h" >/dev/null; then
  echo "[install-deps] LAMMPS source present in $lammps_parent"
else
  if ! grep -rqs "deb-src" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "[install-deps] adding a deb-src entry for bookworm"
    as_root tee /etc/apt/sources.list.d/mlip-debsrc.sources >/dev/null <<'SRC'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    as_root apt-get update -qq
  fi
  mkdir -p "$lammps_parent"
  echo "[install-deps] fetching LAMMPS source into $lammps_parent"
  (cd "$lammps_parent" && apt-get source -qq lammps 2>&1 | grep -v "unsandboxed" || true)
  compgen -G "$lammps_parent/lammps-*/src/version.h" >/dev/null ||
    { echo "[install-deps] error: apt-get source lammps failed" >&2; exit 1; }
fi
echo "[install-deps] done"
