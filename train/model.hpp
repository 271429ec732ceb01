#pragma once
// The toy model of the lesson: features -> SelfAttention -> (optional residual) -> linear readout,
// with cross-entropy at the labelled positions. Everything it needs to be rebuilt is in ModelConfig
// (checkpoints store it), and its initial weights follow from config.seed.
//
//   features     onehot: e_token (width vocab)         learned: Embedding (width d_embed)
//   + positions  onehot: concatenated (+ max_len)      learned / sinusoidal: added    none
//   attention    parameter-free or learnable, heads, scale, optional Wo
//   readout      Linear(attention width -> labels), with bias

#include <memory>
#include <string_view>

#include "tapegrad/layers/embedding.hpp"
#include "tapegrad/layers/linear.hpp"
#include "tapegrad/layers/self_attention.hpp"
#include "tapegrad/train/data.hpp"

namespace tapegrad {

enum class FeatureKind { onehot, learned };
std::string_view to_string(FeatureKind f);
FeatureKind parse_feature_kind(std::string_view name);  // NameError listing the choices

struct ModelConfig {
  Index vocab = 0;    // number of token ids
  Index labels = 0;   // number of classes the readout predicts
  Index max_len = 0;  // longest sequence
  FeatureKind features = FeatureKind::onehot;
  Index d_embed = 32;  // width of learned token embeddings
  PositionEncoding positions = PositionEncoding::onehot;
  AttentionMode attention = AttentionMode::learnable;
  Index heads = 1;
  Index d_head = 0;  // 0: d_model / heads
  AttentionScale scale = AttentionScale::inv_sqrt_d_head;
  bool output_projection = false;
  bool residual = false;  // readout sees x + attention(x)
  std::uint64_t seed = 0;  // initial weights

  bool operator==(const ModelConfig&) const = default;
  std::string describe() const;  // one line
};

template <class T>
class ToyModel : public Module<T> {
 public:
  explicit ToyModel(const ModelConfig& config);  // ValueError for a config that does not fit together

  Var<T> logits(Tape<T>& tape, const Batch& batch);  // (B, T, labels)
  // Cross-entropy of logits against batch.targets, the mean over labelled positions.
  Var<T> loss(Tape<T>& tape, const Batch& batch, Var<T>* logits_out = nullptr);

  const ModelConfig& config() const { return config_; }
  Index d_model() const { return d_model_; }
  // How many parameter values a model of this configuration has, from the configuration alone (no
  // allocation), or -1 for a configuration the constructor would refuse. Loaders compare it with
  // what a file holds before they build anything.
  static Index implied_parameter_count(const ModelConfig& c);
  SelfAttention<T>& attention() { return *attention_; }

 private:
  Var<T> features(Tape<T>& tape, const Ids& tokens);

  ModelConfig config_;
  Index d_model_ = 0;
  std::unique_ptr<OneHotTokens<T>> onehot_;
  std::unique_ptr<Embedding<T>> embedding_;
  std::unique_ptr<Positions<T>> positions_;
  std::unique_ptr<SelfAttention<T>> attention_;
  std::unique_ptr<Linear<T>> readout_;
};

extern template class ToyModel<float>;
extern template class ToyModel<double>;

// The model's logits on every example of `data` at once, (N, data.max_len(), labels), without
// recording gradients: predictions to compare or checksum.
Tensor dataset_logits(ToyModel<float>& model, const Dataset& data);

}  // namespace tapegrad
