// Does not compile, on purpose: a configuration whose check() is not const, a near miss of ConfiguredLm's
// hook `void check() const`. The ctest hooks_with_another_signature_do_not_compile builds it and passes when
// the compiler's message names the hook's signature (core/hooks.hpp); a hook found by duck typing skipped
// it, and the model was built without the check.
#include "tapegrad/layers/decoder_lm.hpp"

struct NearMiss : tapegrad::DecoderLmConfig {
  static constexpr std::string_view kind = "near_miss";
  static constexpr std::uint64_t stream = 1;
  template <class S, class F>
  static void fields(S& s, F&& field) {
    tapegrad::DecoderLmConfig::fields(s, field);
  }
  void check() {}  // not const
  static tapegrad::DecoderLmConfig decoder(const NearMiss& c) { return c; }
};

int main() {
  const tapegrad::ConfiguredLm<float, NearMiss> model(NearMiss{{.vocab = 4}});
  return static_cast<int>(model.vocab());
}
