#pragma once
// Optimizers over a fixed, named list of parameters: SGD (momentum, dampening, Nesterov, weight
// decay), Adam and AdamW, with the arithmetic of torch.optim 1.13 (single-tensor path, no amsgrad),
// checked against it step by step in tests/test_optimizer.cpp; and clip_grad_norm.
//
// A user's optimizer is written with the same public pieces: derive from OptimizerWith<Yours, T, YourOptions>,
// give the constructor its name and its buffers' names, and write a static update() for one range of one
// parameter; a checkpoint saves and resumes it under that name, and `inspect` shows its hyperparameters
// (examples/first_steps/5_user_optimizer.cpp writes Lion that way).
//
// An optimizer reads Parameter::grad and updates Parameter::value. Its hyperparameters are one options
// struct whose fields() list is their one table (core/settings.hpp): the constructor checks it, state()
// saves it, load_state() reads it back strictly, `inspect` prints it, the trainer CLI makes its flags
// from it. The learning rate is one of those fields and lives nowhere else; a schedule attached with
// set_schedule() turns it into each step's rate (ConstantLr when none is attached).
//
// The optimizer's state (hyperparameters, schedule, step count, per-parameter buffers) is keyed by
// parameter name, so a checkpoint can save any model's and a strict load_state() can say exactly what
// does not match. A parameter's buffers are made (zeros) at its first step; after that step() makes no heap
// allocation.

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/autograd/parameter.hpp"
#include "tapegrad/core/enum_names.hpp"
#include "tapegrad/core/hooks.hpp"
#include "tapegrad/core/parallel.hpp"
#include "tapegrad/core/settings.hpp"
#include "tapegrad/core/tensor.hpp"
#include "tapegrad/train/schedule.hpp"

namespace tapegrad {

// The library's own optimizers, by name (make_optimizer, the trainer CLI's --optimizer). An optimizer's
// kind() is a name, not this enum, so that a user's optimizer has one of its own.
enum class OptimizerKind { sgd, adam, adamw };

template <>
struct EnumNames<OptimizerKind> {
  static constexpr std::string_view what = "optimizer";
  static constexpr std::array<EnumName<OptimizerKind>, 3> names = {{
      {OptimizerKind::sgd, "sgd"},
      {OptimizerKind::adam, "adam"},
      {OptimizerKind::adamw, "adamw"},
  }};
};

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;

  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("lr", s.lr, "learning rate", at_least(0));
    field("momentum", s.momentum, "momentum factor (0: plain SGD)", at_least(0));
    field("dampening", s.dampening, "dampening of the momentum", at_least(0));
    field("weight_decay", s.weight_decay, "L2 penalty, added to the gradient", at_least(0));
    field("nesterov", s.nesterov, "Nesterov momentum (needs momentum > 0 and dampening 0)");
  }
  // Nesterov's condition, beside the fields' bounds; ValueError starting "<op>: ".
  void check(std::string_view op) const;
};

// Which parameters Adam's and AdamW's weight decay applies to: every one (torch.optim's single group), or
// the matrices only, parameters of rank 2 or more (weights and embedding tables, not biases or LayerNorms'
// gains and shifts), as nanoGPT and most transformer recipes decay (there, with two parameter groups).
enum class DecayOn { all, matrices };

template <>
struct EnumNames<DecayOn> {
  static constexpr std::string_view what = "weight decay on";
  static constexpr std::array<EnumName<DecayOn>, 2> names = {{
      {DecayOn::all, "all"},
      {DecayOn::matrices, "matrices"},
  }};
};

