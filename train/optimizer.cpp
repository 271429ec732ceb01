// Optimizers: the shared bookkeeping (names, state, strict load, the schedule), SGD, Adam/AdamW,
// make_optimizer, clip_grad_norm. Every update is an Eigen array expression over the parameter's own
// storage: no temporaries, so a step allocates nothing once the buffers exist. Scalars are computed in
// double, as torch does in Python, and cast to T once.
#include "tapegrad/train/optimizer.hpp"

#include <cmath>
#include <set>
#include <utility>

#include "tapegrad/core/escape.hpp"

namespace tapegrad {

void SgdOptions::check(std::string_view op) const {
  if (nesterov && (momentum <= 0 || dampening != 0))
    fail<ValueError>("{}: Nesterov momentum needs momentum > 0 and dampening 0, got momentum {} and dampening {}", op,
                     momentum, dampening);
}

// ---------------------------------------------------------------------------------------------
// Optimizer: names, schedule, state, strict load

namespace {
// "<what>: 'a', 'b'" into `problems` for the names of `names` that `others` lacks, in their order, if any.
void only_in(const std::vector<std::string>& names, const std::vector<std::string>& others, std::string_view what,
             std::vector<std::string>& problems) {
  const std::set<std::string_view> known(others.begin(), others.end());
  std::vector<std::string> only;
  for (const std::string& name : names)
    if (!known.contains(name)) only.push_back(name);
  if (!only.empty()) problems.push_back(fmt::format("{}: {}", what, quoted_list(only)));
}
}  // namespace

template <class T>
Optimizer<T>::Optimizer(std::vector<Parameter<T>*> params, std::string kind, std::vector<std::string> buffer_names)
    : params_(std::move(params)),
      kind_(std::move(kind)),
      buffer_names_(std::move(buffer_names)),
      buffers_(params_.size()),
      schedule_(std::make_unique<ConstantLr>()) {
  const std::string_view op = kind_;
  if (kind_.empty()) fail<ValueError>("optimizer: its kind (the name checkpoints save it under) is empty");
  std::set<std::string_view> buffers;
  for (const std::string& b : buffer_names_)
    if (b.empty() || b.find('.') != std::string::npos || !buffers.insert(b).second)
      fail<NameError>("{}: buffer name '{}' is empty, has a '.' or is given twice", op, escaped(b));
  if (params_.empty()) fail<ValueError>("{}: no parameters to optimize", op);
  std::map<std::string_view, std::size_t> seen;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Parameter<T>* p = params_[i];
    if (!p) fail<ValueError>("{}: parameter {} is a null pointer", op, i);
    if (p->name.empty()) fail<NameError>("{}: parameter {} ({}) has an empty name", op, i, p->value.shape());
    const auto [it, inserted] = seen.emplace(p->name, i);
    if (!inserted)
      fail<NameError>("{}: parameter name '{}' is used twice, by parameters {} and {}", op, p->name, it->second, i);
  }
}

template <class T>
void Optimizer<T>::step() {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Parameter<T>& p = *params_[i];
    if (p.grad.shape() != p.value.shape())
      fail<ShapeError>("{} step: '{}' grad is {} but its value is {}", kind_, p.name, p.grad.shape(), p.value.shape());
    for (std::size_t k = 0; k < buffers_[i].size(); ++k)
      if (buffers_[i][k].shape() != p.value.shape())
        fail<ShapeError>("{} step: '{}' {} is {} but its value is {}", kind_, p.name, buffer_names_[k],
                         buffers_[i][k].shape(), p.value.shape());
  }
  update_all(current_lr(), step_ + 1);
  ++step_;
}

template <class T>
void Optimizer<T>::set_schedule(const LrSchedule& schedule) {
  (void)schedule.lr_at(lr(), step_);  // a schedule that does not fit this lr is refused now, not at a later step
  schedule_ = schedule.clone();
}

template <class T>
OptimizerState<T> Optimizer<T>::state() const {
  OptimizerState<T> s;
  s.kind = kind_;
  s.hyperparameters = hyperparameters();
  s.schedule = schedule_->record();
  s.step = step_;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto& entry = s.per_param[params_[i]->name];
    for (std::size_t k = 0; k < buffers_[i].size(); ++k) entry.emplace(buffer_names_[k], buffers_[i][k]);
  }
  return s;
}

