// autograd/activation_checkpoint.hpp and TransformerStackOptions::checkpoint_every: a checkpointed region
// gives the plain run's loss and gradients bit for bit (float and double, dropout on and off, both
// attention modes, an input read again after the region, nested regions), keeps only its boundaries on the
// outer tape, changes nothing with gradients off (evaluation, cached generation), and refuses misuse by
// name. The float64 gradient checks of a checkpointed stack are in the layer catalogue
// (tests/catalogue/layer_checks.cpp); the user wrapper's is here; the steady-state allocation count is in
// tests/test_alloc.cpp.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "tapegrad/autograd/activation_checkpoint.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/layers/decoder_lm.hpp"
#include "tapegrad/layers/dropout.hpp"
#include "tapegrad/layers/linear.hpp"
#include "tapegrad/layers/transformer.hpp"

using namespace tapegrad;

namespace {

// Empty when a and b have the same shape and the same bits; otherwise where they first differ.
template <class T>
std::string bit_difference(const TensorT<T>& a, const TensorT<T>& b) {
  if (a.shape() != b.shape()) return fmt::format("shapes differ: {} vs {}", a.shape(), b.shape());
  for (Index i = 0; i < a.numel(); ++i)
    if (std::memcmp(a.data() + i, b.data() + i, sizeof(T)) != 0)
      return fmt::format("element {} of {}: {:.17g} vs {:.17g}", i, a.shape(), static_cast<double>(a[i]),
                         static_cast<double>(b[i]));
  return {};
}

// The loss and every parameter's gradient of one step, and the random stream's state after it.
template <class T>
struct StepResult {
  TensorT<T> loss;
  std::vector<TensorT<T>> grads;
  Rng::State stream_after;
};

// Empty when `other` has the plain step's loss, every parameter's gradient and stream state, bit for bit;
// otherwise what differs.
template <class T>
std::string step_difference(const StepResult<T>& plain, const StepResult<T>& other,
                            const std::vector<Parameter<T>*>& params) {
  std::string out;
  auto note = [&](const std::string& what, const std::string& difference) {
    if (!difference.empty()) out += fmt::format("{}: {}; ", what, difference);
  };
  note("loss", bit_difference(plain.loss, other.loss));
  if (plain.grads.size() != params.size() || other.grads.size() != params.size())
    return out + fmt::format("{} and {} gradients for {} parameters", plain.grads.size(), other.grads.size(), params.size());
  for (std::size_t k = 0; k < params.size(); ++k)
    note(fmt::format("gradient of {}", params[k]->name), bit_difference(plain.grads[k], other.grads[k]));
  // The recomputation left the dropout stream where it was.
  if (!(plain.stream_after == other.stream_after)) out += "the stream's state after the step; ";
  return out;
}

// One training step of a DecoderLm (cross-entropy on every position) from the stream state `start`, with
// the stack's blocks checkpointed every `every` (0: none).
template <class T>
StepResult<T> lm_step(DecoderLm<T>& model, Rng& stream, const Rng::State& start, Index every, Tape<T>& tape,
                      const Ids& tokens, const Ids& labels) {
  model.stack().set_checkpoint_every(every);
  model.zero_grad();
  stream.set_state(start);
  tape.reset();
  Var<T> loss = cross_entropy(model.forward(tape, tokens, nullptr), labels);
  tape.backward(loss);
  StepResult<T> r{loss.value(), {}, stream.state()};
  for (auto* p : model.parameters()) r.grads.push_back(p->grad);
  return r;
}

// One step of `module` from the stream state `start`: loss_of(x) for x = tape.input(x0), walked back; x's
// gradient in dx.
template <class T, class LossOf>
StepResult<T> input_step(Module<T>& module, Rng& stream, const Rng::State& start, Tape<T>& tape, const TensorT<T>& x0,
                         LossOf loss_of, TensorT<T>& dx) {
  module.zero_grad();
  stream.set_state(start);
  tape.reset();
  Var<T> x = tape.input(x0);
  Var<T> loss = loss_of(x);
  tape.backward(loss);
  dx = x.grad();
  StepResult<T> r{loss.value(), {}, stream.state()};
  for (auto* p : module.parameters()) r.grads.push_back(p->grad);
  return r;
}


// A user's module: x (B, T, D) -> Linear -> tanh -> dropout -> Linear.
template <class T>
struct UserMlp : Module<T> {
  Rng init{4};
  Linear<T> in{"in", {.in = 4, .out = 6}, init}, out{"out", {.in = 6, .out = 4}, init};
  Dropout<T> drop{"drop", 0.3};
  UserMlp() : Module<T>("mlp") {
    this->register_child(in);
    this->register_child(out);
    this->register_child(drop);
  }
  Var<T> forward(Var<T> x) { return out.forward(drop.forward(tanh(in.forward(x)))); }
};

// x + mlp(x) * mlp(x)' where the second application is a nested checkpoint inside the first, and x is read
// again after the region: its gradient is added to by the region and by the ops around it.
template <class T>
Var<T> user_model(UserMlp<T>& mlp, Var<T> x, bool checkpointed) {
  auto inner = [&mlp](Var<T> h) { return mlp.forward(h); };
  auto region = [&mlp, inner, checkpointed](Var<T> h) {
    Var<T> once = mlp.forward(h);
    return mul(once, checkpointed ? checkpoint(h, mlp.rng(), inner) : inner(h));
  };
  Var<T> y = checkpointed ? checkpoint(x, mlp.rng(), region) : region(x);
  return add(y, tanh(x));
}

}  // namespace

