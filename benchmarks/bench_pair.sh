#!/usr/bin/env bash
# Speed and memory of pair_style mlip in LAMMPS, side by side with pair_style snap.
#
#   benchmarks/bench_pair.sh [BUILD_DIR]          (default: <repo>/build)
#
# mlip: the se_e2_a water model with default hyperparameters (rc 6 A, embedding 25-50-100,
# axis 16, fitting 240x3; tests/support/test_models.h "se_e2_a_water64"/"...32") and random
# weights - the cost does not depend on the weight values - on liquid water (frame 0 of
# data/water-deepmd/data_0, 192 atoms, replicated to 1152, 10368 and 98304 atoms).
# snap: W_2940_2017_2 (+ ZBL) from LAMMPS's examples/snap on bcc W, 1024, 9826 and 101306 atoms.
# Each run is NVE from 300 K velocities, 1 thread per MPI rank (OMP_NUM_THREADS=1; THREADS below).
#
# Reported per run: wall us/atom-step of the MD loop (LAMMPS's "Loop time"; setup excluded), the
# part of it outside the pair style ("LAMMPS": neighbour lists, communication, integration), the
# pair style's own split (`pair_style mlip ... timing yes`: graph building, model call, force
# scatter; us/atom-step averaged over ranks), the peak resident memory of the largest rank (the
# largest ru_maxrss among mpirun's descendants, as GNU time's %M reports it, read with python3's
# getrusage: benchmarks/peak_rss.py; "-" without python3) and, with DEVICE, the peak GPU memory
# in use (nvidia-smi sampled every 100 ms, less what was in use before the run; "-" without it). A run that fails gives a row saying so
# with LAMMPS's ERROR line, and the script goes on; it exits 1 at the end if any run failed.
#
# Environment: SIZES ("1k 10k 100k"), RANKS ("1 2"), CHUNKS ("64 256 1024 4096": scanned on the
# SCAN_SIZE (10k) water box, 1 rank, SCAN_STEPS (3) steps), CHUNK (chunk for the main runs; default: the pair style's default),
# FLOAT32 (1: also the float32 model at the FLOAT32_SIZES, default 10k), KOKKOS (1: also pair_style mlip/kk, run with
# -k on t 1 -sf kk, next to each mlip float64 run), SNAP (0: no snap runs), KEEP (1: keep the work
# directory), REPEATS (1: how many times the main runs go round, each round through every run
# before the next). WINDOWS (1; up to 5: each main run times that many windows of its steps, one
# after the other in one LAMMPS run: a row each, in md.tsv as repeats; the GPU check's medians of 3
# within one call of the device tool). SIZES may include 1m (about a million atoms, one step: the memory bound).
# PAINN (1: also the message-passing model, PaiNN with default hyperparameters - 64 features,
# 2 layers, rc 5 A, "painn_water64" - at every size but 1m, default chunk; and PAINN_CHUNKS
# ("16 64 128 256 all") scanned on the 1k box, 1 rank; "all": one model call per step).
# PAINN_TARGET (0; 1: also issue 54's PaiNN, 32 features, 3 layers, rc 5 A, float32, random weights,
# "painn_water32_l3", at the same sizes and steps as PAINN's but steps of 0.1 fs, labelled
# "painn 32f 3L f32").
# MACE (0; 1: also two MACE models at every size but 1m, random weights, rc 5 A: mace-torch's defaults but 32
# channels and max_L 1 in float64 - bench_mace.sh's model - and 128 channels, max_L 2 in float32;
# MACE_MODELS ("32 128") picks among them).
# SEL (0; 1: also se_e2_a float64 with DeePMD-kit's water sel [46, 92] - the shifted environment,
# its empty slots added by padding() - next to each float64 run, and compressed where COMPRESSED;
# random weights and unfitted statistics, 'se_e2_a@6:{"sel":[46,92]}').
# COMPRESSED_SCAN (1: the chunk scan runs the compressed model; needs COMPRESSED=1).
# COMPRESSED (1: also the compressed se_e2_a, `mlip-trainer compress`, tables down to 0.3 A, next
# to each float64 run, and in float32 where FLOAT32 runs).
# DEVICE (cuda, cuda:N or auto: pair_style mlip runs its model there, 'device DEVICE'; the mlip
# rows are labelled with it; scripts/gpu-check.sh uses it). CUDA_GRAPH (1, with DEVICE: also each
# se_e2_a run, float64 and float32, with 'cuda_graph yes', the model call recorded as a CUDA graph, next
# to it, and PaiNN's with 'exchange no cuda_graph yes' where the graph is the host's; only: those runs alone; eager: those runs alone with 'cuda_graph eager', the same padded path
# unrecorded, on any device). GRAPH (host; device: every mlip run with 'graph device', the graph built
# on the model's device; with CUDA_GRAPH the whole step recorded as one CUDA graph, PaiNN's (PAINN,
# PAINN_TARGET) too, each chunk with its halo).
# MLIP_KERNELS (usual; aten or device: the operators' formulation, named in the mlip rows' labels).
# THREADS (LibTorch threads per rank, OMP_NUM_THREADS; default 1). MD_STEPS ("10k=50 100k=20": MD
# steps per size instead of the defaults below). SE_E2A (0: no
# plain se_e2_a float64 rows, for runs of the other rows alone). ROWS_OUT (a file each row is
# appended to the moment it is measured; scripts/gpu-check.sh points it into $OUT). LOGS (a
# folder each run's LAMMPS log is copied to). TIMING (yes; kernels: the main runs with `timing kernels`,
# LibTorch's profiler over their steps but the first, its table in their logs: slower, for where
# the time goes, not for the figures).
# INPUTS (the mlip_test_inputs that writes the models and data files; default: the build's; another
# build's, so that builds compared side by side run the same files: benchmarks/compare_stacks.sh).
# Results: benchmarks/results/bench_pair/<date>-<commit>/ (lib.sh; RESULTS=none: none): md.tsv and
# scan.tsv, one line per run and repeat, logs/; benchmarks/tables.py makes the docs' tables of them.
# Machines here are noisy: compare figures taken in one run, and check `uptime` before trusting.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init bench_pair "${1:-}" lmp
lmp=$build/bin/lmp
inputs=${INPUTS:-$build/bin/mlip_test_inputs}
[[ -x $inputs ]] || { echo "bench_pair: $inputs not found; build the project with its tests first (or set INPUTS)" >&2; exit 1; }
snap_dir=$(ls -d "$src"/third_party/lammps-*/examples/snap 2>/dev/null | head -1 || true)
if [[ ${SNAP:-1} == 1 && -z $snap_dir ]]; then
  echo "bench_pair.sh: no LAMMPS examples/snap under third_party/ (SNAP=0 runs without snap)" >&2
  exit 1
