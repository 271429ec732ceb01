#pragma once
// A decoder-only language model from the library's layers, the shape of GPT-2 and nanoGPT:
//
//   tokens (B, T) -> Embedding (B, T, D) + positions (learned or sinusoidal: a (T, D) table added; or none)
//                 -> TransformerStack: N causal pre-norm blocks (attention in either mode, MLP D -> d_ff -> D),
//                    final LayerNorm
//                 -> LmHead: logits (B, T, V), its own (D, V) weight or tied to the embedding (h E^T)
//
// Legend: B sequences in a batch, T positions (at most `context`), D = d_model, V = vocab.
//
// Its Config is all it takes to rebuild it: a checkpoint keeps it as the model's settings (model_record()
// kind "decoder_lm"; model_from_checkpoint<DecoderLm<float>> rebuilds it), and examples/safetensors_to_torch.py
// builds its PyTorch twin from the same settings. A program that keeps a configuration of its own (the
// examples' char_lm and gpt, whose checkpoints name their own kinds) is a ConfiguredLm, below.
//
// It is a LanguageModel (layers/generate.hpp): training, evaluation and sampling run its one forward, the
// last two with gradients off, sampling with or without a KvCache (sample()).
//

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "tapegrad/core/enum_names.hpp"
#include "tapegrad/core/hooks.hpp"
#include "tapegrad/core/settings.hpp"
#include "tapegrad/layers/embedding.hpp"
#include "tapegrad/layers/generate.hpp"
#include "tapegrad/layers/transformer.hpp"

namespace tapegrad {

// How the initial weights are drawn.
//   pytorch: PyTorch's defaults: the embedding N(0, 1), the blocks' and an untied head's weights Xavier-uniform.
//   gpt2:    GPT-2's (nanoGPT's): every weight and embedding N(0, 0.02), and the projections that write
//            into the residual stream (attention's Wo, the MLP's second linear) N(0, 0.02 / sqrt(2 N)).
// Both: biases 0, LayerNorms 1 and 0, learned positions N(0, 0.02).
enum class LmInit { pytorch, gpt2 };
template <>
struct EnumNames<LmInit> {
  static constexpr std::string_view what = "init";
  static constexpr std::array<EnumName<LmInit>, 2> names = {{{LmInit::pytorch, "pytorch"}, {LmInit::gpt2, "gpt2"}}};
};

struct DecoderLmConfig {
  Index vocab = 0;     // tokens 0 .. vocab-1
  Index context = 64;  // positions: the longest sequence
  Index d_model = 128;
  Index n_heads = 4;
  Index n_layers = 4;
  std::optional<Index> d_ff = std::nullopt;  // unset: 4 d_model (a checkpoint writes 0)
  AttentionMode attention = AttentionMode::learnable;
  PositionEncoding positions = PositionEncoding::learned;  // learned, sinusoidal or none
  bool tie = false;                                        // the head reuses the embedding table (h E^T)
  bool head_bias = true;                                   // the head adds a bias (nanoGPT's has none)
  LmInit init = LmInit::pytorch;
  double dropout = 0;
  std::uint64_t seed = 0;  // initial weights
  // Bounded so that no configuration read from a file can ask for absurd memory.
  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("vocab", s.vocab, "tokens in the vocabulary", in_range(1, 1 << 24));
    field("context", s.context, "positions: the longest sequence", in_range(1, 1 << 16));
    transformer_fields(s, field);
    field("positions", s.positions, "positions: learned, sinusoidal or none");
    field("tie", s.tie, "the output head reuses the embedding table");
    field("head_bias", s.head_bias, "the output head adds a bias");
    field("init", s.init, "initial weights: pytorch or gpt2");
  }
  // The transformer's settings (its sizes, attention mode and dropout) and the initial weights' seed, by
  // these names: what a program's own configuration (ConfiguredLm, below) lists with this beside the
  // settings it names itself.
  template <class S, class F>
  static void transformer_fields(S& s, F&& field) {
    field("d_model", s.d_model, "width of the residual stream", in_range(1, 1 << 16));
    field("n_heads", s.n_heads, "attention heads", in_range(1, 1 << 12));
    field("n_layers", s.n_layers, "transformer blocks", in_range(1, 1 << 10));
    field("d_ff", s.d_ff, "hidden width of the MLP (0: 4 d_model)", in_range(1, 1 << 20));
    field("attention", s.attention, "attention: learnable or parameter_free");
    field("dropout", s.dropout, "dropout probability", at_least_below(0, 1));
    field("seed", s.seed, "seed of the initial weights");
  }
};

