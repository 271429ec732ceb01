# The include root. Headers include each other as "tapegrad/core/tensor.hpp", and a consumer sees one
# include root holding tapegrad/ and nothing else. In the build tree that root is <build>/include, where
# tapegrad/<room> links to the room's source folder (edits need no reconfigure); an install copies the
# public headers to <prefix>/include/tapegrad/<room>/.
#
# The rooms, by include path and source folder: the library proper, tapegrad::tapegrad (core <- autograd
# <- layers <- train, with train/checkpoint inside train), and above it the components, each a target of
# its own that links the library: train/mpi (tapegrad::mpi, included as tapegrad/train/mpi/...), and the
# support every program uses, yours too: program (tapegrad::program: exit codes, run_program, progress,
# CSV log, output folders, job pool; source train/program) and plot (tapegrad::plot: SVG charts; source
# train/plot), included as tapegrad/program/... and tapegrad/plot/.... A room whose folder lies inside
# another's (program and plot inside train) is its own room only: the outer room's headers leave it out.
#
# Sets TAPEGRAD_INCLUDE_ROOT; TAPEGRAD_PUBLIC_HEADERS, the library's public headers (include paths under
# tapegrad/, e.g. train/checkpoint/checkpoint.hpp); TAPEGRAD_MPI_HEADERS, TAPEGRAD_PROGRAM_HEADERS and
# TAPEGRAD_PLOT_HEADERS, the components'; TAPEGRAD_HEADER_SOURCE_<h> (its source path) for each; and writes
# the umbrella header <tapegrad/tapegrad.hpp>, which includes every public header of the library and none
# of a component's.

set(TAPEGRAD_INCLUDE_ROOT ${PROJECT_BINARY_DIR}/include)
set(TAPEGRAD_ROOMS core autograd layers train program plot)
set(TAPEGRAD_ROOM_SOURCE_core core)
set(TAPEGRAD_ROOM_SOURCE_autograd autograd)
set(TAPEGRAD_ROOM_SOURCE_layers layers)
set(TAPEGRAD_ROOM_SOURCE_train train)
set(TAPEGRAD_ROOM_SOURCE_program train/program)
set(TAPEGRAD_ROOM_SOURCE_plot train/plot)

# Headers that only the library's own sources include: not installed, not in the umbrella. Every other
# header in the rooms is public: the library's, or a component's (below).
set(TAPEGRAD_INTERNAL_HEADERS
  core/descriptor.hpp                # a file descriptor closed with its owner (file_io, process)
  autograd/gemm.hpp                  # the matrix products behind matmul and attention
  autograd/softmax_kernels.hpp       # the row softmax behind softmax_rows and attention
  autograd/scratch.hpp               # per-thread buffers of the products, attention and softmax
  autograd/column_sums.hpp           # the column sums of a broadcast row's gradient (add, affine, layer_norm)
  train/checkpoint/serialize.hpp     # the cereal layout of checkpoint files
  train/checkpoint/legacy.hpp        # the layouts of formats 1 and 2, converted on reading
)

# The headers of tapegrad::mpi (data-parallel training over MPI): public, but a component's of its own,
# installed only when that library is built, and not in the umbrella, which must not need MPI.
set(TAPEGRAD_MPI_HEADERS train/mpi/mpi_collective.hpp)

file(MAKE_DIRECTORY ${TAPEGRAD_INCLUDE_ROOT}/tapegrad)
set(TAPEGRAD_PUBLIC_HEADERS "")
foreach(room IN LISTS TAPEGRAD_ROOMS)
  set(source ${TAPEGRAD_ROOM_SOURCE_${room}})
  set(link ${TAPEGRAD_INCLUDE_ROOT}/tapegrad/${room})
  # A build folder made before a room moved (examples/program -> train/program) still links the old
  # folder: the link is made again wherever it does not point at the room's folder now.
  set(linked_to "")
  if(IS_SYMLINK ${link})
    file(READ_SYMLINK ${link} linked_to)
  endif()
  if(NOT linked_to STREQUAL "${PROJECT_SOURCE_DIR}/${source}")
    file(REMOVE ${link})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${source} ${link} SYMBOLIC)
  endif()
  file(GLOB_RECURSE headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}/${source} ${PROJECT_SOURCE_DIR}/${source}/*.hpp)
  foreach(inner IN LISTS TAPEGRAD_ROOMS)  # a room inside this one's folder holds its own headers
    if(TAPEGRAD_ROOM_SOURCE_${inner} MATCHES "^${source}/(.+)$")
      list(FILTER headers EXCLUDE REGEX "^${CMAKE_MATCH_1}/")
    endif()
  endforeach()
  foreach(h IN LISTS headers)
    list(APPEND TAPEGRAD_PUBLIC_HEADERS ${room}/${h})
    set(TAPEGRAD_HEADER_SOURCE_${room}/${h} ${source}/${h})
  endforeach()
endforeach()
foreach(h IN LISTS TAPEGRAD_INTERNAL_HEADERS TAPEGRAD_MPI_HEADERS)
  if(NOT DEFINED TAPEGRAD_HEADER_SOURCE_${h})
    message(FATAL_ERROR "TapegradHeaders.cmake lists ${h}, but no room holds such a header")
  endif()
endforeach()
# The headers of tapegrad::program and tapegrad::plot: their rooms' headers, installed with them, not in
# the umbrella (tapegrad::tapegrad compiles none of their files).
set(TAPEGRAD_PROGRAM_HEADERS ${TAPEGRAD_PUBLIC_HEADERS})
list(FILTER TAPEGRAD_PROGRAM_HEADERS INCLUDE REGEX "^program/")
set(TAPEGRAD_PLOT_HEADERS ${TAPEGRAD_PUBLIC_HEADERS})
list(FILTER TAPEGRAD_PLOT_HEADERS INCLUDE REGEX "^plot/")
list(REMOVE_ITEM TAPEGRAD_PUBLIC_HEADERS ${TAPEGRAD_INTERNAL_HEADERS} ${TAPEGRAD_MPI_HEADERS}
     ${TAPEGRAD_PROGRAM_HEADERS} ${TAPEGRAD_PLOT_HEADERS})
list(SORT TAPEGRAD_PUBLIC_HEADERS)

set(umbrella "// Generated by cmake/TapegradHeaders.cmake: every public header of the library, tapegrad::tapegrad\n// (the components tapegrad::mpi, tapegrad::program and tapegrad::plot have headers of their own).\n#pragma once\n\n")
foreach(h IN LISTS TAPEGRAD_PUBLIC_HEADERS)
  string(APPEND umbrella "#include \"tapegrad/${h}\"\n")
endforeach()
set(TAPEGRAD_UMBRELLA ${TAPEGRAD_INCLUDE_ROOT}/tapegrad/tapegrad.hpp)
file(CONFIGURE OUTPUT ${TAPEGRAD_UMBRELLA} CONTENT "${umbrella}")  # rewritten only when it changes
