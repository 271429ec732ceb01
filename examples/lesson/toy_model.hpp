#pragma once
// The toy model of the lesson, the library's first client: features -> SelfAttention -> (optional
// residual) -> linear readout, with cross-entropy at the labelled positions. It is a Module like any
// user's model: the generic Trainer trains it, checkpoints rebuild it from its ModelConfig (its
// model_record()), and its initial weights follow from config.seed.
//
//   features     onehot: e_token (width vocab)         learned: Embedding (width d_embed)
//   + positions  onehot: concatenated (+ max_len)      learned / sinusoidal: added    none
//   attention    parameter-free or learnable, heads, scale, optional Wo
//   readout      Linear(attention width -> labels), with bias
//
// With more than one layer, an MLP, LayerNorm or dropout, the attention is a stack of pre-norm
// TransformerBlocks (layers/transformer.hpp; not causal, residual by construction, d_head = d_model /
// heads, Wo in the learnable mode) and a final LayerNorm with `layernorm`, then the readout.

#include <array>
#include <memory>
#include <string_view>

#include "tapegrad/core/enum_names.hpp"
#include "tapegrad/core/settings.hpp"
#include "tapegrad/layers/embedding.hpp"
#include "tapegrad/layers/linear.hpp"
#include "tapegrad/layers/self_attention.hpp"
#include "tapegrad/layers/transformer.hpp"
#include "tapegrad/train/data.hpp"
#include "tapegrad/train/data_source.hpp"
#include "tapegrad/train/trainer.hpp"

namespace tapegrad {

namespace lesson {
enum class FeatureKind { onehot, learned };
}  // namespace lesson

template <>
struct EnumNames<lesson::FeatureKind> {
  static constexpr std::string_view what = "features";
  static constexpr std::array<EnumName<lesson::FeatureKind>, 2> names = {{
      {lesson::FeatureKind::onehot, "onehot"},
      {lesson::FeatureKind::learned, "learned"},
  }};
};

namespace lesson {

// Everything a ToyModel needs to be rebuilt: checkpoints hold it as the model's settings.
struct ModelConfig {
  Index vocab = 0;    // number of token ids
  Index labels = 0;   // number of classes the readout predicts
  Index max_len = 0;  // longest sequence
  FeatureKind features = FeatureKind::onehot;
  Index d_embed = 32;  // width of learned token embeddings
  PositionEncoding positions = PositionEncoding::onehot;
  AttentionMode attention = AttentionMode::learnable;
  Index heads = 1;
  std::optional<Index> d_head = std::nullopt;  // unset: d_model / heads (a checkpoint writes 0)
  AttentionScale scale = AttentionScale::inv_sqrt_d_head;
  bool output_projection = false;
  bool residual = false;   // readout sees x + attention(x)
  std::uint64_t seed = 0;  // initial weights
  // Transformer blocks (all at their defaults: the single attention layer above).
  Index layers = 1;
  bool mlp = false;
  bool layernorm = false;
  double dropout = 0;

  // Sizes are bounded (2^24) so that no configuration read from a file can ask for absurd memory.
  template <class S, class F>
  static void fields(S& s, F&& field) {
    constexpr double kMaxSize = 1 << 24;
    field("vocab", s.vocab, "number of token ids", at_least_below(1, kMaxSize));
    field("labels", s.labels, "number of classes", at_least_below(1, kMaxSize));
    field("max_len", s.max_len, "longest sequence", at_least_below(1, kMaxSize));
    field("features", s.features, "token features");
    field("d_embed", s.d_embed, "width of learned token embeddings", at_least_below(1, kMaxSize));
    field("positions", s.positions, "position encoding");
    field("attention", s.attention, "attention mode");
    field("heads", s.heads, "attention heads", at_least_below(1, kMaxSize));
    field("d_head", s.d_head, "width of a head (0: d_model / heads)", at_least_below(1, kMaxSize));
    field("scale", s.scale, "scale of the attention scores");
    field("output_projection", s.output_projection, "Wo after the heads");
    field("residual", s.residual, "readout sees x + attention(x)");
    field("seed", s.seed, "seed of the initial weights");
    field("layers", s.layers, "attention layers (transformer blocks when > 1)", in_range(1, 64));
    field("mlp", s.mlp, "an MLP after each attention (transformer blocks)");
    field("layernorm", s.layernorm, "pre-norm LayerNorms (transformer blocks)");
    field("dropout", s.dropout, "dropout in the blocks while training", at_least_below(0, 1));
  }
  bool operator==(const ModelConfig&) const = default;
  std::string describe() const;  // one line
  // Whether the model is a stack of transformer blocks rather than the single attention layer.
  bool blocks() const { return layers > 1 || mlp || layernorm || dropout > 0; }
  // The single attention layer's record leaves the block fields out (ToyModel::model_record), as files
  // written before they existed do: they are added back with the values that mean "the single
  // attention layer". Called by model_config_from.
  static void complete_settings(Settings& settings);
};

// The widths a configuration implies, from the configuration alone (for a valid one: check_config).
struct ModelWidths {
  Index input;      // of the token features
  Index d_model;    // features and positions: what attention sees
  Index d_head;
  Index attention;  // what attention outputs
};
ModelWidths model_widths(const ModelConfig& config);

template <class T>
class ToyModel : public Module<T> {
 public:
  using Config = ModelConfig;
  static constexpr std::string_view kind = "toy_model";

  explicit ToyModel(const ModelConfig& config);  // ValueError for a config that does not fit together
  // The constructor's checks alone (the fields' bounds, and that the layers fit together): ValueError
  // naming what does not fit, nothing allocated.
  static void check_config(const ModelConfig& config);

  Var<T> logits(Tape<T>& tape, const SequenceBatch& batch);  // (B, T, labels)
  // Cross-entropy of the logits against batch.labels (the mean over labelled positions), with the
  // logits as the output metrics read: what the Trainer's loss function returns.
  StepOutput<T> loss(Tape<T>& tape, const SequenceBatch& batch);

  const ModelConfig& config() const { return config_; }
  ModelRecord model_record() const override;
  Index d_model() const { return d_model_; }
  // How many parameter values a model of this configuration has, from the configuration alone (no
  // allocation); ValueError for a configuration the constructor would refuse. Loaders compare it with
  // what a file holds before they build anything.
  // (A built model's is model.count_parameters().)
  static Index count_parameters_of(const ModelConfig& c);
  // The single attention layer; UsageError for a model of transformer blocks (see stack()).
  SelfAttention<T>& attention();
  // Attention layer k (0-based) of either kind of model.
  SelfAttention<T>& attention(std::size_t k);

 private:
  Var<T> features(Tape<T>& tape, const Ids& tokens);

  ModelConfig config_;
  Index d_model_ = 0;
  std::unique_ptr<OneHotTokens<T>> onehot_;
  std::unique_ptr<Embedding<T>> embedding_;
  std::unique_ptr<Positions<T>> positions_;
  std::unique_ptr<SelfAttention<T>> attention_;
  std::unique_ptr<TransformerStack<T>> stack_;
  std::unique_ptr<Linear<T>> readout_;
};

extern template class ToyModel<float>;
extern template class ToyModel<double>;

// The model's logits on every example of `data` at once, (N, data.max_len(), labels), without
// recording gradients: predictions to compare or checksum.
Tensor dataset_logits(ToyModel<float>& model, const Dataset& data);

}  // namespace lesson
}  // namespace tapegrad
