// train/checkpoint: round trips, strict loading and its messages, resuming bit for bit (SGD with
// momentum, Adam), hundreds of truncated and corrupted files, crashes in the middle of a save, keeping
// the last N, the JSON export.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "tapegrad/autograd/ops.hpp"
#include "helpers.hpp"
#include "reseal.hpp"
#include "tapegrad/train/checkpoint.hpp"
#include "tapegrad/train/tasks.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  std::unique_ptr<Task> task = make_task("cycle");
  TaskSplit split = make_task_split(*task, 300, 10, 50, 3);

  ModelConfig config() const {
    return {.vocab = task->tokens().size(), .labels = task->labels().size(), .max_len = task->length(),
            .heads = 3, .d_head = 11, .output_projection = true};
  }
  TrainConfig training(OptimizerKind kind) const {
    return {.steps = 40, .batch = 8, .optimizer = kind, .lr = kind == OptimizerKind::sgd ? 0.1 : 0.01, .momentum = 0.9,
            .eval_every = 10, .seed = 5};
  }
};

fs::path scratch(const std::string& name) {
  const auto dir = fs::temp_directory_path() / fmt::format("tapegrad_test_checkpoint_{}_{}", name, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<TensorT<float>> values_of(Module<float>& m) {
  std::vector<TensorT<float>> out;
  for (auto* p : m.parameters()) out.push_back(p->value);
  return out;
}

std::vector<std::byte> bytes_of(const Checkpoint& c) { return encode_checkpoint(c); }

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
  ToyModel<float> model(f.config());
  Trainer trainer(model, f.split.train, &f.split.validation, f.training(OptimizerKind::adam));
  trainer.run();
  Checkpoint c = snapshot(trainer);
  c.metadata["task"] = "cycle";
  const Checkpoint back = decode_checkpoint(bytes_of(c), "memory");
  CHECK(back.model == c.model);
  REQUIRE(back.parameters.size() == c.parameters.size());
  for (std::size_t i = 0; i < c.parameters.size(); ++i) {
    CHECK(back.parameters[i].name == c.parameters[i].name);
    CHECK(back.parameters[i].shape == c.parameters[i].shape);
    CHECK(back.parameters[i].values == c.parameters[i].values);
  }
  REQUIRE(back.training.has_value());
  CHECK(back.training->buffers.size() == 2 * c.parameters.size());  // exp_avg and exp_avg_sq each
  CHECK(back.training->trainer.step == 40);
  CHECK(back.training->trainer.data_order.order == c.training->trainer.data_order.order);
  CHECK(back.training->trainer.data_order.rng == c.training->trainer.data_order.rng);
  CHECK(back.training->trainer.curve.size() == 5);
  CHECK(std::isnan(back.training->trainer.curve[0].train_loss));  // before the first step
  CHECK(back.training->hyperparameters == c.training->hyperparameters);
  CHECK(back.metadata == c.metadata);

  const fs::path dir = scratch("roundtrip");
  save_checkpoint(dir / "run.tgck", c);
  CHECK(encode_checkpoint(read_checkpoint(dir / "run.tgck")) == bytes_of(c));
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);  // no temporary left behind
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: a weights-only load into a fresh model predicts identically") {
  Fixture f;
  ToyModel<float> model(f.config());
  Trainer trainer(model, f.split.train, nullptr, f.training(OptimizerKind::adam));
  trainer.run();
  const auto reloaded = model_from_checkpoint(decode_checkpoint(bytes_of(snapshot(std::as_const(model))), "memory"));
  CHECK(dataset_logits(*reloaded, f.split.test) == dataset_logits(model, f.split.test));
}

