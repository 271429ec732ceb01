// autograd/function: ops written as Functions. The gradient accessor's assign-or-add, inputs and outputs
// used twice, gradients not needed, errors naming the op and the argument, saved state the forward did not
// save, anomaly mode naming the op and the line. (Saved state read as another type: tests/test_tape.cpp;
// steady-state allocations: tests/test_alloc.cpp.)
#include <doctest/doctest.h>

#include <array>
#include <limits>
#include <span>

#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "helpers.hpp"

using namespace tapegrad;
using test::random_tensor;

namespace {

// y = a b (same shapes);  da += dy b,  db += dy a. b's gradient is written first, so that with both
// inputs the same Var the second write must add to the first.
template <class T>
struct Product {
  static constexpr const char* name = "product";
  static constexpr const char* inputs[] = {"a", "b"};
  void forward(Output<T>& out, const TensorT<T>& a, const TensorT<T>& b) const {
    if (a.shape() != b.shape()) fail<ShapeError>("product: a is {} but b is {}", a.shape(), b.shape());
    out.make(a.shape()).array() = a.array() * b.array();
  }
  static void backward(const Output<T>& out, const OpInput<T>& a, const OpInput<T>& b) {
    b.grad.add(out.grad().array() * a.value.array());
    a.grad.add(out.grad().array() * b.value.array());
  }
};
Var<double> product(Var<double> a, Var<double> b, Where where = Where::current()) {
  return apply(Product<double>{}, {a, b}, where);
}

// y = 2 x, its gradient written in two halves of dy each: the second add adds to the first.
struct Doubled {
  static constexpr const char* name = "doubled";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<double>& out, const TensorD& x) const { out.make(x.shape()).array() = 2 * x.array(); }
  static void backward(const Output<double>& out, const OpInput<double>& x) {
    x.grad.add(out.grad().array());
    x.grad.add(out.grad().flat());  // a matrix of the flat() view, evaluated into the gradient
  }
};

// y = x w (w broadcast over x's rows as a row of its width), counting the backward passes that found
// x's gradient needed and what forward and backward were told.
struct RowScale {
  static constexpr const char* name = "row_scale";
  static constexpr const char* inputs[] = {"x", "w"};
  struct Saved {
    bool needs_grad = false;
  };
  inline static int x_work = 0, w_work = 0;
  inline static bool forward_needs_grad = false;
  void forward(Output<double, Saved>& out, const TensorD& x, const TensorD& w) const {
    forward_needs_grad = out.needs_grad();
    out.make(x.shape()).flat().array() = x.flat().array().rowwise() * w.array().transpose();
    out.saved().needs_grad = out.needs_grad();
  }
  static void backward(const Output<double, Saved>& out, const OpInput<double>& x, const OpInput<double>& w) {
    CHECK(out.saved().needs_grad);
    const auto dY = out.grad().flat().array();
    if (x.grad) {
      ++x_work;
      x.grad.add(dY.rowwise() * w.value.array().transpose());
    }
    if (w.grad) {
      ++w_work;
      w.grad.add((dY * x.value.flat().array()).colwise().sum());  // (1, D): the row's
    }
    if (!x.grad) x.grad.add(dY);  // not needed: does nothing
  }
};

// Ops that misuse the context, each in one way.
struct NoOutput {
  static constexpr const char* name = "no_output";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<double>&, const TensorD&) const {}
  static void backward(const Output<double>&, const OpInput<double>&) {}
};
struct OutputTwice {
  static constexpr const char* name = "output_twice";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<double>& out, const TensorD& x) const {
    out.make(x.shape());
    out.make(x.shape());
  }
  static void backward(const Output<double>&, const OpInput<double>&) {}
};
struct WrongGradientSize {
  static constexpr const char* name = "wrong_size";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<double>& out, const TensorD& x) const { out.make(x.shape()).array() = x.array(); }
  static void backward(const Output<double>& out, const OpInput<double>& x) {
    x.grad.add(out.grad().array().head(3));
  }
};
// Saves its state on the first recording only (a bug: the backward reads it every time).
struct SavesOnce {
  static constexpr const char* name = "saves_once";
  static constexpr const char* inputs[] = {"x"};
  struct Saved {
    double factor = 0;
  };
  inline static bool saved_before = false;
  void forward(Output<double, Saved>& out, const TensorD& x) const {
    out.make(x.shape()).array() = 3 * x.array();
    if (!saved_before) out.saved().factor = 3;
    saved_before = true;
  }
  static void backward(const Output<double, Saved>& out, const OpInput<double>& x) {
    x.grad.add(out.saved().factor * out.grad().array());
  }
};

