#include "char_lm/compare.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>

#include <fmt/format.h>

#include "command_line.hpp"
#include "lm_programs.hpp"
#include "memory_limit.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/train/program/output_folder.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"
#include "tapegrad/train/checkpoint/safetensors.hpp"
#include "tapegrad/train/plot/plot.hpp"
#include "tapegrad/train/program/progress.hpp"
#include "tapegrad/train/program/run_program.hpp"
#include "tapegrad/train/schedule.hpp"
#include "tapegrad/train/program/checkpoint_dir.hpp"

namespace char_lm {

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

constexpr AttentionMode kModes[] = {AttentionMode::parameter_free, AttentionMode::learnable};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

constexpr Index kEvalBatch = 256;        // words per evaluation batch
// The learnable model's memory (the larger of the two) within the examples' limit.
void check_memory(CharLmConfig c, Index batch) {
  c.attention = AttentionMode::learnable;
  examples::check_lm_memory(CharLmConfig::decoder(c), batch, "--d-model, --d-ff, --layers or --batch");
}

Index eval_every(const Options& o) { return o.eval_every > 0 ? o.eval_every : std::max<Index>(1, o.steps / 10); }
Index warmup_steps(const Options& o) { return std::min<Index>(100, o.steps / 10); }

// One model's training, as examples/first_steps/3_custom_model.cpp's Run: AdamW with warm-up and cosine
// decay to a tenth of the rate, the validation words evaluated every eval_every steps. The trainer keeps
// references, so the run owns them all.
struct LmRun {
  CharLm<float> model;
  AdamW<float> optimizer;
  Trainer<SequenceBatch> trainer;

