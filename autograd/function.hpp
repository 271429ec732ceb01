#pragma once
// Ops, the library's and yours, in the style of torch.autograd.Function. An op is a small struct: its
// name, the names of its inputs, the state its backward rule needs (a struct of its own, `Saved`), a
// forward and, below it, the backward. apply() does the rest: it checks the arguments (live Vars of one
// tape, errors naming the op and the argument), records the node with the caller's source line, runs the
// forward, keeps the saved state with the node's buffers (so a steady-state step allocates nothing),
// commits the node (in anomaly mode checking its value, and later its gradients, naming the op and the
// line), and in backward hands the rule each input's value and gradient.
//
//   // y = x^2;  dx += 2 x dy
//   template <class T>
//   struct Square {
//     static constexpr const char* name = "square";
//     static constexpr const char* inputs[] = {"x"};
//     void forward(Output<T>& out, const TensorT<T>& x) const {
//       out.make(x.shape()).array() = x.array().square();
//     }
//     static void backward(const Output<T>& out, const OpInput<T>& x) {
//       x.grad.add(T(2) * x.value.array() * out.grad().array());
//     }
//   };
//   Var<T> y = apply(Square<T>{}, {x});   // records this line
//
// Gradients accumulate: x.grad.add(g) means d loss / d x += g, so an input used twice (by this op or by
// others) sums its gradients. A gradient that is not needed (a constant, or an input recorded without
// gradients) says so (`if (x.grad)`), and add() then does nothing.
//
// The op's fields are its settings (a scale factor, an epsilon), read by the forward; the backward is a
// static function, so whatever it needs the forward saves: out.saved() is a `Saved`, made once per tape
// node and reused with its buffers step after step. The backward reads it back as the same type; asking
// for state the forward did not save this recording is a UsageError naming the op.
//
// x.grad.add(part, cost) is the same `+=` in element ranges split over the threads, for a large gradient.
// Both check the size of what they are given. (The library's fastest rules write in layouts of their own,
// through detail::pieces below, each write checked against the gradient's shape.)
// out.make(shape) gives zeros, so an element the forward leaves unwritten is 0. An op over any number of
// inputs (concat_cols) is recorded by apply_list.

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>

#include "tapegrad/autograd/tape.hpp"
#include "tapegrad/core/parallel.hpp"

namespace tapegrad {

template <class T>
class InputGrad;

// The Saved of an op that keeps nothing for its backward rule.
struct NoSavedState {};

namespace detail {

template <class Op>
struct SavedOf {
  using type = NoSavedState;
};
template <class Op>
requires requires { typename Op::Saved; }
struct SavedOf<Op> {
  using type = typename Op::Saved;
};

// Whether G is an Eigen expression (Eigen's traits know its kind), and a matrix one rather than an array's.
template <class G>
concept EigenExpression = requires {
  typename Eigen::internal::traits<std::remove_cvref_t<G>>::XprKind;
};
template <class G>
inline constexpr bool kMatrixExpression =
    std::is_same_v<typename Eigen::internal::traits<G>::XprKind, Eigen::MatrixXpr>;

[[noreturn]] void refuse_function(const char* op, const char* what);
[[noreturn]] void refuse_saved(const std::string& op);
[[noreturn]] void refuse_gradient_shape(const char* op, const char* input, Index rows, Index cols, const Shape& shape);
// A ShapeError "{op}: x is {x}; its rows have no entries to {what}" when x's rows are empty (x.cols == 0),
// for the ops that reduce or normalise each row.
void require_row_entries(const char* op, const Shape& x, const char* what);
template <class T>
GradWrite<T> pieces(const InputGrad<T>& g);  // for the library's own rules, below
}  // namespace detail

// An op's output, as its forward makes it and its backward rule reads it. The forward gets an
// Output<T, Saved>&, the backward a const one: only the forward can make the output or save state.
template <class T, class Saved = NoSavedState>
class Output {
 public:
  // The output, of `shape`, zeros, for the forward to fill: an element it does not write is 0 (not last
  // step's value: the node's buffer is reused). Once per forward; a forward that throws, before or after
  // it, leaves the tape as it was. zeros = false skips the pass of zeros, for a forward that writes every
  // element (the library's ops): in anomaly mode the output then holds NaN until written, so an element
  // left unwritten is caught as a non-finite value naming the op.
  TensorT<T>& make(const Shape& shape, bool zeros = true) {
    if (made_) detail::refuse_function(node_.op, "its forward called make(shape) twice");
    node_.value.resize(shape);  // may throw (a huge shape): then not made, and the tape as it was
    made_ = true;
    // What an element the forward does not write reads: 0 when asked, else NaN in anomaly mode, else whatever
    // the reused buffer held.
    if (zeros || tape_.anomaly_detection()) node_.value.fill(zeros ? T(0) : std::numeric_limits<T>::quiet_NaN());
    return node_.value;
  }
  const TensorT<T>& value() const { return node_.value; }  // the forward's value
  const TensorT<T>& grad() const { return node_.grad; }    // d loss / d output, the output's shape
  // Whether the backward rule will run for this node (an input takes a gradient and gradients are
  // enabled): saving state can be skipped when it will not.
  bool needs_grad() const { return node_.requires_grad; }
  // The state the backward rule reads: kept with the node, with its buffers, and reused by the op recorded
  // in this place next step (assign into its buffers, do not replace them, and steady-state steps allocate
  // nothing). The backward reads what the forward saved in this recording (a UsageError naming the op if
  // it saved nothing).
  Saved& saved() requires(!std::is_same_v<Saved, NoSavedState>) { return node_.saved.template hold<Saved>(); }
  Saved& saved() const requires(!std::is_same_v<Saved, NoSavedState>) {
    if (Saved* s = node_.saved.template get<Saved>()) return *s;
    detail::refuse_saved(Tape<T>::describe(node_));
  }
  // The node takes a gradient (its backward rule runs) even if no input does, because the forward read
  // parameters on another tape (activation_checkpoint.hpp's region).
  void takes_grad_regardless() {
    if (!node_.requires_grad && tape_.grad_enabled()) tape_.link_inputs(node_, inputs_);
  }
  Tape<T>& tape() { return tape_; }  // the inputs' tape (the forward's alone: a backward records nothing)

