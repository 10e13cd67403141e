# cmake -DTRAINER=... -DCOMPARE=... -DMPIEXEC=... -DCONFIG=... -DWORK=... -P streaming.cmake
# Training streamed from a pack against the same frames parsed into memory (the ethanol frames of
# two-ranks.yaml: 80 to train on, 20 to validate on, both runs with the same validation file):
#   1. the pack (2 shards) streamed trains bitwise as the extended XYZ in memory;
#   2. no prefetching (data.prefetch 0) trains bitwise as prefetching;
#   3. a streamed run killed just after a checkpoint inside its first epoch
#      (output.checkpoint_every_steps) and resumed ends bitwise as the uninterrupted one;
#   4. 2 ranks streaming follow 1 rank in memory (to 1e-9, as trainer_two_ranks_equivalence).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)

# 100 frames of rMD17 ethanol (11 lines each), split 80 + 20.
file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/../../data/ethanol-rmd17/rmd17_ethanol_1000.xyz lines)
list(SUBLIST lines 0 880 train_lines)
list(SUBLIST lines 880 220 val_lines)
list(JOIN train_lines "\n" text)
file(WRITE ${WORK}/train.xyz "${text}\n")
list(JOIN val_lines "\n" text)
file(WRITE ${WORK}/val.xyz "${text}\n")

execute_process(COMMAND ${TRAINER} pack ${WORK}/train.xyz -o ${WORK}/train.pack --energy-unit kcal/mol --shard-mb 0.05
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pack failed (${rc}): ${out}${err}")
endif()

set(val "data.validation=[{path: ${WORK}/val.xyz, units: {energy: kcal/mol}}]")
set(common train ${CONFIG} --threads 1 --set data.cache_dir=${WORK}/cache --set "${val}")
function(train name)
  execute_process(COMMAND ${TRAINER} ${common} --set output.dir=${WORK}/${name} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "run '${name}' failed (${rc}): ${out}${err}")
  endif()
  set(log "${out}" PARENT_SCOPE)
endfunction()
function(expect_same a b tolerance what)
  execute_process(COMMAND ${COMPARE} ${WORK}/${a}/checkpoints/epoch-000002 ${WORK}/${b}/checkpoints/epoch-000002 ${tolerance}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what}: the weights differ: ${out}")
  endif()
  message(STATUS "${what}: the same weights after 2 epochs (tolerance ${tolerance})")
endfunction()

set(memory "data.train=[{path: ${WORK}/train.xyz, units: {energy: kcal/mol}}]")
set(packed "data.train=[${WORK}/train.pack]")
train(memory --set "${memory}")
train(streamed --set "${packed}")
if(NOT log MATCHES "a pack of 80 frames, streamed")
  message(FATAL_ERROR "the pack was not streamed: ${log}")
endif()
expect_same(memory streamed 0 "streamed from the pack vs in memory")
train(no_prefetch --set "${memory}" --set data.prefetch=0)
expect_same(memory no_prefetch 0 "data.prefetch 0 vs 4")

# 20 steps an epoch: checkpoints inside epochs after steps 7, 14, 27, 34; killed after the first.
set(every --set output.checkpoint_every_steps=7)
train(streamed_every --set "${packed}" ${every})
expect_same(memory streamed_every 0 "checkpoints inside epochs")
set(ENV{MLIP_FAULT_POINT} "renamed@0")
execute_process(COMMAND ${TRAINER} ${common} --set output.dir=${WORK}/killed --set "${packed}" ${every}
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
unset(ENV{MLIP_FAULT_POINT})
if(NOT rc EQUAL 86)
  message(FATAL_ERROR "the checkpoint inside epoch 1 was not reached (exit ${rc}): ${err}")
endif()
if(NOT EXISTS ${WORK}/killed/checkpoints/epoch-000000-step-000000007)
  message(FATAL_ERROR "no checkpoint epoch-000000-step-000000007 before the kill")
endif()
train(killed --set "${packed}" ${every} --resume)
if(NOT log MATCHES "resumed from [^\n]*epoch-000000-step-000000007")
  message(FATAL_ERROR "the run did not resume from inside epoch 1: ${log}")
endif()
expect_same(memory killed 0 "killed inside epoch 1 and resumed")

execute_process(COMMAND ${MPIEXEC} --oversubscribe -np 2 ${TRAINER} ${common} --set output.dir=${WORK}/two --set "${packed}"
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err TIMEOUT 300)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the 2-rank streamed run failed (${rc}): ${err}")
endif()
expect_same(memory two 1e-9 "2 ranks streaming vs 1 rank in memory")
