// autograd/tape: recording, backward, reset, misuse of Vars, saved state, the bytes held, no-grad mode, anomaly
// detection.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "tapegrad/autograd/activation_checkpoint.hpp"
#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/rng.hpp"
#include "helpers.hpp"

using namespace tapegrad;

TEST_CASE("tape: backward adds into parameters, across recordings, a second walk of one recording is refused") {
  Parameter<double> w("w", TensorD(Shape::mat(2, 2), {1, 2, 3, 4}));
  Tape<double> tape;
  auto record = [&] {
    Var<double> x = tape.constant(TensorD(Shape::mat(1, 2), {5, 7}));
    return sum(matmul(x, tape.param(w)));  // y = 5 (w00 + w01) + 7 (w10 + w11)
  };
  Var<double> y = record();
  CHECK(y.value()[0] == 5 * 3 + 7 * 7);
  tape.backward(y);
  CHECK(w.grad == TensorD(Shape::mat(2, 2), {5, 5, 7, 7}));
  // Walking the same recording back again would add every gradient twice: a UsageError, nothing added.
  CHECK_THROWS_WITH_AS(tape.backward(y),
                       "backward: this tape was already walked back since its last reset(); again would add every "
                       "gradient a second time (add the losses before one backward, or reset() and record again)",
                       UsageError);
  CHECK(w.grad == TensorD(Shape::mat(2, 2), {5, 5, 7, 7}));
  tape.reset();
  tape.backward(record());  // a new recording: gradients accumulate until zero_grad, as in PyTorch
  CHECK(w.grad == TensorD(Shape::mat(2, 2), {10, 10, 14, 14}));
  w.zero_grad();
  CHECK(w.grad == TensorD(Shape::mat(2, 2)));
}

TEST_CASE("tape: a Var used twice gets both contributions and intermediate gradients are readable") {
  Tape<double> tape;
  Var<double> x = tape.input(TensorD(Shape::vec(3), {1, -2, 3}));
  Var<double> sq = mul(x, x);
  Var<double> y = sum(sq);
  tape.backward(y);
  CHECK(x.grad() == TensorD(Shape::vec(3), {2, -4, 6}));  // d sum(x^2) = 2x
  CHECK(sq.grad() == TensorD(Shape::vec(3), {1, 1, 1}));
  CHECK(tape.size() == 3);
}

TEST_CASE("tape: releasing gradients gives the same bits and holds only the live ones, and refuses inner ones") {
  // A chain of 12 ops whose middle value is read twice (two paths back), a leaf input, two parameters.
  Parameter<double> w("w", TensorD(Shape::mat(6, 6), 0.0)), v("v", TensorD(Shape::mat(6, 6), 0.0));
  Rng rng(4);
  for (auto* p : {&w, &v})
    for (double& x : p->value.span()) x = 0.4 * rng.normal();
  const TensorD features(Shape::mat(5, 6), 0.3);
  struct Result {
    TensorD dw, dv, dx;
    std::size_t bytes;
  };
  auto run = [&](bool release) {
    Tape<double> tape;
    tape.set_release_grads(release);
    Result r;
    for (int step = 0; step < 3; ++step) {  // steps reuse the pool's buffers
      tape.reset();
      w.zero_grad();
      v.zero_grad();
      Var<double> x = tape.input(features);
      Var<double> h = matmul(x, tape.param(w));
      for (int k = 0; k < 4; ++k) h = tanh(matmul(h, tape.param(v)));
      Var<double> mid = h;
      for (int k = 0; k < 4; ++k) h = tanh(h);
      Var<double> loss = add(sum(mul(h, mid)), sum(softmax_rows(mid)));
      tape.backward(loss);
      r = {w.grad, v.grad, x.grad(), tape.grad_buffer_bytes()};
      if (release) {
        std::string message;
        try {
          (void)mid.grad();
        } catch (const UsageError& e) {
          message = e.what();
        }
        CHECK(message.starts_with("grad: tanh (recorded at tests/test_tape.cpp:"));
        CHECK(message.ends_with(") is not a leaf, and this tape releases such gradients once backward has passed them "
                                "(set_release_grads(false) keeps them)"));
        CHECK(tape.grad_at(mid.index) == nullptr);
      }
    }
    return r;
  };
  const Result kept = run(false), released = run(true);
  CHECK(released.dw == kept.dw);  // bit for bit: the same arithmetic in other buffers
  CHECK(released.dv == kept.dv);
  CHECK(released.dx == kept.dx);
  CHECK(released.bytes * 3 < kept.bytes);  // 16 gradients of 5 x 6 kept; a few alive at once released
}

