#pragma once
// The tape: a Wengert list. Every op appends one node (its value, its inputs, its backward rule) in
// creation order, which is already a topological order, so backward() is a reverse loop: no
// recursion, no graph of shared pointers. reset() forgets the nodes but keeps their buffers, so a
// training step that records the same ops every time allocates nothing once it has run once.
//
//   Tape<float> tape;
//   Var<float> x = tape.constant(features);            // (B, T, D)
//   Var<float> y = matmul(x, tape.param(w));           // (B, T, D) x (D, V) -> (B, T, V)
//   Var<float> loss = cross_entropy(y, targets);
//   tape.backward(loss);                               // adds into w.grad
//   tape.reset();                                      // next step reuses every buffer
//
// Every op, the library's and yours, is written one way: a small struct with a forward and a backward
// rule, recorded by apply() (autograd/function.hpp). This file holds what apply() records into.
//
// A Var is a small handle (tape, index, generation), 16 bytes so that it passes in registers. Using one
// with another tape, or after the reset() of its tape, throws UsageError instead of reading some other
// node's value. The generation has 40 bits, the index 24: a tape holds up to 2^24 (16.7 million) nodes
// per recording and can be reset 2^40 - 1 times (a year of steps at 30 microseconds each); past either
// limit it refuses with a UsageError rather than wrap and take a stale Var for a live one. A Var must
// not outlive its tape. A tape is walked back once per recording:
// backward() again before reset() is a UsageError, as it would add every parameter's gradient twice.
//
// A tape belongs to one thread at a time: the thread that records its first node after a reset() owns
// it until the next reset(). Another thread that records on it or walks it back meanwhile gets a
// UsageError naming the tape (two threads at once would corrupt it); one tape per thread is the rule
// (a Trainer's tapes are its own). Handing a tape to another thread between steps, after reset(), is fine.
//
// Reading order: Var, Node's first block, and Tape's first part (the leaves, backward, reset, and how an
// op is recorded: record() and commit()) are the idea; tape.cpp opens with the walk. The parts marked
// "devices" (leaves read in place, gradients that start without being zeroed or go back to a pool, the
// chunked node store, the thread check) are for speed and memory; a first reading may skip them.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tapegrad/autograd/parameter.hpp"
#include "tapegrad/autograd/saved_state.hpp"
#include "tapegrad/core/tensor.hpp"

namespace tapegrad {

// The source line that recorded an op, for errors and anomaly reports; ops take it as a defaulted
// last argument, so it is the caller's line. (std::source_location would do, but clang 14 cannot
// compile libstdc++ 12's; these builtins work in GCC and clang alike.)
struct Where {
  const char* file = "";
  unsigned line = 0;
  static constexpr Where current(const char* file_ = __builtin_FILE(), unsigned line_ = __builtin_LINE()) noexcept {
    return {file_, line_};
  }
  // The file's last two path components, "autograd/ops_matmul.cpp", not the build machine's absolute path.
  std::string_view short_file() const noexcept {
    const std::string_view path(file);
    const auto slash = path.rfind('/');
    if (slash == std::string_view::npos || slash == 0) return path;
    const auto before = path.rfind('/', slash - 1);
    return before == std::string_view::npos ? path : path.substr(before + 1);
  }
};

template <class T>
class Tape;
template <class T, class Saved>
class Output;
template <class T>
class InputList;
template <class T>
struct GradWrite;
namespace detail {
struct FunctionEngine;
}

// The limits of Var's fields (see above).
inline constexpr std::size_t kMaxTapeNodes = std::size_t{1} << 24;
inline constexpr std::uint64_t kMaxTapeGeneration = (std::uint64_t{1} << 40) - 1;

template <class T>
struct Var {
  Tape<T>* tape = nullptr;
  std::uint64_t index : 24 = 0;
  std::uint64_t generation : 40 = 0;

