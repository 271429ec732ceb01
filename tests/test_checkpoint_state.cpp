// train/checkpoint/state.hpp: the open state. A loop by hand saves what it holds by name (a model, an
// optimizer, two random streams, a sampler, a moving average of its own, a counter) and resumes bit for bit;
// a forged or mismatched entry is refused in one line with nothing loaded; a user's object joins with two
// functions and is put back when its own load refuses; an optimizer saved before its first step
// round-trips; a loop's file given to a Trainer is named for what it is; the files of format 2 (tapegrad
// 0.2), a loop's among them, convert (build/examples/convert_checkpoint) and resume.
#include <doctest/doctest.h>

#include <filesystem>
#include <limits>

#include "helpers.hpp"
#include "lesson/tasks.hpp"
#include "lesson/toy_run.hpp"
#include "old_checkpoints.hpp"
#include "user_models.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/layers/decoder_lm.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

// A user's object: an exponential moving average of the model's weights, saved by parameter name.
struct Average {
  test::Mlp& model;
  std::vector<Tensor> weights;

  explicit Average(test::Mlp& m) : model(m) {
    for (const auto* p : m.parameters()) weights.push_back(p->value);
  }
  void update() {
    const auto params = model.parameters();
    for (std::size_t i = 0; i < weights.size(); ++i)
      weights[i].array() = 0.9f * weights[i].array() + 0.1f * params[i]->value.array();
  }
  void save_state(State& out) const {
    const auto params = model.parameters();
    for (std::size_t i = 0; i < weights.size(); ++i) out.put(params[i]->name, weights[i]);
  }
  void load_state(const State& in) {
    const auto params = model.parameters();
    for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = in.get<Tensor>(params[i]->name);
  }
};

// A loop by hand and everything it carries from step to step: the MLP on batches a Sampler draws, inputs
// with noise from one stream, targets with jitter from another, Adam, the moving average, the step.
struct HandLoop {
  test::Mlp model{{.seed = 4}};
  Adam<float> adam{model.parameters(), {.lr = 0.02}};
  Sampler batches{20, 4, 9};
  Rng noise{5}, jitter{6};
  Average average{model};
  Index step = 0;

  StateParts parts() {
    return {{"model", model}, {"optimizer", adam}, {"batches", batches}, {"noise", noise},
            {"jitter", jitter}, {"average", average}, {"step", step}};
  }
  void run(int steps) {
    Tape<float> tape;
    Tensor x(Shape::mat(4, 2)), y(Shape::mat(4, 2));
    for (int s = 0; s < steps; ++s, ++step) {
      const std::span<const Index> rows = batches.next();
      for (Index r = 0; r < 4; ++r)
        for (Index c = 0; c < 2; ++c) {
          x.at(r, c) = static_cast<float>(rows[static_cast<std::size_t>(r)] % 5) + static_cast<float>(noise.normal());
          y.at(r, c) = static_cast<float>(c) + static_cast<float>(0.1 * jitter.normal());
        }
      tape.reset();
      tape.backward(mse(model.forward(tape.constant(x)), tape.constant(y)));
      adam.step();
      adam.zero_grad();
      average.update();
    }
  }
  // Every bit the loop carries.
  std::vector<std::byte> state() { return encode_checkpoint(snapshot(parts())); }
  // Other weights, hyperparameters, order, streams and step than a fresh loop's: what a load must replace.
  void scramble() {
    for (auto* p : model.parameters()) p->value.fill(0.25f);
    adam.set_lr(0.5);
    batches = Sampler(20, 4, 1);
    noise = Rng(11);
    jitter = Rng(12);
    for (auto& w : average.weights) w.fill(-1.0f);
    step = 99;
  }
};

// A counter that refuses a negative value in its own load_state, after the library's checks have passed.
struct Picky {
  Index count = 0;
  void save_state(State& out) const { out.put("count", count); }
  void load_state(const State& in) {
    const auto v = in.get<Index>("count");
    if (v < 0) fail<ValueError>("picky: a count of {} is no count", v);
    count = v;
  }
};

}  // namespace

