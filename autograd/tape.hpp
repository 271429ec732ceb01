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

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tapegrad/autograd/parameter.hpp"
#include "tapegrad/core/parallel.hpp"
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

// Which thread this is, as cheaply as the tape can ask on every op it records: the address of a
// thread-local byte (initial-exec: an offset from the thread pointer, no call).
inline const void* this_thread_token() {
  static thread_local char marker __attribute__((tls_model("initial-exec")));
  return &marker;
}

// The limits of Var's fields (see above).
inline constexpr std::size_t kMaxTapeNodes = std::size_t{1} << 24;
inline constexpr std::uint64_t kMaxTapeGeneration = (std::uint64_t{1} << 40) - 1;

template <class T>
struct Var {
  Tape<T>* tape = nullptr;
  std::uint64_t index : 24 = 0;
  std::uint64_t generation : 40 = 0;

  const TensorT<T>& value() const;  // the recorded value
  const TensorT<T>& grad() const;   // d loss / d value, after backward()
  const Shape& shape() const { return value().shape(); }
};

template <class T>
struct Node {
  // A backward rule reads node.grad (d loss / d output) and adds into its inputs' gradients.
  using BackwardFn = void (*)(Tape<T>& tape, Node<T>& node);

  const char* op = "";
  Where where;
  BackwardFn backward = nullptr;
  bool requires_grad = false;
  std::uint32_t first_input = 0;  // position of the first input in the tape's input list
  std::uint32_t input_count = 0;

  TensorT<T> value;                            // the op's output (unused by parameter leaves)
  TensorT<T> grad;                             // d loss / d value, filled by backward()
  const TensorT<T>* external_value = nullptr;  // a parameter leaf reads Parameter::value in place
  TensorT<T>* external_grad = nullptr;         // ... and backward adds into Parameter::grad
  const Parameter<T>* parameter = nullptr;     // ... and is named in errors by it
  // An outer_input leaf writes into another tape's node's gradient, which may not have been written yet in
  // that tape's backward pass: this is that node's grad_fresh, so the first write assigns as it would
  // there. nullptr for a parameter's gradient, which is always added to.
  bool* external_fresh = nullptr;

  // What the op keeps for its backward rule, as a struct of the op's own (S: named, typed fields).
  // The forward calls save<S>(): the S is made the first time this node holds one, then kept with its
  // buffers and reused by the op recorded here next step, as `value` is, so in steady state saving state
  // allocates nothing. A node that holds another type (the graph changed) drops it and makes an S. A
  // small S that needs no destructor (a factor, a few flags and sizes: most ops') lives inside the
  // node, so reading it costs no pointer chase; a larger one (with buffers of its own) lives on the heap.
  template <class S>
  S& save() {
    if (saved_type_ != &saved_tag<S>) make_saved<S>();
    saved_now_ = &saved_tag<S>;
    return held<S>();
  }
  // Tape::bytes() counts an S's own size, and the buffers it holds when S says how big they are: a member
  // `std::size_t heap_bytes() const` (buffer_bytes of its vectors and tensors); without one, only sizeof(S).
  // The backward rule reads it back with saved<S>(): a UsageError naming the op unless this recording's
  // forward saved an S (another type, or none, would be another op's state or a stale one).
  template <class S>
  S& saved() {
    if (saved_now_ != &saved_tag<S>) refuse_saved(saved_now_ != nullptr);
    return held<S>();
  }

  // The heap bytes of the saved state held (an inline one is inside the node, so 0 here).
  std::size_t saved_bytes() const { return saved_ ? saved_->bytes() : 0; }

  // True from the start of a backward pass until the first backward rule writes into `grad`: the
  // gradient is then zero without the buffer having been filled with zeros.
  bool grad_fresh = false;
  // Its gradient went back to the tape's pool once the walk passed it (Tape::set_release_grads).
  bool grad_released = false;

