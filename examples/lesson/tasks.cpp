// The toy tasks. Each generator says what it builds and why its ceiling is what it is. Notation:
// T = 8 positions, M = 16 content tokens; "no-routing information" at the labelled position i is the
// bag of tokens, i's own token and position, and the positions holding i's token (see tasks.hpp).
#include "lesson/tasks.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <span>

#include "tapegrad/autograd/ops.hpp"  // kIgnoreLabel

namespace tapegrad::lesson {
namespace {

constexpr Index kT = 8;
constexpr std::int32_t kM = 16;
constexpr std::int32_t kQuery = kM;       // "?"
constexpr std::int32_t kMarker = kM + 1;  // ">"
constexpr std::int32_t kIndexQuery = kM + 2;  // "?0" .. "?6": ask for the token at position k

const Vocabulary& shared_tokens() {
  static const Vocabulary v = [] {
    std::vector<std::string> names;
    for (char c = 'a'; c < 'a' + kM; ++c) names.emplace_back(1, c);
    names.emplace_back("?");
    names.emplace_back(">");
    for (Index k = 0; k < kT - 1; ++k) names.push_back(fmt::format("?{}", k));
    return Vocabulary(std::move(names));
  }();
  return v;
}

Vocabulary content_labels() {
  std::vector<std::string> names;
  for (char c = 'a'; c < 'a' + kM; ++c) names.emplace_back(1, c);
  return Vocabulary(std::move(names));
}

Vocabulary position_labels(Index n) {
  std::vector<std::string> names;
  for (Index k = 0; k < n; ++k) names.push_back(fmt::format("pos{}", k));
  return Vocabulary(std::move(names));
}

// k distinct values from [0, n), in random order (a partial Fisher-Yates shuffle).
std::vector<std::int32_t> distinct(Rng& rng, std::int32_t n, Index k) {
  std::vector<std::int32_t> pool(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) pool[static_cast<std::size_t>(i)] = i;
  for (std::size_t i = 0; i < static_cast<std::size_t>(k); ++i) {
    const auto j = i + static_cast<std::size_t>(rng.below(pool.size() - i));
    std::swap(pool[i], pool[j]);
  }
  pool.resize(static_cast<std::size_t>(k));
  return pool;
}

Example labelled_at(std::vector<std::int32_t> tokens, Index position, std::int32_t label) {
  Example e{std::move(tokens), std::vector<std::int32_t>(static_cast<std::size_t>(kT), kIgnoreLabel)};
  e.labels[static_cast<std::size_t>(position)] = label;
  return e;
}

constexpr double kOneOfSeven = 1.0 / (kT - 1);

// ---- controls ------------------------------------------------------------------------------------

// Three copies of one content token, four other distinct ones, then "?"; the label at "?" is the
// repeated token. "?" resembles no token, so its attention is spread evenly: the output is the bag of
// tokens, where the majority stands out. Ceiling 1: the bag alone decides it.
class Majority final : public Task {
 public:
  Majority()
      : Task({"majority", "at '?': the token that occurs three times", "pool the whole sequence evenly (a bag of tokens)",
              true, 1.0, "the bag of tokens alone gives the answer"},
             content_labels(), Answer::token) {}
  Example generate(Rng& rng) const override {
    auto picks = distinct(rng, kM, 5);
    std::vector<std::int32_t> seq = {picks[0], picks[0], picks[0], picks[1], picks[2], picks[3], picks[4]};
    rng.shuffle(seq.begin(), seq.end());
    seq.push_back(kQuery);
    return labelled_at(std::move(seq), kT - 1, picks[0]);
  }
};

// Seven distinct content tokens, then a copy of one of them; the label at the copy is the position of
// the original. The copy is most similar to its original, so parameter-free attention finds it.
class FindSame final : public Task {
 public:
  FindSame()
      : Task({"find_same", "at the last token: the position of its earlier copy", "attend to the same token",
              true, 1.0, "the position holding the query's own token is part of what similarity delivers"},
             position_labels(kT - 1), Answer::position) {}
  Example generate(Rng& rng) const override {
    auto seq = distinct(rng, kM, kT - 1);
    const auto k = static_cast<std::int32_t>(rng.below(kT - 1));
    seq.push_back(seq[static_cast<std::size_t>(k)]);
    return labelled_at(std::move(seq), kT - 1, k);
  }
};

// ---- separating tasks ----------------------------------------------------------------------------

// Seven distinct content tokens, then "?"; the label at "?" is the token at position 0. Without routing
// "?" sees the seven tokens as a bag, and the first is any of them: ceiling 1/7.
class FirstToken final : public Task {
 public:
  FirstToken()
      : Task({"first_token", "at '?': the token at position 0", "position 7 attends to position 0", false,
              kOneOfSeven, "the answer is one of the 7 tokens in the bag, each equally likely"},
             content_labels(), Answer::token) {}
  Example generate(Rng& rng) const override {
    auto seq = distinct(rng, kM, kT - 1);
    const auto answer = seq[0];
    seq.push_back(kQuery);
    return labelled_at(std::move(seq), kT - 1, answer);
  }
};

// Seven distinct content tokens, then "?k" for a random k in [0, 7); the label is the token at
// position k. The query token names the position, but similarity cannot turn that into attention: the
// bag again, ceiling 1/7.
class IndexLookup final : public Task {
 public:
  IndexLookup()
      : Task({"index_lookup", "at '?k': the token at position k", "token ?k attends to position k", false, kOneOfSeven,
              "knowing k does not say which of the 7 tokens in the bag sits at k"},
             content_labels(), Answer::token) {}
  Example generate(Rng& rng) const override {
    auto seq = distinct(rng, kM, kT - 1);
    const auto k = static_cast<std::int32_t>(rng.below(kT - 1));
    const auto answer = seq[static_cast<std::size_t>(k)];
    seq.push_back(kIndexQuery + k);
    return labelled_at(std::move(seq), kT - 1, answer);
  }
};

// Seven distinct content tokens with ">" inserted at a random position p in [0, 7); the label at ">" is
// the token right after it. ">" knows its own position p but not which token follows: ceiling 1/7.
class AfterMarker final : public Task {
 public:
  AfterMarker()
      : Task({"after_marker", "at '>': the next token", "each position attends to the next one", false, kOneOfSeven,
              "the marker knows its position, not which of the 7 tokens follows it"},
             content_labels(), Answer::token) {}
  Example generate(Rng& rng) const override {
    auto seq = distinct(rng, kM, kT - 1);
    const auto p = static_cast<std::ptrdiff_t>(rng.below(kT - 1));
    seq.insert(seq.begin() + p, kMarker);
    const auto answer = seq[static_cast<std::size_t>(p + 1)];
    return labelled_at(std::move(seq), p, answer);
  }
};

// Six distinct content tokens and ">" at a random position p in [0, 7), then "?"; the label at "?" is
// p. "?" resembles neither ">" nor anything else, so its attention is even: ceiling 1/7.
class MarkerPosition final : public Task {
 public:
  MarkerPosition()
      : Task({"marker_position", "at '?': the position of '>'", "token ? attends to token >", false, kOneOfSeven,
              "even attention reveals that '>' is present, not where: 7 positions are equally likely"},
             position_labels(kT - 1), Answer::position) {}
  Example generate(Rng& rng) const override {
    auto seq = distinct(rng, kM, kT - 2);
    const auto p = static_cast<std::int32_t>(rng.below(kT - 1));
    seq.insert(seq.begin() + p, kMarker);
    seq.push_back(kQuery);
    return labelled_at(std::move(seq), kT - 1, p);
  }
};

// Content tokens come in 8 fixed pairs (a, b), (c, d), ...: eight distinct tokens holding one complete
// pair (u, w) and one member of six other pairs; the label at u is the position of its partner w.
// u and w are unrelated one-hot vectors, so similarity does not single w out among the 7 other
// positions: ceiling 1/7. Learned Wq Wk^T can hold the pairing.
class PartnerPosition final : public Task {
 public:
  PartnerPosition()
      : Task({"partner_position", "at the first of a pair (a-b, c-d, ...): where its partner is",
              "token u attends to its partner w", false, kOneOfSeven,
              "the partner is at one of the 7 other positions, and nothing similar marks which"},
             position_labels(kT), Answer::position) {}
  Example generate(Rng& rng) const override {
    const auto pairs = distinct(rng, kM / 2, kT - 1);  // pairs[0] is complete, the rest give one member
    std::vector<std::int32_t> seq = {2 * pairs[0], 2 * pairs[0] + 1};
    for (std::size_t k = 1; k < pairs.size(); ++k) seq.push_back(2 * pairs[k] + static_cast<std::int32_t>(rng.below(2)));
    rng.shuffle(seq.begin(), seq.end());
    const auto u = std::find(seq.begin(), seq.end(), 2 * pairs[0]) - seq.begin();
    const auto w = std::find(seq.begin(), seq.end(), 2 * pairs[0] + 1) - seq.begin();
    return labelled_at(std::move(seq), u, static_cast<std::int32_t>(w));
  }
};

// Content tokens form 5 triads (a b c), (d e f), ... (m n o) and p is a filler: eight distinct tokens
// holding one complete triad and five others that complete no triad; the label at each member of the
// triad is the position of the next one in its cycle (a -> b -> c -> a). With one-hot features this is
// like partner_position, three times over: ceiling 1/7. With trainable embeddings the parameter-free
// model learns its own similarity X X^T, but a symmetric score cannot route a 3-cycle: if a's best
// match is b and b's is c, then S(c, b) = S(b, c) > S(b, a) = S(a, b) > S(a, c) = S(c, a), so c's best
// match is b, not a (and the same for least similar). Learned Wq Wk^T is not symmetric.
class Cycle final : public Task {
 public:
  Cycle()
      : Task({"cycle", "at each member of a triad (a b c, d e f, ...): the position of the next (a->b->c->a)",
              "a attends to b, b to c, c to a", false, kOneOfSeven,
              "the next member is at one of the 7 other positions, and nothing similar marks which"},
             position_labels(kT), Answer::position) {}
  Example generate(Rng& rng) const override {
    constexpr std::int32_t triads = 5;
    const auto k = static_cast<std::int32_t>(rng.below(triads));
    std::vector<std::int32_t> others;  // every token outside triad k
    for (std::int32_t t = 0; t < kM; ++t)
      if (t / 3 != k || t >= 3 * triads) others.push_back(t);
    std::vector<std::int32_t> seq;
    for (bool complete = true; complete;) {  // redraw the five extra tokens until they complete no triad
      std::vector<std::int32_t> picks = distinct(rng, static_cast<std::int32_t>(others.size()), kT - 3);
      seq = {3 * k, 3 * k + 1, 3 * k + 2};
      for (auto i : picks) seq.push_back(others[static_cast<std::size_t>(i)]);
      complete = false;
      for (std::int32_t j = 0; j < triads; ++j)
        complete = complete || (j != k && std::count_if(seq.begin(), seq.end(), [&](auto t) { return t / 3 == j && t < 3 * triads; }) == 3);
    }
    rng.shuffle(seq.begin(), seq.end());
    Example e{seq, std::vector<std::int32_t>(static_cast<std::size_t>(kT), kIgnoreLabel)};
    for (std::int32_t m = 0; m < 3; ++m) {
      const auto at = std::find(seq.begin(), seq.end(), 3 * k + m) - seq.begin();
      const auto next = std::find(seq.begin(), seq.end(), 3 * k + (m + 1) % 3) - seq.begin();
      e.labels[static_cast<std::size_t>(at)] = static_cast<std::int32_t>(next);
    }
    return e;
  }
};

// Every task, in the order the demo and task_names() list them; each one's spec holds its name.
template <class C>
std::unique_ptr<Task> create() {
  return std::make_unique<C>();
}
constexpr std::array kTasks = {&create<Majority>,    &create<FindSame>,       &create<FirstToken>,
                               &create<IndexLookup>, &create<AfterMarker>,    &create<MarkerPosition>,
                               &create<PartnerPosition>, &create<Cycle>};

}  // namespace

const Vocabulary& Task::tokens() const { return shared_tokens(); }
Index Task::length() const { return kT; }

std::vector<Index> Task::answer_keys(const Example& e, Index query) const {
  const auto q = static_cast<std::size_t>(query);
  if (query < 0 || q >= e.labels.size() || e.labels[q] == kIgnoreLabel)
    fail<ValueError>("task '{}': position {} of the sequence ({} tokens) has no label", spec_.name, query, e.tokens.size());
  const std::int32_t label = e.labels[q];
  if (answer_ == Answer::position) return {label};
  std::vector<Index> keys;
  for (std::size_t j = 0; j < e.tokens.size(); ++j)
    if (j != q && e.tokens[j] == label) keys.push_back(static_cast<Index>(j));
  return keys;
}

const std::vector<std::string>& task_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (auto create_task : kTasks) out.push_back(create_task()->spec().name);
    return out;
  }();
  return names;
}

