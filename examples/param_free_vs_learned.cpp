// The flagship demo: what learnable Wq, Wk, Wv buy. Trains the same toy model twice on every toy task,
// once with parameter-free attention (softmax(X X^T / sqrt(d)) X) and once with learnable Wq, Wk, Wv,
// everything else equal: same features, same readout, same optimizer (Adam) and step budget, and each
// model's learning rate picked from the same grid on a validation split. Prints the test accuracy of
// both beside the task's chance level and no-routing ceiling, checks the claims docs/lesson.md makes, measures
// where each model's attention goes at the labelled queries (to the answer's key, away from it, to
// itself: lesson/tasks.hpp, attention_use), and writes attention heatmaps, training curves and report.md
// into an output folder named after the run.
//
// Every run (task, model kind, learning rate, seed) is independent: they run --jobs at a time, one per
// core, each on one thread, and the tables are the same for any --jobs.
//
//   build/examples/param_free_vs_learned [--out DIR] [--seeds N] [--steps N] [--features onehot|learned|both]
//                                        [--jobs N] [--tasks NAME,...]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lesson/tasks.hpp"
#include "lesson/toy_model.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/train/program/output_folder.hpp"
#include "tapegrad/train/program/job_pool.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"
#include "tapegrad/train/program/progress.hpp"
#include "tapegrad/train/program/run_program.hpp"
#include "tapegrad/train/plot/plot.hpp"
#include "tapegrad/train/trainer.hpp"
#include "tapegrad/train/program/checkpoint_dir.hpp"
#include "command_line.hpp"

using namespace tapegrad;
using namespace tapegrad::lesson;

namespace {

struct DemoSettings {
  int seeds = 3;
  Index steps = 2000;
  Index batch = 32;
  Index n_train = 4000, n_validation = 500, n_test = 1000;
  std::vector<double> lrs = {0.01, 0.03, 0.1, 0.3};
};

struct Run {
  double lr = 0, validation = 0, test = 0, seconds = 0;
  std::optional<Index> steps_to_99;  // first evaluation (on the validation split) at >= 99%, if any
  std::vector<CurvePoint> curve;
  TensorT<float> weights;  // attention of head 0 on test sequence 0, (T, T)
  std::vector<std::int32_t> sample_predictions;  // the predicted label at each position of test sequence 0
  AttentionUse use;                              // over the whole test set
  std::shared_ptr<const Checkpoint> model;       // the trained weights
  std::uint32_t predictions = 0;                 // checksum of the logits on the whole test set
};

// The result of one model kind on one task: the runs (one per seed) at the learning rate chosen on the
// validation split.
struct Outcome {
  double lr = 0;
  std::vector<Run> runs;
  double mean_test() const {
    double s = 0;
    for (const auto& r : runs) s += r.test;
    return s / static_cast<double>(runs.size());
  }
  double sd_test() const {
    const double m = mean_test();
    double s = 0;
    for (const auto& r : runs) s += (r.test - m) * (r.test - m);
    return runs.size() > 1 ? std::sqrt(s / static_cast<double>(runs.size() - 1)) : 0;
  }
  double seconds() const {
    double s = 0;
    for (const auto& r : runs) s += r.seconds;
    return s;
  }
  double on_answer() const {  // the mean over the seeds
    double s = 0;
    for (const auto& r : runs) s += r.use.on_answer;
    return s / static_cast<double>(runs.size());
  }
  // attention_kind of each seed's run, counted: "routes 3", "away 2, routes 1".
  std::string attention_kinds() const {
    std::vector<std::pair<std::string, int>> counts;  // in the order first seen
    for (const auto& r : runs) {
      const std::string kind = attention_kind(r.use);
      auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == kind; });
      if (it == counts.end()) counts.emplace_back(kind, 1);
      else ++it->second;
    }
    std::stable_sort(counts.begin(), counts.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    std::string out;
    for (const auto& [kind, n] : counts) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", kind, n);
    return out;
  }
};

