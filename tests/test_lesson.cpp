// The lesson (examples/lesson): the toy tasks (labels checked by an independent reading of each task's
// rule, splits, the no-routing ceiling), the toy model (configurations, gradcheck, its parameter count
// from the configuration alone), and its training through the library's generic loop (learning,
// determinism, non-finite losses).
#include <doctest/doctest.h>

#include <cmath>
#include <optional>
#include <set>

#include "helpers.hpp"
#include "lesson/tasks.hpp"
#include "lesson/toy_model.hpp"
#include "lesson/toy_run.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"

using namespace tapegrad;
using namespace tapegrad::lesson;

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

// A toy run with Adam at `lr` (the lesson's default optimizer) and these trainer options.
ToyRunConfig run_config(const Task& task, AttentionMode mode, double lr, TrainOptions training) {
  return {.model = small_config(task, mode), .hyperparameters = {{"lr", to_text(lr)}}, .training = training};
}

}  // namespace

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

TEST_CASE("tasks: answer_keys are the positions that hold each labelled query's answer, by the task's rule") {
  const auto& V = make_task("majority")->tokens();
  using Keys = std::vector<Index>;
  for (const auto& name : task_names()) {
    CAPTURE(name);
    const auto task = make_task(name);
    Rng rng(9);
    for (int n = 0; n < 200; ++n) {
      const Example e = task->generate(rng);
      const auto& seq = e.tokens;
      for (std::size_t i = 0; i < e.labels.size(); ++i) {
        const auto at = static_cast<Index>(i);
        if (e.labels[i] == kIgnoreLabel) {
          CHECK_THROWS_AS(task->answer_keys(e, at), ValueError);
          continue;
        }
        const Keys keys = task->answer_keys(e, at);
        const std::int32_t label = e.labels[i];
        if (name == "majority") {
          Keys copies;
          for (std::size_t j = 0; j < seq.size(); ++j)
            if (seq[j] == label) copies.push_back(static_cast<Index>(j));
          CHECK(copies.size() == 3);
          CHECK(keys == copies);
        } else if (name == "first_token") {
          CHECK(keys == Keys{0});
        } else if (name == "index_lookup") {
          CHECK(keys == Keys{V.name(seq.back()).at(1) - '0'});
        } else if (name == "after_marker") {
          CHECK(keys == Keys{at + 1});
        } else {  // the label is a position: find_same, marker_position, partner_position, cycle
          CHECK(keys == Keys{label});
        }
      }
    }
  }
  const auto task = make_task("first_token");
  Rng rng(1);
  CHECK_THROWS_WITH_AS(task->answer_keys(task->generate(rng), 3),
                       "task 'first_token': position 3 of the sequence (8 tokens) has no label", ValueError);
}

