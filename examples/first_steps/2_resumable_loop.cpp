// First steps, 2: the loop by hand (as 1_minimal_loop.cpp) that checkpoints and resumes without a Trainer.
// Every 100 steps it saves what it carries from step to step, each part under a name: the model, Adam's
// state, the order it draws minibatches in (a Sampler), two random streams (noise on the inputs, the
// dropout masks), a moving average of the weights (tensors of its own) and its step. `resume` goes on from
// such a file in a fresh process to the same last step, bit for bit. It includes the installed umbrella
// header and, for its main() and its run's folder, program support (tapegrad::program).
//
//   build/examples/resumable_loop train runs/loop                  # checkpoint-00000100.tgck ... -00000400
//   build/examples/resumable_loop train runs/killed --kill-at 250  # killed (SIGKILL) after the 200 checkpoint
//   build/examples/resumable_loop resume runs/killed/checkpoint-00000200.tgck
//
// Both end by printing the CRC-32 of the final weights and of everything the loop carries: equal numbers
// mean a bit-identical resume (tests/cli/resumable_loop.cmake kills a run and compares them).
#include <tapegrad/tapegrad.hpp>
#include <tapegrad/train/program/checkpoint_dir.hpp>
#include <tapegrad/train/program/output_folder.hpp>
#include <tapegrad/train/program/run_program.hpp>

#include <signal.h>

#include <string>
#include <vector>

using namespace tapegrad;

namespace {

constexpr Index kPoints = 256, kBatch = 16, kSteps = 400, kEvery = 100;

// x (N, 2) -> tanh(x W1 + b1), dropped out, W2 + b2 (N, 1), learning y = x0 x1.
struct Mlp : Module<float> {
  Rng rng{0};  // the initial weights
  Linear<float> hidden{"hidden", {.in = 2, .out = 16}, rng}, out{"out", {.in = 16, .out = 1}, rng};
  Dropout<float> drop{"drop", 0.05};
  Mlp() {
    register_child(hidden);
    register_child(drop);
    register_child(out);
  }
  Var<float> forward(Var<float> x) { return out.forward(drop.forward(tanh(hidden.forward(x)))); }
};

// [readme:resumable-loop]
// An exponential moving average of the weights: tensors of the loop's own, which a checkpoint holds as it
// holds the library's objects.
struct Ema {
  Mlp& model;
  std::vector<Tensor> average = initial(model);

  static std::vector<Tensor> initial(Mlp& m) {
    std::vector<Tensor> copy;
    for (auto* p : m.parameters()) copy.push_back(p->value);
    return copy;
  }
  void update() {  // average = 0.99 average + 0.01 weights
    for (std::size_t i = 0; i < average.size(); ++i)
      average[i].array() = 0.99f * average[i].array() + 0.01f * model.parameters()[i]->value.array();
  }
};

// Everything the loop carries from step to step.
struct Run {
  Mlp model;
  Adam<float> optimizer{model.parameters(), {.lr = 0.01}};
  Sampler batches{kPoints, kBatch, 3};  // a fresh seeded permutation of the points each epoch
  Rng noise{7};                         // the noise added to each batch's inputs
  Rng dropout{8};                       // the model's dropout masks
  Ema ema{model};
  Index step = 0;
  Run() { model.set_rng(&dropout); }

  // What a checkpoint holds, by name: snapshot(parts()) saves it, restore(checkpoint, parts()) loads it.
  StateParts parts() {
    return {{"model", model}, {"optimizer", optimizer}, {"batches", batches}, {"noise", noise},
            {"dropout", dropout}, {"ema", ema.average}, {"step", step}};
  }
};
// [readme:resumable-loop-end]

// The points y = x0 x1, x uniform in [-1, 1]^2, the same in every process.
void make_data(Tensor& x, Tensor& y) {
  Rng rng(1);
  x.resize(Shape::mat(kPoints, 2));
  y.resize(Shape::mat(kPoints, 1));
  for (Index i = 0; i < kPoints; ++i) {
    x.at(i, 0) = static_cast<float>(rng.uniform(-1, 1));
    x.at(i, 1) = static_cast<float>(rng.uniform(-1, 1));
    y.at(i, 0) = x.at(i, 0) * x.at(i, 1);
  }
}

// Trains from run.step to kSteps, saving a checkpoint into `out` every kEvery steps (when given) and
// killing the process (SIGKILL, as a power cut would) at step `kill_at`.
void train_to_end(Run& run, OutputFolder* out, Index kill_at) {
  Tensor x, y;
  make_data(x, y);
  Tensor xb(Shape::mat(kBatch, 2)), yb(Shape::mat(kBatch, 1));
  Tape<float> tape;
  while (run.step < kSteps) {
    const std::span<const Index> rows = run.batches.next();
    for (Index r = 0; r < kBatch; ++r) {
      const Index i = rows[static_cast<std::size_t>(r)];
      for (Index c = 0; c < 2; ++c) xb.at(r, c) = x.at(i, c) + static_cast<float>(0.01 * run.noise.normal());
      yb.at(r, 0) = y.at(i, 0);
    }
    tape.reset();
    Var<float> loss = mse(run.model.forward(tape.constant(xb)), tape.constant(yb));
    tape.backward(loss);
    run.optimizer.step();
    run.optimizer.zero_grad();
    run.ema.update();
    ++run.step;
    if (out && run.step % kEvery == 0)
      save_checkpoint(*out, fmt::format("checkpoint-{:08}.tgck", run.step), snapshot(run.parts()));
    if (run.step == kill_at) ::raise(SIGKILL);
  }
}

int finish(Run& run) {
  Tensor x, y;
  make_data(x, y);
  run.model.eval();  // no dropout
  Tape<float> tape;
  NoGradGuard<float> off(tape);
  const double error = mse(run.model.forward(tape.constant(x)), tape.constant(y)).value()[0];
  const std::vector<std::byte> state = encode_checkpoint(snapshot(run.parts()));
  fmt::print("step {}: mse {:.6f}\nweights crc32 {:08x}\nstate crc32 {:08x}\n", run.step, error,
             weights_crc32(snapshot(run.model)), Crc32().add(state.data(), state.size()).value());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return run_program("resumable_loop", [&] {
    Run run;
    if ((args.size() == 2 || (args.size() == 4 && args[2] == "--kill-at")) && args[0] == "train") {
      Index kill_at = -1;
      if (args.size() == 4 && !from_text(args[3], kill_at))
        fail<UsageError>("--kill-at: '{}' is not a step", escaped(args[3]));
      OutputFolder out(args[1], {.program = "resumable_loop", .overwrite = true});
      train_to_end(run, &out, kill_at);
      return finish(run);
    }
    if (args.size() == 2 && args[0] == "resume") {
      restore(read_checkpoint(args[1]), run.parts());  // strict, all or nothing: every part, or none
      train_to_end(run, nullptr, -1);
      return finish(run);
    }
    fail<UsageError>("usage: resumable_loop train FOLDER [--kill-at STEP] | resumable_loop resume CHECKPOINT");
  });
}