// Adam's and AdamW's options. weight_decay defaults to 0 for both (torch.optim.AdamW's default is 0.01:
// give it explicitly when porting).
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  // Which parameters the decay applies to. A field whose absence means its default (core/settings.hpp): a
  // state saves it, as "decay_on = matrices", only when it is not `all`, so that one that decays every
  // parameter saves, prints and loads exactly what it did before the choice existed, and settings without
  // it are read as `all` ("decay_on = all", given explicitly, too). load_state sets it from the state, as it
  // sets every hyperparameter.
  DecayOn decay_on = DecayOn::all;

  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("lr", s.lr, "learning rate", at_least(0));
    field("beta1", s.beta1, "decay of the gradient's running mean", at_least_below(0, 1));
    field("beta2", s.beta2, "decay of the squared gradient's running mean", at_least_below(0, 1));
    field("eps", s.eps, "added to the denominator", at_least(0));
    field("weight_decay", s.weight_decay, "Adam: L2 penalty added to the gradient; AdamW: decoupled decay",
          at_least(0));
    field("decay_on", s.decay_on, "which parameters decay (matrices: not biases, not norms)", absent_means_default);
  }
};

// What a checkpoint saves of an optimizer (train/checkpoint/state.hpp writes it as named entries).
template <class T>
struct OptimizerState {
  std::string kind;          // the optimizer's kind(): "sgd", "adam", "adamw", or a user's optimizer's name
  Settings hyperparameters;  // the options' fields, lr included
  ScheduleRecord schedule;   // the schedule that turns lr into each step's rate
  std::int64_t step = 0;     // steps taken
  // parameter name -> buffer name -> buffer (same shape as the parameter). Every parameter has an
  // entry; it is empty until the parameter's first step ("momentum_buffer"; "exp_avg", "exp_avg_sq").
  std::map<std::string, std::map<std::string, TensorT<T>>> per_param;
};

// A range of one parameter's elements, as an optimizer's update() sees it: Eigen arrays of one length over
// its values, its gradient and its buffers, the same elements of each. A range is part of a parameter, not all
// of it: an update is elementwise.
template <class T>
struct ParamSlice {
  const Parameter<T>& parameter;  // the whole parameter: its name and shape
  ArrayMap<T> value;              // what update() changes
  ConstArrayMap<T> grad;
  bool fresh;                        // its buffers were made (zeros) for this step: the parameter's first update
  std::vector<TensorT<T>>& buffers;  // the parameter's, in the order of their names; buffer(k) is this range of one

  // The range of buffer k that `value` is of the parameter's values.
  ArrayMap<T> buffer(std::size_t k) const {
    return {buffers[k].data() + (value.data() - parameter.value.data()), value.size()};
  }
};

