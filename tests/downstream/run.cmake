# Installs the freshly built tapegrad into a scratch prefix, then configures, builds and runs a tiny
# separate project that uses find_package(tapegrad) and links tapegrad::tapegrad (and, with -DWITH_MPI=ON,
# one that asks for the mpi component). CXX_FLAGS carries the sanitizer flags when the library under test
# was built with them; BUILD_TYPE is the projects' CMAKE_BUILD_TYPE, and BUILD_TYPE_FLAGS, when given, that
# build type's flags (CMAKE_CXX_FLAGS_<BUILD_TYPE>).
file(REMOVE_RECURSE ${WORK_DIR})
set(build_type_flags "")
if(DEFINED BUILD_TYPE_FLAGS)
  string(TOUPPER "${BUILD_TYPE}" upper)
  set(build_type_flags "-DCMAKE_CXX_FLAGS_${upper}=${BUILD_TYPE_FLAGS}")
endif()
set(prefix ${WORK_DIR}/prefix)

function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "downstream: '${ARGV}' failed (${rc}):\n${out}\n${err}")
  endif()
endfunction()

run(${CMAKE_COMMAND} --install ${TAPEGRAD_BUILD_DIR} --prefix ${prefix})
# One include root: include/ holds tapegrad/ and nothing else, and no internal header is installed.
file(GLOB roots RELATIVE ${prefix}/include ${prefix}/include/*)
if(NOT roots STREQUAL "tapegrad")
  message(FATAL_ERROR "downstream: include/ should hold only tapegrad/, but holds: ${roots}")
endif()
# The umbrella header holds the library alone: no header of program support or plots (their own targets).
file(STRINGS ${prefix}/include/tapegrad/tapegrad.hpp component_includes REGEX "tapegrad/train/(program|plot)/")
if(component_includes)
  message(FATAL_ERROR "downstream: <tapegrad/tapegrad.hpp> includes headers of tapegrad::program or tapegrad::plot: ${component_includes}")
endif()
foreach(h train/program/run_program.hpp train/plot/plot.hpp)
  if(NOT EXISTS ${prefix}/include/tapegrad/${h})
    message(FATAL_ERROR "downstream: <tapegrad/${h}> was not installed")
  endif()
endforeach()
string(REPLACE "," ";" internal "${INTERNAL_HEADERS}")
foreach(h IN LISTS internal)
  if(EXISTS ${prefix}/include/tapegrad/${h})
    message(FATAL_ERROR "downstream: the internal header ${h} was installed")
  endif()
endforeach()
run(${CMAKE_COMMAND} -S ${DOWNSTREAM_SOURCE_DIR} -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${prefix}
    -DTAPEGRAD_EXAMPLES_DIR=${EXAMPLES_DIR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=${BUILD_TYPE} "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" ${build_type_flags})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build --parallel 2)
run(${WORK_DIR}/build/downstream)
# The user's model program, built against the install, as the in-tree ctest runs it.
execute_process(COMMAND ${CMAKE_COMMAND} -DPROGRAM=${WORK_DIR}/build/custom_model -DWORK=${WORK_DIR}/custom_model
                        -P ${CUSTOM_MODEL_SCRIPT} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "downstream: examples/first_steps/3_custom_model.cpp built against the install failed its run:\n${out}\n${err}")
endif()
# Every tapegrad header a first step includes is one the install has: the in-tree build, which builds and runs
# them, also sees the internal headers.
file(GLOB first_steps ${EXAMPLES_DIR}/first_steps/*.cpp)
foreach(source IN LISTS first_steps)
  file(STRINGS ${source} includes REGEX "^#include [<\"]tapegrad/")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^#include [<\"](tapegrad/[^>\"]+)[>\"].*" "\\1" header "${line}")
    if(NOT EXISTS ${prefix}/include/${header})
      message(FATAL_ERROR "downstream: ${source} includes <${header}>, which is not installed")
    endif()
  endforeach()
endforeach()
# Data-parallel training from the install, when tapegrad was built with it: the mpi component.
if(WITH_MPI)
  run(${CMAKE_COMMAND} -S ${DOWNSTREAM_SOURCE_DIR}/mpi -B ${WORK_DIR}/build_mpi -DCMAKE_PREFIX_PATH=${prefix}
      -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=${BUILD_TYPE} "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" ${build_type_flags})
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/build_mpi)
  run(${WORK_DIR}/build_mpi/downstream_mpi)
endif()
message(STATUS "downstream: find_package(tapegrad) project configured, built and ran, custom_model included; "
               "the first steps include installed headers only\n${out}")
