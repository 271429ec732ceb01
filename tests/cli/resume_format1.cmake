# A checkpoint written by tapegrad 0.1 (format 1), resumed by this release's trainer in a fresh process,
# must end with the weights and the curve that 0.1 itself ended with (tests/data/v1/expected.txt).
# -DTRAIN=path -DWORK=dir -DFIXTURE=tests/data/v1/<name>.tgck -DEXPECTED=tests/data/v1/expected.txt
file(REMOVE_RECURSE ${WORK})
get_filename_component(name ${FIXTURE} NAME)
execute_process(COMMAND ${TRAIN} --resume ${FIXTURE} --out ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "resuming ${name} failed (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${TRAIN} inspect ${WORK}/model.tgck OUTPUT_VARIABLE summary RESULT_VARIABLE rc)
string(REGEX MATCH "crc32 ([0-9a-f]+)" crc "${summary}")
set(crc ${CMAKE_MATCH_1})
file(STRINGS ${EXPECTED} expected REGEX "^${name} ")
set(want_curve "")
foreach(line IN LISTS expected)
  if(line MATCHES "^${name} final_crc32 ([0-9a-f]+)$")
    set(want_crc ${CMAKE_MATCH_1})
  elseif(line MATCHES "^${name} curve (.*)$")
    string(APPEND want_curve "${CMAKE_MATCH_1}\n")
  endif()
endforeach()
file(STRINGS ${WORK}/curve.csv rows)
list(POP_FRONT rows)  # the header
set(curve "")
foreach(row IN LISTS rows)
  string(REGEX REPLACE ",[^,]*$" "" row "${row}")  # drop the wall-clock seconds
  string(APPEND curve "${row}\n")
endforeach()
if(NOT crc STREQUAL want_crc OR NOT curve STREQUAL want_curve)
  message(FATAL_ERROR "${name} resumed to other results than tapegrad 0.1's:\n"
                      "weights crc32 ${crc}, 0.1: ${want_crc}\n--- curve now\n${curve}--- curve of 0.1\n${want_curve}")
endif()
message(STATUS "${name}: resumed to 0.1's weights (crc32 ${crc}) and curve")
