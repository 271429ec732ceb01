// Does not compile, on purpose: a backward rule that makes the op's output. The backward gets the output
// const (value() and grad() only), so make() is the forward's alone. The ctest backward_make_does_not_compile
// builds it and passes when the compiler refuses the call (autograd/function.hpp's Output).
#include "tapegrad/autograd/function.hpp"

struct Identity {
  static constexpr const char* name = "identity";
  static constexpr const char* inputs[] = {"x"};
  void forward(tapegrad::Output<double>& out, const tapegrad::TensorD& x) const {
    out.make(x.shape()).array() = x.array();
  }
  static void backward(const tapegrad::Output<double>& out, const tapegrad::OpInput<double>& x) {
    out.make(x.value.shape());
    x.grad.add(out.grad().array());
  }
};

int main() {
  tapegrad::Tape<double> tape;
  const tapegrad::Var<double> x = tape.input(tapegrad::TensorD(tapegrad::Shape::vec(2), 1.0));
  return static_cast<int>(tapegrad::apply(Identity{}, {x}).value().numel());
}
