// train/: vocabularies, batches, the resumable sampler, the dataset file format and its errors, the toy
// tasks (labels checked by an independent reading of each task's rule), the toy model, the training
// loop (learning, determinism, non-finite losses) and its reports.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "tapegrad/autograd/ops.hpp"
#include "helpers.hpp"
#include "tapegrad/train/dataset_file.hpp"
#include "tapegrad/train/report.hpp"
#include "tapegrad/train/tasks.hpp"
#include "tapegrad/train/trainer.hpp"

using namespace tapegrad;

namespace {

// The first position with a label, and that label.
std::pair<Index, std::int32_t> only_label(const Example& e) {
  Index at = -1;
  std::int32_t label = 0, count = 0;
  for (std::size_t i = 0; i < e.labels.size(); ++i)
    if (e.labels[i] != kIgnoreLabel) {
      at = static_cast<Index>(i);
      label = e.labels[i];
      ++count;
    }
  CHECK(count == 1);
  return {at, label};
}

Index position_of(const Example& e, std::int32_t token) {
  Index found = -1;
  for (std::size_t i = 0; i < e.tokens.size(); ++i)
    if (e.tokens[i] == token) {
      CHECK(found == -1);  // occurs once
      found = static_cast<Index>(i);
    }
  return found;
}

ModelConfig small_config(const Task& task, AttentionMode mode) {
  ModelConfig c;
  c.vocab = task.tokens().size();
  c.labels = task.labels().size();
  c.max_len = task.length();
  c.attention = mode;
  return c;
}

}  // namespace

TEST_CASE("data: vocabularies assign dense ids in order and refuse unknown names") {
  Vocabulary v({"<pad>", "a", "b"});
  CHECK(v.size() == 3);
  CHECK(v.id("b") == 2);
  CHECK(v.add("c") == 3);
  CHECK(v.add("a") == 1);
  CHECK(v.name(3) == "c");
  CHECK_THROWS_WITH_AS(v.id("zz"), "vocabulary: unknown name 'zz' (the vocabulary has 4 names)", NameError);
  CHECK_THROWS_WITH_AS(Vocabulary({"x", "x"}), "vocabulary: 'x' appears twice", NameError);
}

TEST_CASE("data: batches pad short examples, mask the padding and ignore its labels") {
  Dataset d;
  d.name = "tiny";
  d.examples = {{{1, 2, 3}, {0, kIgnoreLabel, 1}}, {{4}, {1}}};
  Batch b;
  const Index both[] = {0, 1};
  make_batch(d, both, 3, b);
  CHECK(b.tokens == Ids(Shape::mat(2, 3), {1, 2, 3, 4, 0, 0}));
  CHECK(b.targets == Ids(Shape::mat(2, 3), {0, kIgnoreLabel, 1, 1, kIgnoreLabel, kIgnoreLabel}));
  CHECK(b.padding == Mask(Shape::mat(2, 3), {0, 0, 0, 0, 1, 1}));
  CHECK(b.padded);
  const Index first[] = {0};
  make_batch(d, first, 3, b);
  CHECK_FALSE(b.padded);
  CHECK_THROWS_WITH_AS(make_batch(d, first, 2, b), "make_batch: example 0 of 'tiny' has 3 tokens, more than the batch length 2",
                       ShapeError);
}

TEST_CASE("data: the sampler visits every example once per epoch and resumes exactly from its state") {
  Sampler s(10, 4, 7);
  std::multiset<Index> epoch;
  for (int i = 0; i < 5; ++i)  // 20 draws: epochs 0 and 1 exactly
    for (Index k : s.next()) epoch.insert(k);
  for (Index k = 0; k < 10; ++k) CHECK(epoch.count(k) == 2);
  const Sampler::State saved = s.state();
  std::vector<Index> expected;
  for (int i = 0; i < 7; ++i)
    for (Index k : s.next()) expected.push_back(k);
  Sampler other(10, 4, 999);
  other.set_state(saved);
  std::vector<Index> replay;
  for (int i = 0; i < 7; ++i)
    for (Index k : other.next()) replay.push_back(k);
  CHECK(replay == expected);
  Sampler wrong(11, 4, 1);
  CHECK_THROWS_WITH_AS(wrong.set_state(saved),
                       "sampler: the saved data order covers 10 examples at position 10 but this dataset has 11", ValueError);
}

