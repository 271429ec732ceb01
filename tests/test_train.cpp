// train/: data (vocabularies, the resumable sampler, the dataset file format, sequence and tensor sources),
// metrics, and the generic training loop on a user-defined model (an MLP written here with the public
// layers): learning with any optimizer and schedule, evaluation with metrics, callbacks and stopping,
// determinism, the non-finite stop, train/eval mode, the state it saves; and its reports.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>

#include "helpers.hpp"
#include "user_models.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/train/dataset_file.hpp"
#include "tapegrad/train/program/progress.hpp"
#include "tapegrad/train/program/run_program.hpp"
#include "tapegrad/train/data_parallel.hpp"
#include "tapegrad/train/trainer.hpp"

using namespace tapegrad;

using test::classification_data;
using test::Mlp;
using test::regression_data;

namespace {
// An MLP of the test's shape: in -> hidden -> out.
Mlp::Config mlp(Index in, Index hidden, Index out, std::uint64_t seed) { return {in, hidden, out, seed}; }

// The curve of 60 steps of Adam on an MLP, evaluated with accuracy on `data` (its training data), as one
// rank of `group` (none: one process).
std::vector<CurvePoint> mlp_curve(const TensorSource& data, Collective* group = nullptr) {
  Mlp model(mlp(2, 8, 2, 3));
  Adam<float> opt(model.parameters(), {.lr = 0.05});
  Trainer trainer(model, opt, data, [&](Tape<float>& tape, const TensorBatch& b) -> StepOutput<float> {
    Var<float> logits = model.forward(tape.constant(b.features));
    return {cross_entropy(logits, b.labels), logits};
  }, {.steps = 60, .batch = 16, .eval_every = 20, .seed = 11});
  trainer.evaluate_on(data);
  trainer.add_metric("accuracy", metrics::accuracy);
  trainer.set_collective(group);
  CHECK(dynamic_cast<SingleProcess*>(&trainer.reducer()) != nullptr);  // one process, with or without a group
  trainer.run();
  return trainer.curve();
}

// Rank 0 of 2 ranks that exchange nothing: a group's calls without a second process.
struct TwoRanks final : Collective {
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void all_reduce_sum(std::span<float>) override {}
  void all_reduce_sum(std::span<double>) override {}
  void broadcast(std::span<std::byte>, int) override {}
  void all_gather(std::span<const std::uint32_t>, std::span<std::uint32_t>) override {}
  void barrier() override {}
};
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
  // A name from a file is quoted as every message quotes outside text: escaped, on one line, bounded.
  CHECK_THROWS_WITH_AS(v.id("z\x1b[2J\nz"), "vocabulary: unknown name 'z\\x1b[2J\\x0az' (the vocabulary has 4 names)",
                       NameError);
  CHECK_THROWS_WITH_AS(Vocabulary({"\x07", "\x07"}), "vocabulary: '\\x07' appears twice", NameError);
  const std::string long_name(5000, 'w');
  CHECK_THROWS_WITH_AS(v.id(long_name), doctest::Contains("(4880 more bytes)"), NameError);
}

TEST_CASE("data: a sequence source pads short examples, masks the padding and ignores its labels") {
  Dataset d;
  d.name = "tiny";
  d.examples = {{{1, 2, 3}, {0, kIgnoreLabel, 1}}, {{4}, {1}}};
  SequenceBatch b;
  const Index both[] = {0, 1};
  const SequenceSource source(d);
  CHECK(source.length() == 3);
  source.fill(both, b);
  CHECK(b.tokens == Ids(Shape::mat(2, 3), {1, 2, 3, 4, 0, 0}));
  CHECK(b.labels == Ids(Shape::mat(2, 3), {0, kIgnoreLabel, 1, 1, kIgnoreLabel, kIgnoreLabel}));
  CHECK(b.padding == Mask(Shape::mat(2, 3), {0, 0, 0, 0, 1, 1}));
  CHECK(b.padded);
  CHECK(b.weight() == 3);  // labelled positions: what cross-entropy averages over
  const Index first[] = {0};
  source.fill(first, b);
  CHECK_FALSE(b.padded);
  SequenceSource(d, 5).fill(first, b);  // padded to a longer length on request
  CHECK(b.length() == 5);
  const Index outside[] = {2};
  CHECK_THROWS_WITH_AS(source.fill(outside, b), "fill: example 2 is outside data source 'tiny' of 2 examples", ValueError);
  Dataset named = d;  // a name from outside is quoted as every message quotes one
  named.name = "ti\x1b[2Jny";
  CHECK_THROWS_WITH_AS(SequenceSource(named).fill(outside, b),
                       "fill: example 2 is outside data source 'ti\\x1b[2Jny' of 2 examples", ValueError);
  Dataset other = d;
  other.examples[1].labels[0] = 0;
  CHECK(SequenceSource(other).fingerprint() != source.fingerprint());
}

TEST_CASE("data: a tensor source batches examples along the first dimension, labels or targets") {
  Tensor x(Shape::mat(4, 2), {0, 1, 2, 3, 4, 5, 6, 7});
  const TensorSource labelled("l", x, Ids(Shape::vec(4), {1, kIgnoreLabel, 0, 1}));
  const TensorSource valued("v", x, Tensor(Shape::mat(4, 1), {10, 11, 12, 13}));
  const Index picked[] = {3, 1};
  TensorBatch b;
  labelled.fill(picked, b);
  CHECK(b.features == Tensor(Shape::mat(2, 2), {6, 7, 2, 3}));
  CHECK(b.labels == Ids(Shape::vec(2), {1, kIgnoreLabel}));
  CHECK(b.weight() == 1);  // one labelled example
  TensorBatch v;
  valued.fill(picked, v);
  CHECK(v.targets == Tensor(Shape::mat(2, 1), {13, 11}));
  CHECK(v.weight() == 2);
  const Tensor images(Shape::batched(3, 2, 2), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  TensorSource rank3("images", images, Ids(Shape::vec(3), {0, 1, 0}));
  const Index last[] = {2};
  rank3.fill(last, b);
  CHECK(b.features == Tensor(Shape::batched(1, 2, 2), {8, 9, 10, 11}));
  CHECK(labelled.fingerprint() != valued.fingerprint());
  CHECK_THROWS_WITH_AS(TensorSource("bad", x, Ids(Shape::vec(3))),
                       "data source 'bad': 4 examples of features (4x2) but 3 of labels (3)", ShapeError);
  CHECK_THROWS_WITH_AS(TensorSource("flat", Tensor(Shape::vec(4)), Ids(Shape::vec(4))),
                       "data source 'flat': features are a vector of 4; give (examples, features) or (examples, rows, cols)",
                       ShapeError);
}

TEST_CASE("metrics: accuracy and squared error are tallies that combine across batches exactly") {
  const Tensor out(Shape::mat(3, 2), {0.1f, 0.9f, 0.8f, 0.2f, 0.4f, 0.6f});
  const Tally t = count_correct(out, Ids(Shape::vec(3), {1, 1, kIgnoreLabel}));
  CHECK(t.sum == 1);
  CHECK(t.count == 2);
  CHECK(t.mean() == 0.5);
  CHECK(std::isnan(Tally{}.mean()));
  const Tally e = squared_error(Tensor(Shape::vec(2), {1, 3}), Tensor(Shape::vec(2), {0, 1}));
  CHECK(e.sum == 5);
  CHECK(e.count == 2);
  CHECK_THROWS_WITH_AS(count_correct(out, Ids(Shape::vec(2))),
                       "accuracy: the output is 3x2 (3 rows) but there are 2 labels (2); give one label per row", ShapeError);
  CHECK_THROWS_WITH_AS(value_of({{"loss", 1}}, "accuracy"), "value_of: no value named 'accuracy'; there are 'loss'", NameError);
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
                       "sampler: the saved data order (stored, of 10 examples) is at epoch 1 position 10 but this "
                       "dataset has 11 examples",
                       ValueError);
}