ModelConfig model_config(const Task& task, AttentionMode mode, FeatureKind features, std::uint64_t seed) {
  ModelConfig c;
  c.vocab = task.tokens().size();
  c.labels = task.labels().size();
  c.max_len = task.length();
  c.features = features;
  c.positions = features == FeatureKind::onehot ? PositionEncoding::onehot : PositionEncoding::learned;
  c.attention = mode;
  c.seed = seed;
  return c;
}

// The accuracy of always answering the training set's most frequent label.
double chance(const TaskSplit& split) {
  std::map<std::int32_t, Index> counts;
  for (const auto& e : split.train.examples)
    for (auto l : e.labels)
      if (l != kIgnoreLabel) ++counts[l];
  const std::int32_t best =
      std::max_element(counts.begin(), counts.end(), [](const auto& a, const auto& b) { return a.second < b.second; })->first;
  Index hit = 0, total = 0;
  for (const auto& e : split.test.examples)
    for (auto l : e.labels)
      if (l != kIgnoreLabel) {
        hit += l == best;
        ++total;
      }
  return static_cast<double>(hit) / static_cast<double>(total);
}

Run train_one(const Task& task, const TaskSplit& split, AttentionMode mode, FeatureKind features, double lr,
              std::uint64_t seed, const DemoSettings& s) {
  ToyModel<float> model(model_config(task, mode, features, seed));
  Adam<float> adam(model.parameters(), {.lr = lr});
  const SequenceSource train(split.train), validation(split.validation), test(split.test);
  Trainer trainer(model, adam, train, [&](Tape<float>& t, const SequenceBatch& b) { return model.loss(t, b); },
                  {.steps = s.steps, .batch = s.batch, .eval_every = 50, .seed = seed});
  trainer.evaluate_on(validation);
  trainer.add_metric("accuracy", metrics::accuracy);
  const auto start = std::chrono::steady_clock::now();
  trainer.run();
  Run r;
  r.lr = lr;
  r.validation = value_of(trainer.curve().back().values, "eval_accuracy");
  r.test = value_of(trainer.evaluate(test), "eval_accuracy");
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.steps_to_99 = first_step_reaching(trainer.curve(), "eval_accuracy", 0.99);
  r.curve = trainer.curve();
  // The whole test set at once: the predictions' checksum, where attention goes, and test sequence 0
  // for the heatmap (its weights and predicted labels).
  model.attention().keep_weights(true);  // for this forward only: training had no use for them
  const Tensor logits = dataset_logits(model, split.test);  // (N, T, labels)
  const TensorT<float>& weights = model.attention().attention_weights()[0];  // (N, T, T) of that forward
  r.predictions = checksum(logits);
  r.use = attention_use(task, split.test, weights);
  const Index t = task.length(), labels = logits.shape().cols;
  r.weights = TensorT<float>(Shape::mat(t, t));
  std::copy_n(weights.data(), t * t, r.weights.data());
  for (Index q = 0; q < t; ++q) {
    const float* row = logits.data() + q * labels;
    r.sample_predictions.push_back(static_cast<std::int32_t>(std::max_element(row, row + labels) - row));
  }
  r.model = std::make_shared<const Checkpoint>(snapshot<float>(model));
  return r;
}

// One model kind on one task while it trains: a run per (learning rate, seed), each a job of its own.
struct PendingOutcome {
  std::vector<std::vector<std::future<Run>>> runs;  // [learning rate][seed]
};

PendingOutcome submit_runs(JobPool& pool, const Task& task, const std::vector<TaskSplit>& splits, AttentionMode mode,
                           FeatureKind features, const DemoSettings& s) {
  PendingOutcome p;
  for (double lr : s.lrs) {
    auto& by_seed = p.runs.emplace_back();
    for (int seed = 0; seed < s.seeds; ++seed)
      by_seed.push_back(pool.submit([&task, &split = splits[static_cast<std::size_t>(seed)], mode, features, lr, seed, &s] {
        return train_one(task, split, mode, features, lr, static_cast<std::uint64_t>(seed), s);
      }));
  }
  return p;
}

