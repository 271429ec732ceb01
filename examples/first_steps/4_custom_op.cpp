// First steps, 4: your own op with tapegrad: RMSNorm's normalisation (Zhang and Sennrich, 2019) written as
// a user would write it, with the Function API (autograd/function.hpp), gradient-checked in float64, then
// used, times a learned gain, between the layers of a small MLP that the library's Trainer trains on three
// interleaved spirals. It includes the installed umbrella header and, for its main() and exit codes, program
// support (tapegrad::program), and ctest builds this same file against the installed package
// (tests/downstream).
//
//   build/examples/custom_op      # the gradient checks, then the training run's final loss and accuracy
//
// It exits 1 if a gradient check fails.
#include <tapegrad/tapegrad.hpp>
#include <tapegrad/train/program/run_program.hpp>

#include <cmath>
#include <numbers>

using namespace tapegrad;

namespace {

// [readme:op]
// RMSNorm's normalisation (Zhang and Sennrich, 2019): every row of x scaled to a root mean square of 1 (the
// layer below then multiplies by a learned gain per column, with the operators on Var).
//   y = x r,  r = 1 / sqrt(mean(x^2) + eps) per row;  x (N, D) or (B, T, D)
//   dx += r dy - x r^3 mean(dy x)
template <class T>
struct RmsNorm {
  static constexpr const char* name = "rms_norm";
  static constexpr const char* inputs[] = {"x"};
  struct Saved {            // what backward needs, kept with the tape's node and reused step after step
    TensorT<T> inv_rms;     // (rows, 1): r of every row
    TensorT<T> coefficient; // (rows, 1): scratch for backward, r^3 mean(dy x)
  };
  double eps = 1e-6;        // a setting of the op: read by forward

  void forward(Output<T, Saved>& out, const TensorT<T>& x) const {
    TensorT<T>& y = out.make(x.shape());  // the output, zeros, to fill (a throw leaves no trace)
    TensorT<T>& r = out.saved().inv_rms;
    r.resize(Shape::mat(x.shape().flat_rows(), 1));
    const auto X = x.flat().array();  // (rows, D)
    r.array() = (X.square().rowwise().mean() + T(eps)).rsqrt();
    y.flat().array() = X.colwise() * r.array();
  }

  static void backward(const Output<T, Saved>& out, const OpInput<T>& x) {
    Saved& saved = out.saved();
    const auto X = x.value.flat().array();
    const auto dY = out.grad().flat().array();
    const auto r = saved.inv_rms.array();
    saved.coefficient.resize(saved.inv_rms.shape());
    saved.coefficient.array() = r.cube() * (dY * X).rowwise().mean();
    x.grad.add(dY.colwise() * r - X.colwise() * saved.coefficient.array());
  }
};
// Used as apply(RmsNorm<T>{.eps = eps}, {x}), which records the line it is called on, for errors and anomaly
// mode.
// [readme:op-end]

// [readme:gradcheck]
// The op's derivatives in float64, with respect to x, against central differences.
bool gradcheck_op() {
  Rng rng(5);
  TensorD x(Shape::batched(2, 3, 4));
  for (double& v : x.span()) v = rng.normal();
  const GradcheckReport report = gradcheck(
      [](Tape<double>&, std::span<const Var<double>> in) { return apply(RmsNorm<double>{}, {in[0]}); }, {{"x", x}});
  fmt::print("rms_norm {}", report.str());
  return report.ok();
}
// [readme:gradcheck-end]

// [readme:model]
// A layer around the op, so that a model can own the gain: parameter "<name>.gain", ones at first.
template <class T>
struct RmsNormLayer : Module<T> {
  Parameter<T>& gain;
  RmsNormLayer(std::string name, Index dim)
      : Module<T>(std::move(name)), gain(this->register_parameter("gain", TensorT<T>(Shape::vec(dim), T(1)))) {}
  Var<T> forward(Var<T> x) { return apply(RmsNorm<T>{}, {x}) * gain; }
};

// x (N, 2) -> x W1 + b1 -> rms_norm -> gelu -> x W2 + b2: logits (N, 3).
template <class T>
class SpiralNet : public Module<T> {
 public:
  explicit SpiralNet(Index hidden, std::uint64_t seed)
      : rng_(seed), in_("in", {.in = 2, .out = hidden}, rng_), norm_("norm", hidden),
        out_("out", {.in = hidden, .out = 3}, rng_) {
    this->register_child(in_);
    this->register_child(norm_);
    this->register_child(out_);
  }
  Var<T> forward(Var<T> x) { return out_.forward(gelu(norm_.forward(in_.forward(x)))); }