  const TensorT<T>& val() const { return external_value ? *external_value : value; }
  // Where a backward rule adds (+=) into this node's gradient, zero-filled first if nothing has
  // been written this pass; nullptr if no gradient is needed. For rules that write part of it.
  TensorT<T>* grad_sink() {
    if (!requires_grad) return nullptr;
    TensorT<T>* g = external_grad ? external_grad : &grad;
    bool* fresh = external_grad ? external_fresh : &grad_fresh;
    if (fresh && *fresh) {
      parallel_rows(g->numel(), 1, [g](Index from, Index count) {  // split when large
        std::fill_n(g->data() + from, count, T(0));
      });
      *fresh = false;
    }
    return g;
  }
  // For a rule that writes every element: where, and whether it may assign (=) instead of adding,
  // because nothing has been written this pass (saves filling the buffer with zeros first).
  struct GradWrite {
    TensorT<T>* grad = nullptr;
    bool assign = false;
    explicit operator bool() const { return grad != nullptr; }
  };
  GradWrite grad_whole() {
    if (!requires_grad) return {};
    if (external_grad) {
      if (!external_fresh) return {external_grad, false};
      const bool first = *external_fresh;
      *external_fresh = false;
      return {external_grad, first};
    }
    const bool first = grad_fresh;
    grad_fresh = false;
    return {&grad, first};
  }

 private:
  struct SavedBase {
    virtual ~SavedBase() = default;
    virtual std::size_t bytes() const = 0;
  };
  template <class S>
  struct Saved final : SavedBase {
    S state{};
    std::size_t bytes() const override {
      if constexpr (requires { state.heap_bytes(); })
        return sizeof(*this) + state.heap_bytes();
      else
        return sizeof(*this);
    }
  };
  template <class S>
  static constexpr char saved_tag = 0;  // one address per type: saved<S>() compares a pointer
  static constexpr std::size_t kSavedInlineBytes = 32;
  template <class S>
  static constexpr bool kSavedInline = sizeof(S) <= kSavedInlineBytes && alignof(S) <= alignof(std::max_align_t) &&
                                       std::is_trivially_destructible_v<S>;
  template <class S>
  void make_saved() {
    saved_.reset();
    if constexpr (kSavedInline<S>)
      ::new (static_cast<void*>(saved_inline_)) S{};
    else
      saved_ = std::make_unique<Saved<S>>();
    saved_type_ = &saved_tag<S>;
  }

  template <class S>
  S& held() {
    if constexpr (kSavedInline<S>)
      return *std::launder(reinterpret_cast<S*>(saved_inline_));
    else
      return static_cast<Saved<S>&>(*saved_).state;
  }
  [[noreturn, gnu::cold, gnu::noinline]] void refuse_saved(bool other_type) const;

  friend class Tape<T>;  // push() clears saved_now_
  alignas(std::max_align_t) std::byte saved_inline_[kSavedInlineBytes];
  std::unique_ptr<SavedBase> saved_;
  const char* saved_type_ = nullptr;
  const char* saved_now_ = nullptr;  // the type this recording's forward saved (saved_type_), or nullptr
};

// The heap bytes of buffers (TensorT, std::vector: anything with capacity() and data()), by capacity, as
// reset() keeps them: what a saved state's heap_bytes() returns for its members (see Node::save).
template <class... Buffers>
std::size_t buffer_bytes(const Buffers&... buffers) {
  return (std::size_t{0} + ... + (buffers.capacity() * sizeof(*buffers.data())));
}

// dst = src on a gradient's first write of a backward pass, dst += src after (see grad_whole).
template <class Dst, class Src>
void write_grad(Dst&& dst, const Src& src, bool assign) {
  if (assign)
    dst = src;
  else
    dst += src;
}

// The pieces of write_column_sums (below), for an op that sums several gradients over the same rows in one
// pass (layer norm's gamma and beta): body(first, last) for ranges of 16 columns over the threads, as many as
// `passes` reads of the (rows x cols) values are worth; and the sums of columns [first, last) of `rows`
// written into grad's.
template <class F>
void for_column_ranges(Index rows, Index cols, double passes, F&& body) {
  parallel_for(cols, threads_for_elements(passes * static_cast<double>(rows) * static_cast<double>(cols)), body, 16);
}
template <class T, class Rows>
void write_column_sums_of(TensorT<T>& grad, const Rows& rows, Index first, Index last, bool assign) {
  write_grad(grad.flat().row(0).array().segment(first, last - first), rows.middleCols(first, last - first).colwise().sum(),
             assign);
}

// The gradient of a row broadcast over every row of an output (a bias, layer norm's gamma and beta):
// grad, one row of values, (+)= the column sums of `rows` (an array expression, one row per output row).
// One place for the summation, so that ops that broadcast a row the same way (add, affine) give the
// same bits. A large pass is split in ranges of 16 columns over the threads (it would otherwise be a
// serial part of every step): each column is summed by one thread over the rows in the order one thread
// takes, and Eigen's packets start on the same columns (a multiple of 16 from the row's 64-byte aligned
// start), so the sums have the same bits at any thread count.
template <class T, class Rows>
void write_column_sums(TensorT<T>& grad, const Rows& rows, bool assign) {
  for_column_ranges(rows.rows(), rows.cols(), 1,
                    [&](Index first, Index last) { write_column_sums_of(grad, rows, first, last, assign); });
}