TEST_CASE("tasks: attention_use measures the weight on the answer's key and whether it is the most or least attended") {
  const auto task = make_task("first_token");  // one labelled query per sequence, at position 7; its answer is key 0
  Rng rng(3);
  Dataset data;
  data.tokens = task->tokens();
  data.labels = task->labels();
  for (int n = 0; n < 4; ++n) data.examples.push_back(task->generate(rng));
  TensorT<float> w(Shape::batched(4, 8, 8));
  const auto set_row = [&](Index n, std::vector<float> row) {
    std::copy(row.begin(), row.end(), w.data() + (n * 8 + 7) * 8);
  };
  set_row(0, {0.65f, 0.05f, 0.05f, 0.05f, 0.05f, 0.05f, 0.05f, 0.05f});  // routes to the answer
  set_row(1, {0.00f, 0.10f, 0.15f, 0.15f, 0.15f, 0.15f, 0.15f, 0.15f});  // away from it
  set_row(2, {0.10f, 0.10f, 0.10f, 0.10f, 0.10f, 0.10f, 0.10f, 0.30f});  // itself; the answer ties: neither
  set_row(3, {0.20f, 0.20f, 0.10f, 0.10f, 0.10f, 0.10f, 0.10f, 0.10f});  // a tie for the most: neither
  const AttentionUse u = attention_use(*task, data, w);
  CHECK(u.on_answer == doctest::Approx((0.65 + 0.0 + 0.1 + 0.2) / 4));
  CHECK(u.most == 0.25);
  CHECK(u.least == 0.25);
  CHECK(u.self == 0.25);
  CHECK(u.peak == doctest::Approx((0.65 + 0.15 + 0.3 + 0.2) / 4));
  CHECK(attention_kind(u) == "spreads");  // no 90% of anything, and the largest weight is 0.325 on average
  CHECK(attention_kind({.on_answer = 0.9, .most = 0.95, .peak = 0.9}) == "routes");
  CHECK(attention_kind({.on_answer = 0.0, .least = 0.9, .peak = 0.2}) == "away");
  CHECK(attention_kind({.on_answer = 0.1, .self = 0.92, .peak = 0.8}) == "self");
  CHECK(attention_kind({.on_answer = 0.3, .most = 0.5, .peak = 0.4}) == "spreads");
  CHECK(attention_kind({.on_answer = 0.6, .most = 0.6, .least = 0.3, .peak = 0.7}) == "mixed");
  // majority: the answer is held by three keys, all of which must outweigh every other key.
  const auto majority = make_task("majority");
  Dataset one;
  one.tokens = majority->tokens();
  one.labels = majority->labels();
  one.examples.push_back(majority->generate(rng));
  const auto keys = majority->answer_keys(one.examples[0], 7);
  TensorT<float> even(Shape::batched(1, 8, 8));
  for (Index j = 0; j < 8; ++j) even[7 * 8 + j] = std::find(keys.begin(), keys.end(), j) != keys.end() ? 0.3f : 0.02f;
  CHECK(attention_use(*majority, one, even).most == 1);
  CHECK(attention_use(*majority, one, even).on_answer == doctest::Approx(0.9));

  CHECK_THROWS_WITH_AS(attention_use(*task, data, TensorT<float>(Shape::batched(3, 8, 8))),
                       "attention_use: weights of shape 3x8x8 for 4 sequences of 8 tokens (expected 4x8x8)", ShapeError);
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
    ToyRun run(run_config(*task, AttentionMode::parameter_free, 0.1, {.steps = 600, .eval_every = 600}), split.train);
    run.trainer().run();
    const double accuracy = value_of(run.trainer().evaluate(SequenceSource(split.test)), "eval_accuracy");
    const double se = std::sqrt(task->spec().ceiling * (1 - task->spec().ceiling) / 2000.0);
    CHECK(accuracy <= task->spec().ceiling + 4 * se);
    CHECK(accuracy >= task->spec().ceiling - 0.05);  // and it does get there
  }
}

TEST_CASE("model: configurations that do not fit together are refused, the toy model passes gradcheck") {
  ModelConfig c{.vocab = 5, .labels = 3, .max_len = 4, .heads = 2, .residual = true};
  c.positions = PositionEncoding::onehot;  // width 5 + 4 = 9, not divisible by 2 heads
  CHECK_THROWS_WITH_AS(ToyModel<double>{c}, "self_attention 'attn': d_model 9 is not divisible by n_heads 2, and no d_head is given",
                       ValueError);
  c.d_head = 4;
  CHECK_THROWS_WITH_AS(ToyModel<double>{c},
                       "model: a residual connection adds the attention output (8 wide) to its input (9 wide); make heads "
                       "x d_head equal 9 or use the output projection",
                       ValueError);
  CHECK(parse_enum<FeatureKind>("learned") == FeatureKind::learned);
  CHECK_THROWS_WITH_AS(parse_enum<FeatureKind>("bag"), "features: unknown name 'bag'; choose onehot or learned", NameError);
  c.d_head = std::nullopt;
  c.vocab = 0;
  CHECK_THROWS_WITH_AS(ToyModel<double>{c}, "model: vocab must be in [1, 16777216), got 0", ValueError);

  for (FeatureKind features : {FeatureKind::onehot, FeatureKind::learned}) {
    CAPTURE(to_string(features));
    ModelConfig g{.vocab = 5, .labels = 3, .max_len = 4, .features = features, .d_embed = 6,
                  .positions = features == FeatureKind::onehot ? PositionEncoding::onehot : PositionEncoding::learned,
                  .heads = 1, .output_projection = true, .residual = true, .seed = 3};
    ToyModel<double> model(g);
    SequenceBatch batch;
    Dataset d;
    d.examples = {{{1, 2, 3, 4}, {0, kIgnoreLabel, 2, 1}}, {{4, 0, 0}, {2, 2, kIgnoreLabel}}};
    const Index both[] = {0, 1};
    SequenceSource(d, 4).fill(both, batch);
    const auto params = model.parameters();
    const auto report = gradcheck([&](Tape<double>& t, std::span<const Var<double>>) { return model.loss(t, batch).loss; },
                                  {}, params, kStrictGradcheck);
    CHECK_GRADCHECK(report);
  }
}

