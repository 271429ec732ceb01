// Column slices and concatenation (attention heads), row gather (embedding lookup).
#include <vector>

#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/core/parallel.hpp"

namespace tapegrad {
namespace {

struct SliceSaved {
  Index begin = 0;
};

struct GatherSaved {
  std::vector<std::int32_t> ids;  // the rows the forward picked, one per output row
  std::size_t heap_bytes() const { return buffer_bytes(ids); }
};

}  // namespace

// C = X[..., begin:begin+count];  dX[..., begin:begin+count] += dC
template <class T>
Var<T> slice_cols(Var<T> x, Index begin, Index count, Where where) {
  Tape<T>& t = Tape<T>::of("slice_cols", {{"x", x}});
  const Shape s = t.node(x).val().shape();
  if (begin < 0 || count < 0 || begin > s.cols || count > s.cols - begin) {  // not begin + count: it may overflow
    Index end = 0;
    const std::string end_text = __builtin_add_overflow(begin, count, &end) ? fmt::format("{} + {}", begin, count)
                                                                            : fmt::format("{}", end);
    fail<ShapeError>("slice_cols: columns [{}, {}) are outside x, which is {} ({} columns)", begin, end_text, s, s.cols);
  }
  Shape out = s;
  out.cols = count;
  Node<T>& n = t.record("slice_cols", {x}, out, where);
  n.template save<SliceSaved>().begin = begin;
  const TensorT<T>& X = t.node(x).val();
  parallel_rows(out.flat_rows(), count, [&](Index r, Index k) {
    n.value.flat().middleRows(r, k) = X.flat().middleRows(r, k).middleCols(begin, count);
  });
  n.backward = [](Tape<T>& tp, Node<T>& node) {
    const Index from = node.template saved<SliceSaved>().begin;
    const TensorT<T>& dC = node.grad;
    if (auto* dX = tp.input_node(node, 0).grad_sink())
      parallel_rows(dC.shape().flat_rows(), dC.cols(), [&](Index r, Index k) {
        dX->flat().middleRows(r, k).middleCols(from, dC.cols()) += dC.flat().middleRows(r, k);
      });
  };
  return t.commit(n);
}

// C = [P0 P1 ...] along the columns;  dPk += the columns of dC that Pk filled
template <class T>
Var<T> concat_cols(std::span<const Var<T>> parts, Where where) {
  if (parts.empty()) fail<ShapeError>("concat_cols: no parts to concatenate");
  Tape<T>& t = Tape<T>::of("concat_cols", {{"part 0", parts[0]}});
  const Shape first = t.node(parts[0]).val().shape();
  Shape out = first;
  out.cols = 0;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    t.check(parts[k], "concat_cols", "part", static_cast<Index>(k));
    const Shape& s = t.node(parts[k]).val().shape();
    if (s.rank != first.rank || s.batch != first.batch || s.rows != first.rows)
      fail<ShapeError>("concat_cols: part {} is {} but part 0 is {}; parts must share batch and rows", k, s, first);
    out.cols += s.cols;
  }
  Node<T>& n = t.record("concat_cols", parts, out, where);
  parallel_rows(out.flat_rows(), out.cols, [&](Index r, Index k) {
    Index offset = 0;
    for (const Var<T>& p : parts) {
      const TensorT<T>& P = t.node(p).val();
      n.value.flat().middleRows(r, k).middleCols(offset, P.cols()) = P.flat().middleRows(r, k);
      offset += P.cols();
    }
  });
  n.backward = [](Tape<T>& tp, Node<T>& node) {
    Index at = 0;
    const TensorT<T>& dC = node.grad;
    for (std::uint32_t k = 0; k < node.input_count; ++k) {
      Node<T>& in = tp.input_node(node, k);
      const Index width = in.val().cols();
      if (const auto dP = in.grad_whole())
        parallel_rows(dC.shape().flat_rows(), width, [&](Index r, Index rows) {
          write_grad(dP.grad->flat().middleRows(r, rows), dC.flat().middleRows(r, rows).middleCols(at, width), dP.assign);
        });
      at += width;
    }
  };
  return t.commit(n);
}

// C[i] = table[ids[i]];  dtable[ids[i]] += dC[i] (scatter-add: repeated ids accumulate)
template <class T>
Var<T> gather_rows(Var<T> table, const Ids& ids, Where where) {
  Tape<T>& t = Tape<T>::of("gather_rows", {{"table", table}});
  const Shape s = t.node(table).val().shape();
  if (s.rank != 2) fail<ShapeError>("gather_rows: the table must be 2-D (rows, cols), but it is {}", s);
  if (ids.rank() == 3) fail<ShapeError>("gather_rows: ids are {}; they must be (N) or (batch, rows)", ids.shape());
  for (Index i = 0; i < ids.numel(); ++i)
    if (ids[i] < 0 || ids[i] >= s.rows)
      fail<ValueError>("gather_rows: id {} at position {} is outside the table's {} rows", ids[i], i, s.rows);
  const Shape out = ids.rank() == 2 ? Shape::batched(ids.rows(), ids.cols(), s.cols) : Shape::mat(ids.cols(), s.cols);
  Node<T>& n = t.record("gather_rows", {table}, out, where);
  const auto Tab = t.node(table).val().mat();
  auto C = n.value.flat();
  for (Index i = 0; i < ids.numel(); ++i) C.row(i) = Tab.row(ids[i]);
  if (n.requires_grad) n.template save<GatherSaved>().ids.assign(ids.data(), ids.data() + ids.numel());
  n.backward = [](Tape<T>& tp, Node<T>& node) {
    TensorT<T>* dTab = tp.input_node(node, 0).grad_sink();
    if (!dTab) return;
    const auto& picked = node.template saved<GatherSaved>().ids;
    const auto dC = node.grad.flat();
    for (Index i = 0; i < dC.rows(); ++i) dTab->mat().row(picked[static_cast<std::size_t>(i)]) += dC.row(i);
  };
  return t.commit(n);
}

#define TAPEGRAD_INSTANTIATE(T)                                          \
  template Var<T> slice_cols(Var<T>, Index, Index, Where);              \
  template Var<T> concat_cols(std::span<const Var<T>>, Where);          \
  template Var<T> gather_rows(Var<T>, const Ids&, Where);
TAPEGRAD_INSTANTIATE(float)
TAPEGRAD_INSTANTIATE(double)
#undef TAPEGRAD_INSTANTIATE  // each file its own: the library is built several files to a unit

}  // namespace tapegrad
