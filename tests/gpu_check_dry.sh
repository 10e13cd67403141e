#!/usr/bin/env bash
# ctest gpu_check_dry: scripts/gpu-check.sh's dry run on this build (CPU, small sizes) - the same
# stages, files and failure handling as on a lent GPU machine, so the check cannot rot between
# lendings. Checks that every stage ran (none skipped for time), that each figure line is in the
# summary, that the run that must fail on the CPU (cuda_graph yes) gave a row saying so and the
# stages after it still ran, and that $OUT holds at most 8 files (the device tool's limit).
#   tests/gpu_check_dry.sh BUILD_DIR TORCH_PYTHON
set -uo pipefail
build=$1 py=$2
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$build/tests/gpu-check-dry
rm -rf "$out" && mkdir -p "$out"
# A budget for 2 slow cores (ctest's timeout is 1200 s; the stages take about 400 s here since
# their training runs hold out 48 frames, not 288, and a CI run went past 800 s once when they took
# 750 s, skipping the last stage); no bundle: the build is used as it is.
OUT=$out MLIP_GPU_CHECK_DRY=1 MLIP_GPU_CHECK_FRESH=1 MLIP_GPU_BUILD=$build MLIP_GPU_PYTHON=$py \
  MLIP_GPU_CHECK_BUDGET=1100 MLIP_GPU_BUNDLE=/nonexistent "$repo/scripts/gpu-check.sh" all
rc=$?
echo "== stages.txt"; cat "$out/stages.txt"
fail=0
# The md stage fails by design (cuda_graph on the CPU), so the check's exit status is 1.
if ((rc != 1)); then echo "FAILED: gpu-check.sh exited $rc, not 1 (the md stage's expected failure)"; fail=1; fi
check() {  # check FILE REGEX WHAT
  if ! grep -Eq "$2" "$1"; then
    echo "FAILED: $3 (no line matching '$2' in $(basename "$1"))"
    fail=1
  fi
}
for s in env build device pair_np1 train md md_device_graph md_step_graph profile profile_train train_gpu stream pair_np2 md_more md_1m md_mace_kernels mace; do
  check "$out/stages.txt" "^$s +[0-9]+ s" "stage $s ran"
done
if grep -q skipped "$out/stages.txt"; then echo "FAILED: a stage was skipped for time"; fail=1; fi
for s in env build device pair_np1 train train_accuracy md_device_graph md_step_graph profile profile_train train_gpu stream pair_np2 md_more md_1m md_mace_kernels mace; do
  check "$out/stages.txt" "^$s +[0-9]+ s +ok" "stage $s passed"
done
check "$out/summary.txt" '^cmake: cmake version' "cmake --version"
check "$out/summary.txt" '^tests test_device \(GPU cases\): [0-9]+ passed, 0 failed, [1-9][0-9]* skipped' "test_device's GPU cases, skipped"
check "$out/summary.txt" '^forces GPU vs CPU' "the forces line"
check "$out/summary.txt" '^tests PairMLIPGpu.\* on 1 rank\(s\): 0 passed, 0 failed, [1-9][0-9]* skipped' "PairMLIPGpu on 1 rank, skipped"
check "$out/summary.txt" '^tests TrainingGpu.\*: 0 passed, 0 failed, [1-9][0-9]* skipped' "TrainingGpu, skipped"
for b in 1 4 16 "1, grouped" "16, grouped" "1, recorded" "16, recorded" "16, recorded, host batches" \
  "16, recorded, not deterministic"; do
  check "$out/summary.txt" "^training se_e2_a water, batch $b, cpu: [0-9.]+ frames/s \\(second epoch\\); memory: peak resident [0-9.]+ GiB" \
    "training frames/s and memory, batch $b"
done
for b in "1, lr 2e-3 to 2e-5" "4, lr 2e-3 to 2e-5" "16, lr 2e-3 to 2e-5" "8, lr 4e-3 to 4e-5" "16, lr 5.66e-3 to 5.66e-5" \
  "32, lr 8e-3 to 8e-5"; do
  check "$out/summary.txt" "^training accuracy, water se_e2_a, batch $b, 1 epochs, recorded \\(eager\\), cpu: [0-9.?]+ frames/s .*; last epoch val E [0-9.]+ meV/atom  F [0-9.]+ meV/A" \
    "training accuracy, batch $b"
