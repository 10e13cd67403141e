#!/usr/bin/env bash
# scripts/check-lammps.sh VERSION ROUTE: builds pair_style mlip into LAMMPS VERSION by ROUTE, from
# clean build directories (build-check/VERSION-ROUTE/), and runs the pair-style tests there.
#
#   VERSION  29Sep2021 (Debian 12) | 4Feb2025 (Debian 13) | 4Jul2026 (Debian sid) | all
#   ROUTE    project  mlip's own build, which builds LAMMPS with the MLIP package
#            package  the user's LAMMPS CMake build with the MLIP package (README: "Building against
#                     your own LAMMPS tree"), then mlip's tests against it
#            plugin   a LAMMPS built without MLIP, and mlipplugin.so loaded into it (plugin load)
#            all
#
# Each check prints one line and appends it to build-check/results.tsv (version, route, result,
# tests passed/run, seconds). LibTorch and the rest come from scripts/install-deps.sh as usual.
# `scripts/check-lammps.sh table` prints the latest result of each cell as the README's table.
# Environment: MLIP_JOBS (parallel jobs), MLIP_CHECK_DIR (default build-check), Kokkos_DIR (a Kokkos
# for the KOKKOS package, e.g. 4.x for 4Feb2025: otherwise cmake/MlipKokkos.cmake picks one).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="${MLIP_JOBS:-$(nproc)}"
checks="${MLIP_CHECK_DIR:-$here/build-check}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$here}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

debian_version() {
  case "$1" in
    29Sep2021) echo "20220106.git7586adbb6a+ds1-2" ;;
    4Feb2025) echo "20250204+dfsg.1-2" ;;
    4Jul2026) echo "20260704+dfsg-2" ;;
    *) echo "unknown LAMMPS version '$1' (29Sep2021, 4Feb2025, 4Jul2026)" >&2; return 1 ;;
  esac
}

if [ "${1:-}" = table ]; then
  awk -F'\t' '{ r[$1 FS $2] = $3 " (" $4 ", " $5 ")" }
    END {
      print "| LAMMPS | project | package | plugin |"; print "|---|---|---|---|"
      n = split("29Sep2021 4Feb2025 4Jul2026", v, " ")
      for (i = 1; i <= n; i++) {
        line = "| " v[i]
        for (j = 1; j <= 3; j++) { split("project package plugin", k, " "); c = r[v[i] FS k[j]]; line = line " | " (c == "" ? "not run" : c) }
        print line " |"
      }
    }' "$checks/results.tsv" | sed -E 's/100% tests passed, 0 tests failed out of ([0-9]+)/\1 tests/g'
  exit 0
fi
if [ $# -ne 2 ]; then
  sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
versions=("$1") routes=("$2")
[ "$1" = all ] && versions=(29Sep2021 4Feb2025 4Jul2026)
[ "$2" = all ] && routes=(project package plugin)
for r in "${routes[@]}"; do
  case "$r" in project|package|plugin) ;; *) echo "unknown route '$r' (project, package, plugin)" >&2; exit 2 ;; esac
done

# The same LibTorch as the default build (cmake/MlipTorch.cmake), asked of every build here.
torch_version="${MLIP_TORCH_VERSION:-$(head -n1 "$here/cmake/torch-version")}"
torch_args=()
if [ -n "${MLIP_TORCH_PYTHON:-}" ]; then torch_args=(-DMLIP_TORCH_PYTHON="$MLIP_TORCH_PYTHON"); fi
if [ "$torch_version" = debian ]; then torch_args=(-DTorch_DIR=/usr/lib/x86_64-linux-gnu/cmake/Torch); fi
MLIP_SKIP_KOKKOS=1 "$here/scripts/install-deps.sh" >/dev/null

# LAMMPS source tree of a version, fetched once into third_party/ (no fallback: a check of one
# version must not quietly test another).
lammps_source() {
  local deb dir
  deb="$(debian_version "$1")"
  dir="$here/third_party/lammps-${deb%-*}"
  if [ ! -f "$dir/src/version.h" ]; then "$here/scripts/fetch-source.sh" lammps "$deb" "$dir" >&2 || return 1; fi
  echo "$dir"
}

# googletest for LAMMPS's unit-test build, as cmake/LAMMPS.cmake packs it.
gtest_args() {
  local tarball="$checks/gtest-local.tar.gz"
  [ -f "$tarball" ] || tar -C /usr/src -czf "$tarball" googletest
  echo "-DENABLE_TESTING=on -DGTEST_URL=file://$tarball -DGTEST_MD5=$(md5sum "$tarball" | cut -d' ' -f1)"
  echo "-DGTEST_SHA256=$(sha256sum "$tarball" | cut -d' ' -f1) --no-warn-unused-cli"
}

# Kokkos for the user-route LAMMPS: the one mlip's own LAMMPS build picks (cmake/MlipKokkos.cmake).
kokkos_args() {
  local dir
  dir="$(cmake -DLAMMPS="$1" ${Kokkos_DIR:+-DKokkos_DIR="$Kokkos_DIR"} -P "$here/cmake/choose-kokkos.cmake" 2>/dev/null | grep -v "^--" || true)"
  if [ -n "$dir" ]; then echo "-DPKG_KOKKOS=on -DEXTERNAL_KOKKOS=on -DKokkos_DIR=$dir"; else echo "-DPKG_KOKKOS=off"; fi
}