template <class T>
void Optimizer<T>::check_state(const OptimizerState<T>& s, std::string_view op) const {
  if (s.kind != kind_)
    fail<ValueError>("{}: the state is from '{}' but this optimizer is '{}'", op, escaped(s.kind), kind_);
  const ScheduleRecord schedule = schedule_->record();
  if (!(s.schedule == schedule))
    fail<ValueError>("{}: the state's schedule is {} but this optimizer's is {}", op, s.schedule.describe(),
                     schedule.describe());

  // Names first, all of them in one message: hyperparameters, parameters, buffers.
  std::vector<std::string> problems, ours, theirs, model, saved;
  // Complete settings: a field whose absence means its default is present on both sides, so a value, not a
  // name, may differ.
  for (const Setting& setting : completed(hyperparameters())) ours.push_back(setting.name);
  for (const Setting& setting : completed(s.hyperparameters)) theirs.push_back(setting.name);
  for (const Parameter<T>* p : params_) model.push_back(p->name);
  for (const auto& entry : s.per_param) saved.push_back(entry.first);
  only_in(ours, theirs, "hyperparameters missing from the state", problems);
  only_in(theirs, ours, fmt::format("hyperparameters unknown to {}", kind_), problems);
  only_in(model, saved, "parameters missing from the state", problems);
  only_in(saved, model, "parameters in the state but not in the model", problems);

  std::vector<std::string> unknown_buffers, missing_buffers, shapes;
  const std::set<std::string_view> known(buffer_names_.begin(), buffer_names_.end());
  for (const Parameter<T>* p : params_) {
    const auto found = s.per_param.find(p->name);
    if (found == s.per_param.end()) continue;
    for (const auto& [buffer, tensor] : found->second)
      if (!known.contains(buffer))
        unknown_buffers.push_back(fmt::format("'{}' {}", p->name, buffer));
      else if (tensor.shape() != p->value.shape())
        shapes.push_back(fmt::format("'{}' {} is {} in the state but {} in the model", p->name, buffer, tensor.shape(),
                                     p->value.shape()));
    // A parameter has all its buffers (it has been stepped) or none.
    const auto has = [&](const std::string& buffer) { return found->second.contains(buffer); };
    for (const auto& buffer : buffer_names_)
      if (std::any_of(buffer_names_.begin(), buffer_names_.end(), has) && !has(buffer))
        missing_buffers.push_back(fmt::format("'{}' {}", p->name, buffer));
  }
  if (!unknown_buffers.empty())
    problems.push_back(fmt::format("buffers unknown to {} (it keeps {}): {}", kind_, fmt::join(buffer_names_, ", "),
                                   fmt::join(unknown_buffers, ", ")));
  if (!missing_buffers.empty())
    problems.push_back(fmt::format("buffers missing from the state: {}", fmt::join(missing_buffers, ", ")));
  if (!problems.empty()) fail<NameError>("{}: {}", op, fmt::join(problems, "; "));

  // Then values and shapes.
  check_hyperparameters(s.hyperparameters, op);
  if (s.step < 0) fail<ValueError>("{}: step must be >= 0, got {}", op, s.step);
  if (!shapes.empty()) fail<ShapeError>("{}: {}", op, fmt::join(shapes, "; "));
}

template <class T>
void Optimizer<T>::load_state(const OptimizerState<T>& s, std::string_view op) {
  check_state(s, op);
  // Everything fits: apply.
  apply_hyperparameters(s.hyperparameters);
  step_ = s.step;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto& entry = s.per_param.at(params_[i]->name);
    buffers_[i].resize(entry.empty() ? 0 : buffer_names_.size());  // none before the parameter's first step
    for (std::size_t k = 0; k < buffers_[i].size(); ++k) buffers_[i][k] = entry.at(buffer_names_[k]);
  }
}

// ---------------------------------------------------------------------------------------------
// SGD

template <class T>
void SGD<T>::update(const SgdOptions& o, std::int64_t, ParamSlice<T> s) {
  const T lr = static_cast<T>(o.lr), momentum = static_cast<T>(o.momentum);
  const T keep = static_cast<T>(1 - o.dampening), weight_decay = static_cast<T>(o.weight_decay);
  auto p = s.value;
  // d_p is an expression (grad or grad + wd p), evaluated where it is used.
  auto update = [&](const auto& d_p) {
    if (o.momentum == 0) {
      p -= lr * d_p;  // p -= lr d_p
      return;
    }
    auto buf = s.buffer(0);
    if (s.fresh)
      buf = d_p;  // first step: buf = d_p (no dampening)
    else
      buf = momentum * buf + keep * d_p;  // buf = momentum buf + (1 - dampening) d_p
    if (o.nesterov)
      p -= lr * (d_p + momentum * buf);  // p -= lr (d_p + momentum buf)
    else
      p -= lr * buf;  // p -= lr buf
  };
  if (o.weight_decay != 0)
    update(s.grad + weight_decay * p);  // d_p = grad + wd p
  else
    update(s.grad);  // d_p = grad (torch skips the addition, so p = inf stays out of it)
}

// ---------------------------------------------------------------------------------------------
// Adam, AdamW