TEST_CASE("tape: reset keeps every buffer, so the next step reuses them") {
  Tape<double> tape;
  Parameter<double> w("w", TensorD(Shape::mat(3, 3), 0.5));
  auto step = [&] {
    Var<double> x = tape.constant(TensorD(Shape::mat(4, 3), 1.0));
    Var<double> h = tanh(matmul(x, tape.param(w)));
    tape.backward(sum(h));
    return h;
  };
  Var<double> first = step();
  const double* value_buffer = first.value().data();
  tape.reset();
  Var<double> second = step();
  CHECK(std::size_t{second.index} == std::size_t{first.index});
  CHECK(second.value().data() == value_buffer);
}

TEST_CASE("tape: bytes counts values, gradients and saved state, grows with the recording and holds still from "
          "one identical step to the next") {
  const TensorD ones(Shape::vec(8), 1.0), zeros(Shape::vec(8), 0.0);
  Parameter<double> w("w", TensorD(Shape::mat(8, 8), 0.25));
  Var<double> normed;
  // rows x 8 inputs through a product and layer_norm, whose saved state (each row's mean and rstd, in
  // double) lives on the heap, then a sum of squares.
  auto step = [&](Tape<double>& tape, Index rows) {
    tape.reset();
    TensorD x(Shape::mat(rows, 8));
    for (Index i = 0; i < x.numel(); ++i) x[i] = 0.01 * static_cast<double>(i % 13);
    normed = layer_norm(matmul(tape.constant(x), tape.param(w)), tape.constant(ones), tape.constant(zeros));
    tape.backward(sum(mul(normed, normed)));
  };
  Tape<double> small, big;
  step(small, 4);
  const std::size_t first = small.bytes();
  for (int i = 0; i < 3; ++i) {
    step(small, 4);
    CHECK(small.bytes() == first);
  }
  small.reset();  // keeps every buffer, so the bytes they hold
  CHECK(small.bytes() == first);

  step(big, 400);
  const std::size_t d = sizeof(double);
  // The op's own statistics, two doubles a row, and not a copy of x (backward recomputes xhat from it).
  CHECK(big.node_at(normed.index).saved.heap_bytes() >= 400 * 2 * sizeof(double));
  CHECK(big.node_at(normed.index).saved.heap_bytes() < 400 * 8 * d);
  // 396 more rows: four values of 8 columns (the input, the product, the norm, the squares) and the
  // norm's saved state at least.
  CHECK(big.bytes() >= first + 4 * 396 * 8 * d + 396 * 2 * sizeof(double));

  // Released gradients go to the tape's pool and come back from it: still the same bytes step after step.
  Tape<double> released;
  released.set_release_grads(true);
  step(released, 400);
  const std::size_t with_release = released.bytes();
  step(released, 400);
  CHECK(released.bytes() == with_release);

  // A checkpointed region is recorded on the sub-tape, which the outer tape's bytes include: the region's two
  // tanh values there, the input and the region's output on the outer tape.
  Tape<double> outer;
  Var<double> y = checkpoint(outer.input(TensorD(Shape::mat(400, 8), 0.5)), nullptr,
                             [](Var<double> h) { return tanh(tanh(h)); });
  outer.backward(sum(y));
  CHECK(outer.sub_tape().bytes() >= 2 * 400 * 8 * d);
  CHECK(outer.bytes() >= outer.sub_tape().bytes() + 2 * 400 * 8 * d);
}

TEST_CASE("tape: a node reused by an op with another kind of saved state computes what a fresh tape computes") {
  // Each node holds scale's state (a number), then dropout's (a mask tensor),
  // then scale's again, then layer_norm's (tensors, another type), and so on; with 300 nodes a step the
  // chain also crosses from one chunk of nodes into the next.
  const TensorD x0(Shape::mat(2, 3), {0.5, -1, 2, 0.25, 3, -0.75});
  const TensorD ones(Shape::vec(3), 1.0), zeros(Shape::vec(3), 0.0);
  auto record = [&](Tape<double>& tape, Rng& rng, int kind) {
    Var<double> x = tape.input(x0);
    Var<double> v = x;
    for (int i = 0; i < 300; ++i) {
      if (kind == 0) v = scale(v, 1.001);
      if (kind == 1) v = dropout(v, 0.01, rng);
      if (kind == 2) v = layer_norm(v, tape.constant(ones), tape.constant(zeros));
    }
    tape.backward(sum(mul(v, v)));
    return std::pair{x, v};
  };
  Tape<double> reused;
  for (int kind : {0, 1, 0, 2, 1, 0, 2}) {
    Rng rng_a(7), rng_b(7);
    reused.reset();
    const auto a = record(reused, rng_a, kind);
    Tape<double> fresh;
    const auto b = record(fresh, rng_b, kind);
    INFO("kind " << kind);
    CHECK(a.second.value() == b.second.value());
    CHECK(a.first.grad() == b.first.grad());
  }
}