// y = 1 / x, and an op whose backward writes NaN, for anomaly mode.
struct Reciprocal {
  static constexpr const char* name = "reciprocal";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<double>& out, const TensorD& x) const { out.make(x.shape()).array() = 1 / x.array(); }
  static void backward(const Output<double>& out, const OpInput<double>& x) {
    x.grad.add(-out.grad().array() * out.value().array().square());
  }
};
struct NanBackward {
  static constexpr const char* name = "nan_backward";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<double>& out, const TensorD& x) const { out.make(x.shape()).array() = x.array(); }
  static void backward(const Output<double>& out, const OpInput<double>& x) {
    x.grad.add(out.grad().array() * std::numeric_limits<double>::quiet_NaN());
  }
};

}  // namespace

TEST_CASE("function: an input used twice by an op gets both gradients, the first write assigning, in every pass") {
  Rng rng(61);
  const TensorD value = random_tensor(Shape::mat(2, 3), rng), seed = random_tensor(Shape::mat(2, 3), rng);
  Tape<double> tape;
  for (int pass = 0; pass < 3; ++pass) {  // the same buffers each time: what they held must not leak in
    tape.reset();
    Var<double> x = tape.input(value);
    tape.backward(product(x, x), seed);
    CHECK(x.grad().array().isApprox(2 * value.array() * seed.array()));
    for (Index i = 0; i < value.numel(); ++i) CHECK(x.grad()[i] == seed[i] * value[i] + seed[i] * value[i]);
  }
  // Two adds to one input in one rule: the second adds.
  tape.reset();
  Var<double> x = tape.input(value);
  tape.backward(apply(Doubled{}, {x}), seed);
  CHECK(x.grad().array().isApprox(2 * seed.array()));
  const auto report = gradcheck([](Tape<double>&, std::span<const Var<double>> in) { return product(in[0], in[0]); },
                                {{"x", value}}, {}, kStrictGradcheck);
  CHECK_MESSAGE(report.ok(), report.str());
}

TEST_CASE("function: an op whose output is used twice receives the sum of both gradients") {
  Tape<double> tape;
  const TensorD value(Shape::vec(3), {1.0, -2.0, 0.5});
  Var<double> x = tape.input(value);
  Var<double> y = product(x, x);                // y = x^2
  tape.backward(sum(add(y, scale(y, 3.0))));   // d/dy = 1 + 3
  CHECK(x.grad() == TensorD(Shape::vec(3), {8.0, -16.0, 4.0}));
}

TEST_CASE("function: a gradient that is not needed says so, the op skips its work, and adding to it does nothing") {
  Rng rng(62);
  const TensorD xv = random_tensor(Shape::batched(2, 3, 4), rng), wv = random_tensor(Shape::vec(4), rng);
  RowScale::x_work = RowScale::w_work = 0;
  Tape<double> tape;
  Var<double> x = tape.constant(xv), w = tape.input(wv);
  Var<double> y = apply(RowScale{}, {x, w});
  CHECK(RowScale::forward_needs_grad);
  tape.backward(sum(y));
  CHECK(RowScale::x_work == 0);  // x is a constant
  CHECK(RowScale::w_work == 1);
  for (Index c = 0; c < 4; ++c) {
    double expected = 0;
    for (Index r = 0; r < xv.shape().flat_rows(); ++r) expected += xv.flat()(r, c);
    CHECK(w.grad()[c] == doctest::Approx(expected).epsilon(1e-14));
  }
  // Without gradients the forward is told so and no backward rule runs.
  tape.reset();
  NoGradGuard<double> guard(tape);
  apply(RowScale{}, {tape.input(xv), tape.input(wv)});
  CHECK_FALSE(RowScale::forward_needs_grad);
  const auto report = gradcheck(
      [](Tape<double>&, std::span<const Var<double>> in) { return apply(RowScale{}, {in[0], in[1]}); },
      {{"x", xv}, {"w", wv}}, {}, kStrictGradcheck);
  CHECK_MESSAGE(report.ok(), report.str());
}

