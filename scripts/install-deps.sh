#!/usr/bin/env bash
# Installs everything mlip needs to build, test and run its demo on Debian 12 (bookworm), as root
# (or with sudo). Idempotent: what is already there is kept. The default stack:
#   LibTorch  PyPI's torch wheel (CUDA and NCCL inside) in a venv, third_party/torch-<version>/,
#             version pinned in cmake/torch-version
#   LAMMPS    Debian's source package of 4Jul2026 (sid), pinned below, into third_party/
#   Kokkos    >= 5.1 for LAMMPS 4Jul2026's KOKKOS package, from Debian's source package (sid)
#             when the archive serves it, built into third_party/kokkos/ (OpenMP + Serial)
#
# Choices (environment variables):
#   MLIP_TORCH_VERSION=2.15.0   another PyPI torch (2.11.0 and 2.15.0 are tested); "debian" for
#                               Debian 12's LibTorch 1.13 (libtorch-dev, CPU only)
#   MLIP_LAMMPS=20250204+dfsg.1-2 | 20220106.git7586adbb6a+ds1-2   another Debian LAMMPS source
#   LAMMPS_SOURCE_DIR=/path     your own LAMMPS tree: nothing is fetched
#   MLIP_KOKKOS_SOURCE=/path    your own Kokkos source tree (instead of Debian's), built into
#                               third_party/kokkos/ the same way
#   MLIP_KOKKOS_CUDA=1          build Kokkos with its CUDA backend too (for GPU machines), compiled
#                               by its nvcc_wrapper for MLIP_KOKKOS_CUDA_ARCH (HOPPER90, the
#                               default, sm_90; or AMPERE80, sm_80). Needs a Kokkos that supports
#                               the CUDA toolkit (CUDA 13: Kokkos >= 4.7; 4.5 does not compile)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tp="$here/third_party"
say() { echo "[install-deps] $*"; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

torch_version="${MLIP_TORCH_VERSION:-$(head -n1 "$here/cmake/torch-version")}"
# Debian source packages: version and the suite whose index lists it. The first is the default;
# the others are what the install falls back to, newest first, when the archive does not serve it.
lammps_versions=("20260704+dfsg-2 sid" "20250204+dfsg.1-2 trixie" "20220106.git7586adbb6a+ds1-2 bookworm")
kokkos_version="5.2.2-2"

# ---------------------------------------------------------------------------------------------
# Debian packages
packages=(
  build-essential cmake ninja-build ccache pkg-config dpkg-dev
  libopenmpi-dev openmpi-bin libyaml-cpp-dev libyaml-dev libgtest-dev libgmock-dev
  libcli11-dev libfmt-dev nlohmann-json3-dev zlib1g-dev
  # packed data sets (checksums); ASE's databases (SQLite, ASE-LMDB); MACE's HDF5 data files
  libxxhash-dev libsqlite3-dev liblmdb-dev libhdf5-dev
  # Kokkos 3.4 (Serial): LAMMPS 29Sep2021's KOKKOS package, for scripts/check-lammps.sh
  libtrilinos-kokkos-dev
  # venv for PyPI's torch; cross-checks in tests (ASE) and the demo's plots
  python3 python3-venv python3-numpy python3-ase python3-matplotlib
)
if [ "$torch_version" = debian ]; then
  # Debian's LibTorch calls the system libblas.so.3: the reference BLAS is ~30x slower.
  packages+=(libtorch-dev libopenblas0-openmp python3-torch)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing: ${missing[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  say "all ${#packages[@]} Debian packages present"
fi
if [ "$torch_version" = debian ]; then
  blas="$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || true)"
  case "$blas" in
    *openblas*|*blis*|*mkl*) ;;
    *) say "error: libblas.so.3 -> $blas is the reference BLAS; install libopenblas0-openmp" >&2; exit 1 ;;
  esac
fi

# ---------------------------------------------------------------------------------------------
# LibTorch: PyPI's torch in a venv (pip's cache makes a second install fast)
if [ "$torch_version" != debian ]; then
  venv="$tp/torch-$torch_version"
  have="$("$venv/bin/python3" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)"
  if [ "$have" = "$torch_version" ]; then
    say "torch $have present in $venv"
  else
    say "installing PyPI torch==$torch_version into $venv (about 3 minutes and 5-6 GB the first time)"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "torch==$torch_version"
    "$venv/bin/python3" -W ignore -c 'import torch; print("[install-deps] torch", torch.__version__, "CUDA", torch.version.cuda)'
  fi
  # ASE beside torch: the ASE calculator (python/mlip_ase) and its test against LAMMPS
  if ! "$venv/bin/python3" -c 'import ase' 2>/dev/null; then
    say "installing PyPI ase into $venv (for python/mlip_ase)"
    "$venv/bin/pip" install -q --disable-pip-version-check "ase>=3.22" ||
      say "warning: pip could not install ase; the ASE calculator's test will be skipped"
  fi
  # ASE-LMDB (fairchem's data-set format) beside ASE: its writer, the oracle of the reader's test
  if ! "$venv/bin/python3" -c 'import lmdb, ase_db_backends' 2>/dev/null; then
    say "installing PyPI lmdb and ase-db-backends into $venv (test oracle for the .aselmdb reader)"
    "$venv/bin/pip" install -q --disable-pip-version-check lmdb &&
      "$venv/bin/pip" install -q --disable-pip-version-check --no-deps "ase-db-backends==0.11.0" ||
      say "warning: pip could not install ase-db-backends; the .aselmdb test will be skipped"
  fi
  # mace-torch beside torch: the oracle of the mace import test (tests/python/mace_import.py) and
  # what python/mace_to_mlip.py unpickles with; never a dependency of mlip itself. Pinned, and
  # torch held at this version.
  if ! "$venv/bin/python3" -c 'import mace' 2>/dev/null; then
    say "installing PyPI mace-torch==0.3.16 into $venv (test oracle for the mace import)"
    echo "torch==$torch_version" >"$venv/constraints.txt"
    "$venv/bin/pip" install -q --disable-pip-version-check -c "$venv/constraints.txt" "mace-torch==0.3.16" ||
      say "warning: pip could not install mace-torch; the mace import test will be skipped"
  fi
fi

# ---------------------------------------------------------------------------------------------
# Debian source packages (scripts/fetch-source.sh copes with an archive that serves them in part)
fetch() {  # fetch PACKAGE VERSION DEST: 0 when unpacked, else 1 with the archive's answer in $fetch_error
  fetch_error=""
  local err
  err="$(mktemp)"
  if "$here/scripts/fetch-source.sh" "$@" 2>"$err"; then grep -v '^$' "$err" >&2 || true; rm -f "$err"; return 0; fi
  fetch_error="$(tail -n1 "$err")"
  rm -f "$err"
  return 1
}

mkdir -p "$tp"
if [ -n "${LAMMPS_SOURCE_DIR:-}" ]; then
  say "using LAMMPS_SOURCE_DIR=$LAMMPS_SOURCE_DIR"
else
  # The wanted version first (MLIP_LAMMPS or the default), then the fallbacks, newest first.
  wanted="${MLIP_LAMMPS:-${lammps_versions[0]%% *}}"
  order=()
  for entry in "${lammps_versions[@]}"; do if [ "${entry%% *}" = "$wanted" ]; then order+=("$entry"); fi; done
  [ ${#order[@]} -gt 0 ] || { say "error: MLIP_LAMMPS=$wanted is not one of: ${lammps_versions[*]%% *}" >&2; exit 1; }
  # Fallbacks only for the default: a LAMMPS asked for by name is that one or an error.
  if [ -z "${MLIP_LAMMPS:-}" ]; then
    for entry in "${lammps_versions[@]}"; do if [ "${entry%% *}" != "$wanted" ]; then order+=("$entry"); fi; done
  fi
  chosen=""
  for entry in "${order[@]}"; do
    ver="${entry%% *}" suite="${entry##* }"
    dir="$tp/lammps-${ver%-*}"
    if [ -f "$dir/src/version.h" ]; then chosen="$dir"; break; fi
    say "fetching LAMMPS $ver ($suite) into $dir"
    if fetch lammps "$ver" "$dir"; then chosen="$dir"; break; fi
    say "LAMMPS $ver ($suite) is not served by the archive now (${fetch_error:-no answer}); trying the next one"
  done
  [ -n "$chosen" ] || { say "error: no LAMMPS source package could be fetched (${order[*]})" >&2; exit 1; }
  if [ "$(basename "$chosen")" != "lammps-${wanted%-*}" ]; then
    say "WARNING: LAMMPS $wanted is the default but could not be fetched; building $(basename "$chosen") instead" | tee /dev/stderr
  fi
  echo "$chosen" >"$tp/lammps-source"
  say "LAMMPS: $(grep -m1 'define LAMMPS_VERSION' "$chosen/src/version.h" | cut -d'"' -f2) in $chosen"
fi

# Kokkos >= 5.1 for LAMMPS >= 2026's KOKKOS package. Debian sid's index lists kokkos 5.2.2-2, the
# only Kokkos >= 4 in any suite; PyPI has no sdist with a Kokkos source >= 4 (pykokkos-base
# bundles 3.x). Without it LAMMPS 4Jul2026 is built without KOKKOS (cmake/MlipKokkos.cmake).
kokkos_prefix="$tp/kokkos"
# A Kokkos already built is kept, unless CUDA is asked for and it has none, or another source is.
if [ -f "$kokkos_prefix/lib/cmake/Kokkos/KokkosConfig.cmake" ] &&
   { [ "${MLIP_KOKKOS_CUDA:-0}" = 1 ] && ! grep -qs "define KOKKOS_ENABLE_CUDA" "$kokkos_prefix/include/KokkosCore_config.h" ||
     [ -n "${MLIP_KOKKOS_SOURCE:-}" ]; }; then
  why="CUDA asked for, the one there has none"
  [ -n "${MLIP_KOKKOS_SOURCE:-}" ] && why="MLIP_KOKKOS_SOURCE given"
  say "rebuilding Kokkos in $kokkos_prefix ($why)"
  rm -rf "$kokkos_prefix"
fi
if [ -f "$kokkos_prefix/lib/cmake/Kokkos/KokkosConfig.cmake" ]; then
  say "Kokkos present in $kokkos_prefix"
elif [ "${MLIP_SKIP_KOKKOS:-0}" = 1 ]; then
  say "Kokkos >= 5.1 not looked for (MLIP_SKIP_KOKKOS=1)"
else
  ksrc="${MLIP_KOKKOS_SOURCE:+$(realpath "$MLIP_KOKKOS_SOURCE")}"
  ksrc="${ksrc:-$tp/kokkos-src}"
  label="${MLIP_KOKKOS_SOURCE:+from $MLIP_KOKKOS_SOURCE}"
  fetched=1
  if [ -z "${MLIP_KOKKOS_SOURCE:-}" ]; then
    rm -rf "$ksrc"
    fetch kokkos "$kokkos_version" "$ksrc" || fetched=0
    label="$kokkos_version (Debian sid)"
  fi
  if [ $fetched = 1 ]; then
    backends=(-DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=ON)
    if [ "${MLIP_KOKKOS_CUDA:-0}" = 1 ]; then
      arch="${MLIP_KOKKOS_CUDA_ARCH:-HOPPER90}"
      case "$arch" in HOPPER90) sm=sm_90 ;; AMPERE80) sm=sm_80 ;;
        *) echo "MLIP_KOKKOS_CUDA_ARCH=$arch: HOPPER90 or AMPERE80" >&2; exit 2 ;; esac
      # nvcc_wrapper's own default architecture (sm_70 in Kokkos 4.5) is gone from nvcc 13.
      backends+=(-DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_CONSTEXPR=ON "-DKokkos_ARCH_$arch=ON"
                 "-DCMAKE_CXX_COMPILER=$ksrc/bin/nvcc_wrapper" "-DCMAKE_CXX_FLAGS=-arch=$sm")
      export PATH="/usr/local/cuda/bin:$PATH"
    fi
    say "building Kokkos $label (OpenMP + Serial$([ "${MLIP_KOKKOS_CUDA:-0}" = 1 ] && echo " + CUDA $arch")) into $kokkos_prefix"
    # Optional: a failure is reported (log kept) and the build goes on without KOKKOS. A fresh
    # build folder: CMake's cache remembers the source tree.
    rm -rf "$tp/kokkos-build"
    if ! { cmake -S "$ksrc" -B "$tp/kokkos-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD=20 \
             -DCMAKE_INSTALL_PREFIX="$kokkos_prefix" -DBUILD_SHARED_LIBS=ON -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
             "${backends[@]}" &&
           cmake --build "$tp/kokkos-build" -j "$(nproc)" && cmake --install "$tp/kokkos-build"; } >"$tp/kokkos-build.log" 2>&1; then
      rm -rf "$kokkos_prefix"
      say "WARNING: building Kokkos $label failed ($tp/kokkos-build.log: $(grep -m1 -E 'error:' "$tp/kokkos-build.log" || tail -n1 "$tp/kokkos-build.log")): LAMMPS builds without KOKKOS"
    fi
  else
    say "Kokkos $kokkos_version (sid) is not served by the archive now (${fetch_error:-no answer}): LAMMPS >= 2026 builds without KOKKOS; pass -DKokkos_DIR=<Kokkos >= 5.1> (or MLIP_KOKKOS_SOURCE=<its source>) to have it"
  fi
fi
say "done"
