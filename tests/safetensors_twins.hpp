#pragma once
// tapegrad's twins of the PyTorch modules of tests/data/make_golden_safetensors.py and
// examples/safetensors_to_torch.py, built from the library's layers: a Linear, a learnable SelfAttention
// (nn.MultiheadAttention), a TransformerBlock (nn.TransformerEncoderLayer, norm_first, GELU, causal) and a
// two-block character model (token embedding, learned positions, the stack with its final norm, a head tied
// to the embedding). Each is an unnamed root, so that in the pytorch layout its names are the PyTorch
// module's state_dict keys, and each describes itself (Module::model_record) with the kind and settings
// from which examples/safetensors_to_torch.py builds the PyTorch twin. No doctest here: the fuzz target
// and tests/safetensors_export.cpp use it too.

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "tapegrad/layers/decoder_lm.hpp"
#include "tapegrad/layers/embedding.hpp"
#include "tapegrad/layers/transformer.hpp"

namespace tapegrad::test {

// The cases' sizes, as tests/data/make_golden_safetensors.py has them.
inline constexpr Index kTwinWidth = 8, kTwinHeads = 2, kTwinHidden = 16, kTwinVocab = 11, kTwinMaxLen = 6;
inline constexpr std::string_view kTwinCases[] = {"linear", "attention", "block", "char_model", "decoder_lm",
                                                 "decoder_lm_sinusoidal"};

// A library layer with a record of its own: the file it writes names its PyTorch twin.
template <class Layer>
class Described : public Layer {
 public:
  template <class... Args>
  explicit Described(ModelRecord record, Args&&... args) : Layer(std::forward<Args>(args)...), record_(std::move(record)) {}
  ModelRecord model_record() const override { return record_; }

 private:
  ModelRecord record_;
};

// tokens (B, T) -> embedding + learned positions -> 2 causal pre-norm blocks and a final norm -> logits
// h E^T + b, the names and settings of examples/char_lm's model (kind "char_lm", tied).
template <class T>
class CharTwin : public Module<T> {
 public:
  explicit CharTwin(Rng& rng)
      : embed_("embed", {.vocab = kTwinVocab, .dim = kTwinWidth}, rng),
        pos_("pos", {.kind = PositionEncoding::learned, .max_len = kTwinMaxLen, .d_model = kTwinWidth}, rng),
        stack_("stack", {.n_layers = 2, .block = {.d_model = kTwinWidth, .n_heads = kTwinHeads, .d_ff = kTwinHidden}}, rng),
        head_("head", {.d_model = kTwinWidth, .vocab = kTwinVocab}, embed_) {
    this->register_child(embed_);
    this->register_child(pos_);
    this->register_child(stack_);
    this->register_child(head_);
  }
  Var<T> forward(Tape<T>& tape, const Ids& ids) { return head_.forward(stack_.forward(pos_.forward(embed_.forward(tape, ids)))); }
  ModelRecord model_record() const override {
    return {"char_lm",
            {{"max_len", std::to_string(kTwinMaxLen)}, {"d_model", std::to_string(kTwinWidth)},
             {"n_heads", std::to_string(kTwinHeads)}, {"n_layers", "2"}, {"d_ff", std::to_string(kTwinHidden)},
             {"attention", "learnable"}, {"tie", "true"}}};
  }

 private:
  Embedding<T> embed_;
  Positions<T> pos_;
  TransformerStack<T> stack_;
  LmHead<T> head_;
};

// One case: the model, and its forward on x (B, T, in) or, for the character model, on ids (B, T).
template <class T>
struct Twin {
  std::unique_ptr<Module<T>> model;
  std::function<TensorT<T>(const TensorT<T>& x, const Ids& ids)> forward;
  bool takes_ids = false;
};

template <class T>
Twin<T> make_twin(std::string_view name, Rng& rng) {
  Twin<T> twin;
  const Settings attention_settings = {{"n_heads", std::to_string(kTwinHeads)}, {"causal", "true"}};
  // Runs `forward` on a fresh tape without recording gradients: the value.
  const auto evaluate = [](auto&& forward) {
    Tape<T> tape;
    NoGradGuard<T> no_grad(tape);
    return forward(tape).value();
  };
  if (name == "linear") {
    auto m = std::make_unique<Described<Linear<T>>>(ModelRecord{"linear", {}}, "", LinearOptions{.in = 5, .out = 3}, rng);
    twin.forward = [p = m.get(), evaluate](const TensorT<T>& x, const Ids&) {
      return evaluate([&](Tape<T>& t) { return p->forward(t.constant(x)); });
    };
    twin.model = std::move(m);
  } else if (name == "attention") {
    const SelfAttentionOptions o{.d_model = kTwinWidth, .n_heads = kTwinHeads, .bias = true, .output_projection = true, .causal = true};
    auto m = std::make_unique<Described<SelfAttention<T>>>(ModelRecord{"multihead_attention", attention_settings}, "", o, rng);
    twin.forward = [p = m.get(), evaluate](const TensorT<T>& x, const Ids&) {
      return evaluate([&](Tape<T>& t) { return p->forward(t.constant(x)); });
    };
    twin.model = std::move(m);
  } else if (name == "block") {
    const TransformerBlockOptions o{.d_model = kTwinWidth, .n_heads = kTwinHeads, .d_ff = kTwinHidden};
    auto m = std::make_unique<Described<TransformerBlock<T>>>(ModelRecord{"transformer_encoder_layer", attention_settings}, "", o, rng);
    twin.forward = [p = m.get(), evaluate](const TensorT<T>& x, const Ids&) {
      return evaluate([&](Tape<T>& t) { return p->forward(t.constant(x)); });
    };
    twin.model = std::move(m);
  } else if (name == "char_model") {
    auto m = std::make_unique<CharTwin<T>>(rng);
    twin.forward = [p = m.get(), evaluate](const TensorT<T>&, const Ids& ids) {
      return evaluate([&](Tape<T>& t) { return p->forward(t, ids); });
    };
    twin.takes_ids = true;
    twin.model = std::move(m);
  } else if (name == "decoder_lm" || name == "decoder_lm_sinusoidal") {
    // The library's language model as it describes itself (kind "decoder_lm"): an untied head with a bias
    // and learned positions, or a tied head without one and fixed sinusoidal positions.
    const bool sinusoidal = name == "decoder_lm_sinusoidal";
    auto m = std::make_unique<DecoderLm<T>>(DecoderLmConfig{
        .vocab = kTwinVocab, .context = kTwinMaxLen, .d_model = kTwinWidth, .n_heads = kTwinHeads, .n_layers = 2,
        .d_ff = kTwinHidden, .positions = sinusoidal ? PositionEncoding::sinusoidal : PositionEncoding::learned,
        .tie = sinusoidal, .head_bias = !sinusoidal, .seed = rng.next_u64()});
    twin.forward = [p = m.get(), evaluate](const TensorT<T>&, const Ids& ids) {
      return evaluate([&](Tape<T>& t) { return p->forward(t, ids, nullptr); });
    };
    twin.takes_ids = true;
    twin.model = std::move(m);
  } else {
    fail<NameError>("make_twin: no twin named '{}'", name);
  }
  return twin;
}

}  // namespace tapegrad::test
