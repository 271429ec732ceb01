// First steps, 6: a language model of your own that generates through a cache of keys and values. Its
// blocks are yours (RMSNorm, pre-norm attention and a SwiGLU MLP, written with the operators on Var); the
// library's sampler runs the model's own forward, the one training runs, and for generation each block does
// one thing: it passes the cache on to its attention. The program trains the model by hand on a short text, then
// samples the same characters through the cache and by recomputing the whole window for each, and checks
// that they agree. It includes the installed umbrella header and, for its main() and exit codes, program
// support (tapegrad::program); ctest builds it against the installed package too (tests/downstream).
//
//   build/examples/custom_lm      # the loss as it trains, then the samples; exit 1 if they differ
#include <tapegrad/tapegrad.hpp>
#include <tapegrad/train/program/run_program.hpp>

#include <string>
#include <string_view>
#include <vector>

using namespace tapegrad;

namespace {

constexpr std::string_view kText =
    "the quick brown fox jumps over the lazy dog. a lazy dog sleeps in the sun. the quick fox runs away. ";

// [readme:lm]
// RMSNorm (Zhang and Sennrich, 2019), written with the operators on Var: each row of x over its root mean
// square, times a learned gain per column ("<name>.gain", ones at first). Its gradient is theirs.
template <class T>
struct RmsNorm : Module<T> {
  Parameter<T>& gain;
  RmsNorm(std::string name, Index d)
      : Module<T>(std::move(name)), gain(this->register_parameter("gain", TensorT<T>(Shape::vec(d), T(1)))) {}
  Var<T> forward(Var<T> x) { return x / sqrt(row_mean(x * x) + 1e-6) * gain; }
};

// A pre-norm block: x + attention(norm1(x)), then x + down(silu(gate(h)) * up(h)) with h = norm2(x).
template <class T>
struct Block : Module<T> {
  RmsNorm<T> norm1, norm2;
  SelfAttention<T> attention;
  Linear<T> gate, up, down;

  Block(std::string name, Index d, Rng& rng)
      : Module<T>(std::move(name)), norm1("norm1", d), norm2("norm2", d),
        attention("attention", {.d_model = d, .n_heads = 2, .output_projection = true, .causal = true}, rng),
        gate("gate", {.in = d, .out = 2 * d}, rng), up("up", {.in = d, .out = 2 * d}, rng),
        down("down", {.in = 2 * d, .out = d}, rng) {
    this->register_children(norm1, norm2, attention, gate, up, down);
  }
  // x (B, T, d); with a cache (generation) the newest tokens of one sequence, passed on to the attention.
  Var<T> forward(Var<T> x, KvCache<T>* cache) {
    x = x + attention.forward(norm1.forward(x), nullptr, cache);
    const Var<T> h = norm2.forward(x);
    return x + down.forward(silu(gate.forward(h)) * up.forward(h));
  }
};

// tokens (B, T) -> logits (B, T, vocab). A LanguageModel: its vocabulary, its context and its forward,
// which sample() runs with gradients off, with or without a cache.
template <class T>
struct CharLm : Module<T>, LanguageModel<T> {
  static constexpr Index kVocab = 128, kWidth = 32, kContext = 32;  // bytes, model width, positions
  Rng rng{1};  // the initial weights
  Embedding<T> embed{"embed", {.vocab = kVocab, .dim = kWidth}, rng};
  Positions<T> positions{"positions", {.kind = PositionEncoding::learned, .max_len = kContext, .d_model = kWidth}, rng};
  Block<T> block0{"block0", kWidth, rng}, block1{"block1", kWidth, rng};
  Linear<T> head{"head", {.in = kWidth, .out = kVocab}, rng};  // (B, T, width) -> logits (B, T, vocab)

  CharLm() { this->register_children(embed, positions, block0, block1, head); }
  Var<T> forward(Tape<T>& tape, const Ids& tokens, KvCache<T>* cache) override {
    Var<T> x = positions.forward(embed.forward(tape, tokens), cache);  // at the positions the cache holds on
    x = block0.forward(x, cache);
    x = block1.forward(x, cache);
    return head.forward(x);
  }
  Index vocab() const override { return kVocab; }
  Index context() const override { return kContext; }
};
// [readme:lm-end]

// Trains by hand (as 1_minimal_loop.cpp): batches of windows of the text, each token predicting the next.
void train(CharLm<float>& model) {
  constexpr Index kBatch = 16, kT = CharLm<float>::kContext, kSteps = 400;
  Adam<float> optimizer(model.parameters(), {.lr = 0.01});
  Rng windows(2);
  Ids x(Shape::mat(kBatch, kT)), y(Shape::mat(kBatch, kT));
  Tape<float> tape;
  for (Index step = 1; step <= kSteps; ++step) {
    for (Index b = 0; b < kBatch; ++b) {
      const auto start = static_cast<Index>(windows.below(kText.size() - kT));
      for (Index t = 0; t < kT; ++t) {
        x.at(b, t) = kText[static_cast<std::size_t>(start + t)];
        y.at(b, t) = kText[static_cast<std::size_t>(start + t + 1)];
      }
    }
    tape.reset();
    Var<float> loss = cross_entropy(model.forward(tape, x, nullptr), y);
    check_registered(tape, model);  // every parameter the forward read (the norms' gains too) is the optimizer's
    tape.backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    if (step % 100 == 0) fmt::print("step {}: loss {:.4f}\n", step, loss.value()[0]);
  }
}

std::string text_of(const std::vector<std::int32_t>& tokens) { return {tokens.begin(), tokens.end()}; }

// [readme:sample]
// 96 characters after "the ", drawn through the cache and by recomputing the whole window for each (the
// sampler reads the model in evaluation mode: dropout, where a model has it, off).
bool same_both_ways(CharLm<float>& model) {
  const std::vector<std::int32_t> prompt = {'t', 'h', 'e', ' '};
  const auto cached = sample(model, prompt, {.count = 96, .seed = 3, .cache = true});
  const auto recomputed = sample(model, prompt, {.count = 96, .seed = 3, .cache = false});
  fmt::print("sampled through the cache: the {}\nrecomputing each window:   the {}\n", text_of(cached),
             text_of(recomputed));
  return cached == recomputed;
}
// [readme:sample-end]

}  // namespace

int main(int argc, char** argv) {
  return run_program("custom_lm", [&] {
    if (argc > 1) fail<ValueError>("takes no arguments, got '{}'", escaped(argv[1]));
    CharLm<float> model;
    train(model);
    const bool same = same_both_ways(model);
    fmt::print("the two samples {}\n", same ? "are the same" : "differ");
    return same ? 0 : 1;
  });
}