TEST_CASE("checkpoint state: a hand loop's model, optimizer, two streams, sampler, average and step resume bit for bit") {
  HandLoop straight;
  straight.run(30);
  HandLoop first;
  first.run(12);
  const fs::path dir = test::scratch_dir("checkpoint_state", "loop");
  save_checkpoint(dir / "loop.tgck", snapshot(first.parts()));
  const Checkpoint file = read_checkpoint(dir / "loop.tgck");
  CHECK(file.parts() == std::vector<std::string>{"model", "optimizer", "batches", "noise", "jitter", "average", "step"});
  CHECK(std::get<std::vector<std::int64_t>>(file.find("step")->value) == std::vector<std::int64_t>{12});
  CHECK(std::get<Tensor>(file.find("average.hidden.weight")->value) == first.average.weights[0]);

  HandLoop resumed;
  resumed.scramble();
  const LoadReport report = restore(read_checkpoint(dir / "loop.tgck"), resumed.parts());
  CHECK(report.restored == file.parts());
  CHECK(resumed.step == 12);
  CHECK(resumed.adam.steps_taken() == 12);
  CHECK(resumed.adam.lr() == doctest::Approx(0.02));
  CHECK(resumed.state() == first.state());
  resumed.run(18);
  CHECK(resumed.state() == straight.state());  // every part, bit for bit
  fs::remove_all(dir);
}

TEST_CASE("checkpoint state: a forged or mismatched entry is refused in one line, naming it, and nothing is loaded") {
  HandLoop source;
  source.run(3);
  const Checkpoint good = snapshot(source.parts());
  HandLoop target;
  target.run(1);
  const std::vector<std::byte> before = target.state();
  auto refused = [&](const Checkpoint& c, const std::string& says) {
    INFO(says);
    try {
      restore(c, target.parts());
      FAIL("a forged file loaded");
    } catch (const FormatError& e) {
      const std::string what = e.what();
      CHECK(what.find(says) != std::string::npos);
      CHECK(what.find('\n') == std::string::npos);
      CHECK(what.ends_with("; nothing was loaded"));
      CHECK(what.size() < 1000);
    }
    CHECK(target.state() == before);
  };
  using Ints = std::vector<std::int64_t>;
  Checkpoint c = good;
  std::get<Tensor>(c.find("average.out.weight")->value) = Tensor(Shape::mat(3, 2));
  refused(c, "average: 'out.weight' is f32 3x2 in the file but f32 8x2 in the part");
  c = good;
  std::get<Tensor>(c.find("average.out.bias")->value)[1] = std::numeric_limits<float>::quiet_NaN();
  refused(c, "average: 'out.bias' holds 1 non-finite values (NaN or Inf)");
  c = good;
  std::get<Ints>(c.find("noise")->value).pop_back();
  refused(c, "noise: entry 'noise' holds 3 words; a random stream (xoshiro256**) has 4");
  c = good;
  std::get<Ints>(c.find("jitter")->value) = {0, 0, 0, 0};
  refused(c, "jitter: rng: the all-zero state is invalid for xoshiro256**");
  c = good;
  std::get<Ints>(c.find("batches.order")->value)[0] = 7777;
  refused(c, "batches: sampler: the saved data order is not a permutation of the dataset's 20 examples");
  c = good;
  c.find("step")->value = std::vector<std::string>{"12"};
  refused(c, "step: entry 'step' holds texts (1), not ints");
  c = good;
  c.entries.push_back({"dropout", Ints{1, 2, 3, 4}});
  refused(c, "nothing given takes the file's 'dropout'");
  c = good;
  std::erase_if(c.entries, [](const StateEntry& e) { return e.name.starts_with("average."); });
  refused(c, "the file has no 'average' (it holds 'model', 'optimizer', 'batches', 'noise', 'jitter', 'step')");
  c = good;
  c.entries.push_back({"model.extra", Tensor(Shape::vec(2))});
  std::get<Tensor>(c.find("model.hidden.bias")->value) = Tensor(Shape::vec(3));
  refused(c, "model: the model has no 'extra'; 'hidden.bias' is f32 3 in the file but f32 8 in the model");
  // Several problems at once: each named, in one line (docs/checkpoints.md shows this one).
  c = good;
  std::get<Ints>(c.find("jitter")->value) = {0, 0, 0, 0};
  std::get<Ints>(c.find("step")->value) = {1, 2};
  refused(c, "load: jitter: rng: the all-zero state is invalid for xoshiro256** (it would only produce zeros); step: entry "
             "'step' holds 2 values, not one; nothing was loaded");
}

TEST_CASE("checkpoint state: loading is all or nothing: an all-zero stream or a bad data order is refused before any weight changes") {
  // The model and the optimizer come first in the list; the stream and the sampler that follow them are
  // checked before either is loaded.
  HandLoop source;
  source.run(3);
  for (const char* forged : {"noise", "batches.order"}) {
    CAPTURE(forged);
    Checkpoint c = snapshot(source.parts());
    auto& v = std::get<std::vector<std::int64_t>>(c.find(forged)->value);
    std::fill(v.begin(), v.end(), 0);  // an all-zero stream; an order that is no permutation
    HandLoop target;
    const auto weights = target.model.parameters()[0]->value;
    CHECK_THROWS_AS(restore(c, target.parts()), FormatError);
    CHECK(target.model.parameters()[0]->value == weights);
    CHECK(target.adam.steps_taken() == 0);
    CHECK(target.step == 0);
  }
}

