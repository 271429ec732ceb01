# examples/resumable_loop as a user runs it, each step a fresh process: a straight run of the loop by hand;
# the same run killed with SIGKILL at step 250, after its checkpoint at 200; that checkpoint resumed in
# another process. The resumed run must end with the straight run's weights and everything else the loop
# carries (Adam's state, the sampler, both random streams, the moving average, the step), bit for bit
# (their CRC-32s).
# A loop's checkpoint given to the trainer CLI is refused in the words restore() uses for it (one refusal, one
# wording), naming the parts it lacks and those it holds, and nothing is written.
# -DPROGRAM=path -DTRAIN=path (build/examples/train) -DWORK=dir
file(REMOVE_RECURSE ${WORK})
include(${CMAKE_CURRENT_LIST_DIR}/run_program.cmake)

run(${PROGRAM} train ${WORK}/straight)
if(NOT output MATCHES "step 400: mse ([0-9.]+)\nweights crc32 ([0-9a-f]+)\nstate crc32 ([0-9a-f]+)")
  message(FATAL_ERROR "no final mse, weights and state in:\n${output}")
endif()
set(mse ${CMAKE_MATCH_1})
set(straight "${CMAKE_MATCH_2} ${CMAKE_MATCH_3}")
if(mse GREATER_EQUAL 0.01)
  message(FATAL_ERROR "the loop should fit y = x0 x1 (mse below 0.01), got ${mse}:\n${output}")
endif()

execute_process(COMMAND ${PROGRAM} train ${WORK}/killed --kill-at 250 RESULT_VARIABLE killed OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT killed MATCHES "[Kk]illed|KILL|137")
  message(FATAL_ERROR "the run should have been killed at step 250, it ended with '${killed}':\n${out}${err}")
endif()
if(NOT EXISTS ${WORK}/killed/checkpoint-00000200.tgck OR EXISTS ${WORK}/killed/checkpoint-00000300.tgck)
  message(FATAL_ERROR "the killed run should have left its checkpoint at 200 and none at 300")
endif()

run(${PROGRAM} resume ${WORK}/killed/checkpoint-00000200.tgck)
if(NOT output MATCHES "step 400: mse [0-9.]+\nweights crc32 ([0-9a-f]+)\nstate crc32 ([0-9a-f]+)")
  message(FATAL_ERROR "no final weights and state in:\n${output}")
endif()
if(NOT "${CMAKE_MATCH_1} ${CMAKE_MATCH_2}" STREQUAL straight)
  message(FATAL_ERROR "the resumed loop should end bit for bit where the straight run ended: weights and state "
                      "${straight} straight, ${CMAKE_MATCH_1} ${CMAKE_MATCH_2} resumed:\n${output}")
endif()
execute_process(COMMAND ${TRAIN} --resume ${WORK}/killed/checkpoint-00000200.tgck --out ${WORK}/as_trainer
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(expected "train: resume: '${WORK}/killed/checkpoint-00000200.tgck': the file has no 'trainer' (it holds \
'model', 'optimizer', 'batches', 'noise', 'dropout', 'ema', 'step'); nothing was loaded\n")
if(rc EQUAL 0 OR NOT err STREQUAL expected OR EXISTS ${WORK}/as_trainer)
  message(FATAL_ERROR "train --resume of a loop's checkpoint should be refused as restore() words it, writing "
                      "nothing; exit ${rc}, stderr:\n${err}\nexpected:\n${expected}")
endif()
message(STATUS "resumable_loop: killed at 250, resumed from 200, weights and state ${straight} as the straight run's")
