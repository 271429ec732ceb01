# A checkpoint written by an earlier release (tapegrad 0.1: format 1, tests/data/v1; 0.2: format 2,
# tests/data/v2): this release's trainer refuses it in one line naming the command that converts it; that
# command converts it (build/examples/convert_checkpoint), and the trainer resumes the converted file in a
# fresh process: it must carry on from the file's step 10 to step 20, its curve up to step 10 must be the
# file's, as that release wrote it (expected.txt beside it), and the later rows must be there. Whether the
# final weights are that release's bit for bit depends on the CPU and build (float kernels differ in the
# last bits), so that is reported, not required; tests/test_checkpoint.cpp compares them with 0.1's to float
# rounding.
# -DTRAIN=path -DCONVERT=path -DWORK=dir -DFIXTURE=tests/data/v<N>/<name>.tgck -DEXPECTED=tests/data/v<N>/expected.txt
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
get_filename_component(name ${FIXTURE} NAME)
string(REGEX MATCH "/v([12])/" _ "${FIXTURE}")
set(format ${CMAKE_MATCH_1})
execute_process(COMMAND ${TRAIN} --resume ${FIXTURE} --out ${WORK}/refused RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(refusal "train: load '${FIXTURE}': a tapegrad 0.${format} checkpoint (format ${format}); convert it with: build/examples/convert_checkpoint '${FIXTURE}' NEW\n")
if(rc EQUAL 0 OR NOT err STREQUAL refusal OR EXISTS ${WORK}/refused/model.tgck)
  message(FATAL_ERROR "the trainer did not refuse ${name} unconverted in one line (${rc}):\n${out}\n${err}--- expected\n${refusal}")
endif()
execute_process(COMMAND ${CONVERT} ${FIXTURE} ${WORK}/converted.tgck RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "^converted '[^']*${name}' \\(tapegrad 0\\.${format}\\.0, format ${format}\\) to '[^']*converted.tgck' \\(format 3\\)")
  message(FATAL_ERROR "converting ${name} failed (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${TRAIN} --resume ${WORK}/converted.tgck --out ${WORK}/run RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "resuming ${name}, converted, failed (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${TRAIN} inspect ${WORK}/run/model.tgck OUTPUT_VARIABLE summary RESULT_VARIABLE rc)
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
file(STRINGS ${WORK}/run/curve.csv rows)
list(POP_FRONT rows)  # the header
set(curve "")
foreach(row IN LISTS rows)
  string(REGEX REPLACE ",[^,]*$" "" row "${row}")  # drop the wall-clock seconds
  string(APPEND curve "${row}\n")
endforeach()
string(REGEX MATCH "^0,[^\n]*\n5,[^\n]*\n10,[^\n]*\n" head "${curve}")
string(REGEX MATCH "^0,[^\n]*\n5,[^\n]*\n10,[^\n]*\n" want_head "${want_curve}")
if(NOT head STREQUAL want_head OR NOT curve MATCHES "\n15,[^\n]*\n20,[^\n]*\n$")
  message(FATAL_ERROR "${name} did not carry on from its release's curve to step 20:\n--- curve now\n${curve}--- curve then\n${want_curve}")
endif()
if(crc STREQUAL want_crc)
  message(STATUS "${name}: resumed to its release's own final weights, bit for bit (crc32 ${crc})")
else()
  message(STATUS "${name}: resumed to weights with crc32 ${crc}; its release on its machine had ${want_crc} (float kernels differ)")
endif()
