#include "tapegrad/train/program/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

namespace tapegrad {
namespace {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) return fmt::format("{:.1f}s", s);
  return fmt::format("{}m{:02}s", static_cast<long>(s) / 60, static_cast<long>(s) % 60);
}

// "  eval_loss 1.2345", as the bar and the lines show a value.
std::string shown(const NamedValue& v) { return fmt::format("  {} {:.4f}", v.name, v.value); }

}  // namespace

Progress::Progress(std::FILE* out, Style style, Index total_steps, std::string title)
    : out_(out), style_(style), total_(total_steps), title_(std::move(title)) {
  if (style_ == Style::automatic) style_ = isatty(fileno(out)) ? Style::bar : Style::lines;
}

Progress::~Progress() { finish(); }

void Progress::show_rate_of(double per_step, std::string unit) {
  if (!(per_step > 0) || !std::isfinite(per_step))
    fail<ValueError>("progress: items per step must be positive, got {}", per_step);
  per_step_ = per_step;
  unit_ = std::move(unit);
}

void Progress::draw(Index step) {
  if (first_step_ < 0) first_step_ = std::max<Index>(0, step - 1);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(step - first_step_) / elapsed : 0;  // steps a second
  const double eta = rate > 0 ? static_cast<double>(total_ - step) / rate : NAN;
  constexpr int width = 24;
  const int filled = total_ > 0 ? static_cast<int>(width * step / total_) : width;
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(width, '.');
  // The training loss and the last value of the point (an evaluation metric, when there is one).
  std::string metrics;
  if (!last_.values.empty() && !std::isnan(last_.values.front().value)) {
    metrics = shown(last_.values.front());
    if (last_.values.size() > 1) metrics += shown(last_.values.back());
  }
  fmt::print(out_, "\r{} [{}] {}/{}  {:.0f} {}/s  ETA {}{}\x1b[K", title_, bar, step, total_, rate * per_step_, unit_,
             format_duration(eta), metrics);
  std::fflush(out_);
  open_line_ = true;
}

void Progress::on_step(Index step) {
  if (style_ != Style::bar) return;
  const auto t = std::chrono::steady_clock::now();
  if (t - last_draw_ < std::chrono::milliseconds(100) && step != total_) return;
  last_draw_ = t;
  draw(step);
}

void Progress::on_evaluation(const CurvePoint& p) {
  last_ = p;
  if (style_ == Style::lines) {
    std::string values;
    // "-": nothing measured yet (the training values before the first step); a NaN measured is "nan".
    for (const auto& v : p.values)
      values +=
          std::isnan(v.value) && p.step == 0 && v.name.starts_with("train_") ? fmt::format("  {} -", v.name) : shown(v);
    fmt::print(out_, "{} step {:>6}/{}{}  lr {:.3g}  {:.1f}s\n", title_, p.step, total_, values, p.lr, p.seconds);
    std::fflush(out_);
  } else if (style_ == Style::bar) {
    draw(p.step);
  }
}

void Progress::finish() {
  if (!std::exchange(open_line_, false)) return;
  fmt::print(out_, "\n");
  std::fflush(out_);
}

Series curve_series(std::string name, const std::vector<CurvePoint>& curve, std::string_view value) {
  Series s{.name = std::move(name)};
  for (const CurvePoint& p : curve) {
    s.x.push_back(static_cast<double>(p.step));
    s.y.push_back(value_of(p.values, value));
  }
  return s;
}

TrainCallbacks Progress::callbacks() {
  return {[this](Index step) { on_step(step); }, [this](const CurvePoint& p) { on_evaluation(p); }};
}

CsvLog::CsvLog(const std::filesystem::path& path) : path_(path) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) fail<FileError>("csv log: cannot create the folder for '{}': {}", escaped(path), ec.message());
  out_ = std::fopen(path.c_str(), "w");
  if (!out_) fail<FileError>("csv log: cannot write '{}': {}", escaped(path), std::strerror(errno));
}

CsvLog::~CsvLog() {
  if (out_) std::fclose(out_);
}

void CsvLog::write(const CurvePoint& p) {
  if (!out_) fail<UsageError>("csv log: '{}' is closed", escaped(path_));
  std::vector<std::string> names;
  for (const auto& v : p.values) names.push_back(v.name);
  std::string text;
  if (names_.empty()) {
    names_ = names;
    text = fmt::format("step,{},lr,seconds\n", fmt::join(names_, ","));
  } else if (names != names_) {
    fail<ValueError>("csv log: '{}' has the columns {} but this point has {}", escaped(path_), fmt::join(names_, ","),
                     fmt::join(names, ","));
  }
  text += fmt::format("{}", p.step);
  for (const auto& v : p.values) text += fmt::format(",{:.6g}", v.value);
  text += fmt::format(",{:.6g},{:.3f}\n", p.lr, p.seconds);
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), out_) != text.size() || std::fflush(out_) != 0)
    fail<IoError>("csv log: writing '{}' failed: {}", escaped(path_), std::strerror(errno ? errno : EIO));
}

void CsvLog::close() {
  if (out_ && std::fclose(std::exchange(out_, nullptr)) != 0)
    fail<IoError>("csv log: closing '{}' failed: {}", escaped(path_), std::strerror(errno));
}

}  // namespace tapegrad
