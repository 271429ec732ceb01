// First steps, 5: your own optimizer with tapegrad: Lion (Chen et al. 2023, "Symbolic Discovery of
// Optimization Algorithms"), written outside the library with the public pieces the library's SGD and Adam
// use, then trained by a loop by hand, checkpointed and resumed under its own name, "lion". It includes the
// installed umbrella header and, for its main() and its run's folder, program support (tapegrad::program), and
// ctest builds this same file against the installed package (tests/downstream).
//
//   build/examples/user_optimizer train runs/lion     # checkpoint-00000200.tgck and model.tgck (step 400)
//   build/examples/user_optimizer resume runs/lion/checkpoint-00000200.tgck  # a fresh process, on to the end
//   build/examples/train inspect runs/lion/model.tgck  # "optimizer: lion after 400 steps (lr 0.005, beta1 ...)"
//
// Both print the CRC-32 of the final weights: equal numbers mean a bit-identical resume
// (tests/cli/user_optimizer.cmake compares them).
#include <tapegrad/tapegrad.hpp>
#include <tapegrad/train/program/checkpoint_dir.hpp>
#include <tapegrad/train/program/output_folder.hpp>
#include <tapegrad/train/program/run_program.hpp>

#include <cmath>
#include <string>
#include <vector>

using namespace tapegrad;

namespace {

// [readme:optimizer]
// Lion's hyperparameters: one struct whose fields() table is their one home. The library checks them
// with it, checkpoints save them by it, and `inspect` prints them from it.
struct LionOptions {
  double lr = 1e-4;
  double beta1 = 0.9;   // the update's interpolation between the momentum and the gradient
  double beta2 = 0.99;  // the momentum's decay
  double weight_decay = 0;

  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("lr", s.lr, "learning rate", at_least(0));
    field("beta1", s.beta1, "interpolation of the update", at_least_below(0, 1));
    field("beta2", s.beta2, "decay of the momentum", at_least_below(0, 1));
    field("weight_decay", s.weight_decay, "decoupled weight decay", at_least(0));
  }
};

// The update, elementwise, with the momentum m (one buffer, "exp_avg", the parameter's shape):
//   p -= lr (sign(beta1 m + (1 - beta1) g) + wd p);   m = beta2 m + (1 - beta2) g
// The library calls the static update() for each range of each parameter's elements (in parallel), with o.lr
// this step's rate; it makes the buffer, saves and loads it.
class Lion final : public OptimizerWith<Lion, float, LionOptions> {
 public:
  explicit Lion(std::vector<Parameter<float>*> params, LionOptions options = {})
      : OptimizerWith(std::move(params), options, "lion", {"exp_avg"}) {}  // its name in checkpoints, its buffers

  static void update(const LionOptions& o, std::int64_t, ParamSlice<float> s) {
    const auto beta1 = static_cast<float>(o.beta1), beta2 = static_cast<float>(o.beta2);
    const auto rate = static_cast<float>(o.lr), decay = static_cast<float>(1 - o.lr * o.weight_decay);
    auto m = s.buffer(0);  // zeros on the first step
    s.value = decay * s.value - rate * (beta1 * m + (1 - beta1) * s.grad).sign();
    m = beta2 * m + (1 - beta2) * s.grad;
  }
};
// [readme:optimizer-end]

// sin(3x) on [-1, 1] from 256 points, by an MLP: x (N, 1) -> tanh(x W1 + b1) W2 + b2 (N, 1).
struct Net : Module<float> {
  Rng rng{0};  // the initial weights
  Linear<float> hidden{"hidden", {.in = 1, .out = 32}, rng}, out{"out", {.in = 32, .out = 1}, rng};
  Net() { register_children(hidden, out); }
  Var<float> forward(Var<float> x) { return out.forward(tanh(hidden.forward(x))); }
};

constexpr Index kPoints = 256, kSteps = 400, kCheckpointAt = 200;
const std::string kHalfWay = fmt::format("checkpoint-{:08}.tgck", kCheckpointAt);

// [readme:optimizer-run]
// A loop by hand takes Lion as it takes AdamW, and its checkpoint holds Lion's state under Lion's name.
struct Run {
  Net model;
  Lion optimizer{model.parameters(), {.lr = 5e-3, .weight_decay = 1e-2}};
  Index step = 0;
  StateParts parts() { return {{"model", model}, {"optimizer", optimizer}, {"step", step}}; }
};
// [readme:optimizer-run-end]

// Trains from run.step to kSteps; with a folder, saves the state half way and at the end.
double train_to_end(Run& run, OutputFolder* out) {
  Tensor x(Shape::mat(kPoints, 1)), y(Shape::mat(kPoints, 1));
  for (Index i = 0; i < kPoints; ++i) {
    x.at(i, 0) = static_cast<float>(-1 + 2.0 * static_cast<double>(i) / (kPoints - 1));
    y.at(i, 0) = static_cast<float>(std::sin(3 * x.at(i, 0)));
  }
  Tape<float> tape;
  double error = 0;
  for (;; ++run.step) {
    if (out && run.step == kCheckpointAt) save_checkpoint(*out, kHalfWay, snapshot(run.parts()));  // between steps
    tape.reset();
    Var<float> loss = mse(run.model.forward(tape.constant(x)), tape.constant(y));
    error = loss.value()[0];
    if (run.step == 0) fmt::print("step 0: mse {:.5f}\n", error);
    if (run.step == kSteps) break;
    tape.backward(loss);
    run.optimizer.step();
    run.optimizer.zero_grad();
  }
  if (out) save_checkpoint(*out, "model.tgck", snapshot(run.parts()));
  return error;
}

void print_result(Run& run, double error) {
  fmt::print("step {}: mse {:.5f}\noptimizer: {}\nweights crc32 {:08x}\n", run.step, error, run.optimizer.describe(),
             weights_crc32(snapshot(run.model)));
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return run_program("user_optimizer", [&] {
    Run run;
    if (args.size() == 2 && args[0] == "train") {
      OutputFolder out(args[1], {.program = "user_optimizer", .overwrite = true});
      out.plan({"model.tgck", kHalfWay});
      print_result(run, train_to_end(run, &out));
      return 0;
    }
    if (args.size() == 2 && args[0] == "resume") {  // a fresh process: strict, a state of another name is refused
      restore(read_checkpoint(args[1]), run.parts());
      print_result(run, train_to_end(run, nullptr));
      return 0;
    }
    fail<UsageError>("usage: user_optimizer train FOLDER | user_optimizer resume CHECKPOINT");
  });
}
