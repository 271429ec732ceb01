# Helpers of the scripted CLI tests.
#
# run(COMMAND...): runs a program, fails the script with its output unless it exits 0, and leaves its
# standard output in `output`.
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "'${ARGV}' failed (${rc}):\n${out}\n${err}")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()

# count_matches(var regex text): how many times `regex` matches in `text`, into `var`.
function(count_matches var regex text)
  string(REGEX MATCHALL "${regex}" matches "${text}")
  list(LENGTH matches n)
  set(${var} ${n} PARENT_SCOPE)
endfunction()
