// The trainer CLI's data, from its flags or a checkpoint's metadata (toy_data.hpp).
#include "lesson/toy_data.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "lesson/tasks.hpp"
#include "lesson/toy_run.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/train/dataset_file.hpp"

namespace tapegrad::lesson {

void check_memory(double bytes, double limit_gb, std::string_view what) {
  if (bytes > limit_gb * 1e9)
    fail<LimitError>("{} would take about {}, more than the limit of {}; --max-memory {:.0f} (GB) raises it", what,
                     format_bytes(bytes), format_bytes(limit_gb * 1e9), std::ceil(bytes / 1e9));
}

Data load_data(const std::string& task_name, const std::string& data, const std::string& eval_data, std::uint64_t seed,
               Index n_train, Index n_test, double max_memory_gb) {
  Data d;
  if (!task_name.empty()) {
    const auto task = make_task(task_name);
    // A task's data is generated: bound it first (a forged checkpoint could ask for billions of sequences).
    ToyRunConfig data_only;
    data_only.training.batch = data_only.training.eval_batch = 1;
    data_only.model = {.vocab = task->tokens().size(), .labels = task->labels().size(), .max_len = task->length()};
    check_memory(estimated_bytes(data_only, task->length(), n_train + n_test), max_memory_gb,
                 fmt::format("generating {} + {} sequences of {}", n_train, n_test, task_name));
    TaskSplit split = make_task_split(*task, n_train, 0, n_test, seed + 1000);
    d.train = std::move(split.train);
    d.eval = std::move(split.test);
    d.source = {{"task", task_name}, {"task.seed", to_text(seed)}, {"task.train", to_text(n_train)},
                {"task.test", to_text(n_test)}};
    d.title = task_name;
  } else {
    // Each file's parse bounded before it is parsed (the text alone can be the whole limit).
    const double limit = max_memory_gb * 1e9;
    try {
      d.train = parse_dataset(read_dataset_text(data, limit), escaped(std::filesystem::path(data)));
      if (!eval_data.empty())
        d.eval = parse_dataset(read_dataset_text(eval_data, limit), escaped(std::filesystem::path(eval_data)),
                               d.train.tokens, d.train.labels);
    } catch (const LimitError& e) {
      fail<LimitError>("{}; --max-memory (GB) raises the limit", e.what());
    }
    // Absolute paths, so that a resume from another working folder finds the data.
    const auto absolute = [](const std::string& path) {
      return path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string();
    };
    d.source = {{"data", absolute(data)}, {"eval_data", absolute(eval_data)}};
    d.title = "train";
  }
  return d;
}

Data resume_data(const Checkpoint& c, double max_memory_gb) {
  const auto get = [&](const char* key) {
    const auto it = c.metadata.find(key);
    return it == c.metadata.end() ? std::string() : it->second;
  };
  auto number = [&]<class N>(const char* key, N v) {
    if (!from_text(get(key), v))
      fail<FormatError>("resume: the checkpoint's metadata {} is '{}', not {}", key, escaped(get(key)),
                        kind_of_value<N>());
    return v;
  };
  if (!get("task").empty()) {
    const auto& names = task_names();
    if (std::find(names.begin(), names.end(), get("task")) == names.end())
      fail<FormatError>("resume: the checkpoint's task '{}' is not one of the tasks", escaped(get("task")));
    const auto train = number("task.train", std::uint32_t{}), test = number("task.test", std::uint32_t{});
    return load_data(get("task"), "", "", number("task.seed", std::uint64_t{}), train, test, max_memory_gb);
  }
  if (!get("data").empty()) {
    try {
      return load_data("", get("data"), get("eval_data"), 0, 0, 0, max_memory_gb);
    } catch (const FileError& e) {
      fail<FileError>("resume: the checkpoint's data cannot be read: {}{}", e.what(),
                      std::filesystem::path(get("data")).is_relative()
                          ? " (this checkpoint names it relative to the folder its training ran in: run from there)"
                          : "");
    }
  }
  fail<FormatError>("resume: the checkpoint does not say what data it was trained on");
}

}  // namespace tapegrad::lesson