TEST_CASE("function: misused arguments and contexts are errors naming the op and the argument, and record nothing") {
  Tape<double> tape, other;
  Var<double> x = tape.input(TensorD(Shape::mat(2, 2), 1.0));
  Var<double> elsewhere = other.input(TensorD(Shape::mat(2, 2), 1.0));
  const auto before = tape.size();
  CHECK_THROWS_WITH_AS(product(Var<double>{}, x), "product: a is an empty Var (default-constructed)", UsageError);
  CHECK_THROWS_WITH_AS(product(x, elsewhere), "product: b belongs to a different tape than the op's other arguments",
                       UsageError);
  CHECK_THROWS_WITH_AS(product(x, tape.input(TensorD(Shape::vec(3)))), "product: a is 2x2 but b is 3", ShapeError);
  CHECK(tape.size() == before + 1);  // the input made for the call, not the refused op
  CHECK_THROWS_WITH_AS(apply(NoOutput{}, {x}), "no_output: its forward returned without calling make(shape)",
                       UsageError);
  CHECK_THROWS_WITH_AS(apply(OutputTwice{}, {x}), "output_twice: its forward called make(shape) twice", UsageError);
  CHECK(tape.size() == before + 1);
  Var<double> y = apply(WrongGradientSize{}, {x});
  CHECK_THROWS_WITH_AS(tape.backward(sum(y)),
                       "wrong_size: backward gave a 3x1 gradient for x, which is 2x2 (4 elements in order, or 2x2 "
                       "rows)",
                       ShapeError);
  Var<double> stale = x;
  tape.reset();
  CHECK_THROWS_WITH_AS(product(tape.input(TensorD(Shape::mat(2, 2))), stale),
                       "product: b was recorded before the last reset() of its tape; record it again", UsageError);
}

TEST_CASE("function: saved state the forward did not save in this recording is a UsageError naming the op") {
  Tape<double> tape;
  // A Function whose forward saved its state in an earlier recording but not in this one: the node still
  // holds that state, which is stale, so reading it is refused rather than silently used.
  SavesOnce::saved_before = false;
  for (int pass = 0; pass < 2; ++pass) {
    tape.reset();
    Var<double> in = tape.input(TensorD(Shape::vec(2), 1.0));
    Var<double> out = sum(apply(SavesOnce{}, {in}));
    if (pass == 0) {
      tape.backward(out);
      CHECK(in.grad() == TensorD(Shape::vec(2), 3.0));
    } else {
      CHECK_THROWS_WITH_AS(tape.backward(out), doctest::Contains("saved: the backward rule of saves_once (recorded at "
                                                                 "tests/test_function.cpp:"),
                           UsageError);
      CHECK_THROWS_WITH_AS(tape.backward(out), doctest::Contains("already walked back"), UsageError);
    }
  }
}

TEST_CASE("function: anomaly mode names the op and the line that recorded it, forward and backward") {
  Tape<double> tape;
  tape.set_anomaly_detection(true);
  Var<double> x = tape.input(TensorD(Shape::vec(2), {0.0, 1.0}));
  const int x_line = __LINE__ - 1;
  const auto before = tape.size();
  const std::string forward = fmt::format(
      "anomaly: reciprocal (recorded at tests/test_function.cpp:{}) produced a non-finite value (NaN or Inf) in its 2 "
      "output",
      __LINE__ + 1);
  CHECK_THROWS_WITH_AS(apply(Reciprocal{}, {x}), forward.c_str(), NonFiniteError);
  CHECK(tape.size() == before);  // refused and dropped
  Var<double> y = apply(NanBackward{}, {x});
  const int line = __LINE__ - 1;
  CHECK_THROWS_WITH_AS(tape.backward(sum(y)),
                       fmt::format("anomaly: the backward rule of nan_backward (recorded at "
                                   "tests/test_function.cpp:{}) produced a non-finite gradient (NaN or Inf) for its "
                                   "input 0, input (recorded at tests/test_function.cpp:{})",
                                   line, x_line)
                           .c_str(),
                       NonFiniteError);
}

