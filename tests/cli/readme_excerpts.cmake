# The documentation's code is the tested code: every C++ block of README.md and docs/*.md is an excerpt,
# and every block a page introduces with
#   <!-- excerpt: <file> <name> -->
# must be, line for line, the region of <file> between "// [readme:<name>]" and "// [readme:<name>-end]".
# -DROOT=<source root>; with -DUPDATE=ON it rewrites the pages' blocks from the files instead of checking:
#   cmake -DROOT=. -DUPDATE=ON -P tests/cli/readme_excerpts.cmake
include(${CMAKE_CURRENT_LIST_DIR}/run_program.cmake)
get_filename_component(ROOT "${ROOT}" ABSOLUTE)

# Checks (or, with UPDATE, rewrites) the excerpts of one page; `page` is relative to ROOT.
function(check_excerpts page)
  file(READ ${ROOT}/${page} text)
  string(REGEX MATCHALL "<!-- excerpt: [^ ]+ [^ ]+ -->\n```[a-z+]*\n" starts "${text}")
  list(LENGTH starts count)
  if(count EQUAL 0 AND page STREQUAL "README.md")
    message(FATAL_ERROR "README.md has no excerpts: its \"Write your own model\" shows examples/first_steps/")
  endif()
  # Every C++ block is an excerpt: no fragment that no compiler has seen.
  count_matches(n_cpp "\n```(cpp|c\\+\\+)\n" "${text}")
  count_matches(n_cpp_excerpts "<!-- excerpt: [^ ]+ [^ ]+ -->\n```(cpp|c\\+\\+)\n" "${text}")
  if(NOT n_cpp EQUAL n_cpp_excerpts)
    message(FATAL_ERROR "${page} has ${n_cpp} C++ blocks but only ${n_cpp_excerpts} are excerpts of tested code: put "
                        "the code in a file ctest compiles and runs, between // [readme:<name>] markers, and write "
                        "<!-- excerpt: <file> <name> --> before its block")
  endif()
  set(changed OFF)
  foreach(start IN LISTS starts)
    string(REGEX MATCH "<!-- excerpt: ([^ ]+) ([^ ]+) -->" _ "${start}")
    set(path ${CMAKE_MATCH_1})
    set(name ${CMAKE_MATCH_2})
    # The page's block: from after the opening fence to the closing one.
    string(FIND "${text}" "${start}" at)
    string(LENGTH "${start}" n)
    math(EXPR from "${at} + ${n}")
    string(SUBSTRING "${text}" ${from} -1 rest)
    string(FIND "${rest}" "```" close)
    string(SUBSTRING "${rest}" 0 ${close} shown)
    # The file's region between its markers.
    if(NOT EXISTS ${ROOT}/${path})
      message(FATAL_ERROR "${page} quotes ${path} '${name}', but there is no ${path}")
    endif()
    file(READ ${ROOT}/${path} source)
    set(open_marker "// [readme:${name}]\n")
    set(close_marker "// [readme:${name}-end]")
    string(FIND "${source}" "${open_marker}" a)
    string(FIND "${source}" "${close_marker}" b)
    if(a EQUAL -1 OR b EQUAL -1)
      message(FATAL_ERROR "${page} quotes ${path} '${name}', but ${path} has no [readme:${name}] markers")
    endif()
    string(LENGTH "${open_marker}" m)
    math(EXPR a "${a} + ${m}")
    math(EXPR len "${b} - ${a}")
    string(SUBSTRING "${source}" ${a} ${len} region)
    if(NOT shown STREQUAL region)
      if(UPDATE)
        string(SUBSTRING "${text}" 0 ${from} before)
        math(EXPR after "${from} + ${close}")
        string(SUBSTRING "${text}" ${after} -1 tail)
        set(text "${before}${region}${tail}")
        set(changed ON)
        message(STATUS "${page}: excerpt ${path} '${name}' updated")
        continue()
      endif()
      message(FATAL_ERROR "${page}'s excerpt '${name}' differs from ${path}:\n--- ${page}\n${shown}--- ${path}\n${region}"
                          "(cmake -DROOT=. -DUPDATE=ON -P tests/cli/readme_excerpts.cmake rewrites it)")
    endif()
    # A block that shows main() is a program shown whole: it must compile as shown, so the file may hold
    # nothing outside the markers but comments and blank lines.
    if(region MATCHES "\nint main\\(")
      string(SUBSTRING "${source}" 0 ${a} outside_before)
      string(SUBSTRING "${source}" ${b} -1 outside_after)
      string(REGEX REPLACE "\n[ \t]*//[^\n]*" "" outside "\n${outside_before}\n${outside_after}")
      string(REGEX REPLACE "[ \t\n]" "" outside "${outside}")
      if(NOT outside STREQUAL "")
        message(FATAL_ERROR "${page}'s excerpt '${name}' shows main() but ${path} has code outside its markers "
                            "(${outside}): a program shown whole must compile as shown; put the markers around all of it")
      endif()
    endif()
    message(STATUS "${page}: excerpt ${path} '${name}' is the file's code")
  endforeach()
  if(changed)
    file(WRITE ${ROOT}/${page} "${text}")
  endif()
endfunction()

file(GLOB docs RELATIVE ${ROOT} ${ROOT}/docs/*.md)
list(SORT docs)
foreach(page README.md ${docs})
  check_excerpts(${page})
endforeach()
