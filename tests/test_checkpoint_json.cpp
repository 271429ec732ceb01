// train/checkpoint: the JSON export and the summary. In its own file because parsing the JSON back goes
// through rapidjson 1.1.0, which offsets a null pointer (Tencent/rapidjson#1724): sanitizer builds
// compile this file, like train/checkpoint_json.cpp, without UBSan's pointer-overflow check.
#include <doctest/doctest.h>

#include <cereal/archives/json.hpp>
#include <sstream>

#include "tapegrad/train/checkpoint.hpp"
#include "tapegrad/train/tasks.hpp"

using namespace tapegrad;

TEST_CASE("checkpoint: the JSON export is valid JSON with every name, and the summary lists shapes, norms and step") {
  const auto task = make_task("cycle");
  const TaskSplit split = make_task_split(*task, 300, 10, 50, 3);
  ToyModel<float> model(ModelConfig{.vocab = task->tokens().size(), .labels = task->labels().size(),
                                    .max_len = task->length(), .heads = 3, .d_head = 11, .output_projection = true});
  Trainer trainer(model, split.train, &split.validation,
                  TrainConfig{.steps = 40, .batch = 8, .optimizer = OptimizerKind::adam, .eval_every = 10, .seed = 5});
  trainer.run();
  const Checkpoint c = snapshot(trainer);
  const std::string json = checkpoint_json(c);
  std::istringstream in(json);
  CHECK_NOTHROW(cereal::JSONInputArchive{in});  // parses
  for (const auto& p : c.parameters) CHECK(json.find("\"name\": \"" + p.name + "\"") != std::string::npos);
  CHECK(json.find("\"train_loss\": \"NaN\"") != std::string::npos);  // JSON has no NaN literal
  const std::string summary = describe_checkpoint(c);
  CHECK(summary.find("attn.wq") != std::string::npos);
  CHECK(summary.find("f32      33x33  norm ") != std::string::npos);
  CHECK(summary.find("training: step 40 of 40") != std::string::npos);
  CHECK(summary.find("optimizer: adam after 40 steps") != std::string::npos);
}
