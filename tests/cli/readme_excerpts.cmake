# The README's code is the tested code: every C++ block is an excerpt, and every block the README introduces with
#   <!-- excerpt: <file> <name> -->
# must be, line for line, the region of <file> between "// [readme:<name>]" and "// [readme:<name>-end]".
# -DROOT=<source root>; with -DUPDATE=ON it rewrites the README's blocks from the files instead of checking:
#   cmake -DROOT=. -DUPDATE=ON -P tests/cli/readme_excerpts.cmake
# A page of docs/ is checked the same way with -DPAGE=docs/<page>.md -DTAG=docs: its markers are
# "// [docs:<name>]" and "// [docs:<name>-end]".
include(${CMAKE_CURRENT_LIST_DIR}/run_program.cmake)
if(NOT PAGE)
  set(PAGE README.md)
endif()
if(NOT TAG)
  set(TAG readme)
endif()
file(READ ${ROOT}/${PAGE} readme)
string(REGEX MATCHALL "<!-- excerpt: [^ ]+ [^ ]+ -->\n```[a-z]*\n" starts "${readme}")
list(LENGTH starts count)
if(count EQUAL 0)
  message(FATAL_ERROR "${PAGE} has no excerpts")
endif()
# Every C++ block of the README is an excerpt: no fragment that no compiler has seen.
count_matches(n_cpp "\n```cpp\n" "${readme}")
count_matches(n_cpp_excerpts "<!-- excerpt: [^ ]+ [^ ]+ -->\n```cpp\n" "${readme}")
if(NOT n_cpp EQUAL n_cpp_excerpts)
  message(FATAL_ERROR "${PAGE} has ${n_cpp} C++ blocks but only ${n_cpp_excerpts} are excerpts of tested code: put "
                      "the code in a file ctest compiles and runs, between // [${TAG}:<name>] markers, and write "
                      "<!-- excerpt: <file> <name> --> before its block")
endif()
foreach(start IN LISTS starts)
  string(REGEX MATCH "<!-- excerpt: ([^ ]+) ([^ ]+) -->" _ "${start}")
  set(path ${CMAKE_MATCH_1})
  set(name ${CMAKE_MATCH_2})
  # The README's block: from after the opening fence to the closing one.
  string(FIND "${readme}" "${start}" at)
  string(LENGTH "${start}" n)
  math(EXPR from "${at} + ${n}")
  string(SUBSTRING "${readme}" ${from} -1 rest)
  string(FIND "${rest}" "```" close)
  string(SUBSTRING "${rest}" 0 ${close} shown)
  # The file's region between its markers.
  file(READ ${ROOT}/${path} source)
  set(open_marker "// [${TAG}:${name}]\n")
  set(close_marker "// [${TAG}:${name}-end]")
  string(FIND "${source}" "${open_marker}" a)
  string(FIND "${source}" "${close_marker}" b)
  if(a EQUAL -1 OR b EQUAL -1)
    message(FATAL_ERROR "${PAGE} quotes ${path} '${name}', but ${path} has no [${TAG}:${name}] markers")
  endif()
  string(LENGTH "${open_marker}" m)
  math(EXPR a "${a} + ${m}")
  math(EXPR len "${b} - ${a}")
  string(SUBSTRING "${source}" ${a} ${len} region)
  if(NOT shown STREQUAL region)
    if(UPDATE)
      string(SUBSTRING "${readme}" 0 ${from} before)
      math(EXPR after "${from} + ${close}")
      string(SUBSTRING "${readme}" ${after} -1 tail)
      set(readme "${before}${region}${tail}")
      message(STATUS "${PAGE} excerpt ${path} '${name}' updated")
      continue()
    endif()
    message(FATAL_ERROR "${PAGE}'s excerpt '${name}' differs from ${path}:\n--- ${PAGE}\n${shown}--- ${path}\n${region}"
                        "(cmake -DROOT=. -DUPDATE=ON -P tests/cli/readme_excerpts.cmake rewrites it)")
  endif()
  message(STATUS "${PAGE} excerpt ${path} '${name}' is the file's code")
endforeach()
if(UPDATE)
  file(WRITE ${ROOT}/${PAGE} "${readme}")
endif()
