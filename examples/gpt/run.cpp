#include "gpt/run.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "command_line.hpp"
#include "lm_programs.hpp"
#include "gpt/outputs.hpp"
#include "gpt/prepare.hpp"
#include "memory_limit.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"
#include "tapegrad/train/plot/plot.hpp"
#include "tapegrad/train/program/progress.hpp"
#include "tapegrad/train/program/run_program.hpp"
#include "tapegrad/train/schedule.hpp"

namespace gpt {

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

// One line: sizes, attention, dropout.
std::string describe(const GptConfig& c) {
  return fmt::format("{} attention, {} block{} of width {}, {} heads, MLP {}, context {}, {} bytes{}",
                     examples::attention_title(c.attention), c.n_layers, c.n_layers == 1 ? "" : "s", c.d_model, c.n_heads,
                     feed_forward_width(c.d_model, c.d_ff), c.context, c.vocabulary.size() / 2,
                     c.dropout > 0 ? fmt::format(", dropout {}", c.dropout) : "");
}

constexpr std::string_view kProgram = "gpt";

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool is_leader(const Collective* collective) { return collective == nullptr || collective->rank() == 0; }

// ---- the data --------------------------------------------------------------------------------------

// Windows that name their data as tapegrad did when it held the stream in memory (held_fingerprint): a
// run resumed from a checkpoint written then trains and evaluates on them.
class HeldWindows final : public DataSource<SequenceBatch> {
 public:
  explicit HeldWindows(const TokenWindows& windows) : windows_(windows), fingerprint_(held_fingerprint(windows)) {}
  std::string_view name() const override { return windows_.name(); }
  Index size() const override { return windows_.size(); }
  void fill(std::span<const Index> indices, SequenceBatch& out) const override { windows_.fill(indices, out); }
  std::uint32_t fingerprint() const override { return fingerprint_; }

 private:
  const TokenWindows& windows_;
  std::uint32_t fingerprint_;
};

// How a run reads its data: the windows and how they name the data to a checkpoint.
struct DataSettings {
  Index context = 64;
  Index curve_windows = 256;  // a curve point's validation windows, evenly spaced (0: all)
  Index eval_windows = 0;     // the table's: all up to this many, else a seeded sample of this many (0: all)
  std::uint64_t seed = 0;     // the sample's
  bool held = false;          // fingerprints as checkpoints written before token files recorded them
};

// A run's data, prepared (gpt/prepare.hpp), and the windows training and validation read. The trainer
// keeps references to the windows, so a Data stays where it was made.
struct Data {
  fs::path path;  // --data, or the path a resumed checkpoint records
  Prepared prepared;
  TokenWindows train;
  TokenWindows validation;  // the table's: every consecutive window, or a seeded sample of them
  TokenWindows curve;       // the curve's evaluations: evenly spaced validation windows
  Index validation_windows = 0;  // every consecutive window of the validation stream
  std::string sentence;     // the attention pictures' line of validation text
  DataSettings settings;
  std::unique_ptr<HeldWindows> held_train = nullptr, held_curve = nullptr;