fi

SIZES=${SIZES:-"1k 10k 100k"}
RANKS=${RANKS:-"1 2"}
CHUNKS=${CHUNKS-"64 256 1024 4096"}   # set but empty: no chunk scan
SCAN_SIZE=${SCAN_SIZE:-10k}
SCAN_STEPS=${SCAN_STEPS:-3}
CHUNK=${CHUNK:-}
FLOAT32=${FLOAT32:-1}
FLOAT32_SIZES=${FLOAT32_SIZES:-10k}
KOKKOS=${KOKKOS:-1}
SNAP=${SNAP:-1}
PAINN=${PAINN:-1}
PAINN_TARGET=${PAINN_TARGET:-0}
MACE=${MACE:-0}
MACE_MODELS=" ${MACE_MODELS:-32 128} "
COMPRESSED=${COMPRESSED:-1}
SEL=${SEL:-0}
PAINN_CHUNKS=${PAINN_CHUNKS-"16 64 128 256 all"}
REPEATS=${REPEATS:-1}
WINDOWS=${WINDOWS:-1}
rep=1
table=scan
lmp_extra=()    # extra LAMMPS command-line arguments of the next run()
export OMP_NUM_THREADS=${THREADS:-1} OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# replication of the 192-atom water frame, bcc cells per side, and MD steps per size
# (1m: 998784 water atoms and 986078 W atoms, for the memory bound: SIZES=1m RANKS=1)
declare -A water_reps=([1k]="3 2 1" [10k]="6 3 3" [100k]="8 8 8" [1m]="18 17 17")
declare -A bcc_cells=([1k]=8 [10k]=17 [100k]=37 [1m]=79)
declare -A mlip_steps=([1k]=10 [10k]=10 [100k]=2 [1m]=1)
declare -A snap_steps=([1k]=20 [10k]=5 [100k]=2 [1m]=1)
declare -A painn_steps=([1k]=3 [10k]=1 [100k]=1)
for kv in ${MD_STEPS:-}; do
  [[ $kv == *=* && -n ${water_reps[${kv%%=*}]:-} ]] || { echo "bench_pair.sh: MD_STEPS: '$kv' is not SIZE=STEPS" >&2; exit 1; }
  mlip_steps[${kv%%=*}]=${kv#*=}
  snap_steps[${kv%%=*}]=${kv#*=}
  painn_steps[${kv%%=*}]=${kv#*=}
done
SE_E2A=${SE_E2A:-1}
ROWS_OUT=${ROWS_OUT:-}
LOGS=${LOGS:-}
[[ -z $LOGS ]] || mkdir -p "$LOGS"
failed=0

header_tsv=(potential atoms ranks repeat steps us_per_atom_step non_pair graph model forces peak_rss_mib peak_gpu_mib)
table=scan row "${header_tsv[@]}"
table=md row "${header_tsv[@]}"
cd "$work"
"$inputs" model se_e2_a_water64 water64.pt
"$inputs" model se_e2_a_water32 water32.pt
[[ $PAINN == 1 ]] && "$inputs" model painn_water64 painn64.pt
[[ $SEL == 1 ]] && "$inputs" model 'se_e2_a@6:{"sel":[46,92]}' water64sel.pt
[[ $PAINN_TARGET == 1 ]] && "$inputs" model painn_water32_l3 painn32f3l.pt
if [[ $MACE == 1 ]]; then
  "$inputs" model 'mace@5:{"num_channels":32,"max_L":1,"max_ell":3,"correlation":3}' mace32ch.pt
  "$inputs" model 'mace@5:{"num_channels":128,"max_L":2,"max_ell":3,"correlation":3}/f32' mace128ch.pt
fi
if [[ $COMPRESSED == 1 ]]; then
  for p in 64 32; do
    "$build/bin/mlip-trainer" compress water$p.pt -o water${p}c.pt --min-distance 0.3 >&2
  done
  if [[ $SEL == 1 ]]; then "$build/bin/mlip-trainer" compress water64sel.pt -o water64selc.pt --min-distance 0.3 >&2; fi
fi
[[ $SNAP == 1 ]] && cp "$snap_dir"/W_2940_2017_2.snap "$snap_dir"/W_2940_2017_2.snapcoeff "$snap_dir"/W_2940_2017_2.snapparam .

# The same NVE run for every potential.
cat > in.md <<'EOF'
neighbor     1.0 bin
neigh_modify every 1 delay 0 check yes
velocity     all create 300.0 4928459 loop geom
timestep     0.0005
fix          1 all nve
thermo       100
run          ${steps}
EOF
# add_windows FILE: WINDOWS' further timing windows of the same length, one after the other in
# the same LAMMPS run (the variable 'windows', 1 unless given)
add_windows() {
  echo "variable     windows index 1" >>"$1"
  local w
  for w in 2 3 4 5; do echo "if \"\${windows} >= $w\" then \"run \${steps}\"" >>"$1"; done
}
add_windows in.md

# mlip: the water input every MD benchmark shares (lib.sh), with this script's variables.
water_md_input in.water
add_windows in.water
cat > in.mlip <<'EOF'
variable     pair string "mlip ${model} ${options}"
variable     load string "variable none index 0"
include      in.water
EOF

cat > in.snap <<'EOF'
units        metal
atom_style   atomic
lattice      bcc 3.1803
region       box block 0 ${n} 0 ${n} 0 ${n}
create_box   1 box
create_atoms 1 box
mass         1 183.84
include      W_2940_2017_2.snap
include      in.md
EOF

rows=()
# add_row ROW: a table row, also appended to ROWS_OUT at once and, with the repeat, to $table.tsv
add_row() {
  rows+=("$1")
  echo "$1" >&2
  if [[ -n $ROWS_OUT ]]; then echo "$1" >>"$ROWS_OUT"; fi
  local fields
  IFS='|' read -ra fields <<< "${1#|}"
  fields=("${fields[@]/# /}")
  fields=("${fields[@]/% /}")
  row "${fields[0]}" "${fields[1]}" "${fields[2]}" "$rep" "${fields[@]:3}"
}
# gpu_sampler FILE: samples the GPU memory in use into FILE until killed (nothing without nvidia-smi)
gpu_sampler() {
  if [[ -n $DEVICE ]] && command -v nvidia-smi >/dev/null; then
    exec nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$1" 2>/dev/null
  fi
}
# run LABEL RANKS INPUT VARS...: runs LAMMPS and appends a table row
# A row's label for a 'cuda_graph' setting.
graph_label() {
  case $1 in
    yes) echo ", CUDA graph" ;;
    eager) echo ", CUDA graph eager" ;;
  esac
}

run() {
  local label=$1 np=$2 input=$3
  shift 3
  local vars=() v
  for v in "$@"; do vars+=(-var "${v%%=*}" "${v#*=}"); done
  [[ $table == md ]] && vars+=(-var windows "$WINDOWS")
  local log="$work/log.$(printf '%s' "$label-$np" | tr -c 'A-Za-z0-9_.-' '_')"
  echo "  $label, $np rank(s) ..." >&2
  local rss=() rc=0
  command -v python3 >/dev/null && rss=(python3 "$src/benchmarks/peak_rss.py" "$log.time")
  # what the GPU had in use before the run (another process's, as gpu-check.sh's md_1m holds the
  # memory beyond an 80 GB card's) is not the run's
  local gpu_base=0
  [[ -n $DEVICE ]] && command -v nvidia-smi >/dev/null &&
    gpu_base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -dc 0-9 || true)
  gpu_sampler "$log.gpu" &
  local sampler=$!
  local bind=()
  # OpenMPI binds each rank to one core by default: threads of a rank would share it
  [[ ${THREADS:-1} == 1 ]] || bind=(--bind-to none)
  "${rss[@]}" mpirun --oversubscribe "${bind[@]}" -np "$np" "$lmp" -in "$input" -log "$log" -screen none -nocite "${lmp_extra[@]}" \
    "${vars[@]}" || rc=$?
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  if [[ -n $LOGS ]]; then cp "$log" "$LOGS/" 2>/dev/null || true; fi
  keep_log "$log" "$(basename "$log")-r$rep"
  local gpu_mib=""
  [[ -s $log.gpu ]] && gpu_mib=$(sort -n "$log.gpu" | tail -1 | tr -dc 0-9 || true)
  [[ -n $gpu_mib ]] && gpu_mib=$((gpu_mib - ${gpu_base:-0}))
  if ((rc != 0)); then
    failed=1
    echo "bench_pair.sh: $label on $np rank(s) failed: $(grep -m1 'ERROR' "$log" || tail -n1 "$log")" >&2
    local why
    why=$(grep -m1 'ERROR' "$log" 2>/dev/null | cut -c1-200 || true)
    add_row "| $label | - | $np | - | failed: ${why:-exit $rc} | | | | | | |"
    return 0
  fi
  # a row per timing window (WINDOWS), each its own repeat in md.tsv: (rep - 1) * WINDOWS + window
  local line window=0 first_rep=$rep
  while read -r line; do
    rep=$(((first_rep - 1) * WINDOWS + ++window))
    add_row "$line"
  done < <(awk -v label="$label" -v np="$np" -v rss="$(awk '/maxrss_kib/ {print $2}' "$log.time" 2>/dev/null)" -v gpu="${gpu_mib:--}" '
    /^Loop time of/ { n++; loop[n] = $4; steps[n] = $9; atoms[n] = $12 }
    /^Pair  *\|/ { pair[n] = $5 }
    /^pair_style mlip timing: [0-9]+ force calls/ {
      t++
      for (i = 1; i <= NF; i++) {
        if ($i == "graph") graph[t] = $(i + 1); if ($i == "model") model[t] = $(i + 1); if ($i == "forces") forces[t] = $(i + 1)
      }
      sub(",", "", graph[t]); sub(",", "", model[t]); sub(";", "", forces[t])
    }
    END {
      rss_ = (rss == "") ? "-" : sprintf("%.0f", rss / 1024)
      for (k = 1; k <= n; k++) {
        per = 1e6 / (steps[k] * atoms[k])
        split_ = (model[k] == "") ? "- | - | -" : sprintf("%.3g | %.4g | %.3g", graph[k], model[k], forces[k])
        printf "| %s | %d | %d | %d | %.4g | %.3g | %s | %s | %s |\n", label, atoms[k], np, steps[k], loop[k] * per, (loop[k] - pair[k]) * per, split_, rss_, gpu
      }
    }' "$log")
  rep=$first_rep
}

header="| potential | atoms | ranks | steps | total us/atom-step | LAMMPS (non-pair) | graph | model | forces | peak RSS/rank MiB | peak GPU MiB |
|---|---|---|---|---|---|---|---|---|---|---|"

TIMING=${TIMING:-yes}
options="timing $TIMING"
[[ -n $CHUNK ]] && options="chunk $CHUNK timing $TIMING"
DEVICE=${DEVICE:-}
CUDA_GRAPH=${CUDA_GRAPH:-0}
on=""
if [[ -n $DEVICE ]]; then
  options="$options device $DEVICE"
  on=" on $DEVICE"
fi
GRAPH=${GRAPH:-host}
if [[ $GRAPH == device ]]; then
  options="$options graph device"
  on="$on, device graph"
fi
# the operators' formulation where the environment chooses one (mlip/ops/operators.h's KernelChoice)
if [[ -n ${MLIP_KERNELS:-} && ${MLIP_KERNELS:-} != usual ]]; then
  on="$on, $MLIP_KERNELS kernels"
fi

if [[ -n $CHUNKS ]]; then
  echo "== chunk scan: se_e2_a float64, water $SCAN_SIZE, 1 rank" >&2
  "$inputs" water "water-$SCAN_SIZE.data" ${water_reps[$SCAN_SIZE]}
fi
scan_model=water64.pt scan_label="se_e2_a f64"
if [[ ${COMPRESSED_SCAN:-0} == 1 ]]; then scan_model=water64c.pt scan_label="se_e2_a f64 compressed"; fi
for c in $CHUNKS; do
  run "$scan_label chunk $c" 1 in.mlip "data=water-$SCAN_SIZE.data" model=$scan_model "options=chunk $c timing yes" \
    "steps=$SCAN_STEPS"
done
if [[ $PAINN == 1 && -n $PAINN_CHUNKS ]]; then
  echo "== chunk scan: PaiNN float64, water 1k, 1 rank" >&2
  [[ -f water-1k.data ]] || "$inputs" water water-1k.data ${water_reps[1k]}
  for c in $PAINN_CHUNKS; do
    [[ $c == all ]] && n=1000000000 || n=$c
    run "painn f64 chunk $c" 1 in.mlip data=water-1k.data model=painn64.pt "options=chunk $n timing yes" \
      "steps=${painn_steps[1k]}"
  done
fi
scan=("${rows[@]}")
rows=()

table=md
for size in $SIZES; do
  [[ -f water-$size.data ]] || "$inputs" water "water-$size.data" ${water_reps[$size]}
done
for rep in $(seq "$REPEATS"); do
echo "== mlip and snap, repeat $rep of $REPEATS" >&2
for size in $SIZES; do
  for np in $RANKS; do
    graphs=no
    if [[ $CUDA_GRAPH == 1 && -n $DEVICE ]]; then graphs="no yes"; fi
    if [[ $CUDA_GRAPH == only && -n $DEVICE ]]; then graphs=yes; fi
    if [[ $CUDA_GRAPH == eager ]]; then graphs=eager; fi
    for graph in $graphs; do
      g=$(graph_label "$graph")
      if [[ $SE_E2A == 1 ]]; then
        run "mlip se_e2_a f64$on$g" "$np" in.mlip "data=water-$size.data" model=water64.pt \
          "options=$options cuda_graph $graph" "steps=${mlip_steps[$size]}"
      fi
      if [[ $COMPRESSED == 1 ]]; then
        run "mlip se_e2_a f64 compressed$on$g" "$np" in.mlip "data=water-$size.data" model=water64c.pt \
          "options=$options cuda_graph $graph" "steps=${mlip_steps[$size]}"
      fi
      if [[ $SEL == 1 ]]; then
        run "mlip se_e2_a f64 sel$on$g" "$np" in.mlip "data=water-$size.data" model=water64sel.pt \
          "options=$options cuda_graph $graph" "steps=${mlip_steps[$size]}"
        if [[ $COMPRESSED == 1 ]]; then
          run "mlip se_e2_a f64 sel compressed$on$g" "$np" in.mlip "data=water-$size.data" model=water64selc.pt \
            "options=$options cuda_graph $graph" "steps=${mlip_steps[$size]}"
        fi
      fi
      if [[ $FLOAT32 == 1 && " $FLOAT32_SIZES " == *" $size "* ]]; then
        run "mlip se_e2_a f32$on$g" "$np" in.mlip "data=water-$size.data" model=water32.pt \
          "options=$options cuda_graph $graph" "steps=${mlip_steps[$size]}"
        if [[ $COMPRESSED == 1 ]]; then
          run "mlip se_e2_a f32 compressed$on$g" "$np" in.mlip "data=water-$size.data" model=water32c.pt \
            "options=$options cuda_graph $graph" "steps=${mlip_steps[$size]}"
        fi
      fi
    done
    if [[ $KOKKOS == 1 ]]; then
      lmp_extra=(-k on t 1 -sf kk)
      run "mlip/kk se_e2_a f64" "$np" in.mlip "data=water-$size.data" model=water64.pt "options=$options" \
        "steps=${mlip_steps[$size]}"
      lmp_extra=()
    fi
    # PaiNN's cuda_graph settings: with the graph on the device, those of se_e2_a's rows (its whole
    # step recorded, each chunk with its halo); else none here (its model call's row below)
    mp_graphs=no
    if [[ $GRAPH == device ]]; then mp_graphs=$graphs; fi
    for graph in $mp_graphs; do
      g=$(graph_label "$graph")
      if [[ $PAINN == 1 && -n ${painn_steps[$size]:-} ]]; then
        run "mlip painn f64$on$g" "$np" in.mlip "data=water-$size.data" model=painn64.pt \
          "options=$options cuda_graph $graph" "steps=${painn_steps[$size]}"
      fi
      if [[ $PAINN_TARGET == 1 && -n ${painn_steps[$size]:-} ]]; then
        # its random weights (3 layers) bring two atoms together in about 25 steps of 0.5 fs: 0.1 fs
        # (water_md_input's dt; the step's cost does not depend on it)
        run "mlip painn 32f 3L f32$on$g" "$np" in.mlip "data=water-$size.data" model=painn32f3l.pt \
          "options=$options cuda_graph $graph" "steps=${painn_steps[$size]}" dt=0.0001
      fi
    done
    # PaiNN's model call recorded (with a halo, exchange no, as a recording needs), the graph the host's
    if [[ $PAINN == 1 && -n ${painn_steps[$size]:-} && " $graphs " == *" yes "* && $GRAPH != device ]]; then
      run "mlip painn f64$on, halo, CUDA graph" "$np" in.mlip "data=water-$size.data" model=painn64.pt \
        "options=$options exchange no cuda_graph yes" "steps=${painn_steps[$size]}"
    fi
    if [[ $MACE == 1 && -n ${painn_steps[$size]:-} ]]; then
      [[ $MACE_MODELS == *" 32 "* ]] && run "mlip mace 32ch L1 f64$on" "$np" in.mlip "data=water-$size.data" \
        model=mace32ch.pt "options=$options" "steps=${painn_steps[$size]}"
      [[ $MACE_MODELS == *" 128 "* ]] && run "mlip mace 128ch L2 f32$on" "$np" in.mlip "data=water-$size.data" \
        model=mace128ch.pt "options=$options" "steps=${painn_steps[$size]}"
    fi
    if [[ $SNAP == 1 ]]; then
      run "snap W_2940_2017_2" "$np" in.snap "n=${bcc_cells[$size]}" "steps=${snap_steps[$size]}"
    fi
  done
done
done

echo
echo "machine: $(getconf _NPROCESSORS_ONLN) cores, $(uptime | sed 's/.*load average/load average/')"
echo
echo "Chunk scans (se_e2_a float64, water $SCAN_SIZE; PaiNN float64, water 1k; 1 rank; 'graph', 'model', 'forces': pair_style mlip timing, us/atom-step):"
echo
echo "$header"
printf '%s\n' "${scan[@]}"
echo
echo "mlip and mlip/kk (se_e2_a and PaiNN water, default chunk${CHUNK:+ $CHUNK}) vs snap (W_2940_2017_2):"
echo
echo "$header"
printf '%s\n' "${rows[@]}"
python3 "$src/benchmarks/tables.py" "$results" 2>/dev/null || true
exit $failed