// Waits for the runs, and keeps the learning rate with the best validation accuracy summed over seeds
// (the first of equals, in the grid's order).
Outcome best_of(PendingOutcome& pending, const DemoSettings& s) {
  Outcome best;
  double best_validation = -1;
  for (std::size_t i = 0; i < s.lrs.size(); ++i) {
    Outcome o;
    o.lr = s.lrs[i];
    double validation = 0;
    for (auto& run : pending.runs[i]) {
      o.runs.push_back(run.get());
      validation += o.runs.back().validation;
    }
    if (validation > best_validation) {
      best_validation = validation;
      best = std::move(o);
    }
  }
  return best;
}

std::string steps_to_99(const Outcome& o) {
  Index sum = 0;
  for (const auto& r : o.runs) {
    if (!r.steps_to_99) return "-";
    sum += *r.steps_to_99;
  }
  return fmt::format("{}", sum / static_cast<Index>(o.runs.size()));
}

struct Row {
  std::string task;
  bool control;
  double chance, ceiling;
  Outcome free, learned;
};

// The demo's claims with fixed one-hot features: every separating task has learned >= 0.97 and
// parameter-free within 0.05 of the no-routing ceiling; every control has both >= 0.97. With trainable
// embeddings the ceiling does not apply (parameter-free attention learns its own similarity), so that
// table only says whether a task still separates the two.
bool learned_ok(const Row& r) { return r.learned.mean_test() >= 0.97; }
bool free_as_claimed(const Row& r) {  // controls: solved; separating tasks: at the ceiling
  const double f = r.free.mean_test();
  return r.control ? f >= 0.97 : std::abs(f - r.ceiling) <= 0.05;
}
bool claims_hold(const Row& r) { return learned_ok(r) && free_as_claimed(r); }

std::string verdict(const Row& r, bool onehot) {
  const double f = r.free.mean_test(), l = r.learned.mean_test();
  if (!onehot) return f >= 0.97 ? "both solve it" : l - f >= 0.2 ? "separates" : "partly";
  if (r.control) return claims_hold(r) ? "both solve it" : "CONTROL NOT SOLVED";
  if (claims_hold(r)) return "separates";
  return fmt::format("{}{}", learned_ok(r) ? "" : "LEARNED < 0.97 ", free_as_claimed(r) ? "" : "FREE NOT AT CEILING");
}

// "0.912 ± 0.004" over the seeds; one seed has no spread to show: "0.912".
std::string mean_sd(const Outcome& o) {
  if (o.runs.size() < 2) return fmt::format("{:.3f}", o.mean_test());
  return fmt::format("{:.3f} ± {:.3f}", o.mean_test(), o.sd_test());
}

// "train time": seconds spent training both models at their chosen learning rates, summed over the
// seeds (runs that ran at the same time on different cores each count in full).
std::string table(const std::vector<Row>& rows, bool onehot, bool markdown) {
  std::string out;
  const auto line = [&](auto... cells) {
    const std::vector<std::string> c = {cells...};
    if (markdown) {
      out += "|";
      for (const auto& x : c) out += " " + x + " |";
      out += "\n";
    } else {
      out += fmt::format("{:<20} {:>6} {:>8} {:>15} {:>15} {:>29} {:>10}  {}\n", c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]);
    }
  };
  line(std::string("task"), std::string("chance"), std::string("ceiling"), std::string("param-free"),
       std::string("learnable"), std::string("steps to 99% (free / learned)"), std::string("train time"),
       std::string("verdict"));
  if (markdown) out += "|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows)
    line(r.task + (r.control ? " (control)" : ""), fmt::format("{:.3f}", r.chance),
         onehot ? fmt::format("{:.3f}", r.ceiling) : std::string("-"),
         mean_sd(r.free), mean_sd(r.learned),
         fmt::format("{} / {}", steps_to_99(r.free), steps_to_99(r.learned)),
         fmt::format("{:.1f}s", r.free.seconds() + r.learned.seconds()), verdict(r, onehot));
  return out;
}