 private:
  friend struct detail::FunctionEngine;
  Output(Tape<T>& tape, Node<T>& node, std::span<const Var<T>> inputs = {})
      : tape_(tape), node_(node), inputs_(inputs) {}
  Tape<T>& tape_;
  Node<T>& node_;
  std::span<const Var<T>> inputs_;  // the forward's (for takes_grad_regardless)
  bool made_ = false;
};

// The gradient of one input, for a backward rule: d loss / d input, added to (+=). The gradient starts
// each backward pass as zero without its buffer being filled (a pass of zeros per tensor saved), so the
// first write of a pass assigns instead of adding; every way of writing below takes care of that.
template <class T>
class InputGrad {
 public:
  // Whether this input takes a gradient (`if (x.grad)`): when not, add() does nothing, and the rule may skip
  // the work.
  explicit operator bool() const { return node_->requires_grad; }

  // gradient += g. g is an Eigen expression of the whole gradient: a column array of every element in
  // order (as TensorT::array() gives), or a (rows, cols) array or matrix of the input's flat() view (a
  // product is evaluated straight into the gradient, without a temporary). Its size is checked
  // (ShapeError naming the op and the input).
  template <class G>
  requires detail::EigenExpression<G>
  void add(const G& g) const {
    if (!node_->requires_grad) return;
    // The buffer first, as the size check reads its shape (a refused size ends the backward pass anyway).
    const GradWrite<T> w = node_->take_grad();
    TensorT<T>& d = *w.tensor;
    // A column array is every element in order; anything else (rows, cols) of the flat view.
    constexpr bool column = !detail::kMatrixExpression<G> && G::ColsAtCompileTime == 1;
    if (g.rows() != (column ? d.numel() : d.shape().flat_rows()) || g.cols() != (column ? 1 : d.cols()))
      detail::refuse_gradient_shape(op_, input_, g.rows(), g.cols(), d.shape());
    if constexpr (column)
      write_grad(d.array(), g, !w.accumulate);
    else if constexpr (detail::kMatrixExpression<G>)
      write_grad(d.flat().noalias(), g, !w.accumulate);
    else
      write_grad(d.flat().array(), g, !w.accumulate);
  }

