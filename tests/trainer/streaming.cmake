# cmake -DTRAINER=... -DCOMPARE=... -DMPIEXEC=... -DCONFIG=... -DWORK=... -P streaming.cmake
# Training streamed from a pack against the same frames parsed into memory (the ethanol frames of
# two-ranks.yaml: 80 to train on, 20 to validate on, both runs with the same validation file):
#   1. the pack (2 shards) streamed, and the extended XYZ streamed by its offset index
#      (stream: true), train bitwise as the extended XYZ in memory;
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
train(xyz_streamed --set "data.train=[{path: ${WORK}/train.xyz, units: {energy: kcal/mol}, stream: true}]")
if(NOT log MATCHES "80 frames, streamed \\(read by index")
  message(FATAL_ERROR "the extended XYZ was not streamed: ${log}")
endif()
expect_same(memory xyz_streamed 0 "extended XYZ streamed by its offset index vs in memory")
# A pack and a file in memory in one data set, against the file twice in memory.
set(xyz_source "{path: ${WORK}/train.xyz, units: {energy: kcal/mol}}")
train(mixed_memory --set "data.train=[${xyz_source}, ${xyz_source}]")
train(mixed_streamed --set "data.train=[${WORK}/train.pack, ${xyz_source}]")
expect_same(mixed_memory mixed_streamed 0 "a pack and an extended XYZ in memory vs the XYZ twice in memory")
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

# `test` and `deviation` read a pack frame by frame: the same figures as on the extended XYZ.
foreach(data "${WORK}/train.xyz;--energy-unit;kcal/mol" "${WORK}/train.pack")
  execute_process(COMMAND ${TRAINER} test ${WORK}/memory/model.pt ${data} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "test on ${data} failed (${rc}): ${err}")
  endif()
  string(REGEX MATCHALL "RMSE[^\n]*" rmse "${out}")
  list(APPEND tested "${rmse}")
endforeach()
list(GET tested 0 from_xyz)
list(LENGTH tested n)
math(EXPR half "${n} / 2")
list(SUBLIST tested 0 ${half} from_xyz)
list(SUBLIST tested ${half} ${half} from_pack)
if(NOT from_xyz STREQUAL from_pack OR half EQUAL 0)
  message(FATAL_ERROR "mlip-trainer test: the pack gives '${from_pack}', the extended XYZ '${from_xyz}'")
endif()
message(STATUS "test on the pack = test on the extended XYZ: ${from_pack}")
foreach(name xyz pack)
  if(name STREQUAL xyz)
    set(data ${WORK}/train.xyz --energy-unit kcal/mol)
  else()
    set(data ${WORK}/train.pack)
  endif()
  execute_process(COMMAND ${TRAINER} deviation ${WORK}/memory/model.pt ${WORK}/no_prefetch/model.pt ${WORK}/two/model.pt
                          ${data} -o ${WORK}/devi-${name}.out RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "deviation on ${name} failed (${rc}): ${err}")
  endif()
endforeach()
file(READ ${WORK}/devi-xyz.out a)
file(READ ${WORK}/devi-pack.out b)
if(NOT a STREQUAL b OR a STREQUAL "")
  message(FATAL_ERROR "mlip-trainer deviation: the pack's output differs from the extended XYZ's")
endif()
message(STATUS "deviation on the pack = deviation on the extended XYZ")
