#pragma once
// Module: a layer's named parameters in a fixed order, its children, zero_grad and a train/eval flag.
//
// Names are dotted paths from the root down, every module's name included: a SelfAttention named "attn"
// owns "attn.wq", "attn.wk", ..., and inside a block named "block" they become "block.attn.wq". A module
// named "" adds nothing to the path: a whole model is usually an unnamed root, so that its parameters
// read as in a PyTorch state_dict ("attn.wq", not "model.attn.wq"). A child is named once, by its own
// constructor; register_child takes that name. parameters() lists a module's own parameters in registration order, then
// each child's, in registration order: the fixed, named order optimizers and checkpoints rely on. An unnamed
// child adds nothing to the path either: its parameters read as its parent's own, for a layer built on
// another (an untied LmHead is a Linear: "head.weight", not "head.linear.weight").
//
// Modules own their parameters (in a deque, so their addresses never change: tapes and optimizers
// hold pointers) and refer to their children, which are members of the parent. So a module is
// neither copyable nor movable; build it in place, or hold it by unique_ptr.

#include <algorithm>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tapegrad/autograd/parameter.hpp"
#include "tapegrad/autograd/tape.hpp"
#include "tapegrad/core/escape.hpp"
#include "tapegrad/core/rng.hpp"
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

// Where a parameter lives in PyTorch's state_dict, relative to its module (safetensors' pytorch
// layout, train/checkpoint/safetensors.hpp): its name there, and how tapegrad's value sits in PyTorch's tensor.
struct TorchName {
  std::string name;         // "weight", "in_proj_weight", "out_proj.weight"
  bool transposed = false;  // PyTorch holds the transpose: nn.Linear's weight is (out, in)
  int part = 0;             // the value is row block `part` of `parts` equal blocks of the tensor:
  int parts = 1;            //   nn.MultiheadAttention's in_proj_weight stacks Wq^T, Wk^T, Wv^T
  bool operator==(const TorchName&) const = default;
};

template <class T>
class Module {
 public:
  explicit Module(std::string name = "");
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The module's own name ("attn"); parameters carry the full dotted path.
  const std::string& name() const { return name_; }
  // The dotted path of this module from the root ("blocks.0.attn"), "" for an unnamed root.
  std::string path() const { return prefix_.empty() ? std::string() : prefix_.substr(0, prefix_.size() - 1); }

  // Own parameters in registration order, then each child's (recursively).
  std::vector<Parameter<T>*> parameters() { return parameters_of(*this); }
  std::vector<const Parameter<T>*> parameters() const { return parameters_of(*this); }
  // The parameter with this full dotted name; NameError listing the known names if there is none.
  Parameter<T>& parameter(std::string_view full_name);
  Index count_parameters() const;  // total number of scalars

  // The tree of modules with their parameters' shapes, one line each, children indented under their
  // parent in registration order; a module's line gives its name, its type and how many values it holds:
  //   block: TransformerBlock (600 values)
  //     attn: SelfAttention (288 values)
  //       wq  8x8
  std::string summary() const { return summary_at(0); }

  void zero_grad() {
    for (auto* p : parameters()) p->zero_grad();
  }

  // The model's kind and configuration, which checkpoints store so that the model can be rebuilt from
  // its file (model_from_checkpoint<M>). A model that can be rebuilt overrides it; by default a module
  // describes nothing.
  virtual ModelRecord model_record() const { return {}; }
  // PyTorch's names and layouts, which safetensors files in the pytorch layout use. A layer that has a
  // PyTorch twin overrides these (Linear: "weight", transposed, as nn.Linear's); so may a user's module.
  // torch_name: for one of this module's own parameters, by its local name; by default the same name
  // and layout. torch_child_name: for a child, by its name; by default the same name; "" puts the
  // child's parameters directly in this module (nn.TransformerEncoderLayer holds linear1 and linear2,
  // which tapegrad's block keeps in its FeedForward "ff"). Either may throw ValueError for a layer
  // that has no PyTorch twin.
  virtual TorchName torch_name(std::string_view local_name) const { return {std::string(local_name)}; }
  virtual std::string torch_child_name(std::string_view child_name) const { return std::string(child_name); }
  // Every parameter, in parameters() order, with its full name in PyTorch's state_dict: this module's
  // path as it is ("" for an unnamed root), then each level's torch_child_name and the torch_name.
  std::vector<std::pair<const Parameter<T>*, TorchName>> torch_names() const { return torch_names_under(prefix_); }

  // Training or evaluation mode, set on this module and every child: Dropout drops only in training.
  // The training loop switches it (train for steps, eval for evaluation).
  void train(bool on = true) {
    walk(*this, [on](Module& m) { m.training_ = on; });
  }
  void eval() { train(false); }
  bool training() const { return training_; }
  // The random stream layers draw from while training (dropout masks), set on this module and every
  // child; nullptr (the default) until set. A Trainer sets its own stream, which checkpoints save, so a
  // resumed run draws the same masks; outside a Trainer, set one (and keep it alive) before training.
  void set_rng(Rng* rng) {
    walk(*this, [rng](Module& m) { m.rng_ = rng; });
  }
  Rng* rng() const { return rng_; }

 protected:
  // `local_name` must be unique within this module and contain no '.'.
  Parameter<T>& register_parameter(std::string_view local_name, TensorT<T> value);
  // Registers a member module under its own name (without '.', unique here); its parameters are renamed
  // "<this module's path>.<child name>.<their name>". An unnamed child's are "<this module's path>.<their
  // name>", so its names must be unique among this module's own. The child takes this module's training
  // mode and random stream.
  void register_child(Module<T>& child);
  // register_child for each, in order: register_children(norm, attention, mlp).
  template <class... Children>
  void register_children(Children&... children) {
    (register_child(children), ...);
  }
  // A child held by unique_ptr (one a layer may or may not have: a block's norms): builds an M (its
  // constructor takes the name first) into `slot` and registers it. register_child's refusals.
  template <class M, class... Args>
  M& make_child(std::unique_ptr<M>& slot, Args&&... args) {
    slot = std::make_unique<M>(std::forward<Args>(args)...);
    register_child(*slot);
    return *slot;
  }