done
check "$out/summary.txt" '^streaming, CPU, 1 pair\(s\) at once, a core each: memory [0-9.]+ \([0-9.]+-[0-9.]+, 1 runs\), streamed [0-9.]+ .*: streamed trails by -?[0-9.]+%' \
  "the streaming line, CPU pairs"
check "$out/summary.txt" '^streaming, cpu, taking turns: memory [0-9.]+ \([0-9.]+-[0-9.]+, 2 runs\), streamed [0-9.]+ .*: streamed trails by -?[0-9.]+%' \
  "the streaming line, taking turns"
check "$out/summary.txt" '^MD: \| mlip se_e2_a f64 on cpu \| 1152 \| 1 \| 2 \| [0-9.]+' "MD row, se_e2_a"
check "$out/summary.txt" '^MD: \| mlip se_e2_a f64 on cpu, CUDA graph \| - \| 1 \| - \| failed: ERROR.*cuda_graph' \
  "the cuda_graph run on the CPU reported as failed with LAMMPS's error"
# bench_pair.sh goes on after a failed run: the PaiNN row of the same md stage follows it
awk '/^# md \(/ { on = 1; next } /^# / { on = 0 } on' "$out/md.txt" >"$out.md-stage"
check "$out.md-stage" '^\| mlip se_e2_a f64 on cpu, CUDA graph \| - \| 1 \| - \| failed' "the md stage's failed row"
check "$out.md-stage" '^\| mlip painn f64 on cpu \| 1152 \| 1 \| 2 \| [0-9.]+' "the md stage's PaiNN row after the failed run"
if (($(grep -c '^| mlip se_e2_a f64 on cpu | 1152 ' "$out.md-stage") != 3)); then
  echo "FAILED: the md stage's se_e2_a run gave $(grep -c '^| mlip se_e2_a f64 on cpu | 1152 ' "$out.md-stage") rows, not 3 (WINDOWS=3)"
  fail=1
fi
check "$out/summary.txt" '^MD: \| mlip se_e2_a f64 compressed on cpu \| 1152 ' "MD row, compressed (md_more)"
check "$out/md.txt" '^\| mlip se_e2_a f64 on cpu \| 1152 .*\| [0-9]+ \| - \|$' "md.txt row with peak RSS and no GPU memory"
check "$out/failures.txt" '^== md: exit 1' "the failed MD run in failures.txt"
# the whole step's path (unrecorded on the CPU), plain and compressed, three windows each
for m in "f64" "f64 compressed"; do
  n=$(grep -c "^MD: | mlip se_e2_a $m on cpu, device graph, CUDA graph eager | 1152 | 1 | 2 | [0-9.]" "$out/summary.txt" || true)
  if ((n != 3)); then echo "FAILED: the md_step_graph stage gave $n rows of se_e2_a $m, not 3"; fail=1; fi
done
# md_more and md_mace_kernels: MACE (the 32-channel model only, here) on the usual kernels and on the ATen formulations
check "$out/summary.txt" '^MD: \| mlip mace 32ch L1 f64 on cpu \| 1152 \| 1 \| [0-9]+ \| [0-9.]+' "MACE's MD row"
if grep -q '^MD: | mlip mace 128ch' "$out/summary.txt"; then echo "FAILED: the 128-channel MACE ran (MACE_MODELS=32)"; fail=1; fi
# the profile stage: each run's table in profile.txt, its totals in the summary
check "$out/summary.txt" '^profile: mlip se_e2_a f64 on cpu, device graph: wall [0-9.]+ ms per call; host operators' "se_e2_a's profile totals"
check "$out/summary.txt" '^profile: mlip painn f64 on cpu, device graph: wall [0-9.]+ ms per call' "PaiNN's profile totals"
check "$out/summary.txt" '^profile: mlip se_e2_a f32 on cpu, device graph, aten kernels: wall [0-9.]+ ms per call' \
  "the ATen formulations' profile totals (MLIP_KERNELS=aten)"