TEST_CASE("model: count_parameters_of(config) agrees with the parameters a model of that config has") {
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
              std::optional<ToyModel<float>> model;
              try {
                model.emplace(c);
              } catch (const ValueError&) {
                CHECK_THROWS_AS(ToyModel<float>::count_parameters_of(c), ValueError);  // refused by both
                continue;
              }
              // Outside the try: a count that refuses a config the model took fails here, not in the catch.
              CHECK(ToyModel<float>::count_parameters_of(c) == model->count_parameters());
              ++checked;
            }
  CHECK(checked > 40);
}

TEST_CASE("toy model: its record rebuilds it, and a record of another kind or a bad setting is refused") {
  const ModelConfig c{.vocab = 7, .labels = 4, .max_len = 5, .features = FeatureKind::learned, .d_embed = 6,
                      .positions = PositionEncoding::sinusoidal, .attention = AttentionMode::parameter_free, .heads = 2,
                      .scale = AttentionScale::none, .residual = true, .seed = 9};
  const ToyModel<float> model(c);
  const ModelRecord record = model.model_record();
  CHECK(record.kind == "toy_model");
  CHECK(record.describe() ==
        "toy_model (vocab 7, labels 4, max_len 5, features learned, d_embed 6, positions sinusoidal, attention "
        "parameter_free, heads 2, d_head 0, scale none, output_projection false, residual true, seed 9)");
  // The single attention layer's record has no block fields, as files written before them; loading adds
  // them back with the values that mean "one attention layer".
  CHECK_THROWS_AS(from_settings<ModelConfig>(record.config, "model"), NameError);
  Checkpoint file = snapshot<float>(model);
  CHECK(model_config_from<ToyModel<float>>(file) == c);
  CHECK(model_from_checkpoint<ToyModel<float>>(file)->model_record() == record);
  file.model.kind = "mlp";
  CHECK_THROWS_WITH_AS(model_from_checkpoint<ToyModel<float>>(file), "load: model: the file holds a model of kind 'mlp' but this one is of kind 'toy_model'",
                       FormatError);
  file.model.kind = "toy_model";
  file.model.config[0].value = "many";
  CHECK_THROWS_WITH_AS(model_from_checkpoint<ToyModel<float>>(file),
                       "load: the model's configuration (toy_model): vocab is 'many', which is not a whole number",
                       FormatError);
}

TEST_CASE("toy model: transformer blocks (--layers, --mlp, --layernorm, --dropout) are recorded and rebuilt") {
  const ModelConfig c{.vocab = 7, .labels = 4, .max_len = 5, .features = FeatureKind::learned, .d_embed = 6,
                      .positions = PositionEncoding::learned, .heads = 2, .seed = 3, .layers = 2, .mlp = true,
                      .layernorm = true, .dropout = 0.1};
  ToyModel<float> model(c);
  const ModelRecord record = model.model_record();
  CHECK(from_settings<ModelConfig>(record.config, "model") == c);  // every field, the block ones included
  CHECK(c.describe().ends_with(", as 2 transformer blocks with MLP, LayerNorm, dropout 0.1"));
  // embed 7x6, positions 5x6, per block 4*36 + 4*6 (attention) + 8*36 + 5*6 (MLP) + 4*6 (norms), final norm 12,
  // readout 6*4 + 4
  const Index expected = 42 + 30 + 2 * (144 + 24 + 288 + 30 + 24) + 12 + 28;
  CHECK(model.count_parameters() == expected);
  CHECK(ToyModel<float>::count_parameters_of(c) == expected);
  const auto back = model_from_checkpoint<ToyModel<float>>(snapshot<float>(model));
  CHECK(back->config() == c);
  CHECK(back->model_record() == record);
  for (AttentionMode mode : {AttentionMode::learnable, AttentionMode::parameter_free}) {
    ModelConfig free = c;
    free.attention = mode;
    free.layers = 3;
    free.dropout = 0;
    CHECK(ToyModel<float>(free).count_parameters() == ToyModel<float>::count_parameters_of(free));
  }
  ModelConfig bad = c;
  bad.d_head = 4;
  CHECK_THROWS_WITH_AS(ToyModel<float>::check_config(bad),
                       "model: transformer blocks (layers 2, mlp, layernorm, dropout 0.1) fix d_head = d_model / heads, "
                       "the 1/sqrt(d_head) scale and the output projection (learnable mode); leave d_head, scale and "
                       "output_projection at their defaults",
                       ValueError);
  CHECK_THROWS_AS(model.attention(), UsageError);
  CHECK_THROWS_AS(model.attention(2), UsageError);
}

