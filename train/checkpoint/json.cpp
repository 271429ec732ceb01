// The JSON export of a checkpoint, in its own file: rapidjson 1.1.0 (Debian 12's, which cereal's JSON
// archive uses) does pointer arithmetic on a null pointer in internal/stack.h (Tencent/rapidjson#1724,
// fixed upstream after 1.1.0), so sanitizer builds compile this file, and only this file, without
// UBSan's pointer-overflow check (see CMakeLists.txt).
#include <sstream>

#include "tapegrad/train/checkpoint/serialize.hpp"

namespace tapegrad {

std::string checkpoint_json(const Checkpoint& c) {
  std::ostringstream out;
  {
    cereal::JSONOutputArchive ar(out);
    ar(cereal::make_nvp("checkpoint", c));
  }
  return out.str();
}

}  // namespace tapegrad
