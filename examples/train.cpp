// A trainer on the command line: one of the toy tasks, or your own data in the dataset file format
// (train/dataset_file.hpp), through the lesson's toy model (features -> SelfAttention -> linear readout),
// with any of the library's optimizers and schedules, by the library's generic training loop.
//
//   build/examples/train --task cycle --attention learnable --steps 1000
//   build/examples/train --data my.txt --eval-data my_eval.txt --features learned --d-model 32 --out runs/mine
//   build/examples/train --task cycle --optimizer sgd --lr 0.1 --momentum 0.9 --schedule cosine --clip 1
//
//   build/examples/train --task cycle --steps 2000 --out runs/c --checkpoint-every 500 --keep 2
//   build/examples/train --resume runs/c/checkpoints/checkpoint-00001000.tgck --steps 3000
//   build/examples/train inspect runs/c/model.tgck [--json]
//
// The optimizer's, the schedule's and the trainer's flags are made from the library's options tables
// (lesson/table_flags.hpp). Progress goes to stderr (a bar on a terminal, plain lines otherwise); the
// last line on stdout is the result in a stable form for scripts:
//   final steps=1000 train_loss=0.0021 train_accuracy=1.0000 eval_loss=0.0034 eval_accuracy=1.0000
// With --out, the run writes curve.csv, checkpoints/ (with --checkpoint-every) and the final model.tgck.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lesson/table_flags.hpp"
#include "lesson/tasks.hpp"
#include "lesson/toy_model.hpp"
#include "lesson/toy_run.hpp"
#include "tapegrad/train/checkpoint.hpp"
#include "tapegrad/train/dataset_file.hpp"
#include "tapegrad/train/report.hpp"
#include "tapegrad/train/trainer.hpp"

using namespace tapegrad;
using namespace tapegrad::lesson;