template <class T, bool Decoupled>
void AdamOf<T, Decoupled>::update(const AdamOptions& o, std::int64_t step, ParamSlice<T> s) {
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1 - std::pow(o.beta1, t);  // 1 - beta1^t
  const double bias_correction2 = 1 - std::pow(o.beta2, t);  // 1 - beta2^t
  const T beta1 = static_cast<T>(o.beta1), beta2 = static_cast<T>(o.beta2);
  const T one_minus_beta1 = static_cast<T>(1 - o.beta1), one_minus_beta2 = static_cast<T>(1 - o.beta2);
  const T neg_step_size = static_cast<T>(-(o.lr / bias_correction1));
  const T bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
  const T eps = static_cast<T>(o.eps), weight_decay = static_cast<T>(o.weight_decay);
  const bool decays = o.decay_on == DecayOn::all || s.parameter.value.rank() >= 2;
  auto p = s.value;
  auto m = s.buffer(0), v = s.buffer(1);
  // AdamW: p *= 1 - lr wd (torch does it even for wd = 0: a no-op, so skipping it changes no bit)
  if (Decoupled && decays) p *= static_cast<T>(1 - o.lr * o.weight_decay);
  auto update = [&](const auto& g) {
    m = beta1 * m + one_minus_beta1 * g;        // m = beta1 m + (1 - beta1) g
    v = beta2 * v + (one_minus_beta2 * g) * g;  // v = beta2 v + (1 - beta2) g^2
    // p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
    p += (neg_step_size * m) / (v.sqrt() / bias_correction2_sqrt + eps);
  };
  if (!Decoupled && o.weight_decay != 0 && decays)
    update(s.grad + weight_decay * p);  // Adam: g = grad + wd p
  else
    update(s.grad);
}

// ---------------------------------------------------------------------------------------------
// By name

template <class T>
std::unique_ptr<Optimizer<T>> make_optimizer(OptimizerKind kind, std::vector<Parameter<T>*> params,
                                             const Settings& hyperparameters) {
  const std::string what = fmt::format("optimizer '{}'", to_string(kind));
  switch (kind) {
    case OptimizerKind::sgd:
      return std::make_unique<SGD<T>>(std::move(params), from_settings<SgdOptions>(hyperparameters, what));
    case OptimizerKind::adam:
      return std::make_unique<Adam<T>>(std::move(params), from_settings<AdamOptions>(hyperparameters, what));
    case OptimizerKind::adamw:
      return std::make_unique<AdamW<T>>(std::move(params), from_settings<AdamOptions>(hyperparameters, what));
  }
  fail<NameError>("{}: no such optimizer", what);
}

Settings default_hyperparameters(OptimizerKind kind) {
  return kind == OptimizerKind::sgd ? to_settings(SgdOptions{}) : to_settings(AdamOptions{});
}

// ---------------------------------------------------------------------------------------------
// Gradient clipping

template <class T>
double clip_grad_norm(const std::vector<Parameter<T>*>& params, double max_norm) {
  if (!(std::isfinite(max_norm) && max_norm >= 0))
    fail<ValueError>("clip_grad_norm: max_norm must be finite and >= 0, got {}", max_norm);
  double sum_of_squares = 0;  // in double, whatever T is
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!params[i]) fail<ValueError>("clip_grad_norm: parameter {} is a null pointer", i);
    sum_of_squares += params[i]->grad.array().template cast<double>().square().sum();
  }
  const double norm = std::sqrt(sum_of_squares);  // || concat(grads) ||_2
  if (!std::isfinite(norm)) return norm;
  const double coef = max_norm / (norm + 1e-6);  // torch's clip_coef, applied only when below 1
  if (coef < 1)
    for (Parameter<T>* p : params) p->grad.array() *= static_cast<T>(coef);
  return norm;
}

template class Optimizer<float>;
template class Optimizer<double>;
template class OptimizerWith<SGD<float>, float, SgdOptions>;
template class OptimizerWith<AdamOf<float, false>, float, AdamOptions>;
template class OptimizerWith<AdamOf<float, true>, float, AdamOptions>;
template class SGD<float>;
template class SGD<double>;
template class AdamOf<float, false>;
template class AdamOf<double, false>;
template class AdamOf<float, true>;
template class AdamOf<double, true>;
template std::unique_ptr<Optimizer<float>> make_optimizer(OptimizerKind, std::vector<Parameter<float>*>,
                                                          const Settings&);
template std::unique_ptr<Optimizer<double>> make_optimizer(OptimizerKind, std::vector<Parameter<double>*>,
                                                           const Settings&);
template double clip_grad_norm<float>(const std::vector<Parameter<float>*>&, double);
template double clip_grad_norm<double>(const std::vector<Parameter<double>*>&, double);

}  // namespace tapegrad