 private:
  void check_new_name(std::string_view local_name, const char* what) const;
  // The names of this module's parameters and named children, and of an unnamed child's, in registration order.
  std::vector<std::string> local_names() const;
  // The names this module takes among its parent's: its own, or an unnamed module's local names.
  std::vector<std::string> names_in_parent() const { return name_.empty() ? local_names() : std::vector{name_}; }
  std::string child_prefix(const Module<T>& child) const {
    return child.name_.empty() ? prefix_ : prefix_ + child.name_ + ".";
  }
  std::string summary_at(int depth) const;  // summary(), indented by `depth` levels
  // "module 'attn'", or "the unnamed root module"
  std::string label() const {
    return prefix_.empty() ? std::string("the unnamed root module") : fmt::format("module '{}'", path());
  }
  void prefix_names(const std::string& prefix);
  template <class>
  friend class EvalModeGuard;
  // f(module) for `m`, then for each child's tree in registration order (M: Module<T> or const Module<T>).
  template <class M, class F>
  static void walk(M& m, F&& f) {
    f(m);
    for (Module<T>* c : m.children_) walk(*static_cast<M*>(c), f);
  }
  // parameters(), on a module that is const (M = const Module<T>: its parameters are const) or not.
  template <class M>
  static auto parameters_of(M& module) {
    std::vector<decltype(&module.own_.front())> out;
    walk(module, [&](M& m) {
      for (auto& p : m.own_) out.push_back(&p);
    });
    return out;
  }
  // torch_names() under `prefix`, this module's place in PyTorch's state_dict ("" or "<path>.")
  std::vector<std::pair<const Parameter<T>*, TorchName>> torch_names_under(const std::string& prefix) const;

  std::string name_;
  std::string prefix_;  // "outer.inner." for a nested child, "" at the root
  std::deque<Parameter<T>> own_;
  std::vector<std::string> own_local_names_;
  std::vector<Module<T>*> children_;
  bool training_ = true;
  Rng* rng_ = nullptr;
};

// A numbered list of child modules ("0", "1", ...), as PyTorch's nn.ModuleList: a stack of N blocks
// whose parameters are "blocks.0.attn.wq", "blocks.1.attn.wq", ... It owns its children.
template <class T>
class ModuleList : public Module<T> {
 public:
  explicit ModuleList(std::string name) : Module<T>(std::move(name)) {}
  // Builds an M named by its position (M's constructor takes the name first) and registers it.
  template <class M, class... Args>
  M& emplace(Args&&... args) {
    auto child = std::make_unique<M>(std::to_string(items_.size()), std::forward<Args>(args)...);
    M& ref = *child;
    this->register_child(ref);
    items_.push_back(std::move(child));
    return ref;
  }
  std::size_t size() const { return items_.size(); }
  // Item i; UsageError naming the list, i and its size past the end.
  Module<T>& operator[](std::size_t i) {
    if (i >= items_.size())
      fail<UsageError>("module_list '{}': item {} asked of a list of {}", escaped(this->path()), i, items_.size());
    return *items_[i];
  }
  // Item i as the type it was built as (emplace<M>): blocks.at<TransformerBlock<float>>(1). UsageError
  // naming the list and i when it is another type, or past the end.
  template <class M>
  M& at(std::size_t i) {
    if (auto* item = dynamic_cast<M*>(&(*this)[i])) return *item;
    fail<UsageError>("module_list '{}': item {} is another type than the one asked for", escaped(this->path()), i);
  }

 private:
  std::vector<std::unique_ptr<Module<T>>> items_;
};

// Evaluation mode for a scope: the module and its children in eval mode while the guard lives, then each
// back in the mode it was in (a block the caller had put in eval mode stays there), also when what runs
// between throws (an evaluation pass, sampling, a look at attention maps in the middle of training).
template <class T>
class EvalModeGuard {
 public:
  explicit EvalModeGuard(Module<T>& module) {
    Module<T>::walk(module, [this](Module<T>& m) { modes_.emplace_back(&m, m.training_); });
    module.eval();
  }
  ~EvalModeGuard() {
    for (const auto& [m, training] : modes_) m->training_ = training;
  }
  EvalModeGuard(const EvalModeGuard&) = delete;
  EvalModeGuard& operator=(const EvalModeGuard&) = delete;

 private:
  std::vector<std::pair<Module<T>*, bool>> modes_;  // every module of the tree, with its mode before
};

// UsageError naming the first parameter `tape` read (since its last reset()) that `model` does not list:
// a layer used in forward() but never passed to register_child() trains nothing, is never saved, and its
// gradient is never zeroed. The Trainer calls it every step before backward(); a hand-written loop should
// too. `registered`: model.parameters(), sorted (registered_sorted()), to check many steps without
// allocating.
template <class T>
void check_registered(const Tape<T>& tape, std::span<const Parameter<T>* const> registered);
template <class T>
std::vector<const Parameter<T>*> registered_sorted(const Module<T>& model) {
  std::vector<const Parameter<T>*> out = model.parameters();
  std::sort(out.begin(), out.end());
  return out;
}
template <class T>
void check_registered(const Tape<T>& tape, const Module<T>& model) {
  const auto registered = registered_sorted(model);
  check_registered(tape, std::span<const Parameter<T>* const>(registered));
}

extern template class Module<float>;
extern template class Module<double>;

}  // namespace tapegrad
