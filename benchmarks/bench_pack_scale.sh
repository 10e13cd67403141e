#!/usr/bin/env bash
# What a streamed training run holds and how soon it starts, against the number of frames in its
# pack: the same model on a pack of BASE tiny frames and on a pack of those frames COPIES times
# over (default 20,000 and 500: 10^7 frames), side by side, REPEATS times each.
#
#   benchmarks/bench_pack_scale.sh [BUILD_DIR]            (default: <repo>/build)
#
# The frames (benchmarks/make_tiny_set.py): one water molecule each in a 9 A periodic box,
# labelled by a harmonic model; a measure of memory and start-up, not of accuracy. Each run is
# examples/configs/water-se_e2_a.yaml with 1 thread (THREADS) on 1 rank for training.max_minutes = MINUTES
# (0.5), validated on 200 of the pack's frames (data.validation_fraction: the split of a pack,
# as a permutation), under benchmarks/timed_lines.py. Figures per run:
#   first_step_s     from the command's start to the first step's line
#   frames_per_s     steady state: frames of the steps after step SKIP (20) over their time
#   peak_rss_mib     the trainer's largest resident set
# and for each `pack`: seconds, frames/s and the pack's size.
# Options (environment):
#   BATCH_ATOMS=N   batches by atoms (data.batch.atoms = N) instead of 2 frames
#   V1=1            also train on each pack as format version 1 (benchmarks/pack_to_v1.py: the
#                   same shards, indexes without atom counts), rows "NAME-v1"
#   COLD=1          drop the page cache before each training run (needs root; says so if not)
#   THREADS=N       --threads N (1); above 1 the rank is not bound to a core (mpirun --bind-to
#                   none), so that its threads can use others
#   BASELINE=DIR    also train on each pack with DIR/bin/mlip-trainer (another build, e.g. of an
#                   older commit), right after this build's run of it, rows "NAME-baseline"
# Results: benchmarks/results/bench_pack_scale/<date>-<commit>/: pack.tsv, train.tsv, logs/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init bench_pack_scale "${1:-}" mlip-trainer
[ -z "${BASELINE:-}" ] || [ -x "$BASELINE/bin/mlip-trainer" ] ||
  { echo "bench_pack_scale: BASELINE=$BASELINE: no bin/mlip-trainer there" >&2; exit 1; }
BASE=${BASE:-20000}
COPIES=${COPIES:-500}
MINUTES=${MINUTES:-0.5}
REPEATS=${REPEATS:-3}
BATCH_ATOMS=${BATCH_ATOMS:-}
V1=${V1:-0}
COLD=${COLD:-0}
BASELINE=${BASELINE:-}
THREADS=${THREADS:-1}
SKIP=${SKIP:-20}
trainer=$build/bin/mlip-trainer
py=$(ls "$src"/third_party/torch-*/bin/python3 2>/dev/null | head -1 || echo python3)
timed() { python3 "$src/benchmarks/timed_lines.py" "$@"; }
cd "$work"

echo "== the frames: $BASE" >&2
"$py" "$src/benchmarks/make_tiny_set.py" --frames "$BASE" --seed 1 --out base.xyz

table=pack row name frames seconds frames_per_s bytes
pack() {
  local name=$1 log=pack-$1.log
  shift
  timed "$log" "$trainer" pack "$@" -o "$name.pack" || { tail -5 "$log" >&2; exit 1; }
  keep_log "$log"
  awk -v name="$name" -v bytes="$(du -sb "$name.pack" | cut -f1)" '/ wrote / {
    for (i = 1; i <= NF; i++) { if ($i == "added" && $(i+1) == "in") s = $(i+2); if ($i ~ /^\(/) f = substr($i, 2) }
    printf "%s\t%s\t%s\t%s\t%s\n", name, $4, s, f, bytes }' "$log" | tee -a "$results/pack.tsv" >&2
}
echo "== pack them, then the pack $COPIES times over" >&2
pack base base.xyz
pack copies $(for ((k = 0; k < COPIES; ++k)); do echo base.pack; done)
packs="base copies"
if [ "$V1" = 1 ]; then
  for p in base copies; do python3 "$src/benchmarks/pack_to_v1.py" "$p.pack" "$p-v1.pack"; done
  packs="base base-v1 copies copies-v1"
fi
batch=(--set data.batch.frames=2)
[ -z "$BATCH_ATOMS" ] || batch=(--set data.batch.atoms="$BATCH_ATOMS")
cold() {
  [ "$COLD" = 1 ] || return 0
  sync
  echo 3 2>/dev/null >/proc/sys/vm/drop_caches || { echo "COLD=1: cannot drop the page cache (not root?)" >&2; exit 1; }
}

table=train row pack frames repeat first_step_s frames_per_s peak_rss_mib
train() {
  local name=$1 frames=$2 log=train-$1-r$rep.log
  rm -rf run
  cold
  timed "$log" mpirun -np 1 $( ((THREADS == 1)) || echo --bind-to none) "${use_trainer:-$trainer}" train "$src/examples/configs/water-se_e2_a.yaml" \
    --threads "$THREADS" "${batch[@]}" --set training.max_minutes="$MINUTES" --set training.epochs=1000000 --set output.log_every=1 \
    --set output.dir=run --set "data.train=[$work/${name%-baseline}.pack]" --set data.validation_fraction="$(awk -v n="$frames" 'BEGIN { printf "%.10g", 200 / n }')" ||
    { tail -20 "$log" >&2; exit 1; }
  keep_log "$log"
  awk -v skip="$SKIP" -v name="$name" -v rep="$rep" '
    $2 == "epoch" && $4 == "step" { s = $5; t = $1; if (first == "") first = t; if (s >= skip && s0 == "") { s0 = s; t0 = t } last_s = s; last_t = t }
    /data: [0-9]+ training/ { n = $3 }
    /^maxrss_kib/ { rss = $2 }
    END { printf "%s\t%s\t%s\t%.2f\t%.1f\t%.0f\n", name, n, rep, first, 2 * (last_s - s0) / (last_t - t0), rss / 1024 }' \
    "$log" | tee -a "$results/train.tsv" >&2
}
for rep in $(seq "$REPEATS"); do
  echo "== training, repeat $rep of $REPEATS" >&2
  for p in $packs; do
    frames=$BASE
    case $p in copies*) frames=$((BASE * COPIES)) ;; esac
    train "$p" "$frames"
    [ -z "$BASELINE" ] || use_trainer=$BASELINE/bin/mlip-trainer train "$p-baseline" "$frames"
  done
done
python3 "$src/benchmarks/tables.py" "$results" 2>/dev/null || true