// An optimizer, as a training loop and a checkpoint see it; an optimizer is written on OptimizerWith, below.
template <class T>
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter from its grad, at current_lr(). Throws ShapeError (and updates
  // nothing) when a grad or buffer does not have its parameter's shape.
  void step();
  void zero_grad() {
    for (Parameter<T>* p : params_) p->zero_grad();
  }

  // The optimizer's name, which its state, checkpoints and messages carry and a load must match: "sgd",
  // "adam", "adamw", or a user's optimizer's own ("lion").
  std::string_view kind() const { return kind_; }
  // The learning rate: the hyperparameter, which the schedule turns into each step's rate.
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;  // ValueError unless finite and >= 0 and the schedule fits it
  // The rate the next step() uses: schedule().lr_at(lr(), steps_taken()).
  double current_lr() const { return schedule_->lr_at(lr(), step_); }
  // Keeps a copy. ValueError, and no change, for a schedule that does not fit the lr (a cosine whose
  // min_lr is above it).
  void set_schedule(const LrSchedule& schedule);
  const LrSchedule& schedule() const { return *schedule_; }
  std::int64_t steps_taken() const { return step_; }
  const std::vector<Parameter<T>*>& params() const { return params_; }
  // The hyperparameters, as saved: the options' fields in order (one whose absence means its default only
  // when it is not that default).
  virtual Settings hyperparameters() const = 0;
  // "adam (lr 0.01, beta1 0.9, ...), schedule constant"
  std::string describe() const {
    return fmt::format("{} ({}), schedule {}", kind(), describe_settings(hyperparameters()), schedule_->describe());
  }

  OptimizerState<T> state() const;
  // Strict and all-or-nothing: a state of another kind or schedule, a missing or unexpected parameter
  // name, an unknown or missing buffer or hyperparameter, a mis-shaped buffer or an invalid
  // hyperparameter throws (ValueError, NameError, ShapeError) naming every offender, and leaves this
  // optimizer as it was. On success the hyperparameters (lr included), step count and buffers are the
  // state's. `op` starts the message.
  void load_state(const OptimizerState<T>& state, std::string_view op = "load_state");
  // load_state's checks alone: throws as it would, changes nothing (to validate a resume as a whole).
  void check_state(const OptimizerState<T>& state, std::string_view op = "load_state") const;

 protected:
  // `kind` names the optimizer in checkpoints and messages ("sgd", "lion"); buffer_names are the
  // per-parameter buffers it keeps (without '.'), in the order of ParamSlice::buffer(k).
  Optimizer(std::vector<Parameter<T>*> params, std::string kind, std::vector<std::string> buffer_names);

  // One update at rate `lr`; `t` is the number of this step, from 1. Shapes are already checked.
  virtual void update_all(double lr, std::int64_t t) = 0;
  // Checks a state's hyperparameters and throws, changing nothing, if they are not this optimizer's
  // or one is invalid (each message starting "<op>: "); apply_hyperparameters() then sets them.
  virtual void check_hyperparameters(const Settings& h, std::string_view op) const = 0;
  virtual void apply_hyperparameters(const Settings& h) = 0;
  // h with each of the options' fields that settings may leave out (core/settings.hpp) and h does, at its
  // default: load_state compares complete settings, so a field's absence is never a name missing.
  virtual Settings completed(Settings h) const = 0;

  // f(slice) over every parameter's elements in ranges, in one parallel region for the whole update rather
  // than one per parameter (a region is a start and a wait: docs/performance.md); a parameter's buffers are
  // made first (zeros, the only allocation) when `with_buffers` and it has none. The parameters are laid end
  // to end, each starting on a multiple of 16 elements, and cut into pieces on multiples of 16, so a range
  // starts where a pass over the whole parameter has a packet boundary (core/parallel.hpp, parallel_rows):
  // an elementwise update has the same bits at any thread count. f runs on several threads at once, on
  // disjoint ranges.
  template <class F>
  void for_each_slice(bool with_buffers, F&& f) {
    constexpr Index kAlign = 16;
    const std::size_t n = params_.size();
    starts_.resize(n + 1);
    fresh_.resize(n);
    Index total = 0;
    for (std::size_t i = 0; i < n; ++i) {
      starts_[i] = total;
      total += (params_[i]->value.numel() + kAlign - 1) / kAlign * kAlign;
      fresh_[i] = with_buffers && buffers_[i].empty();
      if (fresh_[i]) buffers_[i].assign(buffer_names_.size(), TensorT<T>(params_[i]->value.shape()));
    }
    starts_[n] = total;
    parallel_for(
        total, threads_for_elements(static_cast<double>(total)),
        [&](Index begin, Index end) {
          // The last parameter starting at or before `begin` (those of no elements start where the next does).
          auto i =
              static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin()) - 1;
          for (; i < n && starts_[i] < end; ++i) {
            Parameter<T>& p = *params_[i];
            const Index from = std::max(begin, starts_[i]) - starts_[i];
            const Index to = std::min(end - starts_[i], p.value.numel());
            if (to > from)
              f(ParamSlice<T>{p,
                              {p.value.data() + from, to - from},
                              {p.grad.data() + from, to - from},
                              fresh_[i] != 0,
                              buffers_[i]});
          }
        },
        kAlign);
  }

 private:
  std::vector<Index> starts_;  // for_each_slice: where each parameter starts among all the elements
  std::vector<char> fresh_;    // for_each_slice: per parameter, its buffers were made for this step

  std::vector<Parameter<T>*> params_;
  std::string kind_;
  std::vector<std::string> buffer_names_;
  std::vector<std::vector<TensorT<T>>> buffers_;  // [parameter][buffer], indexed as params_
  std::unique_ptr<LrSchedule> schedule_;
  std::int64_t step_ = 0;
};

