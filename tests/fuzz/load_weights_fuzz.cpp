// libFuzzer target for the loaders' other entry point: a Checkpoint built in memory (its fields are
// public, so a program can fill them with anything), handed to load_weights, load_training and
// model_from_checkpoint. Each must load or refuse with a tapegrad::Error; a refusal must leave the model
// and the trainer as they were. The bytes choose the records: names from the model's and hostile ones,
// element types, shapes (negative, huge, overflowing), value counts that may not match, NaN values, a
// training record with buffers, counters and options.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "user_models.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"
#include "tapegrad/train/trainer.hpp"

using namespace tapegrad;

namespace {

std::string name_of(FuzzedDataProvider& in) {
  static const char* names[] = {"hidden.weight", "hidden.bias", "out.weight", "out.bias", ""};
  if (in.ConsumeBool()) return names[in.ConsumeIntegralInRange<std::size_t>(0, std::size(names) - 1)];
  return in.ConsumeRandomLengthString(64);
}

TensorRecord record_of(FuzzedDataProvider& in, std::string name) {
  TensorRecord r;
  r.name = std::move(name);
  static const char* dtypes[] = {"f32", "f64", "f16", ""};
  r.dtype = dtypes[in.ConsumeIntegralInRange<std::size_t>(0, std::size(dtypes) - 1)];
  const Index dims[] = {-1, 0, 1, 2, 8, 1 << 20, Index{1} << 40, std::numeric_limits<Index>::max()};
  auto dim = [&] { return in.ConsumeBool() ? dims[in.ConsumeIntegralInRange<std::size_t>(0, std::size(dims) - 1)]
                                           : in.ConsumeIntegralInRange<Index>(0, 9); };
  r.shape = {in.ConsumeIntegralInRange<int>(0, 4), dim(), dim(), dim()};
  const std::size_t n = in.ConsumeIntegralInRange<std::size_t>(0, 80);
  for (std::size_t i = 0; i < n; ++i)
    r.values.push_back(in.ConsumeBool() ? in.ConsumeFloatingPoint<double>() : in.ConsumeFloatingPointInRange(-1.0, 1.0));
  return r;
}

std::uint32_t weights_of(const Module<float>& m) { return weights_crc32(snapshot(m)); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  Checkpoint c;
  c.model.kind = in.ConsumeBool() ? std::string(test::Mlp::kind) : in.ConsumeRandomLengthString(16);
  const std::size_t settings = in.ConsumeIntegralInRange<std::size_t>(0, 6);
  for (std::size_t i = 0; i < settings; ++i)
    c.model.config.push_back({in.ConsumeRandomLengthString(8), in.ConsumeRandomLengthString(12)});
  const std::size_t records = in.ConsumeIntegralInRange<std::size_t>(0, 6);
  for (std::size_t i = 0; i < records; ++i) c.parameters.push_back(record_of(in, name_of(in)));
  const bool training = in.ConsumeBool();
  if (training) {
    TrainingRecord t;
    t.optimizer.kind = in.ConsumeBool() ? "adamw" : in.ConsumeRandomLengthString(8);
    t.optimizer.hyperparameters = {{"lr", "0.05"}, {"beta1", "0.9"}, {"beta2", "0.999"}, {"eps", "1e-08"}, {"weight_decay", "0.01"}};
    t.optimizer.step = in.ConsumeIntegral<std::int64_t>();
    const std::size_t buffers = in.ConsumeIntegralInRange<std::size_t>(0, 4);
    for (std::size_t i = 0; i < buffers; ++i) t.optimizer.buffers.push_back(record_of(in, name_of(in) + "/exp_avg"));
    t.trainer.options = {.steps = in.ConsumeIntegral<std::int64_t>(), .batch = 16, .eval_every = 20, .seed = 2};
    t.trainer.step = in.ConsumeIntegral<std::int64_t>();
    t.trainer.window_steps = in.ConsumeIntegral<std::int64_t>();
    t.trainer.data_order.cursor = in.ConsumeIntegral<std::int64_t>();
    c.training = std::move(t);
  }

  test::Mlp model({});
  const std::uint32_t before = weights_of(model);
  for (const bool strict : {true, false})
    for (const bool allow_non_finite : {false, true}) {
      const std::uint32_t was = weights_of(model);
      try {
        load_weights(c, model, {.strict = strict, .allow_non_finite = allow_non_finite});
      } catch (const Error&) {
        if (weights_of(model) != was) __builtin_trap();  // a refusal changed the model
      }
    }
  (void)before;
  try {
    (void)model_from_checkpoint<test::Mlp>(c);
  } catch (const Error&) {
  }
  if (training) {
    static const TensorSource data = test::classification_data(64, 1);
    test::Mlp trained({});
    AdamW<float> opt(trained.parameters(), {.lr = 0.05, .weight_decay = 0.01});
    Trainer<TensorBatch> trainer(trained, opt, data, [&](Tape<float>& t, const TensorBatch& b) -> StepOutput<float> {
      return cross_entropy(trained.forward(t.constant(b.features)), b.labels);
    }, {.steps = 60, .batch = 16, .eval_every = 20, .seed = 2});
    const std::uint32_t was = weights_of(trained);
    const Index step = trainer.steps_done();
    try {
      load_training(c, trainer);
    } catch (const Error&) {
      if (weights_of(trained) != was || trainer.steps_done() != step) __builtin_trap();
    }
  }
  return 0;
}
