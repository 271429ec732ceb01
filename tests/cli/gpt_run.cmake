# examples/gpt as a user runs it, each step a fresh process, on a tiny setting: a comparison run prints the
# table (rows bigram, parameter-free, learnable) and saves its models and samples, checkpointing half way;
# --sample-from prints exactly the saved samples, with and without the cache; a run resumed from the
# half-way checkpoint ends with bit-identical weights (their CRC-32), the same validation loss and the
# same samples; a prompt byte outside the vocabulary and a second run into the same folder are refused.
# -DPROGRAM=path -DDATA=fortune-folder -DWORK=dir
file(REMOVE_RECURSE ${WORK})
include(${CMAKE_CURRENT_LIST_DIR}/run_program.cmake)

set(tiny --data ${DATA} --prepared ${WORK}/data --context 16 --d-model 16 --heads 2 --layers 1 --batch 4 --steps 20 --warmup 4 --eval-every 5
         --curve-windows 0 --length 60 --seed 3)
run(${PROGRAM} ${tiny} --checkpoint-every 10 --keep 1 --out ${WORK}/run)
set(trained "${output}")
foreach(row "\n  bigram +[0-9]+ +[0-9.]+ " "\n  parameter-free +[0-9]+ +[0-9.]+ " "\n  learnable +[0-9]+ +[0-9.]+ ")
  if(NOT trained MATCHES "${row}")
    message(FATAL_ERROR "no table row '${row}' in:\n${trained}")
  endif()
endforeach()
foreach(file report.md curves.svg attention_learnable_layer0.svg attention_parameter_free_layer0.svg samples_bigram.txt
        learnable.tgck parameter_free.tgck checkpoints/learnable/checkpoint-00000010.tgck)
  if(NOT EXISTS ${WORK}/run/${file})
    message(FATAL_ERROR "the run wrote no ${file}")
  endif()
endforeach()
string(REGEX MATCH "learnable +validation [0-9.]+ nats/char after 20 steps [^;]*; weights crc32 [0-9a-f]+" straight "${trained}")
string(REGEX REPLACE "after 20 steps [^;]*;" "" straight "${straight}")  # the time differs

foreach(model parameter_free learnable)
  file(READ ${WORK}/run/samples_${model}.txt expected)
  foreach(cache "" "--no-cache")
    run(${PROGRAM} --sample-from ${WORK}/run/${model}.tgck --length 60 --seed 3 ${cache})
    if(NOT output STREQUAL expected)
      message(FATAL_ERROR "${model} ${cache}: --sample-from printed\n${output}\nbut the training run sampled\n${expected}")
    endif()
  endforeach()
endforeach()

run(${PROGRAM} --resume ${WORK}/run/checkpoints/learnable/checkpoint-00000010.tgck --length 60 --seed 3 --out ${WORK}/resumed)
if(NOT output MATCHES "prepared: [^\n]*: prepared from this data before")
  message(FATAL_ERROR "the resumed run prepared its data again:\n${output}")
endif()
string(REGEX MATCH "learnable +validation [0-9.]+ nats/char after 20 steps [^;]*; weights crc32 [0-9a-f]+" resumed "${output}")
string(REGEX REPLACE "after 20 steps [^;]*;" "" resumed "${resumed}")
if(straight STREQUAL "" OR NOT straight STREQUAL resumed)
  message(FATAL_ERROR "the resumed run differs from the uninterrupted one:\n--- uninterrupted\n${straight}\n--- resumed\n${resumed}\n${output}")
endif()
file(READ ${WORK}/run/samples_learnable.txt a)
file(READ ${WORK}/resumed/samples_learnable.txt b)
if(NOT a STREQUAL b)
  message(FATAL_ERROR "the resumed model samples other text:\n${a}\n---\n${b}")
endif()

execute_process(COMMAND ${PROGRAM} --sample-from ${WORK}/run/learnable.tgck --prompt "~" RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "^gpt: --prompt: byte 0x7e \\('~'\\) at position 0 is not in the vocabulary of [0-9]+ bytes\n$")
  message(FATAL_ERROR "a prompt byte outside the vocabulary: expected exit 2 and one line, got ${rc}:\n${out}${err}")
endif()
execute_process(COMMAND ${PROGRAM} ${tiny} --out ${WORK}/run RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "^gpt: --out: '.*' holds the files of an earlier gpt run \\(.*\\); choose a new folder, or --overwrite")
  message(FATAL_ERROR "a second run into the same folder: expected exit 2 and a refusal, got ${rc}:\n${out}${err}")
endif()
message(STATUS "gpt: resumed bit for bit (${straight}); --sample-from reproduced the samples with and without the cache")