// An options struct's optional hook (core/hooks.hpp: declared, then exactly so): a condition between its
// fields (SGD's Nesterov), a ValueError naming `op`.
template <class O>
concept OptionsCheckThemselves = requires {
  &O::check;
}
&&hook_signature<"void check(std::string_view op) const", decltype(&O::check), void (O::*)(std::string_view) const>();

// An optimizer with an options struct O, the one home of its hyperparameters: O has a `double lr` and a
// fields() table (core/settings.hpp), whose bounds are checked, and may have the hook OptionsCheckThemselves.
// The optimizer, Derived (`class Lion final : public OptimizerWith<Lion, float, LionOptions>`), writes one thing,
// `static void update(const O& o, std::int64_t t, ParamSlice<T> s)`, for one range of one parameter at step t
// (from 1), with o's lr this step's rate (the schedule's); it runs on several threads at once, on disjoint
// ranges, and, static, it reads no member (options().lr has no schedule). This class owns the rest: the loop
// over the parameters and its parallel split, the buffers (named at construction, made at a parameter's first
// step), state() and load_state(), so a checkpoint saves and resumes it under its kind.
template <class Derived, class T, class O>
class OptimizerWith : public Optimizer<T> {
 public:
  const O& options() const { return options_; }
  double lr() const override { return options_.lr; }
  void set_lr(double lr) override {
    O changed = options_;
    changed.lr = lr;
    checked(changed, "set_lr");
    (void)this->schedule().lr_at(lr, this->steps_taken());  // and the schedule must still fit it
    options_ = changed;
  }
  Settings hyperparameters() const override { return saved_settings(options_); }
  // The settings a state saves of options o, the one rule for every writer (the format-1 converter's too): the
  // fields in order, less each one that settings may leave out where it holds its default, so that a state
  // saves what it saved before the field existed.
  static Settings saved_settings(const O& o) {
    Settings saved = to_settings(o);
    for (const Setting& d : with_absent_defaults({})) std::erase(saved, d);
    return saved;
  }
  // h with each field that settings may leave out and h does, at its default: a state's settings as read.
  static Settings with_absent_defaults(Settings h) {
    const O defaults{};
    O::fields(defaults, [&](const char* name, const auto& value, const char*, Bounds bounds = {}) {
      if (bounds.may_be_absent && !find_setting(h, name)) h.push_back({name, to_text(value)});
    });
    return h;
  }

 private:
  // Derived's alone: `class Signum : public OptimizerWith<Lion, ...>` (a copy's slip that would run Lion's
  // update) does not compile.
  friend Derived;
  OptimizerWith(std::vector<Parameter<T>*> params, O options, std::string kind, std::vector<std::string> buffer_names)
      : Optimizer<T>(std::move(params), kind, std::move(buffer_names)), options_(checked(std::move(options), kind)) {}

 protected:
  // Whether the parameters need their buffers (made at their first step) under options o; a Derived with a
  // static keeps_buffers of its own hides this one (SGD without momentum keeps none).
  static bool keeps_buffers(const O&) { return true; }

  void check_hyperparameters(const Settings& h, std::string_view op) const final { (void)read(h, op); }
  void apply_hyperparameters(const Settings& h) final { options_ = read(h, "load_state"); }
  Settings completed(Settings h) const final { return with_absent_defaults(std::move(h)); }

  O options_;

 private:
  void update_all(double lr, std::int64_t t) final {
    now_ = options_;  // an assignment: a string field keeps its storage, so a step allocates nothing
    now_.lr = lr;
    // Derived::update is static: it sees this step's options, never options() (whose lr has no schedule).
    static_assert(hook_signature<"static void update(const O& o, std::int64_t t, ParamSlice<T> s)",
                                 decltype(&Derived::update), void (*)(const O&, std::int64_t, ParamSlice<T>)>());
    this->for_each_slice(Derived::keeps_buffers(now_), [&](ParamSlice<T> s) { Derived::update(now_, t, s); });
  }
  static O checked(O options, std::string_view op) {
    check_fields(options, op);
    if constexpr (OptionsCheckThemselves<O>) options.check(op);
    return options;
  }
  // The options that settings hold (a state's hyperparameters), strictly (from_settings): NameError,
  // ValueError starting "<op>: ".
  O read(const Settings& h, std::string_view op) const { return checked(from_settings<O>(h, op), op); }