  LmRun(const CharLmConfig& config, const WordSource& train, const WordSource& validation, const Options& o)
      : model(config), optimizer(model.parameters(), {.lr = o.lr, .weight_decay = o.weight_decay}),
        trainer(model, optimizer, train, [this](Tape<float>& tape, const SequenceBatch& batch) { return model.loss(tape, batch); },
                {.steps = o.steps, .batch = o.batch, .eval_every = eval_every(o), .eval_batch = kEvalBatch, .seed = config.seed}) {
    optimizer.set_schedule(
        CosineWithWarmup({.warmup_steps = warmup_steps(o), .total_steps = std::max<Index>(1, o.steps), .min_lr = o.lr / 10}));
    trainer.evaluate_on(validation);
  }
};

struct RunResult {
  AttentionMode mode = AttentionMode::learnable;
  int seed = 0;
  Index parameters = 0;
  double validation = 0;  // NLL per symbol on the validation words, at the end
  double seconds = 0;     // training, with its evaluations
  std::vector<CurvePoint> curve = {};
  std::vector<std::string> samples = {};
  std::vector<std::vector<Tensor>> maps = {};  // [layer][head] on the validation word (seed 0)
  bool reload_matches = false;  // the saved file, read back, samples the same words without the cache
};

struct MeanSd {
  double mean = 0, sd = 0;
};
MeanSd mean_sd(const std::vector<double>& v) {
  MeanSd m;
  for (double x : v) m.mean += x / static_cast<double>(v.size());
  for (double x : v) m.sd += (x - m.mean) * (x - m.mean);
  m.sd = v.size() > 1 ? std::sqrt(m.sd / static_cast<double>(v.size() - 1)) : 0;
  return m;
}

std::string checkpoint_name(AttentionMode mode, int seed) { return fmt::format("{}_seed{}.tgck", to_string(mode), seed); }
std::string safetensors_name(AttentionMode mode, int seed) {
  return fmt::format("{}_seed{}.safetensors", to_string(mode), seed);
}
std::string samples_name(AttentionMode mode, int seed) { return fmt::format("samples_{}_seed{}.txt", to_string(mode), seed); }
std::string attention_name(AttentionMode mode, std::size_t layer) {
  return fmt::format("attention_{}_layer{}.svg", to_string(mode), layer);
}

std::string lines(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += w + "\n";
  return out;
}

// The first validation word of 6 to 10 letters (else the first): the one whose attention is drawn.
std::string attention_word(const std::vector<std::string>& validation) {
  for (const auto& w : validation)
    if (w.size() >= 6 && w.size() <= 10) return w;
  return validation.front();
}

// Rank 0 of a data-parallel run, or the one process: what prints and writes files.
bool is_leader(const Collective* collective) { return collective == nullptr || collective->rank() == 0; }

RunResult train_one(const Options& o, AttentionMode mode, int seed, Index max_len, const WordSource& train,
                    const WordSource& validation, const std::string& shown_word, OutputFolder* out,
                    const fs::path& data_file, Collective* collective) {
  CharLmConfig config = o.model;
  config.context = max_len;
  config.attention = mode;
  config.seed = static_cast<std::uint64_t>(seed);
  LmRun run(config, train, validation, o);
  run.trainer.set_collective(collective);  // every rank trains this model together
  const bool terminal = isatty(fileno(stderr)) != 0;
  Progress progress(stderr, terminal && is_leader(collective) ? Progress::Style::bar : Progress::Style::quiet, o.steps,
                    fmt::format("{} seed {}", examples::attention_title(mode), seed));
  const auto start = std::chrono::steady_clock::now();
  examples::with_nan_hint("lower --lr", [&] { run.trainer.run(progress.callbacks()); });
  progress.finish();
  RunResult r{.mode = mode, .seed = seed, .parameters = run.model.count_parameters()};
  r.seconds = seconds_since(start);
  r.curve = run.trainer.curve();
  r.validation = value_of(r.curve.back().values, "eval_loss");
  if (!is_leader(collective)) return r;  // the others' replicas are rank 0's: it samples, saves and reports
  r.samples = sample_words(run.model, max_len, o.count, o.sample_seed);
  if (seed == 0) r.maps = attention_maps(run.model, shown_word);

  Checkpoint checkpoint = snapshot(run.trainer);
  checkpoint.metadata["program"] = "char_lm";
  checkpoint.metadata["data"] = data_file.string();
  checkpoint.metadata["data_seed"] = fmt::format("{}", o.data_seed);
  checkpoint.metadata["validation_nll"] = fmt::format("{:.4f}", r.validation);
  const std::string file = checkpoint_name(mode, seed);
  save_checkpoint(*out, file, checkpoint);
  // Its weights for PyTorch (docs/safetensors.md): the learnable model in its twin's names and layouts; the
  // parameter-free one, which no PyTorch module computes, in tapegrad's.
  const std::vector<std::byte> exported = encode_safetensors(
      run.model, {.layout = mode == AttentionMode::learnable ? WeightLayout::pytorch : WeightLayout::tapegrad});
  out->write(safetensors_name(mode, seed), {reinterpret_cast<const char*>(exported.data()), exported.size()},
             Durability::durable);
  out->write(samples_name(mode, seed), lines(r.samples));
  // What --sample-from will do in a fresh process: the saved model must sample the same words, and so must
  // its forward over each whole window (no cache) the cached forward sampled them with.
  const auto reloaded = model_from_checkpoint<CharLm<float>>(read_checkpoint(out->path(file)));
  r.reload_matches = sample_words(*reloaded, max_len, o.count, o.sample_seed, false) == r.samples;
  fmt::print("  {:<14} seed {}: validation {:.4f} nats/char after {} steps ({:.1f} s); saved {}{}\n", examples::attention_title(mode), seed,
             r.validation, o.steps, r.seconds, file,
             r.reload_matches ? "" : " -- RELOADED, IT SAMPLES OTHER WORDS");
  std::fflush(stdout);
  return r;
}

struct Row {
  std::string model;
  Index parameters = 0;
  std::string nll;
  double seconds = 0;
};

std::string table(const std::vector<Row>& rows, bool markdown) {
  std::string out;
  if (markdown) {
    out += "| model | parameters | validation NLL (nats/char) | training time |\n|---|---:|---|---:|\n";
    for (const auto& r : rows) out += fmt::format("| {} | {} | {} | {:.1f} s |\n", r.model, r.parameters, r.nll, r.seconds);
    return out;
  }
  out += fmt::format("  {:<16} {:>10}  {:<26} {:>13}\n", "model", "parameters", "validation NLL (nats/char)", "training time");
  for (const auto& r : rows) out += fmt::format("  {:<16} {:>10}  {:<26} {:>11.1f} s\n", r.model, r.parameters, r.nll, r.seconds);
  return out;
}

std::string nll_cell(const std::vector<RunResult>& runs) {
  std::vector<double> v;
  for (const auto& r : runs) v.push_back(r.validation);
  const MeanSd m = mean_sd(v);
  return v.size() > 1 ? fmt::format("{:.3f} ± {:.3f}", m.mean, m.sd) : fmt::format("{:.3f} (1 seed)", m.mean);
}

// Train and validation NLL against the step, both attention models (seed 0), the bigram as a floor.
std::string curves_svg(const std::vector<RunResult>& seed0, double bigram, Index steps) {
  LineChart chart{.title = "next-character NLL (seed 0)", .x_label = "step", .y_label = "nats per character"};
  for (const RunResult& r : seed0)
    for (const char* which : {"train_loss", "eval_loss"}) {
      Series s{.name = fmt::format("{} {}", examples::attention_title(r.mode), which[0] == 't' ? "train" : "validation")};
      for (const CurvePoint& p : r.curve) {
        s.x.push_back(static_cast<double>(p.step));
        s.y.push_back(value_of(p.values, which));
      }
      chart.series.push_back(std::move(s));
    }
  chart.series.push_back({.name = "bigram validation", .x = {0, static_cast<double>(steps)}, .y = {bigram, bigram}});
  return line_chart_svg(chart);
}

// One layer's heads side by side: rows are queries, columns keys, on ". w o r d".
std::string attention_svg(const RunResult& r, std::size_t layer, const std::string& word) {
  std::vector<std::string> labels = {"."};
  for (char c : word) labels.emplace_back(1, c);
  return examples::attention_layer_svg(
      r.maps[layer], labels, fmt::format("{} attention, layer {}: '{}'", examples::attention_title(r.mode), layer, word),
      labels.size() <= 12);
}

std::string samples_block(const std::vector<std::pair<std::string, std::vector<std::string>>>& samples, bool markdown) {
  std::string out;
  for (const auto& [name, sampled] : samples) {
    std::vector<std::string> words = sampled;
    for (auto& w : words)
      if (w.empty()) w = "(empty)";  // the model ended the word at once
    if (markdown) {
      out += fmt::format("- **{}**: {}\n", name, fmt::join(words, ", "));
      continue;
    }
    for (std::size_t i = 0; i < words.size(); i += 10) {
      const auto end = words.begin() + static_cast<std::ptrdiff_t>(std::min(words.size(), i + 10));
      out += fmt::format("  {:<16} {}\n", i == 0 ? name + ":" : "", fmt::join(words.begin() + static_cast<std::ptrdiff_t>(i), end, " "));
    }
  }
  return out;
}

}  // namespace

