// Does not compile, on purpose: a Parameter negated alone. On an operator's right it is read on the left
// operand's tape (x - gain); alone it has no tape, so unary minus is deleted for it rather than taken as an
// empty Var that fails at run time. The ctest parameter_negated_does_not_compile builds it and passes when
// the compiler names the deleted operator (autograd/ops.hpp).
#include "tapegrad/autograd/ops.hpp"

int main() {
  tapegrad::Parameter<double> gain("gain", tapegrad::TensorD(tapegrad::Shape::vec(2), 1.0));
  return static_cast<int>((-gain).value().numel());
}