TEST_CASE_TEMPLATE("activation checkpoint: a checkpointed stack gives the plain run's loss and gradients bit for bit",
                   T, double, float) {
  for (const AttentionMode mode : {AttentionMode::learnable, AttentionMode::parameter_free})
    for (const double dropout : {0.0, 0.2}) {
      CAPTURE(to_string(mode));
      CAPTURE(dropout);
      DecoderLm<T> model({.vocab = 7, .context = 6, .d_model = 8, .n_heads = 2, .n_layers = 3, .d_ff = 12,
                          .attention = mode, .dropout = dropout, .seed = 5});
      Rng stream(9);
      model.set_rng(&stream);
      Rng data(3);
      Ids tokens(Shape::mat(3, 6)), labels(Shape::mat(3, 6));
      for (Index i = 0; i < tokens.numel(); ++i) {
        tokens[i] = static_cast<std::int32_t>(data.below(7));
        labels[i] = static_cast<std::int32_t>(data.below(7));
      }
      const Rng::State start = stream.state();
      Tape<T> plain_tape, tape;
      const StepResult<T> plain = lm_step(model, stream, start, 0, plain_tape, tokens, labels);
      if (dropout > 0) CHECK(plain.stream_after != start);  // the masks were drawn: the replay is tested
      const auto params = model.parameters();
      for (const Index every : {1, 2, 1}) {  // the third step reuses the tape's buffers, the sub-tape's too
        CAPTURE(every);
        CHECK(step_difference(plain, lm_step(model, stream, start, every, tape, tokens, labels), params) == "");
      }
      // The outer tape kept one node per checkpointed block, where the plain recording kept every node of
      // it: the sub-tape holds one block's recording (and the leaf standing for its input).
      const std::size_t block_nodes = tape.sub_tape().size() - 1, blocks = 3;
      CHECK(block_nodes > 10);
      CHECK(tape.size() == plain_tape.size() - blocks * block_nodes + blocks);
      // Every parameter a checkpointed block read is listed as read (check_registered sees them).
      CHECK(tape.parameters_read().size() == plain_tape.parameters_read().size());
      CHECK_NOTHROW(check_registered(tape, model));
    }
}

