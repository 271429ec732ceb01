#pragma once
// Module: a layer's named parameters in a fixed order, its children, zero_grad and a train/eval flag.
//
// Names are dotted paths, as in PyTorch: a SelfAttention registered as child "attn" owns
// "attn.wq", "attn.wk", ... parameters() lists a module's own parameters in registration order, then
// each child's, in registration order: the fixed, named order optimizers and checkpoints rely on.
//
// Modules own their parameters (in a deque, so their addresses never change: tapes and optimizers
// hold pointers) and refer to their children, which are members of the parent. So a module is
// neither copyable nor movable; build it in place, or hold it by unique_ptr.

#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/autograd/parameter.hpp"
#include "tapegrad/core/settings.hpp"

namespace tapegrad {

// What a checkpoint holds about a model besides its weights: the kind of model and the configuration
// that rebuilds it, as the model's own settings (core/settings.hpp). Empty for a module that does not
// describe itself.
struct ModelRecord {
  std::string kind;
  Settings config;
  bool operator==(const ModelRecord&) const = default;
  bool empty() const { return kind.empty() && config.empty(); }
  std::string describe() const;  // "mlp (hidden 16, seed 0)", or "not described (weights only)"
};

template <class T>
class Module {
 public:
  explicit Module(std::string name = "") : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The module's own name ("attn"); parameters carry the full dotted path.
  const std::string& name() const { return name_; }

  // Own parameters in registration order, then each child's (recursively).
  std::vector<Parameter<T>*> parameters();
  std::vector<const Parameter<T>*> parameters() const;
  // The parameter with this full dotted name; NameError listing the known names if there is none.
  Parameter<T>& parameter(std::string_view full_name);
  Index parameter_count() const;  // total number of scalars

  void zero_grad();

  // The model's kind and configuration, which checkpoints store so that the model can be rebuilt from
  // its file (model_from_checkpoint<M>). A model that can be rebuilt overrides it; by default a module
  // describes nothing.
  virtual ModelRecord model_record() const { return {}; }
  // Training or evaluation mode, set on this module and every child (layers with dropout-like
  // behaviour would read it; none does yet, but models and the training loop keep it honest).
  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }

 protected:
  // `local_name` must be unique within this module and contain no '.'.
  Parameter<T>& register_parameter(std::string_view local_name, TensorT<T> value);
  // Registers a member module under `local_name`; its parameters are renamed "local_name.<their name>".
  void register_child(Module<T>& child, std::string_view local_name);

 private:
  void check_new_name(std::string_view local_name, const char* what) const;
  void prefix_names(const std::string& prefix);

  std::string name_;
  std::string prefix_;  // "outer.inner." for a nested child, "" at the root
  std::deque<Parameter<T>> own_;
  std::vector<std::string> own_local_names_;
  std::vector<Module<T>*> children_;
  bool training_ = true;
};

extern template class Module<float>;
extern template class Module<double>;

}  // namespace tapegrad
