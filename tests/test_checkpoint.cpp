// train/checkpoint: round trips, strict loading and its messages, resuming bit for bit (SGD with
// momentum, Adam; the lesson's toy model and a user's own MLP), files of format 1 (tapegrad 0.1) still
// loading and resuming to that release's results, hundreds of truncated and corrupted files, crashes in
// the middle of a save, keeping the last N.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "helpers.hpp"
#include "lesson/tasks.hpp"
#include "lesson/toy_run.hpp"
#include "old_checkpoints.hpp"
#include "reseal.hpp"
#include "user_models.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/file_io.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"
#include "tapegrad/train/program/checkpoint_dir.hpp"

using namespace tapegrad;
using namespace tapegrad::lesson;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  std::unique_ptr<Task> task = make_task("cycle");
  TaskSplit split = make_task_split(*task, 300, 10, 50, 3);

  ModelConfig config() const {
    return {.vocab = task->tokens().size(), .labels = task->labels().size(), .max_len = task->length(),
            .heads = 3, .d_head = 11, .output_projection = true};
  }
  // SGD with momentum at lr 0.1, or Adam at 0.01; 40 steps of batch 8, evaluated every 10.
  ToyRunConfig run(OptimizerKind kind, ModelConfig model) const {
    Settings h = {{"lr", kind == OptimizerKind::sgd ? "0.1" : "0.01"}};
    if (kind == OptimizerKind::sgd) h.push_back({"momentum", "0.9"});
    return {.model = model, .optimizer = kind, .hyperparameters = h,
            .training = {.steps = 40, .batch = 8, .eval_every = 10, .seed = 5}};
  }
  ToyRunConfig run(OptimizerKind kind) const { return run(kind, config()); }
};

using test::Mlp;

// A user's training run: the MLP, AdamW with a cosine schedule, accuracy.
struct MlpRun {
  Mlp model;
  AdamW<float> opt;
  Trainer<TensorBatch> trainer;
  MlpRun(const TensorSource& data, const Mlp::Config& c)
      : model(c), opt(model.parameters(), {.lr = 0.05, .weight_decay = 0.01}),
        trainer(model, opt, data, [this](Tape<float>& t, const TensorBatch& b) -> StepOutput<float> {
          Var<float> logits = model.forward(t.constant(b.features));
          return {cross_entropy(logits, b.labels), logits};
        }, {.steps = 60, .batch = 16, .eval_every = 20, .seed = 2}) {
    opt.set_schedule(CosineWithWarmup({.warmup_steps = 5, .total_steps = 60}));
    trainer.add_metric("accuracy", metrics::accuracy);
  }
};

// A user's own optimizer, written as examples/first_steps/5_user_optimizer.cpp writes Lion: Signum (signSGD
// with momentum, Bernstein et al. 2018), m = beta m + (1 - beta) g, p -= lr sign(m).
struct SignumOptions {
  double lr = 0.01;
  double beta = 0.9;
  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("lr", s.lr, "learning rate", at_least(0));
    field("beta", s.beta, "decay of the momentum", at_least_below(0, 1));
  }
  void check(std::string_view op) const { check_fields(*this, op); }
};

class Signum final : public OptimizerWith<Signum, float, SignumOptions> {
 public:
  explicit Signum(std::vector<Parameter<float>*> params, SignumOptions options = {})
      : OptimizerWith(std::move(params), options, "signum", {"momentum"}) {}
  static void update(const SignumOptions& o, std::int64_t, ParamSlice<float> s) {
    const auto beta = static_cast<float>(o.beta), rate = static_cast<float>(o.lr);
    auto m = s.buffer(0);
    m = beta * m + (1 - beta) * s.grad;
    s.value -= rate * m.sign();
  }
};

struct SignumRun {
  Mlp model;
  Signum opt;
  Trainer<TensorBatch> trainer;
  SignumRun(const TensorSource& data, const Mlp::Config& c)
      : model(c), opt(model.parameters(), {.lr = 0.02}),
        trainer(model, opt, data, [this](Tape<float>& t, const TensorBatch& b) {
          return cross_entropy(model.forward(t.constant(b.features)), b.labels);
        }, {.steps = 40, .batch = 16, .eval_every = 10, .seed = 3}) {}
};

fs::path scratch(const std::string& name) { return test::scratch_dir("checkpoint", name); }

std::vector<TensorT<float>> values_of(Module<float>& m) {
  std::vector<TensorT<float>> out;
  for (auto* p : m.parameters()) out.push_back(p->value);
  return out;
}

std::vector<std::byte> bytes_of(const Checkpoint& c) { return encode_checkpoint(c); }

// The value of a checkpoint's entry, to forge it.
template <class V>
V& entry(Checkpoint& c, std::string_view name) {
  StateEntry* e = c.find(name);
  REQUIRE_MESSAGE(e, "no entry ", name);
  V* v = std::get_if<V>(&e->value);
  REQUIRE_MESSAGE(v, name, " holds ", describe_value(e->value));
  return *v;
}

// CRC-32 (IEEE 802.3, reflected), bit by bit: independent of the zlib the library uses.
std::uint32_t crc32_reference(std::span<const std::byte> data) {
  std::uint32_t c = 0xffffffffu;
  for (std::byte b : data) {
    c ^= std::to_integer<std::uint32_t>(b);
    for (int j = 0; j < 8; ++j) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

void reseal(std::vector<std::byte>& file) { test::reseal(file, crc32_reference); }

}  // namespace

TEST_CASE("checkpoint: a trainer's checkpoint round-trips through bytes and a file, every field") {
  Fixture f;
  ToyRun run(f.run(OptimizerKind::adam), f.split.train, &f.split.validation);
  run.trainer().run();
  Checkpoint c = snapshot(run.trainer());
  c.metadata["task"] = "cycle";
  const Checkpoint back = decode_checkpoint(bytes_of(c), "memory");
  CHECK(back.model == c.model);
  CHECK(back.model.kind == "toy_model");
  CHECK(back.parts() == std::vector<std::string>{"model", "optimizer", "trainer"});
  REQUIRE(back.entries.size() == c.entries.size());
  for (std::size_t i = 0; i < c.entries.size(); ++i) {  // every entry, in its own kind and element type
    CAPTURE(c.entries[i].name);
    CHECK(back.entries[i].name == c.entries[i].name);
    CHECK(back.entries[i].value.index() == c.entries[i].value.index());
  }
  const auto* wq = std::get_if<Tensor>(&back.find("model.attn.wq")->value);
  REQUIRE(wq);  // a float model's weights stay float
  CHECK(*wq == run.model().parameter("attn.wq").value);
  const OptimizerState<float> o = read_optimizer_state<float>(back);
  CHECK(o.per_param == run.optimizer().state().per_param);  // exp_avg and exp_avg_sq of each parameter
  CHECK(o.per_param.size() == run.model().parameters().size());
  CHECK(o.kind == "adam");
  CHECK(o.hyperparameters == run.optimizer().hyperparameters());
  CHECK(o.schedule == ScheduleRecord{"constant", {}});
  const TrainerState t = read_trainer_state(back), was = run.trainer().state();
  CHECK(t.step == 40);
  CHECK(t.options.batch == 8);
  CHECK(t.data_fingerprint == SequenceSource(f.split.train).fingerprint());
  CHECK(t.eval_fingerprint == was.eval_fingerprint);
  CHECK(t.data_order.order == was.data_order.order);
  CHECK(t.data_order.rng == was.data_order.rng);
  CHECK(t.rng == was.rng);
  CHECK(t.window_metrics == was.window_metrics);
  CHECK(test::same_curve(t.curve, was.curve));
  REQUIRE(t.curve.size() == 5);
  CHECK(std::isnan(value_of(t.curve[0].values, "train_loss")));  // before the first step
  CHECK(back.metadata == c.metadata);

  const fs::path dir = scratch("roundtrip");
  save_checkpoint(dir / "run.tgck", c);
  CHECK(encode_checkpoint(read_checkpoint(dir / "run.tgck")) == bytes_of(c));
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);  // no temporary left behind
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: a weights-only load into a fresh model predicts identically") {
  Fixture f;
  ToyRun run(f.run(OptimizerKind::adam), f.split.train);
  run.trainer().run();
  const auto reloaded = model_from_checkpoint<ToyModel<float>>(decode_checkpoint(bytes_of(snapshot<float>(run.model())), "memory"));
  CHECK(dataset_logits(*reloaded, f.split.test) == dataset_logits(run.model(), f.split.test));
}