 private:
  Rng rng_;
  Linear<T> in_;
  RmsNormLayer<T> norm_;
  Linear<T> out_;
};
// [readme:model-end]

// The model's derivatives in float64, the op's among them: the loss on a few points, with respect to the
// input and every parameter.
bool gradcheck_model() {
  SpiralNet<double> model(6, 3);
  const Ids labels(Shape::vec(4), {0, 1, 2, 0});
  TensorD x(Shape::mat(4, 2), {0.3, -1.2, 1.5, 0.2, -0.7, 0.9, 0.1, 0.4});
  const GradcheckReport report = gradcheck(
      [&](Tape<double>&, std::span<const Var<double>> in) { return cross_entropy(model.forward(in[0]), labels); },
      {{"x", x}}, model.parameters());
  fmt::print("model {}", report.str());
  return report.ok();
}

// Three interleaved spirals (the classic toy of CS231n): class k's points lie on arm k, with noise.
TensorSource spirals(Index n, std::uint64_t seed, std::string name) {
  Rng rng(seed);
  Tensor x(Shape::mat(n, 2));
  Ids y(Shape::vec(n));
  for (Index i = 0; i < n; ++i) {
    const auto label = static_cast<std::int32_t>(i % 3);
    const double radius = rng.uniform();
    const double angle = 2 * std::numbers::pi * label / 3 + 4 * radius + 0.2 * rng.normal();
    x.at(i, 0) = static_cast<float>(radius * std::sin(angle));
    x.at(i, 1) = static_cast<float>(radius * std::cos(angle));
    y[i] = label;
  }
  return TensorSource(std::move(name), std::move(x), std::move(y));
}

// [readme:train]
int train() {
  const TensorSource train_data = spirals(900, 1, "spirals");
  const TensorSource test_data = spirals(300, 2, "spirals (test)");
  SpiralNet<float> model(32, 0);
  Adam<float> optimizer(model.parameters(), {.lr = 0.02});
  auto loss = [&](Tape<float>& tape, const TensorBatch& batch) -> StepOutput<float> {
    Var<float> logits = model.forward(tape.constant(batch.features));  // (B, 3)
    return {cross_entropy(logits, batch.labels), logits};               // the loss, and what metrics read
  };
  Trainer<TensorBatch> trainer(model, optimizer, train_data, loss, {.steps = 600, .batch = 64, .eval_every = 100});
  trainer.evaluate_on(test_data);
  trainer.add_metric("accuracy", metrics::accuracy);
  trainer.run();
  const NamedValues result = trainer.evaluate(test_data);
  fmt::print("trained {} steps: test loss {:.4f}, test accuracy {:.3f}\n", trainer.steps_done(),
             value_of(result, "eval_loss"), value_of(result, "eval_accuracy"));
  return 0;
}
// [readme:train-end]

}  // namespace

int main(int argc, char** argv) {
  // Any error becomes one line and an exit code (docs/programs.md, "Exit codes"); nothing aborts.
  return run_program("custom_op", [&] {
    if (argc > 1) fail<ValueError>("takes no arguments, got '{}'", escaped(argv[1]));
    const bool op_ok = gradcheck_op();
    const bool model_ok = gradcheck_model();
    train();
    return op_ok && model_ok ? 0 : static_cast<int>(ExitCode::check_failed);
  });
}