TEST_CASE("checkpoint state: an optimizer saved before its first step round-trips, in a loop and in a Trainer") {
  // A loop's checkpoint at step 0: Adam has made no buffers yet.
  HandLoop fresh, resumed, straight;
  const Checkpoint at0 = snapshot(fresh.parts());
  resumed.scramble();
  restore(at0, resumed.parts());
  CHECK(resumed.adam.steps_taken() == 0);
  CHECK(resumed.state() == fresh.state());
  resumed.run(5);
  straight.run(5);
  CHECK(resumed.state() == straight.state());
  // A Trainer's checkpoint before run(), through a file.
  const TensorSource data = test::classification_data(64, 1);
  auto make = [&](test::Mlp& m, Optimizer<float>& o) {
    return Trainer<TensorBatch>(m, o, data, [&m](Tape<float>& t, const TensorBatch& b) -> StepOutput<float> {
      return cross_entropy(m.forward(t.constant(b.features)), b.labels);
    }, {.steps = 20, .batch = 8, .eval_every = 10, .seed = 3});
  };
  test::Mlp m1({.seed = 2}), m2({.seed = 2}), m3({.seed = 2});
  SGD<float> o1(m1.parameters(), {.lr = 0.1, .momentum = 0.9}), o2(m2.parameters(), {.lr = 0.1, .momentum = 0.9}),
      o3(m3.parameters(), {.lr = 0.1, .momentum = 0.9});
  Trainer<TensorBatch> t1 = make(m1, o1), t2 = make(m2, o2), t3 = make(m3, o3);
  const fs::path dir = test::scratch_dir("checkpoint_state", "before_first_step");
  save_checkpoint(dir / "start.tgck", snapshot(t1));
  CHECK(restore(read_checkpoint(dir / "start.tgck"), t2).restored.size() == 3);
  t2.run();
  t3.run();
  CHECK(weights_crc32(snapshot(m2)) == weights_crc32(snapshot(m3)));
  CHECK(o2.state().per_param == o3.state().per_param);
  fs::remove_all(dir);
}

TEST_CASE("checkpoint state: a user's object that refuses in its own load_state leaves every part as it was") {
  HandLoop source;
  source.run(3);
  Picky picky{.count = -4};  // saved as it is; refused by its own load
  Average* average = &source.average;
  Checkpoint c = snapshot({{"average", *average}, {"picky", picky}, {"model", source.model}});
  HandLoop target;
  Picky mine{.count = 2};
  const auto weights = target.average.weights;
  const auto model = target.model.parameters()[0]->value;
  CHECK_THROWS_WITH_AS(restore(c, {{"average", target.average}, {"picky", mine}, {"model", target.model}}),
                       "load: picky: a count of -4 is no count; nothing was loaded", FormatError);
  CHECK(target.average.weights == weights);  // loaded first, then put back from what it saved
  CHECK(mine.count == 2);
  CHECK(target.model.parameters()[0]->value == model);  // the library's parts load after the user's
  std::get<std::vector<std::int64_t>>(c.find("picky.count")->value) = {7};
  restore(c, {{"average", target.average}, {"picky", mine}, {"model", target.model}});
  CHECK(mine.count == 7);
  CHECK(target.average.weights == source.average.weights);
}

TEST_CASE("checkpoint state: part names are checked, a const part is only saved, and a part may be left unloaded") {
  HandLoop loop;
  CHECK_THROWS_WITH_AS(snapshot({{"a.b", loop.step}}), "snapshot: the part name 'a.b' is empty or has a '.'", NameError);
  CHECK_THROWS_WITH_AS(snapshot({{"", loop.step}}), "snapshot: the part name '' is empty or has a '.'", NameError);
  CHECK_THROWS_WITH_AS(snapshot({{"x", loop.step}, {"x", loop.noise}}), "snapshot: the part name 'x' is given twice", NameError);
  struct Twice {
    void save_state(State& out) const {
      out.put("a", 1);
      out.put("a", 2);
    }
    void load_state(const State&) {}
  } twice;
  CHECK_THROWS_WITH_AS(snapshot({{"twice", twice}}), "snapshot: the entries name 'twice.a' more than once", NameError);
  const HandLoop& frozen = loop;
  const Checkpoint c = snapshot({{"model", frozen.model}, {"step", frozen.step}});  // saving takes const objects
  // restore checks the names in the snapshot it takes first, worded by its own name
  CHECK_THROWS_WITH_AS(restore(c, {{"a.b", loop.step}}), "load: the part name 'a.b' is empty or has a '.'", NameError);
  CHECK_THROWS_WITH_AS(restore(c, {{"twice", twice}}), "load: the entries name 'twice.a' more than once", NameError);
  CHECK_THROWS_WITH_AS(restore(c, {{"model", frozen.model}, {"step", loop.step}}),
                       "load: the part 'model' was given as const: it cannot be loaded into", UsageError);
  // Not strict: the file's parts that nothing takes are left, and named.
  HandLoop other;
  other.run(2);
  const LoadReport report = restore(snapshot(other.parts()), {{"model", loop.model}}, {.strict = false});
  CHECK(report.unexpected == std::vector<std::string>{"optimizer", "batches", "noise", "jitter", "average", "step"});
  CHECK(loop.model.parameters()[0]->value == other.model.parameters()[0]->value);
  CHECK(report.str() == "restored 'model'; left the file's 'optimizer', 'batches', 'noise', 'jitter', 'average', 'step'");
}