TEST_CASE("dataset file: tokens, a TAB, one label per token; vocabularies built from the data") {
  const Dataset d = parse_dataset("# a comment\nthe cat sat\tDET NOUN VERB\n\na b ?\t_ _ b\n", "mem.txt");
  CHECK(d.size() == 2);
  CHECK(d.tokens.names() == std::vector<std::string>{"<pad>", "the", "cat", "sat", "a", "b", "?"});
  CHECK(d.labels.names() == std::vector<std::string>{"DET", "NOUN", "VERB", "b"});
  CHECK(d.examples[1].tokens == std::vector<std::int32_t>{4, 5, 6});
  CHECK(d.examples[1].labels == std::vector<std::int32_t>{kIgnoreLabel, kIgnoreLabel, 3});
  CHECK(d.max_len() == 3);
  CHECK(d.labelled_positions() == 4);
  // An evaluation file is read against the training vocabularies.
  const Dataset e = parse_dataset("sat cat\tVERB _\n", "eval.txt", d.tokens, d.labels);
  CHECK(e.examples[0].tokens == std::vector<std::int32_t>{3, 2});
  CHECK_THROWS_WITH_AS(parse_dataset("dog\tNOUN\n", "eval.txt", d.tokens, d.labels),
                       "eval.txt:1: token 'dog' does not occur in the training data", FormatError);
}

TEST_CASE("dataset file: a malformed line is an error naming the file and the line") {
  CHECK_THROWS_WITH_AS(parse_dataset("a b\tX Y\na b X Y\n", "data.txt"),
                       "data.txt:2: expected tokens, a TAB, then one label per token; this line has no TAB", FormatError);
  CHECK_THROWS_WITH_AS(parse_dataset("a b c d\tX Y Z\n", "data.txt"),
                       "data.txt:1: 4 tokens but 3 labels; give one label per token ('_' for none)", FormatError);
  CHECK_THROWS_WITH_AS(parse_dataset("\tX\n", "data.txt"), "data.txt:1: no tokens before the TAB", FormatError);
  CHECK_THROWS_WITH_AS(parse_dataset("a\tX\tY\n", "data.txt"),
                       "data.txt:1: more than one TAB; tokens and labels are separated by exactly one", FormatError);
  CHECK_THROWS_WITH_AS(parse_dataset("a <pad>\tX Y\n", "data.txt"), "data.txt:1: '<pad>' is reserved for padding",
                       FormatError);
  CHECK_THROWS_WITH_AS(parse_dataset("# nothing\n\n", "data.txt"), "data.txt: no examples (every line is blank or a comment)",
                       FormatError);
  CHECK_THROWS_WITH_AS(parse_dataset("a b\t_ _\n", "data.txt"), "data.txt: no labels at all: every label is '_'", FormatError);
  CHECK_THROWS_WITH_AS(read_dataset("/nonexistent/data.txt"), "read_dataset: cannot open '/nonexistent/data.txt'", Error);
}