// Where each model's attention goes at the labelled test queries: the mean weight on the answer's key
// over the seeds, and what each seed's attention does there (attention_kind).
std::string attention_table(const std::vector<Row>& rows, bool markdown) {
  std::string out;
  const auto line = [&](const std::vector<std::string>& c) {
    if (markdown) {
      out += "|";
      for (const auto& x : c) out += " " + x + " |";
      out += "\n";
    } else {
      out += fmt::format("{:<20} {:>9}  {:<22} {:>9}  {}\n", c[0], c[1], c[2], c[3], c[4]);
    }
  };
  line({"task", "free: on", "free: seeds", "learned: on", "learned: seeds"});
  if (markdown) out += "|---|---|---|---|---|\n";
  for (const auto& r : rows)
    line({r.task + (r.control ? " (control)" : ""), fmt::format("{:.2f}", r.free.on_answer()), r.free.attention_kinds(),
          fmt::format("{:.2f}", r.learned.on_answer()), r.learned.attention_kinds()});
  return out;
}

std::string percent(double fraction) { return fmt::format("{:.0f}%", 100 * fraction); }

const char* const kAttentionLegend =
    "where attention goes at the labelled test queries: 'on', the mean weight on the key that holds the answer (summed\n"
    "over majority's three copies, mean over seeds); 'seeds', what each seed's attention does there, counted";

const char* const kAttentionKinds =
    "routes: the answer's key gets the most weight (in >= 90% of the queries); away: it gets the least, so every other\n"
    "position is in the mix and the readout names the one missing from it (this works when the answer is a position);\n"
    "self: the query's own key gets the most; spreads: no key gets half the weight on average; mixed: none of these";

// "0 c", "1 ?": position indices tell repeated tokens apart.
std::vector<std::string> position_labels(const Task& task, const Example& e) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < e.tokens.size(); ++i) out.push_back(fmt::format("{} {}", i, task.tokens().name(e.tokens[i])));
  return out;
}

// The heatmap of one model's attention on test sequence 0 of a seed: the labelled queries marked, the
// answer's keys outlined, and under it what the model does there and over that seed's whole test set.
std::string attention_heatmap(const Task& task, const std::vector<TaskSplit>& splits, const Outcome& o,
                              std::size_t seed, const std::string& model, const std::string& features) {
  const Run& run = o.runs[seed];
  const Example& e = splits[seed].test.examples[0];
  const auto t = static_cast<std::size_t>(task.length());
  Heatmap h{.title = fmt::format("{}: {} ({}, seed {})", model, task.spec().name, features, seed),
            .row_labels = position_labels(task, e), .col_labels = position_labels(task, e),
            .values = std::vector<double>(run.weights.data(), run.weights.data() + t * t),
            .value_title = "attention weight"};
  h.notes.push_back("test sequence 0; arrow: a labelled query, orange box: the key that holds its answer");
  for (std::size_t q = 0; q < t; ++q) {
    const std::int32_t label = e.labels[q];
    if (label == kIgnoreLabel) continue;
    h.marked_rows.push_back(q);
    const auto keys = task.answer_keys(e, static_cast<Index>(q));
    double on = 0;
    for (Index k : keys) {
      h.marked_cells.emplace_back(q, static_cast<std::size_t>(k));
      on += h.values[q * t + static_cast<std::size_t>(k)];
    }
    const auto row = std::span<const double>(h.values).subspan(q * t, t);
    // How many keys get more weight than the answer's (its first key): 0 is the most attended.
    const auto above = std::count_if(row.begin(), row.end(), [&](double w) { return w > row[static_cast<std::size_t>(keys[0])]; });
    const auto below = std::count_if(row.begin(), row.end(), [&](double w) { return w < row[static_cast<std::size_t>(keys[0])]; });
    const std::string rank = above == 0 && below == static_cast<std::ptrdiff_t>(t - keys.size()) ? "the most of any key"
                             : below == 0 && above == static_cast<std::ptrdiff_t>(t - keys.size()) ? "the least of any key"
                             : fmt::format("{} {} more", above, above == 1 ? "key gets" : "keys get");
    const std::int32_t predicted = run.sample_predictions[q];
    h.notes.push_back(fmt::format("query {} '{}': {:.2f} on the answer ({}); predicts {} ({})", q,
                                  task.tokens().name(e.tokens[q]), on, rank, task.labels().name(predicted),
                                  predicted == label ? "right" : fmt::format("the answer is {}", task.labels().name(label))));
  }
  const AttentionUse u = run.use;
  h.notes.push_back(fmt::format("all test queries of the seed: {:.2f} on the answer on average,", u.on_answer));
  h.notes.push_back(fmt::format("its key the most attended in {}, the least in {}: {}", percent(u.most), percent(u.least),
                                attention_kind(u)));
  return heatmap_svg(h);
}

