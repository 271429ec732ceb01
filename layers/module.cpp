#include "tapegrad/layers/module.hpp"

#include <cxxabi.h>

#include <cstdlib>
#include <typeinfo>

namespace tapegrad {

std::string ModelRecord::describe() const {
  if (empty()) return "not described (weights only)";
  // A record read from a file: its text is escaped, and a forged one's thousands of settings cut short.
  constexpr std::size_t kMaxBytes = 400;
  const std::string settings = describe_settings(config);
  return config.empty() ? escaped(kind) : fmt::format("{} ({})", escaped(kind), escaped(settings, kMaxBytes));
}

template <class T>
Module<T>::Module(std::string name) : name_(std::move(name)), prefix_(name_.empty() ? "" : name_ + ".") {
  if (name_.find('.') != std::string::npos)
    fail<NameError>("module: '{}' is not a valid module name (it must not contain '.')", name_);
}

template <class T>
Parameter<T>& Module<T>::parameter(std::string_view full_name) {
  std::vector<std::string> known;
  for (auto* p : parameters()) {
    if (p->name == full_name) return *p;
    known.push_back(p->name);
  }
  fail<NameError>("parameter: '{}' is not a parameter of {}; it has: {}", escaped(full_name), label(),
                  known.empty() ? std::string("no parameters") : quoted_list(known));
}

template <class T>
Index Module<T>::count_parameters() const {
  Index n = 0;
  for (const auto* p : parameters()) n += p->value.numel();
  return n;
}

template <class T>
std::vector<std::pair<const Parameter<T>*, TorchName>> Module<T>::torch_names_under(const std::string& prefix) const {
  std::vector<std::pair<const Parameter<T>*, TorchName>> out;
  for (std::size_t k = 0; k < own_.size(); ++k) {
    TorchName n = torch_name(own_local_names_[k]);
    n.name = prefix + n.name;
    out.emplace_back(&own_[k], std::move(n));
  }
  for (const auto* c : children_) {
    const std::string name = torch_child_name(c->name_);
    for (auto& entry : c->torch_names_under(name.empty() ? prefix : prefix + name + "."))
      out.push_back(std::move(entry));
  }
  return out;
}

namespace {
// "TransformerBlock" for tapegrad::TransformerBlock<float>, "Mlp" for (anonymous namespace)::Mlp: the
// class's own name, without its namespaces and template arguments.
std::string type_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status),
                                                   std::free);
  const std::string full = status == 0 && demangled ? demangled.get() : type.name();
  std::string name;  // without template arguments, at any depth ("Outer<int>::Inner" -> "Outer::Inner")
  int depth = 0;
  for (char c : full) {
    depth += c == '<' ? 1 : 0;
    if (depth == 0) name += c;
    depth -= c == '>' && depth > 0 ? 1 : 0;
  }
  const std::size_t colons = name.rfind("::");
  return colons == std::string::npos ? name : name.substr(colons + 2);
}
}  // namespace

template <class T>
std::string Module<T>::summary_at(int depth) const {
  const std::string indent(static_cast<std::size_t>(2 * depth), ' ');
  const Index values = count_parameters();
  std::string out = fmt::format("{}{}{}{}\n", indent, name_.empty() ? "" : name_ + ": ", type_name(typeid(*this)),
                                values > 0 ? fmt::format(" ({} values)", values) : "");
  for (std::size_t k = 0; k < own_.size(); ++k)
    out += fmt::format("{}  {}  {}\n", indent, own_local_names_[k], own_[k].value.shape());
  for (const auto* c : children_) out += c->summary_at(depth + 1);
  return out;
}

template <class T>
std::vector<std::string> Module<T>::local_names() const {
  std::vector<std::string> out = own_local_names_;
  for (const auto* c : children_)
    for (auto& name : c->names_in_parent()) out.push_back(std::move(name));
  return out;
}

template <class T>
void Module<T>::check_new_name(std::string_view local_name, const char* what) const {
  if (local_name.empty() || local_name.find('.') != std::string_view::npos)
    fail<NameError>("{}: '{}' is not a valid local name in {} (non-empty, without '.')", what, local_name, label());
  const std::vector<std::string> taken = local_names();
  if (std::find(taken.begin(), taken.end(), local_name) != taken.end())
    fail<NameError>("{}: {} already has a parameter or child named '{}'", what, label(), local_name);
}

template <class T>
Parameter<T>& Module<T>::register_parameter(std::string_view local_name, TensorT<T> value) {
  check_new_name(local_name, "register_parameter");
  own_local_names_.emplace_back(local_name);
  return own_.emplace_back(prefix_ + std::string(local_name), std::move(value));
}

template <class T>
void Module<T>::register_child(Module<T>& child) {
  if (&child == this) fail<UsageError>("register_child: {} cannot be its own child", label());
  if (std::find(children_.begin(), children_.end(), &child) != children_.end())
    fail<NameError>("register_child: {} already has the child '{}'", label(), child.name_);
  for (const auto& name : child.names_in_parent()) check_new_name(name, "register_child");
  child.prefix_names(child_prefix(child));
  child.train(training_);
  child.set_rng(rng_);
  children_.push_back(&child);
}

template <class T>
void Module<T>::prefix_names(const std::string& prefix) {
  prefix_ = prefix;
  for (std::size_t k = 0; k < own_.size(); ++k) own_[k].name = prefix_ + own_local_names_[k];
  for (auto* c : children_) c->prefix_names(child_prefix(*c));
}

template <class T>
void check_registered(const Tape<T>& tape, std::span<const Parameter<T>* const> registered) {
  for (const Parameter<T>* p : tape.parameters_read())
    if (!std::binary_search(registered.begin(), registered.end(), p))
      fail<UsageError>(
          "check_registered: the tape read parameter '{}', which the model does not list: a layer used in "
          "forward() but not registered (register_child) is never trained, saved or zeroed",
          escaped(p->name));
}

template void check_registered(const Tape<float>&, std::span<const Parameter<float>* const>);
template void check_registered(const Tape<double>&, std::span<const Parameter<double>* const>);

template class Module<float>;
template class Module<double>;

}  // namespace tapegrad