TEST_CASE("checkpoint state: a loop's file given to a Trainer is named for what it is, not blamed on its data") {
  const TensorSource data = test::classification_data(20, 1);
  test::Mlp model({.seed = 4});
  Adam<float> adam(model.parameters(), {.lr = 0.02});
  Trainer<TensorBatch> trainer(model, adam, data, [&model](Tape<float>& t, const TensorBatch& b) -> StepOutput<float> {
    return cross_entropy(model.forward(t.constant(b.features)), b.labels);
  }, {.steps = 10, .batch = 4});
  HandLoop loop;
  loop.run(2);
  for (const Checkpoint& c : {snapshot(loop.parts()), test::converted(TAPEGRAD_TEST_DATA "/v2/loop_step200.tgck")}) {
    try {
      restore(c, trainer);
      FAIL("a loop's file resumed a Trainer");
    } catch (const FormatError& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.starts_with("resume: the file has no 'trainer' (it holds 'model', 'optimizer', "));
      CHECK(what.find("fingerprint") == std::string::npos);
      CHECK(what.find("trainer's") == std::string::npos);
    }
  }
  // Another model is named as this one, whoever loads it.
  lesson::ToyModel<float> toy({.vocab = 4, .labels = 2, .max_len = 3});
  CHECK_THROWS_WITH_AS(restore(snapshot(loop.model), {{"model", toy}}),
                       doctest::Contains("load: model: the file holds a model of kind 'test_mlp' but this one is of kind "
                                         "'toy_model'"),
                       FormatError);
  CHECK(trainer.steps_done() == 0);
}

namespace {

// tapegrad 0.2's examples/first_steps/2_resumable_loop.cpp, whose files tests/data/v2/loop_*.tgck are: its
// MLP, Adam, its data and the steps of its loop, to resume one of its files here.
struct Loop02 {
  struct Mlp : Module<float> {
    Rng rng{0};
    Linear<float> hidden{"hidden", {.in = 2, .out = 16}, rng}, out{"out", {.in = 16, .out = 1}, rng};
    Mlp() {
      register_child(hidden);
      register_child(out);
    }
    Var<float> forward(Var<float> x) { return out.forward(tanh(hidden.forward(x))); }
  } model;
  Adam<float> optimizer{model.parameters(), {.lr = 0.01}};
  Sampler batches{256, 16, 3};
  Rng noise{7};
  Index step = 0;

  void run_to(Index last) {
    Rng rng(1);
    Tensor x(Shape::mat(256, 2)), y(Shape::mat(256, 1));
    for (Index i = 0; i < 256; ++i) {
      x.at(i, 0) = static_cast<float>(rng.uniform(-1, 1));
      x.at(i, 1) = static_cast<float>(rng.uniform(-1, 1));
      y.at(i, 0) = x.at(i, 0) * x.at(i, 1);
    }
    Tensor xb(Shape::mat(16, 2)), yb(Shape::mat(16, 1));
    Tape<float> tape;
    for (; step < last; ++step) {
      const std::span<const Index> rows = batches.next();
      for (Index r = 0; r < 16; ++r) {
        const Index i = rows[static_cast<std::size_t>(r)];
        for (Index c = 0; c < 2; ++c) xb.at(r, c) = x.at(i, c) + static_cast<float>(0.01 * noise.normal());
        yb.at(r, 0) = y.at(i, 0);
      }
      tape.reset();
      tape.backward(mse(model.forward(tape.constant(xb)), tape.constant(yb)));
      optimizer.step();
      optimizer.zero_grad();
    }
  }
};

}  // namespace