namespace {

// y = a b (same shapes), its gradients written row by row through detail::pieces, as the library's fast rules do.
struct RowsCopy {
  static constexpr const char* name = "rows_copy";
  static constexpr const char* inputs[] = {"a", "b"};
  void forward(Output<double>& out, const TensorD& a, const TensorD& b) const {
    out.make(a.shape()).array() = a.array() * b.array();
  }
  // Forward was y = a b. The rule takes b's pieces first, so with one node as both inputs the second adds.
  static void backward(const Output<double>& out, const OpInput<double>& a, const OpInput<double>& b) {
    const auto dY = out.grad().flat();
    const GradWrite<double> db = detail::pieces(b.grad), da = detail::pieces(a.grad);
    for (Index r = 0; r < dY.rows(); ++r) {
      if (db) db.add(db.tensor->flat().row(r).array(), dY.row(r).array() * a.value.flat().row(r).array());
      if (da) da.add(da.tensor->flat().row(r).array(), dY.row(r).array() * b.value.flat().row(r).array());
    }
  }
};

// y = x[0] (a scatter back): only element 0 of x's gradient is added to, through detail::pieces(x.grad).zeroed().
struct First {
  static constexpr const char* name = "first";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<double>& out, const TensorD& x) const { out.make(Shape::scalar())[0] = x[0]; }
  static void backward(const Output<double>& out, const OpInput<double>& x) {
    if (TensorD* dx = detail::pieces(x.grad).zeroed()) (*dx)[0] += out.grad()[0];
  }
};

// y = the sum of any number of same-shape inputs: an op over a list.
struct SumOfList {
  static constexpr const char* name = "sum_of_list";
  static constexpr const char* inputs[] = {"term"};
  void forward(Output<double>& out, const ValueList<double>& terms) const {
    for (std::size_t k = 1; k < terms.size(); ++k)
      if (terms[k].shape() != terms[0].shape())
        fail<ShapeError>("sum_of_list: term {} is {} but term 0 is {}", k, terms[k].shape(), terms[0].shape());
    TensorD& y = out.make(terms[0].shape());
    y.array() = terms[0].array();
    for (std::size_t k = 1; k < terms.size(); ++k) y.array() += terms[k].array();
  }
  static void backward(const Output<double>& out, const InputList<double>& terms) {
    for (std::size_t k = 0; k < terms.size(); ++k) terms[k].grad.add(out.grad().array());
  }
};

}  // namespace

TEST_CASE("function: detail::pieces assigns on a pass's first write and adds after, in the order taken") {
  Rng rng(63);
  const TensorD value = random_tensor(Shape::mat(3, 4), rng), seed = random_tensor(Shape::mat(3, 4), rng);
  Tape<double> tape;
  for (int pass = 0; pass < 3; ++pass) {  // reused buffers: stale values must not leak in
    tape.reset();
    Var<double> x = tape.input(value);
    tape.backward(apply(RowsCopy{}, {x, x}), seed);
    for (Index i = 0; i < value.numel(); ++i) CHECK(x.grad()[i] == seed[i] * value[i] + seed[i] * value[i]);
  }
  const auto report = gradcheck(
      [](Tape<double>&, std::span<const Var<double>> in) { return apply(RowsCopy{}, {in[0], in[1]}); },
      {{"a", value}, {"b", random_tensor(Shape::mat(3, 4), rng)}}, {}, kStrictGradcheck);
  CHECK_MESSAGE(report.ok(), report.str());
}

TEST_CASE("function: detail::pieces(x.grad).zeroed() is zero where nothing was written, after a pass that wrote everywhere") {
  Tape<double> tape;
  for (int pass = 0; pass < 2; ++pass) {
    tape.reset();
    Var<double> x = tape.input(TensorD(Shape::vec(3), {1.0, 2.0, 3.0}));
    Var<double> h = scale(x, 2.0);  // an intermediate whose gradient buffer holds last pass's values
    tape.backward(pass == 0 ? sum(h) : apply(First{}, {h}));
    CHECK(x.grad() == (pass == 0 ? TensorD(Shape::vec(3), 2.0) : TensorD(Shape::vec(3), {2.0, 0.0, 0.0})));
  }
}