template <class T>
class DecoderLm : public Module<T>, public LanguageModel<T> {
 public:
  using Config = DecoderLmConfig;
  static constexpr std::string_view kind = "decoder_lm";

  // ValueError naming what does not fit together (check_config), before anything is allocated.
  explicit DecoderLm(const Config& config) : DecoderLm(config, 0x6465636f646572) {}  // stream "decoder"
  // The constructor's checks alone: ValueError naming what does not fit, nothing allocated.
  static void check_config(const Config& config);
  // The parameter values `config` builds, without building it (the formula beside the constructor, which
  // tests/test_decoder_lm.cpp compares with built models of every kind): what a program bounds its memory
  // by before it builds. ValueError as check_config. A built model's is model.count_parameters().
  static Index count_parameters_of(const Config& config);

  // The logits (B, T) -> (B, T, V). Without a cache the tokens are at positions 0 .. T-1; with one
  // (gradients off, B = 1), they are the newest tokens of a sequence, at positions cache->length() on, and
  // every block appends their keys and values.
  Var<T> forward(Tape<T>& tape, const Ids& tokens, KvCache<T>* cache) override;
  Index vocab() const override { return config_.vocab; }
  Index context() const override { return config_.context; }

  // What each head of each block reads in `tokens` (1 to context() of them, at positions 0 on): the
  // attention weights of one forward in evaluation mode with gradients off, [layer][head], each (T, T),
  // row = query, column = key. The model's modes and the layers' keep_weights come back as they were,
  // also when the forward throws.
  std::vector<std::vector<TensorT<T>>> attention_maps(std::span<const std::int32_t> tokens);

  ModelRecord model_record() const override { return {std::string(kind), to_settings(config_)}; }
  const Config& lm_config() const { return config_; }
  Embedding<T>& embedding() { return *embed_; }
  TransformerStack<T>& stack() { return *stack_; }
  LmHead<T>& head() { return *head_; }

 protected:
  // For a model of a program's own: its weights drawn from Rng(config.seed, stream), so that a program
  // that had its own stream before it derived from DecoderLm keeps its initial weights.
  DecoderLm(const Config& config, std::uint64_t stream);

 private:
  Config config_;
  Rng rng_;  // the initial weights', drawn in the constructor
  std::unique_ptr<Embedding<T>> embed_;
  std::unique_ptr<Positions<T>> pos_;
  std::unique_ptr<TransformerStack<T>> stack_;
  std::unique_ptr<LmHead<T>> head_;
};

extern template class DecoderLm<float>;
extern template class DecoderLm<double>;

// A DecoderLm with a configuration of a program's own (examples/char_lm, examples/gpt): C, usually a
// DecoderLmConfig with fields() of its own, names the settings the program keeps (its checkpoints keep them
// as the model's settings, model_record() kind C::kind; DecoderLmConfig::transformer_fields lists the
// transformer's); C::decoder(c) is the DecoderLmConfig they mean, the settings the program does not name
// set by it, and C::stream the initial weights' random stream. A C may declare `void check() const` (the
// hook ChecksItself), a condition between its own fields, run after their bounds and before the model's
// checks. model_from_checkpoint<ConfiguredLm<T, C>> (or of a class derived from it) rebuilds it from a file.
template <class C>
concept ChecksItself =
    (requires { &C::check; }) && hook_signature<"void check() const", decltype(&C::check), void (C::*)() const>();

template <class T, class C>
class ConfiguredLm : public DecoderLm<T> {
 public:
  using Config = C;
  static constexpr std::string_view kind = C::kind;

  // ValueError for a configuration that does not fit together (check_config), before anything is allocated.
  explicit ConfiguredLm(const C& config) : DecoderLm<T>(checked_decoder(config), C::stream), config_(config) {}
  // The constructor's checks alone, nothing allocated.
  static void check_config(const C& config) { DecoderLm<T>::check_config(checked_decoder(config)); }
  static Index count_parameters_of(const C& config) {
    return DecoderLm<T>::count_parameters_of(checked_decoder(config));
  }

  ModelRecord model_record() const override { return {std::string(C::kind), to_settings(config_)}; }
  const C& config() const { return config_; }

 private:
  // The model C means, after C's own checks (its fields' bounds, then its check()), so that a refusal
  // names the program's setting before the model's checks name the model's.
  static DecoderLmConfig checked_decoder(const C& config) {
    check_fields(config, C::kind);
    if constexpr (ChecksItself<C>) config.check();
    return C::decoder(config);
  }

  C config_;
};

}  // namespace tapegrad