  const TensorT<T>& value() const { return Tape<T>::value(*this); }  // the recorded value
  const TensorT<T>& grad() const { return Tape<T>::grad(*this); }    // d loss / d value, after backward()
  const Shape& shape() const { return value().shape(); }
};

template <class T>
struct Node {
  // A backward rule reads node.grad (d loss / d output) and adds into its inputs' gradients.
  using BackwardFn = void (*)(Tape<T>& tape, Node<T>& node);

  const char* op = "";                      // the op's name ("matmul"), for errors and pictures
  Where where;                              // the source line that recorded it
  TensorT<T> value;                         // the op's output (a leaf read in place has its value elsewhere: val())
  TensorT<T> grad;                          // d loss / d value, filled by backward()
  std::uint32_t first_input = 0;            // its inputs: input_count node indices from first_input in the
  std::uint32_t input_count = 0;            //   tape's list of inputs (Tape::inputs_of)
  BackwardFn backward = nullptr;            // adds d loss / d input into each input's gradient, from grad
  SavedState saved;                         // what the forward kept for the backward rule (a struct of the op's)
  bool requires_grad = false;               // some input takes a gradient, and gradients were on: backward runs
  const Parameter<T>* parameter = nullptr;  // the parameter this leaf stands for (Tape::param)

  const TensorT<T>& val() const { return *value_at; }

  // ---- devices (skip on a first reading) ----
  // True from the start of a backward pass until the first rule writes `grad`: the gradient is zero
  // without the buffer having been filled with zeros.
  bool grad_fresh = false;
  // Where its value and its gradient live: its own `value`, `grad` and `grad_fresh`, or, for a leaf that reads
  // its value where it lives instead of holding a copy (a parameter's value, a cache of keys and values,
  // another tape's node), there, with the gradient written there too (Parameter::grad, the other node's). A
  // parameter's gradient has no `fresh` (nullptr): it is always added to; another tape's node's has that node's,
  // so the first write of that tape's backward pass assigns, as it would there. grad_at is nullptr once the
  // gradient went back to the tape's pool, the walk having passed the node (Tape::set_release_grads).
  const TensorT<T>* value_at = &value;
  TensorT<T>* grad_at = &grad;
  bool* fresh_at = &grad_fresh;

  // The one way a gradient is written (the Function API's InputGrad and the tape's walk call it): where, and
  // whether it may assign because nothing has been written this pass (see GradWrite).
  GradWrite<T> take_grad() {
    if (!requires_grad) return {};
    const bool first = fresh_at && *fresh_at;
    if (fresh_at) *fresh_at = false;
    return {grad_at, !first};
  }
};

template <class T>
class Tape {
 public:
  Tape() = default;
  Tape(const Tape&) = delete;  // Vars point at their tape (assignment is deleted with its atomic member)

  // Leaves. constant() and input() copy the value into the tape; param() reads it in place, and so does
  // constant_in_place() (a cache of keys and values, read by a forward with gradients off): that tensor
  // must neither change nor go while the recording is used.
  Var<T> constant(const TensorT<T>& value, Where where = Where::current());
  Var<T> constant_in_place(const TensorT<T>& value, Where where = Where::current());
  Var<T> input(const TensorT<T>& value, Where where = Where::current());  // takes a gradient
  Var<T> param(Parameter<T>& p, Where where = Where::current());
  // A constant computed into the tape's own buffer, named `name` in errors and pictures: fill(TensorT<T>&)
  // writes every element of a tensor of `shape` (a one-hot encoding, a table of positions), with no copy and,
  // in steady state, no allocation.
  template <class Fill>
  Var<T> constant(const char* name, const Shape& shape, Fill&& fill, Where where = Where::current()) {
    Node<T>& n = push(name, where);
    n.value.resize(shape);  // if this or fill throws, the next record drops the pending node
    fill(n.value);
    return commit(n);
  }
  // A leaf standing for `outer`, a Var of another tape, for a region of that tape's graph recorded here
  // instead (activation checkpointing, autograd/activation_checkpoint.hpp): it reads outer's value in
  // place, and its gradient is outer's own buffer, written as one more of outer's readers would write it
  // (assigned if nothing has been written there yet in the outer backward pass, added to after), so the
  // region passes its input gradient on with the same operations in the same order as if it had been
  // recorded on the outer tape. With gradients on here it takes a gradient only while the outer tape is
  // being walked back (the outer gradients exist only then): UsageError otherwise.
  Var<T> outer_input(Var<T> outer, Where where = Where::current());

