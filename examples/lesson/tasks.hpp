#pragma once
// Toy sequence tasks that show what learnable Wq, Wk, Wv buy.
//
// Parameter-free attention weighs token j for query i by softmax(x_i . x_j): with one-hot token and
// position features, x_i . x_j = [same token] + [same position]. So at a labelled position it can
// only deliver the bag of tokens in the sequence, its own token and position, and where its own token
// occurs again. In the separating tasks the answer sits at a position that no such similarity
// singles out (the token that holds it is NOT the one most similar to the token that asks), so
// parameter-free attention cannot route it there, while learned Wq, Wk can make any query attend to
// any key: score(i, j) = x_i Wq Wk^T x_j^T is a learned bilinear form over (token, position) pairs.
//
// Every task's `ceiling` is the best accuracy a model could reach from what attention that cannot
// route delivers (the information above), derived in tasks.cpp beside each generator. The controls
// are tasks parameter-free attention does solve.
//
// Sequences have length 8 over 16 content tokens a..p and a few special tokens; within a sequence the
// content tokens are distinct unless the task says otherwise.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/train/data.hpp"

namespace tapegrad::lesson {

struct TaskSpec {
  std::string name;
  std::string description;  // what the label is
  std::string routing;      // what attention has to do to solve it
  bool control = false;     // parameter-free attention can solve it
  double ceiling = 1;       // best accuracy without routing (1 for controls)
  std::string ceiling_why;  // the derivation, in one sentence
};

class Task {
 public:
  virtual ~Task() = default;
  const TaskSpec& spec() const { return spec_; }
  const Vocabulary& tokens() const;  // shared by every task
  const Vocabulary& labels() const { return labels_; }
  Index length() const;              // 8
  virtual Example generate(Rng& rng) const = 0;

 protected:
  Task(TaskSpec spec, Vocabulary labels) : spec_(std::move(spec)), labels_(std::move(labels)) {}

 private:
  TaskSpec spec_;
  Vocabulary labels_;
};

// "majority", "find_same" (controls), "first_token", "index_lookup", "after_marker",
// "marker_position", "partner_position", "cycle".
const std::vector<std::string>& task_names();
std::unique_ptr<Task> make_task(std::string_view name);  // NameError listing the names

struct TaskSplit {
  Dataset train, validation, test;  // no sequence appears in two of them
};
TaskSplit make_task_split(const Task& task, Index n_train, Index n_validation, Index n_test, std::uint64_t seed);

}  // namespace tapegrad::lesson
