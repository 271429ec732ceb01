// Does not compile, on purpose: a model whose count_parameters_of takes its configuration by non-const
// reference, a near miss of model_from_checkpoint's hook `static Index count_parameters_of(const Config&)`
// (CountsParametersOf, train/checkpoint/checkpoint.hpp). The ctest
// checkpoint_hooks_with_another_signature_do_not_compile builds it and passes when the compiler's message
// names the hook's signature; found by duck typing, the hook was skipped and the count never compared.
#include "tapegrad/train/checkpoint/checkpoint.hpp"

struct NearMissConfig {
  tapegrad::Index width = 1;
  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("width", s.width, "the width");
  }
};

struct NearMiss : tapegrad::Module<float> {
  using Config = NearMissConfig;
  static constexpr std::string_view kind = "near_miss";
  explicit NearMiss(const Config&) {}
  static tapegrad::Index count_parameters_of(Config& c) { return c.width; }  // not const
};

int main() {
  const tapegrad::Checkpoint checkpoint;
  return static_cast<int>(tapegrad::model_config_from<NearMiss>(checkpoint).width);
}
