// First steps, 5: your own optimizer with tapegrad: Lion (Chen et al. 2023, "Symbolic Discovery of
// Optimization Algorithms"), written outside the library with the public pieces the library's SGD and Adam
// use, then trained, checkpointed and resumed by the library's generic parts under its own name, "lion". It
// includes the installed umbrella header and, for its main() and its run's folder, program support
// (tapegrad::program), and ctest builds this same file against the installed package (tests/downstream).
//
//   build/examples/user_optimizer train runs/lion     # model.tgck and checkpoint-00000200.tgck
//   build/examples/user_optimizer resume runs/lion/checkpoint-00000200.tgck  # a fresh process, on to the end
//   build/examples/train inspect runs/lion/model.tgck  # "optimizer: lion after 400 steps (lr 0.01, beta1 ...)"
//
// Both print the CRC-32 of the final weights: equal numbers mean a bit-identical resume
// (tests/cli/user_optimizer.cmake compares them).
#include <tapegrad/tapegrad.hpp>
#include <tapegrad/program/checkpoint_dir.hpp>
#include <tapegrad/program/output_folder.hpp>
#include <tapegrad/program/run_program.hpp>

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
    field("beta1", s.beta1, "interpolation of the update", in_range(0, 1, true));
    field("beta2", s.beta2, "decay of the momentum", in_range(0, 1, true));
    field("weight_decay", s.weight_decay, "decoupled weight decay", at_least(0));
  }
};

// The update, per parameter, with the momentum m (one buffer, "exp_avg", the parameter's shape):
//   p -= lr (sign(beta1 m + (1 - beta1) g) + wd p);   m = beta2 m + (1 - beta2) g
class Lion final : public OptimizerWith<float, LionOptions> {
 public:
  explicit Lion(std::vector<Parameter<float>*> params, LionOptions options = {})
      : OptimizerWith(std::move(params), options, "lion", {"exp_avg"}) {}  // its name in checkpoints, its buffers

 private:
  void update(double lr, std::int64_t) override {
    const LionOptions& o = options();
    const auto beta1 = static_cast<float>(o.beta1), beta2 = static_cast<float>(o.beta2);
    const auto rate = static_cast<float>(lr), decay = static_cast<float>(1 - lr * o.weight_decay);
    for (std::size_t i = 0; i < params().size(); ++i) {
      auto p = params()[i]->value.array();
      const auto g = std::as_const(params()[i]->grad).array();
      auto m = buffers(i)[0].array();  // zeros on the first step
      p = decay * p - rate * (beta1 * m + (1 - beta1) * g).sign();
      m = beta2 * m + (1 - beta2) * g;
    }
  }
};
// [readme:optimizer-end]

// sin(3x) on [-1, 1] from 256 points, by an MLP: x (N, 1) -> tanh(x W1 + b1) W2 + b2 (N, 1).
class Net : public Module<float> {
 public:
  Net() : rng_(0), hidden_("hidden", {.in = 1, .out = 32}, rng_), out_("out", {.in = 32, .out = 1}, rng_) {
    register_child(hidden_);
    register_child(out_);
  }
  Var<float> forward(Var<float> x) { return out_.forward(tanh(hidden_.forward(x))); }
  ModelRecord model_record() const override { return {"sine_mlp", {}}; }

 private:
  Rng rng_;
  Linear<float> hidden_, out_;
};

const TensorSource& sine() {
  static const TensorSource data = [] {
    constexpr Index n = 256;
    Tensor x(Shape::mat(n, 1)), y(Shape::mat(n, 1));
    for (Index i = 0; i < n; ++i) {
      x.at(i, 0) = static_cast<float>(-1 + 2.0 * static_cast<double>(i) / (n - 1));
      y.at(i, 0) = static_cast<float>(std::sin(3 * x.at(i, 0)));
    }
    return TensorSource("sine", std::move(x), std::move(y));
  }();
  return data;
}

constexpr Index kSteps = 400, kCheckpointAt = 200;

// [readme:optimizer-run]
// The library's trainer and checkpoints take Lion as they take AdamW: any Optimizer<float>.
struct Run {
  Net model;
  Lion optimizer{model.parameters(), {.lr = 1e-2, .weight_decay = 1e-2}};
  Trainer<TensorBatch> trainer{model, optimizer, sine(), [this](Tape<float>& tape, const TensorBatch& batch) {
    return mse(model.forward(tape.constant(batch.features)), tape.constant(batch.targets));
  }, {.steps = kSteps, .batch = 32}};
  Run() { optimizer.set_schedule(CosineWithWarmup({.warmup_steps = 20, .total_steps = kSteps})); }
};
// [readme:optimizer-run-end]

// The mean squared error over all the points, without recording gradients.
double error(Net& model) {
  Tape<float> tape;
  NoGradGuard<float> guard(tape);
  return mse(model.forward(tape.constant(sine().features())), tape.constant(sine().targets())).value()[0];
}

void print_result(Run& run) {
  fmt::print("step {}: mse {:.5f}\n", run.trainer.steps_done(), error(run.model));
  fmt::print("optimizer: {}\n", run.optimizer.describe());
  fmt::print("weights crc32 {:08x}\n", weights_crc32(snapshot<float>(run.model)));
}

const std::string kHalfWay = fmt::format("checkpoint-{:08}.tgck", kCheckpointAt);

int train(const std::string& dir) {
  OutputFolder out(dir, {.program = "user_optimizer", .overwrite = true});
  out.plan({"model.tgck", kHalfWay});
  Run run;
  fmt::print("step 0: mse {:.5f}\n", error(run.model));
  TrainCallbacks callbacks;
  callbacks.on_step = [&](Index step) {
    if (step == kCheckpointAt) save_checkpoint(out, kHalfWay, snapshot(run.trainer));
  };
  run.trainer.run(callbacks);
  save_checkpoint(out, "model.tgck", snapshot(run.trainer));
  print_result(run);
  return 0;
}

// A fresh process: the same run, its state loaded (strict: an optimizer of another name is refused).
int resume(const std::string& file) {
  Run run;
  load_training(read_checkpoint(file), run.trainer);
  run.trainer.run();
  print_result(run);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return run_program("user_optimizer", [&] {
    if (args.size() == 2 && args[0] == "train") return train(args[1]);
    if (args.size() == 2 && args[0] == "resume") return resume(args[1]);
    fail<UsageError>("usage: user_optimizer train FOLDER | user_optimizer resume CHECKPOINT");
  });
}