std::unique_ptr<Task> make_task(std::string_view name) {
  for (auto create_task : kTasks)
    if (auto task = create_task(); task->spec().name == name) return task;
  fail<NameError>("task: unknown task '{}'; the tasks are {}", name, fmt::join(task_names(), ", "));
}

namespace {

// Attention row `q` of example `n` in weights (N, T, T): the T weights query q gives the keys.
std::span<const float> attention_row(const TensorT<float>& weights, Index n, Index q) {
  const Index t = weights.shape().cols;
  return {weights.data() + (n * t + q) * t, static_cast<std::size_t>(t)};
}

}  // namespace

AttentionUse attention_use(const Task& task, const Dataset& data, const TensorT<float>& weights) {
  const Index t = task.length();
  if (weights.shape() != Shape::batched(data.size(), t, t))
    fail<ShapeError>("attention_use: weights of shape {} for {} sequences of {} tokens (expected {})", weights.shape(),
                     data.size(), t, Shape::batched(data.size(), t, t));
  AttentionUse u;
  Index queries = 0;
  for (Index n = 0; n < data.size(); ++n) {
    const Example& e = data.examples[static_cast<std::size_t>(n)];
    for (Index q = 0; q < static_cast<Index>(e.labels.size()); ++q) {
      if (e.labels[static_cast<std::size_t>(q)] == kIgnoreLabel) continue;
      const auto keys = task.answer_keys(e, q);
      const auto row = attention_row(weights, n, q);
      float on = 0, key_lo = INFINITY, key_hi = -INFINITY, other_lo = INFINITY, other_hi = -INFINITY;
      for (Index j = 0; j < static_cast<Index>(row.size()); ++j) {
        const float w = row[static_cast<std::size_t>(j)];
        if (std::find(keys.begin(), keys.end(), j) != keys.end()) {
          on += w;
          key_lo = std::min(key_lo, w);
          key_hi = std::max(key_hi, w);
        } else {
          other_lo = std::min(other_lo, w);
          other_hi = std::max(other_hi, w);
        }
      }
      const auto top = std::max_element(row.begin(), row.end());
      u.on_answer += on;
      u.most += key_lo > other_hi;
      u.least += key_hi < other_lo;
      u.self += top - row.begin() == q && std::find(keys.begin(), keys.end(), q) == keys.end() &&
                std::count(row.begin(), row.end(), *top) == 1;
      u.peak += *top;
      ++queries;
    }
  }
  const auto n = static_cast<double>(std::max<Index>(queries, 1));
  return {u.on_answer / n, u.most / n, u.least / n, u.self / n, u.peak / n};
}