  const DataSource<SequenceBatch>& train_source() const {
    return held_train ? static_cast<const DataSource<SequenceBatch>&>(*held_train) : train;
  }
  const DataSource<SequenceBatch>& curve_source() const {
    return held_curve ? static_cast<const DataSource<SequenceBatch>&>(*held_curve) : curve;
  }
  const ByteVocabulary& vocabulary() const { return prepared.vocabulary; }
};

// The validation windows of a curve point: every `every`-th, about `curve_windows` of them (all for 0).
Index curve_every(Index windows, Index curve_windows) {
  return curve_windows <= 0 || curve_windows >= windows ? 1 : windows / curve_windows;
}

// The sentence whose attention is drawn: the first line of a validation fortune of 24 to 36 printable
// ASCII characters with a space in it (else the stream's first bytes), no longer than the context.
std::string attention_sentence(const std::string& validation, Index context) {
  const std::size_t longest = static_cast<std::size_t>(std::min<Index>(36, context));
  std::size_t start = 0;
  while (start < validation.size()) {
    const std::size_t end = std::min(validation.find('\n', start), validation.size());
    const std::string_view line = std::string_view(validation).substr(start, end - start);
    start = end + 1;
    const bool printable = std::all_of(line.begin(), line.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
    if (printable && line.size() >= 24 && line.size() <= longest && line.find(' ') != std::string_view::npos)
      return std::string(line);
  }
  return validation.substr(0, static_cast<std::size_t>(std::min<Index>(32, context)));
}

// Where the sentence is looked for: the validation stream's first bytes, as many as a large text's search
// may take without the search growing with the text.
constexpr Index kSentenceSearchBytes = Index{1} << 20;

std::string validation_head(const TokenFile& validation) {
  std::string head;
  validation.scan(0, std::min(validation.size(), kSentenceSearchBytes), [&](Index, std::span<const std::int32_t> ids) {
    for (const std::int32_t b : ids) head += static_cast<char>(b);  // a prepared file's ids are its bytes
  });
  return head;
}

// Where a run prepares `data`: --prepared, or the default place keyed by the data.
fs::path prepared_folder(const Options& o, const fs::path& data) {
  return o.prepared_given ? fs::path(o.prepared) : default_prepared(data);
}

// `source` names where the path came from in messages: "--data", or the checkpoint a resumed run read it from.
// With `may_write` false, prepared_dir is only read (a resume's recorded folder).
std::unique_ptr<Data> load_data(const fs::path& path, const fs::path& prepared_dir, const DataSettings& s,
                                const std::string& source, bool may_write = true) {
  Prepared prepared = prepare_data(path, prepared_dir, source, may_write);
  const Index T = s.context;
  for (const auto& [file, what] : {std::pair{prepared.train, "training"}, std::pair{prepared.validation, "validation"}})
    if (file->size() < T + 1)
      fail<ValueError>("{}: the {} text '{}': {} bytes make no window of {} bytes (--context {} + 1); give a shorter "
                       "--context or more text",
                       source, what, escaped(file->path()), file->size(), T + 1, T);
  const std::vector<std::int32_t> map = prepared.vocabulary.map();
  const TokenWindows::File validation = prepared.validation;
  const Index all = consecutive_windows(validation->size(), T);
  std::string sentence = attention_sentence(validation_head(*validation), T);
  auto data = std::make_unique<Data>(Data{
      .path = path,
      .prepared = prepared,
      .train = TokenWindows::training(prepared.train, T, map),
      .validation = s.eval_windows <= 0 ? TokenWindows::consecutive(validation, T, 1, map)
                                        : TokenWindows::sample(validation, T, s.eval_windows, s.seed, map),
      .curve = TokenWindows::consecutive(validation, T, curve_every(all, s.curve_windows), map),
      .validation_windows = all,
      .sentence = std::move(sentence),
      .settings = s,
  });
  if (s.held) {
    data->held_train = std::make_unique<HeldWindows>(data->train);
    data->held_curve = std::make_unique<HeldWindows>(data->curve);
  }
  return data;
}

// The learnable model's memory (the larger of the two) within the examples' limit.
void check_memory(GptConfig c, Index batch) {
  c.attention = AttentionMode::learnable;
  examples::check_lm_memory(GptConfig::decoder(c), batch, "--d-model, --d-ff, --layers, --context or --batch");
}

// ---- one model's training ------------------------------------------------------------------------------

using OptimizerFactory = std::function<std::unique_ptr<Optimizer<float>>(Gpt<float>&)>;

// One model's training: the model, its optimizer and the trainer, which keeps references to both, so the
// run owns them all.
struct LmRun {
  Gpt<float> model;
  std::unique_ptr<Optimizer<float>> optimizer;
  Trainer<SequenceBatch> trainer;

  LmRun(const GptConfig& config, const OptimizerFactory& make_optimizer, const TrainOptions& options,
        const Data& data)
      : model(config), optimizer(make_optimizer(model)),
        trainer(model, *optimizer, data.train_source(),
                [this](Tape<float>& tape, const SequenceBatch& batch) { return model.loss(tape, batch); }, options) {
    trainer.evaluate_on(data.curve_source());
  }
};

Index warmup_steps(const Options& o) { return std::min(o.warmup, o.steps); }

// AdamW, decaying the matrices only, with warm-up and cosine decay to min_lr at the last step.
OptimizerFactory new_optimizer(const Options& o) {
  return [&o](Gpt<float>& model) {
    auto adamw = std::make_unique<AdamW<float>>(
        model.parameters(), AdamOptions{.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .weight_decay = o.weight_decay,
                                        .decay_on = o.decay_on});
    adamw->set_schedule(CosineWithWarmup({.warmup_steps = warmup_steps(o), .total_steps = std::max<Index>(1, o.steps),
                                          .min_lr = o.min_lr}));
    return adamw;
  };
}

// The optimizer a checkpoint records (kind, hyperparameters, schedule); restore then sets its state.
OptimizerFactory saved_optimizer(const OptimizerState<float>& r) {
  return [&r](Gpt<float>& model) {
    auto optimizer = make_optimizer<float>(parse_enum<OptimizerKind>(r.kind), model.parameters(), r.hyperparameters);
    optimizer->set_schedule(*make_schedule(r.schedule));
    return optimizer;
  };
}

// What --resume needs besides the checkpoint's own records: where the data came from and was prepared, and
// which validation windows the curve and the table evaluate.
Checkpoint checkpoint_of(const LmRun& run, const Data& data) {
  Checkpoint c = snapshot(run.trainer);
  c.metadata["program"] = std::string(kProgram);
  c.metadata["data"] = fs::absolute(data.path).lexically_normal().string();  // a resume from any folder finds it
  c.metadata["prepared"] = fs::absolute(data.prepared.dir).lexically_normal().string();
  c.metadata["curve_windows"] = to_text(data.settings.curve_windows);
  c.metadata["eval_windows"] = to_text(data.settings.eval_windows);
  return c;
}

// ---- evaluation --------------------------------------------------------------------------------------

// Windows [begin, end) of another source: one evaluation batch of a sample, evaluated alone for its mean.
class Slice final : public DataSource<SequenceBatch> {
 public:
  Slice(const DataSource<SequenceBatch>& all, Index begin, Index end) : all_(all), begin_(begin), end_(end) {}
  std::string_view name() const override { return all_.name(); }
  Index size() const override { return end_ - begin_; }
  void fill(std::span<const Index> indices, SequenceBatch& out) const override {
    shifted_.assign(indices.begin(), indices.end());
    for (Index& i : shifted_) i += begin_;
    all_.fill(shifted_, out);
  }
  std::uint32_t fingerprint() const override { return all_.fingerprint(); }

 private:
  const DataSource<SequenceBatch>& all_;
  Index begin_, end_;
  mutable std::vector<Index> shifted_;
};

// A loss over validation windows: exact over every window (no standard error), or a sample's mean with
// its standard error (none from a sample of one window).
struct Estimate {
  double mean = 0;
  double standard_error = std::numeric_limits<double>::quiet_NaN();
  bool sampled = false;
};

// The weighted mean of group means m_j (w_j windows each, drawn at random without replacement from
// `population` windows in all), and its standard error: the ratio estimator's,
// sqrt(g / (g - 1) * sum_j (w_j / W)^2 (m_j - mean)^2) over g groups, times the finite-population
// correction sqrt(1 - n / N). Groups of one window each give s / sqrt(n), the textbook's.
Estimate sample_estimate(const std::vector<double>& means, const std::vector<double>& weights, Index population) {
  double total = 0, weighted = 0;
  for (std::size_t j = 0; j < means.size(); ++j) {
    total += weights[j];
    weighted += weights[j] * means[j];
  }
  Estimate e{.mean = weighted / total, .sampled = true};
  const auto g = static_cast<double>(means.size());
  if (means.size() < 2) return e;
  double spread = 0;
  for (std::size_t j = 0; j < means.size(); ++j) spread += std::pow(weights[j] / total * (means[j] - e.mean), 2);
  e.standard_error = std::sqrt(g / (g - 1) * spread * std::max(0.0, 1 - total / static_cast<double>(population)));
  return e;
}

// The model's loss over the table's windows: every window's at once, or, for a sample, batch by batch
// (the trainer's evaluation batch), each batch's mean a group of the estimate; a sample that one batch
// holds goes window by window, so that it has groups to estimate its error from.
Estimate evaluate_table(Trainer<SequenceBatch>& trainer, const TokenWindows& windows) {
  if (!windows.sampled()) return {.mean = value_of(trainer.evaluate(windows), "eval_loss")};
  std::vector<double> means, weights;
  const Index batch = windows.size() > trainer.options().eval_batch ? trainer.options().eval_batch : 1;
  for (Index begin = 0; begin < windows.size(); begin += batch) {
    const Slice slice(windows, begin, std::min(windows.size(), begin + batch));
    means.push_back(value_of(trainer.evaluate(slice), "eval_loss"));
    weights.push_back(static_cast<double>(slice.size()));
  }
  return sample_estimate(means, weights, windows.population());
}

// The bigram's over the same windows.
Estimate bigram_table(const Bigram& bigram, const TokenWindows& windows) {
  if (!windows.sampled()) return {.mean = bigram.nll(windows)};
  std::vector<double> per_window;
  bigram.nll(windows, &per_window);
  return sample_estimate(per_window, std::vector<double>(per_window.size(), 1.0), windows.population());
}

// "2.0407", or "2.0407 ± 0.0049" for a sample, "2.0407 (one window: no error)" for a sample of one.
std::string loss_text(const Estimate& e) {
  if (!e.sampled) return fmt::format("{:.4f}", e.mean);
  return std::isnan(e.standard_error) ? fmt::format("{:.4f} (one window: no error)", e.mean)
                                      : fmt::format("{:.4f} \u00b1 {:.4f}", e.mean, e.standard_error);
}

struct ModelResult {
  std::string title;      // the table's row: bigram, parameter-free, learnable
  std::string file_name;  // bigram, parameter_free, learnable
  Index parameters = 0;
  Estimate validation = {};  // nats per byte over the table's validation windows
  double seconds = 0;     // training, with the curve's evaluations
  double chars_per_second = 0;  // bytes of training windows (steps x batch x context) a second
  std::vector<CurvePoint> curve = {};
  std::string samples = {};  // the prompt and what the model wrote after it
  std::vector<std::vector<Tensor>> maps = {};  // [layer][head] on the attention sentence
  bool reload_matches = true;  // the saved file, read back, samples the same text
};

// o.prompt and o.length bytes sampled after it, with the model in evaluation mode.
template <class T>
std::string sample_text(LanguageModel<T>& model, const ByteVocabulary& vocabulary, const Options& o, bool cache) {
  const std::vector<std::int32_t> prompt = vocabulary.encode(o.prompt, "--prompt");
  const std::vector<std::int32_t> drawn =
      sample(model, prompt, {.count = o.length, .seed = o.seed, .temperature = o.temperature, .cache = cache});
  return o.prompt + vocabulary.decode(drawn);
}

// Trains a run from where it is to its last step, evaluates it on every validation window, and (rank 0)
// samples from it and saves it.
ModelResult train_to_end(LmRun& run, const Data& data, const Options& o, RunFolder* folder, Collective* collective,
                         std::string_view sentence) {
  Gpt<float>& model = run.model;
  const std::string title(examples::attention_title(model.config().attention)), name(to_string(model.config().attention));
  const bool leader = is_leader(collective);
  const TrainOptions& options = run.trainer.options();
  const Index first_step = run.trainer.steps_done();
  run.trainer.set_collective(collective);  // every rank trains this model together
  Progress progress(stderr, leader ? Progress::Style::automatic : Progress::Style::quiet, options.steps, title);
  progress.show_rate_of(static_cast<double>(options.batch * model.context()), "chars");
  TrainCallbacks callbacks = progress.callbacks();
  callbacks.on_step = [&](Index step) {
    progress.on_step(step);
    if (folder && o.checkpoint_every > 0 && step % o.checkpoint_every == 0 && step < options.steps)
      folder->save_checkpoint(name, checkpoint_of(run, data), step, o.keep);
  };
  const auto start = std::chrono::steady_clock::now();
  examples::with_nan_hint("lower --lr, or clip gradients with --clip N", [&] { run.trainer.run(callbacks); });
  progress.finish();
  ModelResult r{.title = title, .file_name = name, .parameters = model.count_parameters()};
  r.seconds = seconds_since(start);
  r.chars_per_second =
      static_cast<double>((run.trainer.steps_done() - first_step) * options.batch * model.context()) / r.seconds;
  r.curve = run.trainer.curve();
  r.validation = evaluate_table(run.trainer, data.validation);
  if (!leader) return r;  // the others' replicas are rank 0's: it samples, saves and reports
  r.samples = sample_text(model, data.vocabulary(), o, o.cache);
  if (!sentence.empty()) r.maps = attention_maps(model, sentence);

  const fs::path file = folder->save_model(name, checkpoint_of(run, data), model,
                                           model.config().attention == AttentionMode::learnable ? WeightLayout::pytorch
                                                                                                : WeightLayout::tapegrad);
  folder->write(fmt::format("samples_{}.txt", name), r.samples);
  // What --sample-from will do in a fresh process: the saved model must sample the same text.
  const auto reloaded = model_from_checkpoint<Gpt<float>>(read_checkpoint(file));
  r.reload_matches = sample_text(*reloaded, data.vocabulary(), o, o.cache) == r.samples;
  fmt::print("  {:<14} validation {} nats/char after {} steps ({:.1f} s, {:.0f} chars/s); weights crc32 {:08x}; "
             "saved {}{}\n",
             title, loss_text(r.validation), run.trainer.steps_done(), r.seconds, r.chars_per_second,
             weights_crc32(snapshot<float>(model)), file.filename().string(),
             r.reload_matches ? "" : " -- RELOADED, IT SAMPLES OTHER TEXT");
  std::fflush(stdout);
  return r;
}

// ---- the report --------------------------------------------------------------------------------------

std::vector<std::string> byte_labels(std::string_view text) {
  std::vector<std::string> labels;
  for (char c : text) labels.push_back(c == ' ' ? "\u2423" : show_byte(static_cast<unsigned char>(c)));  // a visible space
  return labels;
}

// One layer's heads side by side: rows are queries, columns keys.
std::string attention_svg(const ModelResult& r, std::size_t layer, std::string_view sentence) {
  return examples::attention_layer_svg(r.maps[layer], byte_labels(sentence),
                                       fmt::format("{} attention, layer {}", r.title, layer), false);
}

std::string attention_name(const ModelResult& r, std::size_t layer) {
  return fmt::format("attention_{}_layer{}.svg", r.file_name, layer);
}

// Train and validation loss against the step for each model, the bigram as a floor.
std::string curves_svg(const std::vector<ModelResult>& models, double bigram, Index steps) {
  LineChart chart{.title = "next-byte loss on the fortunes", .x_label = "step", .y_label = "nats per character"};
  for (const ModelResult& r : models) {
    chart.series.push_back(curve_series(r.title + " train", r.curve, "train_loss"));
    chart.series.push_back(curve_series(r.title + " validation (curve windows)", r.curve, "eval_loss"));
  }
  chart.series.push_back({.name = "bigram validation", .x = {0, static_cast<double>(steps)}, .y = {bigram, bigram}});
  return line_chart_svg(chart);
}

std::string table(const std::vector<ModelResult>& rows, bool markdown) {
  std::string out;
  auto rate = [](const ModelResult& r) { return r.chars_per_second > 0 ? fmt::format("{:.0f}", r.chars_per_second) : "-"; };
  if (markdown) {
    out += "| model | parameters | validation (nats/char) | training time | training chars/s |\n|---|---:|---:|---:|---:|\n";
    for (const auto& r : rows)
      out += fmt::format("| {} | {} | {} | {:.1f} s | {} |\n", r.title, r.parameters, loss_text(r.validation), r.seconds,
                         rate(r));
    return out;
  }
  out += fmt::format("  {:<16} {:>10}  {:>22}  {:>13}  {:>16}\n", "model", "parameters", "validation (nats/char)",
                     "training time", "training chars/s");
  for (const auto& r : rows)
    out += fmt::format("  {:<16} {:>10}  {:>22}  {:>11.1f} s  {:>16}\n", r.title, r.parameters, loss_text(r.validation),
                       r.seconds, rate(r));
  return out;
}

std::string describe_data(const Data& d) {
  const Prepared& p = d.prepared;
  return fmt::format("{}: {} file{}, {} fortunes ({} empty dropped); training {} fortunes, {} bytes; validation {} "
                     "fortunes, {} bytes ({} windows of {}); {} byte symbols",
                     escaped(d.path), p.files.size(), p.files.size() == 1 ? "" : "s", p.fortunes, p.empty,
                     p.train_fortunes, p.train->size(), p.validation_fortunes, p.validation->size(), d.validation_windows,
                     d.train.context() + 1, d.vocabulary().size());
}

// Where the token files are, and whether this run made them or found them made.
std::string describe_preparation(const Data& d) {
  const Prepared& p = d.prepared;
  const double mb = static_cast<double>(p.text_bytes) / 1e6;
  if (p.made)
    return fmt::format("{}: {} and {} made from {:.1f} MB of text in {:.2f} s ({:.0f} MB/s)", escaped(p.dir),
                       escaped(p.train->path().filename()), escaped(p.validation->path().filename()), mb, p.seconds,
                       mb / std::max(p.seconds, 1e-9));
  return fmt::format("{}: prepared from this data before; its {:.1f} MB of ids checked in {:.2f} s", escaped(p.dir),
                     static_cast<double>(p.train->size() + p.validation->size()) / 1e6, p.seconds);
}

// Which validation windows the table evaluates.
std::string describe_evaluation(const Data& d) {
  if (!d.validation.sampled()) return fmt::format("every validation window ({})", d.validation.size());
  return fmt::format("a seeded sample of {} of the {} validation windows, with one standard error", d.validation.size(),
                     d.validation.population());
}

std::string describe_training(const Options& o, const Data& d) {
  return fmt::format("AdamW lr {:g}, betas ({:g}, {:g}), weight decay {:g} on {}, warm-up {} steps then cosine to {:g}, "
                     "gradient norm clipped at {:g}; {} steps of {} windows of {} characters (seed {}); curve: {} "
                     "validation windows every {} steps; table: {}",
                     o.lr, o.beta1, o.beta2, o.weight_decay,
                     o.decay_on == DecayOn::matrices ? "matrices only" : "all parameters",
                     warmup_steps(o), o.min_lr, o.clip, o.steps, o.batch, d.train.context(), o.train_seed, d.curve.size(),
                     o.eval_every, describe_evaluation(d));
}

std::string describe_model(const GptConfig& c) {
  return fmt::format("embedding {} x {} + learned positions ({}) -> {} causal pre-norm block{} (width {}, {} heads, MLP {}, "
                     "GELU, biases) -> LayerNorm -> head tied to the embedding; dropout {:g}",
                     c.vocabulary.size() / 2, c.d_model, c.context, c.n_layers, c.n_layers == 1 ? "" : "s", c.d_model,
                     c.n_heads, feed_forward_width(c.d_model, c.d_ff), c.dropout);
}

// Text from outside (a prompt, a sentence of the data) as the program prints it: newlines and tabs as \n and
// \t, the rest as escaped() shows it.
std::string visible(std::string_view prompt) {
  std::string out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= prompt.size(); ++i)
    if (i == prompt.size() || prompt[i] == '\n' || prompt[i] == '\t') {
      out += escaped(prompt.substr(start, i - start));
      if (i < prompt.size()) out += prompt[i] == '\n' ? "\\n" : "\\t";
      start = i + 1;
    }
  return out;
}

std::string report(const Options& o, const Data& d, const GptConfig& c, const std::vector<ModelResult>& rows,
                   const std::vector<ModelResult>& trained, std::string_view sentence, const std::vector<std::string>& pictures,
                   double total_seconds) {
  std::string out = fmt::format(
      "# A character GPT on the fortunes\n\n"
      "Data: {}.\n\nModel: {}.\n\nTraining: {}.\n\n"
      "## Validation loss\n\nMean cross-entropy over every byte {} predict ({} bytes), in nats per character; time with "
      "the curve's evaluations.\n\n{}\n## Pictures\n\n",
      describe_data(d), describe_model(c), describe_training(o, d),
      d.validation.sampled() ? "a seeded sample of the validation windows (± one standard error)" : "the validation windows",
      d.validation.predicted(), table(rows, true));
  out += "![curves](curves.svg)\n\n";
  for (std::size_t i = 1; i < pictures.size(); ++i)
    out += fmt::format("- `{}`: which earlier characters each head reads in \"{}\"\n", pictures[i], visible(sentence));
  if (!trained.empty() && !trained.back().maps.empty())
    out += fmt::format("\n![{} attention, layer 0]({})\n", trained.back().title, attention_name(trained.back(), 0));
  out += fmt::format("\n## Samples\n\n{} characters after \"{}\", seed {}, temperature {:g}:\n\n", o.length,
                     visible(o.prompt), o.seed, o.temperature);
  for (const auto& r : rows) out += fmt::format("### {}\n\n```\n{}\n```\n\n", r.title, r.samples);
  out += "Models: ";
  for (const auto& r : trained) out += fmt::format("`{}.tgck` ", r.file_name);
  out += fmt::format("(sample again with `gpt --sample-from FILE --seed {} --length {}`).\n\nTotal time {:.0f} s.\n", o.seed,
                     o.length, total_seconds);
  return out;
}

void print_samples(const std::vector<ModelResult>& rows) {
  for (const auto& r : rows) fmt::print("--- {}\n{}\n", r.title, r.samples);
}

std::vector<AttentionMode> modes_of(const std::string& which) {
  if (which == "both") return {AttentionMode::parameter_free, AttentionMode::learnable};
  return {parse_enum<AttentionMode>(which)};
}

}  // namespace

