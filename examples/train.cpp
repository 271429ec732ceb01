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
//
//   mpirun -np 2 build/examples/train --data-parallel --task cycle --out runs/c   # 2 ranks, one global batch
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lesson/table_flags.hpp"
#include "lesson/tasks.hpp"
#include "lesson/toy_model.hpp"
#include "lesson/toy_data.hpp"
#include "lesson/toy_run.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/train/program/output_folder.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"
#include "tapegrad/train/dataset_file.hpp"
#include "tapegrad/train/program/progress.hpp"
#include "tapegrad/train/program/run_program.hpp"
#include "tapegrad/train/trainer.hpp"
#include "tapegrad/train/program/checkpoint_dir.hpp"
#include "command_line.hpp"
#include "data_parallel.hpp"

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
  double max_memory_gb = 4;  // what a run may take, estimated before anything is built
  bool overwrite = false;
  bool data_parallel = false;
  AttentionMode attention = AttentionMode::learnable;
  FeatureKind features = FeatureKind::onehot;
  PositionEncoding positions = PositionEncoding::onehot;
  OptimizerKind optimizer = OptimizerKind::adam;
  ScheduleKind schedule = ScheduleKind::constant;
  Index heads = 1, d_model = 0;
  std::optional<Index> d_head;  // unset: the model width / --heads
  bool residual = false;
  Index layers = 1;
  bool mlp = false, layernorm = false;
  double dropout = 0;
  Index n_train = 4000, n_test = 1000;
};

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
            return parse_enum(name, e) ? std::string() : examples::must_be(enum_choices<E>(), name);
          },
          ""));
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

