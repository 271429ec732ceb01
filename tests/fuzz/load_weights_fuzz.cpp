// libFuzzer target for the loaders' other entry point: a Checkpoint built in memory (its fields are
// public, so a program can fill them with anything), handed to load_weights, model_from_checkpoint and
// restore (a Trainer's parts, and a loop's by hand). Each must load or refuse with a tapegrad::Error; a
// refusal must leave the model, the optimizer and the trainer as they were. The bytes choose the entries:
// names from the parts' and hostile ones, kinds, element types, shapes, list lengths, NaN values, a
// trainer's counters and options, an optimizer's buffers.
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
  static const char* names[] = {"model.hidden.weight", "model.hidden.bias", "model.out.weight", "model.out.bias",
                                "optimizer.kind", "optimizer.params", "optimizer.step", "optimizer.schedule",
                                "optimizer.hyperparameters.lr", "optimizer.state.hidden.weight.exp_avg",
                                "trainer.step", "trainer.options.steps", "trainer.rng", "trainer.data_order.order",
                                "trainer.data_order.cursor", "trainer.curve.values", "trainer.curve.columns",
                                "step", "noise", "", "model", "."};
  if (in.ConsumeBool()) return names[in.ConsumeIntegralInRange<std::size_t>(0, std::size(names) - 1)];
  return in.ConsumeRandomLengthString(64);
}

template <class T>
TensorT<T> tensor_of(FuzzedDataProvider& in) {
  auto dim = [&] { return in.ConsumeIntegralInRange<Index>(0, 9); };
  const int rank = in.ConsumeIntegralInRange<int>(1, 3);
  const Shape shape = rank == 1 ? Shape::vec(dim()) : rank == 2 ? Shape::mat(dim(), dim()) : Shape::batched(dim(), dim(), dim());
  TensorT<T> t(shape);
  for (Index i = 0; i < t.numel(); ++i)
    t[i] = static_cast<T>(in.ConsumeBool() ? in.ConsumeFloatingPoint<double>() : in.ConsumeFloatingPointInRange(-1.0, 1.0));
  return t;
}

StateValue value_of(FuzzedDataProvider& in) {
  const std::size_t n = in.ConsumeIntegralInRange<std::size_t>(0, 12);
  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0: return tensor_of<float>(in);
    case 1: return tensor_of<double>(in);
    case 2: {
      std::vector<std::int64_t> v;
      for (std::size_t i = 0; i < n; ++i) v.push_back(in.ConsumeIntegral<std::int64_t>());
      return v;
    }
    case 3: {
      std::vector<double> v;
      for (std::size_t i = 0; i < n; ++i) v.push_back(in.ConsumeFloatingPoint<double>());
      return v;
    }
    default: {
      std::vector<std::string> v;
      for (std::size_t i = 0; i < n; ++i) v.push_back(in.ConsumeRandomLengthString(12));
      return v;
    }
  }
}

std::uint32_t weights_of(const Module<float>& m) { return weights_crc32(snapshot(m)); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  static const TensorSource points = test::classification_data(64, 1);
  // Most inputs start from a real Trainer's checkpoint, a few entries changed; the others from nothing.
  test::Mlp source({});
  AdamW<float> source_opt(source.parameters(), {.lr = 0.05, .weight_decay = 0.01});
  Trainer<TensorBatch> source_run(source, source_opt, points, [&](Tape<float>& t, const TensorBatch& b) -> StepOutput<float> {
    return cross_entropy(source.forward(t.constant(b.features)), b.labels);
  }, {.steps = 60, .batch = 16, .eval_every = 20, .seed = 2});
  Checkpoint c;
  if (in.ConsumeBool()) {
    for (int i = in.ConsumeIntegralInRange<int>(0, 3); i > 0; --i) source_run.step();
    c = snapshot(source_run);
    for (std::size_t k = in.ConsumeIntegralInRange<std::size_t>(0, 4); k > 0 && !c.entries.empty(); --k) {
      StateEntry& e = c.entries[in.ConsumeIntegralInRange<std::size_t>(0, c.entries.size() - 1)];
      if (in.ConsumeBool()) e.value = value_of(in); else e.name = name_of(in);
    }
  } else {
    c.model.kind = in.ConsumeBool() ? std::string(test::Mlp::kind) : in.ConsumeRandomLengthString(16);
  }
  const std::size_t settings = in.ConsumeIntegralInRange<std::size_t>(0, 6);
  for (std::size_t i = 0; i < settings; ++i)
    c.model.config.push_back({in.ConsumeRandomLengthString(8), in.ConsumeRandomLengthString(12)});
  const std::size_t extra = in.ConsumeIntegralInRange<std::size_t>(0, 6);
  for (std::size_t i = 0; i < extra; ++i) c.entries.push_back({name_of(in), value_of(in)});

  test::Mlp model({});
  for (const bool strict : {true, false})
    for (const bool allow_non_finite : {false, true}) {
      const std::uint32_t was = weights_of(model);
      try {
        load_weights(c, model, {.strict = strict, .allow_non_finite = allow_non_finite});
      } catch (const Error&) {
        if (weights_of(model) != was) __builtin_trap();  // a refusal changed the model
      }
    }
  try {
    (void)model_from_checkpoint<test::Mlp>(c);
  } catch (const Error&) {
  }
  test::Mlp trained({});
  AdamW<float> opt(trained.parameters(), {.lr = 0.05, .weight_decay = 0.01});
  Trainer<TensorBatch> trainer(trained, opt, points, [&](Tape<float>& t, const TensorBatch& b) -> StepOutput<float> {
    return cross_entropy(trained.forward(t.constant(b.features)), b.labels);
  }, {.steps = 60, .batch = 16, .eval_every = 20, .seed = 2});
  const std::vector<std::byte> before = encode_checkpoint(snapshot(trainer));
  try {
    restore(c, trainer);
  } catch (const Error&) {
    if (encode_checkpoint(snapshot(trainer)) != before) __builtin_trap();
  }
  Index step = 0;
  Rng noise(3);
  const StateParts loop = {{"model", model}, {"optimizer", opt}, {"step", step}, {"noise", noise}};
  const std::vector<std::byte> loop_before = encode_checkpoint(snapshot(loop));
  try {
    restore(c, loop, {.strict = in.ConsumeBool()});
  } catch (const Error&) {
    if (encode_checkpoint(snapshot(loop)) != loop_before) __builtin_trap();
  }
  return 0;
}
