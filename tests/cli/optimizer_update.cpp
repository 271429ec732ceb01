// Does not compile, on purpose: an optimizer whose update() is a const member function, as it was before the
// update was static, so it could read options().lr, the rate without its schedule. The ctest
// optimizer_update_not_static_does_not_compile builds it and passes when the compiler's message names the
// update's signature (train/optimizer.hpp, OptimizerWith).
#include "tapegrad/train/optimizer.hpp"

struct NearMissOptions {
  double lr = 0.1;
  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("lr", s.lr, "learning rate", tapegrad::at_least(0));
  }
};

class NearMiss final : public tapegrad::OptimizerWith<NearMiss, float, NearMissOptions> {
 public:
  explicit NearMiss(std::vector<tapegrad::Parameter<float>*> params)
      : OptimizerWith(std::move(params), {}, "near_miss", {}) {}
  void update(const NearMissOptions&, std::int64_t, tapegrad::ParamSlice<float> s) const {  // not static
    s.value -= static_cast<float>(options().lr) * s.grad;
  }
};

int main() {
  tapegrad::Parameter<float> w("w", tapegrad::Tensor(tapegrad::Shape::vec(2)));
  NearMiss optimizer({&w});
  optimizer.step();
}
