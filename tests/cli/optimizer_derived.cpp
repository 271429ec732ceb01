// Does not compile, on purpose: an optimizer that names another optimizer as OptimizerWith's Derived (a copy's
// slip), which would run that one's update. The ctest optimizer_of_another_derived_does_not_compile builds it
// and passes when the compiler refuses OptimizerWith's constructor, which is Derived's alone
// (train/optimizer.hpp).
#include "tapegrad/train/optimizer.hpp"

class Copied final : public tapegrad::OptimizerWith<tapegrad::SGD<float>, float, tapegrad::SgdOptions> {
 public:
  explicit Copied(std::vector<tapegrad::Parameter<float>*> params)
      : OptimizerWith(std::move(params), {}, "copied", {}) {}
};

int main() {
  tapegrad::Parameter<float> w("w", tapegrad::Tensor(tapegrad::Shape::vec(2)));
  Copied optimizer({&w});
  optimizer.step();
}