int run_comparison(const Options& o, Collective* collective) {
  const bool leader = is_leader(collective);
  const auto start = std::chrono::steady_clock::now();
  if (o.model.d_model % o.model.n_heads != 0)
    fail<ValueError>("--d-model {} is not divisible by --heads {}", o.model.d_model, o.model.n_heads);
  const fs::path data_file(o.data);
  const WordList list = read_words(data_file, "--data");
  const Split split = split_words(list.words, o.data_seed);
  const Index max_len = std::max(longest_sequence(split.train), longest_sequence(split.validation));
  CharLmConfig shape = o.model;
  shape.context = max_len;
  CharLm<float>::check_config(shape);  // before the folder is taken
  check_memory(shape, std::max<Index>(o.batch, kEvalBatch));

  // The run's folder, rank 0's, proven writable before any training; only an earlier char_lm run's files
  // are replaced (with --overwrite), never the data or anyone else's.
  std::optional<OutputFolder> out;
  if (leader) {
    out.emplace(o.out, OutputFolderOptions{.program = "char_lm", .overwrite = o.overwrite, .inputs = {data_file}});
    std::vector<std::string> names = {"report.md", "curves.svg", "samples_bigram.txt"};
    for (AttentionMode mode : kModes) {
      for (int seed = 0; seed < o.seeds; ++seed) {
        names.push_back(checkpoint_name(mode, seed));
        names.push_back(safetensors_name(mode, seed));
        names.push_back(samples_name(mode, seed));
      }
      for (Index layer = 0; layer < o.model.n_layers; ++layer) names.push_back(attention_name(mode, static_cast<std::size_t>(layer)));
    }
    out->plan(names);
  }

  const WordSource train("words (train)", split.train), validation("words (validation)", split.validation);
  const std::string shown_word = attention_word(split.validation);
  if (leader) fmt::print("char_lm: next-character models of English words\n"
             "data: {}: {} lines, {} distinct words of a-z kept ({} lines not a-z, {} longer than {} letters, {} "
             "duplicates dropped)\n"
             "split (seed {}): {} training words, {} validation words ({} symbols to predict: letters and ends)\n"
             "model: embedding {} x {} + learned positions ({}) -> {} causal pre-norm block{} (width {}, {} heads, MLP {}, "
             "GELU, LayerNorm) -> LayerNorm -> {} head\n"
             "training: AdamW lr {:g} (warm-up {} steps, cosine to {:g}), weight decay {:g}, {} steps of {} words, "
             "dropout {:g}; seeds 0..{}; validation every {} steps\n\n",
             escaped(data_file), list.lines, list.words.size(), list.dropped, list.too_long, kMaxWordLetters, list.duplicates,
             o.data_seed, split.train.size(), split.validation.size(), validation.positions(), kVocab, o.model.d_model,
             max_len, o.model.n_layers, o.model.n_layers == 1 ? "" : "s", o.model.d_model, o.model.n_heads,
             feed_forward_width(o.model.d_model, o.model.d_ff), o.model.tie ? "tied (h E^T)" : "untied", o.lr,
             warmup_steps(o), o.lr / 10, o.weight_decay, o.steps, o.batch, o.model.dropout, o.seeds - 1, eval_every(o));
  std::fflush(stdout);

  const auto bigram_start = std::chrono::steady_clock::now();
  const Bigram bigram(split.train);
  const double bigram_nll = bigram.nll(split.validation);
  const double bigram_seconds = seconds_since(bigram_start);
  examples::BigramModel<Bigram> bigram_model(bigram);
  const std::vector<std::string> bigram_samples = sample_words(bigram_model, max_len, o.count, o.sample_seed);
  if (leader) out->write("samples_bigram.txt", lines(bigram_samples));

  std::vector<std::vector<RunResult>> results(std::size(kModes));
  for (std::size_t m = 0; m < std::size(kModes); ++m)
    for (int seed = 0; seed < o.seeds; ++seed)
      results[m].push_back(
          train_one(o, kModes[m], seed, max_len, train, validation, shown_word, out ? &*out : nullptr, data_file, collective));
  if (!leader) return static_cast<int>(ExitCode::ok);  // rank 0 writes the tables, pictures and report

  std::vector<Row> rows = {{"bigram (add-one)", Bigram::count_parameters(), fmt::format("{:.3f}", bigram_nll), bigram_seconds}};
  for (const auto& runs : results) {
    double seconds = 0;
    for (const auto& r : runs) seconds += r.seconds;
    rows.push_back({std::string(examples::attention_title(runs[0].mode)), runs[0].parameters, nll_cell(runs), seconds});
  }
  std::vector<std::pair<std::string, std::vector<std::string>>> samples = {{"bigram", bigram_samples}};
  for (const auto& runs : results) samples.emplace_back(std::string(examples::attention_title(runs[0].mode)), runs[0].samples);

  // Pictures: the curves, and each attention model's maps on the validation word, one file per layer.
  std::vector<std::string> pictures = {"curves.svg"};
  out->write("curves.svg", curves_svg({results[0][0], results[1][0]}, bigram_nll, o.steps));
  for (const auto& runs : results)
    for (std::size_t layer = 0; layer < runs[0].maps.size(); ++layer) {
      pictures.push_back(attention_name(runs[0].mode, layer));
      out->write(pictures.back(), attention_svg(runs[0], layer, shown_word));
    }

  const std::string seeds_note =
      fmt::format("mean ± sd over {} seed{} (initial weights, data order); one split; time: all seeds, with evaluations",
                  o.seeds, o.seeds == 1 ? "" : "s");
  fmt::print("\n{}  ({})\n\nsamples (seed {}, {} words each, word i of every model drawn with the same random numbers; '~' marks a word cut at {} letters):\n{}\n", table(rows, false),
             seeds_note, o.sample_seed, o.count, max_len, samples_block(samples, false));

  std::string report = fmt::format(
      "# Next-character models of English words\n\n"
      "Data: `{}`, {} distinct lower-case words, split {} / {} (seed {}). Models: bigram counts with add-one "
      "smoothing; embedding {} x {} + learned positions -> {} causal pre-norm transformer blocks (width {}, {} "
      "heads, MLP {}) -> LayerNorm -> {} head, with parameter-free or learnable attention. AdamW lr {:g} (warm-up "
      "{}, cosine to {:g}), weight decay {:g}, {} steps of {} words.\n\n"
      "## Validation NLL\n\n{}\n{}.\n\n## Pictures\n\n",
      data_file.string(), list.words.size(), split.train.size(), split.validation.size(), o.data_seed, kVocab,
      o.model.d_model, o.model.n_layers, o.model.d_model, o.model.n_heads,
      feed_forward_width(o.model.d_model, o.model.d_ff), o.model.tie ? "tied" : "untied", o.lr, warmup_steps(o),
      o.lr / 10, o.weight_decay, o.steps, o.batch, table(rows, true), seeds_note);
  report += "- `curves.svg`: train and validation NLL against the step, both attention models (seed 0)\n";
  for (std::size_t i = 1; i < pictures.size(); ++i)
    report += fmt::format("- `{}`: attention on the validation word '{}', each head (seed 0)\n", pictures[i], shown_word);
  report += fmt::format("\n![curves](curves.svg)\n\n## Samples (seed {})\n\nAncestral sampling from each model's softmax, from '.' to the next '.'; word i of every model is drawn with the same random numbers (stream i of the seed), so the lists align.\n\n{}\nModels: ", o.sample_seed,
                        samples_block(samples, true));
  for (const auto& runs : results)
    for (const auto& r : runs) report += fmt::format("`{}` ", checkpoint_name(r.mode, r.seed));
  report += fmt::format("(sample again with `char_lm --sample-from FILE --seed {} --count {}`).\n\nTotal time {:.0f} s.\n",
                        o.sample_seed, o.count, seconds_since(start));
  out->write("report.md", report);
  bool reloads_match = true;
  for (const auto& runs : results)
    for (const auto& r : runs) reloads_match = reloads_match && r.reload_matches;
  fmt::print("wrote {}/: report.md, {}, {} checkpoints, samples_*.txt  ({:.0f} s in all)\n", escaped(out->folder()),
             fmt::join(pictures, ", "), o.seeds * 2, seconds_since(start));
  fmt::print("each saved model, read back into a fresh model, samples {}\n",
             reloads_match ? "the same words recomputing each window as the trained one did through its cache"
                           : "OTHER WORDS than the trained one (see above)");
  return static_cast<int>(reloads_match ? ExitCode::ok : ExitCode::check_failed);
}

