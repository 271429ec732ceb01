// Steady-state training steps make no heap allocations, counted by a replaced global operator new
// (alloc_counter.cpp, linked into this executable only).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "alloc_counter.hpp"
#include "pin_crossover.hpp"
#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/parallel.hpp"
#include "tapegrad/core/rng.hpp"
#include "tapegrad/layers/decoder_lm.hpp"
#include "tapegrad/layers/transformer.hpp"
#include "lesson/tasks.hpp"
#include "lesson/toy_run.hpp"
#include "tapegrad/train/trainer.hpp"

using namespace tapegrad;
using namespace tapegrad::lesson;

namespace {

// A one-layer, two-head causal attention model over token embeddings, written with the primitive
// ops: every op kind a training step uses appears here.
struct TinyModel {
  static constexpr Index B = 4, T = 6, D = 8, H = 2, V = 5;
  Parameter<float> embed{"embed", Tensor(Shape::mat(V, D))};
  Parameter<float> pos{"pos", Tensor(Shape::mat(T, D))};
  Parameter<float> wq{"wq", Tensor(Shape::mat(D, D))}, wk{"wk", Tensor(Shape::mat(D, D))},
      wv{"wv", Tensor(Shape::mat(D, D))};
  Parameter<float> readout{"readout", Tensor(Shape::mat(D, V))}, bias{"bias", Tensor(Shape::vec(V))};
  Mask causal{Shape::mat(T, T)};

  explicit TinyModel(Rng& rng) {
    for (auto* p : params())
      for (float& x : p->value.span()) x = static_cast<float>(0.3 * rng.normal());
    for (Index r = 0; r < T; ++r)
      for (Index c = r + 1; c < T; ++c) causal.at(r, c) = 1;
  }
  std::array<Parameter<float>*, 7> params() { return {&embed, &pos, &wq, &wk, &wv, &readout, &bias}; }

  Var<float> loss(Tape<float>& t, const Ids& tokens, const Ids& targets) {
    Var<float> x = add(gather_rows(t.param(embed), tokens), t.param(pos));  // (B, T, D)
    Var<float> q = matmul(x, t.param(wq)), k = matmul(x, t.param(wk)), v = matmul(x, t.param(wv));
    std::array<Var<float>, H> heads;
    for (Index h = 0; h < H; ++h) {
      const Index dh = D / H;
      Var<float> scores = scale(matmul_bt(slice_cols(q, h * dh, dh), slice_cols(k, h * dh, dh)), 1 / std::sqrt(dh));
      heads[static_cast<std::size_t>(h)] = matmul(softmax_rows(scores, &causal), slice_cols(v, h * dh, dh));
    }
    Var<float> attended = add(x, gelu(concat_cols(std::span<const Var<float>>(heads))));  // residual
    Var<float> logits = add(matmul(attended, t.param(readout)), t.param(bias));           // (B, T, V)
    return cross_entropy(logits, targets);
  }

  void sgd(float lr) {
    for (auto* p : params()) {
      p->value.array() -= lr * p->grad.array();
      p->zero_grad();
    }
  }
};

// Every row scaled to a root mean square of 1, as a Function whose saved state holds buffers of its own:
//   y = x r,  r = 1 / sqrt(mean(x^2) + eps) per row;  dx += r dy - x r^3 mean(dy x)
struct UnitRows {
  static constexpr const char* name = "unit_rows";
  static constexpr const char* inputs[] = {"x"};
  struct Saved {
    Tensor inv_rms, coefficient;  // (rows, 1)
  };
  void forward(Output<float, Saved>& out, const Tensor& x) const {
    Tensor& y = out.make(x.shape());
    Tensor& r = out.saved().inv_rms;
    r.resize(Shape::mat(x.shape().flat_rows(), 1));
    r.array() = (x.flat().array().square().rowwise().mean() + 1e-6f).rsqrt();
    y.flat().array() = x.flat().array().colwise() * r.array();
  }
  static void backward(const Output<float, Saved>& out, const OpInput<float>& x) {
    Saved& s = out.saved();
    const auto X = x.value.flat().array();
    const auto dY = out.grad().flat().array();
    s.coefficient.resize(s.inv_rms.shape());
    s.coefficient.array() = s.inv_rms.array().cube() * (dY * X).rowwise().mean();
    x.grad.add(dY.colwise() * s.inv_rms.array() - X.colwise() * s.coefficient.array());
  }
};

}  // namespace

