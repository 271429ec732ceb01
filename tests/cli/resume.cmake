# Resume through the trainer, in fresh processes: N steps uninterrupted, and k steps + checkpoint +
# a new process resuming to N, must end with bit-identical parameters (the checkpoint's CRC-32 of every
# weight) and the same loss curve. -DTRAIN=path -DWORK=dir -DARGS="--optimizer;sgd;..." [-DEXPECT=regex that
# `inspect` of both final checkpoints must match]
file(REMOVE_RECURSE ${WORK})
include(${CMAKE_CURRENT_LIST_DIR}/run_program.cmake)
function(weights_and_curve dir var)
  run(${TRAIN} inspect ${dir}/model.tgck)
  if(DEFINED EXPECT AND NOT output MATCHES "${EXPECT}")
    message(FATAL_ERROR "inspect ${dir}/model.tgck does not match '${EXPECT}':\n${output}")
  endif()
  string(REGEX MATCH "crc32 [0-9a-f]+" crc "${output}")
  file(STRINGS ${dir}/curve.csv rows)
  set(curve "")
  foreach(row IN LISTS rows)
    string(REGEX REPLACE ",[^,]*$" "" row "${row}")  # drop the wall-clock seconds
    string(APPEND curve "${row}\n")
  endforeach()
  set(${var} "${crc}\n${curve}" PARENT_SCOPE)
endfunction()

# One 60-step run that checkpoints at step 35 (between evaluations); a new process resumes from that
# checkpoint and runs to 60.
run(${TRAIN} --task cycle --steps 60 --eval-every 10 --out ${WORK}/straight --checkpoint-every 35 --keep 1 ${ARGS})
run(${TRAIN} --resume ${WORK}/straight/checkpoints/checkpoint-00000035.tgck --out ${WORK}/resumed)
weights_and_curve(${WORK}/straight a)
weights_and_curve(${WORK}/resumed b)
if(NOT a STREQUAL b)
  message(FATAL_ERROR "resumed run differs from the uninterrupted one:\n--- uninterrupted\n${a}--- resumed\n${b}")
endif()
message(STATUS "resume: identical\n${a}")