TEST_CASE("checkpoint state: files of format 2 convert: a Trainer's by its parts, a loop's by its own") {
  // tests/data/v2/expected.txt says how each file was made.
  const Checkpoint trainer = test::converted(TAPEGRAD_TEST_DATA "/v2/adam_cycle_step10.tgck");
  CHECK(trainer.parts() == std::vector<std::string>{"model", "optimizer", "trainer"});
  CHECK(read_trainer_state(trainer).step == 10);
  CHECK(read_optimizer_state<float>(trainer).per_param.at("attn.wq").size() == 2);  // exp_avg, exp_avg_sq
  CHECK(describe_checkpoint(trainer).find("  trainer.step                     ints (1)       10\n") != std::string::npos);

  // A loop's file (0.2 marked it in the metadata): its step, stream and data order are parts of their own.
  const Checkpoint at200 = test::converted(TAPEGRAD_TEST_DATA "/v2/loop_step200.tgck");
  const Checkpoint at400 = test::converted(TAPEGRAD_TEST_DATA "/v2/loop_step400.tgck");
  CHECK(at200.parts() == std::vector<std::string>{"model", "optimizer", "step", "rng", "data_order"});
  CHECK(at200.metadata.empty());
  CHECK(fmt::format("{:08x}", weights_crc32(at200)) == "58f57ae0");  // what 0.2's inspect printed: read exactly
  Loop02 loop;
  restore(at200, {{"model", loop.model}, {"optimizer", loop.optimizer}, {"step", loop.step}, {"rng", loop.noise},
                  {"data_order", loop.batches}});
  CHECK(loop.step == 200);
  CHECK(loop.optimizer.steps_taken() == 200);
  loop.run_to(400);
  // 0.2's own step 400, from the same run: the data order and stream exactly; the weights to float rounding
  // (bit for bit where the float kernels are the writer's).
  Loop02 theirs;
  restore(at400, {{"model", theirs.model}, {"optimizer", theirs.optimizer}, {"step", theirs.step}, {"rng", theirs.noise},
                  {"data_order", theirs.batches}});
  CHECK(loop.noise.state() == theirs.noise.state());
  CHECK(loop.batches.state().order == theirs.batches.state().order);
  CHECK(loop.batches.state().cursor == theirs.batches.state().cursor);
  const auto ours = loop.model.parameters(), old = theirs.model.parameters();
  for (std::size_t i = 0; i < ours.size(); ++i) {
    CAPTURE(ours[i]->name);
    const double scale = old[i]->value.array().abs().maxCoeff();
    CHECK((ours[i]->value.array() - old[i]->value.array()).abs().maxCoeff() <= 1e-5 * scale);
  }
  const bool same = weights_crc32(snapshot(loop.model)) == weights_crc32(at400);
  const std::string how = same ? "bit-identical to" : "to float rounding of";
  MESSAGE("a loop's file of format 2, resumed to step 400: weights ", how, " 0.2's (crc32 2c83fce9 there)");
}

// ---- issue 56, item 8: hostile findings in the checkpoint layer ----------------------------------------

namespace {

// A user's object that changes itself, then refuses: its load_state stops halfway.
struct HalfLoader {
  Index first = 0, second = 0;
  void save_state(State& out) const {
    out.put("first", first);
    out.put("second", second);
  }
  void load_state(const State& in) {
    first = in.get<Index>("first");
    const auto v = in.get<Index>("second");
    if (v < 0) fail<ValueError>("half: a second of {} is no count", v);
    second = v;
  }
};

}  // namespace

TEST_CASE("checkpoint state: a user's object whose load_state throws halfway is put back, not left half loaded") {
  HalfLoader source{.first = 5, .second = -1}, target{.first = 1, .second = 2};
  CHECK_THROWS_WITH_AS(restore(snapshot({{"half", source}}), {{"half", target}}),
                       "load: half: a second of -1 is no count; nothing was loaded", FormatError);
  CHECK(target.first == 1);  // it had loaded 5 before it refused
  CHECK(target.second == 2);
  // Beside another user's object loaded before it, and the library's parts after: all as they were.
  HandLoop loop;
  const auto weights = loop.average.weights;
  Checkpoint c = snapshot({{"average", loop.average}, {"half", source}, {"step", loop.step}});
  loop.scramble();
  const auto scrambled = loop.average.weights;
  CHECK_THROWS_AS(restore(c, {{"average", loop.average}, {"half", target}, {"step", loop.step}}), FormatError);
  CHECK(loop.average.weights == scrambled);
  CHECK(target.first == 1);
  CHECK(loop.step == 99);
}

