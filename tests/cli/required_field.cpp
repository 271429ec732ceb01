// Does not compile, on purpose: LinearOptions made without its required `out`. The ctest
// options_without_a_required_field_do_not_compile builds it and passes when the compiler's message
// names the field (core/required.hpp).
#include "tapegrad/layers/linear.hpp"

int main() {
  const tapegrad::LinearOptions complete{.in = 4, .out = 2};
  const tapegrad::LinearOptions missing_out{.in = 4};
  return static_cast<int>(complete.in + missing_out.in);
}
