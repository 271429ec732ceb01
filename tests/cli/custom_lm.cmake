# examples/custom_lm as a user runs it: the user's language model learns its text (the loss falls below 1
# nat a character from ln 128 = 4.85) and samples the same characters through the cache as by recomputing
# each window. -DPROGRAM=path
include(${CMAKE_CURRENT_LIST_DIR}/run_program.cmake)
run(${PROGRAM})
if(NOT output MATCHES "step 400: loss 0\\.[0-9]+\n")
  message(FATAL_ERROR "the model should learn its text (loss below 1 at step 400):\n${output}")
endif()
if(NOT output MATCHES "the two samples are the same\n$")
  message(FATAL_ERROR "the cached and the recomputed samples should be the same:\n${output}")
endif()
message(STATUS "custom_lm:\n${output}")