// What a run will write, for the folder to prove writable before any training.
FolderPlan plan_of(const Options& o, const Data& data, const std::vector<AttentionMode>& modes, bool resume, Index steps) {
  FolderPlan plan;
  plan.overwrite = o.overwrite;
  plan.resume = resume;
  plan.inputs = {data.path, data.prepared.dir};
  plan.last_step = steps;
  plan.checkpoints = o.checkpoint_every > 0;
  for (const AttentionMode mode : modes) {
    plan.models.emplace_back(to_string(mode));
    for (Index layer = 0; layer < o.model.n_layers; ++layer)
      plan.pictures.push_back(fmt::format("attention_{}_layer{}.svg", to_string(mode), layer));
  }
  return plan;
}

int run_comparison(const Options& o, Collective* collective) {
  const bool leader = is_leader(collective);
  const auto start = std::chrono::steady_clock::now();
  if (o.model.d_model % o.model.n_heads != 0)
    fail<ValueError>("--d-model {} is not divisible by --heads {}", o.model.d_model, o.model.n_heads);
  const std::unique_ptr<Data> data =
      load_data(o.data, prepared_folder(o, o.data),
                {.context = o.model.context, .curve_windows = o.curve_windows, .eval_windows = o.eval_windows,
                 .seed = o.train_seed},
                "--data");
  GptConfig config = o.model;
  config.vocabulary = data->vocabulary().hex();
  Gpt<float>::check_config(config);  // before the folder is taken
  check_memory(config, o.batch);  // evaluation goes in batches of the same size
  (void)data->vocabulary().encode(o.prompt, "--prompt");  // a prompt the models cannot read, before any training

  std::optional<RunFolder> folder;  // rank 0's, checked before any training
  if (leader) folder.emplace(o.out, plan_of(o, *data, modes_of(o.attention), false, o.steps));
  if (leader)
    fmt::print("gpt: a character GPT on running text (nanoGPT's character model)\ndata: {}\nprepared: {}\nmodel: {}\n"
               "training: {}\n\n",
               describe_data(*data), describe_preparation(*data), describe_model(config), describe_training(o, *data));
  std::fflush(stdout);

  const auto bigram_start = std::chrono::steady_clock::now();
  const Bigram bigram(data->prepared.train_pairs, data->vocabulary());
  ModelResult floor{.title = "bigram", .file_name = "bigram", .parameters = bigram.count_parameters(),
                    .validation = bigram_table(bigram, data->validation)};
  floor.seconds = seconds_since(bigram_start);
  examples::BigramModel<Bigram> bigram_model(bigram);
  floor.samples = sample_text(bigram_model, data->vocabulary(), o, false);
  if (leader) folder->write("samples_bigram.txt", floor.samples);

  const std::string& sentence = data->sentence;
  std::vector<ModelResult> trained;
  for (const AttentionMode mode : modes_of(o.attention)) {
    config.attention = mode;
    config.seed = o.train_seed;
    const TrainOptions options{.steps = o.steps, .batch = o.batch, .eval_every = o.eval_every, .eval_batch = o.batch,
                               .seed = o.train_seed, .clip = o.clip};
    LmRun run(config, new_optimizer(o), options, *data);
    trained.push_back(train_to_end(run, *data, o, leader ? &*folder : nullptr, collective, sentence));
  }
  if (!leader) return static_cast<int>(ExitCode::ok);  // rank 0 writes the table, pictures and report

  std::vector<ModelResult> rows = {floor};
  rows.insert(rows.end(), trained.begin(), trained.end());
  std::vector<std::string> pictures = {"curves.svg"};
  folder->write("curves.svg", curves_svg(trained, floor.validation.mean, o.steps));
  for (const ModelResult& r : trained)
    for (std::size_t layer = 0; layer < r.maps.size(); ++layer) {
      pictures.push_back(attention_name(r, layer));
      folder->write(pictures.back(), attention_svg(r, layer, sentence));
    }
  fmt::print("\n{}\nsamples ({} characters after \"{}\", seed {}):\n", table(rows, false), o.length, visible(o.prompt),
             o.seed);
  print_samples(rows);
  folder->write("report.md", report(o, *data, config, rows, trained, sentence, pictures, seconds_since(start)));
  bool reloads_match = true;
  for (const auto& r : trained) reloads_match = reloads_match && r.reload_matches;
  fmt::print("wrote {}/: {} ({:.0f} s in all)\n", escaped(folder->dir()), fmt::join(folder->written(), ", "),
             seconds_since(start));
  if (!reloads_match)
    fmt::print("a saved model, read back into a fresh model, samples OTHER TEXT than the trained one (see above)\n");
  return static_cast<int>(reloads_match ? ExitCode::ok : ExitCode::check_failed);
}