TEST_CASE("checkpoint state: a vector of tensors is a part, loaded only into as many tensors of its shapes") {
  const std::vector<Tensor> saved = {Tensor(Shape::mat(2, 3), 1.5f), Tensor(Shape::vec(4), -2.0f)};
  const Checkpoint c = snapshot({{"ema", saved}});
  CHECK(c.parts() == std::vector<std::string>{"ema"});
  CHECK(std::get<Tensor>(c.find("ema.1")->value) == saved[1]);
  std::vector<Tensor> loaded = {Tensor(Shape::mat(2, 3)), Tensor(Shape::vec(4))};
  restore(c, {{"ema", loaded}});
  CHECK(loaded == saved);
  std::vector<Tensor> other = {Tensor(Shape::mat(2, 3)), Tensor(Shape::vec(5))}, fewer = {Tensor(Shape::mat(2, 3))};
  CHECK_THROWS_WITH_AS(restore(c, {{"ema", other}}),
                       "load: ema: '1' is f32 4 in the file but f32 5 in the part; nothing was loaded", FormatError);
  CHECK_THROWS_WITH_AS(restore(c, {{"ema", fewer}}), "load: ema: the part has no '1'; nothing was loaded", FormatError);
  CHECK(other[1] == Tensor(Shape::vec(5)));
  CHECK(fewer[0] == Tensor(Shape::mat(2, 3)));
}

TEST_CASE("checkpoint state: a load checks a part against what it declares, not a copy of it: no tensor is taken") {
  // A model's load_state and load_weights, a vector of tensors' and a user's object's load compare the file's
  // names, kinds and shapes with what the part declares (State::declarer), without saving its values: a load
  // does not hold the model twice. TensorBudget counts every tensor buffer taken on this thread.
  // The model is loaded twice, with other weights the second time, so that each load's values tell it worked.
  HandLoop source, target, later;
  source.run(2);
  later.run(3);
  const Checkpoint c = snapshot(source.parts()), ema = snapshot({{"ema", source.average.weights}});
  const Checkpoint other = snapshot(later.parts());
  const detail::StateIndex index(c), ema_index(ema);
  std::vector<Tensor> tensors = target.average.weights;
  const auto model_is = [&](const HandLoop& from) {
    for (std::size_t i = 0; i < from.model.parameters().size(); ++i)
      CHECK(target.model.parameters()[i]->value == from.model.parameters()[i]->value);
  };
  {
    const TensorBudget budget(std::size_t{1} << 30, "load");
    load_state(target.model, State::reader(index, "model"));
    CHECK(budget.used() == 0);
  }
  model_is(source);
  {
    const TensorBudget budget(std::size_t{1} << 30, "load");
    load_weights(other, target.model);
    load_state(target.average, State::reader(index, "average"));
    load_state(tensors, State::reader(ema_index, "ema"));
    CHECK(budget.used() == 0);
  }
  model_is(later);
  CHECK(target.model.parameters()[0]->value != source.model.parameters()[0]->value);
  CHECK(target.average.weights == source.average.weights);
  CHECK(tensors == source.average.weights);
}

TEST_CASE("checkpoint state: a refusal and a load report name the first 10 mismatches and count the rest") {
  const std::vector<Tensor> saved(12, Tensor(Shape::vec(2)));
  std::vector<Tensor> wider(12, Tensor(Shape::vec(3)));
  CHECK_THROWS_WITH_AS(
      restore(snapshot({{"ema", saved}}), {{"ema", wider}}),
      doctest::Contains("'9' is f32 2 in the file but f32 3 in the part; 2 more mismatched; nothing was loaded"),
      FormatError);
  LoadReport report;
  for (int i = 0; i < 12; ++i) report.mismatched.push_back("'w" + std::to_string(i) + "' differs");
  CHECK(report.problems().ends_with("'w9' differs; 2 more mismatched"));
  CHECK(report.str() == "loaded 0 parameters; not loaded: 'w0' differs; 'w1' differs; 'w2' differs; 'w3' differs; "
                        "'w4' differs; 'w5' differs; 'w6' differs; 'w7' differs; 'w8' differs; 'w9' differs; 2 more "
                        "mismatched");
}

namespace {

// A user's object holding 64-bit unsigned values: hashes and seeds use the whole range.
struct Seeds {
  std::uint64_t seed = 0;
  std::vector<std::uint64_t> more;
  void save_state(State& out) const {
    out.put("seed", seed);
    std::vector<std::int64_t> words;
    for (std::uint64_t w : more) words.push_back(static_cast<std::int64_t>(w));
    out.put("more", StateValue(std::move(words)));
  }
  void load_state(const State& in) { seed = in.get<std::uint64_t>("seed"); }
};

}  // namespace

