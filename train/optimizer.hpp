#pragma once
// Optimizers over a fixed, named list of parameters: SGD (momentum, dampening, Nesterov, weight
// decay), Adam and AdamW, with the arithmetic of torch.optim 1.13 (single-tensor path, no amsgrad),
// checked against it step by step in tests/test_optimizer.cpp; and clip_grad_norm.
//
// An optimizer reads Parameter::grad and updates Parameter::value. Its state (step count,
// hyperparameters, per-parameter buffers) is keyed by parameter name, so a checkpoint can save it
// and a strict load_state() can say exactly what does not match. Buffers are created on the first
// step; after that step() makes no heap allocation.

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/autograd/parameter.hpp"
#include "tapegrad/core/tensor.hpp"

namespace tapegrad {

// What a checkpoint saves of an optimizer.
template <class T>
struct OptimizerState {
  std::string kind;                                 // "sgd", "adam", "adamw"
  std::map<std::string, double> hyperparameters;    // lr, momentum, beta1, ... (nesterov as 0 or 1)
  std::int64_t step = 0;                            // steps taken
  // parameter name -> buffer name -> buffer (same shape as the parameter). Every parameter has an
  // entry; it is empty until the first step creates the buffers ("momentum_buffer"; "exp_avg",
  // "exp_avg_sq").
  std::map<std::string, std::map<std::string, TensorT<T>>> per_param;
};

template <class T>
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter from its grad. Throws ShapeError (and updates nothing) when a
  // grad or buffer does not have its parameter's shape.
  virtual void step() = 0;
  void zero_grad();

  double lr() const { return lr_; }
  void set_lr(double lr);  // schedules drive it; lr must be finite and >= 0
  std::int64_t steps_taken() const { return step_; }

  virtual std::string kind() const = 0;
  const std::vector<Parameter<T>*>& params() const { return params_; }

  virtual OptimizerState<T> state() const;
  // Strict and all-or-nothing: a state of another kind, a missing or unexpected parameter name, an
  // unknown or missing buffer or hyperparameter, a mis-shaped buffer or an invalid hyperparameter
  // throws (ValueError, NameError, ShapeError) naming every offender, and leaves this optimizer as it
  // was. On success the hyperparameters (lr included), step count and buffers are the state's.
  void load_state(const OptimizerState<T>& state);
  // load_state's checks alone: throws as it would, changes nothing (to validate a resume as a whole).
  void check_state(const OptimizerState<T>& state) const;

 protected:
  // `op` names the optimizer in error messages ("SGD"); buffer_names are the per-parameter buffers
  // the subclass keeps, in the order of buffers(i).
  Optimizer(std::vector<Parameter<T>*> params, double lr, std::string_view op,
            std::vector<std::string> buffer_names);

  // Hyperparameters as saved in the state, lr included.
  virtual std::map<std::string, double> hyperparameters() const = 0;
  // Checks a state's hyperparameters (names already checked) and throws ValueError, changing
  // nothing, if one is invalid; apply_hyperparameters() then sets them, lr excepted.
  virtual void check_hyperparameters(const std::map<std::string, double>& h) const = 0;
  virtual void apply_hyperparameters(const std::map<std::string, double>& h) = 0;

  // Throws ShapeError unless every grad and existing buffer has its parameter's shape.
  void check_shapes(std::string_view op) const;
  // The buffers of parameter i: empty until created (create_buffers: zeros, the only allocation).
  std::vector<TensorT<T>>& buffers(std::size_t i) { return buffers_[i]; }
  void create_buffers(std::size_t i);
  void count_step() { ++step_; }

 private:
  std::vector<Parameter<T>*> params_;
  std::vector<std::string> buffer_names_;
  std::vector<std::vector<TensorT<T>>> buffers_;  // [parameter][buffer], indexed as params_
  double lr_ = 0;
  std::int64_t step_ = 0;
};

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

// torch.optim.SGD. Buffer: "momentum_buffer" (only with momentum != 0).
template <class T>
class SGD final : public Optimizer<T> {
 public:
  explicit SGD(std::vector<Parameter<T>*> params, SgdOptions options = {});
  void step() override;
  std::string kind() const override { return "sgd"; }
  SgdOptions options() const;  // with the current lr

 private:
  std::map<std::string, double> hyperparameters() const override;
  void check_hyperparameters(const std::map<std::string, double>& h) const override;
  void apply_hyperparameters(const std::map<std::string, double>& h) override;

  SgdOptions options_;  // options_.lr unused: Optimizer::lr() is the lr
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
};

// AdamW's options: the same fields with torch's AdamW default weight_decay.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// Adam and AdamW share everything but where weight decay enters. Buffers: "exp_avg", "exp_avg_sq".
template <class T>
class AdamFamily : public Optimizer<T> {
 public:
  void step() override;
  AdamOptions options() const;  // with the current lr

 protected:
  AdamFamily(std::vector<Parameter<T>*> params, AdamOptions options, bool decoupled_decay, std::string_view op);

 private:
  std::map<std::string, double> hyperparameters() const override;
  void check_hyperparameters(const std::map<std::string, double>& h) const override;
  void apply_hyperparameters(const std::map<std::string, double>& h) override;

  AdamOptions options_;   // options_.lr unused: Optimizer::lr() is the lr
  bool decoupled_decay_;  // AdamW: p *= 1 - lr wd, apart from the gradient
};

// torch.optim.Adam: weight decay is added to the gradient (L2 regularisation).
template <class T>
class Adam final : public AdamFamily<T> {
 public:
  explicit Adam(std::vector<Parameter<T>*> params, AdamOptions options = {});
  std::string kind() const override { return "adam"; }
};

// torch.optim.AdamW: decoupled weight decay (Loshchilov & Hutter).
template <class T>
class AdamW final : public AdamFamily<T> {
 public:
  explicit AdamW(std::vector<Parameter<T>*> params, AdamWOptions options = {});
  std::string kind() const override { return "adamw"; }
};

// torch.nn.utils.clip_grad_norm_: the L2 norm of all grads together (computed in double); when
// max_norm / (norm + 1e-6) < 1 every grad is scaled by that factor. Returns the norm before clipping.
// A non-finite norm is returned with the grads untouched, for the caller to report.
// Throws ValueError for a null parameter or a max_norm that is negative or not finite.
template <class T>
double clip_grad_norm(std::span<Parameter<T>* const> params, double max_norm);

// The same for a vector (a span's element type cannot be deduced from one): clip_grad_norm(opt.params(), 1.0).
template <class T>
double clip_grad_norm(const std::vector<Parameter<T>*>& params, double max_norm) {
  return clip_grad_norm(std::span<Parameter<T>* const>(params), max_norm);
}

extern template class Optimizer<float>;
extern template class Optimizer<double>;
extern template class SGD<float>;
extern template class SGD<double>;
extern template class AdamFamily<float>;
extern template class AdamFamily<double>;
extern template class Adam<float>;
extern template class Adam<double>;
extern template class AdamW<float>;
extern template class AdamW<double>;
extern template double clip_grad_norm<float>(std::span<Parameter<float>* const>, double);
extern template double clip_grad_norm<double>(std::span<Parameter<double>* const>, double);

}  // namespace tapegrad
