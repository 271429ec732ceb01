#pragma once
// Reporting a training run: a progress bar with rate and ETA on a terminal, plain lines when the
// output is not a terminal (a log file, CI), and a CSV file of the curve. This is the one place in
// the library that writes to the terminal.

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string_view>
#include <string>
#include <vector>

#include "tapegrad/train/plot.hpp"
#include "tapegrad/train/trainer.hpp"

namespace tapegrad {

class Progress {
 public:
  enum class Style { automatic, bar, lines, quiet };  // automatic: bar on a terminal, else lines
  Progress(std::FILE* out, Style style, Index total_steps, std::string title);
  ~Progress();

  // The bar's rate in items a second ("chars/s") instead of steps a second, for `per_step` items a step.
  void show_rate_of(double per_step, std::string unit);
  void on_step(Index step);                // the bar redraws at most 10 times a second
  void on_evaluation(const CurvePoint& p);  // lines: one per evaluation
  void finish();                           // ends the bar's line
  TrainCallbacks callbacks();              // both, for Trainer::run

 private:
  void draw(Index step);

  std::FILE* out_;
  Style style_;
  Index total_;
  std::string title_;
  CurvePoint last_{};
  bool have_point_ = false;
  double start_, last_draw_ = -1;
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

// One named value of a training curve against the step, as a line of a chart (train/plot.hpp): "eval_loss" at
// every point, say. NameError (value_of's) when the points do not have it.
Series curve_series(std::string name, const std::vector<CurvePoint>& curve, std::string_view value);

// The exit codes of tapegrad's programs.
enum class ExitCode : int {
  ok = 0,
  check_failed = 1,      // the program ran, and what it checks did not hold
  bad_input = 2,         // a bad flag or value, a missing, unreadable, invalid or forged file, a size over a
                         // limit, an output folder that cannot be used or that another run holds
  training_stopped = 3,  // a non-finite loss or gradient (NonFiniteError)
  system_failed = 4,     // the system failed: a full disk or another I/O error (IoError), memory exhausted
};

// Runs a program's body and turns whatever it throws into one line on stderr, "<program>: <message>" (a
// message that already starts with "<program>: " is not prefixed again), and its exit code:
// NonFiniteError -> training_stopped, IoError and std::bad_alloc -> system_failed, any other
// tapegrad::Error -> bad_input, anything else -> system_failed ("internal error: ..."). Nothing escapes.
// It first reads the parallel crossover (core/parallel.hpp), so a malformed TAPEGRAD_PARALLEL_* in the
// environment is refused before the body runs. `where`, when it says something ("rank 1" in a
// data-parallel run), is asked at the failure and follows the program's name: "<program>: rank 1: <message>".
// A DivergenceError (the ranks of a data-parallel run no longer agree) -> check_failed.
int run_program(std::string_view program, const std::function<int()>& body,
                const std::function<std::string()>& where = {});

}  // namespace tapegrad