TEST_CASE("tasks: every label follows the task's rule, read independently from the tokens") {
  const auto& V = make_task("majority")->tokens();
  const std::int32_t query = V.id("?"), marker = V.id(">");
  for (const auto& name : task_names()) {
    CAPTURE(name);
    const auto task = make_task(name);
    Rng rng(5);
    for (int n = 0; n < 500; ++n) {
      const Example e = task->generate(rng);
      REQUIRE(static_cast<Index>(e.tokens.size()) == task->length());
      if (name == "cycle") {  // three labels: each member of the triad points at the next
        Index labelled = 0;
        for (std::size_t i = 0; i < e.labels.size(); ++i) {
          if (e.labels[i] == kIgnoreLabel) continue;
          ++labelled;
          const std::int32_t t = e.tokens[i], next = (t / 3) * 3 + (t % 3 + 1) % 3;
          CHECK(e.tokens[static_cast<std::size_t>(e.labels[i])] == next);
        }
        CHECK(labelled == 3);
        continue;
      }
      const auto [at, label] = only_label(e);
      const auto& seq = e.tokens;
      if (name == "majority") {
        CHECK(std::count(seq.begin(), seq.end(), label) == 3);
        CHECK(seq.back() == query);
      } else if (name == "find_same") {
        CHECK(at == 7);
        CHECK(seq[static_cast<std::size_t>(label)] == seq.back());
      } else if (name == "first_token") {
        CHECK(label == seq[0]);
      } else if (name == "index_lookup") {
        const auto k = static_cast<std::size_t>(V.name(seq.back()).at(1) - '0');
        CHECK(label == seq[k]);
      } else if (name == "after_marker") {
        CHECK(seq[static_cast<std::size_t>(at)] == marker);
        CHECK(label == seq[static_cast<std::size_t>(at + 1)]);
      } else if (name == "marker_position") {
        CHECK(seq[static_cast<std::size_t>(label)] == marker);
      } else if (name == "partner_position") {
        const std::int32_t u = seq[static_cast<std::size_t>(at)];
        CHECK(u % 2 == 0);
        CHECK(position_of(e, u + 1) == label);
      }
    }
  }
}

TEST_CASE("tasks: train, validation and test share no sequence, and the same seed gives the same split") {
  const auto task = make_task("partner_position");
  const TaskSplit a = make_task_split(*task, 300, 100, 200, 3), b = make_task_split(*task, 300, 100, 200, 3);
  std::set<std::vector<std::int32_t>> seen;
  for (const Dataset* d : {&a.train, &a.validation, &a.test})
    for (const auto& e : d->examples) CHECK(seen.insert(e.tokens).second);
  CHECK(seen.size() == 600);
  CHECK(a.test.examples[17].tokens == b.test.examples[17].tokens);
  CHECK_THROWS_WITH_AS(make_task("parity"),
                       "task: unknown task 'parity'; the tasks are majority, find_same, first_token, index_lookup, "
                       "after_marker, marker_position, partner_position, cycle",
                       NameError);
}

TEST_CASE("tasks: a trained parameter-free model does not beat a separating task's no-routing ceiling") {
  // The ceiling is an upper bound for attention that cannot route, so a parameter-free model scoring
  // clearly above it would prove the derivation wrong. 4 standard errors of 2000 test labels ~ 0.03.
  for (const std::string name : {"first_token", "marker_position", "cycle"}) {
    CAPTURE(name);
    const auto task = make_task(name);
    const TaskSplit split = make_task_split(*task, 2000, 10, 2000, 11);
    ToyModel<float> model(small_config(*task, AttentionMode::parameter_free));
    Trainer trainer(model, split.train, nullptr, TrainConfig{.steps = 600, .lr = 0.1, .eval_every = 600});
    trainer.run();
    const double accuracy = trainer.evaluate(split.test).accuracy;
    const double se = std::sqrt(task->spec().ceiling * (1 - task->spec().ceiling) / 2000.0);
    CHECK(accuracy <= task->spec().ceiling + 4 * se);
    CHECK(accuracy >= task->spec().ceiling - 0.05);  // and it does get there
  }
}