int resume(const Options& o, Collective* collective) {
  const bool leader = is_leader(collective);
  const Checkpoint checkpoint = read_checkpoint(o.resume);
  const auto program = checkpoint.metadata.find("program");
  if (!checkpoint.has("trainer") || program == checkpoint.metadata.end() || program->second != kProgram ||
      !checkpoint.metadata.contains("data") || !checkpoint.metadata.contains("curve_windows"))
    fail<FormatError>("--resume: '{}' is not a training checkpoint of this program (it needs the state of training and "
                      "the data it was trained on)",
                      escaped(fs::path(o.resume)));
  const GptConfig config = model_config_from<Gpt<float>>(checkpoint);
  const auto number = [&](const std::string& key) {
    Index n = 0;
    if (!checkpoint.metadata.contains(key))
      fail<FormatError>("--resume: '{}' records no {}", escaped(fs::path(o.resume)), key);
    if (!from_text(checkpoint.metadata.at(key), n))
      fail<FormatError>("--resume: '{}' records {} '{}', which is not a number", escaped(fs::path(o.resume)), key,
                        escaped(checkpoint.metadata.at(key)));
    return n;
  };
  // A checkpoint written before token files names its data by the CRC of every id, and its table evaluated
  // every validation window.
  const bool held = !checkpoint.metadata.contains("prepared");
  const DataSettings settings{.context = config.context, .curve_windows = number("curve_windows"),
                              .eval_windows = held ? 0 : number("eval_windows"), .seed = config.seed, .held = held};
  // The data is read where the checkpoint says it was prepared, and nothing is written there: a
  // checkpoint's metadata names no new place to write (--prepared does, and a checkpoint of before token
  // files prepares where a first run would).
  const fs::path data_path = checkpoint.metadata.at("data");
  const bool may_write = o.prepared_given || held;
  const std::unique_ptr<Data> data =
      load_data(data_path, may_write ? prepared_folder(o, data_path) : fs::path(checkpoint.metadata.at("prepared")),
                settings, fmt::format("--resume: the data path that '{}' records", escaped(fs::path(o.resume))),
                may_write);
  if (data->vocabulary().hex() != config.vocabulary)
    fail<ValueError>("--resume: the data '{}' has other bytes than the model was trained on", escaped(data->path));
  (void)data->vocabulary().encode(o.prompt, "--prompt");
  const TrainerState trainer = read_trainer_state(checkpoint);
  TrainOptions options = trainer.options;
  const Index at = trainer.step;
  if (o.steps > 0) options.steps = o.steps;
  if (options.steps < at)
    fail<ValueError>("--steps {} is behind the checkpoint, which is at step {}; give more steps to train on", options.steps, at);

  const OptimizerState<float> optimizer = read_optimizer_state<float>(checkpoint);
  LmRun run(config, saved_optimizer(optimizer), options, *data);
  const LoadReport loaded = restore(checkpoint, run.trainer);  // strict: refuses other data, another optimizer
  std::optional<RunFolder> folder;  // taken once the checkpoint fits the data: a refusal writes nothing
  if (leader) folder.emplace(o.out, plan_of(o, *data, {config.attention}, true, options.steps));
  if (leader)
    fmt::print("gpt: resumed {} at step {} of {} from {} ({})\ndata: {}\nprepared: {}\n", describe(config), at,
               options.steps, escaped(fs::path(o.resume)), loaded.str(), describe_data(*data), describe_preparation(*data));
  const ModelResult r = train_to_end(run, *data, o, leader ? &*folder : nullptr, collective, {});
  if (!leader) return static_cast<int>(ExitCode::ok);
  fmt::print("samples ({} characters after \"{}\", seed {}):\n", o.length, visible(o.prompt), o.seed);
  print_samples({r});
  return static_cast<int>(r.reload_matches ? ExitCode::ok : ExitCode::check_failed);
}

