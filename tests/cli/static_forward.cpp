// Does not compile, on purpose: an op whose forward is static, a second spelling of the one an op has,
// `void forward(Output<T>& out, x...) const`. The ctest static_forward_does_not_compile builds it and passes
// when the compiler's message names that spelling (autograd/function.hpp).
#include "tapegrad/autograd/function.hpp"

struct Identity {
  static constexpr const char* name = "identity";
  static constexpr const char* inputs[] = {"x"};
  static void forward(tapegrad::Output<double>& out, const tapegrad::TensorD& x) {
    out.make(x.shape()).array() = x.array();
  }
  static void backward(const tapegrad::Output<double>& out, const tapegrad::OpInput<double>& x) {
    x.grad.add(out.grad().array());
  }
};

int main() {
  tapegrad::Tape<double> tape;
  const tapegrad::Var<double> x = tape.input(tapegrad::TensorD(tapegrad::Shape::vec(2), 1.0));
  return static_cast<int>(tapegrad::apply(Identity{}, {x}).value().numel());
}
