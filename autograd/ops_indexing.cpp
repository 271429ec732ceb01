// Column slices and concatenation (attention heads), row gather (embedding lookup), one row per sequence
// (pick_positions), and reshape (the same elements under another shape).
#include <vector>

#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {
namespace {

// C = X[..., begin:begin+count];  dX[..., begin:begin+count] += dC
template <class T>
struct SliceCols {
  static constexpr const char* name = "slice_cols";
  static constexpr const char* inputs[] = {"x"};
  struct Saved {
    Index begin = 0;
  };
  Index begin = 0, count = 0;

  void forward(Output<T, Saved>& out, const TensorT<T>& x) const {
    const Shape s = x.shape();
    if (begin < 0 || count < 0 || begin > s.cols || count > s.cols - begin) {  // not begin + count: it may overflow
      Index end = 0;
      const std::string end_text =
          __builtin_add_overflow(begin, count, &end) ? fmt::format("{} + {}", begin, count) : fmt::format("{}", end);
      fail<ShapeError>("slice_cols: columns [{}, {}) are outside x, which is {} ({} columns)", begin, end_text, s,
                       s.cols);
    }
    const Shape shape{s.rank, s.batch, s.rows, count};
    TensorT<T>& C = out.make(shape, false);
    out.saved().begin = begin;
    parallel_rows(shape.flat_rows(), count, [&](Index r, Index k) {
      C.flat().middleRows(r, k) = x.flat().middleRows(r, k).middleCols(begin, count);
    });
  }
  static void backward(const Output<T, Saved>& out, const OpInput<T>& x) {
    TensorT<T>* dX = detail::pieces(x.grad).zeroed();  // a band of columns: the rest stay zero
    if (!dX) return;
    const Index from = out.saved().begin;
    const TensorT<T>& dC = out.grad();
    parallel_rows(dC.shape().flat_rows(), dC.cols(), [&](Index r, Index k) {
      dX->flat().middleRows(r, k).middleCols(from, dC.cols()) += dC.flat().middleRows(r, k);
    });
  }
};

// C = [P0 P1 ...] along the columns;  dPk += the columns of dC that Pk filled
template <class T>
struct ConcatCols {
  static constexpr const char* name = "concat_cols";
  static constexpr const char* inputs[] = {"part"};

  void forward(Output<T>& out, const ValueList<T>& parts) const {
    const Shape first = parts[0].shape();
    Shape shape{first.rank, first.batch, first.rows, 0};
    for (std::size_t k = 0; k < parts.size(); ++k) {
      const Shape& s = parts[k].shape();
      if (s.rank != first.rank || s.batch != first.batch || s.rows != first.rows)
        fail<ShapeError>("concat_cols: part {} is {} but part 0 is {}; parts must share batch and rows", k, s, first);
      shape.cols += s.cols;
    }
    TensorT<T>& C = out.make(shape, false);
    parallel_rows(shape.flat_rows(), shape.cols, [&](Index r, Index k) {
      Index offset = 0;
      for (std::size_t p = 0; p < parts.size(); ++p) {
        const TensorT<T>& P = parts[p];
        C.flat().middleRows(r, k).middleCols(offset, P.cols()) = P.flat().middleRows(r, k);
        offset += P.cols();
      }
    });
  }
  static void backward(const Output<T>& out, const InputList<T>& parts) {
    const TensorT<T>& dC = out.grad();
    Index at = 0;
    for (std::size_t k = 0; k < parts.size(); ++k) {
      const OpInput<T> part = parts[k];
      const Index width = part.value.cols();
      if (const GradWrite<T> dP = detail::pieces(part.grad))
        parallel_rows(dC.shape().flat_rows(), width, [&](Index r, Index rows) {
          dP.add(dP.tensor->flat().middleRows(r, rows), dC.flat().middleRows(r, rows).middleCols(at, width));
        });
      at += width;
    }
  }
};

// C[i] = table[ids[i]];  dtable[ids[i]] += dC[i] (scatter-add: repeated ids accumulate)
template <class T>
struct GatherRows {
  static constexpr const char* name = "gather_rows";
  static constexpr const char* inputs[] = {"table"};
  struct Saved {
    std::vector<std::int32_t> ids;  // the rows the forward picked, one per output row
    std::size_t heap_bytes() const { return buffer_bytes(ids); }
  };
  const Ids* ids = nullptr;

  void forward(Output<T, Saved>& out, const TensorT<T>& table) const {
    const Shape s = table.shape();
    if (s.rank != 2) fail<ShapeError>("gather_rows: the table must be 2-D (rows, cols), but it is {}", s);
    if (ids->rank() == 3) fail<ShapeError>("gather_rows: ids are {}; they must be (N) or (batch, rows)", ids->shape());
    for (Index i = 0; i < ids->numel(); ++i)
      if ((*ids)[i] < 0 || (*ids)[i] >= s.rows)
        fail<ValueError>("gather_rows: id {} at position {} is outside the table's {} rows", (*ids)[i], i, s.rows);
    const Shape shape =
        ids->rank() == 2 ? Shape::batched(ids->rows(), ids->cols(), s.cols) : Shape::mat(ids->cols(), s.cols);
    auto C = out.make(shape, false).flat();
    const auto Tab = table.mat();
    for (Index i = 0; i < ids->numel(); ++i) C.row(i) = Tab.row((*ids)[i]);
    if (out.needs_grad()) out.saved().ids.assign(ids->data(), ids->data() + ids->numel());
  }
  static void backward(const Output<T, Saved>& out, const OpInput<T>& table) {
    TensorT<T>* dTab = detail::pieces(table.grad).zeroed();  // the picked rows only
    if (!dTab) return;
    const auto& picked = out.saved().ids;
    const auto dC = out.grad().flat();
    for (Index i = 0; i < dC.rows(); ++i) dTab->mat().row(picked[static_cast<std::size_t>(i)]) += dC.row(i);
  }
};

// C = X viewed as `shape` (row-major order kept);  dX += dC viewed as X's shape
template <class T>
struct Reshape {
  static constexpr const char* name = "reshape";
  static constexpr const char* inputs[] = {"x"};
  Shape shape;