TEST_CASE("activation checkpoint: a stack with key padding: the input's gradient too, bit for bit, read after it") {
  for (const AttentionMode mode : {AttentionMode::learnable, AttentionMode::parameter_free}) {
    CAPTURE(to_string(mode));
    Rng rng(12);
    const TransformerBlockOptions block{.mode = mode, .d_model = 8, .n_heads = 2, .dropout = 0.25};
    TransformerStack<float> stack("stack", {.n_layers = 2, .block = block}, rng);
    Rng stream(13);
    stack.set_rng(&stream);
    Mask padding(Shape::mat(2, 5));
    padding.at(1, 3) = 1;
    padding.at(1, 4) = 1;
    const Tensor x0 = test::random_tensor<float>(Shape::batched(2, 5, 8), rng);
    const Tensor projection = test::random_tensor<float>(Shape::batched(2, 5, 8), rng);
    const Rng::State start = stream.state();
    auto step = [&](Index every, Tape<float>& tape, Tensor& dx) {
      stack.set_checkpoint_every(every);
      return input_step(stack, stream, start, tape, x0, [&](Var<float> x) {
        return sum(mul(add(stack.forward(x, &padding), x), tape.constant(projection)));
      }, dx);
    };
    Tape<float> plain_tape, tape;
    Tensor plain_dx, dx;
    const StepResult<float> plain = step(0, plain_tape, plain_dx);
    for (const Index every : {1, 2}) {
      CAPTURE(every);
      CHECK(step_difference(plain, step(every, tape, dx), stack.parameters()) == "");
      CHECK(bit_difference(plain_dx, dx) == "");
    }
  }
}

TEST_CASE_TEMPLATE("activation checkpoint: a user's module through checkpoint(), nested, its input read after it: bit for bit",
                   T, float, double) {
  UserMlp<T> mlp;
  Rng stream(21);
  mlp.set_rng(&stream);
  Rng data(8);
  const TensorT<T> x0 = test::random_tensor<T>(Shape::batched(2, 3, 4), data);
  const TensorT<T> projection = test::random_tensor<T>(Shape::batched(2, 3, 4), data);
  const Rng::State start = stream.state();
  auto step = [&](bool checkpointed, Tape<T>& tape, TensorT<T>& dx) {
    return input_step(mlp, stream, start, tape, x0, [&](Var<T> x) {
      return sum(mul(user_model(mlp, x, checkpointed), tape.constant(projection)));
    }, dx);
  };
  Tape<T> plain_tape, tape;
  TensorT<T> plain_dx, dx;
  const StepResult<T> plain = step(false, plain_tape, plain_dx);
  for (int again = 0; again < 2; ++again) {
    CHECK(step_difference(plain, step(true, tape, dx), mlp.parameters()) == "");
    CHECK(bit_difference(plain_dx, dx) == "");
  }
}

TEST_CASE("activation checkpoint: gradcheck of a user's module through checkpoint(), float64, with dropout") {
  UserMlp<double> mlp;
  Rng stream(30);
  mlp.set_rng(&stream);
  const Rng::State start = stream.state();
  Rng data(31);
  // Every evaluation the check makes draws the same masks: the stream starts where it did each time.
  const GradcheckFn f = [&](Tape<double>&, std::span<const Var<double>> in) {
    stream.set_state(start);
    return user_model(mlp, in[0], true);
  };
  const auto params = mlp.parameters();
  const GradcheckReport report =
      gradcheck(f, {{"x", test::random_tensor(Shape::batched(2, 3, 4), data)}}, params, kStrictGradcheck);
  CHECK_GRADCHECK(report);
  CHECK(report.checked == 24 + mlp.count_parameters());  // every element of x and of every parameter
}