  // The same in element ranges, split over threads when the gradient is large (`cost`: elementwise
  // operations per element, as core/parallel.hpp counts them): part(from, count) is an array expression
  // of the gradient's elements [from, from + count). Ranges start where a pass over the whole tensor
  // would start its vector packets, so the result is the same bits at any thread count.
  template <class F>
  requires(!detail::EigenExpression<F>) void add(F&& part, double cost = 1) const {
    if (!node_->requires_grad) return;
    const GradWrite<T> w = detail::pieces(*this);
    // part() may throw, and add() refuse a part of another size than `count`, on any thread: parallel_rows
    // carries it out.
    parallel_rows(
        w.tensor->numel(), 1,
        [&](Index from, Index count) { w.add(w.tensor->array().segment(from, count), part(from, count)); }, cost);
  }

 private:
  friend class InputList<T>;
  friend GradWrite<T> detail::pieces<T>(const InputGrad&);
  InputGrad(Node<T>& node, const char* op, const char* input) : node_(&node), op_(op), input_(input) {}
  // (The refusals are given the names, not `this`: an accessor whose address is never taken lives in
  // registers.)
  Node<T>* node_;
  const char* op_;
  const char* input_;
};

// One input of an op, as its backward rule sees it: the forward's value and the gradient accessor.
template <class T>
struct OpInput {
  const TensorT<T>& value;
  InputGrad<T> grad;
};

// The inputs of an op over any number of them (concat_cols), as its forward sees them (ValueList: their
// values) and its backward rule (InputList: values and gradients). Named "<inputs[0]> k" in errors.
template <class T>
class ValueList {
 public:
  std::size_t size() const { return vars_.size(); }
  const TensorT<T>& operator[](std::size_t k) const { return vars_[k].value(); }

 private:
  friend struct detail::FunctionEngine;
  explicit ValueList(std::span<const Var<T>> vars) : vars_(vars) {}
  std::span<const Var<T>> vars_;
};
template <class T>
class InputList {
 public:
  std::size_t size() const { return node_.input_count; }
  OpInput<T> operator[](std::size_t k) const {
    Node<T>& in = tape_.input_node(node_, static_cast<std::uint32_t>(k));
    return {in.val(), InputGrad<T>(in, op_, names_[list_ ? 0 : k])};
  }

 private:
  friend struct detail::FunctionEngine;
  // `names`: the op's inputs, each its own (list false) or names[0] for every one of a list.
  InputList(Tape<T>& tape, Node<T>& node, const char* op, const char* const* names, bool list)
      : tape_(tape), node_(node), op_(op), names_(names), list_(list) {}
  Tape<T>& tape_;
  Node<T>& node_;
  const char* op_;
  const char* const* names_;
  bool list_;
};

namespace detail {

// The pieces of apply() that need the tape's and the contexts' private parts. The op takes N inputs, each
// an argument of its forward and its backward, or (N = 0, apply_list) a list of them as one argument.
struct FunctionEngine {
  template <class Op, class T, std::size_t N>
  static void backward(Tape<T>& tape, Node<T>& node) {
    const Output<T, typename SavedOf<Op>::type> out(tape, node);
    const InputList<T> in(tape, node, Op::name, Op::inputs, N == 0);
    if constexpr (N == 0)
      Op::backward(out, in);
    else
      [&]<std::size_t... I>(std::index_sequence<I...>) { Op::backward(out, in[I]...); }
    (std::make_index_sequence<N>{});
  }

