#include "tapegrad/train/report.hpp"

#include <unistd.h>

#include <cmath>

namespace tapegrad {
namespace {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) return fmt::format("{:.1f}s", s);
  return fmt::format("{}m{:02}s", static_cast<long>(s) / 60, static_cast<long>(s) % 60);
}

}  // namespace

Progress::Progress(std::FILE* out, Style style, Index total_steps, std::string title)
    : out_(out), style_(style), total_(total_steps), title_(std::move(title)), start_(now_seconds()) {
  if (style_ == Style::automatic) style_ = isatty(fileno(out)) ? Style::bar : Style::lines;
}

Progress::~Progress() { finish(); }

void Progress::draw(Index step) {
  const double elapsed = now_seconds() - start_;
  const double rate = elapsed > 0 ? static_cast<double>(step) / elapsed : 0;
  const double eta = rate > 0 ? static_cast<double>(total_ - step) / rate : NAN;
  constexpr int width = 24;
  const int filled = total_ > 0 ? static_cast<int>(width * step / total_) : width;
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(width, '.');
  std::string metrics;
  if (have_point_ && !std::isnan(last_.train_loss)) {
    metrics = fmt::format("  loss {:.4f}  acc {:.3f}", last_.train_loss, last_.train_accuracy);
    if (!std::isnan(last_.eval_accuracy)) metrics += fmt::format("  eval {:.3f}", last_.eval_accuracy);
  }
  fmt::print(out_, "\r{} [{}] {}/{}  {:.0f} steps/s  ETA {}{}\x1b[K", title_, bar, step, total_, rate,
             format_duration(eta), metrics);
  std::fflush(out_);
  open_line_ = true;
}

void Progress::on_step(Index step) {
  if (style_ != Style::bar) return;
  const double t = now_seconds();
  if (t - last_draw_ < 0.1 && step != total_) return;
  last_draw_ = t;
  draw(step);
}

void Progress::on_evaluation(const CurvePoint& p) {
  last_ = p;
  have_point_ = true;
  if (style_ == Style::lines) {
    if (std::isnan(p.train_loss))  // before the first step
      fmt::print(out_, "{} step {:>6}/{}  loss -       acc -     ", title_, p.step, total_);
    else
      fmt::print(out_, "{} step {:>6}/{}  loss {:.4f}  acc {:.4f}", title_, p.step, total_, p.train_loss, p.train_accuracy);
    if (!std::isnan(p.eval_accuracy)) fmt::print(out_, "  eval loss {:.4f}  eval acc {:.4f}", p.eval_loss, p.eval_accuracy);
    fmt::print(out_, "  lr {:.3g}  {:.1f}s\n", p.lr, p.seconds);
    std::fflush(out_);
  } else if (style_ == Style::bar) {
    draw(p.step);
  }
}

void Progress::finish() {
  if (open_line_) {
    fmt::print(out_, "\n");
    std::fflush(out_);
    open_line_ = false;
  }
}

TrainCallbacks Progress::callbacks() {
  return {[this](Index step) { on_step(step); }, [this](const CurvePoint& p) { on_evaluation(p); }};
}

CsvLog::CsvLog(const std::filesystem::path& path) : path_(path) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  out_.open(path);
  if (!out_) fail<Error>("csv log: cannot write '{}'", path.string());
  out_ << "step,train_loss,train_accuracy,eval_loss,eval_accuracy,lr,seconds\n";
}

void CsvLog::write(const CurvePoint& p) {
  out_ << fmt::format("{},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.3f}\n", p.step, p.train_loss, p.train_accuracy, p.eval_loss,
                      p.eval_accuracy, p.lr, p.seconds);
  out_.flush();
  if (!out_) fail<Error>("csv log: writing '{}' failed", path_.string());
}

}  // namespace tapegrad
