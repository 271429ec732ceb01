// Does not compile, on purpose: an op whose forward is static, a second spelling of the one an op has,
// `void forward(ctx, x...) const`. The ctest static_forward_does_not_compile builds it and passes when the
// compiler's message names that spelling (autograd/function.hpp).
#include "tapegrad/autograd/function.hpp"

struct Identity {
  static constexpr const char* name = "identity";
  static constexpr const char* inputs[] = {"x"};
  static void forward(tapegrad::ForwardContext<double>& ctx, const tapegrad::TensorD& x) {
    ctx.output(x.shape()).array() = x.array();
  }
  static void backward(tapegrad::BackwardContext<double>& ctx, const tapegrad::OpInput<double>& x) {
    x.grad.add(ctx.grad_output().array());
  }
};

int main() {
  tapegrad::Tape<double> tape;
  const tapegrad::Var<double> x = tape.input(tapegrad::TensorD(tapegrad::Shape::vec(2), 1.0));
  return static_cast<int>(tapegrad::apply(Identity{}, {x}).value().numel());
}