TEST_CASE("tape: misused Vars are clear errors, not undefined behaviour") {
  Tape<double> tape, other;
  Var<double> a = tape.input(TensorD(Shape::mat(2, 2), 1.0));
  Var<double> b = other.input(TensorD(Shape::mat(2, 2), 1.0));
  CHECK_THROWS_WITH_AS(matmul(a, b), "matmul: b belongs to a different tape than the op's other arguments",
                       UsageError);
  CHECK_THROWS_WITH_AS(add(a, Var<double>{}), "add: b is an empty Var (default-constructed)", UsageError);
  CHECK_THROWS_WITH_AS(relu(Var<double>{}), "relu: x is an empty Var (default-constructed)", UsageError);
  // A list's first part and a layer's argument (Tape::of) are refused in the same words.
  const std::vector<Var<double>> parts = {Var<double>{}, a};
  CHECK_THROWS_WITH_AS(concat_cols(std::span<const Var<double>>(parts)),
                       "concat_cols: part 0 is an empty Var (default-constructed)", UsageError);
  CHECK_THROWS_WITH_AS(Tape<double>::of("my_layer", {{"x", Var<double>{}}, {"h", a}}),
                       "my_layer: x is an empty Var (default-constructed)", UsageError);
  tape.reset();
  CHECK_THROWS_WITH_AS(relu(a), "relu: x was recorded before the last reset() of its tape; record it again",
                       UsageError);
  CHECK_THROWS_WITH_AS(a.value(), "value: the Var was recorded before the last reset() of its tape; record it again",
                       UsageError);
  // A stale Var whose slot has been re-recorded is still caught (the generation differs).
  Var<double> c = tape.input(TensorD(Shape::mat(2, 2), 1.0));
  CHECK(std::size_t{c.index} == std::size_t{a.index});
  CHECK_THROWS_AS(relu(a), UsageError);
  CHECK_NOTHROW(relu(c));
}

TEST_CASE("tape: backward refuses what it cannot do, naming the op and the shapes") {
  Tape<double> tape;
  Var<double> x = tape.input(TensorD(Shape::mat(2, 3), 1.0));
  Var<double> y = relu(x);
  CHECK_THROWS_WITH_AS(tape.backward(y),
                       "backward: the loss must hold one element, but it is 2x3; give a seed gradient to start "
                       "from a larger output",
                       ShapeError);
  CHECK_THROWS_WITH_AS(tape.backward(y, TensorD(Shape::mat(3, 2))),
                       doctest::Contains("backward: the seed gradient is 3x2 but the output relu (recorded at "),
                       ShapeError);
  Var<double> k = sum(tape.constant(TensorD(Shape::mat(2, 2), 1.0)));
  CHECK_THROWS_WITH_AS(tape.backward(k), doctest::Contains("depends on no input or parameter that takes a gradient"),
                       UsageError);
  CHECK_THROWS_WITH_AS(x.grad(), doctest::Contains("grad: no gradient has been computed for input"), UsageError);
  tape.backward(y, TensorD(Shape::mat(2, 3), 2.0));
  CHECK(x.grad() == TensorD(Shape::mat(2, 3), 2.0));
  CHECK_THROWS_WITH_AS(tape.constant(TensorD(Shape::vec(1))).grad(),
                       doctest::Contains("takes no gradient (a constant, or recorded with gradients disabled)"),
                       UsageError);
}

TEST_CASE("tape: a failing op leaves the tape as it was") {
  Tape<double> tape;
  Var<double> a = tape.input(TensorD(Shape::mat(4, 8), 1.0));
  Var<double> b = tape.input(TensorD(Shape::mat(6, 8), 1.0));
  const auto before = tape.size();
  CHECK_THROWS_AS(matmul(a, b), ShapeError);
  CHECK_THROWS_AS(cross_entropy(a, Ids(Shape::vec(4), {0, 1, 9, 2})), ValueError);
  CHECK(tape.size() == before);
  // An op that fails after recording (anomaly mode refusing its output) is dropped too: the next op takes
  // its place and backward sees only the committed graph.
  tape.set_anomaly_detection(true);
  CHECK_THROWS_AS(scale(a, std::numeric_limits<double>::infinity()), ValueError);
  CHECK(tape.size() == before);
  Var<double> c = scale(a, 2.0);
  CHECK(std::size_t{c.index} == before);
  tape.backward(sum(c));
  CHECK(a.grad() == TensorD(Shape::mat(4, 8), 2.0));
}