// attention_<task>.svg: both models on seed 0; attention_<task>_learnable.svg: the learnable model on
// every seed (seeds may solve a task differently: routing to the answer or away from it).
// The files of one task in the run's folder (suffix: "" for one-hot features, "_embeddings" for learned).
std::vector<std::string> task_files(const std::string& task, const std::string& suffix) {
  return {fmt::format("attention_{}{}.svg", task, suffix), fmt::format("attention_{}_learnable{}.svg", task, suffix),
          fmt::format("curves_{}{}.svg", task, suffix), fmt::format("models/{}_free{}.tgck", task, suffix),
          fmt::format("models/{}_learned{}.tgck", task, suffix)};
}

void write_pictures(OutputFolder& out, const Task& task, const std::vector<TaskSplit>& splits, const Row& row, bool onehot) {
  const std::string suffix = onehot ? "" : "_embeddings";
  const std::string features = onehot ? "one-hot features" : "trainable embeddings";
  const std::vector<std::string> files = task_files(task.spec().name, suffix);
  out.write(files[0], svg_row({attention_heatmap(task, splits, row.free, 0, "parameter-free", features),
                      attention_heatmap(task, splits, row.learned, 0, "learnable", features)}));
  std::vector<std::string> seeds;
  for (std::size_t seed = 0; seed < row.learned.runs.size(); ++seed)
    seeds.push_back(attention_heatmap(task, splits, row.learned, seed, "learnable", features));
  out.write(files[1], svg_row(seeds));

  auto series = [](const Outcome& o, const std::string& name, bool loss) {
    Series s{.name = name};
    for (const auto& p : o.runs[0].curve) {
      s.x.push_back(static_cast<double>(p.step));
      s.y.push_back(value_of(p.values, loss ? "train_loss" : "eval_accuracy"));
    }
    return s;
  };
  LineChart loss{.title = fmt::format("{}, {}: training loss (seed 0)", task.spec().name, features), .x_label = "step",
                 .y_label = "cross-entropy", .series = {series(row.free, "parameter-free", true), series(row.learned, "learnable", true)},
                 .log_y = true};
  LineChart accuracy{.title = fmt::format("{}, {}: validation accuracy (seed 0)", task.spec().name, features),
                     .x_label = "step", .y_label = "accuracy",
                     .series = {series(row.free, "parameter-free", false), series(row.learned, "learnable", false)},
                     .y_min = 0.0, .y_max = 1.0};
  // The no-routing ceiling bounds parameter-free attention over fixed one-hot features on a separating
  // task only: trainable embeddings choose their own similarity, and a control's ceiling is 1.
  if (onehot && !row.control)
    accuracy.series.push_back({.name = "no-routing ceiling",
                               .x = {0, static_cast<double>(row.free.runs[0].curve.back().step)},
                               .y = {row.ceiling, row.ceiling}});
  out.write(files[2], svg_row({line_chart_svg(loss), line_chart_svg(accuracy)}));
}

// Saves the seed-0 models of a row into models/, reads each back into a fresh model, and checks that it
// predicts the test set exactly as the trained one did. Returns how many it checked.
int save_and_reload(OutputFolder& out, const Row& row, const Dataset& test, const std::string& suffix) {
  int checked = 0;
  const std::vector<std::string> files = task_files(row.task, suffix);
  for (const auto* o : {&row.free, &row.learned}) {
    const Run& r = o->runs[0];
    const std::string& name = files[o == &row.free ? 3 : 4];
    save_checkpoint(out, name, *r.model);
    const auto reloaded = model_from_checkpoint<ToyModel<float>>(read_checkpoint(out.path(name)));
    if (checksum(dataset_logits(*reloaded, test)) != r.predictions)
      fail<Error>("{}: the model reloaded from {} predicts differently from the one that was saved", row.task,
                  escaped(out.path(name)));
    ++checked;
  }
  return checked;
}

