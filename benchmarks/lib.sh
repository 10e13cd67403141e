# The preamble every benchmark script sources: paths, the MPI environment, a work folder, the
# results folder, and the LAMMPS inputs they share.
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   bench_init NAME "${1:-}" [PROGRAM...]      # PROGRAM: under $build/bin, must be there
#
# Sets src (the checkout), build (BUILD_DIR or $src/build), work (a fresh folder, removed at exit
# unless KEEP=1) and results (benchmarks/results/NAME/<date>-<commit>/, or $RESULTS): there go
# command.txt (the command line and the environment variables that steer the benchmarks),
# lscpu.txt, commit.txt (commit, and the changed files if the tree is not clean), date.txt, the
# script's own output (stdout.txt, stderr.txt), *.tsv (one line per measurement and repeat,
# read by benchmarks/tables.py) and logs/ (raw logs). RESULTS=none keeps nothing.

bench_init() {
  local name=$1 build_arg=${2:-}
  shift 2 || shift $#
  src=$(cd "$(dirname "${BASH_SOURCE[1]}")/.." && pwd)
  build=$(cd "${build_arg:-$src/build}" 2>/dev/null && pwd) ||
    { echo "$name: build folder ${build_arg:-$src/build} not found; build the project first" >&2; exit 1; }
  local p
  for p in "$@"; do
    [[ -x $build/bin/$p ]] || { echo "$name: $build/bin/$p not found; build the project first" >&2; exit 1; }
  done
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  work=$(mktemp -d "${TMPDIR:-/tmp}/mlip-$name.XXXXXX")
  # shellcheck disable=SC2064
  [[ ${KEEP:-0} == 1 ]] || trap "rm -rf '$work'" EXIT
  results_open "$name"
  exec > >(tee "$results/stdout.txt") 2> >(tee "$results/stderr.txt" >&2)
}

# results_open NAME: the results folder of this run (see above)
results_open() {
  local name=$1 commit dirty=""
  if [[ ${RESULTS:-} == none ]]; then
    results=$work/results
  else
    commit=$(git -C "$src" rev-parse --short=7 HEAD 2>/dev/null || echo nogit)
    [[ -z $(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null) ]] || dirty=-dirty
    results=${RESULTS:-$src/benchmarks/results/$name/$(date +%F)-$commit$dirty}
  fi
  # RESULTS_FRESH=1 (scripts whose tables one run must fill alone): a folder with a table already
  # is left as it is
  if [[ ${RESULTS_FRESH:-0} == 1 ]] && compgen -G "$results/*.tsv" >/dev/null; then
    echo "$name: $results already holds a run; set RESULTS to another folder" >&2
    exit 1
  fi
  mkdir -p "$results/logs"
  {
    echo "$BENCH_COMMAND"
    env | grep -E '^(SIZES|RANKS|STEPS|MD_STEPS|REPEATS|THREADS|MINUTES|TRAIN|TRAIN_STEPS|MD|MD_ATOMS|CHUNKS?|SNAP|KOKKOS|PAINN|PAINN_TARGET|FLOAT32|FLOAT32_SIZES|COMPRESSED|SE_E2A|DEVICE|DTYPE|LAYOUTS|MACE_THREADS|MACE_CALLS|MD_REPEATS|MACE_ROUTES|CUDA_GRAPH|BATCH|PARTS|WALL_MINUTES|ACC_FRAMES|MACE_RATE|CHANNELS|EPOCHS|TRAIN_FRAMES|LAYERS|FEATURES|OPTIONS|PATHS|DTYPES|FRAMES|SMALL|SMALL_RUNS|LABEL_MINUTES|SKIP|SET|BATCHES|RULES|WINDOWS|TIMING|GRAPH|REPEAT_FROM|ROUNDS|STAGES|INPUTS|OMP_NUM_THREADS)=' | sort || true  # none set: not an error (set -e callers)
  } > "$results/command.txt"
  lscpu > "$results/lscpu.txt" 2>/dev/null || true
  { git -C "$src" log -1 --format='%H %cs %s' 2>/dev/null; git -C "$src" status --short --untracked-files=no 2>/dev/null; } > "$results/commit.txt"
  date -u +%FT%TZ > "$results/date.txt"
  echo "$name" > "$results/benchmark.txt"
  echo "$name: results go to $results" >&2
}

# BENCH_COMMAND: how the script was called, for command.txt (set before bench_init)
BENCH_COMMAND="${BASH_SOURCE[1]#"$(pwd)"/} $*"

# row FIELD...: one tab-separated line of $results/$table.tsv (table: "rows" unless set; the
# first line of each file is its header)
row() {
  local IFS=$'\t'
  echo "$*" >> "$results/${table:-rows}.tsv"
}

# keep_log FILE [NAME]: a raw log into the results (logs/NAME)
keep_log() {
  cp "$1" "$results/logs/${2:-$(basename "$1")}" 2>/dev/null || true
}

# us_per_atom_step LOG: wall us/atom-step of LAMMPS's MD loop ("Loop time", setup excluded)
us_per_atom_step() {
  awk '/^Loop time of/ { t = $4; s = $9; n = $12 } END { if (t == "") exit 1; printf "%.4g", 1e6 * t / (s * n) }' "$1"
}

# water_md_input FILE: the NVE water input the MD benchmarks share, with the variables data
# (a LAMMPS data file of O H water), load (a LAMMPS command before pair_style, such as
# "plugin load ..."; the no-op default of water_md_vars), pair (the pair_style arguments), steps and
# dt (the timestep in ps, 0.0005 unless given)
water_md_input() {
  cat > "$1" <<'EOF'
units        metal
atom_style   atomic
atom_modify  map array
newton       on
read_data    ${data}
mass         1 15.999
mass         2 1.008
${load}
pair_style   ${pair}
pair_coeff   * * O H
neighbor     1.0 bin
neigh_modify every 1 delay 0 check yes
velocity     all create 300.0 4928459 loop geom
variable     dt index 0.0005
timestep     ${dt}
fix          1 all nve
thermo       100
run          ${steps}
EOF
}

# water_md_vars DATA "PAIR" STEPS [LOAD]: the -var arguments of water_md_input, in the array md_vars
water_md_vars() {
  md_vars=(-var data "$1" -var pair "$2" -var steps "$3" -var load "${4:-variable none index 0}")
}

# median_of VALUES...: the median (the mean of the middle two for an even count)
median_of() {
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