TEST_CASE("activation checkpoint: with gradients off it is the plain forward, and cached generation is unchanged") {
  for (const AttentionMode mode : {AttentionMode::learnable, AttentionMode::parameter_free}) {
    CAPTURE(to_string(mode));
    DecoderLm<float> model({.vocab = 9, .context = 6, .d_model = 8, .n_heads = 2, .n_layers = 2, .attention = mode,
                            .dropout = 0.5, .seed = 2});
    const Ids tokens(Shape::mat(1, 5), {1, 4, 2, 8, 3});
    Rng stream(4);
    model.set_rng(&stream);
    const Rng::State start = stream.state();
    // Gradients off, in evaluation mode or in training mode (dropout drawing from the stream).
    auto evaluate = [&](Index every, Tape<float>& tape, bool training) {
      model.stack().set_checkpoint_every(every);
      model.train(training);
      stream.set_state(start);
      NoGradGuard<float> off(tape);
      tape.reset();
      return model.forward(tape, tokens, nullptr).value();
    };
    for (const bool training : {false, true}) {
      CAPTURE(training);
      Tape<float> plain_tape, tape;
      const Tensor plain = evaluate(0, plain_tape, training);
      const Rng::State plain_after = stream.state();
      CHECK(bit_difference(plain, evaluate(1, tape, training)) == "");
      CHECK(stream.state() == plain_after);
      CHECK(tape.size() == plain_tape.size());  // the same recording: no checkpoint nodes, no sub-tape work
      CHECK(tape.sub_tape().size() == 0);
    }

    model.train();
    model.stack().set_checkpoint_every(0);
    const std::vector<std::int32_t> prompt = {1, 2};
    const auto cached = sample(model, prompt, {.count = 12, .seed = 7, .cache = true});
    const auto uncached = sample(model, prompt, {.count = 12, .seed = 7, .cache = false});
    model.stack().set_checkpoint_every(1);
    CHECK(sample(model, prompt, {.count = 12, .seed = 7, .cache = true}) == cached);
    CHECK(sample(model, prompt, {.count = 12, .seed = 7, .cache = false}) == uncached);
  }
}

TEST_CASE("activation checkpoint: the setting is how a model runs, not what it is: its record and file are unchanged") {
  DecoderLm<float> model({.vocab = 9, .context = 6, .d_model = 8, .n_heads = 2, .n_layers = 3, .seed = 2});
  CHECK(model.stack().options().checkpoint_every == 0);  // off unless asked
  const ModelRecord before = model.model_record();
  model.stack().set_checkpoint_every(2);
  CHECK(model.model_record() == before);
  CHECK(model.stack().checkpointed(0));
  CHECK_FALSE(model.stack().checkpointed(1));
  CHECK(model.stack().checkpointed(2));
}

TEST_CASE("activation checkpoint: misuse is refused by name") {
  Rng rng(1);
  CHECK_THROWS_WITH_AS(TransformerStack<float>("stack", {.block = {.d_model = 4}, .checkpoint_every = -1}, rng),
                       "transformer_stack 'stack': checkpoint_every must be >= 0 (0: off), got -1", ValueError);
  TransformerStack<float> stack("stack", {.block = {.d_model = 4}}, rng);
  CHECK_THROWS_WITH_AS(stack.set_checkpoint_every(-2),
                       "transformer_stack 'stack': checkpoint_every must be >= 0 (0: off), got -2", ValueError);

  Tape<float> tape, other;
  const unsigned x_line = __LINE__ + 1;
  Var<float> x = tape.input(Tensor(Shape::mat(2, 3), 1.0f));
  const std::size_t nodes = tape.size();
  Var<float> elsewhere = other.input(Tensor(Shape::mat(2, 3), 1.0f));
  CHECK_THROWS_WITH_AS(checkpoint(x, nullptr, [&](Var<float>) { return elsewhere; }),
                       "checkpoint: the function returned a Var of another tape; it must compute its result from the "
                       "Var it is given (on the tape's sub-tape), not return a Var recorded elsewhere",
                       UsageError);
  // A Var of the outer tape captured inside the region is refused by the op that reads it.
  CHECK_THROWS_WITH_AS(checkpoint(x, nullptr, [&](Var<float> h) { return add(h, x); }),
                       "add: b belongs to a different tape than the op's other arguments", UsageError);
  CHECK(tape.size() == nodes);  // the refusals recorded nothing on the outer tape
  CHECK_THROWS_WITH_AS(other.outer_input(x),
                       fmt::format("outer_input: input (recorded at tests/test_activation_checkpoint.cpp:{}) takes a "
                                   "gradient, which exists only while its tape is walked back; record with gradients "
                                   "off here (NoGradGuard), or from within that tape's backward()",
                                   x_line)
                           .c_str(),
                       UsageError);
  CHECK_THROWS_WITH_AS(tape.outer_input(x),
                       "outer_input: the outer Var belongs to this tape; it stands for a Var of another tape",
                       UsageError);
}

