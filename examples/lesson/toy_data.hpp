#pragma once
// The trainer CLI's data (examples/train.cpp): a toy task's train/test split, or the user's dataset files, made
// from the command line or again from what a checkpoint's metadata says; the converter of tapegrad 0.1's
// training checkpoints (examples/convert) reads the same to name that data as a Trainer does.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "tapegrad/train/checkpoint/checkpoint.hpp"
#include "tapegrad/train/data.hpp"

namespace tapegrad::lesson {

// The run's data: a toy task's train/test split, or the user's files.
struct Data {
  Dataset train, eval;
  std::map<std::string, std::string> source;  // how to make it again (saved in checkpoints)
  std::string title;                          // for progress lines
};

// Refuses, before anything is allocated, a run whose estimated memory is over the limit.
void check_memory(double bytes, double limit_gb, std::string_view what);

// A task's split (`task_name` not empty: n_train and n_test sequences from `seed`) or the dataset files.
Data load_data(const std::string& task_name, const std::string& data, const std::string& eval_data, std::uint64_t seed,
               Index n_train, Index n_test, double max_memory_gb);

// Data for resuming: what the checkpoint says it was trained on.
Data resume_data(const Checkpoint& c, double max_memory_gb);

}  // namespace tapegrad::lesson
