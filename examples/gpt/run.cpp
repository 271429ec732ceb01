#include "gpt/run.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "command_line.hpp"
#include "gpt/outputs.hpp"
#include "memory_limit.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"
#include "tapegrad/plot/plot.hpp"
#include "tapegrad/program/progress.hpp"
#include "tapegrad/program/run_program.hpp"
#include "tapegrad/train/schedule.hpp"

namespace gpt {

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kProgram = "gpt";

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool is_leader(const Collective* collective) { return collective == nullptr || collective->rank() == 0; }

// ---- the data --------------------------------------------------------------------------------------

// A run's data: the text read from --data, its byte vocabulary, and the windows training and validation
// read. The trainer keeps references to the windows, so a Data stays where it was made.
struct Data {
  fs::path path;
  Corpus corpus;
  ByteVocabulary vocabulary;
  Windows train, validation;
  Windows curve;  // the curve's evaluations: evenly spaced validation windows
  std::string sentence;  // the attention pictures' line of validation text
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

// `source` names where the path came from in messages: "--data", or the checkpoint a resumed run read it from.
std::unique_ptr<Data> load_data(const fs::path& path, Index context, Index curve_windows, const std::string& source) {
  Corpus corpus = read_corpus(path, source);
  ByteVocabulary vocabulary = ByteVocabulary::of(corpus.train, corpus.validation);
  std::string sentence = attention_sentence(corpus.validation, context);
  // The streams become their ids where they are (the corpus keeps its counts): the text is held once.
  TokenBytes train = vocabulary.encode_in_place(std::move(corpus.train), source);
  TokenBytes validation = vocabulary.encode_in_place(std::move(corpus.validation), source);
  corpus.train = corpus.validation = {};
  const Index every = curve_every(validation_windows(static_cast<Index>(validation->size()), context), curve_windows);
  return std::make_unique<Data>(Data{
      .path = path,
      .corpus = std::move(corpus),
      .vocabulary = std::move(vocabulary),
      .train = Windows::training(source + ": the training text", std::move(train), context),
      .validation = Windows::validation(source + ": the validation text", validation, context),
      .curve = Windows::validation(source + ": the validation text", validation, context, every),
      .sentence = std::move(sentence),
  });
}

// The learnable model's memory (the larger of the two) within the examples' limit.
void check_memory(Gpt<float>::Config c, Index batch) {
  c.attention = AttentionMode::learnable;
  examples::check_lm_memory(Gpt<float>::decoder_config(c), batch, "--d-model, --d-ff, --layers, --context or --batch");
}

// ---- one model's training ------------------------------------------------------------------------------

using OptimizerFactory = std::function<std::unique_ptr<Optimizer<float>>(Gpt<float>&)>;

// One model's training: the model, its optimizer and the trainer, which keeps references to both, so the
// run owns them all.
struct LmRun {
  Gpt<float> model;
  std::unique_ptr<Optimizer<float>> optimizer;
  Trainer<SequenceBatch> trainer;