TEST_CASE("checkpoint: a configuration the file's weights do not account for is refused before anything is built") {
  Fixture f;
  ToyModel<float> model(f.config());
  Checkpoint forged = snapshot<float>(model);
  auto set = [&](const char* name, const char* value) {
    for (auto& x : forged.model.config)
      if (x.name == name) x.value = value;
  };
  set("vocab", "8388608");  // 2^23: would make a model of 8M x 8M one-hot features
  CHECK_THROWS_WITH_AS(model_from_checkpoint<ToyModel<float>>(forged),
                       doctest::Contains("implies 1174406248 parameter values but the file holds 4628"), FormatError);
  set("vocab", "25");
  set("output_projection", "false");  // 3 x 33x33 + 33x8 + 8 = 3539, not the 4628 held
  CHECK_THROWS_WITH_AS(model_from_checkpoint<ToyModel<float>>(forged),
                       doctest::Contains("implies 3539 parameter values but the file holds 4628"), FormatError);
}

TEST_CASE("checkpoint: a strict load names every missing, unexpected and mis-shaped parameter and loads nothing") {
  Fixture f;
  ToyModel<float> source(f.config());
  ModelConfig other = f.config();
  other.heads = 2;  // wq, wk, wv become 33x22, wo 22x33
  other.d_head = 11;
  other.output_projection = false;  // no wo
  ToyModel<float> target(other);
  const auto before = values_of(target);
  const Checkpoint c = snapshot<float>(source);
  CHECK_THROWS_WITH_AS(load_weights(c, target),
                       "load: the model has no 'attn.wo'; 'attn.wq' is f32 33x33 in the file but f32 33x22 in the model; "
                       "'attn.wk' is f32 33x33 in the file but f32 33x22 in the model; 'attn.wv' is f32 33x33 in the file "
                       "but f32 33x22 in the model; 'readout.weight' is f32 33x8 in the file but f32 22x8 in the model; "
                       "nothing was loaded",
                       FormatError);
  CHECK(values_of(target) == before);

  // Non-strict: the matching subset (here, only the readout bias) loads, the rest is reported.
  const LoadReport report = load_weights(c, target, {.strict = false});
  CHECK(report.loaded == std::vector<std::string>{"readout.bias"});
  CHECK(report.unexpected == std::vector<std::string>{"attn.wo"});
  CHECK(report.mismatched.size() == 4);
  CHECK(target.parameter("readout.bias").value == source.parameter("readout.bias").value);
  CHECK(target.parameter("attn.wq").value == before[0]);
  CHECK(report.str().find("loaded 1 parameters; not loaded: the model has no 'attn.wo'; 'attn.wq' is f32 33x33 in the file") == 0);

  // A double model refuses float weights by element type.
  ToyModel<double> doubles(f.config());
  CHECK_THROWS_WITH_AS(load_weights(c, doubles), doctest::Contains("'attn.wq' is f32 33x33 in the file but f64 33x33 in the model"),
                       FormatError);
}

TEST_CASE("checkpoint: a float model's file loads into its double twin, and back, only when asked, each conversion named") {
  Fixture f;
  ToyModel<float> trained(f.config());
  const Checkpoint c = snapshot<float>(trained);
  ModelConfig reseeded = f.config();
  reseeded.seed = 1;  // other weights until loaded
  ToyModel<double> twin(reseeded);
  const auto params = twin.parameters();
  const TensorD wq_before = params[0]->value;
  // Strict about the element type by default, naming the option; nothing changes.
  CHECK_THROWS_WITH_AS(load_weights(c, twin),
                       doctest::Contains("'attn.wq' is f32 33x33 in the file but f64 33x33 in the model; 'attn.wk' is "
                                         "f32 33x33"),
                       FormatError);
  CHECK_THROWS_WITH_AS(load_weights(c, twin),
                       doctest::Contains("; nothing was loaded (LoadOptions::convert_dtype converts the element type)"),
                       FormatError);
  CHECK(params[0]->value == wq_before);

  const LoadReport report = load_weights(c, twin, {.convert_dtype = true});
  CHECK(report.clean());
  CHECK(report.loaded.size() == params.size());
  REQUIRE(report.converted.size() == params.size());
  CHECK(report.converted[0] == "'attn.wq' from f32 to f64");
  CHECK(report.str().find("; converted 'attn.wq' from f32 to f64; converted 'attn.wk' from f32 to f64") != std::string::npos);
  const auto floats = trained.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) CHECK(params[i]->value == floats[i]->value.cast<double>());  // exact
  // Rebuilt from its record as the double twin, with the same option; without it, refused.
  CHECK(model_from_checkpoint<ToyModel<double>>(c, {.convert_dtype = true})->parameters()[0]->value == params[0]->value);
  CHECK_THROWS_AS(model_from_checkpoint<ToyModel<double>>(c), FormatError);

  // Back: the double twin's weights, nudged off float's grid, round to the nearest float.
  for (auto* p : params) p->value.array() += 1e-12;
  ToyModel<float> back(reseeded);
  const LoadReport rounded = load_weights(snapshot<double>(twin), back, {.convert_dtype = true});
  CHECK(rounded.converted[0] == "'attn.wq' from f64 to f32");
  const auto backs = back.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) CHECK(backs[i]->value == params[i]->value.cast<float>());
  // The conversion changes element types only: another shape is still a mismatch.
  ModelConfig narrower = f.config();
  narrower.output_projection = false;
  ToyModel<double> other(narrower);
  CHECK_THROWS_WITH_AS(load_weights(c, other, {.convert_dtype = true}), "load: the model has no 'attn.wo'; nothing was loaded",
                       FormatError);
}

TEST_CASE("checkpoint: wrong magic, a newer format, a checksum mismatch and truncation are named") {
  Fixture f;
  ToyModel<float> model(f.config());
  const std::vector<std::byte> good = bytes_of(snapshot<float>(model));
  auto resealed = good;
  reseal(resealed);
  CHECK(resealed == good);  // the header's CRC-32 is the standard one (zlib's agrees with the reference)
  auto with = [&](std::size_t at, std::uint8_t value) {
    auto b = good;
    b[at] = std::byte{value};
    return b;
  };
  CHECK_THROWS_WITH_AS(decode_checkpoint(with(0, 0x7f), "x.tgck"),
                       "load 'x.tgck': not a tapegrad checkpoint (it starts with 7f 47 43 4b 50 54 0d 0a, a checkpoint "
                       "with 54 47 43 4b 50 54 0d 0a)",
                       FormatError);
  // A file in a deep folder is named whole (up to PATH_MAX), so the message keeps the file's name.
  const std::string deep = "/home/" + std::string(300, 'd') + "/x.tgck";
  CHECK_THROWS_WITH_AS(decode_checkpoint(with(0, 0x7f), deep), doctest::Contains(("load '" + deep + "': not a tapegrad").c_str()),
                       FormatError);
  CHECK_THROWS_WITH_AS(decode_checkpoint(with(8, 7), "x.tgck"),
                       "load 'x.tgck': format version 7 is newer than this tapegrad reads (3); update tapegrad", FormatError);
  auto flipped = good;
  flipped[good.size() / 2] ^= std::byte{0x10};
  CHECK_THROWS_WITH_AS(decode_checkpoint(flipped, "x.tgck"), doctest::Contains("load 'x.tgck': checksum mismatch (the header says"),
                       FormatError);
  const std::span<const std::byte> half(good.data(), good.size() / 2);
  CHECK_THROWS_WITH_AS(decode_checkpoint(half, "x.tgck"),
                       fmt::format("load 'x.tgck': truncated: the header promises {} payload bytes but only {} follow",
                                   good.size() - 28, good.size() / 2 - 28)
                           .c_str(),
                       FormatError);
  CHECK_THROWS_WITH_AS(decode_checkpoint(std::span<const std::byte>(), "x.tgck"), "load 'x.tgck': the file is empty",
                       FormatError);
  CHECK_THROWS_WITH_AS(decode_checkpoint(std::span<const std::byte>(good.data(), 5), "x.tgck"),
                       "load 'x.tgck': truncated: 5 bytes, not even the 28-byte header", FormatError);
  CHECK_THROWS_WITH_AS(read_checkpoint("/nonexistent/x.tgck"), "load: cannot open '/nonexistent/x.tgck': No such file or directory",
                       FileError);
  // Not a regular file: refused before a byte is read (/dev/zero would never end), as is a file over the limit.
  CHECK_THROWS_WITH_AS(read_checkpoint("/dev/zero"), "load: '/dev/zero' is not a regular file (a character device)", FileError);
  CHECK_THROWS_WITH_AS(read_checkpoint("/tmp"), "load: '/tmp' is not a regular file (a folder)", FileError);
  const fs::path big = scratch("limit") / "big.tgck";
  save_checkpoint(big, snapshot<float>(model));
  CHECK_THROWS_WITH_AS(read_checkpoint(big, 1000), doctest::Contains("more than the limit of 1 KB"),
                       LimitError);
}