RunPlan plan_from_checkpoint(const Checkpoint& c, const std::string& path, double max_memory_gb) {
  // restore(checkpoint, trainer)'s refusal, with the file's name: the run is built from the parts first
  if (const std::string missing = missing_parts(c, {"model", "optimizer", "trainer"}); !missing.empty())
    fail<FormatError>("resume: '{}': {}; nothing was loaded", escaped(std::filesystem::path(path)), missing);
  RunPlan p;
  p.run.model = model_config_from<ToyModel<float>>(c);  // FormatError for a file of another model or a forged one
  p.data = resume_data(c, max_memory_gb);
  const OptimizerState<float> optimizer = read_optimizer_state<float>(c);
  p.run.optimizer = parse_enum<OptimizerKind>(optimizer.kind);
  p.run.hyperparameters = optimizer.hyperparameters;
  p.run.schedule = optimizer.schedule;
  p.run.training = read_trainer_state(c).options;
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
  p.data = load_data(o.task, o.data, o.eval_data, training.seed, o.n_train, o.n_test, o.max_memory_gb);
  ModelConfig& m = p.run.model;
  m.vocab = p.data.train.tokens.size();
  m.labels = p.data.train.labels.size();
  m.max_len = std::max(p.data.train.max_len(), p.data.eval.max_len());
  m.features = o.features;
  m.positions = o.positions;
  m.attention = o.attention;
  m.heads = o.heads;
  m.d_head = o.d_head;
  m.residual = o.residual;
  m.layers = o.layers;
  m.mlp = o.mlp;
  m.layernorm = o.layernorm;
  m.dropout = o.dropout;
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

// The files of a run in its --out folder, relative to it.
namespace files {
constexpr const char* model = "model.tgck";
constexpr const char* curve = "curve.csv";
// The curve while the run goes on: renamed to curve.csv once model.tgck is saved, so that a run whose
// final save fails leaves the folder's curve.csv and model.tgck of one run, not of two.
constexpr const char* partial_curve = "curve.csv.partial";
constexpr const char* checkpoints = "checkpoints";
}  // namespace files

// Owns --out for the run (library: OutputFolder): a second run on it is refused, another program's folder
// is refused, an earlier run's files are replaced only with --overwrite (a resumed run may replace its
// own), and every file the run will write is proven writable before any training.
std::unique_ptr<OutputFolder> take_folder(const Options& o, const RunPlan& plan) {
  if (o.out.empty()) return nullptr;
  std::vector<std::filesystem::path> inputs;
  for (const char* key : {"data", "eval_data"})
    if (const auto it = plan.data.source.find(key); it != plan.data.source.end() && !it->second.empty()) inputs.emplace_back(it->second);
  auto out = std::make_unique<OutputFolder>(
      o.out, OutputFolderOptions{.program = "train", .overwrite = o.overwrite, .resume = !o.resume.empty(), .inputs = inputs});
  std::vector<std::string> names = {files::model, files::curve, files::partial_curve};
  if (o.checkpoint_every > 0)  // the longest name it will write: the last step's
    names.push_back(CheckpointDir(*out, files::checkpoints, 1).name(plan.run.training.steps));
  out->plan(names);
  return out;
}

int run(const Options& o, const TableFlags& flags, const examples::Job& job) {
  std::optional<Checkpoint> resumed;
  RunPlan plan;
  if (!o.resume.empty()) {
    resumed = read_checkpoint(o.resume);
    plan = plan_from_checkpoint(*resumed, o.resume, o.max_memory_gb);
    const Settings resumed_options = to_settings(plan.run.training);  // --steps is the one override allowed
    plan.run.training = from_settings<TrainOptions>(
        with_overrides(resumed_options, flags.given_in("Training", "the trainer", resumed_options), "the trainer"), "train");
    const Index at = read_trainer_state(*resumed).step;
    if (plan.run.training.steps < at)
      fail<ValueError>("--steps {} is behind the checkpoint, which is at step {}; give more steps to train on",
                       plan.run.training.steps, at);
  } else {
    plan = plan_from_flags(o, flags);
  }
  const Dataset& train = plan.data.train;
  const Dataset& eval = plan.data.eval;
  const bool have_eval = eval.size() > 0;
  const Index length = std::max(train.max_len(), eval.max_len());
  ToyModel<float>::check_config(plan.run.model);  // a config that does not fit together: its own message
  check_memory(estimated_bytes(plan.run, length, train.size() + eval.size()), o.max_memory_gb,
               "the model, its optimizer, a batch and the data");
  // Rank 0 alone owns --out and writes to it; the other ranks of a data-parallel run write nothing.
  const bool leader = job.leader();
  const std::unique_ptr<OutputFolder> folder = leader ? take_folder(o, plan) : nullptr;
  // Output on rank 0 only: the others' progress and lines go nowhere.
  std::FILE* const out = leader ? stdout : nullptr;
  std::FILE* const err = leader ? stderr : nullptr;
  const auto say = [](std::FILE* f, const std::string& text) {
    if (f) fmt::print(f, "{}", text);
  };

  ToyRun toy(plan.run, train, have_eval ? &eval : nullptr);
  ToyModel<float>& model = toy.model();
  Trainer<SequenceBatch>& trainer = toy.trainer();
  if (resumed) {
    const LoadReport report = restore(*resumed, trainer);
    say(err, fmt::format("resumed from {} at step {}: {}\n", o.resume, trainer.steps_done(), report.str()));
  }
  // Every rank resumed from the same file (or built the same model): the group checks that and starts
  // at the first step.
  trainer.set_collective(job.collective());
  if (job.size() > 1)
    say(err, fmt::format("data-parallel: {} ranks, each a replica training on its shard of every batch of {}\n", job.size(),
                         plan.run.training.batch));

  say(err, fmt::format( "data: {} ({} examples, {} tokens, {} labels){}\nmodel: {} (d_model {}, {} parameters)\n"
             "optimizer: {}\ntraining: {}\n{}",
             train.name, train.size(), train.tokens.size(), train.labels.size(),
             have_eval ? fmt::format("; eval: {} ({} examples)", eval.name, eval.size()) : "", plan.run.model.describe(),
             model.d_model(), model.count_parameters(), toy.optimizer().describe(),
             describe_settings(to_settings(trainer.options())),
             o.out.empty() ? "no --out: nothing of this run is saved\n" : ""));
  auto checkpoint = [&] {
    Checkpoint c = snapshot(trainer);
    for (const auto& [k, v] : plan.data.source) c.metadata[k] = v;
    return c;
  };
  std::optional<CheckpointDir> checkpoints;
  if (o.checkpoint_every > 0 && folder) checkpoints.emplace(*folder, files::checkpoints, o.keep);
  Progress progress(stderr, leader ? Progress::Style::automatic : Progress::Style::quiet, trainer.options().steps,
                    plan.data.title);
  // The curve, opened at its first point (after the data-parallel group has started, so a refused start
  // leaves no file behind), with the points from before a resume first.
  std::optional<CsvLog> csv;
  std::size_t curve_written = 0;
  const auto write_curve = [&] {
    if (!folder) return;
    if (!csv) csv.emplace(folder->claim(files::partial_curve));
    for (; curve_written < trainer.curve().size(); ++curve_written) csv->write(trainer.curve()[curve_written]);
  };
  TrainCallbacks callbacks;
  callbacks.on_step = [&](Index step) {
    progress.on_step(step);
    if (checkpoints && step % o.checkpoint_every == 0) checkpoints->save(checkpoint(), step);
  };
  callbacks.on_evaluation = [&](const CurvePoint& p) {
    progress.on_evaluation(p);
    write_curve();
  };
  examples::with_nan_hint("lower --lr, clip gradients with --clip N, or add --anomaly to name the op that produced it",
                          [&] { trainer.run(callbacks); });
  progress.finish();
  if (folder) {
    write_curve();
    csv->close();
    save_checkpoint(*folder, files::model, checkpoint());
    folder->rename(files::partial_curve, files::curve);
    say(err, fmt::format("wrote {}, {}{}\n", escaped(folder->path(files::curve)), escaped(folder->path(files::model)),
                         checkpoints ? fmt::format(" and {}/", escaped(folder->path(files::checkpoints))) : ""));
  }

  const NamedValues final_train = trainer.evaluate(toy.train_source());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const NamedValues final_eval =
      have_eval ? trainer.evaluate(*toy.eval_source()) : NamedValues{{"eval_loss", nan}, {"eval_accuracy", nan}};
  say(out, fmt::format("final steps={} train_loss={:.4f} train_accuracy={:.4f} eval_loss={:.4f} eval_accuracy={:.4f}\n",
                       trainer.steps_done(), value_of(final_train, "eval_loss"), value_of(final_train, "eval_accuracy"),
                       value_of(final_eval, "eval_loss"), value_of(final_eval, "eval_accuracy")));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train the lesson's toy model (features -> self-attention -> readout) on a toy task or your own data"};
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
  app.add_option("--heads", o.heads, "Attention heads")->capture_default_str()->check(examples::positive)->group(model_group);
  app.add_option("--d-model", o.d_model, "Width of trainable embeddings (with --features learned; default 32)")
      ->check(examples::positive)
      ->group(model_group);
  app.add_option("--d-head", o.d_head, "Width of each attention head (default: the model width / --heads)")
      ->check(examples::positive)
      ->group(model_group);
  add_enum(app, "--features", o.features, "Token features (onehot: fixed; learned: a trainable embedding)")->group(model_group);
  add_enum(app, "--positions", o.positions, "Positions (onehot: concatenated; learned, sinusoidal: added)")->group(model_group);
  app.add_flag("--residual", o.residual, "Add the attention's input to its output before the readout")->group(model_group);
  app.add_option("--layers", o.layers, "Attention layers; more than 1 (or --mlp, --layernorm, --dropout) builds pre-norm "
                                       "transformer blocks, residual, with d_head = width / --heads")
      ->capture_default_str()
      ->check(CLI::Range(Index{1}, Index{64}))
      ->group(model_group);
  app.add_flag("--mlp", o.mlp, "An MLP (width 4x, GELU) after each attention, in a transformer block")->group(model_group);
  app.add_flag("--layernorm", o.layernorm, "Pre-norm LayerNorms in each block and after the last")->group(model_group);
  app.add_option("--dropout", o.dropout, "Dropout probability in the blocks while training")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.99))
      ->group(model_group);
  add_enum(app, "--optimizer", o.optimizer, "Optimizer")->group("Optimizer");
  add_enum(app, "--schedule", o.schedule, "Learning-rate schedule (cosine: 5% warm-up, then decay to 0)")->group("Schedule");

  TableFlags flags(app);
  flags.add<SgdOptions>("Optimizer", {.lr = kLessonLr, .momentum = kLessonMomentum});  // the defaults this program uses
  flags.add<AdamOptions>("Optimizer", {.lr = kLessonLr});
  flags.add<StepLrOptions>("Schedule");
  flags.add<CosineOptions>("Schedule");
  flags.add<TrainOptions>("Training", {.steps = kLessonSteps});

  app.add_option("--out", o.out, "Folder for the run's files: curve.csv, model.tgck, checkpoints/ (the run locks it)");
  app.add_flag("--overwrite", o.overwrite, "Replace the files of an earlier run in --out");
  app.add_option("--max-memory", o.max_memory_gb, "GB a run may take, estimated before anything is built")
      ->capture_default_str()
      ->check(examples::positive);
  auto* every = app.add_option("--checkpoint-every", o.checkpoint_every, "Save a checkpoint every N steps (into --out/checkpoints)")
                    ->check(examples::positive);
  app.add_option("--keep", o.keep, "Checkpoints to keep (the newest)")->capture_default_str()->check(examples::positive)->needs(every);
  app.add_flag("--data-parallel", o.data_parallel, examples::kDataParallelHelp);
  auto* resume = app.add_option("--resume", o.resume, "Continue training from a checkpoint; it supplies the model, the "
                                                      "training settings and the data (--steps may extend the run)")
                     ->check(CLI::ExistingFile);
  // A resumed run takes everything from its checkpoint but these.
  for (CLI::Option* option : app.get_options())
    if (option != resume && !option->check_lname("steps") && !option->check_lname("out") &&
        !option->check_lname("checkpoint-every") && !option->check_lname("keep") && !option->check_lname("help") &&
        !option->check_lname("max-memory") && !option->check_lname("overwrite") && !option->check_lname("data-parallel"))
      resume->excludes(option);

  std::string inspect_path;
  bool inspect_json = false;
  CLI::App* inspect_cmd = app.add_subcommand("inspect", "Print a checkpoint: the model, parameter names, shapes and norms, "
                                                        "the optimizer state, the step");
  inspect_cmd->add_option("file", inspect_path, "The checkpoint")->required()->check(CLI::ExistingFile);
  inspect_cmd->add_flag("--json", inspect_json, "Print the whole checkpoint as JSON instead");
  if (const auto stop = examples::parse_command_line(app, "train", argc, argv)) return *stop;
  examples::Job job;
  return job.run("train", o.data_parallel && !*inspect_cmd, &argc, &argv, [&] {
    if (*inspect_cmd) return inspect(inspect_path, inspect_json);
    if (o.task.empty() && o.data.empty() && o.resume.empty())
      fail<ValueError>("give --task NAME, --data FILE or --resume FILE (see --help)");
    if (o.checkpoint_every > 0 && o.out.empty())
      fail<ValueError>("--checkpoint-every needs --out DIR to put the checkpoints in (see --help)");
    return run(o, flags, job);
  });
}