TEST_CASE("alloc: an op written as a Function, with buffers in its saved state, allocates nothing in steady state") {
  Rng rng(34);
  Parameter<float> x{"x", Tensor(Shape::batched(3, 5, 8))};
  Tensor projection(x.value.shape());
  for (float& v : x.value.span()) v = static_cast<float>(rng.normal());
  for (float& v : projection.span()) v = static_cast<float>(rng.normal());
  Tape<float> tape;
  auto step = [&] {
    tape.reset();
    Var<float> y = apply(UnitRows{}, {relu(tape.param(x))});  // relu: a library op written the same way
    Var<float> loss = sum(mul(y, tape.constant(projection)));
    tape.backward(loss);
    const bool moved = (x.grad.array() != 0).any();
    x.zero_grad();
    return moved && std::isfinite(loss.value()[0]);
  };
  step();
  step();
  const long before = test::allocation_count();
  bool ok = true;
  for (int i = 0; i < 20; ++i) ok = step() && ok;
  CHECK(test::allocation_count() - before == 0);
  CHECK(ok);
}

TEST_CASE("alloc: a training step in steady state makes no heap allocations") {
  Rng rng(31);
  TinyModel model(rng);
  Ids tokens(Shape::mat(TinyModel::B, TinyModel::T)), targets(Shape::mat(TinyModel::B, TinyModel::T));
  for (Index i = 0; i < tokens.numel(); ++i) {
    tokens[i] = static_cast<std::int32_t>(rng.below(TinyModel::V));
    targets[i] = i % 3 == 0 ? kIgnoreLabel : static_cast<std::int32_t>(rng.below(TinyModel::V));
  }
  Tape<float> tape;
  auto step = [&] {
    tape.reset();
    Var<float> loss = model.loss(tape, tokens, targets);
    tape.backward(loss);
    model.sgd(0.1f);
    return loss.value()[0];
  };
  const float first = step();  // the first step sizes every buffer
  step();
  const long before = test::allocation_count();
  float last = 0;
  for (int i = 0; i < 20; ++i) last = step();
  const long during = test::allocation_count() - before;
  CHECK(during == 0);
  CHECK(std::isfinite(last));
  CHECK(last < first);  // and the steps did train

  // Evaluation without gradients in steady state allocates nothing either.
  tape.set_grad_enabled(false);
  tape.reset();
  model.loss(tape, tokens, targets);
  const long eval_before = test::allocation_count();
  for (int i = 0; i < 5; ++i) {
    tape.reset();
    model.loss(tape, tokens, targets);
  }
  CHECK(test::allocation_count() - eval_before == 0);
}

TEST_CASE("alloc: a step through layer_norm, dropout, row reductions, column broadcasts and the new elementwise ops "
          "allocates nothing in steady state") {
  constexpr Index B = 3, T = 5, D = 8;
  Rng rng(32);
  Parameter<float> x{"x", Tensor(Shape::batched(B, T, D))}, gamma{"gamma", Tensor(Shape::vec(D), 1.0f)},
      beta{"beta", Tensor(Shape::mat(1, D))};
  for (float& v : x.value.span()) v = static_cast<float>(rng.normal());
  const Ids last(Shape::vec(B), {4, 2, 0});
  Rng dropout_rng(33);  // advances every step: a new mask each time, in the same buffers
  Tape<float> tape;
  auto step = [&] {
    tape.reset();
    Var<float> h = dropout(layer_norm(tape.param(x), tape.param(gamma), tape.param(beta)), 0.25, dropout_rng);
    Var<float> shifted = exp(sub(h, row_max(h)));                                     // (B, T, D)
    Var<float> p = div(shifted, row_sum(shifted));                                    // softmax by hand
    Var<float> s = add(sigmoid(h), sqrt(add(mul(h, h), row_mean(mul(h, h)))));      // column broadcasts
    Var<float> flat = log(sigmoid(reshape(h, Shape::mat(B * T, D))));               // (B*T, D)
    Var<float> y = add(mul(p, s), reshape(flat, Shape::batched(B, T, D)));
    Var<float> loss = mean(pick_positions(y, last));
    tape.backward(loss);
    for (auto* q : {&x, &gamma, &beta}) q->zero_grad();
    return loss.value()[0];
  };
  step();
  step();
  const long before = test::allocation_count();
  float last_loss = 0;
  for (int i = 0; i < 20; ++i) last_loss = step();
  CHECK(test::allocation_count() - before == 0);
  CHECK(std::isfinite(last_loss));
}

