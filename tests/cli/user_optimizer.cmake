# examples/user_optimizer as a user runs it, each step a fresh process: train with the user's Lion
# (checkpointing half way), resume the half-way checkpoint in another process and end with bit-identical
# weights; with -DINSPECT=<examples/train>, `train inspect` shows the optimizer by its own name with its
# hyperparameters. -DPROGRAM=path -DWORK=dir [-DINSPECT=path]
file(REMOVE_RECURSE ${WORK})
include(${CMAKE_CURRENT_LIST_DIR}/run_program.cmake)

run(${PROGRAM} train ${WORK}/lion)
set(trained "${output}")
if(NOT trained MATCHES "step 0: mse ([0-9.]+).*step 400: mse ([0-9.]+)")
  message(FATAL_ERROR "no mse before and after training:\n${trained}")
endif()
set(before ${CMAKE_MATCH_1})
set(after ${CMAKE_MATCH_2})
if(NOT after LESS before OR after GREATER_EQUAL 0.01)
  message(FATAL_ERROR "Lion should fit sin(3x) (mse below 0.01), but the mse went from ${before} to ${after}:\n${trained}")
endif()
if(NOT trained MATCHES "weights crc32 ([0-9a-f]+)")
  message(FATAL_ERROR "no weights crc32 in:\n${trained}")
endif()
set(straight ${CMAKE_MATCH_1})

run(${PROGRAM} resume ${WORK}/lion/checkpoint-00000200.tgck)
if(NOT output MATCHES "weights crc32 ([0-9a-f]+)")
  message(FATAL_ERROR "no weights crc32 in:\n${output}")
endif()
set(resumed ${CMAKE_MATCH_1})
if(NOT resumed STREQUAL straight)
  message(FATAL_ERROR "a resumed Lion run should end bit for bit where the straight run ended: weights ${straight} "
                      "straight, ${resumed} resumed:\n${output}")
endif()

if(INSPECT)
  run(${INSPECT} inspect ${WORK}/lion/model.tgck)
  if(NOT output MATCHES "optimizer: lion after 400 steps \\(lr 0.005, beta1 0.9, beta2 0.99, weight_decay 0.01\\)")
    message(FATAL_ERROR "inspect should name the optimizer 'lion' and show its hyperparameters:\n${output}")
  endif()
endif()
message(STATUS "user_optimizer: Lion took the mse from ${before} to ${after}; resumed weights ${resumed} are the straight run's")