TEST_CASE("checkpoint: hundreds of truncated and corrupted files all fail cleanly and leave the model untouched") {
  Fixture f;
  ToyRun trained(f.run(OptimizerKind::sgd), f.split.train);
  for (int i = 0; i < 5; ++i) trained.trainer().step();
  const std::vector<std::byte> good = bytes_of(snapshot(trained.trainer()));
  ToyModel<float> model(f.config());
  const auto before = values_of(model);
  Rng rng(17);
  int cases = 0;
  auto expect_refused = [&](const std::vector<std::byte>& bytes) {
    ++cases;
    try {
      load_weights(decode_checkpoint(bytes, "bad.tgck"), model);
      FAIL("a damaged checkpoint loaded: ", bytes.size(), " bytes");
    } catch (const FormatError&) {
    }
    CHECK(values_of(model) == before);
  };
  // Truncated at every one of the first 64 offsets and at 300 more spread over the file.
  for (std::size_t n = 0; n < 64; ++n) expect_refused({good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)});
  for (int k = 1; k <= 300; ++k) {
    const auto n = static_cast<std::ptrdiff_t>(good.size() * static_cast<std::size_t>(k) / 301);
    expect_refused({good.begin(), good.begin() + n});
  }
  // One, two or eight random bytes flipped anywhere: the header checks or the checksum catch every one.
  for (int k = 0; k < 300; ++k) {
    auto bad = good;
    const int flips = k % 3 == 0 ? 1 : k % 3 == 1 ? 2 : 8;
    for (int j = 0; j < flips; ++j) bad[rng.below(bad.size())] ^= std::byte{static_cast<unsigned char>(1 + rng.below(255))};
    if (bad != good) expect_refused(bad);
  }
  CHECK(cases >= 650);
}

namespace {
// Where `text` starts in `bytes` (a name in a payload, as cereal writes it after its size).
std::size_t offset_of(const std::vector<std::byte>& bytes, std::string_view text) {
  const auto* begin = reinterpret_cast<const char*>(bytes.data());
  const std::string_view all(begin, bytes.size());
  const std::size_t at = all.find(text);
  REQUIRE(at != std::string_view::npos);
  return at;
}
}  // namespace

TEST_CASE("checkpoint: what the fuzzer found stays fixed: an empty file, a byte that is no boolean or no kind") {
  CHECK_THROWS_WITH_AS(decode_checkpoint(std::vector<std::byte>{}, "x.tgck"), "load 'x.tgck': the file is empty", FormatError);
  // In a weights-only file of format 1 the last payload byte is the has-training flag; 48 is no bool
  // (reading it into one was undefined behaviour, which UBSan reported). The converter reads format 1 now.
  const std::string v1 = test::old_file_bytes(TAPEGRAD_TEST_DATA "/v1/cycle_learned_weights.tgck");
  std::vector<std::byte> bad(reinterpret_cast<const std::byte*>(v1.data()), reinterpret_cast<const std::byte*>(v1.data()) + v1.size());
  REQUIRE(bad.back() == std::byte{0});
  bad.back() = std::byte{48};
  reseal(bad);
  CHECK_THROWS_WITH_AS(convert::convert_checkpoint(bad, "x.tgck"),
                       "convert 'x.tgck': the has-training flag has the byte 48, not a boolean (0 or 1)", FormatError);
  // Format 3: an entry's kind is one of five bytes; any other is refused by name, before its value is read.
  Index step = 5;
  auto forged = bytes_of(snapshot({{"step", step}}));
  const std::size_t kind = offset_of(forged, "step") + 4;
  REQUIRE(forged[kind] == std::byte{2});  // ints
  forged[kind] = std::byte{48};
  reseal(forged);
  CHECK_THROWS_WITH_AS(decode_checkpoint(forged, "x.tgck"),
                       "load 'x.tgck': corrupt payload: entry 'step' has the kind 48; 0 to 4 (f32, f64, ints, numbers, "
                       "texts) are known",
                       FormatError);
}

TEST_CASE("checkpoint: a metadata key given twice is refused (a map keeps one of them, and readers would differ)") {
  Index step = 5;
  Checkpoint c = snapshot({{"step", step}});
  c.metadata = {{"key_a", "first"}, {"key_b", "second"}};
  std::vector<std::byte> bytes = encode_checkpoint(c);
  bytes[offset_of(bytes, "key_b") + 4] = std::byte{'a'};  // "key_b" becomes a second "key_a"
  reseal(bytes);
  CHECK_THROWS_WITH_AS(decode_checkpoint(bytes, "x.tgck"), "load 'x.tgck': corrupt payload: the metadata has the key 'key_a' twice",
                       FormatError);
}

TEST_CASE("checkpoint: a shape whose element count overflows is refused before anything multiplies it") {
  // Three dimensions of 2^30: each plausible alone, their product (2^90) no integer holds. Computing it
  // was undefined behaviour that a forged file could reach.
  Checkpoint c;
  c.entries.push_back({"model.huge", Tensor(Shape::batched(1, 1, 1))});
  std::vector<std::byte> bytes = encode_checkpoint(c);
  const std::size_t shape = offset_of(bytes, "model.huge") + 10 + 1;  // after the name and the kind
  for (std::size_t i = 0; i < 3; ++i) {  // batch, rows, cols: 1, little-endian, after the rank's 4 bytes; 2^30 now
    REQUIRE(bytes[shape + 4 + 8 * i] == std::byte{1});
    bytes[shape + 4 + 8 * i] = std::byte{0};
    bytes[shape + 4 + 8 * i + 3] = std::byte{0x40};
  }
  reseal(bytes);
  CHECK_THROWS_WITH_AS(decode_checkpoint(bytes, "forged.tgck"),
                       "load 'forged.tgck': corrupt payload: a tensor has an invalid shape (rank 3, 1073741824 x "
                       "1073741824 x 1073741824)",
                       FormatError);
}

TEST_CASE("checkpoint: corrupted payloads with a valid checksum decode to an error or a valid checkpoint, never a crash") {
  // What the fuzzer does at scale: damage the payload and re-seal the header, so the decoder itself (not
  // the checksum) meets the damage. A decode may succeed (a flipped weight is still a weight); nothing
  // else may happen but a FormatError.
  Fixture f;
  ToyRun trained(f.run(OptimizerKind::adam), f.split.train);
  trained.trainer().step();
  const std::vector<std::byte> good = bytes_of(snapshot(trained.trainer()));
  Rng rng(23);
  int refused = 0, decoded = 0;
  for (int k = 0; k < 400; ++k) {
    auto bad = good;
    const std::size_t at = 28 + rng.below(bad.size() - 28);
    bad[at] ^= std::byte{static_cast<unsigned char>(1 + rng.below(255))};
    if (k % 4 == 0) bad.resize(28 + rng.below(bad.size() - 28));  // and cut short
    reseal(bad);
    try {
      const Checkpoint c = decode_checkpoint(bad, "resealed.tgck");
      ++decoded;
      ToyModel<float> model(f.config());
      try {
        load_weights(c, model);
      } catch (const FormatError&) {
      }
      if (k % 8 == 0) {  // and every part's reader meets the damage, into a fresh run
        ToyRun run(f.run(OptimizerKind::adam), f.split.train);
        try {
          restore(c, run.trainer());
        } catch (const FormatError&) {
        }
      }
    } catch (const FormatError&) {
      ++refused;
    }
  }
  // Both outcomes occur: damage the decoder rejects, and damage (a flipped weight) that still decodes and loads.
  CHECK(refused > 0);
  CHECK(decoded > 0);
}

