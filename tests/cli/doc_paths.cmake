# The documentation names only what exists: every relative link of README.md and docs/*.md (a page, a
# picture, a heading after '#') and every repository path they name in backticks or code blocks
# (`examples/lesson/tasks.cpp`, `tests/cli/battery.cpp`, `<tapegrad/train/trainer.hpp>`) is in the source
# tree, and a pattern (`autograd/ops_*.cpp`) matches something there. A repository path is a word that
# starts with one of the top-level folders listed below; build outputs (`build/examples/train`) and the
# user's paths (`runs/c/model.tgck`) are not checked. A new top-level folder goes into that list. Headings
# are matched as GitHub names them (lower case, punctuation dropped, spaces as hyphens), for ASCII headings.
#
# With -DBUILD=<build folder> -DBUILT=<its program folders> (ctest passes its own build and "examples;bench"),
# the programs the pages run are checked too: `build/examples/train` must be in BUILD (the README's build,
# `cmake --build build`, makes every program; bench/'s with -DTAPEGRAD_BUILD_BENCH=ON), and a program of a build of another name
# (`build-native/bench/step_bench`) must be one the page says how to make: `-B build-native` is on the page.
#
# Code comments too: every repository path named in a comment (`//` or `#`) of the sources, scripts and
# build files that ends in a file name (`docs/performance.md`, `train/checkpoint/checkpoint.hpp`) or a `/`
# exists, so a moved file leaves no comment pointing at its old home.
#
# -DROOT=<source root>. The script first checks itself on tests/cli/doc_paths_fixture.md, a page whose
# every kind of dangling reference it must report (and, with BUILD, on tests/cli/doc_build_paths_fixture.md),
# then checks the documentation:
#   cmake -DROOT=. [-DBUILD=build "-DBUILT=examples;bench"] -P tests/cli/doc_paths.cmake
cmake_minimum_required(VERSION 3.20)  # IN_LIST, and the policies of the project
get_filename_component(ROOT "${ROOT}" ABSOLUTE)
set(roots .ci autograd bench cmake core docs examples layers tests train)
list(JOIN roots "|" roots_alternation)
string(REPLACE "." "\\." roots_regex "(${roots_alternation})")

# Semicolons and square brackets would split or join CMake list elements: they stand in for themselves
# as these marks (punctuation that a heading's anchor drops) while the text is handled as a list.
set(semicolon "~^~")
set(open_bracket "~<~")
set(close_bracket "~>~")
function(restore var text)
  string(REPLACE "${semicolon}" ";" text "${text}")
  string(REPLACE "${open_bracket}" "[" text "${text}")
  string(REPLACE "${close_bracket}" "]" text "${text}")
  set(${var} "${text}" PARENT_SCOPE)
endfunction()

# The anchor GitHub gives a heading: "## What learnable Wq, Wk, Wv buy" -> what-learnable-wq-wk-wv-buy.
function(anchor_of var heading)
  string(TOLOWER "${heading}" a)
  string(REGEX REPLACE "[^a-z0-9 _-]" "" a "${a}")
  string(REPLACE " " "-" a "${a}")
  set(${var} "${a}" PARENT_SCOPE)
endfunction()

