#!/usr/bin/env bash
# Training on a data set larger than memory: a synthetic water set of FRAMES frames (1000000,
# about 10 GB packed) made by benchmarks/make_water_set.py (labels from a model trained here),
# packed, verified, and trained on streamed, on 1 and 2 ranks; and the same model on a set that
# fits in memory (SMALL frames), in memory and streamed from its pack (with and without
# prefetching), side by side.
#
#   benchmarks/bench_stream.sh [BUILD_DIR]            (default: <repo>/build)
#
# Each training run is examples/configs/water-se_e2_a.yaml (se_e2_a float32, rc 5, batch 2
# frames, 1 thread per rank) for training.max_minutes = MINUTES (1), validated on 200 other
# frames, with a progress line per step (output.log_every 1), run under benchmarks/timed_lines.py
# which stamps each line with the seconds since the start and records the peak RSS (the largest
# rank). Figures per run:
#   first_step_s     from the command's start to the first step's line (process start, data,
#                    statistics and model set-up included)
#   frames_per_s     steady state: frames of the steps after step SKIP (20) over their time
#   peak_rss_mib     the largest resident set of any rank
# and for `pack` and `pack --verify`: seconds, frames/s, MB/s, peak RSS.
#
# Environment: FRAMES (1000000; 0: the small set's runs alone), SMALL (5000), MINUTES (1), LABEL_MINUTES (1.5: the labelling
# model's training), SKIP (20), SMALL_RUNS ("memory streamed streamed-noprefetch": the small
# set's runs, in this order each repeat; also "memory-unbound streamed-unbound": under
# `mpirun --bind-to none`, where Open MPI's default binds the rank to one core, which its prefetch
# thread then shares with its training thread; also "paired": memory and streamed at the same time,
# each process held to a core of its own by taskset (the cores swap each repeat), so that both
# see the same state of the machine over the same minute), REPEATS (3: the training runs,
# round-robin), RANKS ("1 2": the big set's runs), SET (where the generated data and packs go;
# default: the work folder, removed at exit unless KEEP=1; needs about 2.1 x 10 GB free).
# Results: benchmarks/results/bench_stream/<date>-<commit>/: pack.tsv, train.tsv, logs/.
# The machine must be otherwise idle: every figure here is a rate over wall time.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init bench_stream "${1:-}" mlip-trainer
FRAMES=${FRAMES:-1000000}
SMALL=${SMALL:-5000}
MINUTES=${MINUTES:-1}
REPEATS=${REPEATS:-3}
RANKS=${RANKS:-"1 2"}
SKIP=${SKIP:-20}
SMALL_RUNS=${SMALL_RUNS:-"memory streamed streamed-noprefetch"}
LABEL_MINUTES=${LABEL_MINUTES:-1.5}
SET=${SET:-$work/set}
trainer=$build/bin/mlip-trainer
py=$(ls "$src"/third_party/torch-*/bin/python3 2>/dev/null | head -1 || echo python3)
timed() { python3 "$src/benchmarks/timed_lines.py" "$@"; }
mkdir -p "$SET"
cd "$work"

echo "== the labelling model: water-se_e2_a.yaml, $LABEL_MINUTES minutes on data/water-deepmd" >&2
"$trainer" train "$src/examples/configs/water-se_e2_a.yaml" --threads 2 --set training.max_minutes="$LABEL_MINUTES" \
  --set output.dir="$work/label" --set data.cache_dir="$work/cache" --set output.log_every=0 \
  --set "data.train=[$src/data/water-deepmd]" > label.log 2>&1 || { tail -20 label.log >&2; exit 1; }
keep_log label.log

echo "== the data: $FRAMES + $SMALL + 200 frames" >&2
((FRAMES == 0)) || "$py" "$src/benchmarks/make_water_set.py" --trainer "$trainer" --model label/model.pt --frames "$FRAMES" --out "$SET/big"
"$py" "$src/benchmarks/make_water_set.py" --trainer "$trainer" --model label/model.pt --frames "$SMALL" \
  --per-system "$SMALL" --seed 2 --out "$SET/small"
"$py" "$src/benchmarks/make_water_set.py" --trainer "$trainer" --model label/model.pt --frames 200 --seed 3 --out "$SET/valid"
"$trainer" pack "$SET"/small/sys-* -o "$SET/small.pack" > /dev/null
"$trainer" pack "$SET"/valid/sys-* -o "$SET/valid.pack" > /dev/null