TEST_CASE("checkpoint: resuming from a checkpoint gives bit-identical losses and parameters (SGD momentum, Adam)") {
  Fixture f;
  for (auto kind : {OptimizerKind::sgd, OptimizerKind::adam}) {
    CAPTURE(to_string(kind));
    std::vector<double> straight_losses, resumed_losses;
    ToyRun straight(f.run(kind), f.split.train, &f.split.validation);
    for (int i = 0; i < 40; ++i) straight_losses.push_back(straight.trainer().step());
    std::vector<std::byte> saved;
    {
      ToyRun first(f.run(kind), f.split.train, &f.split.validation);
      for (int i = 0; i < 17; ++i) resumed_losses.push_back(first.trainer().step());
      saved = bytes_of(snapshot(first.trainer()));
    }
    ToyRun second(f.run(kind), f.split.train, &f.split.validation);  // same config, fresh objects
    const LoadReport report = restore(decode_checkpoint(saved, "mid.tgck"), second.trainer());
    CHECK(report.restored == std::vector<std::string>{"model", "optimizer", "trainer"});
    CHECK(second.trainer().steps_done() == 17);
    for (int i = 17; i < 40; ++i) resumed_losses.push_back(second.trainer().step());
    CHECK(resumed_losses == straight_losses);
    CHECK(values_of(second.model()) == values_of(straight.model()));
  }
}

TEST_CASE("checkpoint: a user's own model: rebuilt from its file, and its training resumed bit for bit") {
  const TensorSource data = test::classification_data(200, 4, true);
  const Mlp::Config config{.in = 2, .hidden = 6, .out = 2, .seed = 9};
  MlpRun straight(data, config);
  straight.trainer.run();
  // Weights and record: a fresh model of the user's type, with the same predictions.
  const Checkpoint weights = decode_checkpoint(bytes_of(snapshot<float>(straight.model)), "mlp.tgck");
  CHECK(weights.model.describe() == "test_mlp (in 2, hidden 6, out 2, seed 9)");
  CHECK(describe_checkpoint(weights).find("model: test_mlp (in 2, hidden 6, out 2, seed 9)") != std::string::npos);
  const auto rebuilt = model_from_checkpoint<Mlp>(weights);
  Tape<float> t1, t2;
  CHECK(rebuilt->forward(t1.constant(data.features())).value() == straight.model.forward(t2.constant(data.features())).value());
  CHECK_THROWS_WITH_AS(model_from_checkpoint<ToyModel<float>>(weights),
                       "load: model: the file holds a model of kind 'test_mlp' but this one is of kind 'toy_model'", FormatError);
  // Training state: 25 steps, a checkpoint, a fresh run resumed to 60 ends where the straight run ended.
  std::vector<std::byte> mid;
  {
    MlpRun first(data, config);
    TrainCallbacks save_at_25;
    save_at_25.on_step = [&](Index step) {  // a checkpoint between evaluations, as a callback takes it
      if (step != 25) return;
      mid = bytes_of(snapshot(first.trainer));
      first.trainer.stop();
    };
    first.trainer.run(save_at_25);
    CHECK(first.trainer.steps_done() == 25);
  }
  MlpRun resumed(data, config);
  restore(decode_checkpoint(mid, "mid.tgck"), resumed.trainer);
  resumed.trainer.run();
  CHECK(values_of(resumed.model) == values_of(straight.model));
  CHECK(resumed.opt.state().per_param == straight.opt.state().per_param);
  CHECK(test::same_curve(resumed.trainer.curve(), straight.trainer.curve()));
  CHECK(resumed.trainer.curve().size() == 4);  // steps 0, 20, 40, 60
  // Another configuration of the same kind is named setting by setting, with every other problem it brings.
  MlpRun wider(data, {.in = 2, .hidden = 7, .out = 2, .seed = 9});
  CHECK_THROWS_WITH_AS(restore(decode_checkpoint(mid, "mid.tgck"), wider.trainer),
                       doctest::Contains("resume: model: setting 'hidden' is 6 in the file but 7 in the model; model: "
                                         "'hidden.weight' is f32 2x6 in the file but f32 2x7 in the model"),
                       FormatError);
}

