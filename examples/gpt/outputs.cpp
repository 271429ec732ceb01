#include "gpt/outputs.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "tapegrad/train/checkpoint/safetensors.hpp"

namespace gpt {

using namespace tapegrad;
namespace fs = std::filesystem;

RunFolder::RunFolder(fs::path dir, const FolderPlan& plan)
    : out_(std::move(dir), {.program = "gpt", .overwrite = plan.overwrite, .resume = plan.resume, .inputs = plan.inputs}) {
  std::vector<std::string> names = {"report.md", "curves.svg", "samples_bigram.txt"};
  for (const auto& m : plan.models) {
    for (const char* ext : {".tgck", ".safetensors"}) names.push_back(m + ext);
    names.push_back(fmt::format("samples_{}.txt", m));
    if (plan.checkpoints) names.push_back(fmt::format("checkpoints/{}/checkpoint-{:08}.tgck", m, plan.last_step));
  }
  names.insert(names.end(), plan.pictures.begin(), plan.pictures.end());
  out_.plan(names);
}

void RunFolder::write(std::string_view name, std::string_view content) {
  out_.write(name, content);
  written_.emplace_back(name);
}

fs::path RunFolder::save_model(std::string_view model, const Checkpoint& checkpoint, const Module<float>& weights,
                               WeightLayout layout) {
  const std::string name = fmt::format("{}.tgck", model), exported = fmt::format("{}.safetensors", model);
  tapegrad::save_checkpoint(out_, name, checkpoint);
  const std::vector<std::byte> bytes = encode_safetensors(weights, {.layout = layout});
  out_.write(exported, {reinterpret_cast<const char*>(bytes.data()), bytes.size()}, Durability::durable);
  written_.push_back(name);
  written_.push_back(exported);
  return out_.path(name);
}

fs::path RunFolder::save_checkpoint(std::string_view model, const Checkpoint& checkpoint, std::int64_t step, int keep) {
  auto it = std::find_if(checkpoints_.begin(), checkpoints_.end(), [&](const auto& c) { return c.first == model; });
  if (it == checkpoints_.end()) {
    checkpoints_.emplace_back(std::string(model), CheckpointDir(out_, fmt::format("checkpoints/{}", model), keep));
    it = checkpoints_.end() - 1;
  }
  return it->second.save(checkpoint, step);
}

}  // namespace gpt