TEST_CASE("model: configurations that do not fit together are refused; the toy model passes gradcheck") {
  ModelConfig c{.vocab = 5, .labels = 3, .max_len = 4, .heads = 2, .residual = true};
  c.positions = PositionEncoding::onehot;  // width 5 + 4 = 9, not divisible by 2 heads
  CHECK_THROWS_WITH_AS(ToyModel<double>{c}, "self_attention 'attn': d_model 9 is not divisible by n_heads 2; give d_head explicitly",
                       ValueError);
  c.d_head = 4;
  CHECK_THROWS_WITH_AS(ToyModel<double>{c},
                       "model: a residual connection adds the attention output (8 wide) to its input (9 wide); make heads "
                       "x d_head equal 9 or use the output projection",
                       ValueError);
  CHECK(parse_feature_kind("learned") == FeatureKind::learned);
  CHECK_THROWS_WITH_AS(parse_feature_kind("bag"), "features: unknown kind 'bag'; choose onehot or learned", NameError);

  for (FeatureKind features : {FeatureKind::onehot, FeatureKind::learned}) {
    CAPTURE(to_string(features));
    ModelConfig g{.vocab = 5, .labels = 3, .max_len = 4, .features = features, .d_embed = 6,
                  .positions = features == FeatureKind::onehot ? PositionEncoding::onehot : PositionEncoding::learned,
                  .heads = 1, .output_projection = true, .residual = true, .seed = 3};
    ToyModel<double> model(g);
    Batch batch;
    Dataset d;
    d.examples = {{{1, 2, 3, 4}, {0, kIgnoreLabel, 2, 1}}, {{4, 0, 0}, {2, 2, kIgnoreLabel}}};
    const Index both[] = {0, 1};
    make_batch(d, both, 4, batch);
    const auto params = model.parameters();
    const auto report = gradcheck([&](Tape<double>& t, std::span<const Var<double>>) { return model.loss(t, batch); }, {},
                                  params, kStrictGradcheck);
    CHECK_GRADCHECK(report);
  }
}

TEST_CASE("model: implied_parameter_count(config) agrees with the parameters a model of that config has") {
  Index checked = 0;
  for (auto features : {FeatureKind::onehot, FeatureKind::learned})
    for (auto positions : {PositionEncoding::none, PositionEncoding::onehot, PositionEncoding::learned, PositionEncoding::sinusoidal})
      for (auto attention : {AttentionMode::parameter_free, AttentionMode::learnable})
        for (Index heads : {1, 2, 3})
          for (bool wo : {false, true})
            for (bool residual : {false, true}) {
              const ModelConfig c{.vocab = 7, .labels = 4, .max_len = 5, .features = features, .d_embed = 6,
                                  .positions = positions, .attention = attention, .heads = heads,
                                  .output_projection = wo, .residual = residual};
              const Index predicted = ToyModel<float>::implied_parameter_count(c);
              try {
                ToyModel<float> model(c);
                CHECK(predicted == model.parameter_count());
                ++checked;
              } catch (const ValueError&) {
                CHECK(predicted == -1);  // refused by both
              }
            }
  CHECK(checked > 40);
}

TEST_CASE("trainer: learns a task, and the same seeds give the same curve bit for bit") {
  const auto task = make_task("first_token");
  const TaskSplit split = make_task_split(*task, 1000, 200, 200, 1);
  auto train = [&] {
    ToyModel<float> model(small_config(*task, AttentionMode::learnable));
    Trainer trainer(model, split.train, &split.validation, TrainConfig{.steps = 300, .lr = 0.03, .eval_every = 100, .seed = 4});
    trainer.run();
    return std::make_pair(trainer.curve(), trainer.evaluate(split.test).accuracy);
  };
  const auto [curve, accuracy] = train();
  REQUIRE(curve.size() == 4);  // steps 0, 100, 200, 300
  CHECK(curve[0].step == 0);
  CHECK(std::isnan(curve[0].train_loss));
  CHECK(curve.back().train_loss < 0.1);
  CHECK(accuracy >= 0.97);
  // Again, each time with the heap in another state: results must not depend on where buffers land.
  std::vector<std::vector<char>> shift;
  for (std::size_t k = 1; k <= 3; ++k) {
    shift.emplace_back(8 * k + 1);
    const auto [again, accuracy_again] = train();
    for (std::size_t i = 1; i < curve.size(); ++i) {
      CHECK(again[i].train_loss == curve[i].train_loss);
      CHECK(again[i].eval_loss == curve[i].eval_loss);
    }
    CHECK(accuracy_again == accuracy);
  }
}

