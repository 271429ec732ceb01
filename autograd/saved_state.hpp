#pragma once
// What an op keeps from its forward for its backward rule (a node's `saved`), as a struct of the op's own,
// S, with named, typed fields: a factor, the rows a gather picked, the softmax's output. A device for speed:
// the S is made (on the heap) the first time a node holds one and then kept with the node, its buffers
// included, for the op recorded in that place next step, so a steady-state step saves state without
// allocating. Ops reach it through the Function API's out.saved() (autograd/function.hpp), never directly.

#include <cstddef>
#include <memory>

#include "tapegrad/core/hooks.hpp"

namespace tapegrad {

// The heap bytes of buffers (TensorT, std::vector: anything with capacity() and data()), by capacity, as
// a tape keeps them: what a saved state's heap_bytes() returns for its members, so Tape::bytes() counts
// them (without one, only sizeof(S) is counted).
template <class... Buffers>
std::size_t buffer_bytes(const Buffers&... buffers) {
  return (std::size_t{0} + ... + (buffers.capacity() * sizeof(*buffers.data())));
}

// A saved state's optional hook (core/hooks.hpp: declared, then exactly so): the heap bytes its buffers hold
// (buffer_bytes of them), so Tape::bytes() counts them; without one, only sizeof(S) is counted.
template <class S>
concept ReportsHeapBytes =
    (requires { &S::heap_bytes; }) &&
    hook_signature<"std::size_t heap_bytes() const", decltype(&S::heap_bytes), std::size_t (S::*)() const>();

class SavedState {
 public:
  // This recording's S: the one kept from the last step if this node held an S then (its buffers and
  // values as they were left), else a new S{} (dropping another type's: the graph changed).
  template <class S>
  S& hold() {
    if (type_ != &tag<S>) {
      heap_ = std::make_unique<Heap<S>>();
      type_ = &tag<S>;
    }
    now_ = &tag<S>;
    return static_cast<Heap<S>&>(*heap_).state;
  }
  // The S this recording's forward saved, or nullptr if it saved none or another type.
  template <class S>
  S* get() {
    return now_ == &tag<S> ? &static_cast<Heap<S>&>(*heap_).state : nullptr;
  }
  void new_recording() { now_ = nullptr; }  // the node is about to hold another op's record
  // The heap bytes held.
  std::size_t heap_bytes() const { return heap_ ? heap_->bytes() : 0; }

 private:
  struct HeapBase {
    virtual ~HeapBase() = default;
    virtual std::size_t bytes() const = 0;
  };
  template <class S>
  struct Heap final : HeapBase {
    S state{};
    std::size_t bytes() const override {
      if constexpr (ReportsHeapBytes<S>)
        return sizeof(*this) + state.heap_bytes();
      else
        return sizeof(*this);
    }
  };
  template <class S>
  static constexpr char tag = 0;  // one address per type: get<S>() compares a pointer

  std::unique_ptr<HeapBase> heap_;
  const char* type_ = nullptr;  // the type held
  const char* now_ = nullptr;   // the type this recording's forward saved (type_), or nullptr
};

}  // namespace tapegrad
