// Multi-head scaled dot-product attention, fused (see autograd/ops.hpp). Legend: B batch, Tq queries,
// Tk keys, H heads, dk = width of a head of q and k, dv = width of a head of v; item i = b H + h is batch
// item b's head h.
#include <algorithm>
#include <cmath>
#include <vector>

#include "tapegrad/autograd/function.hpp"
#include "tapegrad/autograd/gemm.hpp"
#include "tapegrad/autograd/kernels.hpp"
#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {
namespace {

using detail::ProductForm;

// Where one item's operands live: row-major blocks inside q, k, v and out, read in place.
struct Layout {
  Index batch, tq, tk, heads, dk, dv;
  Index q_width() const { return heads * dk; }
  Index v_width() const { return heads * dv; }
  // The first element of item i's head in a (B, T, width) tensor whose heads are `head` wide.
  Index offset(Index item, Index rows, Index head) const {
    return (item / heads) * rows * heads * head + (item % heads) * head;
  }
  Index items() const { return batch * heads; }
  double macs_per_item() const { return detail::product_macs(1, tq, tk, dk + dv); }
};

// Item i's (Tq, Tk) block of weights starts at i * block_stride(l), a multiple of 16 elements (64 bytes,
// the alignment of a fresh buffer): Eigen's vectorised exp peels scalar elements off the front of an
// unaligned row, and scalar and vectorised exp differ in the last bit, so a block must sit at the same
// alignment wherever it is computed (kept for backward, or in scratch when nothing is recorded).
Index block_stride(const Layout& l) { return (l.tq * l.tk + 15) / 16 * 16; }

// ---- what a mask lets the products skip -----------------------------------------------------------
// A blocked weight is exactly 0, so a key that no query of a block of rows sees adds nothing to those
// rows, and a query that sees none of a block of keys adds nothing to their gradients. Under a causal
// mask the first block of 64 queries sees only the first 64 keys: over T = 128, a quarter of every
// product of the attention is zeros, over T = 256 three eighths. The products below skip them in blocks
// of kSkip rows, keys and depth, where the gemm's own blocks fall (autograd/gemm.hpp): rows split at
// multiples of 64 and a depth cut where only zeros follow give every element the bits of the whole product,
// with either kind of kernel, and so does a depth started late where only zeros precede, from where
// product_depth_start allows; the scores' columns are cut with libxsmm's kernels only
// (product_columns_separable). So the
// values and gradients are the unskipped op's, bit for bit (tests/test_attention.cpp compares them with
// the composition of matmul_bt, softmax_rows and matmul); only a NaN or Inf among a value's or a key's
// entries that no query of a block sees no longer reaches that block's outputs (0 x NaN is NaN).
constexpr Index kSkip = 64;

Index blocks_of(Index n) { return (n + kSkip - 1) / kSkip; }

// For one item: keys_seen[rb], the keys [0, keys_seen) that the queries of row block rb see (rounded up to
// a block, at most Tk); query_start[kb], the query from which key block kb's gradient products run: the
// first row of the first block of queries that sees one of its keys, moved earlier where the gemm's depth
// blocks ask it (product_depth_start), Tq if no query sees one. Returns whether any product is cut short.
bool block_reach(const detail::MaskRow* rows, Index tq, Index tk, Index* keys_seen, Index* query_start) {
  for (Index kb = 0; kb < blocks_of(tk); ++kb) query_start[kb] = tq;
  for (Index rb = 0; rb < blocks_of(tq); ++rb) {
    Index reach = 0;
    for (Index r = rb * kSkip; r < std::min(tq, (rb + 1) * kSkip); ++r) reach = std::max(reach, rows[r].reach);
    keys_seen[rb] = std::min(tk, blocks_of(reach) * kSkip);
    for (Index kb = 0; kb < blocks_of(reach); ++kb) query_start[kb] = std::min(query_start[kb], rb * kSkip);
  }
  bool skips = false;
  for (Index rb = 0; rb < blocks_of(tq); ++rb) skips = skips || keys_seen[rb] < tk;
  for (Index kb = 0; kb < blocks_of(tk); ++kb) {
    if (query_start[kb] < tq) query_start[kb] = detail::product_depth_start(tq, query_start[kb]);
    skips = skips || query_start[kb] > 0;
  }
  return skips;
}

// One set of reach: a row block's keys_seen for each block of queries, then query_start for each of keys.
Index reach_size(const Layout& l) { return blocks_of(l.tq) + blocks_of(l.tk); }

// Item i's keys_seen, then query_start, in `reach` (block_reach): one set per batch item for a mask of
// the batch's shape, else one for all.
const Index* reach_of(const Index* reach, const Layout& l, bool per_item, Index item) {
  return reach + (per_item ? item / l.heads : 0) * reach_size(l);
}

// `count` rows of `width` zeros, `stride` apart: a block of a result that no product reaches.
template <class T>
void zero_rows(T* rows, Index count, Index width, Index stride) {
  for (Index r = 0; r < count; ++r) std::fill_n(rows + r * stride, width, T(0));
}

// The calling thread's buffer for one item's (Tq, Tk) block (autograd/kernels.hpp).
template <class T>
T* block_scratch(const Layout& l) {
  return detail::thread_scratch<T>(detail::Scratch::attention_block, static_cast<std::size_t>(l.tq * l.tk));
}

// Runs body(item, may_split) for every item: items over the threads when there are several and it pays,
// else one item's products and softmax may split their rows. Each item writes its own blocks only, so
// the result is the same at any thread count.
template <class F>
void for_each_item(const Layout& l, double macs, F&& body) {
  const Index items = l.items();
  parallel_for(items, items > 1 ? threads_for_product(macs) : 1, [&](Index first, Index last) {
    for (Index i = first; i < last; ++i) body(i, items == 1);
  });
}

// The layout of attention(q, k, v), or a ShapeError naming the shapes.
Layout attention_layout(const Shape& q, const Shape& k, const Shape& v, Index heads) {
  if (q.rank == 1 || q.rank != k.rank || q.rank != v.rank || q.batch != k.batch || q.batch != v.batch)
    fail<ShapeError>(
        "attention: q is {}, k is {} and v is {}; they must all be (batch, tokens, width) or all "
        "(tokens, width), with one batch size",
        q, k, v);
  if (k.rows != v.rows)
    fail<ShapeError>("attention: k is {} but v is {}; keys and values must have the same tokens", k, v);
  if (heads < 1) fail<ValueError>("attention: heads must be >= 1, got {}", heads);
  if (q.cols != k.cols || q.cols % heads != 0 || v.cols % heads != 0)
    fail<ShapeError>(
        "attention: q is {}, k is {} and v is {} for {} heads; q and k must have the same width, and "
        "q's and v's widths must be multiples of the heads",
        q, k, v, heads);
  return {q.rank == 3 ? q.batch : 1, q.rows, k.rows, heads, q.cols / heads, v.cols / heads};
}

// out_h = softmax(scale Q_h K_h^T, mask) V_h per batch item and head (see ops.hpp), then its backward rule.
template <class T>
struct Attention {
  static constexpr const char* name = "attention";
  static constexpr const char* inputs[] = {"q", "k", "v"};
  // What the backward rule needs: the layout, the scale and every item's weights (the softmax output);
  // where the mask lets the products skip (block_reach, reach_of); `reach` is empty when nothing is skipped.
  struct Saved {
    Layout layout{};
    double scale = 1;
    std::vector<T, AlignedAllocator<T>> weights;  // item i's (Tq, Tk) at i * block_stride
    std::vector<Index> reach;
    bool per_item_reach = false;  // one set of reach per batch item (else one for all)
    std::size_t heap_bytes() const { return buffer_bytes(weights, reach); }
  };
  Index heads = 1;
  const Mask* mask = nullptr;
  double scale = 1;
  std::span<TensorT<T>> weights;