  // The node is recorded first, then the forward runs: until it returns, recording anything else on this
  // tape is refused, naming the op (its node stays: nothing overwritten).
  template <class Op, class T, std::size_t N>
  static Var<T> apply(const Op& op, std::span<const Var<T>> inputs, Where where) {
    constexpr bool list = N == 0;
    if (inputs.empty()) refuse_function(Op::name, "no inputs were given");
    if (inputs[0].tape == nullptr) Tape<T>::refuse(nullptr, inputs[0], Op::name, Op::inputs[0], list ? 0 : -1);
    Tape<T>& tape = *inputs[0].tape;
    for (std::size_t k = 0; k < inputs.size(); ++k)  // a list's inputs are "part 0", "part 1", ...
      tape.check(inputs[k], Op::name, Op::inputs[list ? 0 : k], list ? static_cast<Index>(k) : -1);
    const bool needs_grad =
        tape.grad_enabled() && std::ranges::any_of(inputs, [&](Var<T> v) { return tape.node(v).requires_grad; });
    Output<T, typename SavedOf<Op>::type> out(tape, tape.record(Op::name, inputs, where, needs_grad), inputs);
    tape.forward_open_ = true;
    const AtExit close{[&tape] { tape.forward_open_ = false; }};  // however the forward ends
    if constexpr (list)
      op.forward(out, ValueList<T>(inputs));
    else  // nodes never move: the values outlive the record
      [&]<std::size_t... I>(std::index_sequence<I...>) { op.forward(out, tape.node(inputs[I]).val()...); }
    (std::make_index_sequence<N>{});
    if (!out.made_) refuse_function(Op::name, "its forward returned without calling make(shape)");
    out.node_.backward = &backward<Op, T, N>;
    return tape.commit(out.node_);
  }
};

template <class T, std::size_t>
using Same = T;

// apply()'s checks of an op's declarations, each a compile error saying what is missing: for N inputs, or
// for a list (N = 0, apply_list), whose forward takes a ValueList<T> and whose backward an InputList<T>.
template <class Op, class T, std::size_t N>
void check_op() {
  static_assert(
      requires {
        { Op::name } -> std::convertible_to<const char*>;
      },
      "an op needs its name: static constexpr const char* name = \"...\";");
  static_assert(
      requires { std::size(Op::inputs); },
      "an op needs its inputs' names: static constexpr const char* inputs[] = {\"x\", ...};");
  static_assert(std::size(Op::inputs) == std::max<std::size_t>(N, 1),
                "apply: give the op as many inputs as Op::inputs names (apply_list: Op::inputs names the list's "
                "inputs, once)");
  using ForwardRef = Output<T, typename SavedOf<Op>::type>&;
  using BackwardRef = const Output<T, typename SavedOf<Op>::type>&;
  using Value = std::conditional_t<N == 0, ValueList<T>, TensorT<T>>;
  using Input = std::conditional_t<N == 0, InputList<T>, OpInput<T>>;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    static_assert(
        requires(const Op& op, ForwardRef ctx, const Same<Value, I>&... x) { op.forward(ctx, x...); } &&
            !requires(ForwardRef ctx, const Same<Value, I>&... x) { Op::forward(ctx, x...); },
        "an op needs void forward(Output<T, Saved>&, const TensorT<T>&... one per input) const, "
        "not static (over a list: one const ValueList<T>&)");
    static_assert(
        requires(BackwardRef ctx, const Same<Input, I>&... x) { Op::backward(ctx, x...); },
        "an op needs static void backward(const Output<T, Saved>&, const OpInput<T>&... one per "
        "input) (over a list: one const InputList<T>&)");
  }
  (std::make_index_sequence<std::max<std::size_t>(N, 1)>{});
}

// For the library's own rules that write a gradient in a layout of their own (rows over the threads, a
// product kernel that adds or assigns). pieces(x.grad): where and how to write, piece += g through its
// add() (each write checked against the gradient's shape, naming the op and the input), or `accumulate`
// for a kernel that adds into its output or overwrites it; take each input's once, in the order the rule
// writes them: when one node is two inputs (x * x), the first taken assigns and the second adds.
// pieces(x.grad).zeroed(): the whole gradient, zero where nothing was written this pass, for a rule that
// adds into some elements only (a scatter); nullptr if not needed.
template <class T>
GradWrite<T> pieces(const InputGrad<T>& g) {
  const GradWrite<T> w = g.node_->take_grad();
  return {w.tensor, w.accumulate, g.op_, g.input_};
}

}  // namespace detail

// Records `op` on the inputs' tape: forward now, backward in tape.backward(). `where` is the caller's
// line (an op's own wrapper takes it as a defaulted last argument and passes it on, as the library's do).
template <class Op, class T, std::size_t N>
Var<T> apply(const Op& op, const Var<T> (&inputs)[N], Where where = Where::current()) {
  detail::check_op<Op, T, N>();
  return detail::FunctionEngine::apply<Op, T, N>(op, std::span<const Var<T>>(inputs, N), where);
}

// The same for an op over a list of inputs of any length (at least one): Op::inputs names one, the list's
// ("part": "part 0", "part 1" in errors); its forward takes a ValueList<T>, its backward an InputList<T>.
// (Not an overload of apply: a std::span argument would bring std::apply into the call by lookup.)
template <class Op, class T>
Var<T> apply_list(const Op& op, std::span<const Var<T>> inputs, Where where = Where::current()) {
  detail::check_op<Op, T, 0>();
  return detail::FunctionEngine::apply<Op, T, 0>(op, inputs, where);
}

}  // namespace tapegrad
