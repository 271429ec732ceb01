// A user's program built against the installed package: record, backward, check one gradient.
#include <tapegrad/autograd/ops.hpp>

#include <cstdio>

int main() {
  using namespace tapegrad;
  Parameter<float> w("w", Tensor(Shape::mat(2, 2), {1, 2, 3, 4}));
  Tape<float> tape;
  Var<float> x = tape.constant(Tensor(Shape::mat(1, 2), {1, 1}));
  tape.backward(sum(matmul(x, tape.param(w))));
  // d sum(x w) / d w = x^T 1 = all ones
  for (float g : w.grad.span())
    if (g != 1.0f) {
      std::puts("downstream: wrong gradient");
      return 1;
    }
  std::puts("downstream: ok");
  return 0;
}