  void forward(Output<T, Saved>& out, const TensorT<T>& Q, const TensorT<T>& K, const TensorT<T>& V) const {
    const Shape sq = Q.shape(), sk = K.shape(), sv = V.shape();
    const Layout l = attention_layout(sq, sk, sv, heads);
    if (mask && mask->shape() != Shape::mat(l.tq, l.tk) && mask->shape() != Shape::batched(l.batch, l.tq, l.tk))
      fail<ShapeError>(
          "attention: the mask is {} but q is {} and k is {}; it must be {}x{} (shared by the batch) or "
          "{}x{}x{}",
          mask->shape(), sq, sk, l.tq, l.tk, l.batch, l.tq, l.tk);
    if (!(scale > 0) || !std::isfinite(scale))
      fail<ValueError>("attention: the scale must be positive and finite, got {}", scale);
    if (!weights.empty() && static_cast<Index>(weights.size()) != heads)
      fail<ValueError>("attention: {} tensors given for the weights of {} heads", weights.size(), heads);
    const Shape shape = sq.rank == 3 ? Shape::batched(l.batch, l.tq, l.v_width()) : Shape::mat(l.tq, l.v_width());
    for (auto& w : weights) w.resize(sq.rank == 3 ? Shape::batched(l.batch, l.tq, l.tk) : Shape::mat(l.tq, l.tk));

    TensorT<T>& output = out.make(shape, false);
    Saved* const saved = out.needs_grad() ? &out.saved() : nullptr;
    const Index wq = l.q_width(), wv = l.v_width();
    // What each row of the mask leaves open (the softmax skips what it blocks), read once for every item.
    const bool per_item_mask = mask && mask->rank() == 3;
    const detail::MaskRow* open = mask ? detail::read_mask_rows(*mask) : nullptr;
    // Where the mask lets the products skip (block_reach): not for one item alone, whose whole products
    // split over the threads, where blocks of 64 rows would not.
    const Index reach_sets = per_item_mask ? l.batch : 1, set_size = reach_size(l);
    const auto size = static_cast<std::size_t>(reach_sets * set_size);
    Index* reach = nullptr;
    if (mask && l.tk > 0 && l.items() > 1 && l.tq > 0) {
      reach = detail::thread_scratch<Index>(detail::Scratch::attention_reach, size);
      bool skips = false;
      for (Index set = 0; set < reach_sets; ++set) {
        Index* keys_seen = reach + set * set_size;
        skips = block_reach(open + set * l.tq, l.tq, l.tk, keys_seen, keys_seen + blocks_of(l.tq)) || skips;
      }
      if (!skips) reach = nullptr;
    }
    if (saved) {  // for backward: every item's weights, and the reach (empty: no skip), in last step's buffers
      saved->layout = l;
      saved->scale = scale;
      saved->weights.resize(static_cast<std::size_t>(l.items() * block_stride(l)));  // grows once, then stays
      saved->reach.assign(reach, reach + (reach ? size : 0));
      saved->per_item_reach = per_item_mask;
    }
    const bool cut_columns = detail::product_columns_separable();
    const auto attend = [&](Index i, bool may_split) {
      T* p = saved ? saved->weights.data() + i * block_stride(l) : block_scratch<T>(l);  // S, then P (Tq, Tk)
      const Index oq = l.offset(i, l.tq, l.dk), ok = l.offset(i, l.tk, l.dk);
      const Index ov = l.offset(i, l.tk, l.dv), oo = l.offset(i, l.tq, l.dv);
      const Index first_mask_row = per_item_mask ? (i / heads) * l.tq : 0;
      const detail::RowMask m =
          mask ? detail::RowMask{mask->data() + first_mask_row * l.tk, open + first_mask_row, l.tq} : detail::RowMask{};
      // Each block of queries over the keys it sees (block_reach), or without a reach one block of every
      // query and key. The scores past them are not computed: the softmax reads a row only up to its last
      // open key (exp_end rounds up to 16 entries, within the block). A reach exists for several items only.
      const Index all_keys = l.tk, row_step = reach ? kSkip : l.tq;
      const Index* keys_seen = reach ? reach_of(reach, l, per_item_mask, i) : &all_keys;
      for (Index rb = 0, r0 = 0; r0 < l.tq; ++rb, r0 += row_step) {
        const Index rows = std::min(row_step, l.tq - r0), cols = cut_columns ? keys_seen[rb] : l.tk;
        if (cols > 0)
          detail::gemm<T>(ProductForm::abt, rows, cols, l.dk, {Q.data() + oq + r0 * wq, wq}, {K.data() + ok, wq},
                          p + r0 * l.tk, l.tk, false, may_split);
      }
      detail::softmax_forward(p, p, l.tq, l.tk, static_cast<T>(scale), m, may_split);
      for (Index rb = 0, r0 = 0; r0 < l.tq; ++rb, r0 += row_step) {
        const Index rows = std::min(row_step, l.tq - r0), depth = keys_seen[rb];
        T* o = output.data() + oo + r0 * wv;
        if (depth > 0)
          detail::gemm<T>(ProductForm::ab, rows, l.dv, depth, {p + r0 * l.tk, l.tk}, {V.data() + ov, wv}, o, wv, false,
                          may_split);
        else
          zero_rows(o, rows, l.dv, wv);
      }
      if (!weights.empty())
        std::copy_n(p, l.tq * l.tk, weights[static_cast<std::size_t>(i % heads)].data() + (i / heads) * l.tq * l.tk);
    };
    if (l.tq == 0 || l.tk == 0)  // no query, or no key to attend to: zero outputs, and no block to compute
      output.set_zero();
    else
      for_each_item(l, static_cast<double>(l.items()) * l.macs_per_item(), attend);
  }
  // Forward was, per item, S = Q_h K_h^T, P = softmax(s S), O_h = P V_h. So now:
  //   dV_h += P^T dO_h;  dP = dO_h V_h^T;  dS = s P (dP - rowsum(dP P));  dQ_h += dS K_h;  dK_h += dS^T Q_h.
  // The gradients are taken in the order of the writes, v, q, k: when q, k and v are one node
  // (parameter-free attention), its first role assigns and the others add.
  static void backward(const Output<T, Saved>& out, const OpInput<T>& q_in, const OpInput<T>& k_in,
                       const OpInput<T>& v_in) {
    const Saved& saved = out.saved();
    const Layout l = saved.layout;
    const GradWrite<T> dv = detail::pieces(v_in.grad), dq = detail::pieces(q_in.grad), dk = detail::pieces(k_in.grad);
    if (!dv && !dq && !dk) return;
    if (l.tq == 0 || l.tk == 0) {  // no query or no key: nothing flows back, but a first write must write
      for (const GradWrite<T>* w : {&dv, &dq, &dk})
        if (*w && !w->accumulate) w->tensor->set_zero();
      return;
    }
    const T* q = q_in.value.data();
    const T* k = k_in.value.data();
    const T* v = v_in.value.data();
    const T* dout = out.grad().data();
    const Index wq = l.q_width(), wv = l.v_width();
    const T s = static_cast<T>(saved.scale);
    const bool cut_columns = detail::product_columns_separable();
    for_each_item(l, 2 * static_cast<double>(l.items()) * l.macs_per_item(), [&](Index i, bool may_split) {
      const T* p = saved.weights.data() + i * block_stride(l);  // (Tq, Tk)
      const Index oq = l.offset(i, l.tq, l.dk), ok = l.offset(i, l.tk, l.dk);
      const Index ov = l.offset(i, l.tk, l.dv), oo = l.offset(i, l.tq, l.dv);
      // P was written in the forward pass and has left the cache since (a step's weights outgrow it). The
      // softmax backward reads it front to back, which the prefetchers follow; dV's product, which reads
      // it in 64-column strips, then finds it in cache (bench/attention_bench times the orders). Only the
      // order of the computations differs: each gradient block gets the same value, written in the same
      // order, v, q, k.
      T* ds = block_scratch<T>(l);  // dP (Tq, Tk) = dO_h V_h^T, then dS in place
      // Each block of rows over the keys its queries see, each block of keys over the queries that see it
      // (block_reach); without a reach, one block of every query and key. A block that gets nothing is
      // written 0 where it is assigned. (A reach exists for several items only: may_split is false there.)
      const bool whole = saved.reach.empty();
      const Index row_step = whole ? l.tq : kSkip, key_step = whole ? l.tk : kSkip;
      const Index all_keys[2] = {l.tk, 0};  // keys_seen, then query_start, of the one block
      const Index* keys_seen = whole ? all_keys : reach_of(saved.reach.data(), l, saved.per_item_reach, i);
      const Index* query_start = whole ? all_keys + 1 : keys_seen + blocks_of(l.tq);
      if (dq || dk) {
        for (Index rb = 0, r0 = 0; r0 < l.tq; ++rb, r0 += row_step) {
          const Index rows = std::min(row_step, l.tq - r0), cols = cut_columns ? keys_seen[rb] : l.tk;
          if (cols > 0)
            detail::gemm<T>(ProductForm::abt, rows, cols, l.dv, {dout + oo + r0 * wv, wv}, {v + ov, wv}, ds + r0 * l.tk,
                            l.tk, false, may_split);
          // Past `cols` the weights are 0 and so is dS, whatever dP is; dP is set there only so that the
          // softmax backward's row sums read finite numbers.
          for (Index r = r0; r < r0 + rows; ++r) std::fill(ds + r * l.tk + cols, ds + (r + 1) * l.tk, T(0));
        }
        detail::softmax_backward(p, ds, ds, l.tq, l.tk, s, true, may_split);
      }
      // dV_h = P^T dO_h and dK_h = dS^T Q_h, block of keys by block of keys, each from its query_start: the
      // gradient `w` (rows `stride` apart, from `offset`) of a^T b over the queries.
      const auto key_blocks = [&](const GradWrite<T>& w, const T* a, const T* b, Index stride, Index width,
                                  Index offset) {
        for (Index kb = 0, k0 = 0; k0 < l.tk; ++kb, k0 += key_step) {
          const Index keys = std::min(key_step, l.tk - k0), q0 = query_start[kb];
          T* dst = w.tensor->data() + offset + k0 * stride;
          if (q0 < l.tq)
            detail::gemm<T>(ProductForm::atb, keys, width, l.tq - q0, {a + q0 * l.tk + k0, l.tk},
                            {b + q0 * stride, stride}, dst, stride, w.accumulate, may_split);
          else if (!w.accumulate)
            zero_rows(dst, keys, width, stride);
        }
      };
      if (dv) key_blocks(dv, p, dout + oo, wv, l.dv, ov);
      for (Index rb = 0, r0 = 0; dq && r0 < l.tq; ++rb, r0 += row_step) {  // dQ_h = dS K_h, row block rb
        const Index rows = std::min(row_step, l.tq - r0), depth = keys_seen[rb];
        T* dst = dq.tensor->data() + oq + r0 * wq;
        if (depth > 0)
          detail::gemm<T>(ProductForm::ab, rows, l.dk, depth, {ds + r0 * l.tk, l.tk}, {k + ok, wq}, dst, wq,
                          dq.accumulate, may_split);
        else if (!dq.accumulate)
          zero_rows(dst, rows, l.dk, wq);
      }
      if (dk) key_blocks(dk, ds, q + oq, wq, l.dk, ok);
    });
  }
};

}  // namespace

template <class T>
Var<T> attention(Var<T> q, Var<T> k, Var<T> v, Index heads, const Mask* mask, double scale,
                 std::span<TensorT<T>> weights, Where where) {
  return apply(Attention<T>{.heads = heads, .mask = mask, .scale = scale, .weights = weights}, {q, k, v}, where);
}

template Var<float> attention(Var<float>, Var<float>, Var<float>, Index, const Mask*, double, std::span<TensorT<float>>,
                              Where);
template Var<double> attention(Var<double>, Var<double>, Var<double>, Index, const Mask*, double,
                               std::span<TensorT<double>>, Where);

}  // namespace tapegrad