TEST_CASE("checkpoint: past the sampler's stored-order limit the data order takes no room and resumes bit for bit") {
  // 70,000 examples: a computed order (train/data.hpp), where a stored one would be 560 KB in every file.
  const TensorSource data = test::classification_data(Sampler::kStoredOrderLimit + 4'464, 4, true);
  const Mlp::Config config{.in = 2, .hidden = 6, .out = 2, .seed = 9};
  MlpRun straight(data, config);
  straight.trainer.run();
  std::vector<std::byte> mid;
  {
    MlpRun first(data, config);
    TrainCallbacks save_at_25;
    save_at_25.on_step = [&](Index step) {
      if (step != 25) return;
      mid = bytes_of(snapshot(first.trainer));
      first.trainer.stop();
    };
    first.trainer.run(save_at_25);
  }
  const Checkpoint c = decode_checkpoint(mid, "mid.tgck");
  CHECK(read_trainer_state(c).data_order.order.empty());
  CHECK(mid.size() < 16'000);  // the weights, Adam's two buffers, the curve: no per-example state
  const std::string described = describe_checkpoint(c);
  CHECK(described.find("  trainer.data_order.cursor        ints (1)       400\n") != std::string::npos);
  CHECK(described.find("  trainer.data_order.order         ints (0) ") != std::string::npos);  // computed: none stored
  MlpRun resumed(data, config);
  restore(c, resumed.trainer);
  resumed.trainer.run();
  CHECK(values_of(resumed.model) == values_of(straight.model));
  CHECK(test::same_curve(resumed.trainer.curve(), straight.trainer.curve()));
  // A well-formed file whose computed order lies past the data is refused at resume, in one line.
  Checkpoint hostile = c;
  std::get<std::vector<std::int64_t>>(hostile.find("trainer.data_order.cursor")->value) = {data.size() + 1};
  MlpRun other(data, config);
  CHECK_THROWS_WITH_AS(restore(hostile, other.trainer),
                       "resume: trainer: sampler: the saved data order (computed) is at epoch 0 position 70001 but this "
                       "dataset has 70000 examples; nothing was loaded",
                       FormatError);
  MlpRun fresh(data, config);
  CHECK(values_of(other.model) == values_of(fresh.model));  // nothing applied
}

TEST_CASE("checkpoint: a user's own optimizer is saved under its name, resumed bit for bit, and described") {
  const TensorSource data = test::classification_data(200, 4, true);
  const Mlp::Config config{.in = 2, .hidden = 6, .out = 2, .seed = 9};
  SignumRun straight(data, config);
  straight.trainer.run();
  std::vector<std::byte> mid;
  {
    SignumRun first(data, config);
    for (int i = 0; i < 15; ++i) first.trainer.step();
    mid = bytes_of(snapshot(first.trainer));
  }
  const Checkpoint c = decode_checkpoint(mid, "mid.tgck");
  CHECK(read_optimizer_state<float>(c).kind == "signum");
  CHECK(describe_checkpoint(c).find("optimizer: signum after 15 steps (lr 0.02, beta 0.9); schedule constant") !=
        std::string::npos);
  SignumRun resumed(data, config);
  CHECK(restore(c, resumed.trainer).restored.size() == 3);
  resumed.trainer.run();
  CHECK(values_of(resumed.model) == values_of(straight.model));
  CHECK(resumed.opt.state().per_param == straight.opt.state().per_param);
  CHECK(resumed.opt.describe() == "signum (lr 0.02, beta 0.9), schedule constant");
  // Under its name: AdamW does not take Signum's state, nor Signum AdamW's.
  MlpRun adamw(data, config);
  CHECK_THROWS_WITH_AS(restore(c, adamw.trainer), doctest::Contains("optimizer: the state is from 'signum' but this optimizer is 'adamw'"),
                       FormatError);
  Checkpoint other = c;
  std::get<std::vector<std::string>>(other.find("optimizer.kind")->value) = {"adamw"};
  CHECK_THROWS_WITH_AS(restore(other, resumed.trainer),
                       "resume: optimizer: the state is from 'adamw' but this optimizer is 'signum'; nothing was loaded",
                       FormatError);
}

TEST_CASE("checkpoint: resuming refuses weights-only files, other data, another optimizer or model, and changes nothing") {
  Fixture f;
  ToyRun source(f.run(OptimizerKind::adam), f.split.train);
  for (int i = 0; i < 3; ++i) source.trainer().step();
  const Checkpoint c = snapshot(source.trainer());

  ToyRun target(f.run(OptimizerKind::adam), f.split.train);
  target.trainer().step();
  const auto weights = values_of(target.model());
  const auto optimizer = target.optimizer().state();
  const auto state = target.trainer().state();
  auto unchanged = [&] {
    CHECK(values_of(target.model()) == weights);
    CHECK(target.optimizer().state().per_param == optimizer.per_param);
    CHECK(target.trainer().state().data_order.order == state.data_order.order);
    CHECK(target.trainer().steps_done() == 1);
  };
  CHECK_THROWS_WITH_AS(restore(snapshot<float>(source.model()), target.trainer()),
                       "resume: the file has no 'optimizer', 'trainer' (it holds 'model'); nothing was loaded", FormatError);
  // the same words for a program that looks before it builds the run (train --resume)
  CHECK(missing_parts(snapshot<float>(source.model()), {"model", "optimizer", "trainer"}) ==
        "the file has no 'optimizer', 'trainer' (it holds 'model')");
  CHECK(missing_parts(c, {"model", "optimizer", "trainer"}).empty());
  Checkpoint other_data = c;
  entry<std::vector<std::int64_t>>(other_data, "trainer.data_fingerprint")[0] ^= 1;
  CHECK_THROWS_WITH_AS(restore(other_data, target.trainer()),
                       doctest::Contains("resume: trainer: the training data differs from the data the checkpoint was trained on"),
                       FormatError);
  Checkpoint other_model = c;
  other_model.model.config.back().value = "7";  // the seed
  CHECK_THROWS_WITH_AS(restore(other_model, target.trainer()),
                       "resume: model: setting 'seed' is 7 in the file but 0 in the model; nothing was loaded", FormatError);
  Checkpoint bad_buffer = c;
  entry<Tensor>(bad_buffer, "optimizer.state.attn.wq.exp_avg") = Tensor(Shape::mat(1, 1));
  CHECK_THROWS_WITH_AS(restore(bad_buffer, target.trainer()),
                       doctest::Contains("resume: optimizer: 'attn.wq' exp_avg is 1x1 in the state but 33x33 in the model"),
                       FormatError);
  Checkpoint bad_order = c;
  entry<std::vector<std::int64_t>>(bad_order, "trainer.data_order.order")[0] = 9999;
  CHECK_THROWS_WITH_AS(restore(bad_order, target.trainer()),
                       doctest::Contains("trainer: sampler: the saved data order is not a permutation"), FormatError);
  Checkpoint other_schedule = c;
  entry<std::vector<std::string>>(other_schedule, "optimizer.schedule") = {"step"};
  for (const Setting& setting : to_settings(StepLrOptions{}))
    other_schedule.entries.push_back({"optimizer.schedule." + setting.name, std::vector<std::string>{setting.value}});
  CHECK_THROWS_WITH_AS(restore(other_schedule, target.trainer()),
                       "resume: optimizer: the state's schedule is step (step_size 1, gamma 0.1) but this optimizer's is "
                       "constant; nothing was loaded",
                       FormatError);
  Checkpoint unknown = c;
  unknown.entries.push_back({"optimizer.velocity", std::vector<double>{1.0}});
  CHECK_THROWS_WITH_AS(restore(unknown, target.trainer()),
                       "resume: optimizer: unexpected entries 'optimizer.velocity'; nothing was loaded", FormatError);
  unchanged();

  ToyRun sgd(f.run(OptimizerKind::sgd), f.split.train);
  CHECK_THROWS_WITH_AS(restore(c, sgd.trainer()),
                       "resume: optimizer: the state is from 'adam' but this optimizer is 'sgd'; nothing was loaded",
                       FormatError);
}

TEST_CASE("checkpoint: a file of format 1 or 2 is refused in one line that names the command converting it") {
  for (const char* name : {"v1/cycle_learned_weights.tgck", "v1/adam_cycle_step10.tgck", "v2/loop_step200.tgck"}) {
    CAPTURE(name);
    const std::string path = std::string(TAPEGRAD_TEST_DATA "/") + name;
    const char format = name[1];
    CHECK_THROWS_WITH_AS(read_checkpoint(path),
                         fmt::format("load '{0}': a tapegrad 0.{1} checkpoint (format {1}); convert it with: "
                                     "build/examples/convert_checkpoint '{0}' NEW",
                                     path, format)
                             .c_str(),
                         FormatError);
  }
  // The path as every message quotes a name from outside: escaped.
  const std::string v2 = test::old_file_bytes(TAPEGRAD_TEST_DATA "/v2/loop_step200.tgck");
  CHECK_THROWS_WITH_AS(decode_checkpoint(std::as_bytes(std::span<const char>(v2)), "a\n.tgck"),
                       "load 'a\\x0a.tgck': a tapegrad 0.2 checkpoint (format 2); convert it with: "
                       "build/examples/convert_checkpoint 'a\\x0a.tgck' NEW",
                       FormatError);
  // The converter takes no file of today's format, and names a 0.1 trainer's file that needs its data.
  const std::vector<std::byte> today = encode_checkpoint(Checkpoint{});
  CHECK_THROWS_WITH_AS(convert::convert_checkpoint(today, "new.tgck"),
                       doctest::Contains("convert 'new.tgck': it is a checkpoint of format 3 already"), FormatError);
  const std::string v1 = test::old_file_bytes(TAPEGRAD_TEST_DATA "/v1/adam_cycle_step10.tgck");
  CHECK_THROWS_WITH_AS(convert::convert_checkpoint(std::as_bytes(std::span<const char>(v1)), "old.tgck"),
                       doctest::Contains("convert 'old.tgck': a training checkpoint of tapegrad 0.1 names its data"),
                       FormatError);
  // Other data than the file's (0.1 recorded its examples' CRC-32) is refused, as train --resume refused it.
  const convert::DataOf other_data = [](const Checkpoint&) {
    return convert::TrainingData{.examples_crc32 = 1, .fingerprint = 0, .eval_fingerprint = {}};
  };
  CHECK_THROWS_WITH_AS(convert::convert_checkpoint(std::as_bytes(std::span<const char>(v1)), "old.tgck", other_data),
                       doctest::Contains("convert 'old.tgck': the training data differs from the data the checkpoint "
                                         "was trained on (fingerprint "),
                       FormatError);
}

TEST_CASE("checkpoint: files of format 1 (tapegrad 0.1) convert, and resume to the state 0.1 itself reached") {
  // tests/data/v1/expected.txt says how each file was made.
  // Weights only: the demo's trained model, into a fresh model rebuilt from the file's configuration.
  const Checkpoint weights = test::converted(TAPEGRAD_TEST_DATA "/v1/cycle_learned_weights.tgck");
  CHECK(weights.model.kind == "toy_model");
  CHECK(fmt::format("{:08x}", weights_crc32(weights)) == "feb33759");  // what 0.1's inspect printed: read exactly
  const auto model = model_from_checkpoint<ToyModel<float>>(weights);
  CHECK(model->config().attention == AttentionMode::learnable);
  const auto task = make_task("cycle");
  const TaskSplit split = make_task_split(*task, 4000, 500, 1000, 1000);  // the demo's seed-0 split: its test set
  Tape<float> tape;
  NoGradGuard<float> no_grad(tape);
  Tally correct;
  for (const Dataset* d : {&split.test}) {
    SequenceBatch b;
    std::vector<Index> all(static_cast<std::size_t>(d->size()));
    std::iota(all.begin(), all.end(), Index{0});
    SequenceSource(*d).fill(all, b);
    correct += count_correct(model->logits(tape, b).value(), b.labels);
  }
  CHECK(correct.mean() == 1.0);  // the demo's table: learnable attention solves cycle

  // Training checkpoints at step 10, resumed here to step 20 and compared with the file 0.1 wrote at step
  // 20. Data order, step and schedule must agree exactly; weights, optimizer buffers and the curve to float
  // rounding: float kernels differ between CPUs and builds (AVX-512 or AVX2, libxsmm or Eigen) in the last
  // bits, and ten steps amplify that to at most 3e-7 relative (measured: clang, Eigen instead of libxsmm),
  // while a mis-read setting (the scheduled rate
  // taken for lr, another warm-up, another data order) moves them by 1e-3 or more. On the machine and
  // build that wrote the files the results are bit-identical (the ctest cli_train_resume_format1_* shows
  // the CRC-32).
  // The run's data, as the trainer CLI makes it again from the file's metadata: 0.1 named it by its
  // examples' CRC-32, the converted file as a Trainer names it.
  const TaskSplit data = make_task_split(*task, 4000, 0, 1000, 1000);
  const convert::DataOf data_of = [&](const Checkpoint& old) {
    CHECK(old.metadata.at("task.seed") == "0");
    return convert::TrainingData{.examples_crc32 = convert::examples_crc32(data.train),
                                 .fingerprint = SequenceSource(data.train).fingerprint(),
                                 .eval_fingerprint = SequenceSource(data.test).fingerprint()};
  };
  for (const std::string stem : {"adam_cycle", "sgd_cosine_clip_cycle"}) {
    CAPTURE(stem);
    const std::string dir = TAPEGRAD_TEST_DATA "/v1/";
    const Checkpoint c = test::converted(dir + stem + "_step10.tgck", data_of);
    const Checkpoint end = test::converted(dir + stem + "_step20.tgck", data_of);
    CHECK(c.parts() == std::vector<std::string>{"model", "optimizer", "trainer"});
    CHECK(c.metadata.at("task") == "cycle");
    const TrainerState at10 = read_trainer_state(c);
    const OptimizerState<float> optimizer = read_optimizer_state<float>(c);
    CHECK(at10.step == 10);
    CHECK(at10.options.steps == 20);
    const bool sgd = optimizer.kind == "sgd";
    // The optimizer's own lr (0.1's file held the last scheduled rate), and the schedule 0.1 built.
    CHECK(*find_setting(optimizer.hyperparameters, "lr") == (sgd ? "0.1" : "0.01"));
    CHECK(optimizer.schedule.describe() == (sgd ? "cosine (warmup_steps 1, total_steps 20, min_lr 0)" : "constant"));
    // The run 0.1's trainer made, rebuilt from the file alone, then resumed here to step 20.
    ToyRunConfig config{.model = model_config_from<ToyModel<float>>(c),
                        .optimizer = parse_enum<OptimizerKind>(optimizer.kind),
                        .hyperparameters = optimizer.hyperparameters,
                        .schedule = optimizer.schedule,
                        .training = at10.options};
    ToyRun run(config, data.train, &data.test);
    restore(c, run.trainer());
    run.trainer().run();
    const Checkpoint now = snapshot(run.trainer());
    // The converted settings are the ones the library's optimizer saves (adam's: no "decay_on = all").
    CHECK(read_optimizer_state<float>(now).hyperparameters == optimizer.hyperparameters);
    const TrainerState ours = read_trainer_state(now), theirs = read_trainer_state(end);
    CHECK(ours.step == theirs.step);
    CHECK(ours.data_order.order == theirs.data_order.order);
    CHECK(ours.data_order.rng == theirs.data_order.rng);
    CHECK(read_optimizer_state<float>(now).step == read_optimizer_state<float>(end).step);
    // Every tensor of the model and the optimizer, to float rounding (relative to the tensor's largest value).
    for (const std::string prefix : {"model.", "optimizer.state."}) {
      std::size_t compared = 0;
      for (const StateEntry& e : now.entries) {
        if (!e.name.starts_with(prefix)) continue;
        CAPTURE(e.name);
        const StateEntry* old = end.find(e.name);
        REQUIRE(old);
        const Tensor &a = std::get<Tensor>(e.value), &b = std::get<Tensor>(old->value);
        REQUIRE(a.shape() == b.shape());
        const double scale = b.array().abs().maxCoeff(), worst = (a.array() - b.array()).abs().maxCoeff();
        CHECK(worst <= 1e-5 * scale);
        ++compared;
      }
      CHECK(compared > 0);
    }
    REQUIRE(ours.curve.size() == theirs.curve.size());
    for (std::size_t i = 0; i < ours.curve.size(); ++i) {
      CAPTURE(i);
      CHECK(ours.curve[i].step == theirs.curve[i].step);
      CHECK(ours.curve[i].lr == doctest::Approx(theirs.curve[i].lr).epsilon(1e-12));
      REQUIRE(ours.curve[i].values.size() == theirs.curve[i].values.size());
      for (std::size_t k = 0; k < ours.curve[i].values.size(); ++k) {
        CHECK(ours.curve[i].values[k].name == theirs.curve[i].values[k].name);
        const double a = ours.curve[i].values[k].value, b = theirs.curve[i].values[k].value;
        if (!std::isnan(b)) CHECK(a == doctest::Approx(b).epsilon(1e-5));
      }
    }
    const std::string how = weights_crc32(now) == weights_crc32(end) ? "are bit-identical to" : "agree to float rounding with";
    MESSAGE(stem, ": the resumed weights ", how, " 0.1's");
  }
}

TEST_CASE("checkpoint: a crash at any moment of a save leaves the old file or the new one, never a torn one") {
  Fixture f;
  ModelConfig other = f.config();
  other.seed = 9;  // other weights
  ToyModel<float> a_model(f.config()), b_model(other);
  const Checkpoint a = snapshot<float>(a_model), b = snapshot<float>(b_model);
  const auto a_bytes = bytes_of(a), b_bytes = bytes_of(b);
  const fs::path dir = scratch("crash");
  const fs::path target = dir / "model.tgck";
  save_checkpoint(target, a);
  Rng rng(3);
  for (int round = 0; round < 25; ++round) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {  // save b and a over and over until killed
      for (;;) {
        save_checkpoint(target, b);
        save_checkpoint(target, a);
      }
    }
    ::usleep(static_cast<useconds_t>(200 + rng.below(3000)));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    const auto bytes = encode_checkpoint(read_checkpoint(target));  // must decode: old or new, whole
    CHECK((bytes == a_bytes || bytes == b_bytes));
  }
  fs::remove_all(dir);
}

namespace {
// The names of the files in `dir`, sorted.
std::vector<std::string> checkpoints_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}
}  // namespace

