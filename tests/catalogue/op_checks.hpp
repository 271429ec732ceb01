#pragma once
// The catalogue of gradient checks over every primitive op: named cases with their input shapes and
// one function per element type, covering masks, broadcasting and batched shapes. The test suite runs
// every case through gradcheck (float64) and compares the float32 forward with the float64 one;
// examples/gradcheck_report prints the same as a table.

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tapegrad/autograd/tape.hpp"

namespace tapegrad {

template <class T>
using OpFn = std::function<Var<T>(Tape<T>&, std::span<const Var<T>>)>;

struct OpCheck {
  std::string op;    // the op under test, as named in autograd/ops.hpp
  std::string name;  // what this case exercises
  std::vector<Shape> inputs;
  OpFn<double> f64;
  OpFn<float> f32;
};

const std::vector<OpCheck>& op_checks();

// Every op autograd/ops.hpp declares; op_checks() covers each of them at least once.
const std::vector<std::string>& op_names();

}  // namespace tapegrad