TEST_CASE("activation checkpoint: a region whose recomputation differs from its forward (dropout's stream not passed) "
          "is refused in backward, not given another function's gradients") {
  UserMlp<double> mlp;
  Rng stream(9);
  mlp.set_rng(&stream);  // the dropout draws from it, but checkpoint() is not told
  Tape<double> tape;
  Rng data(3);
  Var<double> x = tape.input(test::random_tensor(Shape::batched(2, 3, 4), data));
  Var<double> y = checkpoint(x, nullptr, [&mlp](Var<double> h) { return mlp.forward(h); });
  CHECK_THROWS_WITH_AS(tape.backward(sum(y)),
                       "checkpoint: the region's output recomputed in backward differs from its forward's; it must "
                       "compute the same thing both times: pass the random stream it draws from (dropout) as "
                       "checkpoint's rng, and change nothing it reads before backward",
                       UsageError);
  // Given the stream, the same region is replayed and walks back.
  tape.reset();
  Var<double> again = tape.input(test::random_tensor(Shape::batched(2, 3, 4), data));
  tape.backward(sum(checkpoint(again, mlp.rng(), [&mlp](Var<double> h) { return mlp.forward(h); })));
  CHECK(all_finite(again.grad()));
}

TEST_CASE("activation checkpoint: the documentation's calls turn it on for a stack and for a module of one's own") {
  Rng rng(6), stream(7);
  DecoderLm<float> model({.vocab = 7, .context = 4, .d_model = 8, .n_heads = 2, .n_layers = 3, .seed = 1});
  UserMlp<float> mlp;
  mlp.set_rng(&stream);
  Tape<float> tape;
  const Tensor x0 = test::random_tensor<float>(Shape::batched(2, 3, 4), rng);
  Var<float> x = tape.input(x0);
  const Rng::State start = stream.state();

// [readme:activation-checkpoint]
// A stack's blocks 0, k, 2k, ... (1: every block; 0, the default: none), in its options or on a built model:
TransformerStack<float> stack("stack", {.n_layers = 4, .block = {.d_model = 8}, .checkpoint_every = 1}, rng);
model.stack().set_checkpoint_every(2);  // a DecoderLm, built or loaded from a checkpoint

// A module of your own: y = mlp.forward(x), its intermediates recomputed in backward with the same dropout
// masks (mlp's random stream is put back where it was for the recomputation):
Var<float> y = checkpoint(x, mlp.rng(), [&mlp](Var<float> h) { return mlp.forward(h); });
// [readme:activation-checkpoint-end]

  for (std::size_t i = 0; i < 4; ++i) CHECK(stack.checkpointed(i));
  CHECK(model.stack().checkpointed(0));
  CHECK_FALSE(model.stack().checkpointed(1));
  CHECK(model.stack().checkpointed(2));
  // The module's intermediates are not on the tape: one checkpoint node after the input.
  CHECK(tape.size() == 2);
  CHECK(std::string(tape.node_at(1).op) == "checkpoint");
  // Its value is the plain forward's, from the same stream state.
  Tape<float> plain;
  stream.set_state(start);
  CHECK(bit_difference(y.value(), mlp.forward(plain.input(x0)).value()) == "");
}
