// Format 1, as tapegrad 0.1 wrote it, read into today's structures. That release knew one model, the
// lesson's toy model, and one training loop, so its file had fixed sections for both: the model's
// configuration (mapped to a model record of kind "toy_model" with the lesson's field names), the
// training configuration (mapped to the trainer's options, the optimizer's lr and its schedule), and
// the loop's accuracy window (mapped to a metric window named "accuracy"). The layout is frozen: every
// table here is the format's, not the current code's.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <string_view>

#include "convert/legacy.hpp"

namespace tapegrad::convert::legacy {
namespace {

// Enum values as format 1 stored them (int32 indices) and the names they have now.
constexpr std::array<std::string_view, 2> kFeatures = {"onehot", "learned"};
constexpr std::array<std::string_view, 4> kPositions = {"none", "onehot", "learned", "sinusoidal"};
constexpr std::array<std::string_view, 2> kAttention = {"parameter_free", "learnable"};
constexpr std::array<std::string_view, 3> kScale = {"inv_sqrt_d_head", "none", "inv_d_head"};
constexpr std::array<std::string_view, 2> kOptimizer = {"sgd", "adam"};
constexpr Index kEvalBatch = 256;  // 0.1's evaluation batch, a constant then

template <std::size_t N>
std::string load_name(InArchive& ar, const std::array<std::string_view, N>& names, std::string_view what) {
  std::int32_t v = 0;
  ar(v);
  if (v < 0 || v >= static_cast<std::int32_t>(N))
    fail<FormatError>("{} has the value {}, which is not one of the {} known", what, v, N);
  return std::string(names[static_cast<std::size_t>(v)]);
}

std::string text(std::int64_t v) { return to_text(v); }

ModelRecord load_model(InArchive& ar) {
  ModelRecord m{"toy_model", {}};
  auto add = [&](const char* name, std::string value) { m.config.push_back({name, std::move(value)}); };
  add("vocab", text(load_i64(ar)));
  add("labels", text(load_i64(ar)));
  add("max_len", text(load_i64(ar)));
  add("features", load_name(ar, kFeatures, "the feature kind"));
  add("d_embed", text(load_i64(ar)));
  add("positions", load_name(ar, kPositions, "the position encoding"));
  add("attention", load_name(ar, kAttention, "the attention mode"));
  add("heads", text(load_i64(ar)));
  add("d_head", text(load_i64(ar)));
  add("scale", load_name(ar, kScale, "the attention scale"));
  add("output_projection", to_text(load_bool(ar, "the output-projection flag")));
  add("residual", to_text(load_bool(ar, "the residual flag")));
  std::uint64_t seed = 0;
  ar(seed);
  add("seed", to_text(seed));
  return m;
}

// 0.1's TrainConfig: the trainer's options, and the lr and schedule its loop built from it.
struct TrainConfig1 {
  TrainOptions options;
  std::string optimizer;
  double lr = 0;
  ScheduleRecord schedule;
};

TrainConfig1 load_train_config(InArchive& ar) {
  TrainConfig1 c;
  c.options.steps = load_i64(ar);
  c.options.batch = load_i64(ar);
  c.optimizer = load_name(ar, kOptimizer, "the optimizer kind");
  c.lr = load_double(ar);
  (void)load_double(ar);  // momentum: also among the optimizer's hyperparameters, which are read from there
  c.options.clip = load_double(ar);
  const bool cosine = load_bool(ar, "the cosine-schedule flag");
  c.options.eval_every = load_i64(ar);
  ar(c.options.seed);
  c.options.anomaly = load_bool(ar, "the anomaly flag");
  c.options.eval_batch = kEvalBatch;
  // 0.1: cosine decay to 0 after a linear warm-up of 5% of the steps (at least one); constant otherwise.
  if (cosine && c.options.steps > 0)
    c.schedule = {"cosine", to_settings(CosineOptions{.warmup_steps = std::max<std::int64_t>(1, c.options.steps / 20),
                                                      .total_steps = c.options.steps})};
  return c;
}

// 0.1's hyperparameters: a size tag, then (name, number) pairs, no name twice.
std::map<std::string, double> load_hyperparameters(InArchive& ar) {
  std::map<std::string, double> out;
  const std::size_t n = read_size(ar, kMinStringBytes + sizeof(double), "the hyperparameters");
  for (std::size_t i = 0; i < n; ++i) {
    std::string name;
    load(ar, name);
    const double value = load_double(ar);
    if (!out.emplace(name, value).second)
      fail<FormatError>("the hyperparameters has the key '{}' twice", escaped(name));
  }
  return out;
}

// 0.1 saved the hyperparameters as numbers, lr being the rate of the last step (the schedule had set
// it); today's are the options' fields as text, lr being the optimizer's own.
Settings hyperparameters(const std::string& kind, const std::map<std::string, double>& h, double lr) {
  auto get = [&](const char* name) {
    const auto it = h.find(name);
    if (it == h.end()) fail<FormatError>("the {} hyperparameters lack '{}'", kind, name);
    return it->second;
  };
  // As a state saves them (the library's rule, saved_settings): 0.1's adam decayed every parameter, the default.
  if (kind == "sgd")
    return SGD<float>::saved_settings(SgdOptions{.lr = lr,
                                                 .momentum = get("momentum"),
                                                 .dampening = get("dampening"),
                                                 .weight_decay = get("weight_decay"),
                                                 .nesterov = get("nesterov") != 0});
  return Adam<float>::saved_settings(AdamOptions{
      .lr = lr, .beta1 = get("beta1"), .beta2 = get("beta2"), .eps = get("eps"), .weight_decay = get("weight_decay")});
}

struct CurvePoint1 {
  std::int64_t step = 0;
  double train_loss = 0, train_accuracy = 0, eval_loss = 0, eval_accuracy = 0, lr = 0, seconds = 0;
};

}  // namespace

template <>
constexpr std::size_t min_record_bytes<CurvePoint1>() {
  return 7 * 8;
}

namespace {

void load(InArchive& ar, CurvePoint1& p) {
  p.step = load_i64(ar);
  ar(p.train_loss, p.train_accuracy, p.eval_loss, p.eval_accuracy, p.lr, p.seconds);
}

void load_trainer(InArchive& ar, TrainerState& s, const TrainOptions& options) {
  s.options = options;
  s.step = load_i64(ar);
  load_data_order(ar, s.data_order);
  s.rng = TrainerBase::initial_rng_state(options.seed);  // 0.1 had no training stream: nothing drew from it
  s.window_loss = load_double(ar);
  const std::int64_t correct = load_i64(ar), labelled = load_i64(ar);
  s.window_steps = load_i64(ar);
  s.window_metrics = {{"accuracy", {static_cast<double>(correct), static_cast<double>(labelled)}}};
  std::vector<CurvePoint1> curve;
  load_records(ar, curve, "the curve");
  // 0.1 wrote NaN for the evaluation values of a run without evaluation data; today's curve has none.
  const bool evaluated =
      std::any_of(curve.begin(), curve.end(), [](const CurvePoint1& p) { return !std::isnan(p.eval_loss); });
  for (const auto& p : curve) {
    CurvePoint point{p.step, p.lr, p.seconds, {{"train_loss", p.train_loss}, {"train_accuracy", p.train_accuracy}}};
    if (evaluated) {
      point.values.push_back({"eval_loss", p.eval_loss});
      point.values.push_back({"eval_accuracy", p.eval_accuracy});
    }
    s.curve.push_back(std::move(point));
  }
}

}  // namespace

void load_format1(InArchive& ar, File& c) {
  load(ar, c.tapegrad_version);
  c.model = load_model(ar);
  load_records(ar, c.parameters, "the parameter list");
  load_pairs(ar, c.metadata, "the metadata");
  if (!load_bool(ar, "the has-training flag")) return;
  TrainConfig1 config = load_train_config(ar);
  TrainingRecord t;
  load(ar, t.optimizer.kind);
  if (t.optimizer.kind != config.optimizer)
    fail<FormatError>("the optimizer is '{}' in the training configuration but '{}' in its state", config.optimizer,
                      t.optimizer.kind);
  t.optimizer.hyperparameters = hyperparameters(t.optimizer.kind, load_hyperparameters(ar), config.lr);
  t.optimizer.schedule = config.schedule;
  t.optimizer.step = load_i64(ar);
  load_records(ar, t.optimizer.buffers, "the optimizer buffers");
  load_trainer(ar, t.trainer, config.options);
  // Format 1 recorded its data as metadata ("data.fingerprint": the examples' ids, examples_crc32 in
  // hexadecimal), not as this release's fingerprint, and not its evaluation data at all: the metadata
  // stays for the program that knows the data to compare (the trainer CLI does), and restoring a Trainer
  // does not compare its fingerprints with a format-1 file's.
  if (const auto fingerprint = c.metadata.find("data.fingerprint"); fingerprint != c.metadata.end()) {
    std::uint32_t v = 0;
    const auto [end, ec] =
        std::from_chars(fingerprint->second.data(), fingerprint->second.data() + fingerprint->second.size(), v, 16);
    if (ec != std::errc() || end != fingerprint->second.data() + fingerprint->second.size())
      fail<FormatError>("the data fingerprint '{}' is not a hexadecimal number", escaped(fingerprint->second));
  }
  c.training = std::move(t);
}

}  // namespace tapegrad::convert::legacy