TEST_CASE("checkpoint: a checkpoint folder keeps the newest N") {
  Fixture f;
  ToyModel<float> model(f.config());
  const Checkpoint c = snapshot<float>(model);
  const fs::path dir = scratch("keep");
  OutputFolder out(dir, {.program = "train"});
  CheckpointDir keep(out, "checkpoints", 3);
  for (std::int64_t step : {100, 200, 300, 400, 500}) keep.save(c, step);
  CHECK(checkpoints_in(dir / "checkpoints") ==
        std::vector<std::string>{"checkpoint-00000300.tgck", "checkpoint-00000400.tgck", "checkpoint-00000500.tgck"});
  CHECK(out.files() == std::vector<std::string>{"checkpoints/checkpoint-00000300.tgck",
                                                "checkpoints/checkpoint-00000400.tgck",
                                                "checkpoints/checkpoint-00000500.tgck"});
  CHECK(keep.saved().back() == dir / "checkpoints/checkpoint-00000500.tgck");
  CHECK_THROWS_WITH_AS(CheckpointDir(out, "checkpoints", 0), "checkpoints: keep must be at least 1, got 0", ValueError);
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: keeping N counts this run's files only, another run's, a user's or odd names are never touched") {
  Fixture f;
  ToyModel<float> model(f.config());
  const Checkpoint c = snapshot<float>(model);
  const fs::path dir = scratch("keep_by_run");
  {  // an earlier run that went to step 20
    OutputFolder out(dir, {.program = "train"});
    CheckpointDir earlier(out, "checkpoints", 5);
    for (std::int64_t step : {10, 20}) earlier.save(c, step);
  }
  // A user's file with a huge step, and names that are not a step a checkpoint can have.
  for (const char* name : {"checkpoint-99999999.tgck", "checkpoint-99999999999999999999.tgck", "checkpoint-.tgck",
                           "checkpoint--5.tgck", "checkpoint-1e3.tgck"})
    std::ofstream(dir / "checkpoints" / name) << "mine";
  // Resumed from step 10 with keep 1: its step 15 survives; the stale step 20 and the user's files stay.
  OutputFolder out(dir, {.program = "train", .resume = true});
  CheckpointDir resumed(out, "checkpoints", 1);
  resumed.save(c, 15);
  CHECK(fs::exists(dir / "checkpoints/checkpoint-00000015.tgck"));
  resumed.save(c, 16);
  CHECK_FALSE(fs::exists(dir / "checkpoints/checkpoint-00000015.tgck"));
  CHECK(resumed.saved() == std::vector<fs::path>{dir / "checkpoints/checkpoint-00000016.tgck"});
  CHECK(checkpoints_in(dir / "checkpoints") ==
        std::vector<std::string>{"checkpoint--5.tgck", "checkpoint-.tgck", "checkpoint-00000010.tgck",
                                 "checkpoint-00000016.tgck", "checkpoint-00000020.tgck", "checkpoint-1e3.tgck",
                                 "checkpoint-99999999.tgck", "checkpoint-99999999999999999999.tgck"});
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: describe prints names from the file with control characters escaped") {
  Fixture f;
  ToyModel<float> model(f.config());
  Checkpoint c = snapshot<float>(model);
  c.metadata["note\x1b[2J"] = "bell\a and \\ backslash";
  const std::string text = describe_checkpoint(c);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find('\a') == std::string::npos);
  CHECK(text.find("note\\x1b[2J") != std::string::npos);
  CHECK(text.find("bell\\x07 and \\\\ backslash") != std::string::npos);
}

