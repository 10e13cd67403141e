#!/usr/bin/env bash
# scripts/check-kokkos-cuda.sh KOKKOS_SOURCE [LAMMPS_VERSION]: a compile check, without a GPU, of
# pair_style mlip/kk for Kokkos's CUDA backend. Configures KOKKOS_SOURCE with CUDA for
# MLIP_KOKKOS_CUDA_ARCH (HOPPER90, the default, or AMPERE80; nothing of Kokkos is built), then
# compiles pair_style/pair_mlip_kokkos.cpp with Kokkos's nvcc_wrapper against that Kokkos's
# headers, LAMMPS LAMMPS_VERSION's KOKKOS package (4Feb2025, the default, takes Kokkos 4.x;
# 4Jul2026 takes Kokkos >= 5.1), LibTorch's and mlip's headers. Prints one line: the result, the
# device kernels of PairMLIPKokkos<Kokkos::Cuda> in the object, and the seconds.
#
# The whole LAMMPS + Kokkos CUDA build is `MLIP_KOKKOS_SOURCE=... MLIP_KOKKOS_CUDA=1
# scripts/install-deps.sh` then mlip's build (README "GPUs"); this check is the part that can be
# done here in minutes, and the part that is mlip's own code.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ksrc="$(realpath "${1:?usage: check-kokkos-cuda.sh KOKKOS_SOURCE [LAMMPS_VERSION]}")"
version="${2:-4Feb2025}"
arch="${MLIP_KOKKOS_CUDA_ARCH:-HOPPER90}"
case "$arch" in HOPPER90) sm=sm_90 ;; AMPERE80) sm=sm_80 ;; *) echo "MLIP_KOKKOS_CUDA_ARCH: HOPPER90 or AMPERE80" >&2; exit 2 ;; esac
case "$version" in
  4Feb2025) deb=20250204+dfsg.1-2 std=17 ;;
  4Jul2026) deb=20260704+dfsg-2 std=20 ;;   # Kokkos 5 requires C++20
  *) echo "LAMMPS_VERSION: 4Feb2025 or 4Jul2026 (29Sep2021's KOKKOS package predates Kokkos 4)" >&2; exit 2 ;;
esac
export PATH="/usr/local/cuda/bin:$PATH"
work="$here/build-check/kokkos-cuda-$arch"
mkdir -p "$work"
t0=$(date +%s)
fail() { echo "mlip/kk CUDA compile check ($version, $arch): FAIL: $1 ($(( $(date +%s) - t0 )) s)"; exit 1; }

lammps="$here/third_party/lammps-${deb%-*}"
[ -f "$lammps/src/version.h" ] || "$here/scripts/fetch-source.sh" lammps "$deb" "$lammps" ||
  fail "LAMMPS $version's source could not be fetched"
torch="$(ls -d "$here"/third_party/torch-"$(head -n1 "$here/cmake/torch-version")"/lib/python3*/site-packages/torch/include 2>/dev/null | head -n1 || true)"
[ -n "$torch" ] || fail "no LibTorch in third_party/ (run scripts/install-deps.sh)"

# Kokkos configured for CUDA: its generated configuration headers, nothing compiled (afresh: the
# cache remembers its source tree).
rm -rf "$work/kokkos"
cmake -S "$ksrc" -B "$work/kokkos" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD=$std \
  -DCMAKE_CXX_COMPILER="$ksrc/bin/nvcc_wrapper" "-DCMAKE_CXX_FLAGS=-arch=$sm" -DKokkos_ENABLE_CUDA=ON \
  -DKokkos_ENABLE_CUDA_CONSTEXPR=ON -DKokkos_ENABLE_SERIAL=ON "-DKokkos_ARCH_$arch=ON" >"$work/kokkos-configure.log" 2>&1 ||
  fail "Kokkos does not configure with CUDA ($work/kokkos-configure.log)"
grep -q "define KOKKOS_ENABLE_CUDA" "$work/kokkos/KokkosCore_config.h" || fail "Kokkos configured without CUDA"

kokkos_includes=()
for d in "$work/kokkos" "$work/kokkos/generated" "$work/kokkos/core/src" core/src containers/src algorithms/src simd/src \
         tpls/desul/include tpls/mdspan/include; do
  [[ $d == /* ]] || d="$ksrc/$d"
  [ -d "$d" ] && kokkos_includes+=("-I$d")
done
# Open MPI's wrapper: --showme; MPICH's: -show.
mpi_dirs="$(mpicxx --showme:incdirs 2>/dev/null || mpicxx -show | tr ' ' '\n' | sed -n 's/^-I//p' | tr '\n' ' ')"
read -r -a mpi_includes <<<"$(sed 's/\([^ ]*\)/-isystem \1/g' <<<"$mpi_dirs")"
l="$lammps/src"
"$ksrc/bin/nvcc_wrapper" "-arch=$sm" --expt-extended-lambda --expt-relaxed-constexpr "-std=c++$std" -O2 -fPIC \
  -DLMP_KOKKOS -DLAMMPS_SMALLBIG -DMLIP_LAMMPS_NEW_NEIGHBOR_API=1 \
  "-DMLIP_LAMMPS_VERSION=$(grep -oE '[0-9]{8}' <<<"$deb" | head -n1)" -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX \
  -I"$l" -I"$l/KOKKOS" -I"$here/pair_style" -I"$here/common/include" "${mpi_includes[@]}" "${kokkos_includes[@]}" \
  -isystem "$torch" -isystem "$torch/torch/csrc/api/include" \
  -c "$here/pair_style/pair_mlip_kokkos.cpp" -o "$work/pair_mlip_kokkos.o" >"$work/compile.log" 2>&1 ||
  fail "$(grep -m1 -E 'error:' "$work/compile.log" || tail -n1 "$work/compile.log") ($work/compile.log)"
kernels=$(nm -C "$work/pair_mlip_kokkos.o" | grep -c '__device_stub__.*PairMLIPKokkos.*Cuda' || true)
[ "$kernels" -gt 0 ] || fail "compiled, but without device kernels of PairMLIPKokkos<Kokkos::Cuda>"
kv=$(grep -oE 'set\(Kokkos_VERSION_(MAJOR|MINOR|PATCH) [0-9]+' "$ksrc/CMakeLists.txt" | awk '{printf "%s%s", s, $2; s="."}' || true)
echo "mlip/kk CUDA compile check ($version, $arch, Kokkos $kv): PASS, $kernels device kernels of PairMLIPKokkos<Kokkos::Cuda> ($(( $(date +%s) - t0 )) s)"
