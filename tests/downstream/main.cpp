// A user's program built against the installed package, with a core/error.hpp of its own on its include
// path: one umbrella header, record, backward, check one gradient.
#include "core/error.hpp"  // the consumer's, not tapegrad's

#include <tapegrad/tapegrad.hpp>

#include <cstdio>

int main() {
  using namespace tapegrad;
  const consumer::Error own;
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
  std::printf("downstream: ok (beside %s)\n", own.what);
  return 0;
}
