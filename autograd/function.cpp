#include "tapegrad/autograd/function.hpp"

namespace tapegrad::detail {

void refuse_function(const char* op, const char* what) { fail<UsageError>("{}: {}", op, what); }

void refuse_gradient_shape(const char* op, const char* input, Index rows, Index cols, const Shape& shape) {
  fail<ShapeError>("{}: backward gave a {}x{} gradient for {}, which is {} ({} elements in order, or {}x{} rows)",
                   op, rows, cols, input, shape, shape.numel(), shape.flat_rows(), shape.cols);
}

void refuse_gradient_part(const char* op, const char* input, Index values, const Shape& shape) {
  fail<ShapeError>("{}: backward gave {} values for a range of the gradient of {}, which is {}; part(from, count) "
                   "must give count values",
                   op, values, input, shape);
}

}  // namespace tapegrad::detail
