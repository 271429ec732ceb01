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

#include "tapegrad/core/tensor.hpp"
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

  // The keys that hold the answer for the labelled query at position `query` of `e`: where attention
  // that routes would look. A label that is a position names its key; a label that is a token is held
  // by the other positions with that token (majority: its three copies). Throws ValueError when
  // `query` has no label.
  std::vector<Index> answer_keys(const Example& e, Index query) const;

 protected:
  enum class Answer { token, position };  // what a label is
  Task(TaskSpec spec, Vocabulary labels, Answer answer)
      : spec_(std::move(spec)), labels_(std::move(labels)), answer_(answer) {}

 private:
  TaskSpec spec_;
  Vocabulary labels_;
  Answer answer_;
};

// "majority", "find_same" (controls), "first_token", "index_lookup", "after_marker",
// "marker_position", "partner_position", "cycle".
const std::vector<std::string>& task_names();
std::unique_ptr<Task> make_task(std::string_view name);  // NameError listing the names

// Where a model's attention goes at the labelled queries of a test set, against the keys that hold
// each query's answer (Task::answer_keys). "Most" and "least" are strict: a tie with another key counts
// as neither.
struct AttentionUse {
  double on_answer = 0;  // mean weight on the answer's key(s) (summed when there are several)
  double most = 0;       // fraction of queries whose every answer key outweighs every other key
  double least = 0;      // fraction whose every answer key weighs less than every other key
  double self = 0;       // fraction whose own key (not an answer key) outweighs every other key
  double peak = 0;       // mean of the largest weight in a query's row
};

// Measured over every labelled query of `data` from the attention weights (N, T, T) of one forward pass
// over it (query rows, key columns). ShapeError when the weights do not have that shape.
AttentionUse attention_use(const Task& task, const Dataset& data, const TensorT<float>& weights);

// What attention does at the labelled queries, in one word: "routes" (the answer's key the most attended
// in >= 90% of queries), "away" (the least attended in >= 90%), "self" (the query's own key the most
// attended in >= 90%), "spreads" (no key gets half the weight, on average), else "mixed".
std::string attention_kind(const AttentionUse& u);

struct TaskSplit {
  Dataset train, validation, test;  // no sequence appears in two of them
};
TaskSplit make_task_split(const Task& task, Index n_train, Index n_validation, Index n_test, std::uint64_t seed);

}  // namespace tapegrad::lesson