namespace {

// An op whose forward throws after its make().
struct Broken {
  static constexpr const char* name = "broken";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<double>& out, const TensorD&) const {
    out.make(Shape::vec(2));
    throw ValueError("broken: fails after recording");
  }
  static void backward(const Output<double>&, const OpInput<double>&) {}
};

}  // namespace

TEST_CASE("tape: an op of the user's that throws between record and commit leaves nothing behind") {
  Tape<double> tape;
  Var<double> x = tape.input(TensorD(Shape::vec(2), {1.0, 2.0}));
  auto broken = [&] { apply(Broken{}, {x}); };
  CHECK_THROWS_AS(broken(), ValueError);
  CHECK(tape.size() == 1);
  Var<double> y = relu(x);
  CHECK(std::size_t{y.index} == 1);  // the dropped node's place
  tape.backward(sum(y));
  CHECK(x.grad() == TensorD(Shape::vec(2), 1.0));
}

TEST_CASE("tape: a Var is 16 bytes with a 40-bit generation: 2^32 resets do not make a stale Var valid again") {
  Tape<double> tape;
  Var<double> old = tape.input(TensorD(Shape::vec(1)));
  CHECK(sizeof(old) == 16);  // passed in registers: recording stays cheap
  CHECK(kMaxTapeGeneration == (std::uint64_t{1} << 40) - 1);
  for (int i = 0; i < 1000; ++i) tape.reset();
  Var<double> fresh = tape.input(TensorD(Shape::vec(1)));
  CHECK(std::size_t{fresh.index} == std::size_t{old.index});
  CHECK(std::uint64_t{fresh.generation} == std::uint64_t{old.generation} + 1000);
  CHECK_THROWS_AS(relu(old), UsageError);
  // A 32-bit counter would have wrapped after 2^32 resets and matched `old` again.
  old.generation += std::uint64_t{1} << 32;
  CHECK_THROWS_AS(relu(old), UsageError);
}

TEST_CASE("tape: no-grad mode computes values, records no graph, and refuses backward") {
  Parameter<double> w("w", TensorD(Shape::mat(2, 2), {1, 0, 0, 1}));
  Tape<double> tape;
  {
    NoGradGuard<double> guard(tape);
    Var<double> x = tape.constant(TensorD(Shape::mat(1, 2), {3, 4}));
    Var<double> y = sum(matmul(x, tape.param(w)));
    CHECK(y.value()[0] == 7);
    CHECK_FALSE(tape.node_at(y.index).requires_grad);
    CHECK(tape.node_at(y.index).input_count == 0);
    CHECK_THROWS_AS(tape.backward(y), UsageError);
  }
  CHECK(tape.grad_enabled());
  CHECK(w.grad == TensorD(Shape::mat(2, 2)));
}

namespace {

// A user's op: y = x^2 with a deliberately broken backward that writes NaN, to exercise anomaly detection
// of gradients.
struct SquareNan {
  static constexpr const char* name = "square_nan";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<double>& out, const TensorD& x) const {
    out.make(x.shape()).array() = x.array().square();
  }
  static void backward(const Output<double>& out, const OpInput<double>& x) {
    x.grad.add(out.grad().array() * std::numeric_limits<double>::quiet_NaN());
  }
};
Var<double> square_with_nan_backward(Var<double> x, Where where = Where::current()) {
  return apply(SquareNan{}, {x}, where);
}

}  // namespace

TEST_CASE("tape: anomaly mode names the first op with a non-finite output and its source line") {
  Tape<double> tape;
  Var<double> x = tape.input(TensorD(Shape::vec(2), {1e300, 1.0}));
  CHECK_NOTHROW(scale(x, 1e10));  // off by default: Inf passes silently
  tape.set_anomaly_detection(true);
  const std::string expected = fmt::format(
      "anomaly: scale (recorded at tests/test_tape.cpp:{}) produced a non-finite value (NaN or Inf) in its 2 output",
      __LINE__ + 1);
  CHECK_THROWS_WITH_AS(scale(x, 1e10), expected.c_str(), NonFiniteError);
}

