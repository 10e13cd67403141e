#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] [TARGET...]: builds the libFuzzer targets (tests/fuzz: fuzz_extxyz,
# fuzz_npy, fuzz_n2p2, fuzz_fitsnap, fuzz_pack, fuzz_config, fuzz_metadata) with clang, ASan and UBSan into
# build-fuzz/, seeds each corpus from data/ and examples/, and runs each target for SECONDS
# (default 60). Bad input may only end in mlip::Error: a crash, another exception, a hang (10 s)
# or a sanitizer report stops that target, leaves the input in build-fuzz/crashes/, and makes
# the script fail. Corpora grow in build-fuzz/corpus/ from run to run.
# Installs clang and its fuzzer runtime (Debian packages) when missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$here/build-fuzz"
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_extxyz fuzz_npy fuzz_n2p2 fuzz_fitsnap fuzz_pack fuzz_config fuzz_metadata)
say() { echo "[fuzz] $*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# clang with libFuzzer
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/f.cpp"
if ! clang++ -fsanitize=fuzzer "$probe/f.cpp" -o "$probe/f" 2>/dev/null; then
  say "installing clang and its fuzzer runtime"
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends clang >/dev/null
  version="$(clang++ --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)"
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "libclang-rt-$version-dev" >/dev/null
  clang++ -fsanitize=fuzzer "$probe/f.cpp" -o "$probe/f" || { say "clang cannot build a libFuzzer target"; exit 1; }
fi

export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$here}"
if [ ! -f "$build/build.ninja" ]; then
  mkdir -p "$build"
  CC=clang CXX=clang++ cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMLIP_FUZZ=ON \
    -DMLIP_BUILD_LAMMPS=OFF -DMLIP_BUILD_TESTS=OFF >"$build/configure.log" 2>&1 ||
    { tail -20 "$build/configure.log"; exit 1; }
fi
cmake --build "$build" --target "${targets[@]}" -j "${MLIP_JOBS:-$(nproc)}"

# Seeds: small valid inputs of each kind from the repository.
seed() {  # TARGET FILE...: copies the files into the target's corpus
  local dir="$build/corpus/$1"
  shift
  mkdir -p "$dir"
  local f
  for f in "$@"; do cp "$f" "$dir/seed-$(basename "$(dirname "$f")")-$(basename "$f")"; done
}
mkdir -p "$build/seeds"
head -n 22 "$here/data/ethanol-rmd17/rmd17_ethanol_1000.xyz" >"$build/seeds/ethanol2.xyz"
seed fuzz_extxyz "$build/seeds/ethanol2.xyz"
seed fuzz_npy "$here"/data/water-deepmd/data_0/set.000/{box,energy}.npy
awk '/^begin/ {n++} n == 1 {print} /^end/ && n == 1 {exit}' "$here/data/cu2s-n2p2/input.data" >"$build/seeds/one.data"
seed fuzz_n2p2 "$build/seeds/one.data"
seed fuzz_fitsnap $(ls "$here"/data/ta-fitsnap/JSON/*/*.json | head -3)
# A pack of two frames (byte 0: 2 frames; the second's offset; the shard: docs/data-format.md).
python3 - "$build/seeds/two-frames.pack" <<'PY'
import struct, sys
def record(frame, numbers, flags=1 | 2 | 8 | 16 | 32):
    n = len(numbers)
    head = b"MLFR" + struct.pack("<IIIQQdd9d9d", n, flags, 0, frame, frame, -10.0 - frame, 1.0,
                                 *(8, 0, 0, 0, 8, 0, 0, 0, 8), *([0.0] * 9))
    zs = struct.pack("<%di" % n, *numbers) + b"\0" * (-4 * n % 8)
    pos = struct.pack("<%dd" % (3 * n), *[0.7 * i for i in range(3 * n)])
    return head + zs + pos + pos
a, b = record(0, [8, 1, 1]), record(1, [1, 1])
open(sys.argv[1], "wb").write(bytes([1]) + struct.pack("<Q", len(a)) + a + b)
# The same in format version 2 (byte 0's bit 6): the index's atom counts follow the offset.
open(sys.argv[1] + "2", "wb").write(bytes([1 | 0x40]) + struct.pack("<QII", len(a), 3, 2) + a + b)
PY
seed fuzz_pack "$build/seeds/two-frames.pack" "$build/seeds/two-frames.pack2"
seed fuzz_config "$here"/examples/configs/*.yaml "$here/tests/trainer/two-ranks.yaml"
python3 - "$here/tests/data/libtorch-1.13" "$build/seeds" <<'PY'
import pathlib, sys, zipfile
for pt in sorted(pathlib.Path(sys.argv[1]).glob("*.pt")):
    with zipfile.ZipFile(pt) as z:
        for name in z.namelist():
            if name.endswith("extra/mlip/metadata.json"):
                (pathlib.Path(sys.argv[2]) / (pt.stem + ".json")).write_bytes(z.read(name))
PY
seed fuzz_metadata "$build"/seeds/*.json

failed=()
mkdir -p "$build/crashes"
for t in "${targets[@]}"; do
  say "$t: $seconds s"
  log="$build/$t.log"
  if "$build/bin/$t" "$build/corpus/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
      -print_final_stats=1 -artifact_prefix="$build/crashes/$t-" >"$log" 2>&1; then
    say "$t: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') inputs, no finding; corpus $(ls "$build/corpus/$t" | wc -l) files"
  else
    failed+=("$t")
    say "$t: FINDING (see $log and $build/crashes/):"
    grep -m5 -E 'ERROR|runtime error|terminate|what\(\)' "$log" >&2 || tail -5 "$log" >&2
  fi
done
[ ${#failed[@]} -eq 0 ] || { say "findings in: ${failed[*]}"; exit 1; }