std::string timestamp() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

int run_demo(const DemoSettings& s, std::string out_dir, bool overwrite, const std::string& features_choice,
             const std::vector<std::string>& task_list, int jobs);

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Parameter-free vs learnable self-attention on toy tasks that need routing"};
  DemoSettings s;
  std::string out_dir, features_choice = "both";
  std::vector<std::string> task_list = task_names();
  bool overwrite = false;
  app.add_option("--out", out_dir, "Output folder (default: runs/param_free_vs_learned-<date>-<time>)");
  app.add_flag("--overwrite", overwrite, "Replace the files of an earlier param_free_vs_learned run in --out");
  app.add_option("--seeds", s.seeds, "Seeds per configuration")->capture_default_str()->check(CLI::Range(1, 100));
  app.add_option("--steps", s.steps, "Training steps per run")->capture_default_str()->check(examples::positive);
  app.add_option("--features", features_choice, "onehot (fixed one-hot token + position), learned (trainable embeddings), or both")
      ->capture_default_str()
      ->check(CLI::IsMember({"onehot", "learned", "both"}));
  int jobs = available_cores();
  app.add_option("--jobs", jobs, "Training runs at once, each on one thread (default: the CPUs this process may use); "
                 "the results do not depend on it")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--tasks", task_list, "Tasks to run")->check(CLI::IsMember(task_names()))->delimiter(',');
  if (const auto stop = examples::parse_command_line(app, "param_free_vs_learned", argc, argv)) return *stop;
  return run_program("param_free_vs_learned", [&] { return run_demo(s, out_dir, overwrite, features_choice, task_list, jobs); });
}

