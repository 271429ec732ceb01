#include "catalogue/layer_checks.hpp"

#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/layers/decoder_lm.hpp"
#include "tapegrad/layers/embedding.hpp"
#include "tapegrad/layers/linear.hpp"
#include "tapegrad/layers/dropout.hpp"
#include "tapegrad/layers/normalization.hpp"
#include "tapegrad/layers/self_attention.hpp"
#include "tapegrad/layers/transformer.hpp"

namespace tapegrad {
namespace {

TensorD random(const Shape& s, Rng& rng) {
  TensorD t(s);
  for (double& v : t.span()) v = rng.normal();
  return t;
}

// The padding mask (B, T) of the masked cases: item 1's first key and last two keys are padding, so
// with a causal mask its first query sees nothing at all (a fully blocked row).
std::shared_ptr<Mask> padding(Index batch, Index tokens) {
  auto m = std::make_shared<Mask>(Shape::mat(batch, tokens));
  if (batch > 1) {
    m->at(1, 0) = 1;
    m->at(1, tokens - 1) = 1;
    m->at(1, tokens - 2) = 1;
  }
  return m;
}

LayerCheck attention_case(std::string name, SelfAttentionOptions o, Shape x, bool padded, Rng& rng) {
  auto layer = std::make_shared<SelfAttention<double>>("attn", o, rng);
  std::shared_ptr<Mask> pad = padded ? padding(x.batch, x.rows) : nullptr;
  GradcheckFn f = [layer, pad](Tape<double>&, std::span<const Var<double>> in) { return layer->forward(in[0], pad.get()); };
  return {"SelfAttention", std::move(name), {{"x", random(x, rng)}}, layer, f};
}

// A layer whose forward is x -> module.forward(x), with dropout masks drawn from a stream reset to the
// same state before every call: each evaluation the gradient check makes sees the same mask.
template <class M>
LayerCheck x_case(std::string layer, std::string name, std::shared_ptr<M> m, Shape x, Rng& rng) {
  auto stream = std::make_shared<Rng>(rng.next_u64());
  m->set_rng(stream.get());
  const Rng::State start = stream->state();
  GradcheckFn f = [m, stream, start](Tape<double>&, std::span<const Var<double>> in) {
    stream->set_state(start);
    return m->forward(in[0]);
  };
  return {std::move(layer), std::move(name), {{"x", random(x, rng)}}, m, f};
}

// An embedding and a head tied to it: the table's gradient sums the lookup's and the head's.
struct TiedLm : Module<double> {
  Embedding<double> embed;
  LmHead<double> head;
  TiedLm(Index vocab, Index dim, Rng& rng)
      : embed("embed", {.vocab = vocab, .dim = dim}, rng), head("head", {.d_model = dim, .vocab = vocab}, embed) {
    register_child(embed);
    register_child(head);
  }
};

}  // namespace

std::vector<LayerCheck> layer_checks(std::uint64_t seed) {
  Rng rng(seed, 0x6c61796572);
  std::vector<LayerCheck> checks;

  for (bool bias : {true, false}) {
    auto linear = std::make_shared<Linear<double>>("readout", LinearOptions{.in = 4, .out = 5, .bias = bias}, rng);
    checks.push_back({"Linear", bias ? "batched x (2x3x4), with bias" : "2-D x (3x4), no bias",
                      {{"x", random(bias ? Shape::batched(2, 3, 4) : Shape::mat(3, 4), rng)}}, linear,
                      [linear](Tape<double>&, std::span<const Var<double>> in) { return linear->forward(in[0]); }});
  }

  auto embedding = std::make_shared<Embedding<double>>("embed", EmbeddingOptions{.vocab = 6, .dim = 4}, rng);
  auto ids = std::make_shared<Ids>(Shape::mat(2, 3), std::initializer_list<std::int32_t>{5, 1, 5, 0, 2, 2});
  checks.push_back({"Embedding", "ids (2x3) with repeated ids", {}, embedding,
                    [embedding, ids](Tape<double>& t, std::span<const Var<double>>) { return embedding->forward(t, *ids); }});

  for (auto kind : {PositionEncoding::onehot, PositionEncoding::learned, PositionEncoding::sinusoidal}) {
    auto pos = std::make_shared<Positions<double>>(
        "pos", PositionOptions{.kind = kind, .max_len = 5, .d_model = 4, .init = Initializer::normal(1.0)}, rng);
    checks.push_back({"Positions", fmt::format("{} positions, x (2x3x4), T < max_len", to_string(kind)),
                      {{"x", random(Shape::batched(2, 3, 4), rng)}}, pos,
                      [pos](Tape<double>&, std::span<const Var<double>> in) { return pos->forward(in[0]); }});
  }

  using M = AttentionMode;
  checks.push_back(attention_case("parameter-free, one head", {.mode = M::parameter_free, .d_model = 6},
                                  Shape::batched(2, 4, 6), false, rng));
  checks.push_back(attention_case("parameter-free, 2 heads, causal + padding",
                                  {.mode = M::parameter_free, .d_model = 6, .n_heads = 2, .causal = true},
                                  Shape::batched(2, 5, 6), true, rng));
  checks.push_back(attention_case("learnable, one head", {.mode = M::learnable, .d_model = 5}, Shape::batched(2, 4, 5),
                                  false, rng));
  checks.push_back(attention_case("learnable, 3 heads, biases, Wo, causal + padding",
                                  {.mode = M::learnable, .d_model = 6, .n_heads = 3, .bias = true,
                                   .output_projection = true, .causal = true},
                                  Shape::batched(2, 5, 6), true, rng));
  checks.push_back(attention_case("learnable, 2 heads of d_head 5 != d_model/2, unscaled (note 001)",
                                  {.mode = M::learnable, .d_model = 4, .n_heads = 2, .d_head = 5,
                                   .scale = AttentionScale::none, .init = Initializer::normal(0.3)},
                                  Shape::batched(2, 3, 4), false, rng));
  checks.push_back(attention_case("learnable, scale 1/d_head (note 002), identity + noise init",
                                  {.mode = M::learnable, .d_model = 4, .scale = AttentionScale::inv_d_head,
                                   .init = Initializer::identity_plus_noise(0.2)},
                                  Shape::batched(2, 4, 4), false, rng));
  checks.push_back(x_case("LayerNorm", "rows of 6, x (2x3x6)", std::make_shared<LayerNorm<double>>("norm", 6), Shape::batched(2, 3, 6), rng));
  auto drop = std::make_shared<Dropout<double>>("drop", 0.4);
  checks.push_back(x_case("Dropout", "p 0.4, training mode, x (2x3x4)", drop, Shape::batched(2, 3, 4), rng));
  checks.push_back(x_case("FeedForward", "d 4, hidden 6, x (2x3x4)",
                          std::make_shared<FeedForward<double>>("ff", FeedForwardOptions{.d_model = 4, .d_hidden = 6}, rng),
                          Shape::batched(2, 3, 4), rng));
  using BlockO = TransformerBlockOptions;
  const std::vector<std::pair<std::string, BlockO>> blocks = {
      {"learnable, 2 heads, causal, LN + MLP", {.d_model = 4, .n_heads = 2, .d_ff = 6}},
      {"parameter-free, 2 heads, causal, LN + MLP", {.mode = M::parameter_free, .d_model = 4, .n_heads = 2, .d_ff = 6}},
      {"learnable, not causal, no LN, no MLP", {.d_model = 4, .causal = false, .layernorm = false, .mlp = false}},
      {"learnable, dropout 0.3 in training mode", {.d_model = 4, .n_heads = 2, .d_ff = 6, .dropout = 0.3}},
  };
  for (const auto& [what, o] : blocks)
    checks.push_back(x_case("TransformerBlock", what, std::make_shared<TransformerBlock<double>>("block", o, rng),
                            Shape::batched(2, 3, 4), rng));
  checks.push_back(x_case("TransformerStack", "2 blocks and the final norm",
                          std::make_shared<TransformerStack<double>>(
                              "stack", TransformerStackOptions{.n_layers = 2, .block = {.d_model = 4, .n_heads = 2, .d_ff = 5}}, rng),
                          Shape::batched(2, 3, 4), rng));
  // Blocks 0 and 2 checkpointed (recomputed in backward, their dropout masks replayed), block 1 not.
  checks.push_back(x_case("TransformerStack", "3 blocks, dropout 0.3, checkpointed every 2 (activation checkpointing)",
                          std::make_shared<TransformerStack<double>>(
                              "stack",
                              TransformerStackOptions{.n_layers = 3,
                                                      .block = {.d_model = 4, .n_heads = 2, .d_ff = 6, .dropout = 0.3},
                                                      .checkpoint_every = 2},
                              rng),
                          Shape::batched(2, 3, 4), rng));
  checks.push_back(x_case("LmHead", "own weight, x (2x3x4) -> 5 tokens",
                          std::make_shared<LmHead<double>>("head", LmHeadOptions{.d_model = 4, .vocab = 5}, rng),
                          Shape::batched(2, 3, 4), rng));
  auto tied = std::make_shared<TiedLm>(5, 4, rng);
  auto tied_ids = std::make_shared<Ids>(Shape::mat(2, 3), std::initializer_list<std::int32_t>{4, 1, 4, 0, 2, 3});
  checks.push_back({"LmHead", "tied to the embedding: ids (2x3) -> logits", {}, tied,
                    [tied, tied_ids](Tape<double>& t, std::span<const Var<double>>) {
                      return tied->head.forward(tied->embed.forward(t, *tied_ids));
                    }});
  // The library's language model, from token ids to logits: every parameter, both attention modes, the
  // head tied or not, learned or no positions.
  const std::pair<std::string, DecoderLmConfig> lms[] = {
      {"learnable, learned positions, own head with a bias",
       {.vocab = 5, .context = 4, .d_model = 4, .n_heads = 2, .n_layers = 2, .d_ff = 5, .seed = 3}},
      {"parameter-free, no positions, tied head without a bias (GPT-2's init)",
       {.vocab = 5, .context = 4, .d_model = 4, .n_heads = 2, .n_layers = 1, .d_ff = 3,
        .attention = AttentionMode::parameter_free, .positions = PositionEncoding::none, .tie = true, .head_bias = false,
        .init = LmInit::gpt2, .seed = 4}},
  };
  for (const auto& [what, config] : lms) {
    auto lm = std::make_shared<DecoderLm<double>>(config);
    checks.push_back({"DecoderLm", what, {}, lm, [lm, tied_ids](Tape<double>& t, std::span<const Var<double>>) {
                        return lm->forward(t, *tied_ids, nullptr);
                      }});
  }
  // Non-zero biases and LayerNorm weights away from 1, so their gradients are checked at a generic point.
  for (auto& c : checks)
    for (auto* p : c.module->parameters())
      if (p->name.find("norm") != std::string::npos) p->value = random(p->value.shape(), rng);
  for (auto& c : checks)
    for (auto* p : c.module->parameters())
      if (p->name.find(".b") != std::string::npos && p->value.rank() == 1) p->value = random(p->value.shape(), rng);
  return checks;
}

}  // namespace tapegrad
