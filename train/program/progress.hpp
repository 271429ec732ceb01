#pragma once
// Reporting a training run: a progress bar with rate and ETA on a terminal, plain lines when the
// output is not a terminal (a log file, CI), and a CSV file of the curve. Program support
// (tapegrad::program): the library itself never writes to the terminal.

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/train/plot/plot.hpp"
#include "tapegrad/train/trainer.hpp"

namespace tapegrad {

class Progress {
 public:
  enum class Style { automatic, bar, lines, quiet };  // automatic: bar on a terminal, else lines
  Progress(std::FILE* out, Style style, Index total_steps, std::string title);
  ~Progress();

  // The bar's rate in items a second ("chars/s") instead of steps a second, for `per_step` items a step.
  void show_rate_of(double per_step, std::string unit);
  void on_step(Index step);                 // the bar redraws at most 10 times a second
  void on_evaluation(const CurvePoint& p);  // lines: one per evaluation
  void finish();                            // ends the bar's line
  TrainCallbacks callbacks();               // both, for Trainer::run

 private:
  void draw(Index step);

  std::FILE* out_;
  Style style_;
  Index total_;
  std::string title_;
  CurvePoint last_{};
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_draw_{};
  Index first_step_ = -1;  // the steps done before the first on_step (a resumed run's), which the rate leaves out
  double per_step_ = 1;
  std::string unit_ = "steps";
  bool open_line_ = false;
};

// One row per evaluation: step, the point's named values (train_loss, train_accuracy, eval_loss, ...),
// lr, seconds. The header is written with the first row; every row must have its names. Each row is
// flushed to the file as it is written.
class CsvLog {
 public:
  explicit CsvLog(const std::filesystem::path& path);  // IoError naming the path and the reason
  ~CsvLog();
  CsvLog(const CsvLog&) = delete;
  CsvLog& operator=(const CsvLog&) = delete;
  // ValueError if p's names differ from the first row's; IoError naming the reason (a full disk) if the
  // row cannot be written.
  void write(const CurvePoint& p);
  void close();  // IoError if the last bytes cannot be written

 private:
  std::filesystem::path path_;
  std::FILE* out_ = nullptr;
  std::vector<std::string> names_;  // the columns, from the first row
};

// One named value of a training curve against the step, as a line of a chart (train/plot/plot.hpp):
// "eval_loss" at every point, say. NameError (value_of's) when the points do not have it.
Series curve_series(std::string name, const std::vector<CurvePoint>& curve, std::string_view value);

}  // namespace tapegrad