TEST_CASE("checkpoint: a configuration the file's weights do not account for is refused before anything is built") {
  Fixture f;
  ToyModel<float> model(f.config());
  Checkpoint forged = snapshot(std::as_const(model));
  forged.model.vocab = 1 << 23;  // would make a model of 8M x 8M one-hot features
  CHECK_THROWS_WITH_AS(model_from_checkpoint(forged),
                       doctest::Contains("implies 1174406248 parameter values but the file holds 4628"), FormatError);
  forged.model.vocab = f.config().vocab;
  forged.model.output_projection = false;  // 3 x 33x33 + 33x8 + 8 = 3539, not the 4628 held
  CHECK_THROWS_WITH_AS(model_from_checkpoint(forged), doctest::Contains("implies 3539 parameter values but the file holds 4628"),
                       FormatError);
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
  const Checkpoint c = snapshot(std::as_const(source));
  CHECK_THROWS_WITH_AS(load_weights(c, target),
                       "load: the model has no 'attn.wo'; 'attn.wq' is 33x33 in the file but 33x22 in the model; 'attn.wk' "
                       "is 33x33 in the file but 33x22 in the model; 'attn.wv' is 33x33 in the file but 33x22 in the "
                       "model; 'readout.weight' is 33x8 in the file but 22x8 in the model; nothing was loaded",
                       FormatError);
  CHECK(values_of(target) == before);

  // Non-strict: the matching subset (here, only the readout bias) loads, the rest is reported.
  const LoadReport report = load_weights(c, target, {.strict = false});
  CHECK(report.loaded == std::vector<std::string>{"readout.bias"});
  CHECK(report.unexpected == std::vector<std::string>{"attn.wo"});
  CHECK(report.mismatched.size() == 4);
  CHECK(target.parameter("readout.bias").value == source.parameter("readout.bias").value);
  CHECK(target.parameter("attn.wq").value == before[0]);
  CHECK(report.str().find("loaded 1 parameters; not in the model: 'attn.wo'; skipped 'attn.wq' is 33x33 in the file") == 0);

  // A double model refuses float weights by element type.
  ToyModel<double> doubles(f.config());
  CHECK_THROWS_WITH_AS(load_weights(c, doubles), doctest::Contains("'attn.wq' is f32 33x33 in the file but f64 33x33 in the model"),
                       FormatError);
}

TEST_CASE("checkpoint: wrong magic, a newer format, a checksum mismatch and truncation are named") {
  Fixture f;
  ToyModel<float> model(f.config());
  const std::vector<std::byte> good = bytes_of(snapshot(std::as_const(model)));
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
  CHECK_THROWS_WITH_AS(decode_checkpoint(with(8, 7), "x.tgck"),
                       "load 'x.tgck': format version 7 is newer than this tapegrad reads (1); update tapegrad", FormatError);
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
  CHECK_THROWS_WITH_AS(read_checkpoint("/nonexistent/x.tgck"), "load '/nonexistent/x.tgck': cannot open the file", Error);
}

TEST_CASE("checkpoint: hundreds of truncated and corrupted files all fail cleanly and leave the model untouched") {
  Fixture f;
  ToyModel<float> trained(f.config());
  Trainer trainer(trained, f.split.train, nullptr, f.training(OptimizerKind::sgd));
  for (int i = 0; i < 5; ++i) trainer.step();
  const std::vector<std::byte> good = bytes_of(snapshot(trainer));
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

TEST_CASE("checkpoint: what the fuzzer found stays fixed: an empty file, a boolean byte that is neither 0 nor 1") {
  Fixture f;
  ToyModel<float> model(f.config());
  CHECK_THROWS_WITH_AS(decode_checkpoint(std::vector<std::byte>{}, "x.tgck"), "load 'x.tgck': the file is empty", FormatError);
  // In a weights-only file the last payload byte is the has-training flag; 48 is no bool (reading it
  // into one was undefined behaviour, which UBSan reported).
  auto bad = bytes_of(snapshot(std::as_const(model)));
  REQUIRE(bad.back() == std::byte{0});
  bad.back() = std::byte{48};
  reseal(bad);
  CHECK_THROWS_WITH_AS(decode_checkpoint(bad, "x.tgck"),
                       "load 'x.tgck': corrupt payload: the has-training flag has the byte 48, not a boolean (0 or 1)",
                       FormatError);
}

TEST_CASE("checkpoint: a shape whose element count overflows is refused before anything multiplies it") {
  // Three dimensions of 2^30: each plausible alone, their product (2^90) no integer holds. Computing it
  // was undefined behaviour that a forged file could reach.
  Checkpoint c;
  c.parameters.push_back({"huge", "f32", Shape::batched(Index(1) << 30, Index(1) << 30, Index(1) << 30), {}});
  CHECK_THROWS_WITH_AS(decode_checkpoint(encode_checkpoint(c), "forged.tgck"),
                       "load 'forged.tgck': corrupt payload: a tensor has an invalid shape (rank 3, 1073741824 x "
                       "1073741824 x 1073741824)",
                       FormatError);
}

TEST_CASE("checkpoint: corrupted payloads with a valid checksum decode to an error or a valid checkpoint, never a crash") {
  // What the fuzzer does at scale: damage the payload and re-seal the header, so the decoder itself (not
  // the checksum) meets the damage. A decode may succeed (a flipped weight is still a weight); nothing
  // else may happen but a FormatError.
  Fixture f;
  ToyModel<float> trained(f.config());
  Trainer trainer(trained, f.split.train, nullptr, f.training(OptimizerKind::adam));
  trainer.step();
  const std::vector<std::byte> good = bytes_of(snapshot(trainer));
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
    const TrainConfig config = f.training(kind);
    std::vector<double> straight_losses, resumed_losses;
    ToyModel<float> straight(f.config());
    {
      Trainer t(straight, f.split.train, &f.split.validation, config);
      for (int i = 0; i < 40; ++i) straight_losses.push_back(t.step());
    }
    std::vector<std::byte> saved;
    {
      ToyModel<float> first(f.config());
      Trainer t(first, f.split.train, &f.split.validation, config);
      for (int i = 0; i < 17; ++i) resumed_losses.push_back(t.step());
      saved = bytes_of(snapshot(t));
    }
    ToyModel<float> second(ModelConfig(f.config()) /* same config, fresh objects */);
    Trainer t(second, f.split.train, &f.split.validation, config);
    const LoadReport report = load_training(decode_checkpoint(saved, "mid.tgck"), t);
    CHECK(report.training_state);
    CHECK(t.steps_done() == 17);
    for (int i = 17; i < 40; ++i) resumed_losses.push_back(t.step());
    CHECK(resumed_losses == straight_losses);
    CHECK(values_of(second) == values_of(straight));
  }
}

