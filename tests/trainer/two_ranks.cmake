# cmake -DTRAINER=... -DCOMPARE=... -DMPIEXEC=... -DCONFIG=... -DWORK=... -P two_ranks.cmake
# Trains the same config on 1 and on 2 MPI ranks and compares the final parameters. The 2-rank
# run sums its gradients in small buckets (2 kB: several per step), as a GPU run with NCCL does.
# Then batches of 3 frames (the last batch of an epoch has one, so rank 1 has no share of it):
# 2 ranks taking the recorded training step unrecorded (training.cuda_graph eager: the sum and
# the empty batch inside the step) against 1 rank's plain step, with batches put together from
# the host's frames and gathered from the frame bank (training.data_on_device).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
execute_process(COMMAND ${TRAINER} train ${CONFIG} --threads 1 --set output.dir=${WORK}/one
                        --set data.cache_dir=${WORK}/cache
                RESULT_VARIABLE rc1)
execute_process(COMMAND ${MPIEXEC} --oversubscribe -np 2 ${TRAINER} train ${CONFIG} --threads 1
                        --set output.dir=${WORK}/two --set data.cache_dir=${WORK}/cache
                        --set communication.bucket_mb=0.002
                RESULT_VARIABLE rc2)
if(NOT rc1 EQUAL 0 OR NOT rc2 EQUAL 0)
  message(FATAL_ERROR "training failed: 1 rank rc=${rc1}, 2 ranks rc=${rc2}")
endif()
execute_process(COMMAND ${COMPARE} ${WORK}/one/checkpoints/epoch-000002 ${WORK}/two/checkpoints/epoch-000002 1e-9
                RESULT_VARIABLE rc3)
if(NOT rc3 EQUAL 0)
  message(FATAL_ERROR "1-rank and 2-rank parameters differ")
endif()
execute_process(COMMAND ${TRAINER} train ${CONFIG} --threads 1 --set output.dir=${WORK}/one-b3
                        --set data.cache_dir=${WORK}/cache --set data.batch.frames=3
                        --set training.grouped=true --set training.optimizer.fused=true
                RESULT_VARIABLE rc4)
execute_process(COMMAND ${MPIEXEC} --oversubscribe -np 2 ${TRAINER} train ${CONFIG} --threads 1
                        --set output.dir=${WORK}/two-b3 --set data.cache_dir=${WORK}/cache --set data.batch.frames=3
                        --set communication.bucket_mb=0.002 --set training.cuda_graph=eager
                RESULT_VARIABLE rc5)
if(NOT rc4 EQUAL 0 OR NOT rc5 EQUAL 0)
  message(FATAL_ERROR "training failed: 1 rank batch 3 rc=${rc4}, 2 ranks recorded step (eager) rc=${rc5}")
endif()
execute_process(COMMAND ${COMPARE} ${WORK}/one-b3/checkpoints/epoch-000002 ${WORK}/two-b3/checkpoints/epoch-000002 1e-9
                RESULT_VARIABLE rc6)
if(NOT rc6 EQUAL 0)
  message(FATAL_ERROR "1-rank plain and 2-rank recorded-step (eager) parameters differ")
endif()
# The same with the frames kept "on the device" (the CPU here): batches gathered from the frame bank.
execute_process(COMMAND ${MPIEXEC} --oversubscribe -np 2 ${TRAINER} train ${CONFIG} --threads 1
                        --set output.dir=${WORK}/two-b3-bank --set data.cache_dir=${WORK}/cache --set data.batch.frames=3
                        --set communication.bucket_mb=0.002 --set training.cuda_graph=eager
                        --set training.data_on_device=true
                OUTPUT_VARIABLE log7 ERROR_VARIABLE log7 RESULT_VARIABLE rc7)
if(NOT rc7 EQUAL 0 OR NOT log7 MATCHES "the training frames in one bank")
  message(FATAL_ERROR "2 ranks, recorded step (eager) from the frame bank: rc=${rc7}\n${log7}")
endif()
execute_process(COMMAND ${COMPARE} ${WORK}/one-b3/checkpoints/epoch-000002 ${WORK}/two-b3-bank/checkpoints/epoch-000002 1e-9
                RESULT_VARIABLE rc8)
if(NOT rc8 EQUAL 0)
  message(FATAL_ERROR "1-rank plain and 2-rank recorded-step (eager) parameters from the frame bank differ")
endif()