TEST_CASE("alloc: a Trainer step (batch, forward, backward, clipping, Adam or SGD) allocates nothing in steady state") {
  const auto task = make_task("cycle");
  const TaskSplit split = make_task_split(*task, 500, 10, 10, 1);
  for (auto optimizer : {OptimizerKind::adam, OptimizerKind::sgd, OptimizerKind::adamw}) {
    CAPTURE(to_string(optimizer));
    const ModelConfig config{.vocab = task->tokens().size(), .labels = task->labels().size(), .max_len = task->length(),
                             .heads = 3, .d_head = 4, .output_projection = true, .residual = true};
    ToyRun run({.model = config, .optimizer = optimizer,
                .schedule = {"cosine", to_settings(CosineOptions{.warmup_steps = 5, .total_steps = 100})},
                .training = {.steps = 100, .clip = 1.0}},
               split.train);
    // Two warm-up steps, whatever the schedule: the first meets every scratch size (core/parallel.hpp), the
    // second grows every thread's buffers to them (the tape's reset, the pool's first job), so a worker that
    // is handed a larger piece later finds its buffer already that long (the test below).
    for (int i = 0; i < 2; ++i) run.trainer().step();
    const long before = test::allocation_count();
    for (int i = 0; i < 20; ++i) run.trainer().step();
    CHECK(test::allocation_count() - before == 0);
  }
}

TEST_CASE("alloc: a Trainer step on dense data (a tensor source, a user's loss with a metric) allocates nothing") {
  Rng rng(5);
  Tensor x(Shape::mat(64, 4));
  Ids y(Shape::vec(64));
  for (Index i = 0; i < 64; ++i) {
    for (Index j = 0; j < 4; ++j) x.at(i, j) = static_cast<float>(rng.normal());
    y[i] = static_cast<std::int32_t>(i % 3);
  }
  const TensorSource data("dense", x, y);
  struct Linear1 : Module<float> {
    Parameter<float>* w;
    Parameter<float>* b;
    Linear1() : Module<float>("lin") {
      w = &register_parameter("w", Tensor(Shape::mat(4, 3), 0.1f));
      b = &register_parameter("b", Tensor(Shape::vec(3)));
    }
  } model;
  SGD<float> opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  Trainer trainer(model, opt, data, [&](Tape<float>& t, const TensorBatch& batch) -> StepOutput<float> {
    Var<float> logits = add(matmul(t.constant(batch.features), t.param(*model.w)), t.param(*model.b));
    return {cross_entropy(logits, batch.labels), logits};
  }, {.steps = 100, .batch = 16});
  trainer.add_metric("accuracy", metrics::accuracy);
  for (int i = 0; i < 2; ++i) trainer.step();  // warm-up, as above
  const long before = test::allocation_count();
  for (int i = 0; i < 20; ++i) trainer.step();
  CHECK(test::allocation_count() - before == 0);
}