TEST_CASE("toy trainer: learns a task, and the same seeds give the same curve bit for bit") {
  const auto task = make_task("first_token");
  const TaskSplit split = make_task_split(*task, 1000, 200, 200, 1);
  auto train = [&] {
    ToyRun run(run_config(*task, AttentionMode::learnable, 0.03, {.steps = 300, .eval_every = 100, .seed = 4}), split.train,
               &split.validation);
    run.trainer().run();
    return std::make_pair(run.trainer().curve(), value_of(run.trainer().evaluate(SequenceSource(split.test)), "eval_accuracy"));
  };
  const auto [curve, accuracy] = train();
  REQUIRE(curve.size() == 4);  // steps 0, 100, 200, 300
  CHECK(curve[0].step == 0);
  CHECK(std::isnan(value_of(curve[0].values, "train_loss")));
  CHECK(value_of(curve.back().values, "train_loss") < 0.1);
  CHECK(accuracy >= 0.97);
  // Again, each time with the heap in another state: results must not depend on where buffers land.
  std::vector<std::vector<char>> shift;
  for (std::size_t k = 1; k <= 3; ++k) {
    shift.emplace_back(8 * k + 1);
    const auto [again, accuracy_again] = train();
    CHECK(test::same_curve(again, curve));
    CHECK(accuracy_again == accuracy);
  }
}

TEST_CASE("toy trainer: a non-finite loss stops training with the step, anomaly mode names the op and its line") {
  const auto task = make_task("majority");
  const TaskSplit split = make_task_split(*task, 200, 10, 10, 2);
  ToyRun run(run_config(*task, AttentionMode::learnable, 0.01, {.steps = 10}), split.train);
  ToyModel<float>& model = run.model();
  run.trainer().step();
  model.parameter("readout.bias").value[0] = std::numeric_limits<float>::infinity();
  const auto before = model.parameter("attn.wq").value;
  CHECK_THROWS_WITH_AS(run.trainer().step(),
                       doctest::Contains("train: the loss is NaN at step 2 (lr 0.01); the step was not taken"),
                       ValueError);
  CHECK(model.parameter("attn.wq").value == before);  // nothing was applied
  CHECK(run.trainer().steps_done() == 1);

  ToyRun anomalous(run_config(*task, AttentionMode::learnable, 0.01, {.steps = 10, .anomaly = true}), split.train);
  anomalous.model().parameter("readout.bias").value[0] = std::numeric_limits<float>::infinity();
  // The first non-finite value on the tape is the poisoned parameter itself, read by the readout.
  CHECK_THROWS_WITH_AS(anomalous.trainer().step(),
                       doctest::Contains("anomaly: parameter 'readout.bias' (read at layers/linear.cpp:"), ValueError);
}

TEST_CASE("toy trainer: NaN in attention over padded sequences reaches the loss, and the NaN stop fires") {
  // Sequences of two lengths, so batches are padded and attention runs masked: a NaN weight must not pass
  // for a fully blocked row (which gives zeros) and let training go on.
  Dataset d;
  d.name = "ragged";
  d.tokens = Vocabulary({"<pad>", "a", "b", "c"});
  d.labels = Vocabulary({"x", "y"});
  for (int i = 0; i < 20; ++i)
    d.examples.push_back(i % 2 ? Example{{1, 2, 3}, {0, kIgnoreLabel, 1}} : Example{{3, 1}, {1, 0}});
  ToyRun run({.model = {.vocab = 4, .labels = 2, .max_len = 3}, .training = {.steps = 10, .batch = 4}}, d);
  run.trainer().step();
  run.model().parameter("attn.wq").value[0] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH_AS(run.trainer().step(), doctest::Contains("train: the loss is NaN at step 2"), ValueError);
}
