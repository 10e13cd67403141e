#!/usr/bin/env bash
# CPU speed of several builds of mlip side by side in one run, interleaved round by round (these
# machines are noisy: compare ratios from one run only): builds on other stacks (LibTorch and
# LAMMPS versions), or a build of an older commit (is a change no slower than before?).
#
#   benchmarks/compare_stacks.sh LABEL=BUILD_DIR [LABEL=BUILD_DIR ...]
#   e.g. benchmarks/compare_stacks.sh 2.11=build 2.15=build-2.15
#        benchmarks/compare_stacks.sh before=../old/build now=build   (old: git worktree + scripts/build.sh)
#
# STAGES ("potentials train pair") picks the stages; ROUNDS (4): each round runs every stage for
# every build, in the order given (even rounds: the reverse order), before the next round begins.
# Keep ROUNDS even, so that of two builds each runs first as often as second: on these machines the second
# of two runs of a stage was often the slower (run 2026-12-01-e8ffefa, 3 rounds: MD on 1 rank, each
# build slower in every round it ran second).
#   potentials: bench_potentials, se_e2_a and PaiNN, float64, 1536 water atoms, 1 thread.
#   train: benchmarks/bench_train.sh with PYTHON=0: mlip-trainer frames/s (1 rank x 1 thread,
#          1 rank x 2 threads, 2 ranks x 1 thread; water se_e2_a float32, batch 2).
#   pair: benchmarks/bench_pair.sh for builds with LAMMPS: SIZES (1k) water boxes on RANKS ("1 2"),
#         se_e2_a float64, its compressed model (COMPRESSED, 1) and PaiNN (PAINN, 1); FLOAT32 (0)
#         adds float32 rows; no snap or Kokkos rows. Every build runs the same model and data files,
#         written by INPUTS (default: the last build's bin/mlip_test_inputs).
# Results (lib.sh): benchmarks/results/compare_stacks/<date>-<commit>/rows.tsv, one line per
# figure (build, round, stage, run, value, unit); builds.txt: each build's source commit;
# logs.tar.xz: every run's output (logs/, packed at the end: benchmarks/results stays small).
# benchmarks/tables.py's "compare_stacks builds" table: medians
# (min-max) per build and each build's ratio to the first.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
first=${1#*=}
RESULTS_FRESH=1 bench_init compare_stacks "$first"
export OMP_NUM_THREADS=1
stages=${STAGES:-"potentials train pair"}
table=rows row build round stage run value unit

# builds.txt: each build's checkout and its commit now (the build may predate it: rebuild first)
for spec in "$@"; do
  dir=${spec#*=}
  [[ -x $dir/bin/bench_potentials && -x $dir/bin/mlip-trainer && -f $dir/CMakeCache.txt ]] ||
    { echo "compare_stacks: $dir is not a build of mlip (bin/bench_potentials, bin/mlip-trainer, CMakeCache.txt)" >&2; exit 1; }
  home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$dir/CMakeCache.txt")
  home=${home:-/nonexistent}
  echo "${spec%%=*} $dir $(git -C "$home" log -1 --format='%h %cs %<(60,trunc)%s' 2>/dev/null)$(
    [[ -z $(git -C "$home" status --porcelain --untracked-files=no 2>/dev/null) ]] || echo ' (changed files)')" \
    >>"$results/builds.txt"
done
cat "$results/builds.txt"

# figure LABEL ROUND STAGE RUN VALUE UNIT: a line of rows.tsv, and on stdout ("failed" without a value)
figure() {
  set -- "$1" "$2" "$3" "$4" "${5:-failed}" "$6"
  row "$@"
  printf '%-10s round %s %-10s %-44s %10s %s\n' "$@"
}

potentials() {
  local label=$1 dir=$2 round=$3 arch line
  for arch in se_e2_a painn; do
    "$dir/bin/bench_potentials" --arch $arch --dtype float64 --atoms 1536 --threads 1 \
      >"$results/logs/potentials-$label-$arch-$round.log" 2>&1 || true
    line=$(grep -E "^$arch " "$results/logs/potentials-$label-$arch-$round.log" | head -n1 || true)
    # bench_potentials' row: model, dtype, atoms, chunk, us/atom-step (forward and forces), ...
    figure "$label" "$round" potentials "$arch f64 1536 atoms" "$(awk '{print $5}' <<<"$line")" us/atom-step
  done
}

train() {
  local label=$1 dir=$2 round=$3 log
  log=$results/logs/train-$label-$round.log
  RESULTS=none PYTHON=0 "$src/benchmarks/bench_train.sh" "$dir" >"$log" 2>&1 || { figure "$label" "$round" train all "" -; return; }
  sed -nE 's/^mlip-trainer ([0-9] ranks? x [0-9] threads?) +([0-9.]+) .*/\1\t\2/p' "$log" |
    while IFS=$'\t' read -r run value; do figure "$label" "$round" train "$run" "$value" frames/s; done
}

pair() {
  local label=$1 dir=$2 round=$3 out=$work/pair-$1-$3
  [[ -x $dir/bin/lmp ]] || return 0
  INPUTS=$inputs RESULTS=$out SIZES=${SIZES:-1k} RANKS=${RANKS:-"1 2"} PAINN=${PAINN:-1} COMPRESSED=${COMPRESSED:-1} \
    FLOAT32=${FLOAT32:-0} SNAP=0 KOKKOS=0 CHUNKS= PAINN_CHUNKS= \
    "$src/benchmarks/bench_pair.sh" "$dir" >"$results/logs/pair-$label-$round.log" 2>&1 || true
  [[ $(wc -l <"$out/md.tsv" 2>/dev/null || echo 0) -gt 1 ]] || { figure "$label" "$round" pair all "" -; return; }
  cp -r "$out/logs" "$results/logs/pair-$label-$round"
  tail -n +2 "$out/md.tsv" | while IFS=$'\t' read -r potential atoms ranks _ _ us _; do
    figure "$label" "$round" pair "$potential, $atoms atoms, $ranks rank$([[ $ranks == 1 ]] || echo s)" "$us" us/atom-step
  done
}

last=${*: -1}
inputs=$(realpath "${INPUTS:-${last#*=}/bin/mlip_test_inputs}")
uptime
specs=("$@")
for round in $(seq "${ROUNDS:-4}"); do
  order=("${specs[@]}")
  # even rounds in the reverse order: a build is not always the one that runs first
  ((round % 2 == 1)) || for ((k = 0; k < ${#specs[@]}; ++k)); do order[k]=${specs[${#specs[@]} - 1 - k]}; done
  for stage in potentials train pair; do
    [[ " $stages " == *" $stage "* ]] || continue
    for spec in "${order[@]}"; do
      "$stage" "${spec%%=*}" "${spec#*=}" "$round"
    done
  done
done
uptime
tar -C "$results" -cJf "$results/logs.tar.xz" logs && rm -rf "$results/logs"