if ((FRAMES > 0)); then
echo "== pack and verify the big set" >&2
table=pack row step frames seconds frames_per_s mb_per_s peak_rss_mib
timed pack.log "$trainer" pack "$SET"/big/sys-* -o "$SET/big.pack"
keep_log pack.log
awk -v rss="$(awk '/^maxrss_kib/ {print $2}' pack.log)" '/ wrote / {
  for (i = 1; i <= NF; i++) { if ($i == "added" && $(i+1) == "in") s = $(i+2); if ($i ~ /^\(/) f = substr($i, 2); if ($i == "MB/s") m = $(i-1) }
  n = $4; printf "pack\t%s\t%s\t%s\t%s\t%.0f\n", n, s, f, m, rss / 1024 }' pack.log >> "$results/pack.tsv"
timed verify.log "$trainer" pack --verify "$SET/big.pack"
keep_log verify.log
bytes=$(du -sb "$SET/big.pack" | cut -f1)
awk -v bytes="$bytes" -v frames="$FRAMES" '/^maxrss_kib/ {rss = $2} $1 ~ /^[0-9.]+$/ { t = $1 } END {
  printf "verify\t%s\t%s\t%.0f\t%.1f\t%.0f\n", frames, t, frames / t, bytes / 1e6 / t, rss / 1024 }' verify.log >> "$results/pack.tsv"
echo "big.pack: $bytes bytes" >&2
du -sb "$SET/big" "$SET/big.pack" | tee "$results/sizes.txt" >&2
fi

# train NAME RANKS DATA [ARG...]: one run; its row into train.tsv
table=train row set mode ranks repeat frames first_step_s frames_per_s peak_rss_mib
# (set `core` to run it under taskset -c $core, with mpirun --bind-to none)
train() {
  local name=$1 ranks=$2 data=$3 log=train-$1-$2-r$rep.log
  shift 3
  rm -rf "$work/run-$name"
  timed "$log" ${core:+taskset -c "$core"} mpirun --oversubscribe ${bind:+--bind-to "$bind"} -np "$ranks" "$trainer" train \
    "$src/examples/configs/water-se_e2_a.yaml" \
    --threads 1 --set training.max_minutes="$MINUTES" --set training.epochs=1000000 --set output.log_every=1 \
    --set output.dir="$work/run-$name" --set data.cache_dir="$work/cache" --set "data.train=[$data]" \
    --set "data.validation=[$SET/valid.pack]" "$@" || { tail -20 "$log" >&2; exit 1; }
  keep_log "$log"
  awk -v skip="$SKIP" -v set="${name%%-*}" -v mode="${name#*-}" -v ranks="$ranks" -v rep="$rep" '
    $2 == "epoch" && $4 == "step" { s = $5; t = $1; if (first == "") first = t; if (s >= skip && s0 == "") { s0 = s; t0 = t } last_s = s; last_t = t }
    /data: [0-9]+ training/ { n = $3 }
    /^maxrss_kib/ { rss = $2 }
    END { printf "%s\t%s\t%s\t%s\t%s\t%.2f\t%.2f\t%.0f\n", set, mode, ranks, rep, n, first, 2 * (last_s - s0) / (last_t - t0), rss / 1024 }' \
    "$log" | tee -a "$results/train.tsv" >&2
}
for rep in $(seq "$REPEATS"); do
  echo "== training, repeat $rep of $REPEATS" >&2
  for mode in $SMALL_RUNS; do
    case $mode in
      memory) train small-memory 1 "{path: $SET/small, format: deepmd}" ;;
      streamed) train small-streamed 1 "$SET/small.pack" ;;
      streamed-noprefetch) train small-streamed-noprefetch 1 "$SET/small.pack" --set data.prefetch=0 ;;
      memory-unbound) bind=none train small-memory-unbound 1 "{path: $SET/small, format: deepmd}" ;;
      streamed-unbound) bind=none train small-streamed-unbound 1 "$SET/small.pack" ;;
      paired)
        a=$((rep % 2)) b=$((1 - rep % 2))
        bind=none core=$a train small-memory-paired 1 "{path: $SET/small, format: deepmd}" &
        p1=$!
        bind=none core=$b train small-streamed-paired 1 "$SET/small.pack" &
        p2=$!
        rc=0
        wait $p1 || rc=1
        wait $p2 || rc=1
        ((rc == 0)) || exit 1 ;;
      *) echo "bench_stream.sh: SMALL_RUNS: unknown run '$mode'" >&2; exit 1 ;;
    esac
  done
  ((FRAMES == 0)) || for np in $RANKS; do train big-streamed "$np" "$SET/big.pack"; done
done
python3 "$src/benchmarks/tables.py" "$results" 2>/dev/null || true