TEST_CASE("function: an op over a list of inputs names each input by its position, and each gets its gradient") {
  Rng rng(64);
  const TensorD a = random_tensor(Shape::mat(2, 3), rng), b = random_tensor(Shape::mat(2, 3), rng);
  Tape<double> tape, other;
  Var<double> x = tape.input(a), y = tape.input(b), z = other.input(b);
  const std::array<Var<double>, 3> terms = {x, y, x};
  tape.backward(sum(apply_list(SumOfList{}, std::span<const Var<double>>(terms))));
  CHECK(x.grad() == TensorD(Shape::mat(2, 3), 2.0));
  CHECK(y.grad() == TensorD(Shape::mat(2, 3), 1.0));
  const std::array<Var<double>, 2> mixed = {x, z};
  tape.reset();
  CHECK_THROWS_WITH_AS(apply_list(SumOfList{}, std::span<const Var<double>>(mixed)),
                       "sum_of_list: term 0 was recorded before the last reset() of its tape; record it again",
                       UsageError);
  Var<double> fresh = tape.input(a);
  const std::array<Var<double>, 2> other_tape = {fresh, z};
  CHECK_THROWS_WITH_AS(apply_list(SumOfList{}, std::span<const Var<double>>(other_tape)),
                       "sum_of_list: term 1 belongs to a different tape than the op's other arguments", UsageError);
  const auto report = gradcheck(
      [](Tape<double>&, std::span<const Var<double>> in) { return apply_list(SumOfList{}, in); },
      {{"a", a}, {"b", b}}, {}, kStrictGradcheck);
  CHECK_MESSAGE(report.ok(), report.str());
}

namespace {

// A rule that writes 3 values into the first 3 of x's 5 through a piece of the whole gradient (finding 07):
// refused, naming the op and the input, instead of leaving 2 elements stale.
struct ShortPiece {
  static constexpr const char* name = "short_piece";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<double>& out, const TensorD& x) const { out.make(x.shape()).array() = x.array(); }
  static void backward(const Output<double>&, const OpInput<double>& x) {
    const GradWrite<double> dx = detail::pieces(x.grad);
    const Eigen::ArrayXd three = Eigen::ArrayXd::Ones(3);
    dx.add(dx.tensor->array(), three);
  }
};

// A rule whose part(from, count) gives one value fewer than the range asks: refused as a short piece is.
struct ShortPart {
  static constexpr const char* name = "short_part";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<double>& out, const TensorD& x) const { out.make(x.shape()).array() = x.array(); }
  static void backward(const Output<double>& out, const OpInput<double>& x) {
    x.grad.add([&](Index from, Index count) { return out.grad().array().segment(from, count - 1); });
  }
};

// y = x with its last element left unwritten (a forward that forgets part of its output), its output made
// as a user's op makes it (zeros) or as the library's ops do (unfilled).
template <bool Library>
struct LeavesLast {
  static constexpr const char* name = "leaves_last";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<double>& out, const TensorD& x) const {
    TensorD& y = Library ? out.make(x.shape(), false) : out.make(x.shape());
    for (Index i = 0; i + 1 < x.numel(); ++i) y[i] = x[i];
  }
  static void backward(const Output<double>& out, const OpInput<double>& x) { x.grad.add(out.grad().array()); }
};

// An op whose forward records another op (scale of a Var it was given), after its make() or before it
// (finding 08), or a leaf before it.
struct RecordsInside {
  static constexpr const char* name = "records_inside";
  static constexpr const char* inputs[] = {"x"};
  Var<double> other;
  enum When { after_make, before_make, leaf_before_make } when = after_make;
  void forward(Output<double>& out, const TensorD& x) const {
    if (when == before_make) scale(other, 2.0);
    if (when == leaf_before_make) other.tape->constant(x);
    out.make(x.shape()).array() = x.array();
    scale(other, 2.0);
  }
  static void backward(const Output<double>& out, const OpInput<double>& x) { x.grad.add(out.grad().array()); }
};

}  // namespace

TEST_CASE("function: a gradient piece of the wrong size is refused naming the op and the input") {
  Tape<double> tape;
  Var<double> x = tape.input(TensorD(Shape::vec(5), 1.0));
  CHECK_THROWS_WITH_AS(tape.backward(sum(apply(ShortPiece{}, {x}))),
                       "short_piece: backward wrote 3x1 values into a 5x1 piece of the gradient of x, which is 5",
                       ShapeError);
}