TEST_CASE("checkpoint: resuming refuses weights-only files, other data, another optimizer or model, and changes nothing") {
  Fixture f;
  ToyModel<float> model(f.config());
  Trainer trainer(model, f.split.train, nullptr, f.training(OptimizerKind::adam));
  for (int i = 0; i < 3; ++i) trainer.step();
  const Checkpoint c = snapshot(trainer);

  ToyModel<float> fresh(f.config());
  Trainer target(fresh, f.split.train, nullptr, f.training(OptimizerKind::adam));
  target.step();
  const auto weights = values_of(fresh);
  const auto optimizer = target.optimizer().state();
  const auto state = target.state();
  auto unchanged = [&] {
    CHECK(values_of(fresh) == weights);
    CHECK(target.optimizer().state().per_param == optimizer.per_param);
    CHECK(target.state().data_order.order == state.data_order.order);
    CHECK(target.steps_done() == 1);
  };
  CHECK_THROWS_WITH_AS(load_training(snapshot(std::as_const(model)), target),
                       "resume: the checkpoint holds weights only, not the state of training", FormatError);
  Checkpoint other_data = c;
  other_data.metadata["data.fingerprint"] = "00000000";
  CHECK_THROWS_WITH_AS(load_training(other_data, target),
                       doctest::Contains("resume: the training data differs from the data the checkpoint was trained on"),
                       FormatError);
  Checkpoint other_model = c;
  other_model.model.residual = true;
  other_model.model.output_projection = true;
  CHECK_THROWS_WITH_AS(load_training(other_model, target), doctest::Contains("resume: the checkpoint's model is"), FormatError);
  Checkpoint bad_buffer = c;
  bad_buffer.training->buffers[0].shape = Shape::mat(1, 1);
  bad_buffer.training->buffers[0].values = {0.0};
  CHECK_THROWS_WITH_AS(load_training(bad_buffer, target), doctest::Contains("load_state:"), ShapeError);
  Checkpoint bad_order = c;
  bad_order.training->trainer.data_order.order[0] = 9999;
  CHECK_THROWS_WITH_AS(load_training(bad_order, target), doctest::Contains("sampler: the saved data order is not a permutation"),
                       ValueError);
  unchanged();

  ToyModel<float> sgd_model(f.config());
  Trainer sgd(sgd_model, f.split.train, nullptr, f.training(OptimizerKind::sgd));
  CHECK_THROWS_WITH_AS(load_training(c, sgd), "resume: the checkpoint was trained with adam, the trainer uses sgd", FormatError);
}

TEST_CASE("checkpoint: a crash at any moment of a save leaves the old file or the new one, never a torn one") {
  Fixture f;
  ModelConfig other = f.config();
  other.seed = 9;  // other weights
  ToyModel<float> a_model(f.config()), b_model(other);
  const Checkpoint a = snapshot(std::as_const(a_model)), b = snapshot(std::as_const(b_model));
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

TEST_CASE("checkpoint: a checkpoint folder keeps the newest N") {
  Fixture f;
  ToyModel<float> model(f.config());
  const Checkpoint c = snapshot(std::as_const(model));
  const fs::path dir = scratch("keep");
  CheckpointDir keep(dir, 3);
  for (std::int64_t step : {100, 200, 300, 400, 500}) keep.save(c, step);
  const auto files = keep.list();
  REQUIRE(files.size() == 3);
  CHECK(files[0].filename() == "checkpoint-00000300.tgck");
  CHECK(keep.latest()->filename() == "checkpoint-00000500.tgck");
  CHECK_THROWS_WITH_AS(CheckpointDir(dir, 0), "checkpoints: keep must be at least 1, got 0", ValueError);
  fs::remove_all(dir);
}