// What --sample-from may ask of the machine: recomputing (--no-cache), each symbol of a word runs the model
// on the whole prefix, so a word cut at L letters costs about L^2 / 2 positions; count x (L + 1)(L + 2) / 2
// positions in all (a model that never ends a word reaches that). Through the cache a symbol is one
// position, but one forward each: the same bound serves both. The limit lets the default model (words up to 23 letters)
// sample the largest --count, and stops a 1024-letter model at about a hundred words (16 took 34 s);
// more is refused before it starts, naming --count, and long sampling shows its progress.
constexpr double kMaxSamplePositions = 4e7;

int sample_from(const fs::path& file, Index count, std::uint64_t seed, bool cache) {
  const auto model = model_from_checkpoint<CharLm<float>>(read_checkpoint(file));
  const Index max_len = model->config().context;
  const double positions = static_cast<double>(count) * static_cast<double>((max_len + 1) * (max_len + 2)) / 2;
  if (positions > kMaxSamplePositions)
    fail<LimitError>("--sample-from: {} words of up to {} letters could take {:.3g} positions of the model, more than the "
                     "limit of {:.3g}; ask for at most {} words with --count",
                     count, max_len, positions, kMaxSamplePositions,
                     static_cast<Index>(kMaxSamplePositions / (static_cast<double>((max_len + 1) * (max_len + 2)) / 2)));
  Progress progress(stderr, Progress::Style::automatic, count, "sampling");
  const std::vector<std::string> words =
      sample_words(*model, max_len, count, seed, cache, [&](Index done) { progress.on_step(done); });
  progress.finish();
  fmt::print("{}", lines(words));
  fmt::print(stderr, "char_lm: {} words from {} ({}; seed {}; {})\n", count, escaped(file), describe(model->config()), seed,
             cache ? "through the cache" : "recomputing each window");
  return 0;
}

}  // namespace char_lm