namespace {

// The indices of `epochs` whole epochs of a sampler of n examples, drawn a batch at a time.
std::vector<Index> draws(Sampler& s, Index n, Index epochs) {
  std::vector<Index> out;
  while (static_cast<Index>(out.size()) < n * epochs)
    for (Index k : s.next()) out.push_back(k);
  out.resize(static_cast<std::size_t>(n * epochs));
  return out;
}

// Whether each epoch of `d` holds every index of [0, n) once.
bool epochs_are_permutations(const std::vector<Index>& d, Index n) {
  for (std::size_t start = 0; start + static_cast<std::size_t>(n) <= d.size(); start += static_cast<std::size_t>(n)) {
    std::vector<char> seen(static_cast<std::size_t>(n), 0);
    for (std::size_t i = start; i < start + static_cast<std::size_t>(n); ++i) {
      if (d[i] < 0 || d[i] >= n || seen[static_cast<std::size_t>(d[i])]) return false;
      seen[static_cast<std::size_t>(d[i])] = 1;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("data: past kStoredOrderLimit the order is computed, O(1) in state, each epoch a permutation") {
  for (const Index n : {Sampler::kStoredOrderLimit + 1, Index{100'003}, Index{1} << 18}) {
    CAPTURE(n);
    Sampler s(n, 7, 11);
    CHECK_FALSE(s.stored_order());
    CHECK(s.state().order.empty());  // nothing that grows with n
    const std::vector<Index> d = draws(s, n, 2);
    CHECK(epochs_are_permutations(d, n));
    // Not the identity, and the two epochs differ: fresh keys each epoch.
    CHECK_FALSE(std::equal(d.begin(), d.begin() + n, d.begin() + n));
    // A random order rises between neighbours about half the time, and its draws average about n / 2.
    Index rises = 0;
    double sum = 0;
    for (Index i = 0; i + 1 < n; ++i) rises += d[static_cast<std::size_t>(i + 1)] > d[static_cast<std::size_t>(i)];
    for (Index i = 0; i < n / 10; ++i) sum += static_cast<double>(d[static_cast<std::size_t>(i)]);
    CHECK(static_cast<double>(rises) / static_cast<double>(n - 1) == doctest::Approx(0.5).epsilon(0.02));
    CHECK(sum / static_cast<double>(n / 10) / static_cast<double>(n) == doctest::Approx(0.5).epsilon(0.02));
  }
}

TEST_CASE("data: a computed order resumes exactly from its state, mid-epoch and across epochs") {
  const Index n = 70'001;
  Sampler s(n, 5, 3);
  for (int i = 0; i < 20'000; ++i) s.next();  // 100,000 draws: into the second epoch
  const Sampler::State saved = s.state();
  CHECK(saved.epoch == 1);
  std::vector<Index> expected;
  for (int i = 0; i < 30'000; ++i)  // on into the third epoch
    for (Index k : s.next()) expected.push_back(k);
  Sampler other(n, 5, 999);
  other.set_state(saved);
  std::vector<Index> replay;
  for (int i = 0; i < 30'000; ++i)
    for (Index k : other.next()) replay.push_back(k);
  CHECK(replay == expected);
  Sampler::State bad = saved;
  bad.cursor = n + 1;
  CHECK_THROWS_WITH_AS(other.set_state(bad),
                       "sampler: the saved data order (computed) is at epoch 1 position 70002 but this dataset has 70001 "
                       "examples",
                       ValueError);
}

TEST_CASE("data: a state keeps its order: a stored permutation of a large set (today's checkpoints) goes on stored") {
  const Index n = Sampler::kStoredOrderLimit + 10;
  // What a sampler saved before orders were computed: a Fisher-Yates permutation and its generator after it.
  Rng rng(5, 0x73616d706c65);
  Sampler::State old;
  old.order.resize(static_cast<std::size_t>(n));
  std::iota(old.order.begin(), old.order.end(), Index{0});
  rng.shuffle(old.order.begin(), old.order.end());
  old.cursor = n - 3;
  old.rng = rng.state();
  Sampler s(n, 6, 1);
  s.set_state(old);
  CHECK(s.stored_order());
  const std::span<const Index> first = s.next();  // the epoch's last three, then the next epoch's first three
  std::vector<Index> next_epoch(static_cast<std::size_t>(n));
  std::iota(next_epoch.begin(), next_epoch.end(), Index{0});
  rng.shuffle(next_epoch.begin(), next_epoch.end());
  CHECK(std::vector<Index>(first.begin(), first.end()) ==
        std::vector<Index>{old.order[static_cast<std::size_t>(n - 3)], old.order[static_cast<std::size_t>(n - 2)],
                           old.order[static_cast<std::size_t>(n - 1)], next_epoch[0], next_epoch[1], next_epoch[2]});
}

TEST_CASE("data: a sampler of more than 2^62 examples (a source that reports an endless size) is made and draws") {
  for (const Index n : {(Index{1} << 62) + 1, std::numeric_limits<Index>::max()}) {
    CAPTURE(n);
    Sampler s(n, 4, 1);
    const std::span<const Index> drawn = s.next();
    const std::set<Index> distinct(drawn.begin(), drawn.end());
    CHECK(distinct.size() == 4);
    CHECK(std::all_of(drawn.begin(), drawn.end(), [&](Index k) { return k >= 0 && k < n; }));
    const Sampler::State saved = s.state();
    const std::span<const Index> next = s.next();
    const std::vector<Index> expected(next.begin(), next.end());
    Sampler other(n, 4, 2);
    other.set_state(saved);
    const std::span<const Index> replay = other.next();
    CHECK(std::vector<Index>(replay.begin(), replay.end()) == expected);
  }
}

TEST_CASE("data: a computed order's state is for its number of examples: a sampler of another refuses it") {
  Sampler a(100'000, 7, 1);
  for (int i = 0; i < 3; ++i) a.next();
  const Sampler::State saved = a.state();
  for (const Index n : {Index{70'000}, Index{200'000}, Index{100}}) {
    CAPTURE(n);
    Sampler other(n, 7, 1), fresh(n, 7, 1);
    CHECK_THROWS_AS(other.set_state(saved), ValueError);
    CHECK(std::ranges::equal(other.next(), fresh.next()));  // and no change: it draws what a fresh one draws
  }
  Sampler same(100'000, 7, 5);
  CHECK_NOTHROW(same.set_state(saved));
}

TEST_CASE("data: a stored order's state with its order emptied is not taken for a computed one") {
  for (const Index n : {Index{1}, Index{1000}, Sampler::kStoredOrderLimit}) {
    CAPTURE(n);
    Sampler a(n, 7, 1);
    a.next();
    Sampler::State forged = a.state();
    forged.order.clear();
    Sampler other(n, 7, 1);
    CHECK_THROWS_AS(other.set_state(forged), ValueError);
  }
}

TEST_CASE("dataset file: tokens, a TAB, one label per token, vocabularies built from the data") {
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
  CHECK_THROWS_WITH_AS(read_dataset("/nonexistent/data.txt"),
                       "read_dataset: cannot open '/nonexistent/data.txt': No such file or directory", FileError);
  CHECK_THROWS_WITH_AS(read_dataset("/dev/zero"), "read_dataset: '/dev/zero' is not a regular file (a character device)",
                       FileError);
  // A file with tokens but not one label, for training or for evaluation, is refused.
  CHECK_THROWS_WITH_AS(parse_dataset("a b\t_ _\n", "eval.txt", Vocabulary({"<pad>", "a", "b"}), Vocabulary({"X"})),
                       "eval.txt: no labels at all: every label is '_'", FormatError);
  // A UTF-8 byte-order mark is not part of the first token.
  const Dataset bom = parse_dataset("\xEF\xBB\xBFthe cat\tX Y\n", "bom.txt");
  CHECK(bom.tokens.names() == std::vector<std::string>{"<pad>", "the", "cat"});
}

TEST_CASE("dataset file: a text larger than the run may take, or whose parse would take more, is refused naming both") {
  const auto path = test::scratch_dir("train", "dataset_limit") / "data.txt";
  {
    std::ofstream out(path);
    for (int i = 0; i < 50000; ++i) out << "a\tX\n";  // 200,000 bytes, 100,000 tokens and labels
  }
  const std::string quoted = escaped(path);
  // The file's size is refused before the file is read (a read limit of 1,000 bytes would refuse otherwise);
  // what a parse would take is counted after.
  CHECK_THROWS_AS(read_dataset_text(path, 100e3, 1000), LimitError);
  CHECK(test::message_of([&] { read_dataset_text(path, 100e3, 1000); }) ==
        fmt::format("read_dataset: '{}' holds 200 KB, more than the 100 KB the run may take", quoted));
  // 200,000 bytes + 32 a token or label + 128 a line = 9.8 MB.
  CHECK_THROWS_AS(read_dataset_text(path, 1e6), LimitError);
  CHECK(test::message_of([&] { read_dataset_text(path, 1e6); }) ==
        fmt::format("read_dataset: '{}' (200 KB, 50000 lines, 100000 tokens and labels) could take 9.8 MB to parse, "
                    "more than the 1.0 MB the run may take",
                    quoted));
  CHECK(read_dataset_text(path, 20e6).size() == 200000);
}

TEST_CASE("trainer: trains a user's MLP on dense data, with an optimizer, a schedule and metrics of the user's choice") {
  const TensorSource train = regression_data(512, 1, "linear"), test = regression_data(256, 2, "linear test");
  Mlp model(mlp(3, 16, 1, 7));
  AdamW<float> opt(model.parameters(), {.lr = 0.02, .weight_decay = 1e-4});
  opt.set_schedule(CosineWithWarmup({.warmup_steps = 20, .total_steps = 600}));
  Trainer trainer(model, opt, train, [&](Tape<float>& tape, const TensorBatch& b) -> StepOutput<float> {
    Var<float> y = model.forward(tape.constant(b.features));
    return {mse(y, tape.constant(b.targets)), y};
  }, {.steps = 600, .batch = 32, .eval_every = 200, .seed = 3});
  trainer.evaluate_on(test);
  trainer.add_metric("mse", metrics::mean_squared_error);
  trainer.add_metric("mean_abs_error", [](const Tensor& out, const TensorBatch& b) {
    return Tally{(out.array() - b.targets.array()).abs().cast<double>().sum(), static_cast<double>(out.numel())};
  });
  trainer.run();
  const auto& curve = trainer.curve();
  REQUIRE(curve.size() == 4);
  std::vector<std::string> names;
  for (const auto& v : curve.back().values) names.push_back(v.name);
  CHECK(names == std::vector<std::string>{"train_loss", "train_mse", "train_mean_abs_error", "eval_loss", "eval_mse",
                                          "eval_mean_abs_error"});
  const NamedValues final_test = trainer.evaluate(test);
  CHECK(value_of(final_test, "eval_loss") < 0.01 * value_of(curve.front().values, "eval_loss"));  // it learned
  CHECK(value_of(final_test, "eval_mse") == doctest::Approx(value_of(final_test, "eval_loss")).epsilon(1e-5));  // the same mean
  CHECK(value_of(curve.back().values, "eval_mean_abs_error") < 0.1);
  CHECK(curve.back().lr == doctest::Approx(opt.schedule().lr_at(0.02, 599)));
  CHECK(opt.lr() == 0.02);  // the schedule sets each step's rate from the optimizer's lr, never overwriting it
}

TEST_CASE("trainer: classification on dense data with accuracy, callbacks see every step, and stop() ends early") {
  const TensorSource data = classification_data(400, 5);
  Mlp model(mlp(2, 8, 2, 1));
  SGD<float> opt(model.parameters(), {.lr = 0.2, .momentum = 0.9});
  Trainer trainer(model, opt, data, [&](Tape<float>& tape, const TensorBatch& b) -> StepOutput<float> {
    Var<float> logits = model.forward(tape.constant(b.features));
    return {cross_entropy(logits, b.labels), logits};
  }, {.steps = 1000, .batch = 16, .eval_every = 25});
  trainer.evaluate_on(data);
  trainer.add_metric("accuracy", metrics::accuracy);
  Index steps_seen = 0, evaluations = 0;
  TrainCallbacks callbacks;
  callbacks.on_step = [&](Index step) { steps_seen = step; };
  callbacks.on_evaluation = [&](const CurvePoint& p) {
    ++evaluations;
    if (value_of(p.values, "eval_accuracy") >= 0.97) trainer.stop();  // early stopping
  };
  trainer.run(callbacks);
  CHECK(trainer.steps_done() < 1000);
  CHECK(steps_seen == trainer.steps_done());
  CHECK(evaluations == static_cast<Index>(trainer.curve().size()));
  CHECK(value_of(trainer.curve().back().values, "eval_accuracy") >= 0.97);
  CHECK(first_step_reaching(trainer.curve(), "eval_accuracy", 0.97) == trainer.steps_done());
  CHECK(first_step_reaching(trainer.curve(), "eval_accuracy", 1.5) == std::nullopt);  // no point reached it
  CHECK_THROWS_WITH_AS(trainer.add_metric("late", metrics::accuracy),
                       "add_metric: 'late' comes after training started; add metrics before the first step", UsageError);
  // A name from outside (a program's flag) is shown escaped, as every refusal of add_metric shows it.
  CHECK_THROWS_WITH_AS(trainer.add_metric("late\x1b[2J", metrics::accuracy),
                       "add_metric: 'late\\x1b[2J' comes after training started; add metrics before the first step",
                       UsageError);
}

TEST_CASE("trainer: the same seeds give the same curve bit for bit, wherever the heap puts the buffers") {
  const TensorSource data = classification_data(200, 8);
  auto train = [&] { return mlp_curve(data); };
  const auto curve = train();
  std::vector<std::vector<char>> shift;
  for (std::size_t k = 1; k <= 3; ++k) {
    shift.emplace_back(8 * k + 1);
    const auto again = train();
    CHECK(test::same_curve(again, curve));
  }
}

TEST_CASE("data-parallel: shard_of splits a batch into contiguous parts, the first n % ranks one longer, some maybe empty") {
  const auto parts = [](Index n, int size) {
    std::vector<std::pair<Index, Index>> v;
    for (int r = 0; r < size; ++r) v.emplace_back(shard_of(n, r, size).begin, shard_of(n, r, size).end);
    return v;
  };
  CHECK(parts(32, 2) == std::vector<std::pair<Index, Index>>{{0, 16}, {16, 32}});
  CHECK(parts(33, 2) == std::vector<std::pair<Index, Index>>{{0, 17}, {17, 33}});
  CHECK(parts(7, 3) == std::vector<std::pair<Index, Index>>{{0, 3}, {3, 5}, {5, 7}});
  CHECK(parts(1, 3) == std::vector<std::pair<Index, Index>>{{0, 1}, {1, 1}, {1, 1}});
  CHECK_THROWS_WITH_AS(shard_of(4, 2, 2), "shard_of: rank 2 of 2 ranks, 4 items: needs 0 <= rank < ranks and items >= 0",
                       ValueError);
}

TEST_CASE("data-parallel: a group of one rank is one process: the same curve, bit for bit, and nothing exchanged") {
  // The one-rank collective a process that is not part of a job would be.
  struct Alone final : Collective {
    int calls = 0;
    int rank() const override { return 0; }
    int size() const override { return 1; }
    void all_reduce_sum(std::span<float>) override { ++calls; }
    void all_reduce_sum(std::span<double>) override { ++calls; }
    void broadcast(std::span<std::byte>, int) override { ++calls; }
    void all_gather(std::span<const std::uint32_t> mine, std::span<std::uint32_t> all) override {
      std::copy(mine.begin(), mine.end(), all.begin());
      ++calls;
    }
    void barrier() override { ++calls; }
  };
  const TensorSource data = classification_data(200, 8);
  Alone alone;
  CHECK(test::same_curve(mlp_curve(data, &alone), mlp_curve(data)));
  CHECK(alone.calls == 0);  // nothing to share, nothing to compare (w g / w would only round)
  CHECK_THROWS_WITH_AS(reducer_for(alone, {.check_every = 0}), "set_collective: check_every must be >= 1, got 0", ValueError);
}

TEST_CASE("data-parallel: the model draws dropout from the rank's stream of the step, and not after the trainer goes") {
  TwoRanks two;
  const TensorSource data = classification_data(20, 8);
  Mlp model(mlp(2, 4, 2, 3));
  {
    SGD<float> opt(model.parameters(), {.lr = 0.1});
    Trainer trainer(model, opt, data, [&](Tape<float>& tape, const TensorBatch& b) -> StepOutput<float> {
      return cross_entropy(model.forward(tape.constant(b.features)), b.labels);
    });
    CHECK(model.rng() == &trainer.rng());
    trainer.set_collective(&two);
    CHECK(dynamic_cast<DataParallel*>(&trainer.reducer()) != nullptr);
    CHECK(model.rng() != nullptr);
    CHECK(model.rng() != &trainer.rng());  // the step's own stream, seeded from the trainer's
    trainer.set_collective(nullptr);
    CHECK(dynamic_cast<SingleProcess*>(&trainer.reducer()) != nullptr);
    CHECK(model.rng() == &trainer.rng());
    trainer.set_collective(&two);
  }
  CHECK(model.rng() == nullptr);
}

TEST_CASE("data-parallel: a metric added after the group started (by evaluate()) is refused at the next step") {
  TwoRanks two;
  const TensorSource data = classification_data(20, 8);
  Mlp model(mlp(2, 4, 2, 3));
  SGD<float> opt(model.parameters(), {.lr = 0.1});
  Trainer trainer(model, opt, data, [&](Tape<float>& tape, const TensorBatch& b) -> StepOutput<float> {
    Var<float> logits = model.forward(tape.constant(b.features));
    return {cross_entropy(logits, b.labels), logits};
  }, {.batch = 8});
  trainer.set_collective(&two);
  trainer.evaluate(data);  // the group starts, with no metric
  trainer.add_metric("accuracy", metrics::accuracy);
  CHECK_THROWS_WITH_AS(trainer.step(),
                       "data-parallel: a metric was added after the ranks started; add metrics before the first step, "
                       "run() or evaluate()",
                       UsageError);
}

TEST_CASE("trainer: every step and evaluation goes through its reducer, in the order train/step_reducer.hpp lists") {
  // A user's reducer: the identity, naming each call the trainer makes.
  struct Recording final : StepReducer {
    std::vector<std::string>& calls;
    explicit Recording(std::vector<std::string>& c) : calls(c) {}
    void start(TrainerBase&) override { calls.push_back("start"); }
    void restart() override { calls.push_back("restart"); }
    Rng& step_stream(Rng& training) override { return training; }
    std::span<const Index> shard(std::span<const Index> batch, Rng&) override {
      calls.push_back("shard");
      return batch;
    }
    bool computes(double) const override {
      calls.push_back("computes");
      return true;
    }
    double reduce(std::span<Parameter<float>* const>, std::optional<double> loss, double, std::span<Tally>) override {
      calls.push_back("reduce");
      return *loss;
    }
    void after_step(std::span<Parameter<float>* const>, Index step) override { calls.push_back(fmt::format("after_step {}", step)); }
    void after_run(std::span<Parameter<float>* const>, Index) override { calls.push_back("after_run"); }
    Shard eval_shard(Index n) const override {
      calls.push_back("eval_shard");
      return {0, n};
    }
    void reduce_sums(std::span<double>) override { calls.push_back("reduce_sums"); }
  };
  const TensorSource data = classification_data(40, 4);
  auto train = [&](std::unique_ptr<StepReducer> reducer) {
    Mlp model(mlp(2, 4, 2, 3));
    Adam<float> opt(model.parameters(), {.lr = 0.05});
    Trainer trainer(model, opt, data, [&](Tape<float>& tape, const TensorBatch& b) -> StepOutput<float> {
      Var<float> logits = model.forward(tape.constant(b.features));
      return {cross_entropy(logits, b.labels), logits};
    }, {.steps = 2, .batch = 8, .eval_every = 2});
    trainer.evaluate_on(data);
    trainer.add_metric("accuracy", metrics::accuracy);
    trainer.set_reducer(std::move(reducer));
    trainer.run();
    trainer.set_state(trainer.state());
    return trainer.curve();
  };
  std::vector<std::string> calls;
  const std::vector<CurvePoint> curve = train(std::make_unique<Recording>(calls));
  CHECK(test::same_curve(curve, train(nullptr)));  // nullptr: SingleProcess, the same identity
  const std::vector<std::string> step = {"start", "shard", "computes", "reduce"};
  std::vector<std::string> expected = {"start", "start", "eval_shard", "reduce_sums"};  // run(), the first point
  for (Index k = 1; k <= 2; ++k) {
    expected.insert(expected.end(), step.begin(), step.end());
    expected.push_back(fmt::format("after_step {}", k));
  }
  expected.insert(expected.end(), {"start", "eval_shard", "reduce_sums", "after_run", "restart"});
  CHECK(calls == expected);
}

TEST_CASE("trainer: a non-finite loss stops before anything changes, evaluation runs in eval mode, bad options refused") {
  const TensorSource data = regression_data(64, 4, "linear");
  Mlp model(mlp(3, 4, 1, 2));
  SGD<float> opt(model.parameters(), {.lr = 0.1});
  bool poison = false;
  std::vector<bool> modes;  // model.training() in each call of the loss function
  Trainer trainer(model, opt, data, [&](Tape<float>& tape, const TensorBatch& b) -> Var<float> {
    modes.push_back(model.training());
    Var<float> y = model.forward(tape.constant(b.features));
    Var<float> loss = mse(y, tape.constant(b.targets));
    return poison ? scale(loss, std::nan("")) : loss;  // a bare Var: a loss without an output for metrics
  }, {.steps = 10, .batch = 8, .eval_batch = 8});
  trainer.step();
  poison = true;
  const auto before = model.parameters().front()->value;
  // NonFiniteError: the programs exit with "training stopped" (3), not "bad input".
  CHECK_THROWS_WITH_AS(trainer.step(), doctest::Contains("train: the loss is NaN at step 2 (lr 0.1)"), NonFiniteError);
  CHECK(model.parameters().front()->value == before);
  CHECK(model.parameters().front()->grad == Tensor(before.shape()));  // no gradient left behind either
  CHECK(trainer.steps_done() == 1);
  poison = false;
  modes.clear();
  trainer.evaluate(data);
  CHECK(modes == std::vector<bool>(8, false));  // 64 examples in batches of 8, in evaluation mode
  CHECK(model.training());                      // and back in training mode after
  CHECK_THROWS_WITH_AS(Trainer(model, opt, data, [](Tape<float>&, const TensorBatch&) { return Var<float>{}; },
                               {.batch = 0}),
                       "train: batch must be in [1, 16777216], got 0", ValueError);
  CHECK_THROWS_WITH_AS(trainer.add_metric("mse", metrics::mean_squared_error),
                       "add_metric: 'mse' comes after training started; add metrics before the first step", UsageError);
  Trainer fresh(model, opt, data, [&](Tape<float>& tape, const TensorBatch& b) -> Var<float> {
    return mse(model.forward(tape.constant(b.features)), tape.constant(b.targets));
  });
  CHECK_THROWS_WITH_AS(fresh.add_metric("loss", metrics::mean_squared_error), "add_metric: 'loss' is reserved for the loss",
                       NameError);
}

namespace {
// How a step of refused_steps fails: its loss function throws, or anomaly mode refuses its backward part way,
// after the model's own rules wrote their gradients (sqrt at the hidden layer's bias, zeros until a step
// updates it, has an Inf gradient; recorded before the model's forward, it is walked after it).
enum class Refused { in_forward, in_backward };

// Steps of SGD on an MLP, some of them refused (`refused`, by the step's number from 1), some weighing
// nothing (`weightless`: every label of the batch ignored), as one rank of `group` (none: one process).
// The parameters after the last step; after each refused step, every gradient must be zero.
std::vector<Tensor> refused_steps(Refused how, const std::set<int>& refused, const std::set<int>& weightless,
                                  Index steps, Collective* group = nullptr) {
  struct Weighed final : DataSource<TensorBatch> {
    TensorSource all = classification_data(64, 5);
    bool weightless = false;
    std::string_view name() const override { return all.name(); }
    Index size() const override { return all.size(); }
    void fill(std::span<const Index> indices, TensorBatch& out) const override {
      all.fill(indices, out);
      if (weightless) out.labelled = 0;
    }
    std::uint32_t fingerprint() const override { return all.fingerprint(); }
  } data;
  Mlp model(mlp(2, 4, 2, 3));
  SGD<float> opt(model.parameters(), {.lr = 0.1});
  bool refuse = false;
  Trainer trainer(model, opt, data, [&](Tape<float>& tape, const TensorBatch& b) -> StepOutput<float> {
    if (refuse && how == Refused::in_forward) throw std::runtime_error("refused");
    const Var<float> root = refuse ? sum(sqrt(tape.param(model.parameter("hidden.bias")))) : Var<float>{};
    const Var<float> loss = cross_entropy(model.forward(tape.constant(b.features)), b.labels);
    return refuse ? add(loss, root) : loss;
  }, {.batch = 8, .anomaly = true});
  trainer.set_collective(group);
  for (int k = 1; k <= steps; ++k) {
    refuse = refused.count(k) > 0;
    data.weightless = weightless.count(k) > 0;
    if (!refuse) {
      trainer.step();
      continue;
    }
    if (how == Refused::in_forward)
      CHECK_THROWS_WITH_AS(trainer.step(), "refused", std::runtime_error);
    else
      CHECK_THROWS_WITH_AS(trainer.step(), doctest::Contains("anomaly: the backward rule of sqrt"), NonFiniteError);
    for (const Parameter<float>* p : model.parameters()) CHECK(p->grad == Tensor(p->value.shape()));
  }
  std::vector<Tensor> values;
  for (const Parameter<float>* p : model.parameters()) values.push_back(p->value);
  return values;
}

// Rank 0 of two: keeps what it sends; the other rank weighs 1 and sends zeros.
struct Sending final : Collective {
  std::vector<std::vector<float>> sent;
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void all_reduce_sum(std::span<float> data) override {
    sent.emplace_back(data.begin(), data.end());
    data.back() += 1;  // w g of each parameter, w loss, w: no metric, the weight is last
  }
  void all_reduce_sum(std::span<double>) override {}
  void broadcast(std::span<std::byte>, int) override {}
  void all_gather(std::span<const std::uint32_t> mine, std::span<std::uint32_t> all) override {
    for (auto at = all.begin(); at != all.end(); at += static_cast<std::ptrdiff_t>(mine.size()))
      std::copy(mine.begin(), mine.end(), at);  // every rank was started alike
  }
  void barrier() override {}
};

// y = x, whose backward throws: a user's op refusing part way through a backward (no anomaly mode needed).
struct RefusesBackward {
  static constexpr const char* name = "refuses_backward";
  static constexpr const char* inputs[] = {"x"};
  void forward(Output<float>& out, const Tensor& x) const { out.make(x.shape()) = x; }
  static void backward(const Output<float>&, const OpInput<float>&) { throw std::runtime_error("refused in backward"); }
};
}  // namespace

TEST_CASE("trainer: a step whose backward throws part way leaves no gradient: the next step is as after a refused forward") {
  CHECK(refused_steps(Refused::in_backward, {1, 2}, {}, 4) == refused_steps(Refused::in_forward, {1, 2}, {}, 4));
}

TEST_CASE("data-parallel: a rank whose backward threw sends zeros for a step it computes nothing of, then its own gradient") {
  Sending thrown, refused;
  // Refused, weighing nothing, refused, computed.
  const std::vector<Tensor> after = refused_steps(Refused::in_backward, {1, 3}, {2}, 4, &thrown);
  CHECK(after == refused_steps(Refused::in_forward, {1, 3}, {2}, 4, &refused));
  REQUIRE(thrown.sent.size() == 2);
  CHECK(thrown.sent == refused.sent);
  const std::vector<float>& nothing = thrown.sent[0];
  CHECK(std::all_of(nothing.begin(), nothing.end(), [](float v) { return v == 0.0f; }));
  CHECK(std::any_of(thrown.sent[1].begin(), thrown.sent[1].end() - 2, [](float v) { return v != 0.0f; }));
}

TEST_CASE("data-parallel: a computing rank whose loss is NaN after a backward threw sends zeros and keeps no gradient") {
  // Rank 0 of two. Step 1 throws, in its backward (after the model's rules wrote their gradients: what it leaves
  // would be sent next) or, to compare, in its forward (nothing written); step 2 computes a NaN loss, so its
  // backward is not run and it sends w g with g the zeros every step starts from; step 3 computes.
  const auto run = [](bool in_backward, Sending& group) {
    const TensorSource data = classification_data(64, 5);
    Mlp model(mlp(2, 4, 2, 3));
    SGD<float> opt(model.parameters(), {.lr = 0.1});
    int step = 0;
    Trainer trainer(model, opt, data, [&](Tape<float>& tape, const TensorBatch& b) -> StepOutput<float> {
      if (step == 1 && !in_backward) throw std::runtime_error("refused in forward");
      // Recorded before the model's forward, so walked after the model's rules.
      const Var<float> refusal = step == 1 ? sum(apply(RefusesBackward{}, {tape.param(model.parameter("hidden.bias"))}))
                                           : Var<float>{};
      const Var<float> loss = cross_entropy(model.forward(tape.constant(b.features)), b.labels);
      return step == 1 ? add(loss, refusal) : step == 2 ? scale(loss, std::nan("")) : loss;
    }, {.batch = 8});
    trainer.set_collective(&group);
    const auto no_gradient = [&] {
      for (const Parameter<float>* p : model.parameters()) CHECK(p->grad == Tensor(p->value.shape()));
    };
    step = 1;
    CHECK_THROWS_WITH_AS(trainer.step(), in_backward ? "refused in backward" : "refused in forward", std::runtime_error);
    no_gradient();
    step = 2;
    CHECK_THROWS_WITH_AS(trainer.step(), doctest::Contains("train: the loss is NaN at step 1"), NonFiniteError);
    no_gradient();
    step = 3;
    trainer.step();
    std::vector<Tensor> values;
    for (const Parameter<float>* p : model.parameters()) values.push_back(p->value);
    return values;
  };
  Sending thrown, refused;
  CHECK(run(true, thrown) == run(false, refused));
  REQUIRE(thrown.sent.size() == 2);
  const std::vector<float>& nan_step = thrown.sent[0];  // w g of each parameter, w loss, w
  CHECK(std::all_of(nan_step.begin(), nan_step.end() - 2, [](float v) { return v == 0.0f && !std::signbit(v); }));
  CHECK(std::isnan(nan_step.end()[-2]));
  CHECK(nan_step.back() > 0);  // it computed: it weighs its shard
  CHECK(thrown.sent[1] == refused.sent[1]);  // then its own w g, nothing of step 1's
  CHECK(std::any_of(thrown.sent[1].begin(), thrown.sent[1].end() - 2, [](float v) { return v != 0.0f; }));
}

TEST_CASE("trainer: a run of zero steps records where it starts and changes nothing") {
  const TensorSource data = regression_data(32, 6, "linear");
  Mlp model(mlp(3, 4, 1, 5));
  SGD<float> opt(model.parameters());
  const Tensor before = model.parameters().front()->value;
  Trainer trainer(model, opt, data, [&](Tape<float>& t, const TensorBatch& b) {
    return mse(model.forward(t.constant(b.features)), t.constant(b.targets));
  }, {.steps = 0});
  trainer.run();
  CHECK(trainer.steps_done() == 0);
  CHECK(trainer.curve().size() == 1);
  CHECK(model.parameters().front()->value == before);
}

TEST_CASE("trainer: its state round-trips, a state of other data, options or metrics is refused and changes nothing") {
  const TensorSource data = classification_data(100, 2), other = classification_data(100, 3);
  auto make = [&](Mlp& model, Optimizer<float>& opt, const TensorSource& source, TrainOptions options) {
    auto t = std::make_unique<Trainer<TensorBatch>>(model, opt, source, [&model](Tape<float>& tape, const TensorBatch& b) -> StepOutput<float> {
      Var<float> logits = model.forward(tape.constant(b.features));
      return {cross_entropy(logits, b.labels), logits};
    }, options);
    t->add_metric("accuracy", metrics::accuracy);
    return t;
  };
  Mlp a(mlp(2, 4, 2, 1)), b(mlp(2, 4, 2, 1));
  SGD<float> opt_a(a.parameters()), opt_b(b.parameters());
  auto ta = make(a, opt_a, data, {.steps = 20, .batch = 8, .eval_every = 5});
  for (int i = 0; i < 7; ++i) ta->step();
  ta->rng().next_u64();  // the training stream moves, and is saved
  const TrainerState s = ta->state();
  CHECK(s.step == 7);
  CHECK(s.window_steps == 7);
  CHECK(s.window_metrics.size() == 1);
  CHECK(s.data_fingerprint == data.fingerprint());
  CHECK(s.rng != TrainerBase::initial_rng_state(0));

  auto tb = make(b, opt_b, data, {.steps = 20, .batch = 8, .eval_every = 5});
  tb->set_state(s);
  CHECK(tb->steps_done() == 7);
  CHECK(tb->rng().state() == ta->rng().state());

  auto unchanged = make(b, opt_b, other, {.steps = 20, .batch = 8, .eval_every = 5});
  CHECK_THROWS_WITH_AS(unchanged->set_state(s), doctest::Contains("set_state: the training data differs"), ValueError);
  auto wider = make(b, opt_b, data, {.steps = 20, .batch = 16, .eval_every = 10});
  CHECK_THROWS_WITH_AS(wider->set_state(s),
                       "set_state: batch is 8 in the file but 16 in the trainer; eval_every is 5 in the file but 10 in the "
                       "trainer",
                       ValueError);
  CHECK(wider->steps_done() == 0);
  auto longer = make(b, opt_b, data, {.steps = 50, .batch = 8, .eval_every = 5});
  longer->set_state(s);  // steps may differ: a resumed run may be extended
  CHECK(longer->options().steps == 50);
  Trainer<TensorBatch> no_metrics(b, opt_b, data, [](Tape<float>&, const TensorBatch&) { return Var<float>{}; },
                                  {.steps = 20, .batch = 8, .eval_every = 5});
  CHECK_THROWS_WITH_AS(no_metrics.set_state(s),
                       "set_state: the checkpoint measured the metrics [accuracy], the trainer measures []", ValueError);
}

TEST_CASE("report: plain lines when not a terminal, and a CSV row per evaluation") {
  const auto dir = std::filesystem::temp_directory_path() / "tapegrad_test_report";
  std::filesystem::remove_all(dir);
  const auto log_path = dir / "out.txt";
  std::filesystem::create_directories(dir);
  std::FILE* out = std::fopen(log_path.c_str(), "w");
  REQUIRE(out != nullptr);
  {
    Progress progress(out, Progress::Style::automatic, 200, "halves");
    CsvLog csv(dir / "log" / "curve.csv");
    const TensorSource data = classification_data(100, 9);
    Mlp model(mlp(2, 4, 2, 4));
    SGD<float> opt(model.parameters(), {.lr = 0.1});
    Trainer trainer(model, opt, data, [&](Tape<float>& tape, const TensorBatch& b) -> StepOutput<float> {
      Var<float> logits = model.forward(tape.constant(b.features));
      return {cross_entropy(logits, b.labels), logits};
    }, {.steps = 200, .eval_every = 100});
    trainer.evaluate_on(data);
    trainer.add_metric("accuracy", metrics::accuracy);
    TrainCallbacks cb = progress.callbacks();
    auto on_eval = cb.on_evaluation;
    cb.on_evaluation = [&](const CurvePoint& p) {
      on_eval(p);
      csv.write(p);
    };
    trainer.run(cb);
    CurvePoint odd = trainer.curve().back();
    odd.values.pop_back();
    CHECK_THROWS_WITH_AS(csv.write(odd), doctest::Contains("has the columns train_loss,train_accuracy,eval_loss,eval_accuracy but this point has "
                                                           "train_loss,train_accuracy,eval_loss"),
                         ValueError);
  }
  std::fclose(out);
  std::ifstream text(log_path), csv(dir / "log" / "curve.csv");
  std::stringstream line_stream, row_stream;
  line_stream << text.rdbuf();
  row_stream << csv.rdbuf();
  const std::string lines = line_stream.str(), rows = row_stream.str();
  CHECK(lines.find("halves step    100/200  train_loss ") != std::string::npos);
  CHECK(lines.find("halves step      0/200  train_loss -  train_accuracy -  eval_loss ") != std::string::npos);
  CHECK(lines.find('\r') == std::string::npos);  // a file gets lines, not a redrawn bar
  CHECK(std::count(rows.begin(), rows.end(), '\n') == 4);  // header + steps 0, 100, 200
  CHECK(rows.rfind("step,train_loss,train_accuracy,eval_loss,eval_accuracy,lr,seconds\n0,nan,nan,", 0) == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("report: curve_series draws one named value of a curve against the step") {
  const std::vector<CurvePoint> curve = {{.step = 0, .values = {{"train_loss", 2.0}, {"eval_loss", 3.0}}},
                                         {.step = 50, .values = {{"train_loss", 1.0}, {"eval_loss", 1.5}}}};
  const Series s = curve_series("validation", curve, "eval_loss");
  CHECK(s.name == "validation");
  CHECK(s.x == std::vector<double>{0, 50});
  CHECK(s.y == std::vector<double>{3.0, 1.5});
  CHECK_THROWS_AS(curve_series("x", curve, "eval_accuracy"), NameError);
}

TEST_CASE("report: the bar's rate counts steps, or the items a step trains on, from the first step it sees") {
  const auto dir = test::scratch_dir("train", "bar");
  const auto path = dir / "bar.txt";
  for (bool chars : {false, true}) {
    std::FILE* out = std::fopen(path.c_str(), "w");
    REQUIRE(out != nullptr);
    {
      Progress progress(out, Progress::Style::bar, 1000, "gpt");
      if (chars) progress.show_rate_of(768, "chars");
      progress.on_step(501);  // a run resumed at step 500: its first step here
      progress.on_step(1000);
    }
    std::fclose(out);
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    CHECK(text.str().find(chars ? " chars/s" : " steps/s") != std::string::npos);
    CHECK(text.str().find(chars ? " steps/s" : " chars/s") == std::string::npos);
  }
  CHECK_THROWS_WITH_AS(Progress(stderr, Progress::Style::quiet, 1, "x").show_rate_of(0, "chars"),
                       "progress: items per step must be positive, got 0", ValueError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("run_program: every exception becomes its documented exit code, nothing escapes") {
  const auto code = [](auto thrower) { return run_program("prog", [&]() -> int { thrower(); return 0; }); };
  CHECK(run_program("prog", [] { return 0; }) == 0);
  CHECK(run_program("prog", [] { return static_cast<int>(ExitCode::check_failed); }) == 1);
  CHECK(code([] { fail<ValueError>("--lr: must be finite"); }) == static_cast<int>(ExitCode::bad_input));
  CHECK(code([] { fail<FormatError>("load: truncated"); }) == static_cast<int>(ExitCode::bad_input));
  CHECK(code([] { fail<BusyError>("--out: another run"); }) == static_cast<int>(ExitCode::bad_input));
  CHECK(code([] { fail<NonFiniteError>("train: loss is nan"); }) == static_cast<int>(ExitCode::training_stopped));
  CHECK(code([] { fail<IoError>("save: No space left on device"); }) == static_cast<int>(ExitCode::system_failed));
  CHECK(code([] { throw std::bad_alloc(); }) == static_cast<int>(ExitCode::system_failed));
  CHECK(code([] { throw std::length_error("vector"); }) == static_cast<int>(ExitCode::system_failed));
  CHECK(code([] { throw 42; }) == static_cast<int>(ExitCode::system_failed));
}

namespace {
// A user's model with one missing line: `extra_` is used in forward() but never passed to register_child.
class ForgetfulMlp : public Module<float> {
 public:
  ForgetfulMlp() : rng_(1), hidden_("hidden", {.in = 2, .out = 4}, rng_), extra_("extra", {.in = 4, .out = 2}, rng_) {
    register_child(hidden_);  // register_child(extra_) is missing
  }
  Var<float> forward(Var<float> x) { return extra_.forward(tanh(hidden_.forward(x))); }

 private:
  Rng rng_;
  Linear<float> hidden_, extra_;
};
}  // namespace

TEST_CASE("trainer: a parameter the loss read but the model does not list is an error naming it, before any update") {
  const TensorSource data = classification_data(64, 3);
  ForgetfulMlp model;
  SGD<float> opt(model.parameters(), {.lr = 0.1});
  Trainer trainer(model, opt, data, [&](Tape<float>& t, const TensorBatch& b) -> StepOutput<float> {
    return cross_entropy(model.forward(t.constant(b.features)), b.labels);
  }, {.steps = 5, .batch = 8});
  const Tensor before = model.parameter("hidden.weight").value;
  CHECK_THROWS_WITH_AS(trainer.step(),
                       doctest::Contains("check_registered: the tape read parameter 'extra."), UsageError);
  CHECK_THROWS_WITH_AS(trainer.step(),
                       doctest::Contains("which the model does not list: a layer used in forward() but not registered "
                                         "(register_child) is never trained, saved or zeroed"),
                       UsageError);
  CHECK(model.parameter("hidden.weight").value == before);
  CHECK(trainer.steps_done() == 0);
  // The same check, for a loop written by hand.
  Tape<float> tape;
  (void)model.forward(tape.constant(data.features()));
  CHECK_THROWS_AS(check_registered(tape, model), UsageError);
  Mlp good({});
  Tape<float> fine;
  (void)good.forward(fine.constant(data.features()));
  CHECK_NOTHROW(check_registered(fine, good));
}

TEST_CASE("report: a value measured as NaN prints as nan, and '-' is only the training values before the first step") {
  const auto dir = test::scratch_dir("report", "nan");
  const auto log_path = dir / "out.txt";
  std::FILE* out = std::fopen(log_path.c_str(), "w");
  REQUIRE(out != nullptr);
  {
    Progress progress(out, Progress::Style::lines, 10, "run");
    const double nan = std::numeric_limits<double>::quiet_NaN();
    progress.on_evaluation({.step = 0, .lr = 0.1, .seconds = 0, .values = {{"train_loss", nan}, {"eval_loss", nan}}});
    progress.on_evaluation({.step = 5, .lr = 0.1, .seconds = 1, .values = {{"train_loss", nan}, {"eval_loss", 2.0}}});
  }
  std::fclose(out);
  std::ifstream in(log_path);
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  CHECK(first.find("train_loss -  eval_loss nan") != std::string::npos);
  CHECK(second.find("train_loss nan  eval_loss 2.0000") != std::string::npos);
}