# A page's prose and its code blocks apart, with semicolons and brackets marked (see above): a code
# block's links are not links, but its paths are paths.
function(read_page page prose_var code_var)
  file(READ ${page} text)
  string(REPLACE ";" "${semicolon}" text "${text}")
  string(REPLACE "[" "${open_bracket}" text "${text}")
  string(REPLACE "]" "${close_bracket}" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(prose "")
  set(code "")
  set(fenced OFF)
  foreach(line IN LISTS lines)
    if(line MATCHES "^```")
      if(fenced)
        set(fenced OFF)
      else()
        set(fenced ON)
      endif()
    elseif(fenced)
      string(APPEND code "${line}\n")
    else()
      string(APPEND prose "${line}\n")
    endif()
  endforeach()
  set(${prose_var} "${prose}" PARENT_SCOPE)
  set(${code_var} "${code}" PARENT_SCOPE)
endfunction()

# The anchors of a page's headings, into `var`.
function(anchors_of var page)
  read_page(${page} prose code)
  string(REPLACE "\n" ";" lines "${prose}")
  set(anchors "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^#+ +(.*)$")
      restore(heading "${CMAKE_MATCH_1}")
      anchor_of(anchor "${heading}")
      list(APPEND anchors "${anchor}")
    endif()
  endforeach()
  set(${var} "${anchors}" PARENT_SCOPE)
endfunction()

# The words of a page's `code spans` (which may wrap a line) and code blocks, once each.
function(code_words var prose code)
  string(REGEX MATCHALL "`[^`]+`" spans "${prose}")
  set(words "")
  foreach(chunk IN LISTS spans ITEMS "${code}")
    string(REGEX MATCHALL "[A-Za-z0-9_./*-]+" chunk_words "${chunk}")
    list(APPEND words ${chunk_words})
  endforeach()
  list(REMOVE_DUPLICATES words)
  set(${var} "${words}" PARENT_SCOPE)
endfunction()

# The programs `page` runs that the build does not make, or from a build it does not say how to make,
# one line each, appended to `var` (with -DBUILD; see the top).
function(unbuilt_in var page)
  set(found "${${var}}")
  file(RELATIVE_PATH shown ${ROOT} ${page})
  read_page(${page} prose code)
  code_words(words "${prose}" "${code}")
  foreach(word IN LISTS words)
    string(REGEX REPLACE "\\.+$" "" word "${word}")  # a sentence's full stop
    if(word MATCHES "^build/([A-Za-z0-9_]+)/([A-Za-z0-9_.-]+)$")
      if(CMAKE_MATCH_1 IN_LIST BUILT AND NOT EXISTS "${BUILD}/${CMAKE_MATCH_1}/${CMAKE_MATCH_2}")
        list(APPEND found "${shown}: runs `${word}`, but the build makes no ${CMAKE_MATCH_1}/${CMAKE_MATCH_2}")
      endif()
    elseif(word MATCHES "^(build-[A-Za-z0-9_-]+)/")
      set(dir "${CMAKE_MATCH_1}")
      if(NOT "${prose}${code}" MATCHES "-B ${dir}([^A-Za-z0-9_-]|$)")
        list(APPEND found "${shown}: runs `${word}` from ${dir}/, but does not say how to make it (no `-B ${dir}` on the page)")
      endif()
    endif()
  endforeach()
  set(${var} "${found}" PARENT_SCOPE)
endfunction()

# What is dangling in `page` (an absolute path), one line each, appended to `var`.
function(dangling_in var page)
  set(found "${${var}}")
  file(RELATIVE_PATH shown ${ROOT} ${page})
  get_filename_component(page_dir ${page} DIRECTORY)
  read_page(${page} prose code)
  # Links and pictures: [text](target) and ![text](target), relative to the page's folder.
  string(REGEX MATCHALL "${close_bracket}\\([^)\n]*\\)" links "${prose}")
  foreach(link IN LISTS links)
    string(REGEX REPLACE "^${close_bracket}\\(([^ )]*).*$" "\\1" target "${link}")
    restore(target "${target}")
    if(target MATCHES "^[a-z]+:" OR target STREQUAL "")
      continue()  # https:, mailto:
    endif()
    string(REGEX MATCH "^([^#]*)(#(.*))?$" _ "${target}")
    set(file_part "${CMAKE_MATCH_1}")
    set(anchor "${CMAKE_MATCH_3}")
    if(file_part STREQUAL "")
      set(linked ${page})
    else()
      get_filename_component(linked "${page_dir}/${file_part}" ABSOLUTE)
      if(NOT EXISTS "${linked}")
        list(APPEND found "${shown}: the link '${target}' leads to ${file_part}, which does not exist")
        continue()
      endif()
    endif()
    if(NOT anchor STREQUAL "")
      if(IS_DIRECTORY "${linked}" OR NOT linked MATCHES "\\.md$")
        list(APPEND found "${shown}: the link '${target}' names a heading in a file that is not a page")
        continue()
      endif()
      anchors_of(anchors ${linked})
      if(NOT anchor IN_LIST anchors)
        if(file_part STREQUAL "")
          set(file_part "this page")
        endif()
        list(APPEND found "${shown}: the link '${target}' names the heading '#${anchor}', which ${file_part} does not have")
      endif()
    endif()
  endforeach()

  # Repository paths: in `code spans` of the prose (which may wrap a line) and anywhere in code blocks.
  code_words(words "${prose}" "${code}")
  foreach(word IN LISTS words)
    string(REGEX REPLACE "^tapegrad/" "" path "${word}")  # an include path: <tapegrad/train/trainer.hpp>
    string(REGEX REPLACE "\\.+$" "" path "${path}")       # a sentence's full stop
    if(NOT path MATCHES "^${roots_regex}(/|$)")
      continue()
    endif()
    if(path MATCHES "[*]")  # a pattern: `autograd/ops_*.cpp`
      file(GLOB matching "${ROOT}/${path}")
      if(NOT matching)
        list(APPEND found "${shown}: names `${word}`, but nothing in the source tree matches ${path}")
      endif()
    elseif(NOT EXISTS "${ROOT}/${path}")
      list(APPEND found "${shown}: names `${word}`, but there is no ${path} in the source tree")
    endif()
  endforeach()
  set(${var} "${found}" PARENT_SCOPE)
endfunction()

# Repository paths named in the comments of a source file (an absolute path) that do not exist, one line
# each, appended to `var`. Only a word with a file extension or a trailing `/` counts as a path: prose such
# as "train/test" is not one.
function(dangling_in_comments var file)
  set(found "${${var}}")
  file(RELATIVE_PATH shown ${ROOT} ${file})
  file(STRINGS ${file} lines REGEX "(//|#).*${roots_regex}/")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^.*(//|#)" "" comment "${line}")  # the comment's text, after its last marker
    string(REGEX MATCHALL "[A-Za-z0-9_./*-]+" words "${comment}")
    foreach(word IN LISTS words)
      string(REGEX REPLACE "^tapegrad/" "" path "${word}")
      string(REGEX REPLACE "\\.+$" "" path "${path}")
      if(NOT path MATCHES "^${roots_regex}/" OR NOT path MATCHES "(\\.[A-Za-z0-9]+|/)$")
        continue()
      endif()
      if(path MATCHES "[*]")
        file(GLOB matching "${ROOT}/${path}")
        if(NOT matching)
          list(APPEND found "${shown}: a comment names ${word}, but nothing in the source tree matches it")
        endif()
      elseif(NOT EXISTS "${ROOT}/${path}")
        list(APPEND found "${shown}: a comment names ${word}, but there is no ${path} in the source tree")
      endif()
    endforeach()
  endforeach()
  set(${var} "${found}" PARENT_SCOPE)
endfunction()

# The check checked: on the fixture it must report each dangling reference, and only those.
set(fixture ${CMAKE_CURRENT_LIST_DIR}/doc_paths_fixture.md)
file(RELATIVE_PATH fixture_shown ${ROOT} ${fixture})
set(problems "")
dangling_in(problems ${fixture})
set(expected
  "${fixture_shown}: the link 'no_such_page.md' leads to no_such_page.md, which does not exist"
  "${fixture_shown}: the link '../../examples/no_such_picture.svg' leads to ../../examples/no_such_picture.svg, which does not exist"
  "${fixture_shown}: the link '#no-such-heading' names the heading '#no-such-heading', which this page does not have"
  "${fixture_shown}: the link '../../README.md#no-such-heading' names the heading '#no-such-heading', which ../../README.md does not have"
  "${fixture_shown}: names `examples/no_such_file.cpp`, but there is no examples/no_such_file.cpp in the source tree"
  "${fixture_shown}: names `train/tasks.cpp`, but there is no train/tasks.cpp in the source tree"
  "${fixture_shown}: names `tapegrad/layers/no_such_header.hpp`, but there is no layers/no_such_header.hpp in the source tree"
  "${fixture_shown}: names `autograd/no_such_*.cpp`, but nothing in the source tree matches autograd/no_such_*.cpp"
  "${fixture_shown}: names `tests/no_such_folder/`, but there is no tests/no_such_folder/ in the source tree")
if(NOT problems STREQUAL expected)
  list(JOIN problems "\n  " got)
  list(JOIN expected "\n  " want)
  message(FATAL_ERROR "doc_paths.cmake does not find what it should in ${fixture_shown}:\nfound\n  ${got}\nexpected\n  ${want}")
endif()

if(DEFINED BUILD)
  get_filename_component(BUILD "${BUILD}" ABSOLUTE)
  set(fixture ${CMAKE_CURRENT_LIST_DIR}/doc_build_paths_fixture.md)
  file(RELATIVE_PATH fixture_shown ${ROOT} ${fixture})
  set(problems "")
  unbuilt_in(problems ${fixture})
  set(expected
    "${fixture_shown}: runs `build/examples/no_such_program`, but the build makes no examples/no_such_program"
    "${fixture_shown}: runs `build-unmade/bench/step_bench` from build-unmade/, but does not say how to make it (no `-B build-unmade` on the page)")
  if(NOT problems STREQUAL expected)
    list(JOIN problems "\n  " got)
    list(JOIN expected "\n  " want)
    message(FATAL_ERROR "doc_paths.cmake does not find what it should in ${fixture_shown}:\nfound\n  ${got}\nexpected\n  ${want}")
  endif()
endif()

file(GLOB pages ${ROOT}/docs/*.md)
list(SORT pages)
set(problems "")
set(checked 0)
foreach(page ${ROOT}/README.md ${pages})
  dangling_in(problems ${page})
  if(DEFINED BUILD)
    unbuilt_in(problems ${page})
  endif()
  math(EXPR checked "${checked} + 1")
endforeach()
# The comments' check checked on its own fixture, then run on every source, script and build file.
set(problems_before "${problems}")
set(problems "")
dangling_in_comments(problems ${CMAKE_CURRENT_LIST_DIR}/doc_paths_fixture.cpp)
file(RELATIVE_PATH fixture_shown ${ROOT} ${CMAKE_CURRENT_LIST_DIR}/doc_paths_fixture.cpp)
set(expected
  "${fixture_shown}: a comment names examples/no_such_file.cpp, but there is no examples/no_such_file.cpp in the source tree"
  "${fixture_shown}: a comment names tapegrad/train/checkpoint.hpp, but there is no train/checkpoint.hpp in the source tree"
  "${fixture_shown}: a comment names docs/no_such_page.md, but there is no docs/no_such_page.md in the source tree")
if(NOT problems STREQUAL expected)
  list(JOIN problems "\n  " got)
  list(JOIN expected "\n  " want)
  message(FATAL_ERROR "doc_paths.cmake does not find what it should in ${fixture_shown}:\nfound\n  ${got}\nexpected\n  ${want}")
endif()
set(problems "${problems_before}")
set(sources "")
foreach(root IN LISTS roots)
  if(NOT root STREQUAL "docs")
    file(GLOB_RECURSE found_sources ${ROOT}/${root}/*.cpp ${ROOT}/${root}/*.hpp ${ROOT}/${root}/*.py ${ROOT}/${root}/*.sh
         ${ROOT}/${root}/*.cmake ${ROOT}/${root}/CMakeLists.txt)
    list(APPEND sources ${found_sources})
  endif()
endforeach()
list(FILTER sources EXCLUDE REGEX "/tests/cli/doc_paths_fixture\\.cpp$")
list(APPEND sources ${ROOT}/CMakeLists.txt ${ROOT}/.ci/run ${ROOT}/.ci/install-deps)
set(checked_sources 0)
foreach(source IN LISTS sources)
  if(EXISTS ${source})
    dangling_in_comments(problems ${source})
    math(EXPR checked_sources "${checked_sources} + 1")
  endif()
endforeach()

if(problems)
  list(LENGTH problems n)
  list(JOIN problems "\n  " lines)
  message(FATAL_ERROR "${n} dangling references in the documentation and the comments:\n  ${lines}")
endif()
message(STATUS "${checked_sources} sources, scripts and build files: every repository path their comments name exists")
if(DEFINED BUILD)
  message(STATUS "README.md and docs/: ${checked} pages, every link and repository path exists, every program they run in build/ is built, every other build is made on its page")
else()
  message(STATUS "README.md and docs/: ${checked} pages, every link and repository path exists (programs not checked: no -DBUILD)")
endif()