namespace {

int run_demo(const DemoSettings& s, std::string out_dir, bool overwrite, const std::string& features_choice,
             const std::vector<std::string>& task_list, int jobs) {
  if (out_dir.empty()) out_dir = "runs/param_free_vs_learned-" + timestamp();
  std::vector<FeatureKind> feature_kinds;
  if (features_choice != "learned") feature_kinds.push_back(FeatureKind::onehot);
  if (features_choice != "onehot") feature_kinds.push_back(FeatureKind::learned);
  // Before the minute of training: the folder must be usable and ours, and every file writable.
  OutputFolder out(out_dir, {.program = "param_free_vs_learned", .overwrite = overwrite});
  std::vector<std::string> planned = {"report.md"};
  for (FeatureKind features : feature_kinds)
    for (const auto& name : task_list)
      for (auto& f : task_files(name, features == FeatureKind::onehot ? "" : "_embeddings")) planned.push_back(std::move(f));
  out.plan(planned);

  const auto start = std::chrono::steady_clock::now();
  fmt::print("tapegrad: parameter-free vs learnable self-attention\n"
             "model: features -> SelfAttention (1 head, scale 1/sqrt(d), no residual, no Wo) -> linear readout\n"
             "each cell: test accuracy, {}; Adam, {} steps of batch {}; learning rate per model\n"
             "chosen from {{{}}} on a validation split; tasks have sequences of 8 tokens, 16 content tokens\n"
             "steps to 99%: mean first evaluation step at >= 99% validation accuracy, parameter-free / learnable (-: never)\n"
             "train time: seconds of training of both models at their chosen learning rates, summed over the seeds\n\n",
             s.seeds == 1 ? std::string("one seed") : fmt::format("mean ± sd over {} seeds", s.seeds), s.steps, s.batch,
             fmt::join(s.lrs, ", "));
  // Every run is submitted before the first result is awaited, so the workers never idle between tasks;
  // the results are then taken in the sequential order. `tasks` outlives the pool (declared first), so
  // no running job is left holding a dangling task or split, even when an exception unwinds.
  struct TaskRuns {
    FeatureKind features;
    std::string name;
    std::unique_ptr<Task> task;
    std::vector<TaskSplit> splits;
    PendingOutcome free, learned;
  };
  std::vector<std::unique_ptr<TaskRuns>> tasks;
  JobPool pool(jobs);
  for (FeatureKind features : feature_kinds)
    for (const auto& name : task_list) {
      auto& t = *tasks.emplace_back(std::make_unique<TaskRuns>(TaskRuns{features, name, make_task(name), {}, {}, {}}));
      for (int seed = 0; seed < s.seeds; ++seed)
        t.splits.push_back(make_task_split(*t.task, s.n_train, s.n_validation, s.n_test, static_cast<std::uint64_t>(1000 + seed)));
      t.free = submit_runs(pool, *t.task, t.splits, AttentionMode::parameter_free, features, s);
      t.learned = submit_runs(pool, *t.task, t.splits, AttentionMode::learnable, features, s);
    }

  std::string report = "# Parameter-free vs learnable self-attention\n\n";
  bool all_claims_hold = true;
  int reloaded = 0;
  auto next = tasks.begin();
  for (FeatureKind features : feature_kinds) {
    const bool onehot = features == FeatureKind::onehot;
    const std::string heading = onehot ? "fixed one-hot features (token one-hot ++ position one-hot)"
                                       : "trainable token embeddings + learned positions (d 32)";
    fmt::print("== {} ==\n", heading);
    std::vector<Row> rows;
    for (const auto& name : task_list) {
      TaskRuns& t = **next++;
      Row row{name, t.task->spec().control, chance(t.splits[0]), t.task->spec().ceiling, best_of(t.free, s),
              best_of(t.learned, s)};
      write_pictures(out, *t.task, t.splits, row, onehot);
      reloaded += save_and_reload(out, row, t.splits[0].test, onehot ? "" : "_embeddings");
      rows.push_back(std::move(row));
      fmt::print("  {:<17} done: free {:.3f} (lr {:g}), learned {:.3f} (lr {:g})\n", name, rows.back().free.mean_test(),
                 rows.back().free.lr, rows.back().learned.mean_test(), rows.back().learned.lr);
      std::fflush(stdout);
    }
    const std::string suffix = onehot ? "" : "_embeddings";
    fmt::print("\n{}\n{}\n{}{}\n\n", table(rows, onehot, false), kAttentionLegend, attention_table(rows, false),
               kAttentionKinds);
    report += fmt::format("## {}\n\n{}\n{}:\n\n{}\n{}.\n\n", heading, table(rows, onehot, true), kAttentionLegend,
                          attention_table(rows, true), kAttentionKinds);
    report += fmt::format("Pictures: `attention_<task>{0}.svg`, both models' attention on test sequence 0 of seed 0, the "
                          "labelled queries and the answer's keys marked; `attention_<task>_learnable{0}.svg`, the "
                          "learnable model on every seed; `curves_<task>{0}.svg`, training loss and validation "
                          "accuracy{1}.\n\n", suffix, onehot ? " against the no-routing ceiling" : "");
    for (const auto& r : rows)
      report += fmt::format("- {0}: [attention](attention_{0}{1}.svg), [learnable, every seed](attention_{0}_learnable{1}.svg), "
                            "[curves](curves_{0}{1}.svg)\n", r.task, suffix);
    report += "\n";
    if (onehot)
      for (const auto& r : rows)
        all_claims_hold = all_claims_hold && claims_hold(r);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report += fmt::format("Total time {:.0f} s.\n", seconds);
  out.write("report.md", report);
  fmt::print("with fixed one-hot features the claims {}: learnable >= 0.97 and parameter-free within 0.05 of the "
             "ceiling on every separating task, both >= 0.97 on the controls\n",
             all_claims_hold ? "HOLD" : "DO NOT HOLD");
  fmt::print("saved {} trained models to {}/models/; each, read back into a fresh model, predicts its test set bit for "
             "bit as before\n",
             reloaded, escaped(out.folder()));
  fmt::print("pictures and report.md written to {}/  ({:.0f} s in all)\n", escaped(out.folder()), seconds);
  return static_cast<int>(all_claims_hold ? ExitCode::ok : ExitCode::check_failed);
}

}  // namespace
