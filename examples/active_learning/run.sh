#!/usr/bin/env bash
# One active-learning round on water, end to end (a few minutes on 2 cores):
#   1. a committee of 3 se_e2_a models that differ only in their seeds (mlip-trainer train
#      --committee 3), trained briefly on data_0 only;
#   2. NVT MD at 330 K driven by the first model, all three reporting their deviation every 10
#      steps (pair_style mlip m0 m1 m2 out_freq 10: model_devi.out, d_mlip_devi_f in the dump);
#      fix halt stops it once the largest force deviation passes MLIP_AL_HALT (the MD has left
#      what 80 frames and 1.5 minutes of training taught the models: typically a few hundred
#      steps in);
#   3. the dumped frames sorted by their largest force deviation (mlip-trainer deviation):
#      frames between the trust levels are written to to_label.xyz for DFT labelling;
#      the offline deviation is checked against the one LAMMPS wrote during the run.
# Then: label to_label.xyz with DFT, add it to the training data, fine-tune or retrain, repeat.
#
# Environment: MLIP_BUILD_DIR (default build), MLIP_AL_DIR (default runs/active_learning),
# MLIP_AL_MINUTES (training minutes per member, default 1.5), MLIP_AL_STEPS (MD steps, default
# 2000), MLIP_AL_RANKS (default: all cores), MLIP_AL_TRUST="LO HI" (eV/A, default "0.20 0.60":
# this committee's deviation on the MD's first, sane steps is 0.13-0.20 eV/A), MLIP_AL_HALT (1.0).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${MLIP_BUILD_DIR:-$here/build}"
out="${MLIP_AL_DIR:-$here/runs/active_learning}"
minutes="${MLIP_AL_MINUTES:-1.5}"
steps="${MLIP_AL_STEPS:-2000}"
ranks="${MLIP_AL_RANKS:-$(nproc)}"
read -r trust_lo trust_hi <<<"${MLIP_AL_TRUST:-0.20 0.60}"
halt="${MLIP_AL_HALT:-1.0}"
trainer="$build/bin/mlip-trainer"
lmp="$build/bin/lmp"
for f in "$trainer" "$lmp"; do
  [[ -x $f ]] || { echo "active_learning: $f not found; run scripts/setup.sh first" >&2; exit 1; }
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$(date +%s)
stamp() { printf '[%4ds] ' $(( $(date +%s) - start )); }
mkdir -p "$out"
cd "$here"    # the config's data paths are relative to the repository

echo "$(stamp)== [1/3] committee: 3 models, $minutes min each, on data_0 ($ranks ranks)"
rm -rf "$out/committee"
mpirun --oversubscribe -np "$ranks" "$trainer" train examples/active_learning/committee.yaml --committee 3 \
  --set "output.dir=$out/committee" --set "training.max_minutes=$minutes" --threads 1 >"$out/committee.log" 2>&1 ||
  { tail -20 "$out/committee.log"; exit 1; }
grep -E "^committee|best epoch|exported" "$out/committee.log" || true
models=("$out"/committee/model-{0,1,2}/model.pt)

echo "$(stamp)== [2/3] MD: 192 atoms (64 H2O from data_1), NVT 330 K, $steps x 0.5 fs, deviation every 10 steps"
"$trainer" convert data/water-deepmd/data_1 "$out/water.data" --types O H >/dev/null
(
  cd "$out"
  mpirun --oversubscribe -np "$ranks" "$lmp" -in "$here/examples/active_learning/in.md" -log md.log -nocite \
    -var m0 "${models[0]}" -var m1 "${models[1]}" -var m2 "${models[2]}" -var data water.data \
    -var steps "$steps" -var halt "$halt" >/dev/null
)
awk '/^ +Step/ { on = 1 } on { print } /^Loop time/ { on = 0 }' "$out/md.log" |
  grep -v "^Loop" || true
grep -E "^Performance" "$out/md.log" || true

echo "$(stamp)== [3/3] frames to label: max force deviation in [$trust_lo, $trust_hi) eV/A"
"$trainer" deviation "${models[@]}" "$out/traj.dump" --types O H -o "$out/offline_devi.out" \
  --trust-lo "$trust_lo" --trust-hi "$trust_hi" --candidates "$out/to_label.xyz"
# The offline deviation of each dumped frame against the line LAMMPS wrote at that step: the
# same up to the models' float32 round-off (neighbour order and chunks differ; the energy
# deviation, a difference of totals near -3e4 eV, is the most sensitive: about 1e-4 of its scale),
# so each column's largest difference is taken relative to that column's largest value.
awk 'FNR == 1 { next } NR == FNR { md[FNR] = $0; n = FNR; next }
     { split(md[FNR], a); rows++
       for (k = 2; k <= 8; k++) { d = a[k] - $k; d = d < 0 ? -d : d; if (d > diff[k]) diff[k] = d
                                  s = a[k] < 0 ? -a[k] : a[k]; if (s > scale[k]) scale[k] = s } }
     END { for (k = 2; k <= 8; k++) { r = scale[k] > 0 ? diff[k] / scale[k] : diff[k]; if (r > worst) worst = r }
           printf "offline (mlip-trainer deviation) vs LAMMPS (model_devi.out): %d frames, largest difference %.1e of the column'"'"'s scale\n", rows, worst
           if (rows != n - 1 || worst > 1e-3) exit 1 }' "$out/model_devi.out" "$out/offline_devi.out"
echo "$(stamp)active-learning round finished; results in $out (model_devi.out, traj.dump, to_label.xyz)"
