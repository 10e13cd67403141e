#!/usr/bin/env bash
# NVE energy drift of a trained se_e2_a water model and of its compressed form, from the same
# equilibrated state, in LAMMPS.
#
#   benchmarks/nve_drift.sh MODEL.pt|train [BUILD_DIR]          (default: <repo>/build)
#
# "train": the model is trained first, as part of the benchmark: examples/configs/water-se_e2_a.yaml
# (the water recipe: rc 5 A, 16-32-64 / 8 / 120x3, ZBL prior, EMA) in float64, TRAIN_MINUTES (29)
# on 2 ranks x 1 thread, the model a run of that length ends with (its best epoch); the recipe's
# 29-minute model keeps water liquid and its molecules whole.
#
# The box: frame 0 of data/water-deepmd (64 H2O, 192 atoms; REPS="1 1 1" replicates it). 1 ps of
# NVT at 300 K with the uncompressed model (0.5 fs steps), then from that state PS (10) ps of NVE
# with each model (0.5 fs). `mlip-trainer compress` makes the compressed model (its defaults:
# tables down to 0.75 x the shortest training distance). Reported per model: the largest
# |E(t) - E(0)| / N and the slope of a least-squares line through E(t) / N (meV/atom/ps), the
# temperature range, the MD speed, and whether every O kept exactly two H within 1.25 A at every
# thermo line (every 100 steps). RANKS (2) MPI ranks, 1 thread each.
set -euo pipefail

[[ $# -ge 1 ]] || { echo "usage: benchmarks/nve_drift.sh MODEL.pt|train [BUILD_DIR]" >&2; exit 2; }
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init nve_drift "${2:-}" lmp mlip-trainer
if [[ $1 == train ]]; then
  model=$work/trained/model.pt
else
  model=$(realpath "$1")
  [[ -f $model ]] || { echo "nve_drift.sh: $model: no such model file" >&2; exit 1; }
fi
PS=${PS:-10}
RANKS=${RANKS:-2}
REPS=${REPS:-"1 1 1"}
cd "$work"

if [[ $1 == train ]]; then
  minutes=${TRAIN_MINUTES:-29}
  echo "== training the water recipe in float64 for $minutes minutes" >&2
  sed -e "s|path: data/water-deepmd|path: $src/data/water-deepmd|" -e "s|max_minutes: .*|max_minutes: $minutes|" \
      -e "s|dtype: float32|dtype: float64|" -e "s|dir: runs/water-se_e2_a|dir: $work/trained|" \
      -e "s|cache_dir: .*|cache_dir: $work/cache|" "$src/examples/configs/water-se_e2_a.yaml" > train.yaml
  OMP_NUM_THREADS=1 mpirun --oversubscribe -np 2 "$build/bin/mlip-trainer" train train.yaml --threads 1 > train.log 2>&1 ||
    { tail -20 train.log >&2; exit 1; }
  keep_log train.log
  grep -E "^epoch|exported" train.log | tail -3 >&2
fi
"$build/bin/mlip-trainer" compress "$model" -o compressed.pt > compress.log 2>&1 || { cat compress.log >&2; exit 1; }
# shellcheck disable=SC2086
"$build/bin/mlip_test_inputs" water water.data $REPS > /dev/null
lmp=(mpirun --oversubscribe -np "$RANKS" "$build/bin/lmp" -nocite -screen none)

cat > common.in <<'EOF'
units        metal
atom_style   atomic
atom_modify  map array
newton       on
read_data    ${data}
mass         1 15.999
mass         2 1.008
pair_style   mlip ${model}
pair_coeff   * * O H
neighbor     1.0 bin
neigh_modify every 1 delay 0 check yes
timestep     0.0005
EOF
cat > nvt.in <<'EOF'
include      common.in
velocity     all create 300.0 4928459 mom yes rot yes dist gaussian
fix          1 all nvt temp 300.0 300.0 0.05
run          2000
write_data   start.data
EOF
cat > nve.in <<'EOF'
include      common.in
fix          1 all nve
group        O type 1
group        H type 2
compute      nH O coord/atom cutoff 1.25 group H
compute      nHmin O reduce min c_nH
compute      nHmax O reduce max c_nH
thermo_style custom step time temp pe etotal c_nHmin c_nHmax
thermo_modify format float %.10f
thermo       100
run          ${steps}
EOF
"${lmp[@]}" -in nvt.in -log nvt.log -var data water.data -var model "$model" ||
  { tail -5 nvt.log >&2; exit 1; }
steps=$(awk -v ps="$PS" 'BEGIN { printf "%d", ps / 0.0005 }')
echo "NVE from a 1 ps NVT state at 300 K: $PS ps (${steps} steps of 0.5 fs), $RANKS ranks x 1 thread"
row model ps max_abs_de_mev_atom slope_mev_atom_ps t_min_k t_max_k us_per_atom_step thermo_lines_not_intact
printf '%-14s %20s %22s %14s %16s\n' model "max|E-E0|/N (meV)" "slope (meV/atom/ps)" "T (K)" "us/atom-step"
for m in "uncompressed|$model" "compressed|$work/compressed.pt"; do
  label=${m%%|*}
  "${lmp[@]}" -in nve.in -log "nve-$label.log" -var data start.data -var model "${m#*|}" -var steps "$steps" ||
    { tail -5 "nve-$label.log" >&2; exit 1; }
  keep_log "nve-$label.log"
  awk -v label="$label" -v ps="$PS" -v rows="$results/rows.tsv" 'BEGIN { n = 0 }
    /^Loop time of/ { loop = $4; steps = $9; atoms = $12 }
    /^ *Step/ { on = 1; next }
    /^Loop time/ { on = 0 }
    on && NF == 7 && $1 ~ /^[0-9]+$/ { t[n] = $2; e[n] = $5; temp[n] = $3; if ($6 != 2 || $7 != 2) broken++; n++ }
    END {
      if (n < 2) { print label ": no thermo output" > "/dev/stderr"; exit 1 }
      big = 0; tmin = 1e9; tmax = 0; st = 0; se = 0; stt = 0; ste = 0
      for (i = 0; i < n; i++) {
        d = (e[i] - e[0]) / atoms; if (d < 0) d = -d; if (d > big) big = d
        if (temp[i] < tmin) tmin = temp[i]; if (temp[i] > tmax) tmax = temp[i]
        st += t[i]; se += e[i] / atoms; stt += t[i] * t[i]; ste += t[i] * e[i] / atoms
      }
      slope = (n * ste - st * se) / (n * stt - st * st)
      printf "%-14s %20.3f %22.4f %14s %16.1f %s\n", label, 1e3 * big, 1e3 * slope,
             sprintf("%.0f-%.0f", tmin, tmax), 1e6 * loop / (steps * atoms),
             broken ? sprintf("(molecules not intact at %d of %d thermo steps)", broken, n) : "(every H2O intact)"
      printf "%s\t%s\t%.4f\t%.5f\t%.0f\t%.0f\t%.1f\t%d\n", label, ps, 1e3 * big, 1e3 * slope, tmin, tmax,
             1e6 * loop / (steps * atoms), broken >> rows
    }' "nve-$label.log"
done