  // Reverse pass from a one-element loss (d loss = 1), or from any output with a given seed
  // gradient of the output's shape. Gradients of parameters are added to Parameter::grad.
  void backward(Var<T> loss);
  void backward(Var<T> output, const TensorT<T>& seed);

  // v's value and gradient (v.value(), v.grad()): UsageError if v is empty or stale.
  static const TensorT<T>& value(Var<T> v);
  static const TensorT<T>& grad(Var<T> v);

  // Forgets every node (Vars recorded so far become invalid); keeps all buffers.
  void reset();
  std::size_t size() const { return used_ - (pending_node_ ? 1 : 0); }  // committed nodes

 private:
  // Recording, for apply() (autograd/function.hpp) alone: record() appends a pending node for `op` (nodes
  // never move, so references to input values stay valid), before its forward runs; the forward makes and
  // fills its value (Output::make); commit() turns it into a Var (in anomaly mode checking its value). If the
  // op throws in between, the node is dropped, so a failing op leaves the tape as it was. While its forward
  // runs, any other record on this tape is refused, naming the op (its node stays: nothing overwritten). A
  // node keeps its inputs, to walk back to, only when it takes a gradient (`requires_grad`: gradients on, and
  // an input takes one, or the forward read parameters on another tape: link_inputs then). The inputs were
  // checked by apply().
  friend struct detail::FunctionEngine;
  template <class, class>
  friend class Output;
  friend class InputList<T>;
  Node<T>& record(const char* op, std::span<const Var<T>> inputs, Where where, bool requires_grad) {
    Node<T>& n = push(op, where);  // the next node slot, cleared (push: the devices below)
    if (requires_grad) link_inputs(n, inputs);
    return n;
  }
  void link_inputs(Node<T>& n, std::span<const Var<T>> inputs) {  // n is the newest node
    n.requires_grad = true;
    for (const auto& v : inputs) inputs_.push_back(v.index);
    n.input_count = static_cast<std::uint32_t>(inputs.size());
  }
  Var<T> commit(Node<T>& n) {
    const auto index = static_cast<std::uint32_t>(used_ - 1);
    if (&n != pending_node_) refuse_commit(n);
    if (anomaly_detection_) refuse_non_finite(n);
    pending_node_ = nullptr;
    // The masks change nothing (push and reset keep within the limits); they state the widths.
    return {this, index & (kMaxTapeNodes - 1), generation_ & kMaxTapeGeneration};
  }

 public:
  // With gradients disabled (evaluation) ops compute values but record no inputs, no backward
  // rules and no saved state, and backward() refuses to run.
  bool grad_enabled() const { return grad_enabled_; }
  void set_grad_enabled(bool on) { grad_enabled_ = on; }

  // Anomaly detection: every op checks its output, and every backward rule its gradients, for NaN
  // or Inf, and throws naming the op and the source line that recorded it.
  bool anomaly_detection() const { return anomaly_detection_; }
  void set_anomaly_detection(bool on) { anomaly_detection_ = on; }