# lammps_build SRC DIR EXTRA...: configures and builds a LAMMPS (shared library, MPI, exceptions,
# PLUGIN, MOLECULE) as a user would.
lammps_build() {
  local src=$1 dir=$2
  shift 2
  cmake -S "$src/cmake" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_MPI=on -DBUILD_OMP=off \
    -DBUILD_SHARED_LIBS=on -DLAMMPS_EXCEPTIONS=on -DPKG_PLUGIN=on -DPKG_MOLECULE=on -DPKG_ML-SNAP=on \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache "$@" >"$dir.configure.log" 2>&1 ||
    { tail -n 20 "$dir.configure.log" >&2; return 1; }
  local targets=(lmp)
  local all
  all="$(ninja -C "$dir" -t targets all 2>/dev/null || true)"  # captured: grep -q would break the pipe
  if grep -q '^test_pair_style:' <<<"$all"; then targets+=(test_pair_style); fi
  cmake --build "$dir" -j "$jobs" --target "${targets[@]}" >"$dir.build.log" 2>&1 ||
    { grep -m5 -E "error|Error" "$dir.build.log" >&2; return 1; }
}

# mlip_build DIR EXTRA...: mlip's build with the pair-style tests and what they need.
mlip_build() {
  local dir=$1
  shift
  cmake -S "$here" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLIP_LAMMPS_JOBS="$jobs" \
    "${torch_args[@]}" "$@" >"$dir.configure.log" 2>&1 || { tail -n 20 "$dir.configure.log" >&2; return 1; }
  grep -E "KOKKOS (on|off)|LAMMPS (source|build):|mlip: LibTorch" "$dir.configure.log" | sed 's/^-- /   /' >&2 || true
  cmake --build "$dir" -j "$jobs" --target lammps test_pair_mlip mlip_test_inputs mlipplugin >"$dir.build.log" 2>&1 ||
    { grep -m5 -E "error|Error" "$dir.build.log" >&2; return 1; }
}

check() {
  local version=$1 route=$2 src dir t0 result tests
  t0=$(date +%s)
  dir="$checks/$version-$route"
  rm -rf "$dir" "$dir".*.log
  mkdir -p "$dir"
  echo "== LAMMPS $version, route $route ($dir)"
  result=FAIL tests="-"
  if src="$(lammps_source "$version")"; then
    local ok=0
    case "$route" in
      project) mlip_build "$dir" -DLAMMPS_SOURCE_DIR="$src" ${Kokkos_DIR:+-DKokkos_DIR="$Kokkos_DIR"} && ok=1 ;;
      package)
        # mlip's LAMMPS at <dir>/lammps, as the project route puts it (ccache then shares objects).
        # shellcheck disable=SC2046
        lammps_build "$src" "$dir/lammps" -DCMAKE_PROJECT_lammps_INCLUDE="$here/cmake/lammps/MLIP.cmake" \
          -DPKG_MLIP=on "${torch_args[@]}" $(kokkos_args "$src") $(gtest_args) &&
          mlip_build "$dir" -DMLIP_LAMMPS_BUILD_DIR="$dir/lammps" && ok=1 ;;
      plugin)
        lammps_build "$src" "$dir/lammps" && mlip_build "$dir" -DMLIP_LAMMPS_BUILD_DIR="$dir/lammps" && ok=1 ;;
    esac
    if [ $ok = 1 ]; then
      (cd "$dir" && ctest -R "^(pair_mlip_np|lammps_yaml|lammps_force_style)" --no-tests=error --output-on-failure \
        --timeout 900 >"$dir.ctest.log" 2>&1) && result=PASS
      tests="$(grep -oE '[0-9]+ tests passed|[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$dir.ctest.log" | tail -n1)"
      [ $result = PASS ] || grep -E "Failed|\*\*\*" "$dir.ctest.log" | head -n 10 >&2 || true
      # All of them: pair_mlip_np1/2/4 and, but through the plugin, LAMMPS's force-style harness
      # on the three YAML cases (each with its model-writing fixture).
      local expected=9 ran
      [ "$route" = plugin ] && expected=3
      ran="$(grep -cE '^ *[0-9]+/[0-9]+ Test +#' "$dir.ctest.log" || true)"
      if [ $result = PASS ] && [ "$ran" != "$expected" ]; then
        result=FAIL
        echo "   ran $ran tests, expected $expected (was LAMMPS's force-style harness built?)" >&2
      fi
    fi
  fi
  local line
  line="$(printf '%s\t%s\t%s\t%s\t%s s' "$version" "$route" "$result" "${tests:-none run}" "$(( $(date +%s) - t0 ))")"
  echo "$line" | tee -a "$checks/results.tsv"
  [ $result = PASS ]
}

status=0
for v in "${versions[@]}"; do
  debian_version "$v" >/dev/null
  for r in "${routes[@]}"; do check "$v" "$r" || status=1; done
done
exit $status
