// A trainer on the command line: one of the toy tasks, or your own data in the dataset file format
// (train/dataset_file.hpp), through features -> SelfAttention -> linear readout.
//
//   build/examples/train --task cycle --attention learned --steps 1000
//   build/examples/train --data my.txt --eval-data my_eval.txt --features learned --d-model 32 --out runs/mine
//
//   build/examples/train --task cycle --steps 2000 --out runs/c --checkpoint-every 500 --keep 2
//   build/examples/train --resume runs/c/checkpoints/checkpoint-00001000.tgck --steps 3000
//   build/examples/train inspect runs/c/model.tgck [--json]
//
// Progress goes to stderr (a bar on a terminal, plain lines otherwise); the last line on stdout is the
// result in a stable form for scripts:
//   final steps=1000 train_loss=0.0021 train_accuracy=1.0000 eval_loss=0.0034 eval_accuracy=1.0000
// With --out, the run writes curve.csv, checkpoints/ (with --checkpoint-every) and the final model.tgck.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "tapegrad/train/checkpoint.hpp"
#include "tapegrad/train/dataset_file.hpp"
#include "tapegrad/train/report.hpp"
#include "tapegrad/train/tasks.hpp"
#include "tapegrad/train/trainer.hpp"

using namespace tapegrad;

namespace {

struct Options {
  std::string task, data, eval_data, out, resume;
  Index checkpoint_every = 0;
  int keep = 3;
  std::string attention = "learned", features = "onehot", positions = "onehot", optimizer = "adam", schedule = "constant";
  Index heads = 1, d_model = 0, steps = 2000, batch = 32, eval_every = 100;
  double lr = 0.01, momentum = 0.9, clip = 0;
  bool residual = false, steps_given = false;
  std::uint64_t seed = 0;
  Index n_train = 4000, n_test = 1000;
};

// "must be positive" (CLI11's PositiveNumber message quotes the largest double in full).
CLI::Validator positive(bool allow_zero = false) {
  return CLI::Validator(
      [allow_zero](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return fmt::format("must be a number, got '{}'", text);
        if (allow_zero ? v >= 0 : v > 0) return {};
        return fmt::format("must be {}, got {}", allow_zero ? "zero or more" : "positive", text);
      },
      allow_zero ? "NON-NEGATIVE" : "POSITIVE");
}

// One line, for a mistake on the command line (CLI11's default adds a second line).
std::string one_line(const CLI::App*, const CLI::Error& e) { return fmt::format("train: {} (see --help)\n", e.what()); }

// The run's data: a toy task's train/test split, or the user's files.
struct Data {
  Dataset train, eval;
  std::map<std::string, std::string> source;  // how to make it again (saved in checkpoints)
};

Data load_data(const std::string& task_name, const std::string& data, const std::string& eval_data, std::uint64_t seed,
               Index n_train, Index n_test) {
  Data d;
  if (!task_name.empty()) {
    const auto task = make_task(task_name);
    TaskSplit split = make_task_split(*task, n_train, 0, n_test, seed + 1000);
    d.train = std::move(split.train);
    d.eval = std::move(split.test);
    d.source = {{"task", task_name}, {"task.seed", fmt::format("{}", seed)}, {"task.train", fmt::format("{}", n_train)},
                {"task.test", fmt::format("{}", n_test)}};
  } else {
    d.train = read_dataset(data);
    if (!eval_data.empty()) d.eval = read_dataset(eval_data, d.train.tokens, d.train.labels);
    d.source = {{"data", data}, {"eval_data", eval_data}};
  }
  return d;
}

// Data for resuming: what the checkpoint says it was trained on.
Data resume_data(const Checkpoint& c) {
  const auto get = [&](const char* key) {
    const auto it = c.metadata.find(key);
    return it == c.metadata.end() ? std::string() : it->second;
  };
  if (!get("task").empty())
    return load_data(get("task"), "", "", std::stoull(get("task.seed")), std::stoll(get("task.train")), std::stoll(get("task.test")));
  if (!get("data").empty()) return load_data("", get("data"), get("eval_data"), 0, 0, 0);
  fail<FormatError>("resume: the checkpoint does not say what data it was trained on");
}

int inspect(const std::string& path, bool json) {
  const Checkpoint c = read_checkpoint(path);
  fmt::print("{}", json ? checkpoint_json(c) + "\n" : describe_checkpoint(c));
  return 0;
}

int run(const Options& o) {
  std::optional<Checkpoint> resumed;
  Data data;
  ModelConfig config;
  TrainConfig tc;
  if (!o.resume.empty()) {
    resumed = read_checkpoint(o.resume);
    if (!resumed->training) fail<FormatError>("resume: '{}' holds weights only, not the state of training", o.resume);
    data = resume_data(*resumed);
    config = resumed->model;
    tc = resumed->training->config;
    if (o.steps_given) tc.steps = o.steps;
  } else {
    data = load_data(o.task, o.data, o.eval_data, o.seed, o.n_train, o.n_test);
    config.vocab = data.train.tokens.size();
    config.labels = data.train.labels.size();
    config.max_len = std::max(data.train.max_len(), data.eval.max_len());
    config.features = parse_feature_kind(o.features);
    config.positions = parse_position_encoding(o.positions);
    config.attention = parse_attention_mode(o.attention);
    config.heads = o.heads;
    config.residual = o.residual;
    config.seed = o.seed;
    if (o.d_model > 0) {
      if (config.features != FeatureKind::learned)
        fail<ValueError>("--d-model sets the width of trainable embeddings; with --features onehot the width is the "
                         "vocabulary ({}){}",
                         config.vocab, config.positions == PositionEncoding::onehot ? " plus the one-hot positions" : "");
      config.d_embed = o.d_model;
    }
    tc.steps = o.steps;
    tc.batch = o.batch;
    tc.optimizer = parse_optimizer_kind(o.optimizer);
    tc.lr = o.lr;
    tc.momentum = o.momentum;
    tc.clip = o.clip;
    tc.cosine = o.schedule == "cosine";
    tc.eval_every = o.eval_every;
    tc.seed = o.seed;
  }
  const Dataset& train = data.train;
  const Dataset& eval = data.eval;
  const bool have_eval = eval.size() > 0;
  ToyModel<float> model(config);
  Trainer trainer(model, train, have_eval ? &eval : nullptr, tc);
  if (resumed) {
    const LoadReport report = load_training(*resumed, trainer);
    fmt::print(stderr, "resumed from {} at step {}: {}\n", o.resume, trainer.steps_done(), report.str());
  }

  fmt::print(stderr, "data: {} ({} examples, {} tokens, {} labels){}\nmodel: {} (d_model {}, {} parameters)\ntraining: {}\n",
             train.name, train.size(), train.tokens.size(), train.labels.size(),
             have_eval ? fmt::format("; eval: {} ({} examples)", eval.name, eval.size()) : "", config.describe(),
             model.d_model(), model.parameter_count(), tc.describe());
  const std::filesystem::path out(o.out);
  auto checkpoint = [&] {
    Checkpoint c = snapshot(trainer);
    for (const auto& [k, v] : data.source) c.metadata[k] = v;
    return c;
  };
  std::optional<CheckpointDir> checkpoints;
  if (o.checkpoint_every > 0) checkpoints.emplace(out / "checkpoints", o.keep);
  Progress progress(stderr, Progress::Style::automatic, tc.steps, o.task.empty() ? "train" : o.task);
  std::optional<CsvLog> csv;
  if (!o.out.empty()) {
    csv.emplace(out / "curve.csv");
    for (const auto& p : trainer.curve()) csv->write(p);  // the part before a resume
  }
  TrainCallbacks callbacks;
  callbacks.on_step = [&](Index step) {
    progress.on_step(step);
    if (checkpoints && step % o.checkpoint_every == 0) checkpoints->save(checkpoint(), step);
  };
  callbacks.on_evaluation = [&](const CurvePoint& p) {
    progress.on_evaluation(p);
    if (csv) csv->write(p);
  };
  trainer.run(callbacks);
  progress.finish();
  if (!o.out.empty()) {
    save_checkpoint(out / "model.tgck", checkpoint());
    fmt::print(stderr, "wrote {}, {}{}\n", (out / "curve.csv").string(), (out / "model.tgck").string(),
               checkpoints ? fmt::format(" and {}/", (out / "checkpoints").string()) : "");
  }

  const Evaluation final_train = trainer.evaluate(train);
  const Evaluation final_eval = have_eval ? trainer.evaluate(eval) : Evaluation{NAN, NAN, 0};
  fmt::print("final steps={} train_loss={:.4f} train_accuracy={:.4f} eval_loss={:.4f} eval_accuracy={:.4f}\n",
             trainer.steps_done(), final_train.loss, final_train.accuracy, final_eval.loss, final_eval.accuracy);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train features -> self-attention -> readout on a toy task or your own data"};
  app.failure_message(one_line);
  Options o;
  auto* task = app.add_option("--task", o.task, "A toy task: " + [] {
                                std::string s;
                                for (const auto& n : task_names()) s += (s.empty() ? "" : ", ") + n;
                                return s;
                              }())
                   ->check(CLI::IsMember(task_names()));
  auto* data = app.add_option("--data", o.data, "Training data: tokens, a TAB, one label per token ('_' = none)")
                   ->check(CLI::ExistingFile);
  app.add_option("--eval-data", o.eval_data, "Evaluation data in the same format (with --data)")
      ->check(CLI::ExistingFile)
      ->needs(data);
  task->excludes(data);
  app.add_option("--attention", o.attention, "free (parameter-free) or learned (Wq, Wk, Wv)")
      ->capture_default_str()
      ->check(CLI::IsMember({"free", "learned"}));
  app.add_option("--heads", o.heads, "Attention heads")->capture_default_str()->check(positive());
  app.add_option("--d-model", o.d_model, "Width of trainable embeddings (with --features learned; default 32)")
      ->check(positive());
  app.add_option("--features", o.features, "Token features: onehot (fixed) or learned (a trainable embedding)")
      ->capture_default_str()
      ->check(CLI::IsMember({"onehot", "learned"}));
  app.add_option("--positions", o.positions, "onehot (concatenated), learned or sinusoidal (added), or none")
      ->capture_default_str()
      ->check(CLI::IsMember({"onehot", "learned", "sinusoidal", "none"}));
  app.add_flag("--residual", o.residual, "Add the attention's input to its output before the readout");
  app.add_option("--optimizer", o.optimizer, "sgd (with momentum) or adam")
      ->capture_default_str()
      ->check(CLI::IsMember({"sgd", "adam"}));
  app.add_option("--lr", o.lr, "Learning rate")->capture_default_str()->check(positive());
  app.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--schedule", o.schedule, "constant, or cosine (decay to 0 after a 5% linear warm-up)")
      ->capture_default_str()
      ->check(CLI::IsMember({"constant", "cosine"}));
  app.add_option("--clip", o.clip, "Clip gradients to this global norm (0: no clipping)")
      ->capture_default_str()
      ->check(positive(true));
  app.add_option("--steps", o.steps, "Training steps")->capture_default_str()->check(positive(true));
  app.add_option("--batch", o.batch, "Batch size")->capture_default_str()->check(positive());
  app.add_option("--seed", o.seed, "Seed of the initial weights, the data order and a task's data")->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "Evaluate every N steps")->capture_default_str()->check(positive());
  app.add_option("--out", o.out, "Folder for the run's files: curve.csv, model.tgck, checkpoints/");
  auto* every = app.add_option("--checkpoint-every", o.checkpoint_every, "Save a checkpoint every N steps (into --out/checkpoints)")
                    ->check(positive());
  app.add_option("--keep", o.keep, "Checkpoints to keep (the newest)")->capture_default_str()->check(positive())->needs(every);
  auto* resume = app.add_option("--resume", o.resume, "Continue training from a checkpoint; it supplies the model, the "
                                                      "training settings and the data (--steps may extend the run)")
                     ->check(CLI::ExistingFile);
  resume->excludes(task)->excludes(data);
  for (const char* flag : {"--attention", "--heads", "--d-model", "--features", "--positions", "--residual", "--optimizer",
                           "--lr", "--momentum", "--schedule", "--clip", "--batch", "--seed", "--eval-every"})
    resume->excludes(app.get_option(flag));

  std::string inspect_path;
  bool inspect_json = false;
  CLI::App* inspect_cmd = app.add_subcommand("inspect", "Print a checkpoint: configuration, parameter names, shapes and norms, "
                                                        "the optimizer state, the step");
  inspect_cmd->add_option("file", inspect_path, "The checkpoint")->required()->check(CLI::ExistingFile);
  inspect_cmd->add_flag("--json", inspect_json, "Print the whole checkpoint as JSON instead");
  CLI11_PARSE(app, argc, argv);
  o.steps_given = app.count("--steps") > 0;
  try {
    if (*inspect_cmd) return inspect(inspect_path, inspect_json);
    if (o.task.empty() && o.data.empty() && o.resume.empty()) {
      std::fputs("train: give --task NAME, --data FILE or --resume FILE (see --help)\n", stderr);
      return 2;
    }
    if (o.checkpoint_every > 0 && o.out.empty()) {
      std::fputs("train: --checkpoint-every needs --out DIR to put the checkpoints in (see --help)\n", stderr);
      return 2;
    }
    return run(o);
  } catch (const Error& e) {
    fmt::print(stderr, "train: {}\n", e.what());
    return 2;
  }
}