  // ---- Reading a recording: a picture of the tape (autograd/tape_graph.hpp), or a user's own tool. ----
  // Committed node i, 0 <= i < size(), in creation order, which is a topological order: every input of
  // node i has a smaller index. UsageError past size().
  const Node<T>& node_at(std::size_t i) const;
  // The indices of node i's inputs, in the op's argument order. A node keeps its inputs only when it
  // takes a gradient, so a leaf, an op on constants alone and an op recorded with gradients disabled
  // have none.
  std::span<const std::uint32_t> inputs_of(std::size_t i) const;
  // d loss / d value of node i from the last backward(), or nullptr if it has none: it takes no
  // gradient, or no backward() since the last reset() started at or after it. A parameter's is
  // Parameter::grad, which adds up over backward passes until zero_grad().
  const TensorT<T>* grad_at(std::size_t i) const;
  // "softmax_rows (recorded at layers/self_attention.cpp:88)"
  static std::string describe(const Node<T>& n);

  // The parameters read (param()) since the last reset(), in order, a parameter once per read: what a
  // training loop checks against its model's list (check_registered in layers/module.hpp).
  std::span<const Parameter<T>* const> parameters_read() const { return params_read_; }

  // Validates the Var arguments of `op` (same tape, not stale), each with its name for errors ({"x", x}), and
  // returns their tape: what a layer's forward calls first, to name its own arguments in errors.
  static Tape& of(const char* op, std::initializer_list<std::pair<const char*, Var<T>>> args) {  // inline, as check
    const auto& [first_name, first] = *args.begin();
    if (first.tape == nullptr) refuse(nullptr, first, op, first_name, -1);
    for (const auto& [name, var] : args) first.tape->check(var, op, name);
    return *first.tape;
  }
  // Throws UsageError unless v is a live Var of this tape; names it "{arg}" or "{arg} {position}".
  void check(Var<T> v, const char* op, const char* arg, Index position = -1) const {
    if (v.tape == this && v.generation == generation_ && v.index < used_) return;  // inline: every op checks
    refuse(this, v, op, arg, position);
  }

  // ---- devices for memory (skip on a first reading) ----
  // The memory this tape holds, in bytes: every node slot made so far (a recording's and those reset()
  // keeps for the next), their values' buffers by capacity, the gradients' (grad_buffer_bytes(): the
  // nodes' and the released ones' pool), the state ops saved for their backward (what SavedState sees
  // of it), the list of inputs, and the sub-tape's bytes (checkpointed regions). After a step, the
  // memory the step's graph costs; stable from one identical step to the next. Not counted: what
  // parameters hold (a layer's), and the threads' scratch buffers (autograd/kernels.hpp). A walk over
  // every node: for a report, not for a hot loop.
  std::size_t bytes() const;
  // Gradient memory. By default every node keeps its gradient until the next backward, so that grad()
  // reads any of them. With release on, backward gives a node's gradient buffer back to the tape's pool
  // once the walk has passed the node (no rule below it reads it) and takes one from the pool when a rule
  // is about to write an input's gradient: the walk holds the gradients alive at one moment, not all of
  // them (a Trainer's tape does this). Leaves (input(), parameters) keep theirs until reset(); grad() of
  // a released node is a UsageError. The walk is the same every step, so after a few steps the pool's
  // buffers fit every take and a step allocates nothing.
  bool release_grads() const { return release_grads_; }
  void set_release_grads(bool on) { release_grads_ = on; }
  std::size_t grad_buffer_bytes() const;  // every node's gradient and the pool's, by capacity
  // This tape's sub-tape, made on first use and kept with its buffers: where checkpointed regions are
  // evaluated and recomputed (autograd/activation_checkpoint.hpp). Every region recorded through one tape
  // shares it, so their intermediates occupy one region of memory, the largest region's size, not one each.
  Tape& sub_tape();
  // Lists parameters that a region of this recording read on another tape (a sub-tape's
  // parameters_read()), so that check_registered sees them too.
  void note_parameters_read(std::span<const Parameter<T>* const> read) {
    params_read_.insert(params_read_.end(), read.begin(), read.end());  // within its kept capacity in steady state
  }

 private:
  Node<T>& node(Var<T> v) { return at(v.index); }
  Node<T>& input_node(const Node<T>& n, std::uint32_t k) { return at(inputs_[n.first_input + k]); }  // its k-th input