std::string attention_kind(const AttentionUse& u) {
  if (u.most >= 0.9) return "routes";
  if (u.least >= 0.9) return "away";
  if (u.self >= 0.9) return "self";
  if (u.peak < 0.5) return "spreads";
  return "mixed";
}

TaskSplit make_task_split(const Task& task, Index n_train, Index n_validation, Index n_test, std::uint64_t seed) {
  if (n_train <= 0 || n_validation < 0 || n_test <= 0)
    fail<ValueError>("make_task_split: needs positive train and test sizes, got {}, {}, {}", n_train, n_validation, n_test);
  Rng rng(seed, 0x7461736b);
  std::set<std::vector<std::int32_t>> seen;  // every sequence in any split: the splits never overlap
  auto fill = [&](Dataset& d, const std::string& part, Index n) {
    d.name = fmt::format("{} ({})", task.spec().name, part);
    d.tokens = task.tokens();
    d.labels = task.labels();
    for (Index tries = 0; d.size() < n; ++tries) {
      if (tries > 100 * n) fail<ValueError>("make_task_split: task '{}' has too few distinct sequences for {} examples", task.spec().name, n);
      Example e = task.generate(rng);
      if (seen.insert(e.tokens).second) d.examples.push_back(std::move(e));
    }
  };
  TaskSplit split;
  fill(split.train, "train", n_train);
  fill(split.validation, "validation", n_validation);
  fill(split.test, "test", n_test);
  return split;
}

}  // namespace tapegrad::lesson
