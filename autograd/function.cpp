#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/activation_checkpoint.hpp"

namespace tapegrad::detail {

void refuse_function(const char* op, const char* what) { fail<UsageError>("{}: {}", op, what); }

void refuse_saved(const std::string& op) {
  fail<UsageError>(
      "saved: the backward rule of {} asked for saved state that its forward did not save in this "
      "recording; save it in the forward (out.saved())",
      op);
}

void refuse_gradient_shape(const char* op, const char* input, Index rows, Index cols, const Shape& shape) {
  fail<ShapeError>("{}: backward gave a {}x{} gradient for {}, which is {} ({} elements in order, or {}x{} rows)", op,
                   rows, cols, input, shape, shape.numel(), shape.flat_rows(), shape.cols);
}

void require_row_entries(const char* op, const Shape& x, const char* what) {
  if (x.cols == 0) fail<ShapeError>("{}: x is {}; its rows have no entries to {}", op, x, what);
}

void refuse_piece(const char* op, const char* input, Index rows, Index cols, Index piece_rows, Index piece_cols,
                  const Shape& shape) {
  if (rows != piece_rows || cols != piece_cols)
    fail<ShapeError>("{}: backward wrote {}x{} values into a {}x{} piece of the gradient of {}, which is {}", op, rows,
                     cols, piece_rows, piece_cols, input, shape);
  fail<ShapeError>("{}: backward wrote a {}x{} piece outside the gradient of {}, which is {}", op, rows, cols, input,
                   shape);
}

void refuse_recompute(const Shape& first, const Shape& again) {
  if (first != again)
    fail<UsageError>(
        "checkpoint: the region gave a {} output when recomputed in backward but {} in the forward; it "
        "must compute the same thing both times",
        again, first);
  fail<UsageError>(
      "checkpoint: the region's output recomputed in backward differs from its forward's; it must "
      "compute the same thing both times: pass the random stream it draws from (dropout) as checkpoint's "
      "rng, and change nothing it reads before backward");
}

}  // namespace tapegrad::detail