  // The walk's parts (backward): checks and seeding, and a node's turn.
  void start_walk(Var<T> output, const TensorT<T>& seed);
  void run_rule(Node<T>& n);
  void release_grad(Node<T>& n);

  // Why v is not a live Var of `tape`: empty (of no tape, which `tape` may be too), another tape's, stale.
  [[noreturn]] static void refuse(const Tape* tape, Var<T> v, const char* op, const char* arg, Index position);
  [[noreturn]] void refuse_thread(const char* op) const;
  // UsageError unless the calling thread owns the tape (or nothing is recorded); `claim` makes it the
  // owner when the tape is empty.
  void check_thread(const char* op, bool claim) {
    // Which thread this is, as cheaply as the tape can ask on every op it records: the address of a
    // thread-local byte (initial-exec: an offset from the thread pointer, no call).
    static thread_local char marker __attribute__((tls_model("initial-exec")));
    if (used_ == 0 && claim)
      owner_.store(&marker, std::memory_order_relaxed);
    else if (used_ != 0 && owner_.load(std::memory_order_relaxed) != &marker)
      refuse_thread(op);
  }
  [[noreturn]] void refuse_commit(Node<T>& n);
  void refuse_non_finite(Node<T>& n);
  Node<T>& push(const char* op, Where where);
  void make_room(const char* op);
  void drop_pending();  // forgets the newest node, which was recorded but not committed
  void check_backward_anomaly(Node<T>& n);
  void hold_grad(Node<T>& n);  // a gradient buffer of n's shape (from the pool, when releasing)