  LmRun(const Gpt<float>::Config& config, const OptimizerFactory& make_optimizer, const TrainOptions& options,
        const Data& data)
      : model(config), optimizer(make_optimizer(model)),
        trainer(model, *optimizer, data.train,
                [this](Tape<float>& tape, const SequenceBatch& batch) { return model.loss(tape, batch); }, options) {
    trainer.evaluate_on(data.curve);
  }
};

Index warmup_steps(const Options& o) { return std::min(o.warmup, o.steps); }

// AdamW, decaying the matrices only, with warm-up and cosine decay to min_lr at the last step.
OptimizerFactory new_optimizer(const Options& o) {
  return [&o](Gpt<float>& model) {
    auto adamw = std::make_unique<AdamW<float>>(
        model.parameters(), AdamOptions{.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .weight_decay = o.weight_decay},
        o.decay_on);
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

// What --resume needs besides the checkpoint's own records: where the data came from and how the curve
// sampled the validation windows.
Checkpoint checkpoint_of(const LmRun& run, const Data& data, Index curve_windows) {
  Checkpoint c = snapshot(run.trainer);
  c.metadata["program"] = std::string(kProgram);
  c.metadata["data"] = data.path.string();
  c.metadata["curve_windows"] = to_text(curve_windows);
  return c;
}

struct ModelResult {
  std::string title;      // the table's row: bigram, parameter-free, learnable
  std::string file_name;  // bigram, parameter_free, learnable
  Index parameters = 0;
  double validation = 0;  // nats per byte over every validation window
  double seconds = 0;     // training, with the curve's evaluations
  double chars_per_second = 0;  // bytes of training windows (steps x batch x context) a second
  std::vector<CurvePoint> curve = {};
  std::string samples = {};  // the prompt and what the model wrote after it
  std::vector<std::vector<std::vector<double>>> maps = {};  // [layer][head] on the attention sentence
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
ModelResult train_to_end(LmRun& run, const Data& data, const Options& o, Index curve_windows, RunFolder* folder,
                         Collective* collective, std::string_view sentence) {
  Gpt<float>& model = run.model;
  const std::string title(mode_title(model.config().attention)), name(mode_file_name(model.config().attention));
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
      folder->save_checkpoint(name, checkpoint_of(run, data, curve_windows), step, o.keep);
  };
  const auto start = std::chrono::steady_clock::now();
  examples::with_nan_hint("lower --lr, or clip gradients with --clip N", [&] { run.trainer.run(callbacks); });
  progress.finish();
  ModelResult r{.title = title, .file_name = name, .parameters = model.count_parameters()};
  r.seconds = seconds_since(start);
  r.chars_per_second =
      static_cast<double>((run.trainer.steps_done() - first_step) * options.batch * model.context()) / r.seconds;
  r.curve = run.trainer.curve();
  r.validation = value_of(run.trainer.evaluate(data.validation), "eval_loss");
  if (!leader) return r;  // the others' replicas are rank 0's: it samples, saves and reports
  model.eval();
  r.samples = sample_text(model, data.vocabulary, o, o.cache);
  if (!sentence.empty()) r.maps = attention_maps(model, sentence);

  const fs::path file = folder->save_model(name, checkpoint_of(run, data, curve_windows), model,
                                           model.config().attention == AttentionMode::learnable ? WeightLayout::pytorch
                                                                                                : WeightLayout::tapegrad);
  folder->write(fmt::format("samples_{}.txt", name), r.samples);
  // What --sample-from will do in a fresh process: the saved model must sample the same text.
  const auto reloaded = model_from_checkpoint<Gpt<float>>(read_checkpoint(file));
  reloaded->eval();
  r.reload_matches = sample_text(*reloaded, data.vocabulary, o, o.cache) == r.samples;
  fmt::print("  {:<14} validation {:.4f} nats/char after {} steps ({:.1f} s, {:.0f} chars/s); weights crc32 {:08x}; "
             "saved {}{}\n",
             title, r.validation, run.trainer.steps_done(), r.seconds, r.chars_per_second,
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
  const std::vector<std::string> labels = byte_labels(sentence);
  std::vector<std::string> heads;
  for (std::size_t h = 0; h < r.maps[layer].size(); ++h)
    heads.push_back(heatmap_svg({.title = fmt::format("{} attention, layer {}, head {}", r.title, layer, h),
                                 .row_labels = labels,
                                 .col_labels = labels,
                                 .values = r.maps[layer][h],
                                 .show_values = false}));
  return svg_row(heads);
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
      out += fmt::format("| {} | {} | {:.4f} | {:.1f} s | {} |\n", r.title, r.parameters, r.validation, r.seconds, rate(r));
    return out;
  }
  out += fmt::format("  {:<16} {:>10}  {:>22}  {:>13}  {:>16}\n", "model", "parameters", "validation (nats/char)",
                     "training time", "training chars/s");
  for (const auto& r : rows)
    out += fmt::format("  {:<16} {:>10}  {:>22.4f}  {:>11.1f} s  {:>16}\n", r.title, r.parameters, r.validation, r.seconds,
                       rate(r));
  return out;
}

std::string describe_data(const Data& d) {
  const Corpus& c = d.corpus;
  return fmt::format("{}: {} file{}, {} fortunes ({} empty dropped); training {} fortunes, {} bytes; validation {} "
                     "fortunes, {} bytes ({} windows of {}); {} byte symbols",
                     escaped(d.path), c.files.size(), c.files.size() == 1 ? "" : "s", c.fortunes, c.empty,
                     c.train_fortunes, d.train.ids().size(), c.validation_fortunes, d.validation.ids().size(), d.validation.size(),
                     d.validation.context() + 1, d.vocabulary.size());
}

std::string describe_training(const Options& o, const Data& d) {
  return fmt::format("AdamW lr {:g}, betas ({:g}, {:g}), weight decay {:g} on {}, warm-up {} steps then cosine to {:g}, "
                     "gradient norm clipped at {:g}; {} steps of {} windows of {} characters (seed {}); curve: {} "
                     "validation windows every {} steps",
                     o.lr, o.beta1, o.beta2, o.weight_decay,
                     o.decay_on == DecayOn::matrices ? "matrices only" : "all parameters",
                     warmup_steps(o), o.min_lr, o.clip, o.steps, o.batch, d.train.context(), o.train_seed, d.curve.size(),
                     o.eval_every);
}

std::string describe_model(const Gpt<float>::Config& c) {
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

std::string report(const Options& o, const Data& d, const Gpt<float>::Config& c, const std::vector<ModelResult>& rows,
                   const std::vector<ModelResult>& trained, std::string_view sentence, const std::vector<std::string>& pictures,
                   double total_seconds) {
  std::string out = fmt::format(
      "# A character GPT on the fortunes\n\n"
      "Data: {}.\n\nModel: {}.\n\nTraining: {}.\n\n"
      "## Validation loss\n\nMean cross-entropy over every byte the validation windows predict ({} bytes), in nats "
      "per character; time with the curve's evaluations.\n\n{}\n## Pictures\n\n",
      describe_data(d), describe_model(c), describe_training(o, d), d.validation.predicted(), table(rows, true));
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
  plan.inputs = {data.path};
  plan.last_step = steps;
  plan.checkpoints = o.checkpoint_every > 0;
  for (const AttentionMode mode : modes) {
    plan.models.emplace_back(mode_file_name(mode));
    for (Index layer = 0; layer < o.model.n_layers; ++layer)
      plan.pictures.push_back(fmt::format("attention_{}_layer{}.svg", mode_file_name(mode), layer));
  }
  return plan;
}

int run_comparison(const Options& o, Collective* collective) {
  const bool leader = is_leader(collective);
  const auto start = std::chrono::steady_clock::now();
  if (o.model.d_model % o.model.n_heads != 0)
    fail<ValueError>("--d-model {} is not divisible by --heads {}", o.model.d_model, o.model.n_heads);
  const std::unique_ptr<Data> data = load_data(o.data, o.model.context, o.curve_windows, "--data");
  Gpt<float>::Config config = o.model;
  config.vocabulary = data->vocabulary.hex();
  Gpt<float>::check_config(config);  // before the folder is taken
  check_memory(config, o.batch);  // evaluation goes in batches of the same size
  (void)data->vocabulary.encode(o.prompt, "--prompt");  // a prompt the models cannot read, before any training

  std::optional<RunFolder> folder;  // rank 0's, checked before any training
  if (leader) folder.emplace(o.out, plan_of(o, *data, modes_of(o.attention), false, o.steps));
  if (leader)
    fmt::print("gpt: a character GPT on running text (nanoGPT's character model)\ndata: {}\nmodel: {}\ntraining: {}\n\n",
               describe_data(*data), describe_model(config), describe_training(o, *data));
  std::fflush(stdout);

  const auto bigram_start = std::chrono::steady_clock::now();
  const Bigram bigram(data->train.ids(), data->vocabulary.size());
  ModelResult floor{.title = "bigram", .file_name = "bigram", .parameters = bigram.parameter_count(),
                    .validation = bigram.nll(data->validation.ids(), data->validation.predicted())};
  floor.seconds = seconds_since(bigram_start);
  BigramModel bigram_model(bigram);
  floor.samples = sample_text(bigram_model, data->vocabulary, o, false);
  if (leader) folder->write("samples_bigram.txt", floor.samples);

  const std::string& sentence = data->sentence;
  std::vector<ModelResult> trained;
  for (const AttentionMode mode : modes_of(o.attention)) {
    config.attention = mode;
    config.seed = o.train_seed;
    const TrainOptions options{.steps = o.steps, .batch = o.batch, .eval_every = o.eval_every, .eval_batch = o.batch,
                               .seed = o.train_seed, .clip = o.clip};
    LmRun run(config, new_optimizer(o), options, *data);
    trained.push_back(train_to_end(run, *data, o, o.curve_windows, leader ? &*folder : nullptr, collective, sentence));
  }
  if (!leader) return static_cast<int>(ExitCode::ok);  // rank 0 writes the table, pictures and report

  std::vector<ModelResult> rows = {floor};
  rows.insert(rows.end(), trained.begin(), trained.end());
  std::vector<std::string> pictures = {"curves.svg"};
  folder->write("curves.svg", curves_svg(trained, floor.validation, o.steps));
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
  const Gpt<float>::Config config = model_config_from<Gpt<float>>(checkpoint);
  Index curve_windows = 0;
  if (!from_text(checkpoint.metadata.at("curve_windows"), curve_windows))
    fail<FormatError>("--resume: '{}' records curve_windows '{}', which is not a number", escaped(fs::path(o.resume)),
                      escaped(checkpoint.metadata.at("curve_windows")));
  const std::unique_ptr<Data> data =
      load_data(checkpoint.metadata.at("data"), config.context, curve_windows,
                fmt::format("--resume: the data path that '{}' records", escaped(fs::path(o.resume))));
  if (data->vocabulary.hex() != config.vocabulary)
    fail<ValueError>("--resume: the data '{}' has other bytes than the model was trained on", escaped(data->path));
  (void)data->vocabulary.encode(o.prompt, "--prompt");
  const TrainerState trainer = read_trainer_state(checkpoint);
  TrainOptions options = trainer.options;
  const Index at = trainer.step;
  if (o.steps > 0) options.steps = o.steps;
  if (options.steps < at)
    fail<ValueError>("--steps {} is behind the checkpoint, which is at step {}; give more steps to train on", options.steps, at);

  std::optional<RunFolder> folder;
  if (leader) folder.emplace(o.out, plan_of(o, *data, {config.attention}, true, options.steps));
  const OptimizerState<float> optimizer = read_optimizer_state<float>(checkpoint);
  LmRun run(config, saved_optimizer(optimizer), options, *data);
  const LoadReport loaded = restore(checkpoint, run.trainer);  // strict: refuses other data, another optimizer
  if (leader)
    fmt::print("gpt: resumed {} at step {} of {} from {} ({})\ndata: {}\n", describe(config), at, options.steps,
               escaped(fs::path(o.resume)), loaded.str(), describe_data(*data));
  const ModelResult r = train_to_end(run, *data, o, curve_windows, leader ? &*folder : nullptr, collective, {});
  if (!leader) return static_cast<int>(ExitCode::ok);
  fmt::print("samples ({} characters after \"{}\", seed {}):\n", o.length, visible(o.prompt), o.seed);
  print_samples({r});
  return static_cast<int>(r.reload_matches ? ExitCode::ok : ExitCode::check_failed);
}

int sample_from(const std::string& file, const Options& o) {
  const auto model = model_from_checkpoint<Gpt<float>>(read_checkpoint(file));
  model->eval();
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