// One argument of an op, named for error messages: {"a", a}.
template <class T>
struct NamedVar {
  const char* name;
  Var<T> var;
};

template <class T>
class Tape {
 public:
  Tape() = default;
  Tape(const Tape&) = delete;  // Vars point at their tape
  Tape& operator=(const Tape&) = delete;

  // Leaves. constant() and input() copy the value into the tape; param() reads it in place, and so does
  // constant_in_place() (a cache of keys and values, read by a forward with gradients off): that tensor
  // must neither change nor go while the recording is used.
  Var<T> constant(const TensorT<T>& value, Where where = Where::current());
  Var<T> constant_in_place(const TensorT<T>& value, Where where = Where::current());
  Var<T> input(const TensorT<T>& value, Where where = Where::current());  // takes a gradient
  Var<T> param(Parameter<T>& p, Where where = Where::current());
  // A leaf standing for `outer`, a Var of another tape, for a region of that tape's graph recorded here
  // instead (activation checkpointing, autograd/activation_checkpoint.hpp): it reads outer's value in
  // place, and its gradient is outer's own buffer, written as one more of outer's readers would write it
  // (assigned if nothing has been written there yet in the outer backward pass, added to after), so the
  // region passes its input gradient on with the same operations in the same order as if it had been
  // recorded on the outer tape. With gradients on here it takes a gradient only while the outer tape is
  // being walked back (the outer gradients exist only then): UsageError otherwise.
  Var<T> outer_input(Var<T> outer, Where where = Where::current());

  // This tape's sub-tape, made on first use and kept with its buffers: where checkpointed regions are
  // evaluated and recomputed (autograd/activation_checkpoint.hpp). Every region recorded through one tape
  // shares it, so their intermediates occupy one region of memory, the largest region's size, not one each.
  Tape& sub_tape();

  // Reverse pass from a one-element loss (d loss = 1), or from any output with a given seed
  // gradient of the output's shape. Gradients of parameters are added to Parameter::grad.
  void backward(Var<T> loss);
  void backward(Var<T> output, const TensorT<T>& seed);

  const TensorT<T>& value(Var<T> v) const;
  const TensorT<T>& grad(Var<T> v) const;

  // Forgets every node (Vars recorded so far become invalid); keeps all buffers.
  void reset();
  std::size_t size() const { return used_ - (pending_ ? 1 : 0); }  // committed nodes

  // The memory this tape holds, in bytes: every node slot made so far (a recording's and those reset()
  // keeps for the next), their values' buffers by capacity, the gradients' (grad_buffer_bytes(): the
  // nodes' and the released ones' pool), the state ops saved for their backward (see Node::save for what
  // of it is seen), the list of inputs, and the sub-tape's bytes (checkpointed regions). After a step, the
  // memory the step's graph costs; stable from one identical step to the next. Not counted: what
  // parameters hold (a layer's), and the threads' scratch buffers (autograd/scratch.hpp). A walk over
  // every node: for a report, not for a hot loop.
  std::size_t bytes() const;

  // The parameters read (param()) since the last reset(), in order, a parameter once per read: what a
  // training loop checks against its model's list (check_registered in layers/module.hpp).
  std::span<const Parameter<T>* const> parameters_read() const { return params_read_; }
  // Lists parameters that a region of this recording read on another tape (a sub-tape's
  // parameters_read()), so that check_registered sees them too.
  void note_parameters_read(std::span<const Parameter<T>* const> read) {
    params_read_.insert(params_read_.end(), read.begin(), read.end());  // within its kept capacity in steady state
  }

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

  // With gradients disabled (evaluation) ops compute values but record no inputs, no backward
  // rules and no saved state, and backward() refuses to run.
  bool grad_enabled() const { return grad_enabled_; }
  void set_grad_enabled(bool on) { grad_enabled_ = on; }

  // Gradient memory. By default every node keeps its gradient until the next backward, so that grad()
  // reads any of them. With release on, backward gives a node's gradient buffer back to the tape's pool
  // once the walk has passed the node (no rule below it reads it) and takes one from the pool when a rule
  // is about to write an input's gradient: the walk holds the gradients alive at one moment, not all of
  // them (a Trainer's tape does this). Leaves (input(), parameters) keep theirs until reset(); grad() of
  // a released node is a UsageError. The walk is the same every step, so after a few steps the pool's
  // buffers fit every take and a step allocates nothing.
  bool release_grads() const { return release_grads_; }
  void set_release_grads(bool on) { release_grads_ = on; }
  // The bytes the tape's gradient buffers hold (every node's and the pool's capacity), for measuring.
  std::size_t grad_buffer_bytes() const;

