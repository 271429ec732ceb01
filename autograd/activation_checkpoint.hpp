#pragma once
// Activation checkpointing, as torch.utils.checkpoint: a region of the graph (a transformer block, a
// user's module) is evaluated in the forward pass without keeping its intermediates, and evaluated again,
// recording, when backward reaches it.
//
//   Var<T> y = checkpoint(x, block.rng(), [&block](Var<T> h) { return block.forward(h); });
//
// Forward: fn runs on the tape's sub-tape (Tape::sub_tape) with gradients off, so it computes values
// only; the outer tape gets one node, "checkpoint", holding fn's output. Backward, at that node: the
// sub-tape is reset, fn runs on it again, recording, from an outer_input leaf for x (x's value read in
// place), and the sub-tape is walked back from the node's gradient. The leaf writes x's gradient into x's
// own buffer on the outer tape, and the parameters' into Parameter::grad, with the operations the plain
// recording would have made, in the same order: the gradients are bit-identical to running fn directly.
//
// Memory: the outer tape keeps the region's input and output (and their gradients), nothing between. All
// the regions recorded through one tape share its one sub-tape, whose buffers are reused from region to
// region and step to step: a region's intermediates exist while it is evaluated or recomputed and walked
// back, and are overwritten by the next region's; the sub-tape holds the largest region's, not every
// region's. A steady-state step allocates nothing (the sub-tape keeps its buffers as any tape does).
// The price: fn's forward runs twice per training step.
//
// What fn must do:
//   - compute its result from the Var it is given (and parameters, tape.param; its tape is h.tape, the
//     sub-tape): a Var of the outer tape captured inside fn is refused as belonging to another tape;
//   - compute the same thing when run again. Random numbers: pass the stream fn draws from (a Module's
//     rng(), which dropout uses) as `rng`: its state is saved before the forward and restored for the
//     recomputation, which then draws the same masks; afterwards the stream is where the forward left it.
//     nullptr when fn draws nothing. What fn captures by reference (a padding mask) must stay unchanged
//     until backward has run. A recomputation whose output is not the forward's, bit for bit (a stream
//     that was not passed, something that changed), would give another function's gradients: backward
//     refuses it with a UsageError;
//   - not hand a cache of keys and values (layers/kv_cache.hpp) unless gradients are off.
// fn is copied into the tape's node (it must be copy- or move-constructible), so a lambda written in the
// call is fine; what it captures by reference must outlive backward.
//
// With gradients off (NoGradGuard: evaluation, generation) checkpoint(x, rng, fn) is fn(x): nothing would
// be kept for a backward pass, so there is nothing to save.

#include <concepts>
#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>

#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/tape.hpp"
#include "tapegrad/core/rng.hpp"

namespace tapegrad {

namespace detail {

[[noreturn]] void refuse_recompute(const Shape& first, const Shape& again);

// fn run on the sub-tape of x's tape, reset for it (the last region's intermediates go: their buffers take
// this one's) and set as that tape is, recording (backward) or values only (forward); its result checked to
// be a Var of the sub-tape. Given `rng`, the stream fn draws from, it starts at `drawn_from` (where the
// forward found it: the same dropout masks) and is put back as it was afterwards, however fn ends.
template <class T, class F>
Var<T> run_region(F& fn, Var<T> x, bool record, Rng* rng = nullptr, Rng::State drawn_from = {}) {
  Tape<T>& sub = x.tape->sub_tape();
  sub.reset();
  sub.set_anomaly_detection(x.tape->anomaly_detection());
  sub.set_release_grads(x.tape->release_grads());  // as the outer tape's walk does
  sub.set_grad_enabled(record);
  const Rng::State now = rng ? rng->state() : Rng::State{};
  if (rng) rng->set_state(drawn_from);
  const AtExit restore{[&] {
    if (rng) rng->set_state(now);
  }};
  const Var<T> y = fn(sub.outer_input(x));
  if (y.tape != &sub)
    fail<UsageError>(
        "checkpoint: the function returned a Var of {}; it must compute its result from the Var it is "
        "given (on the tape's sub-tape), not return a Var recorded elsewhere",
        y.tape ? "another tape" : "no tape (an empty Var)");
  return y;
}

// The op: forward runs the region with gradients off on the sub-tape and keeps its output; backward
// runs it again, recording, and walks the sub-tape back from the node's gradient, which writes x's
// gradient and the parameters' where they live (x's through the outer_input leaf): the op's own input
// accessor is not used.
template <class T, class F>
struct CheckpointOp {
  static constexpr const char* name = "checkpoint";
  static constexpr const char* inputs[] = {"x"};
  // What the node keeps for its backward rule: the region to run again, where it reads its input, and the
  // random stream as the forward found it.
  struct Saved {
    std::optional<F> fn;  // emplaced each step: a lambda's captures, no allocation
    Var<T> input;         // x, on the outer tape
    Rng* rng = nullptr;
    Rng::State rng_state{};
  };
  F* fn = nullptr;  // the caller's, moved into the node once it has run
  Var<T> x;         // the region's input, on the outer tape
  Rng* rng = nullptr;

  void forward(Output<T, Saved>& out, const TensorT<T>&) const {
    const Rng::State start = rng ? rng->state() : Rng::State{};
    const Var<T> y = run_region<T>(*fn, x, false);
    // Parameters read in the region take gradients through the recomputation, whether or not x does.
    if (!y.tape->parameters_read().empty()) out.takes_grad_regardless();
    out.make(y.shape(), false).array() = y.value().array();
    if (out.needs_grad()) {
      Saved& saved = out.saved();
      saved.fn.emplace(std::move(*fn));
      saved.input = x;
      saved.rng = rng;
      saved.rng_state = start;
    }
    out.tape().note_parameters_read(y.tape->parameters_read());
  }

  static void backward(const Output<T, Saved>& out, const OpInput<T>&) {
    Saved& s = out.saved();
    // The random stream as the forward found it (the same dropout masks), and afterwards as it was.
    const Var<T> again = run_region<T>(*s.fn, s.input, true, s.rng, s.rng_state);
    // A region that computes something else the second time (a random stream not passed as `rng`, state
    // that changed in between) would give the gradients of another function, silently.
    const TensorT<T>& first = out.value();
    const TensorT<T>& second = again.value();
    // Compared bit for bit: NaN == NaN, -0 != 0.
    if (second.shape() != first.shape() ||
        (first.numel() > 0 &&
         std::memcmp(first.data(), second.data(), sizeof(T) * static_cast<std::size_t>(first.numel())) != 0))
      refuse_recompute(first.shape(), second.shape());
    if (again.tape->node_at(again.index).requires_grad) again.tape->backward(again, out.grad());
  }
};

}  // namespace detail

// fn(x), with fn's intermediates recomputed in backward instead of kept (see above). x (any shape) ->
// fn's output (any shape). fn: Var<T>(Var<T>).
template <class T, class F>
requires std::invocable<F&, Var<T>> && std::same_as<std::invoke_result_t<F&, Var<T>>, Var<T>> Var<T> checkpoint(
    Var<T> x, Rng* rng, F&& fn, Where where = Where::current()) {
  if (!Tape<T>::of("checkpoint", {{"x", x}}).grad_enabled()) return fn(x);
  std::decay_t<F> region(std::forward<F>(fn));
  return apply(detail::CheckpointOp<T, std::decay_t<F>>{.fn = &region, .x = x, .rng = rng}, {x}, where);
}

}  // namespace tapegrad