TEST_CASE("function: a part of add(part, cost) of the wrong size is refused naming the op and the input") {
  Tape<double> tape;
  Var<double> x = tape.input(TensorD(Shape::vec(5), 1.0));
  CHECK_THROWS_WITH_AS(tape.backward(sum(apply(ShortPart{}, {x}))),
                       "short_part: backward wrote 4x1 values into a 5x1 piece of the gradient of x, which is 5",
                       ShapeError);
}

TEST_CASE("function: make() gives zeros: an element the forward leaves unwritten is 0, not last step's value") {
  for (const bool anomaly : {false, true}) {
    Tape<double> tape;
    tape.set_anomaly_detection(anomaly);
    Var<double> x = tape.input(TensorD(Shape::vec(3), {1.0, 2.0, 3.0}));
    (void)scale(x, 2.0);  // the next step's op in this place finds 2, 4, 6 in its buffer
    tape.reset();
    x = tape.input(TensorD(Shape::vec(3), {1.0, 2.0, 3.0}));
    const Var<double> y = apply(LeavesLast<false>{}, {x});
    CHECK(y.value().span()[0] == 1.0);
    CHECK(y.value().span()[1] == 2.0);
    CHECK(y.value().span()[2] == 0.0);
  }
}

TEST_CASE("function: in anomaly mode an element a library op's unfilled output leaves unwritten is caught, naming it") {
  {  // outside anomaly mode make(shape, false) fills nothing: the element reads what the buffer held
    Tape<double> plain;
    Var<double> x = plain.input(TensorD(Shape::vec(3), {1.0, 2.0, 3.0}));
    (void)scale(x, 2.0);
    plain.reset();
    x = plain.input(TensorD(Shape::vec(3), {1.0, 2.0, 3.0}));
    CHECK(apply(LeavesLast<true>{}, {x}).value().span()[2] == 6.0);
  }
  Tape<double> tape;
  tape.set_anomaly_detection(true);
  Var<double> x = tape.input(TensorD(Shape::vec(3), {1.0, 2.0, 3.0}));
  (void)scale(x, 2.0);  // the next step's op in this place finds these finite values in its buffer
  tape.reset();
  x = tape.input(TensorD(Shape::vec(3), {1.0, 2.0, 3.0}));
  const std::string message = fmt::format(
      "anomaly: leaves_last (recorded at tests/test_function.cpp:{}) produced a non-finite value (NaN or Inf) in its 3 "
      "output",
      __LINE__ + 1);
  CHECK_THROWS_WITH_AS(apply(LeavesLast<true>{}, {x}), message.c_str(), NonFiniteError);
}

TEST_CASE("function: an op recorded inside another op's forward is refused naming the outer op, nothing overwritten") {
  Tape<double> tape;
  Var<double> x = tape.input(TensorD(Shape::vec(2), {1.0, 2.0}));
  Var<double> y = scale(x, 3.0);
  const auto before = tape.size();
  const auto record = [&](RecordsInside::When when) { return apply(RecordsInside{.other = x, .when = when}, {y}); };
  const int line = __LINE__ - 1;
  const auto message = [&](const char* inner) {
    return fmt::format(
        "{}: recorded on the tape while the forward of records_inside (recorded at tests/test_function.cpp:{}) "
        "runs; an op's forward computes its output from its inputs' values and records nothing (record other ops "
        "before or after it)",
        inner, line);
  };
  CHECK_THROWS_WITH_AS(record(RecordsInside::after_make), message("scale").c_str(), UsageError);
  CHECK(tape.size() == before);
  // From the forward's first line: before its make(), an op or a leaf.
  CHECK_THROWS_WITH_AS(record(RecordsInside::before_make), message("scale").c_str(), UsageError);
  CHECK(tape.size() == before);
  CHECK_THROWS_WITH_AS(record(RecordsInside::leaf_before_make), message("constant").c_str(), UsageError);
  CHECK(tape.size() == before);
  // The tape is as it was: the next op records and its Var reads its own values.
  Var<double> z = scale(y, 2.0);
  CHECK(z.value() == TensorD(Shape::vec(2), {6.0, 12.0}));
  CHECK(y.value() == TensorD(Shape::vec(2), {3.0, 6.0}));
  tape.backward(sum(z));
  CHECK(x.grad() == TensorD(Shape::vec(2), 6.0));
}
