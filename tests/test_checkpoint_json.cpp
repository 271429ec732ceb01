// train/checkpoint: the JSON export and the summary. In its own file because parsing the JSON back goes
// through rapidjson 1.1.0, which offsets a null pointer (Tencent/rapidjson#1724): sanitizer builds
// compile this file, like train/checkpoint/json.cpp, without UBSan's pointer-overflow check.
#include <doctest/doctest.h>

#include <cereal/archives/json.hpp>
#include <sstream>

#include "lesson/tasks.hpp"
#include "lesson/toy_run.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"

using namespace tapegrad;
using namespace tapegrad::lesson;

TEST_CASE("checkpoint: the JSON export is valid JSON with every name, and the summary lists shapes, norms and step") {
  const auto task = make_task("cycle");
  const TaskSplit split = make_task_split(*task, 300, 10, 50, 3);
  ToyRun run({.model = {.vocab = task->tokens().size(), .labels = task->labels().size(), .max_len = task->length(),
                        .heads = 3, .d_head = 11, .output_projection = true},
              .training = {.steps = 40, .batch = 8, .eval_every = 10, .seed = 5}},
             split.train, &split.validation);
  run.trainer().run();
  const Checkpoint c = snapshot(run.trainer());
  const std::string json = checkpoint_json(c);
  std::istringstream in(json);
  CHECK_NOTHROW(cereal::JSONInputArchive{in});  // parses
  for (const auto* p : run.model().parameters()) CHECK(json.find("\"name\": \"model." + p->name + "\"") != std::string::npos);
  CHECK(json.find("\"NaN\"") != std::string::npos);  // the curve's first point: JSON has no NaN literal
  // The model's settings are an object of text, enums by name: what a person reads, the same names the API uses.
  CHECK(json.find("\"attention\": \"learnable\"") != std::string::npos);
  CHECK(json.find("\"positions\": \"onehot\"") != std::string::npos);
  // Every part's entries by name, with their kind: an optimizer's hyperparameters are texts.
  CHECK(json.find("\"name\": \"optimizer.hyperparameters.beta1\",\n") != std::string::npos);
  CHECK(json.find("\"kind\": \"texts\"") != std::string::npos);
  const std::string summary = describe_checkpoint(c);
  INFO(summary);
  CHECK(summary.find("part model:\n  model.attn.wq" + std::string(20, ' ') + "f32 33x33      norm ") != std::string::npos);
  CHECK(summary.find("part trainer:\n") != std::string::npos);  // entry by entry, as every part
  CHECK(summary.find("  trainer.step                     ints (1)       40\n") != std::string::npos);
  CHECK(summary.find("optimizer: adam after 40 steps (lr 0.01, beta1 0.9, beta2 0.999, eps 1e-08, weight_decay 0); "
                     "schedule constant; 12 buffers") != std::string::npos);
  CHECK(summary.find("model: toy_model (vocab 25, labels 8, max_len 8, features onehot") != std::string::npos);
}