TEST_CASE("checkpoint: resuming refuses other evaluation data, and training data whose label names differ") {
  Fixture f;
  ToyRun source(f.run(OptimizerKind::adam), f.split.train, &f.split.validation);
  for (int i = 0; i < 10; ++i) source.trainer().step();  // evaluated at step 10: the curve has eval values
  const Checkpoint c = snapshot(source.trainer());

  ToyRun other_eval(f.run(OptimizerKind::adam), f.split.train, &f.split.test);
  CHECK_THROWS_WITH_AS(restore(c, other_eval.trainer()),
                       doctest::Contains("resume: trainer: the evaluation data differs from the checkpoint's"), FormatError);
  ToyRun no_eval(f.run(OptimizerKind::adam), f.split.train);
  CHECK_THROWS_WITH_AS(restore(c, no_eval.trainer()), doctest::Contains("now); one curve must not mix two evaluation sets"),
                       FormatError);
  ToyRun same(f.run(OptimizerKind::adam), f.split.train, &f.split.validation);
  CHECK_NOTHROW(restore(c, same.trainer()));

  // The same ids under swapped label names are other data: the fingerprint covers the names.
  Dataset swapped = f.split.train;
  std::vector<std::string> names = swapped.labels.names();
  REQUIRE(names.size() >= 2);
  std::swap(names[0], names[1]);
  swapped.labels = Vocabulary(names);
  ToyRun relabelled(f.run(OptimizerKind::adam), swapped, &f.split.validation);
  CHECK_THROWS_WITH_AS(restore(c, relabelled.trainer()),
                       doctest::Contains("resume: trainer: the training data differs from the data the checkpoint was trained on"),
                       FormatError);
}

// ---- the decoder's and the loaders' invariants (hardening round two) ---------------------------------

namespace {
// A user's model whose configuration implies nothing (no static count_parameters): the build budget is
// what bounds it.
test::Mlp::Config mlp_config() { return {.in = 2, .hidden = 8, .out = 2, .seed = 1}; }

Checkpoint with_setting(Checkpoint c, const std::string& name, const std::string& value) {
  for (auto& s : c.model.config)
    if (s.name == name) s.value = value;
  return c;
}
}  // namespace

TEST_CASE("checkpoint: an entry named twice is refused by the decoder and by every load, whatever its size") {
  test::Mlp model(mlp_config());
  const Checkpoint good = snapshot<float>(model);
  for (const Index copy_size : {Index{0}, Index{1}, Index{-1}}) {  // -1: the same size as the original
    Checkpoint forged = good;
    StateEntry twin = forged.entries[1];  // model.hidden.bias
    if (copy_size >= 0) twin.value = Tensor(Shape::vec(copy_size), 7.0f);
    else std::get<Tensor>(twin.value).fill(7.0f);
    forged.entries.push_back(twin);
    INFO("copy of " << copy_size << " elements");
    CHECK_THROWS_WITH_AS(decode_checkpoint(encode_checkpoint(forged), "twice.tgck"),
                         "load 'twice.tgck': the entries name 'model.hidden.bias' more than once", FormatError);
    const auto before = values_of(model);
    CHECK_THROWS_WITH_AS(load_weights(forged, model), doctest::Contains("'model.hidden.bias' more than once"), FormatError);
    CHECK_THROWS_AS(load_weights(forged, model, {.strict = false}), FormatError);
    CHECK_THROWS_AS(restore(forged, {{"model", model}}), FormatError);
    CHECK(values_of(model) == before);
    CHECK_THROWS_AS(model_from_checkpoint<test::Mlp>(forged), FormatError);
  }
}

TEST_CASE("checkpoint: an in-memory checkpoint is checked as a file is: names, element types, kinds") {
  test::Mlp model(mlp_config());
  const auto before = values_of(model);
  Checkpoint c = snapshot<float>(model);
  c.entries[0].name = "";
  CHECK_THROWS_WITH_AS(load_weights(c, model),
                       "checkpoint: entry 0 is named '': an entry's name starts with its part's", FormatError);
  c = snapshot<float>(model);
  c.entries[0].name = ".hidden.weight";
  CHECK_THROWS_AS(restore(c, {{"model", model}}), FormatError);
  c = snapshot<float>(model);
  c.entries[0].value = TensorD(Shape::mat(2, 8));  // hidden.weight in f64 for a float model
  CHECK_THROWS_WITH_AS(load_weights(c, model),
                       "load: 'hidden.weight' is f64 2x8 in the file but f32 2x8 in the model; nothing was loaded "
                       "(LoadOptions::convert_dtype converts the element type)",
                       FormatError);
  c.entries[0].value = std::vector<double>(16, 0.5);  // numbers, not a tensor
  CHECK_THROWS_WITH_AS(restore(c, {{"model", model}}),
                       "load: model: 'hidden.weight' is numbers (16) in the file but f32 2x8 in the model; nothing was loaded",
                       FormatError);
  CHECK(values_of(model) == before);
}