  // Anomaly detection: every op checks its output, and every backward rule its gradients, for NaN
  // or Inf, and throws naming the op and the source line that recorded it.
  bool anomaly_detection() const { return anomaly_detection_; }
  void set_anomaly_detection(bool on) { anomaly_detection_ = on; }

  // ---- For op implementations (autograd/ops_*.cpp) and user-defined ops. ----
  // Validates the arguments of `op` (same tape, not stale) and returns their tape.
  static Tape& of(const char* op, std::initializer_list<NamedVar<T>> args);
  // Appends a node for `op` whose output has `shape`. Validate everything before calling it. The node
  // is pending until commit(): if the op throws in between, or commit() refuses its value (anomaly mode),
  // the node is dropped, so a failing op leaves the tape as it was. Nodes never move, so references to
  // input values taken before recording stay valid.
  Node<T>& record(const char* op, std::initializer_list<Var<T>> inputs, Shape shape, Where where);
  Node<T>& record(const char* op, std::span<const Var<T>> inputs, Shape shape, Where where);
  // Turns the newest node into a Var (and, in anomaly mode, checks its value).
  Var<T> commit(Node<T>& node);
  Node<T>& node(Var<T> v) { return at(v.index); }
  const Node<T>& node(Var<T> v) const { return at(v.index); }
  Node<T>& input_node(const Node<T>& n, std::uint32_t k) { return at(inputs_[n.first_input + k]); }  // its k-th input
  // "softmax_rows (recorded at layers/self_attention.cpp:88)"
  static std::string describe(const Node<T>& n);
  // Throws UsageError unless v is a live Var of this tape; names it "{arg}" or "{arg} {position}".
  void check(Var<T> v, const char* op, const char* arg, Index position = -1) const {
    if (v.tape == this && v.generation == generation_ && v.index < used_) return;  // inline: every op checks
    refuse(v, op, arg, position);
  }

 private:
  [[noreturn]] void refuse(Var<T> v, const char* op, const char* arg, Index position) const;
  [[noreturn]] void refuse_thread(const char* op) const;
  // UsageError unless the calling thread owns the tape (or nothing is recorded); `claim` makes it the
  // owner when the tape is empty.
  void check_thread(const char* op, bool claim) {
    const void* me = this_thread_token();
    if (used_ == 0 && claim)
      owner_.store(me, std::memory_order_relaxed);
    else if (used_ != 0 && owner_.load(std::memory_order_relaxed) != me)
      refuse_thread(op);
  }
  [[noreturn]] void refuse_commit(Node<T>& n);
  void refuse_non_finite(Node<T>& n);
  Node<T>& push(const char* op, Shape shape, Where where);
  void make_room(const char* op);
  void drop_pending();  // forgets the newest node, which was recorded but not committed
  void check_backward_anomaly(const Node<T>& n);
  void hold_grad(Node<T>& n);  // a gradient buffer of n's shape (from the pool, when releasing)

  // Nodes in chunks of kChunk that never move once made: [0, used_) are live, the rest keep their
  // buffers. Node i is chunks_[i / kChunk][i % kChunk]: a shift and a mask, cheaper per op recorded and
  // per backward rule than the std::deque used before (taskset -c 1 build/bench/tape_overhead).
  static constexpr std::size_t kChunkBits = 8, kChunk = std::size_t{1} << kChunkBits;
  Node<T>& at(std::size_t i) { return chunks_[i >> kChunkBits][i & (kChunk - 1)]; }
  const Node<T>& at(std::size_t i) const { return chunks_[i >> kChunkBits][i & (kChunk - 1)]; }
  std::vector<std::unique_ptr<Node<T>[]>> chunks_;
  std::size_t capacity_ = 0;            // chunks_.size() * kChunk
  std::vector<std::uint32_t> inputs_;   // input indices of every live node, back to back
  std::size_t used_ = 0;
  bool pending_ = false;                // node used_ - 1 is recorded but not committed ...
  Node<T>* pending_node_ = nullptr;     // ... and this is it (nullptr when none is pending)
  bool walked_ = false;                 // backward() ran since the last reset()
  bool walking_ = false;                // backward() is running: the gradients of outer_input leaves exist
  std::uint64_t generation_ = 1;        // bumped by reset(), stamped into every Var (40 bits of it)
  std::size_t grads_valid_until_ = 0;   // backward() filled gradients of nodes [0, this)
  TensorT<T> unit_seed_;                // d loss / d loss = 1
  std::vector<const Parameter<T>*> params_read_;  // by param(), since the last reset()
  std::atomic<const void*> owner_{nullptr};       // this_thread_token() of the thread recording since reset()
  bool grad_enabled_ = true;
  bool anomaly_detection_ = false;
  bool release_grads_ = false;
  std::vector<TensorT<T>> grad_pool_;  // free gradient buffers (set_release_grads)
  std::unique_ptr<Tape> sub_;  // sub_tape(), made on first use
};

