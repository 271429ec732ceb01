// First steps, 3: your own model with tapegrad: the classic first network, a two-layer MLP on the two moons,
// defined as a Module of your own and trained, checkpointed, reloaded, resumed and gradient-checked by the
// library's generic parts, exactly as the lesson's toy model is. It includes the installed umbrella header,
// program support (tapegrad::program: its main(), its run's folder, the progress bar) and plots
// (tapegrad::plot: the decision boundary), and examples/command_line.hpp and .cpp (how every example
// reports a mistake in its flags); ctest builds this same file against the installed package
// (tests/downstream).
//
//   build/examples/custom_model train --out runs/moons        # model.tgck, checkpoint-00000500.tgck, boundary.svg
//   build/examples/custom_model predict runs/moons/model.tgck  # a fresh process: the same predictions
//   build/examples/custom_model resume runs/moons/checkpoint-00000500.tgck --out runs/moons-resumed
//
// `train` and `resume` print the CRC-32 of the final weights, `train` and `predict` that of the test-set
// logits: equal numbers mean bit-identical results (tests/cli/custom_model.cmake compares them).
#include <tapegrad/tapegrad.hpp>
#include <tapegrad/train/plot/plot.hpp>
#include <tapegrad/train/program/checkpoint_dir.hpp>
#include <tapegrad/train/program/output_folder.hpp>
#include <tapegrad/train/program/progress.hpp>
#include <tapegrad/train/program/run_program.hpp>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numbers>
#include "command_line.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

// [readme:model]
// x (N, 2) -> tanh(x W1 + b1) -> x W2 + b2: logits (N, 2). A Module of its own, for float (training) and
// double (gradient checks); its parameters are those of the layers it registers, named from this unnamed
// root down: "hidden.weight", "hidden.bias", "out.weight", "out.bias".
template <class T>
class Mlp : public Module<T> {
 public:
  struct Config {  // all it takes to rebuild the model: checkpoints keep it as the model's settings
    Index hidden = 16;
    std::uint64_t seed = 0;
    template <class S, class F>
    static void fields(S& s, F&& field) {
      field("hidden", s.hidden, "hidden units", at_least(1));
      field("seed", s.seed, "seed of the initial weights");
    }
  };
  static constexpr std::string_view kind = "two_moons_mlp";

  explicit Mlp(const Config& config)
      : Module<T>(), config_(config), rng_(config.seed), hidden_("hidden", {.in = 2, .out = config.hidden}, rng_),
        out_("out", {.in = config.hidden, .out = 2}, rng_) {
    this->register_child(hidden_);
    this->register_child(out_);
  }
  Var<T> forward(Var<T> x) { return out_.forward(tanh(hidden_.forward(x))); }
  ModelRecord model_record() const override { return {std::string(kind), to_settings(config_)}; }

 private:
  Config config_;
  Rng rng_;
  Linear<T> hidden_, out_;
};
// [readme:model-end]

// The two moons (scikit-learn's make_moons): points on two interleaved half circles, class 0 on the upper
// one, class 1 on the lower, with Gaussian noise.
TensorSource two_moons(Index n, double noise, std::uint64_t seed, std::string name) {
  Rng rng(seed);
  Tensor x(Shape::mat(n, 2));
  Ids y(Shape::vec(n));
  for (Index i = 0; i < n; ++i) {
    const std::int32_t label = static_cast<std::int32_t>(i % 2);
    const double t = std::numbers::pi * rng.uniform();
    const double px = label == 0 ? std::cos(t) : 1 - std::cos(t);
    const double py = label == 0 ? std::sin(t) : 0.5 - std::sin(t);
    x.at(i, 0) = static_cast<float>(px + noise * rng.normal());
    x.at(i, 1) = static_cast<float>(py + noise * rng.normal());
    y[i] = label;
  }
  return TensorSource(std::move(name), std::move(x), std::move(y));
}

const TensorSource& train_data() {
  static const TensorSource data = two_moons(1000, 0.15, 1, "two moons");
  return data;
}
const TensorSource& test_data() {
  static const TensorSource data = two_moons(500, 0.15, 2, "two moons (test)");
  return data;
}