TEST_CASE("trainer: a cosine schedule over zero steps is accepted, and training does nothing") {
  // steps = 0 passes the config checks; the schedule then has no step to cover and must not refuse it.
  const auto task = make_task("first_token");
  const TaskSplit split = make_task_split(*task, 100, 10, 10, 1);
  ToyModel<float> model(small_config(*task, AttentionMode::learnable));
  const Tensor before = model.parameters().front()->value;
  Trainer trainer(model, split.train, &split.validation, TrainConfig{.steps = 0, .cosine = true});
  trainer.run();
  CHECK(trainer.steps_done() == 0);
  CHECK(model.parameters().front()->value == before);
}

TEST_CASE("trainer: a non-finite loss stops training with the step; anomaly mode names the op and its line") {
  const auto task = make_task("majority");
  const TaskSplit split = make_task_split(*task, 200, 10, 10, 2);
  ToyModel<float> model(small_config(*task, AttentionMode::learnable));
  Trainer trainer(model, split.train, nullptr, TrainConfig{.steps = 10});
  trainer.step();
  model.parameter("readout.bias").value[0] = std::numeric_limits<float>::infinity();
  const auto before = model.parameter("attn.wq").value;
  CHECK_THROWS_WITH_AS(trainer.step(),
                       doctest::Contains("train: the loss is NaN at step 2 (lr 0.01); lower the learning rate, clip "
                                         "gradients, or turn on anomaly detection"),
                       ValueError);
  CHECK(model.parameter("attn.wq").value == before);  // nothing was applied
  CHECK(trainer.steps_done() == 1);

  Trainer anomalous(model, split.train, nullptr, TrainConfig{.steps = 10, .anomaly = true});
  // The first non-finite value on the tape is the poisoned parameter itself, read by the readout.
  CHECK_THROWS_WITH_AS(anomalous.step(),
                       doctest::Contains("anomaly: parameter 'readout.bias' (read at layers/linear.cpp:"), ValueError);
  CHECK_THROWS_WITH_AS(Trainer(model, split.train, nullptr, TrainConfig{.lr = -1}),
                       "train: the learning rate must be positive, got -1", ValueError);
  CHECK_THROWS_WITH_AS(parse_optimizer_kind("lbfgs"), "optimizer: unknown optimizer 'lbfgs'; choose sgd or adam", NameError);
}

TEST_CASE("report: plain lines when not a terminal, and a CSV row per evaluation") {
  const auto dir = std::filesystem::temp_directory_path() / "tapegrad_test_report";
  std::filesystem::remove_all(dir);
  const auto log_path = dir / "out.txt";
  std::filesystem::create_directories(dir);
  std::FILE* out = std::fopen(log_path.c_str(), "w");
  REQUIRE(out != nullptr);
  {
    Progress progress(out, Progress::Style::automatic, 200, "first_token");
    CsvLog csv(dir / "log" / "curve.csv");
    const auto task = make_task("first_token");
    const TaskSplit split = make_task_split(*task, 200, 50, 10, 3);
    ToyModel<float> model(small_config(*task, AttentionMode::learnable));
    Trainer trainer(model, split.train, &split.validation, TrainConfig{.steps = 200, .eval_every = 100});
    TrainCallbacks cb = progress.callbacks();
    auto on_eval = cb.on_evaluation;
    cb.on_evaluation = [&](const CurvePoint& p) {
      on_eval(p);
      csv.write(p);
    };
    trainer.run(cb);
  }
  std::fclose(out);
  std::ifstream text(log_path), csv(dir / "log" / "curve.csv");
  std::stringstream line_stream, row_stream;
  line_stream << text.rdbuf();
  row_stream << csv.rdbuf();
  const std::string lines = line_stream.str(), rows = row_stream.str();
  CHECK(lines.find("first_token step    100/200  loss ") != std::string::npos);
  CHECK(lines.find('\r') == std::string::npos);  // a file gets lines, not a redrawn bar
  CHECK(std::count(rows.begin(), rows.end(), '\n') == 4);  // header + steps 0, 100, 200
  CHECK(rows.rfind("step,train_loss,train_accuracy,eval_loss,eval_accuracy,lr,seconds\n0,nan,", 0) == 0);
  std::filesystem::remove_all(dir);
}
