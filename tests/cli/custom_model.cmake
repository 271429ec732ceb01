# examples/custom_model as a user runs it, each step a fresh process: train (which also gradchecks the
# model), reload the saved model and predict the test set bit for bit as the trained one did, resume the
# half-way checkpoint and end with bit-identical weights. -DPROGRAM=path -DWORK=dir
file(REMOVE_RECURSE ${WORK})
include(${CMAKE_CURRENT_LIST_DIR}/run_program.cmake)
function(crc name text var)
  if(NOT text MATCHES "${name} crc32 ([0-9a-f]+)")
    message(FATAL_ERROR "no '${name} crc32' in:\n${text}")
  endif()
  set(${var} ${CMAKE_MATCH_1} PARENT_SCOPE)
endfunction()

run(${PROGRAM} train --out ${WORK}/straight)
set(trained "${output}")
if(NOT trained MATCHES "gradcheck passed")
  message(FATAL_ERROR "the model's gradcheck did not pass:\n${trained}")
endif()
if(NOT trained MATCHES "step 1000: test accuracy (0\\.9[5-9][0-9]|1\\.000)")
  message(FATAL_ERROR "the MLP should separate the two moons (test accuracy >= 0.95):\n${trained}")
endif()
if(NOT EXISTS ${WORK}/straight/boundary.svg)
  message(FATAL_ERROR "no boundary.svg")
endif()
crc(predictions "${trained}" trained_predictions)
crc(weights "${trained}" trained_weights)

run(${PROGRAM} predict ${WORK}/straight/model.tgck)
crc(predictions "${output}" reloaded_predictions)
run(${PROGRAM} resume ${WORK}/straight/checkpoint-00000500.tgck --out ${WORK}/resumed)
crc(weights "${output}" resumed_weights)
if(NOT reloaded_predictions STREQUAL trained_predictions OR NOT resumed_weights STREQUAL trained_weights)
  message(FATAL_ERROR "predictions: trained ${trained_predictions}, reloaded ${reloaded_predictions}; "
                      "weights: trained ${trained_weights}, resumed ${resumed_weights}")
endif()
message(STATUS "custom_model: reloaded predictions ${reloaded_predictions} and resumed weights ${resumed_weights} "
               "are the trained model's")