constexpr Index kSteps = 1000, kCheckpointAt = 500;

// [readme:train]
// A training run of the MLP: AdamW with warm-up and cosine decay, batches of 32, cross-entropy, test
// accuracy every 100 steps. The trainer keeps references to what it is given, so the run owns them all.
struct Run {
  Mlp<float> model;
  AdamW<float> optimizer;
  Trainer<TensorBatch> trainer;

  explicit Run(const Mlp<float>::Config& config)
      : model(config), optimizer(model.parameters(), {.lr = 0.05, .weight_decay = 1e-4}),
        trainer(model, optimizer, train_data(), [this](Tape<float>& tape, const TensorBatch& batch) -> StepOutput<float> {
          Var<float> logits = model.forward(tape.constant(batch.features));  // (B, 2)
          return {cross_entropy(logits, batch.labels), logits};            // the loss, and what metrics read
        }, {.steps = kSteps, .batch = 32, .eval_every = 100, .seed = 0}) {
    optimizer.set_schedule(CosineWithWarmup({.warmup_steps = 50, .total_steps = kSteps}));
    trainer.evaluate_on(test_data());
    trainer.add_metric("accuracy", metrics::accuracy);
  }
};
// [readme:train-end]

// The model's logits on every test point, without recording gradients.
Tensor test_logits(Mlp<float>& model) {
  Tape<float> tape;
  NoGradGuard<float> guard(tape);
  return model.forward(tape.constant(test_data().features())).value();
}

void print_result(Run& run) {
  fmt::print("step {}: test accuracy {:.3f}\n", run.trainer.steps_done(), value_of(run.trainer.evaluate(test_data()), "eval_accuracy"));
  fmt::print("weights crc32 {:08x}\n", weights_crc32(snapshot<float>(run.model)));
}

// P(class 1) over a grid, with the test points on top: the decision boundary (SVG text).
std::string draw_boundary(Mlp<float>& model) {
  ScatterPlot plot{.title = "two moons: the MLP's decision boundary (test points)", .x_label = "x0", .y_label = "x1",
                   .x_min = -1.5, .x_max = 2.5, .y_min = -1.0, .y_max = 1.5};
  constexpr std::size_t rows = 50, cols = 80;
  Tensor grid(Shape::mat(static_cast<Index>(rows * cols), 2));
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) {
      const auto i = static_cast<Index>(r * cols + c);
      grid.at(i, 0) = static_cast<float>(plot.x_min + (static_cast<double>(c) + 0.5) * (plot.x_max - plot.x_min) / cols);
      grid.at(i, 1) = static_cast<float>(plot.y_min + (static_cast<double>(r) + 0.5) * (plot.y_max - plot.y_min) / rows);
    }
  Tape<float> tape;
  NoGradGuard<float> guard(tape);
  const Tensor& p = softmax_rows(model.forward(tape.constant(grid))).value();  // (rows * cols, 2)
  for (Index i = 0; i < p.rows(); ++i) plot.field.push_back(p.at(i, 1));
  plot.field_rows = rows;
  plot.field_cols = cols;
  plot.series = {{.name = "class 0"}, {.name = "class 1"}};
  const TensorSource& test = test_data();
  for (Index i = 0; i < test.size(); ++i) {
    Series& s = plot.series[static_cast<std::size_t>(test.labels()[i])];
    s.x.push_back(test.features().at(i, 0));
    s.y.push_back(test.features().at(i, 1));
  }
  return scatter_svg(plot);
}



// [readme:gradcheck]
// Every derivative of the model, in float64: the loss on a few points, with respect to the input and
// every parameter, against central differences.
bool gradcheck_model() {
  Mlp<double> model({.hidden = 5, .seed = 3});
  const Ids labels(Shape::vec(4), {0, 1, 1, 0});
  TensorD x(Shape::mat(4, 2), {0.3, -1.2, 1.5, 0.2, -0.7, 0.9, 0.1, 0.4});
  const GradcheckReport report = gradcheck(
      [&](Tape<double>&, std::span<const Var<double>> in) { return cross_entropy(model.forward(in[0]), labels); },
      {{"x", x}}, model.parameters());
  fmt::print("{}", report.str());
  return report.ok();
}
// [readme:gradcheck-end]

