#include "tapegrad/autograd/tape.hpp"

#include <algorithm>

#include "tapegrad/core/parallel.hpp"

namespace tapegrad {

// ---- the reverse walk ----

template <class T>
void Tape<T>::backward(Var<T> loss) {
  check(loss, "backward", "the loss");
  const Shape& s = at(loss.index).val().shape();
  if (s.numel() != 1)
    fail<ShapeError>(
        "backward: the loss must hold one element, but it is {}; give a seed gradient to start "
        "from a larger output",
        s);
  unit_seed_.resize(s);  // a member, so the steady state allocates nothing here either
  unit_seed_.fill(T(1));
  backward(loss, unit_seed_);
}

// Every gradient starts at zero and the output's at the seed; then each node, newest first, hands its
// gradient to its inputs through its backward rule. Creation order is a topological order, so when the
// walk reaches a node, every node that reads it has already added its part.
template <class T>
void Tape<T>::backward(Var<T> output, const TensorT<T>& seed) {
  start_walk(output, seed);
  walking_ = true;
  const detail::AtExit walked{[this] { walking_ = false; }};  // however the walk ends
  for (std::size_t i = output.index + 1; i-- > 0;) {
    Node<T>& n = at(i);
    if (n.requires_grad) run_rule(n);  // its rule (a leaf has none: its gradient is complete)
  }
  grads_valid_until_ = output.index + 1;
}

// n's turn, its rule with the devices around it. A node nothing reached has a zero gradient that was never
// filled (grad_fresh): it passes nothing on, and the buffer is filled with zeros now, as every node that
// reads it has had its turn (unless, with release on, it goes back to the pool). With release on, the
// inputs' gradients are held before the rule writes them (from their last reader's rule, this one, to their
// own turn) and n's own is given back after, a leaf's kept.
template <class T>
void Tape<T>::run_rule(Node<T>& n) {
  if (n.backward && !n.grad_fresh) {
    if (release_grads_)
      for (std::uint32_t k = 0; k < n.input_count; ++k) hold_grad(input_node(n, k));
    n.backward(*this, n);
    if (anomaly_detection_) check_backward_anomaly(n);
  }
  if (n.backward && release_grads_) {
    release_grad(n);
  } else if (n.grad_fresh) {
    if (release_grads_) hold_grad(n);
    n.take_grad().zeroed();
  }
}

// The checks, then gradients zero without being filled (the first rule to write one assigns: take_grad) and
// the output's set to the seed.
template <class T>
void Tape<T>::start_walk(Var<T> output, const TensorT<T>& seed) {
  check_thread("backward", false);
  check(output, "backward", "the output");
  if (walked_)
    fail<UsageError>(
        "backward: this tape was already walked back since its last reset(); again would add every "
        "gradient a second time (add the losses before one backward, or reset() and record again)");
  Node<T>& out = at(output.index);
  if (seed.shape() != out.val().shape())
    fail<ShapeError>("backward: the seed gradient is {} but the output {} is {}", seed.shape(), describe(out),
                     out.val().shape());
  if (!out.requires_grad)
    fail<UsageError>(
        "backward: {} depends on no input or parameter that takes a gradient (or it was "
        "recorded with gradients disabled)",
        describe(out));
  walked_ = true;  // from here on gradients are written: even a walk that fails part way may not be repeated
  for (std::size_t i = 0; i <= output.index; ++i) {
    Node<T>& n = at(i);  // grad_at is set: push() set it, and a recording is walked once
    if (n.requires_grad && n.grad_at == &n.grad) {
      if (!release_grads_) n.grad.resize(n.val().shape());
      n.grad_fresh = true;
    }
  }
  if (release_grads_) hold_grad(out);
  // Assigned, not added to zeros: out's gradient is then the seed bit for bit, -0 included (a checkpointed
  // region's sub-tape is seeded with the gradient the outer tape computed for its output).
  const GradWrite<T> seeded = out.take_grad();
  seeded.add(seeded.tensor->array(), seed.array());
}

template <class T>
TensorT<T>* GradWrite<T>::zeroed() const {
  if (tensor && !accumulate)  // nothing written yet this pass: zeros are the first write
    parallel_rows(tensor->numel(), 1, [g = tensor](Index from, Index count) {  // split when large
      std::fill_n(g->data() + from, count, T(0));
    });
  return tensor;
}

// ---- devices: the gradient pool (set_release_grads) ----

// No rule below n reads its gradient: its buffer serves the gradients still to come.
template <class T>
void Tape<T>::release_grad(Node<T>& n) {
  n.grad_at = nullptr;
  if (n.grad.capacity() > 0) grad_pool_.push_back(std::move(n.grad));
}

template <class T>
void Tape<T>::hold_grad(Node<T>& n) {
  if (!n.requires_grad || n.grad_at != &n.grad) return;
  const auto need = static_cast<std::size_t>(n.val().numel());
  if (n.grad.capacity() == 0 && !grad_pool_.empty()) {
    // The smallest free buffer that holds it, else the largest (it grows once; the walk is the same
    // every step, so after a few steps every take fits and a step allocates nothing).
    std::size_t best = 0;
    for (std::size_t k = 1; k < grad_pool_.size(); ++k) {
      const std::size_t c = grad_pool_[k].capacity(), b = grad_pool_[best].capacity();
      if (b >= need ? (c >= need && c < b) : c > b) best = k;
    }
    n.grad = std::move(grad_pool_[best]);
    if (best + 1 != grad_pool_.size()) grad_pool_[best] = std::move(grad_pool_.back());
    grad_pool_.pop_back();
  }
  n.grad.resize(n.val().shape());
}

template <class T>
std::size_t Tape<T>::grad_buffer_bytes() const {
  std::size_t elements = 0;
  for (std::size_t i = 0; i < slots(); ++i) elements += at(i).grad.capacity();
  for (const TensorT<T>& g : grad_pool_) elements += g.capacity();
  return elements * sizeof(T);
}

template <class T>
void Tape<T>::check_backward_anomaly(Node<T>& n) {
  for (std::uint32_t k = 0; k < n.input_count; ++k) {
    Node<T>& in = input_node(n, k);
    const TensorT<T>* g = in.take_grad().zeroed();
    if (g && !all_finite(*g))
      fail<NonFiniteError>(
          "anomaly: the backward rule of {} produced a non-finite gradient (NaN or Inf) for its "
          "input {}, {}",
          describe(n), k, describe(in));
  }
}

// ---- leaves ----

template <class T>
Var<T> Tape<T>::constant(const TensorT<T>& value, Where where) {
  return constant(
      "constant", value.shape(), [&](TensorT<T>& v) { v.array() = value.array(); }, where);
}

template <class T>
Var<T> Tape<T>::constant_in_place(const TensorT<T>& value, Where where) {
  Node<T>& n = push("constant_in_place", where);  // the value lives where it is
  n.value_at = &value;
  return commit(n);
}

template <class T>
Var<T> Tape<T>::input(const TensorT<T>& value, Where where) {
  Node<T>& n = push("input", where);
  n.value.resize(value.shape());  // if it throws, the next record drops the pending node
  std::copy(value.data(), value.data() + value.numel(), n.value.data());
  n.requires_grad = grad_enabled_;
  return commit(n);
}

template <class T>
Var<T> Tape<T>::param(Parameter<T>& p, Where where) {
  Node<T>& n = push("param", where);  // the value lives in the parameter
  n.value_at = &p.value;
  n.parameter = &p;
  params_read_.push_back(&p);  // keeps its capacity across reset(): no allocation in steady state
  if (grad_enabled_) {
    if (p.grad.shape() != p.value.shape()) p.zero_grad();
    n.requires_grad = true;
    n.grad_at = &p.grad;
    n.fresh_at = nullptr;  // always added to
  }
  return commit(n);
}

template <class T>
Var<T> Tape<T>::outer_input(Var<T> outer, Where where) {
  if (&of("outer_input", {{"the outer Var", outer}}) == this)
    fail<UsageError>("outer_input: the outer Var belongs to this tape; it stands for a Var of another tape");
  Node<T>& from = outer.tape->node(outer);
  const bool linked = grad_enabled_ && from.requires_grad;
  if (linked && !outer.tape->walking_)
    fail<UsageError>(
        "outer_input: {} takes a gradient, which exists only while its tape is walked back; record "
        "with gradients off here (NoGradGuard), or from within that tape's backward()",
        describe(from));
  Node<T>& n = push("outer_input", where);  // the value lives in the outer node
  n.value_at = &from.val();
  if (linked) {
    n.requires_grad = true;
    n.grad_at = from.grad_at;
    n.fresh_at = from.fresh_at;
  }
  return commit(n);
}

template <class T>
Tape<T>& Tape<T>::sub_tape() {
  if (!sub_) sub_ = std::make_unique<Tape<T>>();
  return *sub_;
}

// ---- reading ----

template <class T>
const TensorT<T>& Tape<T>::value(Var<T> v) {
  return of("value", {{"the Var", v}}).at(v.index).val();
}

template <class T>
const TensorT<T>& Tape<T>::grad(Var<T> v) {
  const Tape& tape = of("grad", {{"the Var", v}});
  if (const TensorT<T>* g = tape.grad_at(v.index)) return *g;
  const Node<T>& n = tape.at(v.index);  // why it has none
  if (!n.requires_grad)
    fail<UsageError>("grad: {} takes no gradient (a constant, or recorded with gradients disabled)", describe(n));
  if (v.index >= tape.grads_valid_until_)
    fail<UsageError>(
        "grad: no gradient has been computed for {} yet; call backward() on an output that "
        "depends on it",
        describe(n));
  fail<UsageError>(
      "grad: {} is not a leaf, and this tape releases such gradients once backward has passed "
      "them (set_release_grads(false) keeps them)",
      describe(n));
}

template <class T>
const Node<T>& Tape<T>::node_at(std::size_t i) const {
  if (i >= size()) fail<UsageError>("node_at: node {} is past the end of the tape, which holds {} nodes", i, size());
  return at(i);
}

template <class T>
std::span<const std::uint32_t> Tape<T>::inputs_of(std::size_t i) const {
  const Node<T>& n = node_at(i);
  return std::span<const std::uint32_t>(inputs_).subspan(n.first_input, n.input_count);
}

template <class T>
const TensorT<T>* Tape<T>::grad_at(std::size_t i) const {
  const Node<T>& n = node_at(i);
  return n.requires_grad && i < grads_valid_until_ ? n.grad_at : nullptr;
}

template <class T>
std::string Tape<T>::describe(const Node<T>& n) {
  if (n.parameter)
    return fmt::format("parameter '{}' (read at {}:{})", escaped(n.parameter->name), n.where.short_file(),
                       n.where.line);
  return fmt::format("{} (recorded at {}:{})", n.op, n.where.short_file(), n.where.line);
}

// ---- recording's refusals, reset, size ----

template <class T>
void Tape<T>::refuse_thread(const char* op) const {
  fail<UsageError>(
      "{}: tape {} holds {} nodes that another thread is recording; a tape belongs to the thread that "
      "records on it until reset(): give each thread its own tape",
      op, static_cast<const void*>(this), used_);
}

template <class T>
void Tape<T>::refuse(const Tape* tape, Var<T> v, const char* op, const char* arg, Index position) {
  const std::string name = position < 0 ? std::string(arg) : fmt::format("{} {}", arg, position);
  if (v.tape == nullptr) fail<UsageError>("{}: {} is an empty Var (default-constructed)", op, name);
  if (v.tape != tape) fail<UsageError>("{}: {} belongs to a different tape than the op's other arguments", op, name);
  fail<UsageError>("{}: {} was recorded before the last reset() of its tape; record it again", op, name);
}

// The slow part of push(): a node dropped, a limit reached, a chunk to make.
template <class T>
void Tape<T>::make_room(const char* op) {
  if (pending_node_ && forward_open_)
    fail<UsageError>(
        "{}: recorded on the tape while the forward of {} runs; an op's forward computes its output from its "
        "inputs' values and records nothing (record other ops before or after it)",
        op, describe(*pending_node_));
  if (pending_node_) drop_pending();  // the op that recorded it threw before committing
  if (used_ == kMaxTapeNodes)
    fail<UsageError>("{}: the tape already holds {} nodes, as many as a Var can address; reset() it between steps", op,
                     kMaxTapeNodes);
  if (used_ == slots()) chunks_.push_back(std::make_unique<Node<T>[]>(kChunk));
}

template <class T>
void Tape<T>::drop_pending() {
  --used_;
  inputs_.resize(at(used_).first_input);
  pending_node_ = nullptr;
}

template <class T>
void Tape<T>::refuse_commit(Node<T>& n) {
  fail<UsageError>("commit: {} is not the newest node on its tape, recorded and not yet committed", describe(n));
}

// Anomaly mode: a node whose value is not finite is dropped (the tape as it was before the op), and
// the op refused.
template <class T>
void Tape<T>::refuse_non_finite(Node<T>& n) {
  if (all_finite(n.val())) return;
  drop_pending();  // n keeps what it holds until the next record
  if (n.parameter) fail<NonFiniteError>("anomaly: {} holds a non-finite value (NaN or Inf)", describe(n));
  fail<NonFiniteError>("anomaly: {} produced a non-finite value (NaN or Inf) in its {} output", describe(n),
                       n.val().shape());
}

template <class T>
std::size_t Tape<T>::bytes() const {
  std::size_t total = chunks_.capacity() * sizeof(chunks_[0]) + slots() * sizeof(Node<T>) +
                      buffer_bytes(inputs_, params_read_, unit_seed_, grad_pool_) + grad_buffer_bytes();
  for (std::size_t i = 0; i < slots(); ++i) {
    const Node<T>& n = at(i);
    total += buffer_bytes(n.value) + n.saved.heap_bytes();
  }
  return sub_ ? total + sub_->bytes() : total;  // a checkpointed region's recording lives on the sub-tape
}

template <class T>
void Tape<T>::reset() {
  if (release_grads_)  // the leaves' gradients, read until now, go back to the pool
    for (std::size_t i = 0; i < used_; ++i) release_grad(at(i));
  used_ = 0;
  pending_node_ = nullptr;
  walked_ = false;
  // Between steps no op holds a pointer into this thread's scratch: grow it to what the other threads met
  // (core/parallel.hpp), so that a piece size first met on another thread costs no allocation here later.
  detail::equalize_thread_scratch();
  inputs_.clear();  // keeps its capacity
  params_read_.clear();
  grads_valid_until_ = 0;
  if (generation_ == kMaxTapeGeneration)
    fail<UsageError>("reset: this tape has been reset {} times, as many as a Var can tell apart; make a new tape",
                     kMaxTapeGeneration);
  ++generation_;
}

template class Tape<float>;
template class Tape<double>;
template TensorT<float>* GradWrite<float>::zeroed() const;
template TensorT<double>* GradWrite<double>::zeroed() const;

}  // namespace tapegrad