int prepare_only(const Options& o) {
  const auto start = std::chrono::steady_clock::now();
  const Prepared p = prepare_data(o.data, prepared_folder(o, o.data), "--data");
  const double mb = static_cast<double>(p.text_bytes) / 1e6;
  fmt::print("gpt: {} {}: {} and {} ({} and {} bytes, {} byte symbols) from {:.1f} MB of text in {:.2f} s ({:.0f} "
             "MB/s)\n",
             p.made ? "prepared" : "found prepared (and checked)", escaped(p.dir), escaped(p.train->path().filename()),
             escaped(p.validation->path().filename()), p.train->size(), p.validation->size(), p.vocabulary.size(), mb,
             seconds_since(start), mb / std::max(seconds_since(start), 1e-9));
  return static_cast<int>(ExitCode::ok);
}

int sample_from(const std::string& file, const Options& o) {
  const auto model = model_from_checkpoint<Gpt<float>>(read_checkpoint(file));
  const ByteVocabulary& vocabulary = model->vocabulary();
  const std::vector<std::int32_t> prompt = vocabulary.encode(o.prompt, "--prompt");
  // The text is streamed as it is drawn (at the longest --length, minutes of it), a line or 4 KiB at a time.
  std::string pending = o.prompt;
  auto flush = [&] {
    std::fwrite(pending.data(), 1, pending.size(), stdout);
    std::fflush(stdout);
    pending.clear();
  };
  flush();
  const auto start = std::chrono::steady_clock::now();
  sample(*model, prompt,
         {.count = o.length, .seed = o.seed, .temperature = o.temperature, .cache = o.cache, .on_token = [&](std::int32_t t) {
            pending += static_cast<char>(vocabulary.byte(t));
            if (pending.back() == '\n' || pending.size() >= 4096) flush();
          }});
  flush();
  const double seconds = seconds_since(start);
  fmt::print(stderr, "gpt: {} characters in {:.3f} s ({:.0f} chars/s, {}) from {} ({}; seed {})\n", o.length, seconds,
             static_cast<double>(o.length) / seconds, o.cache ? "with the cache" : "recomputing the window for each",
             escaped(fs::path(file)), describe(model->config()), o.seed);
  return 0;
}

}  // namespace gpt