TEST_CASE("checkpoint state: a 64-bit unsigned value a part saves is one it loads, 2^63 and above included") {
  for (const std::uint64_t v : {std::uint64_t{0}, std::uint64_t{1} << 63, (std::uint64_t{1} << 63) + 5,
                                std::numeric_limits<std::uint64_t>::max()}) {
    CAPTURE(v);
    std::uint64_t counter = v, back = 1;
    const Checkpoint c = decode_checkpoint(encode_checkpoint(snapshot({{"counter", counter}})), "counter");
    restore(c, {{"counter", back}});
    CHECK(back == v);
    Seeds mine{.seed = v, .more = {}}, theirs;
    restore(decode_checkpoint(encode_checkpoint(snapshot({{"seeds", mine}})), "seeds"), {{"seeds", theirs}});
    CHECK(theirs.seed == v);
  }
  // A narrower type still refuses what it cannot hold.
  std::uint64_t big = std::uint64_t{1} << 40;
  std::uint32_t small = 0;
  CHECK_THROWS_WITH_AS(restore(snapshot({{"n", big}}), {{"n", small}}),
                       "load: n: entry 'n' holds 1099511627776, out of its range; nothing was loaded", FormatError);
}

TEST_CASE("checkpoint state: a float64 weight past float32's range is refused on a converting load, as Inf is") {
  test::Mlp model({.seed = 1});
  const Checkpoint good = snapshot(model);
  Checkpoint c = good;
  StateEntry& w = *c.find("model.out.weight");
  TensorT<double> wide(std::get<Tensor>(w.value).shape());
  wide.array() = std::get<Tensor>(w.value).array().cast<double>();
  wide[3] = 1e300;  // finite as a double; +Inf as a float
  w.value = wide;
  test::Mlp target({.seed = 1});
  for (auto* p : target.parameters()) p->value.fill(0.25f);
  const auto before = weights_crc32(snapshot(target));
  CHECK_THROWS_WITH_AS(load_weights(c, target, {.convert_dtype = true}),
                       "load: model: 'out.weight' holds 1 non-finite values (NaN or Inf) of 16 as f32 "
                       "(LoadOptions::allow_non_finite loads it anyway); nothing was loaded",
                       FormatError);
  CHECK_THROWS_WITH_AS(restore(c, {{"model", target}}, {.convert_dtype = true}),
                       doctest::Contains("model: 'out.weight' holds 1 non-finite values (NaN or Inf) of 16 as f32"),
                       FormatError);
  CHECK(weights_crc32(snapshot(target)) == before);
  // An optimizer's float64 buffer narrowed into a float optimizer, the same.
  Adam<float> adam(model.parameters(), {.lr = 0.01});
  Tape<float> tape;
  tape.backward(sum(model.forward(tape.constant(Tensor(Shape::mat(1, 2), 1.0f)))));
  adam.step();
  Checkpoint run = snapshot({{"model", model}, {"optimizer", adam}});
  StateEntry& m = *run.find("optimizer.state.out.weight.exp_avg");
  TensorT<double> m_wide(std::get<Tensor>(m.value).shape());
  m_wide.array() = 1e300;
  m.value = m_wide;
  Adam<float> other(target.parameters(), {.lr = 0.01});
  CHECK_THROWS_WITH_AS(restore(run, {{"model", target}, {"optimizer", other}}),
                       doctest::Contains("optimizer: entry 'optimizer.state.out.weight.exp_avg' holds 16 non-finite "
                                         "values (NaN or Inf) of 16 as f32"),
                       FormatError);
  CHECK(other.steps_taken() == 0);
  // Within float32's range it converts and loads.
  c = good;
  c.find("model.out.weight")->value = TensorT<double>(std::get<Tensor>(good.find("model.out.weight")->value).shape(), 3e38);
  load_weights(c, target, {.convert_dtype = true});
  CHECK(target.parameters()[2]->value[0] == 3e38f);
}

TEST_CASE("checkpoint state: part names are escaped and bounded in every message, a refusing user's object's too") {
  const std::string nul("a\0b", 3);
  Picky source{.count = -1}, target;
  try {
    restore(snapshot({{nul, source}}), {{nul, target}});
    FAIL("a refused count loaded");
  } catch (const FormatError& e) {
    CHECK(std::string(e.what()) == "load: a\\x00b: picky: a count of -1 is no count; nothing was loaded");
  }
  const std::string long_name(100000, 'p');
  for (const bool refuses_itself : {true, false}) {
    CAPTURE(refuses_itself);
    Checkpoint c = snapshot({{long_name, source}});
    if (!refuses_itself) c.entries.push_back({long_name + ".extra", std::vector<std::int64_t>{1}});
    try {
      restore(c, {{long_name, target}});
      FAIL("a refused part loaded");
    } catch (const FormatError& e) {
      const std::string what = e.what();
      CHECK(what.size() < 1000);
      CHECK(what.find("more bytes)") != std::string::npos);
    }
  }
}