  O now_;  // this step's options: options_ with the schedule's rate
};

// torch.optim.SGD. Buffer: "momentum_buffer" (only with momentum != 0).
template <class T>
class SGD final : public OptimizerWith<SGD<T>, T, SgdOptions> {
 public:
  explicit SGD(std::vector<Parameter<T>*> params, SgdOptions options = {})
      : OptimizerWith<SGD, T, SgdOptions>(std::move(params), options, "sgd", {"momentum_buffer"}) {}
  static void update(const SgdOptions& o, std::int64_t t, ParamSlice<T> s);
  static bool keeps_buffers(const SgdOptions& o) { return o.momentum != 0; }
};

// torch.optim.Adam (Decoupled false: weight decay added to the gradient, L2 regularisation) and
// torch.optim.AdamW (true: decoupled decay, Loshchilov & Hutter), one update. Buffers: "exp_avg",
// "exp_avg_sq". Hyperparameters: AdamOptions' fields ("decay_on = matrices" when options().decay_on is
// matrices).
template <class T, bool Decoupled>
class AdamOf final : public OptimizerWith<AdamOf<T, Decoupled>, T, AdamOptions> {
 public:
  explicit AdamOf(std::vector<Parameter<T>*> params, AdamOptions options = {})
      : OptimizerWith<AdamOf, T, AdamOptions>(std::move(params), options, Decoupled ? "adamw" : "adam",
                                              {"exp_avg", "exp_avg_sq"}) {}
  DecayOn decay_on() const { return this->options_.decay_on; }
  static void update(const AdamOptions& o, std::int64_t t, ParamSlice<T> s);
};
template <class T>
using Adam = AdamOf<T, false>;
template <class T>
using AdamW = AdamOf<T, true>;

// An optimizer of a named kind from its hyperparameters (as a checkpoint or a command line holds them):
// strict, every field of the kind's options once, adam's and adamw's "decay_on" at most once (absent: all)
// (NameError, ValueError otherwise).
template <class T>
std::unique_ptr<Optimizer<T>> make_optimizer(OptimizerKind kind, std::vector<Parameter<T>*> params,
                                             const Settings& hyperparameters);
// The settings of a kind's options with their defaults, every field ("decay_on = all" too): the starting
// point for overrides.
Settings default_hyperparameters(OptimizerKind kind);

// torch.nn.utils.clip_grad_norm_: the L2 norm of all grads together (computed in double); when
// max_norm / (norm + 1e-6) < 1 every grad is scaled by that factor. Returns the norm before clipping.
// A non-finite norm is returned with the grads untouched, for the caller to report.
// Throws ValueError for a null parameter or a max_norm that is negative or not finite.
// A vector, as Optimizer::params() gives them: clip_grad_norm(opt.params(), 1.0).
template <class T>
double clip_grad_norm(const std::vector<Parameter<T>*>& params, double max_norm);

extern template class Optimizer<float>;
extern template class Optimizer<double>;
// The float bases too: a program compiles its own code at its own level, and their update_all (a step's loop)
// is the library's (a double optimizer, for tests and gradient checks, compiles its loop where it is used).
extern template class OptimizerWith<SGD<float>, float, SgdOptions>;
extern template class OptimizerWith<AdamOf<float, false>, float, AdamOptions>;
extern template class OptimizerWith<AdamOf<float, true>, float, AdamOptions>;
extern template class SGD<float>;
extern template class SGD<double>;
extern template class AdamOf<float, false>;
extern template class AdamOf<double, false>;
extern template class AdamOf<float, true>;
extern template class AdamOf<double, true>;

}  // namespace tapegrad