check "$out/profile.txt" '^== mlip painn f64 on cpu, device graph, with 1152 atoms' "PaiNN's table heading"
check "$out/profile.txt" '^ *[0-9.]+ +[0-9.]+% +[0-9.]+  operator aten::' "an operator row in profile.txt"
check "$out/summary.txt" '^profile: profile-train-b4: wall [0-9.]+ ms per step' "the training profile's totals"
# the mace stage: bench_mace.sh's tables of both codes (mace-torch from the torch venv here)
check "$out/summary.txt" '^mace: mace-torch [0-9.]+ e3nn [0-9.]+' "the mace-torch version"
check "$out/summary.txt" '^mace-32ch: \| mace-torch, 1 rank x 1 thread \| [0-9.]+' "mace-torch's training row"
check "$out/summary.txt" '^mace-32ch: \| mlip, 1 rank x 1 thread \| [0-9.]+' "mlip's training row"
check "$out/summary.txt" '^mace-32ch: \| mlip \(LAMMPS\), 1 rank x 1 thread \| [0-9.]+' "mlip's MD row"
check "$out/summary.txt" '^mace-32ch: \| mace-torch \(ASE\), 1 thread \| [0-9.]+' "mace-torch's MD row"
check "$out/summary.txt" '^total: [0-9]+ s' "the total"
# benchmarks/tables.py reads the check's files as a kept run (benchmarks/results/gpu-check/RUN)
kept=$build/tests/gpu-check-dry-tables/gpu-check/dry
rm -rf "$kept" && mkdir -p "$kept" && cp "$out/summary.txt" "$out/md.txt" "$kept/"
"$py" "$repo/benchmarks/tables.py" "$kept" >"$kept.tables" || { echo "FAILED: tables.py on the check's files"; fail=1; }
check "$kept.tables" '^\| 16 \| 5.66e-3 to 5.66e-5 \| 1 \| \? \| [0-9.]+ \| [0-9.]+ \|$' "the accuracy table's batch-16 row (one epoch: no rate)"
check "$kept.tables" '^\| mlip se_e2_a f64 on cpu, device graph \(per call\) \| [0-9.]+ \| - \|' "the profile table's se_e2_a row"
check "$kept.tables" '^\| mlip se_e2_a f64 on cpu, device graph, CUDA graph eager \| 1152 \| [0-9.]+ \(' "the md table's whole-step row"
check "$kept.tables" '^<!-- table: gpu-check/dry memory -->' "the memory table (no lines on the CPU)"
check "$kept.tables" '^\| mlip painn 32f 3L f32 on cpu, device graph \| 1152 \| [0-9.]+' "the md table's row of issue 54's PaiNN"
check "$kept.tables" '^\| PaiNN 32 features, 3 layers, float32, 100k atoms or more \| <= 3.0 us/atom-step \| not measured \|' \
  "the targets table (nothing measured at these sizes on the CPU)"
check "$kept.tables" '^<!-- gpu-check/dry: a dry run of the GPU check, on the CPU at small sizes: not GPU figures -->' \
  "the tables labelled as a dry run's"
