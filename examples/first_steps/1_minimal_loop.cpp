// First steps, 1: the training loop by hand, without a Trainer: a tape, a forward, a loss, backward, an
// optimizer step, the gradients zeroed. An MLP learns y = x0 x1 from 128 points and prints its loss going
// down (tests: examples/CMakeLists.txt checks that it fell). It includes only the installed umbrella header
// and links only tapegrad::tapegrad, and ctest builds this same file against the installed package
// (tests/downstream).
//
//   build/examples/minimal_loop
// [readme:minimal-loop]
#include <tapegrad/tapegrad.hpp>

using namespace tapegrad;

// x (N, 2) -> tanh(x W1 + b1) W2 + b2 (N, 1): parameters "hidden.weight", "hidden.bias", "out.weight", "out.bias".
struct Mlp : Module<float> {
  Rng rng{0};  // the initial weights
  Linear<float> hidden{"hidden", {.in = 2, .out = 16}, rng}, out{"out", {.in = 16, .out = 1}, rng};
  Mlp() { register_children(hidden, out); }
  Var<float> forward(Var<float> x) { return out.forward(tanh(hidden.forward(x))); }
};

int main() {
  Rng rng(1);
  Tensor x(Shape::mat(128, 2)), y(Shape::mat(128, 1));
  for (Index i = 0; i < 128; ++i) {
    x.at(i, 0) = static_cast<float>(rng.uniform(-1, 1));
    x.at(i, 1) = static_cast<float>(rng.uniform(-1, 1));
    y.at(i, 0) = x.at(i, 0) * x.at(i, 1);
  }
  Mlp model;
  Adam<float> optimizer(model.parameters(), {.lr = 0.01});
  Tape<float> tape;
  for (int step = 0; step <= 500; ++step) {
    tape.reset();  // forget the last step's graph, keep its buffers
    Var<float> loss = mse(model.forward(tape.constant(x)), tape.constant(y));
    check_registered(tape, model);  // every parameter the forward read is one the optimizer updates
    tape.backward(loss);            // d loss / d p, added into each parameter's grad
    optimizer.step();               // p -= lr * Adam's step from the grad
    optimizer.zero_grad();          // grads add up across backward calls: clear them for the next step
    if (step % 100 == 0) fmt::print("step {:3}  loss {:.6f}\n", step, loss.value()[0]);
  }
}
// [readme:minimal-loop-end]
