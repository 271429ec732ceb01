# examples/train --data-parallel as users run it, each run a fresh mpirun job (or one process):
#   - 2 ranks train; only rank 0 prints and writes --out;
#   - a 2-rank checkpoint resumed on 2 ranks ends bit-identical to the uninterrupted 2-rank run (weights'
#     CRC-32 and curve); resumed in one process, and a one-process checkpoint resumed on 2 ranks, both
#     reach the end with the uninterrupted run's data order (the global batch order does not depend on the
#     number of ranks; their numbers agree to float rounding, which tests/mpi/test_data_parallel.cpp measures);
#   - ranks started with another --seed (an MPMD command line) are refused at the start, naming the rank;
#   - a rank that throws (its --max-memory refuses the run) ends the whole job with its message and code;
#     so does a rank whose flags are wrong, before it joins the job.
# -DTRAIN=path -DMPIRUN="mpirun;--oversubscribe;..." -DWORK=dir
file(REMOVE_RECURSE ${WORK})
include(${CMAKE_CURRENT_LIST_DIR}/run_program.cmake)
set(ranks2 ${MPIRUN} -np 2 ${TRAIN} --data-parallel)

# inspect's weights CRC-32 and data order, and the curve without its wall-clock column.
function(run_record dir var)
  run(${TRAIN} inspect ${dir}/model.tgck)
  string(REGEX MATCH "crc32 [0-9a-f]+" crc "${output}")
  string(REGEX MATCH "trainer\\.data_order\\.epoch [^\n]*\n[^\n]*" order "${output}")
  file(STRINGS ${dir}/curve.csv rows)
  set(curve "")
  foreach(row IN LISTS rows)
    string(REGEX REPLACE ",[^,]*$" "" row "${row}")
    string(APPEND curve "${row}\n")
  endforeach()
  set(${var}_crc "${crc}" PARENT_SCOPE)
  set(${var}_order "${order}" PARENT_SCOPE)
  set(${var}_curve "${curve}" PARENT_SCOPE)
endfunction()

# A job that must fail: exit code `code`, output matching `regex`.
function(refused code regex)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  if(NOT rc EQUAL ${code} OR NOT "${out}${err}" MATCHES "${regex}")
    message(FATAL_ERROR "'${ARGN}': expected exit ${code} and '${regex}', got ${rc}:\n${out}${err}")
  endif()
endfunction()

set(task --task cycle --steps 60 --eval-every 10)
execute_process(COMMAND ${ranks2} ${task} --out ${WORK}/straight --checkpoint-every 35 --keep 1
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "2 ranks failed (${rc}):\n${out}${err}")
endif()
count_matches(n_final "final steps=60 " "${out}")
count_matches(n_wrote "wrote " "${err}")
if(NOT n_final EQUAL 1 OR NOT n_wrote EQUAL 1 OR NOT err MATCHES "data-parallel: 2 ranks")
  message(FATAL_ERROR "expected rank 0 alone to print (one 'final', one 'wrote'), got:\n${out}${err}")
endif()
run_record(${WORK}/straight straight)
set(checkpoint ${WORK}/straight/checkpoints/checkpoint-00000035.tgck)

# The same number of ranks: bit for bit.
run(${ranks2} --resume ${checkpoint} --out ${WORK}/resumed2)
run_record(${WORK}/resumed2 resumed2)
if(NOT resumed2_crc STREQUAL straight_crc OR NOT resumed2_curve STREQUAL straight_curve)
  message(FATAL_ERROR "2 ranks resumed on 2 ranks differ from the uninterrupted run:\n${straight_crc}\n${straight_curve}--- "
                      "resumed\n${resumed2_crc}\n${resumed2_curve}")
endif()
# One process from the 2-rank checkpoint; 2 ranks from a one-process checkpoint: the same data order.
run(${TRAIN} --resume ${checkpoint} --out ${WORK}/resumed1)
run_record(${WORK}/resumed1 resumed1)
run(${TRAIN} ${task} --out ${WORK}/single --checkpoint-every 35 --keep 1)
run(${ranks2} --resume ${WORK}/single/checkpoints/checkpoint-00000035.tgck --out ${WORK}/single_on_2)
run_record(${WORK}/single_on_2 single_on_2)
foreach(run resumed1 single_on_2)
  if(NOT ${run}_order STREQUAL straight_order OR NOT ${run}_order MATCHES "^trainer\\.data_order\\.epoch +ints \\(1\\) +[0-9]+\n +trainer\\.data_order\\.cursor +ints \\(1\\) +[0-9]+")
    message(FATAL_ERROR "${run}: '${${run}_order}', but the uninterrupted run ends at '${straight_order}'")
  endif()
endforeach()

# Hostile starts: ranks given other seeds (MPMD), a rank that refuses its run, no mpirun at all.
refused(2 "train: rank [01]: data-parallel: the ranks were started with different training options: rank 1 differs from rank 0"
        ${MPIRUN} -np 1 ${TRAIN} --data-parallel ${task} --seed 0 --out ${WORK}/refused
        : -np 1 ${TRAIN} --data-parallel ${task} --seed 1 --out ${WORK}/refused)
# The refused start wrote nothing into --out (an empty curve.csv.partial used to block the next run there).
file(GLOB left RELATIVE ${WORK}/refused ${WORK}/refused/*)
list(REMOVE_ITEM left .tapegrad.lock)
if(left)
  message(FATAL_ERROR "a refused start left files in --out: ${left}")
endif()
run(${ranks2} ${task} --out ${WORK}/refused)
refused(2 "train: rank 1: generating 4000 \\+ 1000 sequences of cycle would take about .*, more than the limit"
        ${MPIRUN} -np 1 ${TRAIN} --data-parallel ${task} : -np 1 ${TRAIN} --data-parallel ${task} --max-memory 1e-6)
# A flag only rank 1 has wrong: it ends before it joins the job, and mpirun ends the job. How mpirun says
# so is a race of its own: usually both of its notices (the second names the process, [[job,1],1]),
# about one run in six only the first; either one says that a process's non-zero exit ended the job.
refused(2 "train: The following argument was not expected: --bogus \\(see --help\\).*(Process name: \\[\\[[0-9]+,1\\],1\\]|1 process returned[ \n]+a non-zero exit code)"
        ${MPIRUN} -np 1 ${TRAIN} --data-parallel ${task} : -np 1 ${TRAIN} --data-parallel ${task} --bogus)
refused(2 "^train: --data-parallel: this process was not started by mpirun; run it as 'mpirun -np 2 train --data-parallel \\.\\.\\.'\n$"
        ${TRAIN} --data-parallel ${task})
message(STATUS "data-parallel: 2 ranks resumed on 2 ranks: ${straight_crc}; 1 <-> 2 ranks: ${straight_order}")