TEST_CASE("checkpoint state: a forged Trainer's curve cannot make its reader copy a long column name into every point") {
  const TensorSource data = test::classification_data(32, 1);
  test::Mlp model({.seed = 2});
  SGD<float> sgd(model.parameters(), {.lr = 0.1});
  Trainer<TensorBatch> trainer(model, sgd, data, [&model](Tape<float>& t, const TensorBatch& b) -> StepOutput<float> {
    return cross_entropy(model.forward(t.constant(b.features)), b.labels);
  }, {.steps = 4, .batch = 8, .eval_every = 2});
  trainer.run();
  const Checkpoint good = snapshot(trainer);
  // 1,000 points of one column named by 100,000 bytes: a 1 MB file that a reader copying the name into every
  // point would make 100 MB of.
  Checkpoint c = good;
  constexpr std::size_t kPoints = 1000;
  c.find("trainer.curve.columns")->value = std::vector<std::string>{std::string(100000, 'x')};
  c.find("trainer.curve.step")->value = std::vector<std::int64_t>(kPoints, 0);
  for (const char* name : {"trainer.curve.lr", "trainer.curve.seconds", "trainer.curve.values"})
    c.find(name)->value = std::vector<double>(kPoints, 0.5);
  try {
    (void)read_trainer_state(c);
    FAIL("a curve column of 100,000 bytes was read");
  } catch (const FormatError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.starts_with("trainer: the curve's column 'xxx"));
    CHECK(what.find("more bytes)' is longer than a metric's column") != std::string::npos);
    CHECK(what.size() < 400);
  }
  CHECK_THROWS_AS(restore(c, trainer), FormatError);
  const std::string described = describe_checkpoint(c);  // listed entry by entry, a long text cut short
  CHECK(described.find("  trainer.curve.columns            texts (1)      xxxx") != std::string::npos);
  CHECK(described.size() < 20'000);
  // A metric's name has the same bound where the program gives it, so what a trainer saves it loads.
  Trainer<TensorBatch> fresh(model, sgd, data, [&model](Tape<float>& t, const TensorBatch& b) -> StepOutput<float> {
    return cross_entropy(model.forward(t.constant(b.features)), b.labels);
  }, {.steps = 4, .batch = 8, .eval_every = 2});
  const std::string longest(TrainerBase::kMaxMetricName, 'm');
  CHECK_THROWS_AS(fresh.add_metric(longest + "m", [](const Tensor&, const TensorBatch&) { return Tally{}; }), NameError);
  fresh.add_metric(longest, [](const Tensor&, const TensorBatch&) { return Tally{1, 1}; });
  fresh.evaluate_on(data);
  fresh.run();
  CHECK(read_trainer_state(snapshot(fresh)).curve.back().values.size() == 4);
}

TEST_CASE("checkpoint state: a model record whose settings a later release reordered loads, and one that differs names the setting") {
  const DecoderLmConfig config{.vocab = 11, .context = 6, .d_model = 8, .n_heads = 2, .n_layers = 1};
  DecoderLm<float> source(config);
  Checkpoint c = snapshot(source);
  // tapegrad 0.2 wrote decoder_lm's settings in this order (positions, tie, head_bias and init before dropout).
  const std::vector<std::string> order02 = {"vocab",     "context",   "d_model",   "n_heads", "n_layers",
                                            "d_ff",      "attention", "positions", "tie",     "head_bias",
                                            "init",      "dropout",   "seed"};
  Settings old;
  for (const std::string& name : order02) old.push_back({name, *find_setting(c.model.config, name)});
  REQUIRE(old.size() == c.model.config.size());
  REQUIRE(old != c.model.config);
  c.model.config = old;
  DecoderLm<float> target(config);
  for (auto* p : target.parameters()) p->value.fill(0.5f);
  restore(c, {{"model", target}});
  CHECK(weights_crc32(snapshot(target)) == weights_crc32(snapshot(source)));
  CHECK(model_from_checkpoint<DecoderLm<float>>(c)->lm_config().d_model == 8);
  // A real difference is named, in the old order or the new.
  DecoderLm<float> other(DecoderLmConfig{.vocab = 11, .context = 6, .d_model = 8, .n_heads = 2, .n_layers = 1, .init = LmInit::gpt2});
  CHECK_THROWS_WITH_AS(restore(c, {{"model", other}}),
                       doctest::Contains("load: model: setting 'init' is pytorch in the file but gpt2 in the model"),
                       FormatError);
}