TEST_CASE("checkpoint: settings named twice, and the parts' counters out of range, are refused, naming them") {
  Fixture f;
  ToyRun run(f.run(OptimizerKind::adam), f.split.train);
  run.trainer().step();
  const Checkpoint good = snapshot(run.trainer());
  Checkpoint c = good;
  c.model.config.push_back(c.model.config[0]);
  const std::string twice = fmt::format("load 'x.tgck': the model's configuration names '{}' more than once", c.model.config[0].name);
  CHECK_THROWS_WITH_AS(decode_checkpoint(encode_checkpoint(c), "x.tgck"), twice.c_str(), FormatError);
  CHECK_THROWS_AS(check_checkpoint(c), FormatError);
  // Well-formed files whose parts could not come from a run: each part's reader names what is out of range.
  using Ints = std::vector<std::int64_t>;
  auto refused = [&](const Checkpoint& forged, const std::string& says) {
    INFO(says);
    ToyRun target(f.run(OptimizerKind::adam), f.split.train);
    const auto before = values_of(target.model());
    CHECK_THROWS_WITH_AS(restore(decode_checkpoint(encode_checkpoint(forged), "x.tgck"), target.trainer()),
                         doctest::Contains(says.c_str()), FormatError);
    CHECK(values_of(target.model()) == before);
    CHECK(target.trainer().steps_done() == 0);
  };
  c = good;
  entry<Ints>(c, "trainer.step") = {std::int64_t{1} << 62};
  refused(c, "trainer: the trainer is at step 4611686018427387904, outside its run of 40 steps");
  entry<std::vector<std::string>>(c, "trainer.options.steps") = {"4611686018427387904"};
  refused(c, "trainer: the trainer's options: steps must be in [0, 1000000000000], got 4611686018427387904");
  c = good;
  entry<Ints>(c, "trainer.step") = {-1};
  refused(c, "trainer: the trainer is at step -1");
  c = good;
  entry<Ints>(c, "optimizer.step") = {-5};
  refused(c, "optimizer: the optimizer's step is -5");
  c = good;
  entry<Ints>(c, "trainer.data_order.cursor") = {1 << 30};
  refused(c, "trainer: the data order is at epoch");
  c = good;
  entry<Ints>(c, "trainer.window_steps") = {99};
  refused(c, "trainer: the trainer's window holds 99 steps, outside [0, 1]");
  c = good;
  c.entries.push_back({"optimizer.state.nodot", Tensor(Shape::vec(1))});
  refused(c, "optimizer: optimizer buffer 'optimizer.state.nodot' is not named '<parameter>.<buffer>'");
  c = good;
  entry<std::vector<std::string>>(c, "optimizer.params").push_back("attn.wq");
  refused(c, "optimizer: entry 'optimizer.params' names the parameter 'attn.wq' twice");
  c = good;
  entry<Ints>(c, "trainer.rng") = {0, 0, 0, 0};
  refused(c, "trainer: rng: the all-zero state is invalid");
  // A fingerprint is 32 bits: more is refused as any integer out of its field's range, naming the entry.
  c = good;
  entry<Ints>(c, "trainer.data_fingerprint") = {std::int64_t{1} << 40};
  refused(c, "trainer: entry 'trainer.data_fingerprint' holds 1099511627776, out of its range");
  c = good;
  entry<Ints>(c, "trainer.eval_fingerprint") = {1, 2};
  refused(c, "trainer: entry 'trainer.eval_fingerprint' holds 2 fingerprints, not 0 or 1");
}

TEST_CASE("checkpoint: settings by the hundred thousand are checked for repeats in one pass, and messages stay a line") {
  test::Mlp model(mlp_config());
  Checkpoint c = snapshot<float>(model);
  for (int i = 0; i < 200000; ++i) c.model.config.push_back({fmt::format("k{}", i), "1"});
  const Checkpoint back = decode_checkpoint(encode_checkpoint(c), "many.tgck");  // well-formed: it decodes
  CHECK(back.model.config.size() == c.model.config.size());
  // Rebuilding names the unknown settings, a few of them and how many more: one short line.
  try {
    model_from_checkpoint<test::Mlp>(back);
    FAIL("a configuration with unknown settings was accepted");
  } catch (const FormatError& e) {
    const std::string what = e.what();
    CHECK(what.find("'k0', 'k1'") != std::string::npos);
    CHECK(what.find("... and 199990 more") != std::string::npos);
    CHECK(what.size() < 2000);
    CHECK(what.find('\n') == std::string::npos);
  }
}

TEST_CASE("checkpoint: a count the bytes left cannot hold is refused before anything is reserved") {
  test::Mlp model(mlp_config());
  Checkpoint c = snapshot<float>(model);
  std::vector<std::byte> bytes = encode_checkpoint(c);
  // The payload (cereal's portable binary: an endianness byte, then little-endian values): format u32, then
  // strings as a u64 size and the bytes: the version, the model's kind, its settings (a u64 count, then
  // name and value), the metadata (a u64 count, none here), then the entry list's u64 count, forged here
  // to 2^40 entries.
  std::size_t at = 28 + 1 + 4 + 8 + c.tapegrad_version.size() + 8 + c.model.kind.size() + 8;
  for (const auto& s : c.model.config) at += 16 + s.name.size() + s.value.size();
  at += 8;
  REQUIRE(std::to_integer<int>(bytes[at]) == 4);  // the Mlp's 4 parameters: this is the count
  const std::uint64_t huge = std::uint64_t{1} << 40;
  for (std::size_t i = 0; i < 8; ++i) bytes[at + i] = static_cast<std::byte>((huge >> (8 * i)) & 0xff);
  reseal(bytes);
  CHECK_THROWS_WITH_AS(decode_checkpoint(bytes, "count.tgck"), doctest::Contains("claims 1099511627776 elements of at least 17 bytes"),
                       FormatError);
}

TEST_CASE("checkpoint: NaN or Inf weights are refused on load, naming the parameter, unless asked, and describe says so") {
  test::Mlp trained(mlp_config());
  Checkpoint c = snapshot<float>(trained);
  entry<Tensor>(c, "model.out.weight")[5] = std::numeric_limits<float>::quiet_NaN();
  entry<Tensor>(c, "model.out.bias")[0] = std::numeric_limits<float>::infinity();
  const Checkpoint back = decode_checkpoint(encode_checkpoint(c), "nan.tgck");  // the decoder keeps it: inspect shows it
  test::Mlp model(mlp_config());
  const auto before = values_of(model);
  CHECK_THROWS_WITH_AS(load_weights(back, model),
                       "load: model: 'out.weight' holds 1 non-finite values (NaN or Inf) of 16 "
                       "(LoadOptions::allow_non_finite loads it anyway); nothing was loaded",
                       FormatError);
  CHECK(values_of(model) == before);
  CHECK_THROWS_AS(model_from_checkpoint<test::Mlp>(back), FormatError);
  load_weights(back, model, {.allow_non_finite = true});
  CHECK(std::isnan(model.parameter("out.weight").value[5]));
  const std::string described = describe_checkpoint(back);
  CHECK(described.find("(1 non-finite values: NaN or Inf)") != std::string::npos);
  CHECK(described.find("warning: 2 parameter values are not finite") != std::string::npos);
}

TEST_CASE("checkpoint: rebuilding a user's model is bounded by what the file holds, before the memory is taken") {
  test::Mlp model(mlp_config());
  const Checkpoint good = snapshot<float>(model);
  // 5e7 hidden units: 400 MB of one weight, from a file of 42 values. The Mlp declares no implied count.
  CHECK_THROWS_WITH_AS(model_from_checkpoint<test::Mlp>(with_setting(good, "hidden", "50000000")),
                       doctest::Contains("load: building the model test_mlp (in 2, hidden 50000000, out 2, seed 1) from "
                                         "a file of 42 parameter values: its tensors would take more than"),
                       LimitError);
  CHECK_THROWS_AS(model_config_from<test::Mlp>(with_setting(good, "hidden", "2000000000000000000")), LimitError);
  // A configuration that fits the budget but not the file: its count is compared after the build.
  CHECK_THROWS_WITH_AS(model_from_checkpoint<test::Mlp>(with_setting(good, "hidden", "9")),
                       "load: the configuration test_mlp (in 2, hidden 9, out 2, seed 1) implies 47 parameter values "
                       "but the file holds 42",
                       FormatError);
  CHECK(model_config_from<test::Mlp>(good).hidden == 8);
}

TEST_CASE("checkpoint: a tensor budget that refuses while a file is decoded stays a LimitError, not a corrupt payload") {
  // The decoder turns its own refusals and cereal's into "corrupt payload"; a budget the caller set is not the
  // file's fault, and says so in its own words.
  Fixture f;
  ToyRun run(f.run(OptimizerKind::adam), f.split.train, &f.split.validation);
  const std::vector<std::byte> bytes = bytes_of(snapshot<float>(run.model()));
  const TensorBudget budget(64, "reading");
  CHECK_THROWS_WITH_AS(static_cast<void>(decode_checkpoint(bytes, "memory")),
                       doctest::Contains("reading: its tensors would take more than"), LimitError);
}

TEST_CASE("checkpoint: TensorBudget charges growing tensors on its thread, nests, and refuses before allocating") {
  const TensorBudget outer(1000, "outer");
  Tensor a(Shape::vec(100));  // 400 bytes
  CHECK(outer.used() == 400);
  {
    const TensorBudget inner(10000, "inner");
    CHECK_THROWS_WITH_AS(Tensor(Shape::vec(200)), doctest::Contains("outer: its tensors would take more than 1 KB"),
                         LimitError);  // 800 more passes the outer one
    Tensor b(Shape::vec(100));
    CHECK(inner.used() == 400);
  }
  CHECK(outer.used() == 800);
  a.resize(Shape::vec(50));  // within its capacity: nothing charged
  CHECK(outer.used() == 800);
  CHECK(TensorBudget::current() == &outer);
}