  // Nodes in chunks of kChunk that never move once made: [0, used_) are live, the rest keep their
  // buffers. Node i is chunks_[i / kChunk][i % kChunk]: a shift and a mask per op recorded and per
  // backward rule (bench/tape_overhead measures it against a std::deque).
  static constexpr std::size_t kChunkBits = 8, kChunk = std::size_t{1} << kChunkBits;
  Node<T>& at(std::size_t i) { return chunks_[i >> kChunkBits][i & (kChunk - 1)]; }
  const Node<T>& at(std::size_t i) const { return chunks_[i >> kChunkBits][i & (kChunk - 1)]; }
  std::vector<std::unique_ptr<Node<T>[]>> chunks_;
  std::size_t slots() const { return chunks_.size() * kChunk; }  // node slots made so far
  std::vector<std::uint32_t> inputs_;                            // input indices of every live node, back to back
  std::size_t used_ = 0;
  Node<T>* pending_node_ = nullptr;               // node used_ - 1, recorded but not committed (or nullptr) ...
  bool forward_open_ = false;                     // ... and its op's forward is running: nothing else records
  bool walked_ = false;                           // backward() ran since the last reset()
  bool walking_ = false;                          // backward() is running: the gradients of outer_input leaves exist
  std::uint64_t generation_ = 1;                  // bumped by reset(), stamped into every Var (40 bits of it)
  std::size_t grads_valid_until_ = 0;             // backward() filled gradients of nodes [0, this)
  TensorT<T> unit_seed_;                          // d loss / d loss = 1
  std::vector<const Parameter<T>*> params_read_;  // by param(), since the last reset()
  std::atomic<const void*> owner_{nullptr};       // check_thread's token of the thread recording since reset()
  bool grad_enabled_ = true;
  bool anomaly_detection_ = false;
  bool release_grads_ = false;
  std::vector<TensorT<T>> grad_pool_;  // free gradient buffers (set_release_grads)
  std::unique_ptr<Tape> sub_;          // sub_tape(), made on first use
};

// ---- devices (skip on a first reading): how a backward rule writes a gradient buffer. A gradient starts each
// backward pass as zero without its buffer being filled (a pass of zeros over every tensor saved): its first
// write assigns, later ones add. Op authors see this through InputGrad (autograd/function.hpp), which takes
// care of it.

// dst = src when `assign`, dst += src otherwise: a gradient's first write of a backward pass assigns (see
// GradWrite below).
template <class Dst, class Src>
void write_grad(Dst&& dst, const Src& src, bool assign) {
  if (assign)
    dst = src;
  else
    dst += src;
}

namespace detail {
[[noreturn]] void refuse_piece(const char* op, const char* input, Index rows, Index cols, Index piece_rows,
                               Index piece_cols, const Shape& shape);
}

// Where a backward rule writes one input's gradient, and how: `accumulate` is false on the first write of
// a backward pass, when the buffer holds stale values that stand for zeros, so each element is assigned
// instead of added (no pass of zero-filling first); true after. tensor is nullptr when no gradient is wanted.
// The library's own fast rules write through it (InputGrad's pieces, autograd/function.hpp); `op` and
// `input` name the gradient in the refusal of a piece write of the wrong size or outside it.
template <class T>
struct GradWrite {
  TensorT<T>* tensor = nullptr;
  bool accumulate = false;
  const char* op = "";
  const char* input = "";
  explicit operator bool() const { return tensor != nullptr; }
  // piece += g (a view into *tensor and an expression of its shape): assigned while !accumulate. A g of
  // another size than the piece, or a piece outside the gradient, is a ShapeError naming op and input.
  template <class Dst, class Src>
  void add(Dst&& piece, const Src& g) const {
    const bool inside =
        piece.size() == 0 || (&piece.coeffRef(0, 0) >= tensor->data() &&
                              &piece.coeffRef(piece.rows() - 1, piece.cols() - 1) < tensor->data() + tensor->numel());
    if (g.rows() != piece.rows() || g.cols() != piece.cols() || !inside)
      detail::refuse_piece(op, input, g.rows(), g.cols(), piece.rows(), piece.cols(), tensor->shape());
    write_grad(std::forward<Dst>(piece), g, !accumulate);
  }
  // The whole gradient, zero where nothing has been written this pass (filled now on a first write), for a
  // rule that adds into part of it (a scatter); nullptr if no gradient is wanted.
  TensorT<T>* zeroed() const;
};

// The per-op call, inline: a tiny op's cost is mostly this bookkeeping (bench/tape_overhead).
template <class T>
inline Node<T>& Tape<T>::push(const char* op, Where where) {
  check_thread(op, true);  // first: another thread's op must not touch anything
  if (pending_node_ || used_ == slots() || used_ == kMaxTapeNodes) make_room(op);
  Node<T>& n = at(used_);  // its value is resized by whoever fills it
  ++used_;
  pending_node_ = &n;
  n.op = op;
  n.where = where;
  n.backward = nullptr;
  n.requires_grad = false;
  n.first_input = static_cast<std::uint32_t>(inputs_.size());
  n.input_count = 0;
  n.parameter = nullptr;
  n.value_at = &n.value;
  n.grad_at = &n.grad;
  n.fresh_at = &n.grad_fresh;
  n.grad_fresh = false;
  n.saved.new_recording();
  return n;
}

namespace detail {
// Runs `f` when the scope ends, however it ends (a walk or a forward that throws): what a tape's flags and a
// random stream are put back by.
template <class F>
struct AtExit {
  F f;
  ~AtExit() { f(); }
};
template <class F>
AtExit(F) -> AtExit<F>;  // (clang 14 does not deduce an aggregate's arguments)
}  // namespace detail

// Disables gradients on a tape for the lifetime of the guard (evaluation).
template <class T>
class NoGradGuard {
 public:
  explicit NoGradGuard(Tape<T>& tape) : tape_(tape), previous_(tape.grad_enabled()) { tape.set_grad_enabled(false); }
  ~NoGradGuard() { tape_.set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;  // one guard restores the tape once (and a reference does not assign)

 private:
  Tape<T>& tape_;
  bool previous_;
};

extern template class Tape<float>;
extern template class Tape<double>;

}  // namespace tapegrad