# the targets table on made-up GPU rows: the 100k box (98304 atoms) counts as 100k, a run's
# windows are taken together, a million atoms within an 80 GB card's memory
made=$build/tests/gpu-check-dry-tables/gpu-check/made-up
rm -rf "$made" && mkdir -p "$made"
# the training target: the fastest accuracy run with errors no worse than batch 1's after the same
# epochs (not the faster batch 16 with worse forces, nor the train stage's runs, which measure no
# errors, nor batch 16's run of more epochs); and in batch 1's wall time, that run of more epochs
acc='10 epochs, recorded (true), cuda'
printf '%s\n' 'mode: GPU' 'training se_e2_a water, batch 16, recorded, cuda: 2400 frames/s (second epoch)' \
  "training accuracy, water se_e2_a, batch 1, lr 2e-3 to 2e-5, $acc: 60.1 frames/s (mean of the epochs after the first); last epoch val E 1.5 meV/atom  F 80 meV/A" \
  "training accuracy, water se_e2_a, batch 16, lr 2e-3 to 2e-5, $acc: 1500 frames/s (mean of the epochs after the first); last epoch val E 1.2 meV/atom  F 81 meV/A" \
  "training accuracy, water se_e2_a, batch 32, lr 1.13e-2 to 1.13e-4, $acc: 1200.5 frames/s (mean of the epochs after the first); last epoch val E 1.4 meV/atom  F 79 meV/A" \
  "training accuracy, water se_e2_a, batch 16, lr 5.66e-3 to 5.66e-5, ${acc/10 epochs/74 epochs}: 1800 frames/s (mean of the epochs after the first); last epoch val E 1.3 meV/atom  F 75 meV/A" \
  >"$made/summary.txt"
{
  echo '# md_step_graph SIZES="10k 100k"'
  for t in 0.45 0.47 0.46; do echo "| mlip se_e2_a f32 compressed on cuda, device graph, CUDA graph | 98304 | 1 | 4 | $t | 0.01 | 0.03 | 0.4 | 0.01 | 2000 | 30000 |"; done
  echo '# md_1m SIZES="100k 1m"'
  echo '| mlip se_e2_a f32 on cuda | 998784 | 1 | 1 | 1.9 | 0.01 | 0.2 | 1.5 | 0.2 | 9000 | 70000 |'
  # the million-atom target: the fastest run within the card (not the one of least memory, nor a faster one above it)
  echo '| mlip se_e2_a f32 on cuda, slower | 998784 | 1 | 1 | 7.3 | 0.01 | 2 | 3 | 2 | 9000 | 60000 |'
  echo '| mlip se_e2_a f32 on cuda, larger | 998784 | 1 | 1 | 1.2 | 0.01 | 0.2 | 0.8 | 0.2 | 9000 | 90000 |'
} >"$made/md.txt"
"$py" "$repo/benchmarks/tables.py" "$made" >"$made.tables" || { echo "FAILED: tables.py on made-up rows"; fail=1; }
check "$made.tables" '^\| se_e2_a compressed float32, 100k atoms or more \| <= 0.5 us/atom-step \| 0.46 \| .*98304 atoms \(md_step_graph\) \| yes \|$' \
  "the targets table's 100k row (98304 atoms, the median of 3 windows)"
check "$made.tables" '^\| host share of the pair time .* \| 9.1% \| .* \| yes \|$' "the targets table's host share"
check "$made.tables" '^\| about 1M water atoms, float32, no chunk \| .* \| 1.9 us/atom-step, 70000 MiB \| .* \| yes \|$' \
  "the targets table's million atoms"
check "$made.tables" '^\| training se_e2_a water, .*, after the same frames \| .* \| 1200.5 \(val E 1.4, F 79; batch 1: 1.5, 80, 10 epochs\) \| accuracy run, batch 32, lr 1.13e-2 to 1.13e-4, 10 epochs \| yes \|$' \
  "the targets table's training rate (errors no worse than batch 1's after the same frames)"
check "$made.tables" '^\| training se_e2_a water, .*, in batch 1.s wall time .* \| 1800 \(val E 1.3, F 75; batch 1: 1.5, 80, 10 epochs\) \| accuracy run, batch 16, lr 5.66e-3 to 5.66e-5, 74 epochs \| yes \|$' \
  "the targets table's training rate in batch 1's wall time"
files=$(find "$out" -type f | wc -l)
if ((files > 8)); then echo "FAILED: $files files in OUT (the device tool returns 8)"; fail=1; fi
tar -tzf "$out/logs.tar.gz" >"$out.logs-list" || { echo "FAILED: logs.tar.gz does not list"; fail=1; }
check "$out.logs-list" 'train-b16.log' "train-b16.log in logs.tar.gz"
check "$out.logs-list" 'lammps-md/log\.' "the md stage's LAMMPS logs in logs.tar.gz"
exit $fail