namespace {

// The lesson's defaults where they differ from the library's: what works on the toy tasks.
constexpr double kLessonLr = 0.01;
constexpr double kLessonMomentum = 0.9;  // SGD
constexpr Index kLessonSteps = 2000;

struct Options {
  std::string task, data, eval_data, out, resume;
  Index checkpoint_every = 0;
  int keep = 3;
  AttentionMode attention = AttentionMode::learnable;
  FeatureKind features = FeatureKind::onehot;
  PositionEncoding positions = PositionEncoding::onehot;
  OptimizerKind optimizer = OptimizerKind::adam;
  ScheduleKind schedule = ScheduleKind::constant;
  Index heads = 1, d_model = 0;
  bool residual = false;
  Index n_train = 4000, n_test = 1000;
};

// One line, for a mistake on the command line (CLI11's default adds a second line).
std::string one_line(const CLI::App*, const CLI::Error& e) { return fmt::format("train: {} (see --help)\n", e.what()); }

// An option whose value is one of an enum's names (or an older alias), from the enum's one name table.
template <NamedEnum E>
CLI::Option* add_enum(CLI::App& app, const std::string& flag, E& value, const std::string& help) {
  return app
      .add_option_function<std::string>(
          flag, [&value](const std::string& name) { value = parse_enum<E>(name); }, help + ": " + enum_choices<E>())
      ->default_str(std::string(to_string(value)))
      ->check(CLI::Validator(
          [](std::string& name) -> std::string {
            E e{};
            return parse_enum(name, e) ? std::string() : fmt::format("must be {}, got '{}'", enum_choices<E>(), name);
          },
          ""));
}

// The run's data: a toy task's train/test split, or the user's files.
struct Data {
  Dataset train, eval;
  std::map<std::string, std::string> source;  // how to make it again (saved in checkpoints)
  std::string title;                          // for progress lines
};

Data load_data(const std::string& task_name, const std::string& data, const std::string& eval_data, std::uint64_t seed,
               Index n_train, Index n_test) {
  Data d;
  if (!task_name.empty()) {
    const auto task = make_task(task_name);
    TaskSplit split = make_task_split(*task, n_train, 0, n_test, seed + 1000);
    d.train = std::move(split.train);
    d.eval = std::move(split.test);
    d.source = {{"task", task_name}, {"task.seed", to_text(seed)}, {"task.train", to_text(n_train)},
                {"task.test", to_text(n_test)}};
    d.title = task_name;
  } else {
    d.train = read_dataset(data);
    if (!eval_data.empty()) d.eval = read_dataset(eval_data, d.train.tokens, d.train.labels);
    d.source = {{"data", data}, {"eval_data", eval_data}};
    d.title = "train";
  }
  return d;
}

// Data for resuming: what the checkpoint says it was trained on.
Data resume_data(const Checkpoint& c) {
  const auto get = [&](const char* key) {
    const auto it = c.metadata.find(key);
    return it == c.metadata.end() ? std::string() : it->second;
  };
  auto number = [&](const char* key) {
    std::int64_t v = 0;
    if (!from_text(get(key), v) || v < 0)
      fail<FormatError>("resume: the checkpoint's metadata {} is '{}', not a whole number >= 0", key, get(key));
    return v;
  };
  if (!get("task").empty())
    return load_data(get("task"), "", "", static_cast<std::uint64_t>(number("task.seed")), number("task.train"),
                     number("task.test"));
  if (!get("data").empty()) return load_data("", get("data"), get("eval_data"), 0, 0, 0);
  fail<FormatError>("resume: the checkpoint does not say what data it was trained on");
}

int inspect(const std::string& path, bool json) {
  const Checkpoint c = read_checkpoint(path);
  fmt::print("{}", json ? checkpoint_json(c) + "\n" : describe_checkpoint(c));
  return 0;
}

// Everything a run is made of, from the command line or from a checkpoint.
struct RunPlan {
  Data data;
  ToyRunConfig run;
};

RunPlan plan_from_checkpoint(const Checkpoint& c, const std::string& path) {
  if (!c.training) fail<FormatError>("resume: '{}' holds weights only, not the state of training", path);
  RunPlan p;
  p.run.model = model_config_from<ToyModel<float>>(c);  // FormatError for a file of another model
  p.data = resume_data(c);
  p.run.optimizer = parse_enum<OptimizerKind>(c.training->optimizer.kind);
  p.run.hyperparameters = c.training->optimizer.hyperparameters;
  p.run.schedule = c.training->optimizer.schedule;
  p.run.training = c.training->trainer.options;
  return p;
}

RunPlan plan_from_flags(const Options& o, const TableFlags& flags) {
  RunPlan p;
  TrainOptions defaults;
  defaults.steps = kLessonSteps;
  TrainOptions& training = p.run.training;
  training = from_settings<TrainOptions>(with_overrides(to_settings(defaults), flags.given_in("Training", "the trainer",
                                                                                                  to_settings(defaults)),
                                                          "the trainer"),
                                           "train");
  p.data = load_data(o.task, o.data, o.eval_data, training.seed, o.n_train, o.n_test);
  ModelConfig& m = p.run.model;
  m.vocab = p.data.train.tokens.size();
  m.labels = p.data.train.labels.size();
  m.max_len = std::max(p.data.train.max_len(), p.data.eval.max_len());
  m.features = o.features;
  m.positions = o.positions;
  m.attention = o.attention;
  m.heads = o.heads;
  m.residual = o.residual;
  m.seed = training.seed;
  if (o.d_model > 0) {
    if (m.features != FeatureKind::learned)
      fail<ValueError>("--d-model sets the width of trainable embeddings; with --features onehot the width is the "
                       "vocabulary ({}){}",
                       m.vocab, m.positions == PositionEncoding::onehot ? " plus the one-hot positions" : "");
    m.d_embed = o.d_model;
  }

  p.run.optimizer = o.optimizer;
  Settings hyper = default_hyperparameters(o.optimizer);
  hyper = with_overrides(hyper, {{"lr", to_text(kLessonLr)}}, "optimizer");
  if (o.optimizer == OptimizerKind::sgd) hyper = with_overrides(hyper, {{"momentum", to_text(kLessonMomentum)}}, "optimizer");
  const std::string name(to_string(o.optimizer));
  p.run.hyperparameters = with_overrides(hyper, flags.given_in("Optimizer", name, hyper), name);

  // 0.1's cosine: a linear warm-up over 5% of the steps (at least one), decay to 0 at the last step.
  Settings schedule;
  if (o.schedule == ScheduleKind::step) schedule = to_settings(StepLrOptions{});
  if (o.schedule == ScheduleKind::cosine)
    schedule = to_settings(CosineOptions{.warmup_steps = std::max<Index>(1, training.steps / 20),
                                         .total_steps = std::max<Index>(1, training.steps)});
  const std::string schedule_name(to_string(o.schedule));
  p.run.schedule = {schedule_name, with_overrides(schedule, flags.given_in("Schedule", schedule_name, schedule), schedule_name)};
  return p;
}

int run(const Options& o, const TableFlags& flags) {
  std::optional<Checkpoint> resumed;
  RunPlan plan;
  if (!o.resume.empty()) {
    resumed = read_checkpoint(o.resume);
    plan = plan_from_checkpoint(*resumed, o.resume);
    const Settings resumed_options = to_settings(plan.run.training);  // --steps is the one override allowed
    plan.run.training = from_settings<TrainOptions>(
        with_overrides(resumed_options, flags.given_in("Training", "the trainer", resumed_options), "the trainer"), "train");
  } else {
    plan = plan_from_flags(o, flags);
  }
  const Dataset& train = plan.data.train;
  const Dataset& eval = plan.data.eval;
  const bool have_eval = eval.size() > 0;
  ToyRun toy(plan.run, train, have_eval ? &eval : nullptr);
  ToyModel<float>& model = toy.model();
  Trainer<SequenceBatch>& trainer = toy.trainer();
  if (resumed) {
    const LoadReport report = load_training(*resumed, trainer);
    fmt::print(stderr, "resumed from {} at step {}: {}\n", o.resume, trainer.steps_done(), report.str());
  }

  fmt::print(stderr, "data: {} ({} examples, {} tokens, {} labels){}\nmodel: {} (d_model {}, {} parameters)\n"
             "optimizer: {}\ntraining: {}\n",
             train.name, train.size(), train.tokens.size(), train.labels.size(),
             have_eval ? fmt::format("; eval: {} ({} examples)", eval.name, eval.size()) : "", plan.run.model.describe(),
             model.d_model(), model.parameter_count(), toy.optimizer().describe(), trainer.options().describe());
  const std::filesystem::path out(o.out);
  auto checkpoint = [&] {
    Checkpoint c = snapshot(trainer);
    for (const auto& [k, v] : plan.data.source) c.metadata[k] = v;
    return c;
  };
  std::optional<CheckpointDir> checkpoints;
  if (o.checkpoint_every > 0) checkpoints.emplace(out / "checkpoints", o.keep);
  Progress progress(stderr, Progress::Style::automatic, trainer.options().steps, plan.data.title);
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

  const NamedValues final_train = trainer.evaluate(toy.train_source());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const NamedValues final_eval = have_eval ? trainer.evaluate(*toy.eval_source()) : NamedValues{{"loss", nan}, {"accuracy", nan}};
  fmt::print("final steps={} train_loss={:.4f} train_accuracy={:.4f} eval_loss={:.4f} eval_accuracy={:.4f}\n",
             trainer.steps_done(), value_of(final_train, "loss"), value_of(final_train, "accuracy"),
             value_of(final_eval, "loss"), value_of(final_eval, "accuracy"));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train the lesson's toy model (features -> self-attention -> readout) on a toy task or your own data"};
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
  const std::string model_group = "Model";
  add_enum(app, "--attention", o.attention, "Attention (free and learned are accepted too)")->group(model_group);
  app.add_option("--heads", o.heads, "Attention heads")->capture_default_str()->check(CLI::PositiveNumber)->group(model_group);
  app.add_option("--d-model", o.d_model, "Width of trainable embeddings (with --features learned; default 32)")
      ->check(CLI::PositiveNumber)
      ->group(model_group);
  add_enum(app, "--features", o.features, "Token features (onehot: fixed; learned: a trainable embedding)")->group(model_group);
  add_enum(app, "--positions", o.positions, "Positions (onehot: concatenated; learned, sinusoidal: added)")->group(model_group);
  app.add_flag("--residual", o.residual, "Add the attention's input to its output before the readout")->group(model_group);
  add_enum(app, "--optimizer", o.optimizer, "Optimizer")->group("Optimizer");
  add_enum(app, "--schedule", o.schedule, "Learning-rate schedule (cosine: 5% warm-up, then decay to 0)")->group("Schedule");

  TableFlags flags(app);
  flags.add<SgdOptions>("Optimizer");
  flags.add<AdamOptions>("Optimizer");
  flags.add<StepLrOptions>("Schedule");
  flags.add<CosineOptions>("Schedule");
  flags.add<TrainOptions>("Training");

  app.add_option("--out", o.out, "Folder for the run's files: curve.csv, model.tgck, checkpoints/");
  auto* every = app.add_option("--checkpoint-every", o.checkpoint_every, "Save a checkpoint every N steps (into --out/checkpoints)")
                    ->check(CLI::PositiveNumber);
  app.add_option("--keep", o.keep, "Checkpoints to keep (the newest)")->capture_default_str()->check(CLI::PositiveNumber)->needs(every);
  auto* resume = app.add_option("--resume", o.resume, "Continue training from a checkpoint; it supplies the model, the "
                                                      "training settings and the data (--steps may extend the run)")
                     ->check(CLI::ExistingFile);
  // A resumed run takes everything from its checkpoint but these.
  for (CLI::Option* option : app.get_options())
    if (option != resume && !option->check_lname("steps") && !option->check_lname("out") &&
        !option->check_lname("checkpoint-every") && !option->check_lname("keep") && !option->check_lname("help"))
      resume->excludes(option);

  std::string inspect_path;
  bool inspect_json = false;
  CLI::App* inspect_cmd = app.add_subcommand("inspect", "Print a checkpoint: the model, parameter names, shapes and norms, "
                                                        "the optimizer state, the step");
  inspect_cmd->add_option("file", inspect_path, "The checkpoint")->required()->check(CLI::ExistingFile);
  inspect_cmd->add_flag("--json", inspect_json, "Print the whole checkpoint as JSON instead");
  CLI11_PARSE(app, argc, argv);
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
    return run(o, flags);
  } catch (const Error& e) {
    fmt::print(stderr, "train: {}\n", e.what());
    return 2;
  }
}