  void forward(Output<T>& out, const TensorT<T>& x) const {
    const Shape s = x.shape();
    if (!shape.valid())
      fail<ShapeError>("reshape: the new shape is invalid (rank {}, batch {}, rows {}, cols {})", shape.rank,
                       shape.batch, shape.rows, shape.cols);
    if (shape.numel() != s.numel())
      fail<ShapeError>("reshape: x is {} ({} elements) but the new shape {} holds {}", s, s.numel(), shape,
                       shape.numel());
    // A copy, not a view: a node owns its value buffer (TensorT cannot alias another's), and sharing one
    // would need the tape to track which node owns it. The copy is one pass into a reused buffer.
    out.make(shape, false).array() = x.array();
  }
  static void backward(const Output<T>& out, const OpInput<T>& x) { x.grad.add(out.grad().array()); }
};

// [readme:op]
// C[b] = X[b, p_b] (x (B, T, D), positions (B) -> (B, D));  dX[b, p_b] += dC[b], the other rows get nothing
template <class T>
struct PickPositions {
  static constexpr const char* name = "pick_positions";
  static constexpr const char* inputs[] = {"x"};
  struct Saved {
    std::vector<std::int32_t> positions;  // the row each batch item picked, as the forward read them
    std::size_t heap_bytes() const { return buffer_bytes(positions); }  // for Tape::bytes()
  };
  const Ids* positions = nullptr;  // a setting, read by the forward

  void forward(Output<T, Saved>& out, const TensorT<T>& x) const {
    const Shape s = x.shape();
    if (s.rank != 3) fail<ShapeError>("pick_positions: x is {}; it must be batched (batch, positions, cols)", s);
    if (positions->rank() != 1 || positions->cols() != s.batch)
      fail<ShapeError>("pick_positions: positions are {} but x is {}; give one position per batch item: {}",
                       positions->shape(), s, s.batch);
    for (Index b = 0; b < s.batch; ++b)
      if ((*positions)[b] < 0 || (*positions)[b] >= s.rows)
        fail<ValueError>("pick_positions: position {} of batch item {} is outside [0, {}): x is {}", (*positions)[b], b,
                         s.rows, s);
    auto C = out.make(Shape::mat(s.batch, s.cols), false).mat();  // (B, D); made once every check has passed
    for (Index b = 0; b < s.batch; ++b) C.row(b) = x.mat(b).row((*positions)[b]);
    if (out.needs_grad()) out.saved().positions.assign(positions->data(), positions->data() + positions->numel());
  }
  static void backward(const Output<T, Saved>& out, const OpInput<T>& x) {
    TensorT<T>* dX = detail::pieces(x.grad).zeroed();  // only the picked rows are added to: the rest stay zero
    if (!dX) return;
    const auto& picked = out.saved().positions;
    const auto dC = out.grad().mat();  // (B, D)
    for (Index b = 0; b < dC.rows(); ++b) dX->mat(b).row(picked[static_cast<std::size_t>(b)]) += dC.row(b);
  }
};

}  // namespace

template <class T>
Var<T> pick_positions(Var<T> x, const Ids& positions, Where where) {
  return apply(PickPositions<T>{.positions = &positions}, {x}, where);
}
// [readme:op-end]

template <class T>
Var<T> slice_cols(Var<T> x, Index begin, Index count, Where where) {
  return apply(SliceCols<T>{.begin = begin, .count = count}, {x}, where);
}

template <class T>
Var<T> concat_cols(std::span<const Var<T>> parts, Where where) {
  return apply_list(ConcatCols<T>{}, parts, where);
}

template <class T>
Var<T> gather_rows(Var<T> table, const Ids& ids, Where where) {
  return apply(GatherRows<T>{.ids = &ids}, {table}, where);
}

template <class T>
Var<T> reshape(Var<T> x, Shape shape, Where where) {
  return apply(Reshape<T>{.shape = shape}, {x}, where);
}

template Var<float> slice_cols(Var<float>, Index, Index, Where);
template Var<double> slice_cols(Var<double>, Index, Index, Where);
template Var<float> concat_cols(std::span<const Var<float>>, Where);
template Var<double> concat_cols(std::span<const Var<double>>, Where);
template Var<float> gather_rows(Var<float>, const Ids&, Where);
template Var<double> gather_rows(Var<double>, const Ids&, Where);
template Var<float> reshape(Var<float>, Shape, Where);
template Var<double> reshape(Var<double>, Shape, Where);
template Var<float> pick_positions(Var<float>, const Ids&, Where);
template Var<double> pick_positions(Var<double>, const Ids&, Where);

}  // namespace tapegrad