TEST_CASE("alloc: a Trainer step on a token file's windows (read in place, through a map) allocates nothing") {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("tapegrad_alloc_tokens_{}", ::getpid());
  std::filesystem::create_directories(dir);
  {
    TokenFileWriter w(dir / "t.bin", 1, 256);
    std::string text;
    for (int i = 0; i < 5000; ++i) text += static_cast<char>('a' + i * 7 % 13);
    w.append_bytes(text);
    w.finish();
  }
  std::vector<std::int32_t> map(256, -1);
  for (int b = 0; b < 13; ++b) map[static_cast<std::size_t>('a' + b)] = b;
  const TokenWindows windows = TokenWindows::training(std::make_shared<const TokenFile>(dir / "t.bin"), 8, map);
  DecoderLm<float> model({.vocab = 13, .context = 8, .d_model = 8, .n_heads = 2, .n_layers = 1, .seed = 1});
  AdamW<float> opt(model.parameters(), {.lr = 1e-3});
  Trainer trainer(model, opt, windows, [&](Tape<float>& t, const SequenceBatch& b) -> StepOutput<float> {
    Var<float> logits = model.forward(t, b.tokens, nullptr);
    return {cross_entropy(logits, b.labels), logits};
  }, {.steps = 100, .batch = 4, .clip = 1.0});
  for (int i = 0; i < 2; ++i) trainer.step();  // warm-up, as above
  const long before = test::allocation_count();
  for (int i = 0; i < 20; ++i) trainer.step();
  CHECK(test::allocation_count() - before == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("alloc: a step through a checkpointed TransformerStack (dropout, padding, every block recomputed) allocates "
          "nothing in steady state") {
  // The blocks' forward runs on the tape's sub-tape without gradients, then again with them in backward:
  // the sub-tape keeps its buffers as any tape does, so the recomputations reuse them too.
  Rng rng(34);
  TransformerStack<float> stack(
      "stack", {.n_layers = 3, .block = {.d_model = 8, .n_heads = 2, .dropout = 0.2}, .checkpoint_every = 1}, rng);
  Rng stream(35);
  stack.set_rng(&stream);
  Tensor x0(Shape::batched(2, 5, 8)), projection(Shape::batched(2, 5, 8));
  for (float& v : x0.span()) v = static_cast<float>(rng.normal());
  for (float& v : projection.span()) v = static_cast<float>(rng.normal());
  Mask padding(Shape::mat(2, 5));
  padding.at(1, 4) = 1;
  const auto params = stack.parameters();
  Tape<float> tape;
  auto step = [&] {
    tape.reset();
    Var<float> loss = sum(mul(stack.forward(tape.input(x0), &padding), tape.constant(projection)));
    tape.backward(loss);
    for (auto* p : params) {
      p->value.array() -= 0.01f * p->grad.array();
      p->zero_grad();
    }
    return loss.value()[0];
  };
  step();
  step();
  const long before = test::allocation_count();
  float last = 0;
  for (int i = 0; i < 20; ++i) last = step();
  CHECK(test::allocation_count() - before == 0);
  CHECK(std::isfinite(last));
  CHECK(tape.sub_tape().size() > 0);  // the blocks did run on the sub-tape
}

TEST_CASE("alloc: a worker handed a piece that needs a scratch size met first on another thread allocates nothing") {
  // Pieces go to whichever thread is free, so a worker may first meet a size several steps after the
  // thread that met it first. The slot below is one no op uses, so only this test's sizes are in it.
  constexpr std::size_t slot = detail::kScratchSlots - 1;
  constexpr std::size_t bytes = std::size_t{3} << 20;
  const test::RestoreThreads restore;
  set_num_threads(2);
  // every elementwise job is split, whatever else the machine runs and however long the worker has slept
  const test::PinCrossover always(parallel_crossover().min_macs, 0);
  detail::thread_scratch_bytes(slot, bytes);  // met here first, outside any job
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> worker_ran{false};
  auto job = [&](bool use_scratch) {
    parallel_for(64, threads_for_elements(1e9), [&](Index, Index) {
      if (use_scratch) detail::thread_scratch_bytes(slot, bytes)[bytes - 1] = std::byte{1};
      if (std::this_thread::get_id() != caller) worker_ran.store(true, std::memory_order_relaxed);
      std::this_thread::sleep_for(std::chrono::microseconds(500));  // long enough that the worker takes some
    });
  };
  job(false);  // the pool's workers exist, idle, and were grown when this job started
  worker_ran = false;
  const long before = test::allocation_count();
  // until a worker took a piece (once without OpenMP, which has no worker)
  for (int tries = 0; tries < (have_openmp() ? 50 : 1) && !worker_ran.load(); ++tries) job(true);
  CHECK(test::allocation_count() - before == 0);
  CHECK(worker_ran.load() == have_openmp());  // without OpenMP every piece runs on the caller
  // A thread of the user's own, which has never asked for the slot, gets the length at its next
  // equalize_thread_scratch() (a tape's reset) and then finds it there.
  long in_thread = -1;
  std::thread([&] {
    detail::equalize_thread_scratch();
    const long start = test::allocation_count();
    detail::thread_scratch_bytes(slot, bytes);
    in_thread = test::allocation_count() - start;
  }).join();
  CHECK(in_thread == 0);
}

TEST_CASE("alloc: the counter does count (a check that cannot fail would prove nothing)") {
  const long before = test::allocation_count();
  Tensor t(Shape::mat(10, 10), 1.0f);  // its buffer escapes into the CHECK below, so it cannot be elided
  const long counted = test::allocation_count() - before;
  CHECK(t.array().sum() == 100.0f);
  CHECK(counted >= 1);
}
