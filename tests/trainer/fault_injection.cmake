# cmake -DTRAINER=... -DCOMPARE=... -DMPIEXEC=... -DCONFIG=... -DWORK=... -P fault_injection.cmake
# Kills mlip-trainer (MLIP_FAULT_POINT, trainer/src/checkpoint.h) at every point of the checkpoint
# protocol while it saves the last epoch (3 of 3: a kill there leaves the most to repair), resumes
# it, and requires the resumed run to end with bitwise the uninterrupted run's weights in the last
# epoch's checkpoint and in best/, and an exported model.pt. Then the same for a 2-rank run killed
# while writing epoch 2's state.json.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
set(common train ${CONFIG} --threads 1 --set training.epochs=3 --set data.cache_dir=${WORK}/cache)

# The exported model.pt is made from best/ (frozen: its weights are constants, which
# compare_checkpoints does not read), so best/ stands for it; it must exist.
function(expect_same reference run what)
  if(NOT EXISTS ${run}/model.pt)
    message(FATAL_ERROR "${what}: no exported model.pt")
  endif()
  foreach(part checkpoints/epoch-000003 checkpoints/best)
    execute_process(COMMAND ${COMPARE} ${reference}/${part} ${run}/${part} 0 RESULT_VARIABLE rc OUTPUT_VARIABLE out)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${what}: ${part} differs from the uninterrupted run: ${out}")
    endif()
  endforeach()
endfunction()

execute_process(COMMAND ${TRAINER} ${common} --set output.dir=${WORK}/full RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the uninterrupted run failed (${rc})")
endif()

set(points begin model.pt optimizer.pt ema.pt state.json sealed renamed best-copied best-exchanged best-replaced pruned)
foreach(point IN LISTS points)
  set(out ${WORK}/killed-${point})
  set(ENV{MLIP_FAULT_POINT} "${point}@3")
  execute_process(COMMAND ${TRAINER} ${common} --set output.dir=${out} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  unset(ENV{MLIP_FAULT_POINT})
  if(NOT rc EQUAL 86)
    message(FATAL_ERROR "fault point '${point}' was not reached (exit ${rc}): ${err}")
  endif()
  execute_process(COMMAND ${TRAINER} ${common} --set output.dir=${out} --resume RESULT_VARIABLE rc OUTPUT_VARIABLE log
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "resume after a kill at '${point}' failed (${rc}): ${err}")
  endif()
  expect_same(${WORK}/full ${out} "killed at '${point}'")
  message(STATUS "killed at '${point}' during epoch 3, resumed: bitwise the uninterrupted run")
endforeach()

# 2 ranks: rank 0 writes and is killed; mpirun ends the other rank; resume on 2 ranks.
execute_process(COMMAND ${MPIEXEC} --oversubscribe -np 2 ${TRAINER} ${common} --set output.dir=${WORK}/full2
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the uninterrupted 2-rank run failed (${rc})")
endif()
set(ENV{MLIP_FAULT_POINT} "state.json@2")
execute_process(COMMAND ${MPIEXEC} --oversubscribe -np 2 ${TRAINER} ${common} --set output.dir=${WORK}/killed2
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET TIMEOUT 120)
unset(ENV{MLIP_FAULT_POINT})
if(rc EQUAL 0)
  message(FATAL_ERROR "the 2-rank fault point was not reached")
endif()
execute_process(COMMAND ${MPIEXEC} --oversubscribe -np 2 ${TRAINER} ${common} --set output.dir=${WORK}/killed2 --resume
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "2-rank resume failed (${rc}): ${err}")
endif()
expect_same(${WORK}/full2 ${WORK}/killed2 "2 ranks killed at 'state.json'")
message(STATUS "2 ranks killed at 'state.json' during epoch 2, resumed: bitwise the uninterrupted 2-rank run")