const std::string kHalfWay = fmt::format("checkpoint-{:08}.tgck", kCheckpointAt);

int train(const fs::path& dir, bool overwrite) {
  // The run's folder, ours and proven writable before any training; only its own files are replaced.
  OutputFolder out(dir, {.program = "custom_model", .overwrite = overwrite});
  out.plan({"model.tgck", kHalfWay, "boundary.svg"});
  Run run({.hidden = 16, .seed = 0});
  Progress progress(stderr, Progress::Style::automatic, kSteps, "two moons");
  TrainCallbacks callbacks = progress.callbacks();
  callbacks.on_step = [&](Index step) {
    progress.on_step(step);
    if (step == kCheckpointAt) save_checkpoint(out, kHalfWay, snapshot(run.trainer));
  };
  run.trainer.run(callbacks);
  progress.finish();
  save_checkpoint(out, "model.tgck", snapshot(run.trainer));
  out.write("boundary.svg", draw_boundary(run.model));
  print_result(run);
  fmt::print("predictions crc32 {:08x}\n", checksum(test_logits(run.model)));
  fmt::print("wrote {}: model.tgck, {}, boundary.svg\n", escaped(dir), kHalfWay);
  return gradcheck_model() ? 0 : 1;
}

// [readme:reload]
// A fresh process: the model rebuilt from its file (its kind and settings, then its weights).
int predict(const fs::path& file) {
  const auto model = model_from_checkpoint<Mlp<float>>(read_checkpoint(file));
  const Tensor logits = test_logits(*model);
  fmt::print("test accuracy {:.3f}\n", count_correct(logits, test_data().labels()).mean());
  fmt::print("predictions crc32 {:08x}\n", checksum(logits));
  return 0;
}

// The same run rebuilt from the checkpoint's model settings, then its whole training state loaded.
int resume(const fs::path& file, const fs::path& dir) {
  const Checkpoint checkpoint = read_checkpoint(file);
  Run run(model_config_from<Mlp<float>>(checkpoint));  // FormatError for a file of another model
  OutputFolder out(dir, {.program = "custom_model", .resume = true});
  out.plan({"model.tgck"});
  restore(checkpoint, run.trainer);  // strict: refuses another model, optimizer, schedule or data
  run.trainer.run();
  save_checkpoint(out, "model.tgck", snapshot(run.trainer));
  print_result(run);
  return 0;
}
// [readme:reload-end]

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A user's own model with tapegrad: a two-layer MLP on the two moons"};
  app.require_subcommand(1);
  std::string out = "runs/two_moons", file;
  bool overwrite = false;
  CLI::App* train_cmd = app.add_subcommand("train", "Train, checkpoint half way, save, draw the decision boundary, gradcheck");
  train_cmd->add_option("--out", out, "Folder for model.tgck, the checkpoint and boundary.svg")->capture_default_str();
  train_cmd->add_flag("--overwrite", overwrite, "Replace the files of an earlier custom_model run in --out");
  CLI::App* predict_cmd = app.add_subcommand("predict", "Rebuild the model from a checkpoint and predict the test set");
  predict_cmd->add_option("file", file, "A checkpoint")->required()->check(CLI::ExistingFile);
  CLI::App* resume_cmd = app.add_subcommand("resume", "Resume a checkpoint's training to the end");
  resume_cmd->add_option("file", file, "A checkpoint with the state of training")->required()->check(CLI::ExistingFile);
  resume_cmd->add_option("--out", out, "Folder for the final model.tgck")->capture_default_str();
  if (const auto stop = examples::parse_command_line(app, "custom_model", argc, argv)) return *stop;
  // Any error becomes one line and an exit code (docs/programs.md, "Exit codes"); nothing aborts.
  return run_program("custom_model", [&] {
    if (*train_cmd) return train(out, overwrite);
    if (*predict_cmd) return predict(file);
    return resume(file, out);
  });
}