TEST_CASE("tape: anomaly mode names the backward rule that produced a non-finite gradient") {
  Tape<double> tape;
  tape.set_anomaly_detection(true);
  Var<double> x = tape.input(TensorD(Shape::vec(2), {1.0, 2.0}));
  Var<double> y = sum(square_with_nan_backward(x));
  CHECK_THROWS_WITH_AS(tape.backward(y),
                       doctest::Contains("anomaly: the backward rule of square_nan (recorded at tests/test_tape.cpp:"),
                       NonFiniteError);
}

TEST_CASE("tape: a second thread that records on a tape another thread is recording on gets a UsageError naming it") {
  Tape<float> tape;
  Var<float> x = tape.input(Tensor(Shape::mat(2, 2), 1.0f));  // this thread owns the tape now
  std::string refused;
  std::thread other([&] {
    try {
      (void)relu(x);
    } catch (const UsageError& e) {
      refused = e.what();
    }
  });
  other.join();
  CHECK(refused.find("relu: tape 0x") == 0);
  CHECK(refused.find("holds 1 nodes that another thread is recording; a tape belongs to the thread") != std::string::npos);
  CHECK(tape.size() == 1);  // the refused op left nothing
  (void)relu(x);            // the owner goes on
  // After reset() the tape may change hands.
  tape.reset();
  std::thread next([&] { CHECK_NOTHROW(tape.input(Tensor(Shape::vec(1), 2.0f))); });
  next.join();
  CHECK_THROWS_AS(tape.input(Tensor(Shape::vec(1))), UsageError);  // now it is the other thread's
}

TEST_CASE("tape: parameters_read lists every parameter read since the last reset") {
  Parameter<float> a("a", Tensor(Shape::vec(2), 1.0f)), b("b", Tensor(Shape::vec(2), 2.0f));
  Tape<float> tape;
  const Var<float> va = tape.param(a), vb = tape.param(b);
  (void)add(va, vb);
  (void)tape.param(a);
  REQUIRE(tape.parameters_read().size() == 3);
  CHECK(tape.parameters_read()[0] == &a);
  CHECK(tape.parameters_read()[1] == &b);
  CHECK(tape.parameters_read()[2] == &a);
  tape.reset();
  CHECK(tape.parameters_read().empty());
}

namespace {

struct Halved {
  double factor = 0.5;
};
struct Tripled {
  double factor = 3;
};

// y = s x with s in the op's saved struct, Factor: the forward saves it only if `save`.
template <class Factor>
struct Scaled {
  static constexpr const char* name = "scaled";
  static constexpr const char* inputs[] = {"x"};
  using Saved = Factor;
  bool save = true;
  void forward(Output<double, Saved>& out, const TensorD& x) const {
    const double s = Saved{}.factor;
    out.make(x.shape()).array() = s * x.array();
    if (save) out.saved().factor = s;
  }
  static void backward(const Output<double, Saved>& out, const OpInput<double>& x) {
    x.grad.add(out.saved().factor * out.grad().array());
  }
};
template <class Factor>
Var<double> scaled(Var<double> x, bool save, Where where = Where::current()) {
  return apply(Scaled<Factor>{.save = save}, {x}, where);
}

}  // namespace

TEST_CASE("tape: a backward rule that reads state its forward did not save in this recording gets a UsageError "
          "naming the op") {
  Tape<double> tape;
  auto walk = [&](auto record) {
    tape.reset();
    Var<double> x = tape.input(TensorD(Shape::vec(2), 1.0));
    tape.backward(sum(record(x)));
    return x.grad()[0];
  };
  CHECK(walk([](Var<double> x) { return scaled<Halved>(x, true); }) == 0.5);
  // The same node slot next recording, another op's type: made afresh, not an error.
  CHECK(walk([](Var<double> x) { return scaled<Tripled>(x, true); }) == 3);
  // The slot still holds that Tripled, but this recording's forward saved nothing: stale, so refused, not read.
  // Recorded outside the check's macro: clang gives a call inside a macro's arguments the line where the
  // macro's invocation ends, GCC the call's own.
  const auto unsaved = [](Var<double> x) { return scaled<Tripled>(x, false); };
  const std::string stale = fmt::format(
      "saved: the backward rule of scaled (recorded at tests/test_tape.cpp:{}) asked for saved state that its forward "
      "did not save in this recording; save it in the forward (out.saved())",
      __LINE__ - 4);
  CHECK_THROWS_WITH_AS(walk(unsaved), stale.c_str(), UsageError);
}