// The per-op calls, inline: a tiny op's cost is mostly this bookkeeping (bench/tape_overhead).
template <class T>
inline Tape<T>& Tape<T>::of(const char* op, std::initializer_list<NamedVar<T>> args) {
  const NamedVar<T>& first = *args.begin();
  if (first.var.tape == nullptr) fail<UsageError>("{}: {} is an empty Var (default-constructed)", op, first.name);
  Tape<T>& tape = *first.var.tape;
  for (const auto& a : args) tape.check(a.var, op, a.name);
  return tape;
}

template <class T>
inline Node<T>& Tape<T>::push(const char* op, Shape shape, Where where) {
  check_thread(op, true);  // first: another thread's op must not touch anything
  if (pending_ || used_ == capacity_ || used_ == kMaxTapeNodes) make_room(op);
  Node<T>& n = at(used_);
  n.value.resize(shape);  // may throw (a huge shape): before the node counts
  ++used_;
  pending_ = true;
  pending_node_ = &n;
  n.op = op;
  n.where = where;
  n.backward = nullptr;
  n.requires_grad = false;
  n.first_input = static_cast<std::uint32_t>(inputs_.size());
  n.input_count = 0;
  n.external_value = nullptr;
  n.external_grad = nullptr;
  n.external_fresh = nullptr;
  n.parameter = nullptr;
  n.grad_fresh = false;
  n.grad_released = false;
  n.saved_now_ = nullptr;
  return n;
}

template <class T>
inline Node<T>& Tape<T>::record(const char* op, std::span<const Var<T>> inputs, Shape shape, Where where) {
  bool any = false;
  for (const auto& v : inputs) {
    check(v, op, "an input");
    any = any || at(v.index).requires_grad;
  }
  Node<T>& n = push(op, shape, where);
  if (grad_enabled_ && any) {
    n.requires_grad = true;
    for (const auto& v : inputs) inputs_.push_back(v.index);
    n.input_count = static_cast<std::uint32_t>(inputs.size());
  }
  return n;
}

template <class T>
inline Node<T>& Tape<T>::record(const char* op, std::initializer_list<Var<T>> inputs, Shape shape, Where where) {
  return record(op, std::span<const Var<T>>(inputs.begin(), inputs.size()), shape, where);
}

template <class T>
inline Var<T> Tape<T>::commit(Node<T>& n) {
  const auto index = static_cast<std::uint32_t>(used_ - 1);
  if (&n != pending_node_) refuse_commit(n);
  if (anomaly_detection_) refuse_non_finite(n);
  pending_ = false;
  pending_node_ = nullptr;
  Var<T> v;  // the masks change nothing (push and reset keep within the limits); they state the widths
  v.tape = this;
  v.index = index & (kMaxTapeNodes - 1);
  v.generation = generation_ & kMaxTapeGeneration;
  return v;
}

// Disables gradients on a tape for the lifetime of the guard (evaluation).
template <class T>
class NoGradGuard {
 public:
  explicit NoGradGuard(Tape<T>& tape) : tape_(tape), previous_(tape.grad_enabled()) {
    tape.set_grad_enabled(false);
  }
  ~NoGradGuard() { tape_.set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  Tape<T>& tape_;
  bool previous_;
};

template <class T>
const TensorT<T>& Var<T>::value() const {
  if (!tape) fail<UsageError>("value: the Var is empty (default-constructed)");
  return tape->value(*this);
}

template <class T>
const TensorT<T>& Var<T>::grad() const {
  if (!tape) fail<UsageError>("grad: the Var is empty (default-constructed)");
  return tape->grad(*this);
}

extern template class Tape<float>;
extern template class Tape<double>;

}  // namespace tapegrad
