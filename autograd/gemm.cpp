#include "tapegrad/autograd/gemm.hpp"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "tapegrad/autograd/kernels.hpp"
#include "tapegrad/core/error.hpp"

#ifdef TAPEGRAD_HAVE_LIBXSMM
#include <libxsmm.h>
#endif

namespace tapegrad::detail {
namespace {

using Form = ProductForm;

template <class T>
using StridedMap = Eigen::Map<RowMatrix<T>, 0, Eigen::OuterStride<>>;
template <class T>
using ConstStridedMap = Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>>;

// out (cols x rows, rows `out_stride` apart) = in (rows x cols, rows `in_stride` apart)^T, in square
// tiles of one SIMD packet's width transposed in registers (Eigen's ptranspose), then what is left in
// tiles of half a packet, and so on down to single elements; an 8 x 16 head (the toy model's) still goes
// by 8 x 8 tiles. Faster than element by element at every head size the attention op transposes (K_h for
// Q K^T): OMP_NUM_THREADS=1 build/bench/attention_bench measures it, docs/performance.md has the figures.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"  // the packet type's alignment attribute, as in Eigen
template <class T, class Packet = typename Eigen::internal::packet_traits<T>::type>
void transpose_into(T* out, Index out_stride, const T* in, Index in_stride, Index rows, Index cols) {
  using namespace Eigen::internal;
  constexpr Index N = unpacket_traits<Packet>::size;
  using Half = typename unpacket_traits<Packet>::half;
  if constexpr (N == 1) {
    for (Index r = 0; r < rows; ++r)
      for (Index c = 0; c < cols; ++c) out[c * out_stride + r] = in[r * in_stride + c];
  } else {
    const Index full_rows = rows / N * N, full_cols = cols / N * N;
    for (Index r0 = 0; r0 < full_rows; r0 += N)
      for (Index c0 = 0; c0 < full_cols; c0 += N) {
        PacketBlock<Packet, N> tile;
        for (Index r = 0; r < N; ++r) tile.packet[r] = ploadu<Packet>(in + (r0 + r) * in_stride + c0);
        ptranspose(tile);
        for (Index c = 0; c < N; ++c) pstoreu(out + (c0 + c) * out_stride + r0, tile.packet[c]);
      }
    // What the tiles left: the columns right of them (all rows), and the rows below them.
    constexpr bool smaller = unpacket_traits<Half>::size < N;
    using Next = std::conditional_t<smaller, Half, T>;
    transpose_into<T, Next>(out + full_cols * out_stride, out_stride, in + full_cols, in_stride, rows,
                            cols - full_cols);
    transpose_into<T, Next>(out + full_rows, out_stride, in + full_rows * in_stride, in_stride, rows - full_rows,
                            full_cols);
  }
}
#pragma GCC diagnostic pop

// The product's shape from its operands': op(A) is m x k, op(B) is k x n.
struct Dims {
  Index m, n, k;
};

// Rows [r0, r1) of C (n wide, rows c_stride apart) += bias, a row of n values: one rounding per element,
// the one a separate add(C, bias) makes. Nothing without a bias.
template <class T>
void add_bias_rows(T* c, Index c_stride, const T* bias, Index r0, Index r1, Index n) {
  if (!bias || r1 <= r0) return;
  StridedMap<T>(c + r0 * c_stride, r1 - r0, n, Eigen::OuterStride<>(c_stride)).rowwise() +=
      Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(bias, n);
}

// ---- Eigen's sequential GEMM with kept buffers ------------------------------------------------------

// Eigen's GEMM packing buffers, kept from product to product (per thread). Eigen's own product makes a
// blocking object per call and takes these from malloc; at a transformer's widths they are large enough
// that glibc maps and unmaps them with every product, and a step would spend its time page-faulting them
// in again (docs/performance.md). The blocking sizes are Eigen's own for the shape (computeProductBlockingSizes,
// one thread, as Eigen's product computes them), so the arithmetic, and every result, is exactly that of
// `C.noalias() += A * B`.
template <class T>
class KeptBlocking : public Eigen::internal::level3_blocking<T, T> {
 public:
  // For a column-major product of (rows x depth) by (depth x cols).
  KeptBlocking(Index rows, Index cols, Index depth) {
    this->m_mc = rows;
    this->m_nc = cols;
    this->m_kc = depth;
    Eigen::internal::computeProductBlockingSizes<T, T, 1>(this->m_kc, this->m_mc, this->m_nc, Index{1});
    this->m_blockA = thread_scratch<T>(Scratch::eigen_packed_lhs, static_cast<std::size_t>(this->m_mc * this->m_kc));
    this->m_blockB = thread_scratch<T>(Scratch::eigen_packed_rhs, static_cast<std::size_t>(this->m_kc * this->m_nc));
  }
};

// C (m x n) += op(A) op(B) through Eigen's sequential GEMM with kept buffers. C is row-major, so the
// product is computed as the column-major C^T = op(B)^T op(A)^T, as Eigen does for a row-major result.
// The blocking is that of a product of `blocking_m` rows (the whole product, when this is a range of its
// rows: see eigen_gemm).
template <class T>
void eigen_gemm_kept(Form form, Dims d, MatrixRef<T> a, MatrixRef<T> b, T* c, Index c_stride, Index blocking_m) {
  using Eigen::ColMajor;
  using Eigen::RowMajor;
  KeptBlocking<T> blocking(d.n, blocking_m, d.k);  // C^T is n x m, depth k
  // C^T (n x m) = op(B)^T (n x k) op(A)^T (k x m). A row-major X read as column-major is X^T: for a b, b
  // (k x n) and a are read column-major; for a^T b, (A^T)^T = A, a (k x m) is read row-major, as stored;
  // for a b^T, (B^T)^T = B, b (n x k) likewise.
  auto run = [&](auto lhs_order, auto rhs_order) {
    constexpr int L = decltype(lhs_order)::value, R = decltype(rhs_order)::value;
    Eigen::internal::general_matrix_matrix_product<Index, T, L, false, T, R, false, ColMajor, 1>::run(
        d.n, d.m, d.k, b.data, b.stride, a.data, a.stride, c, 1, c_stride, T(1), blocking, nullptr);
  };
  using Col = std::integral_constant<int, ColMajor>;
  using Row = std::integral_constant<int, RowMajor>;
  if (form == Form::ab)
    run(Col{}, Col{});
  else if (form == Form::atb)
    run(Col{}, Row{});
  else
    run(Row{}, Col{});
}

// Eigen's kernels. Where Eigen's product would run its GEMM (not a vector product, not the
// coefficient-wise path of tiny products), that GEMM with kept buffers; when split, each thread runs it
// on its rows with the blocking of the whole product, from a row that is a multiple of 16. Eigen's kernel
// sums every element over the depth in an order that depends only on the blocking and on the kind of
// panel the element falls in (full panels of 4 rows of C, or the remainder, handled with other
// accumulators); with the same blocking and ranges that start on panel boundaries, each element is
// summed exactly as on one thread.
constexpr Index kEigenSplitGrain = 16;

template <class T>
void eigen_gemm(Form form, Dims d, MatrixRef<T> a, MatrixRef<T> b, T* c, Index c_stride, bool accumulate,
                bool may_split, const T* bias) {
  if (d.m > 1 && d.n > 1 && d.k > 0 && d.k + d.m + d.n >= EIGEN_GEMM_TO_COEFFBASED_THRESHOLD) {
    parallel_for(
        d.m, may_split ? threads_for_product(product_macs(1, d.m, d.n, d.k)) : 1,
        [&](Index r0, Index r1) {
          T* rows = c + r0 * c_stride;  // C's rows r0..r1; op(A)'s rows are A's rows, or A's columns for a^T b
          if (!accumulate) StridedMap<T>(rows, r1 - r0, d.n, Eigen::OuterStride<>(c_stride)).setZero();
          const MatrixRef<T> a_rows{form == Form::atb ? a.data + r0 : a.data + r0 * a.stride, a.stride};
          eigen_gemm_kept(form, {r1 - r0, d.n, d.k}, a_rows, b, rows, c_stride, d.m);
          add_bias_rows(c, c_stride, bias, r0, r1, d.n);
        },
        kEigenSplitGrain);
    return;
  }
  const SingleThreaded one_thread;  // Eigen's other paths, on this thread
  const Index a_rows = form == Form::atb ? d.k : d.m, a_cols = form == Form::atb ? d.m : d.k;
  const Index b_rows = form == Form::abt ? d.n : d.k, b_cols = form == Form::abt ? d.k : d.n;
  const ConstStridedMap<T> A(a.data, a_rows, a_cols, Eigen::OuterStride<>(a.stride));
  const ConstStridedMap<T> B(b.data, b_rows, b_cols, Eigen::OuterStride<>(b.stride));
  StridedMap<T> C(c, d.m, d.n, Eigen::OuterStride<>(c_stride));
  if (form == Form::ab)
    write_grad(C.noalias(), A * B, !accumulate);
  else if (form == Form::atb)
    write_grad(C.noalias(), A.transpose() * B, !accumulate);
  else
    write_grad(C.noalias(), A * B.transpose(), !accumulate);
  add_bias_rows(c, c_stride, bias, 0, d.m, d.n);
}

// ---- libxsmm's kernels over a grid of blocks --------------------------------------------------------
// libxsmm is column-major: a row-major matrix is its transpose in column-major terms, so the row-major
// C (m x n) = op(A) op(B) is the column-major C^T (n x m) = op(B)^T op(A)^T. A kernel call computes a
// block of C^T of M = at most kBlockCols columns of C by N = at most kBlockRows rows of C, over K = at
// most kBlockDepth of the depth: the first depth block writes C (beta 0: no zero fill first), later
// ones add to it (beta 1: the kernel starts its sums from C and goes on down the depth). Operands are
// read in place through their strides, A transposed by the kernel itself for a^T b (its B operand is
// read transposed); only b of a b^T is transposed into scratch first (n x k values, against m n k
// multiply-adds), because libxsmm 1.17 does not read its A operand transposed.
//
// The grid depends on the product's shape alone, and a split over threads starts on a multiple of
// kBlockRows, so every block is computed by the same kernel whether or not the product is split: that
// is what makes split products bit-identical (libxsmm's kernels are not independent of N: the same
// element of a 64-row and of a 16-row call can differ in the last bit, which a first version that split
// on 16-row boundaries showed). The block sizes are the fastest found for a training step's products
// (bench/gemm_threads prints libxsmm's rate beside Eigen's; docs/performance.md).
constexpr Index kBlockRows = 64, kBlockCols = 64, kBlockDepth = 256;

#ifdef TAPEGRAD_HAVE_LIBXSMM

// A product of at least kPackMinRows rows reads op(B) from column panels packed ahead of its blocks
// (pack_panels): every block of a column re-reads the same kBlockCols x k panel, and in place that
// panel's rows lie b.stride apart, which at a stride of 1024 floats (4 KB) puts 16 of its rows on each
// set of a 512 KB 8-way L2, so it cannot stay there and the kernels wait on memory. Packed, a panel is
// contiguous (docs/performance.md, "Figures behind choices in the code": the rates in place and packed). Only the
// addresses the kernels read change, not what they compute: results are bit for bit those of the unpacked grid.
//
// The same holds for op(A) of a^T b (a weight's gradient, X^T dY), which the kernel reads transposed: a
// block of 64 of C's rows is 64 columns of a, a strip k rows deep and a.stride apart; at a feed-forward's
// width of 1024 floats the strip's rows alias in L1 and L2 as the panels did, and such a gradient runs well
// below its a b forward (docs/performance.md, "Figures behind choices in the code";
// OMP_NUM_THREADS=1 build/bench/step_products).
// So a product of kPackMinRows rows or more, with a's rows 4 KB apart or more, copies each block's strip
// into contiguous scratch (k x 64) before its kernels run, on the thread that runs the block.
constexpr Index kPackMinRows = 4 * kBlockRows;

template <class T>
using Kernel = std::conditional_t<std::is_same_v<T, float>, libxsmm_smmfunction, libxsmm_dmmfunction>;

// What a kernel is generated for: its block shape, the operands' leading dimensions, beta and whether
// its B operand is read transposed.
struct KernelKey {
  Index m = -1, n = -1, k = -1, lda = 0, ldb = 0, ldc = 0;
  bool add = false, transpose_b = false;
  bool operator==(const KernelKey&) const = default;
};

template <class T>
Kernel<T> dispatch(const KernelKey& key) {
  [[maybe_unused]] static const bool initialised = (libxsmm_init(), true);  // once, before the first dispatch
  const auto M = static_cast<libxsmm_blasint>(key.m), N = static_cast<libxsmm_blasint>(key.n),
             K = static_cast<libxsmm_blasint>(key.k), lda = static_cast<libxsmm_blasint>(key.lda),
             ldb = static_cast<libxsmm_blasint>(key.ldb), ldc = static_cast<libxsmm_blasint>(key.ldc);
  const int flags = key.transpose_b ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE;
  const T alpha = 1, beta = key.add ? 1 : 0;
  if constexpr (std::is_same_v<T, float>)
    return libxsmm_smmdispatch(M, N, K, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
  else
    return libxsmm_dmmdispatch(M, N, K, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
}

// libxsmm's dispatch (a lookup in its registry, or the JIT the first time) costs more than a small
// kernel runs, so each thread keeps the kernels it has used in a fixed hash table: nothing is allocated
// after the first step. When the table is full, kernels are dispatched every time (slower, same kernel).
template <class T>
struct KernelEntry {
  KernelKey key;
  Kernel<T> fn = nullptr;
};

template <class T>
Kernel<T> lookup(const KernelKey& key) {
  constexpr std::size_t kSlots = 512, kProbes = 8;
  thread_local KernelEntry<T> table[kSlots];
  const auto u = [](Index v) { return static_cast<std::uint64_t>(v); };
  std::uint64_t h = u(key.m) ^ u(key.n) << 9 ^ u(key.k) << 18 ^ u(key.lda) << 27 ^ u(key.ldb) << 36 ^ u(key.ldc) << 45 ^
                    u(key.add) << 62 ^ u(key.transpose_b) << 63;
  h = (h ^ h >> 31) * 0x9e3779b97f4a7c15ull;
  h ^= h >> 29;
  for (std::size_t probe = 0; probe < kProbes; ++probe) {
    KernelEntry<T>& e = table[(h + probe) % kSlots];
    if (e.fn && e.key == key) return e.fn;
    if (!e.fn) {
      e = {key, dispatch<T>(key)};
      return e.fn;
    }
  }
  return dispatch<T>(key);
}

// The table, behind the last few kernels asked for: a step asks for the same few, item after item (the
// toy model's 32 sequences, each a product of the same shape), and comparing a few keys is cheaper than
// hashing one, which would be a large share of a small product's time.
template <class T>
Kernel<T> kernel(const KernelKey& key) {
  constexpr std::size_t kRecent = 4;
  thread_local KernelEntry<T> recent[kRecent];
  thread_local std::size_t next_recent = 0;
  for (const KernelEntry<T>& e : recent)
    if (e.key == key && e.fn) return e.fn;
  KernelEntry<T>& slot = recent[next_recent++ % kRecent];
  slot = {key, lookup<T>(key)};
  return slot.fn;
}

// The kernels of one product's grid, resolved on the calling thread before any block runs (the threads
// share the pointers): [row block: full, last][column block: full, last][depth block: first, middle,
// last]. `complete` is false if libxsmm could not make one of them; the product then goes to Eigen, as
// the same shape always does.
template <class T>
struct Grid {
  Dims d;
  Kernel<T> fn[2][2][3] = {};
  bool complete = true;

  static int depth_kind(Index p, Index k) { return p == 0 ? 0 : k - p < kBlockDepth ? 2 : 1; }
  Kernel<T> at(Index row, Index col, Index p) const {
    return fn[d.m - row < kBlockRows][d.n - col < kBlockCols][depth_kind(p, d.k)];
  }
};

template <class T>
Grid<T> make_grid(Dims d, Index lda, Index ldb, Index ldc, bool transpose_b) {
  // lda: the kernel's A operand, op(B) as read (b.stride in place, kBlockCols packed).
  Grid<T> g{d};
  for (const Index row : {Index{0}, (d.m - 1) / kBlockRows * kBlockRows})
    for (const Index col : {Index{0}, (d.n - 1) / kBlockCols * kBlockCols})
      for (const Index p : {Index{0}, std::min(kBlockDepth, (d.k - 1) / kBlockDepth * kBlockDepth),
                            (d.k - 1) / kBlockDepth * kBlockDepth}) {
        Kernel<T>& slot = g.fn[d.m - row < kBlockRows][d.n - col < kBlockCols][Grid<T>::depth_kind(p, d.k)];
        if (slot) continue;
        const Index rows = std::min(kBlockRows, d.m - row), cols = std::min(kBlockCols, d.n - col);
        slot = kernel<T>({cols, rows, std::min(kBlockDepth, d.k - p), lda, ldb, ldc, p > 0, transpose_b});
        g.complete = g.complete && slot;
      }
  return g;
}

// op(B) (k x n) as column panels: panel j holds columns [j kBlockCols, (j + 1) kBlockCols) as a k x
// kBlockCols row-major block (the last panel's rows as wide, its unused columns never read), so column
// `col` of row q is at packed[col k + q kBlockCols] for col a multiple of kBlockCols. b is op(B) as
// stored: k x n for a b and a^T b, n x k for a b^T (transposed as it is packed).
template <class T>
void pack_panels(T* packed, Form form, Dims d, MatrixRef<T> b, Index first_panel, Index end_panel) {
  for (Index col = first_panel * kBlockCols; col < std::min(d.n, end_panel * kBlockCols); col += kBlockCols) {
    const Index width = std::min(kBlockCols, d.n - col);
    T* panel = packed + col * d.k;
    if (form == Form::abt)
      transpose_into(panel, kBlockCols, b.data + col * b.stride, b.stride, width, d.k);
    else
      for (Index q = 0; q < d.k; ++q) std::copy_n(b.data + q * b.stride + col, width, panel + q * kBlockCols);
  }
}

// Rows [r0, r1) of C: r0 a multiple of kBlockRows, and r1 one too or the last row (a block is one
// kernel call of the grid's shape: a range ending inside a block would write past it). op(B)'s column
// `col`, row q is at b.data[col col_step + q b.stride]: col_step 1 in place, k packed (pack_panels).
// With a bias, each block of rows gets it added once its last product is written, while it is in cache.
// `pack_a`: for a^T b, each block's strip of a is first copied into the thread's scratch, its rows
// kBlockRows apart (the grid's kernels were made for that stride).
// Columns [c0, c1) of those rows: c0 a multiple of kBlockCols, c1 one too or the last column (all
// columns, when the product is not split into tiles: see xsmm_gemm).
template <class T>
void run_blocks(const Grid<T>& g, Form form, MatrixRef<T> a, MatrixRef<T> b, Index col_step, T* c, Index c_stride,
                Index r0, Index r1, Index c0, Index c1, const T* bias, bool pack_a) {
  const Dims d = g.d;
  assert(r0 % kBlockRows == 0 && (r1 == d.m || r1 % kBlockRows == 0));
  assert(c0 % kBlockCols == 0 && (c1 == d.n || c1 % kBlockCols == 0));
  assert(!pack_a || form == Form::atb);
  T* strip = pack_a ? thread_scratch<T>(Scratch::packed_rows, static_cast<std::size_t>(d.k * kBlockRows)) : nullptr;
  for (Index row = r0; row < r1; row += kBlockRows) {
    // a's columns [row, row + rows) down the whole depth: for a^T b, where this block's B operand lies.
    MatrixRef<T> rows_of_a{a.data + row, a.stride};
    if (pack_a) {
      const Index width = std::min(kBlockRows, d.m - row);
      for (Index q = 0; q < d.k; ++q) std::copy_n(a.data + q * a.stride + row, width, strip + q * kBlockRows);
      rows_of_a = {strip, kBlockRows};
    }
    for (Index col = c0; col < c1; col += kBlockCols)
      for (Index p = 0; p < d.k; p += kBlockDepth) {
        // The kernel's A operand: op(B)^T, column-major (n x k): b (k x n) row-major as stored or packed.
        const T* ka = b.data + col * col_step + p * b.stride;
        // Its B operand: op(A)^T, column-major (k x m): a (m x k) row-major as stored, or for a^T b, a
        // (k x m) read transposed by the kernel.
        const T* kb = form == Form::atb ? rows_of_a.data + p * rows_of_a.stride : a.data + p + row * a.stride;
        g.at(row, col, p)(ka, kb, c + col + row * c_stride);
      }
    add_bias_rows(c + c0, c_stride, bias ? bias + c0 : nullptr, row, std::min(row + kBlockRows, r1), c1 - c0);
  }
}

// C (rows x n, rows c_stride apart) += `out` (rows x n, rows out_stride apart).
template <class T>
void add_rows(T* c, Index c_stride, const T* out, Index out_stride, Index rows, Index n) {
  if (c_stride == n && out_stride == n)  // one contiguous pass: a small product's rows are too short to vectorise well
    ArrayMap<T>(c, rows * n) += ConstArrayMap<T>(out, rows * n);
  else
    StridedMap<T>(c, rows, n, Eigen::OuterStride<>(c_stride)) +=
        ConstStridedMap<T>(out, rows, n, Eigen::OuterStride<>(out_stride));
}

// How many groups of column blocks a split product's rows are cut into: one (pieces of whole rows of
// blocks, as parallel_for cuts them) below kTileMinThreads threads or while there are at least two row
// blocks a thread; else as many as give about kTilesPerThread tiles (a row block by a group) a thread,
// so that a product of few rows (a weight's gradient X^T dY has d_in rows: 4 row blocks at a width of
// 256) keeps every thread busy and a parked thread's tile is a small share. Tiles change who computes a
// block of C, never how: each block is the same kernels over the same depth blocks, so results are
// bit-identical at any split. With few threads, whole rows of blocks already keep each one busy and tiles
// only add bookkeeping, hence kTileMinThreads (docs/performance.md).
constexpr Index kTilesPerThread = 4;
constexpr int kTileMinThreads = 4;
inline Index column_groups(Index row_blocks, Index col_blocks, int threads) {
  if (threads < kTileMinThreads || row_blocks >= 2 * threads) return 1;
  return std::clamp((kTilesPerThread * threads + row_blocks - 1) / row_blocks, Index{1}, col_blocks);
}

// Returns false, having done nothing, if libxsmm has no kernel for one of the product's blocks.
template <class T>
bool xsmm_gemm(Form form, Dims d, MatrixRef<T> a, MatrixRef<T> b, T* c, Index c_stride, bool accumulate, bool may_split,
               const T* bias) {
  const bool transposed_b = form == Form::abt;
  // A product of one block (the toy model's) is one kernel call: none of the grid's bookkeeping, which
  // costs as much as such a kernel runs.
  const bool one_block = d.m <= kBlockRows && d.n <= kBlockCols && d.k <= kBlockDepth;
  const bool packed = !one_block && d.m >= kPackMinRows;
  // op(A)'s strips too, where a's rows are 4 KB apart or more (see kPackMinRows): nearer together the
  // hardware's prefetchers follow them, and the copy costs as much as it saves (docs/performance.md).
  const bool pack_a = packed && form == Form::atb && a.stride * static_cast<Index>(sizeof(T)) >= 4096;
  const Index ldb = pack_a ? kBlockRows : a.stride;  // the kernel's B operand: a's strip, as read
  // The kernel's A operand: b in place, b^T laid out (k x n), or either packed into column panels.
  const Index lda = packed ? kBlockCols : transposed_b ? d.n : b.stride;
  // C += op(A) op(B) is formed in scratch (out), then added: one rounding per element, as in C = P1
  // then C += P2 for any order of products.
  T* out = accumulate ? thread_scratch<T>(Scratch::product, static_cast<std::size_t>(d.m * d.n)) : c;
  const Index out_stride = accumulate ? d.n : c_stride;
  // libxsmm takes its leading dimensions as libxsmm_blasint: rows wider than that go to Eigen.
  constexpr Index kMaxStride = std::numeric_limits<libxsmm_blasint>::max();
  if (lda > kMaxStride || a.stride > kMaxStride || out_stride > kMaxStride) return false;
  Kernel<T> single = nullptr;
  Grid<T> grid{d};
  if (one_block)
    single = kernel<T>({d.n, d.m, d.k, lda, a.stride, out_stride, false, form == Form::atb});
  else
    grid = make_grid<T>(d, lda, ldb, out_stride, form == Form::atb);
  if (one_block ? !single : !grid.complete) return false;
  const int threads = may_split && !one_block ? threads_for_product(product_macs(1, d.m, d.n, d.k)) : 1;
  const Index row_blocks = (d.m + kBlockRows - 1) / kBlockRows, col_blocks = (d.n + kBlockCols - 1) / kBlockCols;
  Index col_step = 1;
  if (packed) {
    T* panels = thread_scratch<T>(Scratch::packed_operand, static_cast<std::size_t>(col_blocks * kBlockCols * d.k));
    // The panels are a copy of op(B) (k n values) that every tile reads, so it is made before the tiles
    // start; made by the caller alone while the other threads wait, it grows against the product's
    // m k n / threads a thread as threads are added. So a split product's panels are copied in a
    // parallel region of their own first (a panel a piece; docs/performance.md).
    parallel_for(col_blocks, threads, [&](Index p0, Index p1) { pack_panels(panels, form, d, b, p0, p1); });
    b = {panels, kBlockCols};
    col_step = d.k;
  } else if (transposed_b) {  // b (n x k) -> b^T (k x n), so that the kernel reads it as it does for a b
    T* bt = thread_scratch<T>(Scratch::transposed_operand, static_cast<std::size_t>(d.k * d.n));
    transpose_into(bt, d.n, b.data, b.stride, d.n, d.k);
    b = {bt, d.n};
  }
  if (one_block) {
    single(b.data, a.data, out);  // the block at row 0, column 0, depth 0 (see run_blocks)
    add_bias_rows(out, out_stride, bias, 0, d.m, d.n);
    if (accumulate) add_rows(c, c_stride, out, d.n, d.m, d.n);
    return true;
  }
  // Tiles of one row block by `group` columns, numbered along the rows; a piece is a run of tiles
  // [t0, t1), run row block by row block: from its first tile's column in the first, to its last tile's
  // end in the last, whole rows between.
  const Index groups_wanted = column_groups(row_blocks, col_blocks, threads);
  const Index group = (col_blocks + groups_wanted - 1) / groups_wanted * kBlockCols;
  const Index groups = (d.n + group - 1) / group;
  parallel_for(row_blocks * groups, threads, [&](Index t0, Index t1) {
    for (Index rb = t0 / groups; rb <= (t1 - 1) / groups; ++rb) {
      const Index c0 = std::max(t0 - rb * groups, Index{0}) * group;
      const Index c1 = std::min((t1 - rb * groups) * group, d.n);
      const Index r0 = rb * kBlockRows, r1 = std::min(d.m, r0 + kBlockRows);
      run_blocks(grid, form, a, b, col_step, out, out_stride, r0, r1, c0, c1, bias, pack_a);
      if (accumulate) add_rows(c + r0 * c_stride + c0, c_stride, out + r0 * d.n + c0, d.n, r1 - r0, c1 - c0);
    }
  });
  return true;
}

#endif

// Why libxsmm's kernels cannot run (nullptr: they can): tapegrad was built without libxsmm, or its JIT makes
// no kernel on this machine (it needs an x86-64 with SSE3 or better). Asked once, so a process uses one kind
// of kernel unless told otherwise.
const char* libxsmm_missing() {
#ifdef TAPEGRAD_HAVE_LIBXSMM
  static const KernelKey probe{kBlockCols, kBlockRows, kBlockDepth, kBlockCols, kBlockDepth, kBlockCols, false, false};
  static const bool works = dispatch<float>(probe) != nullptr && dispatch<double>(probe) != nullptr;
  return works ? nullptr : "its JIT made no kernel on this machine";
#else
  return "tapegrad was built without libxsmm";
#endif
}

// The kernels in use; libxsmm's unless they are missing or a test or benchmark chose Eigen's.
bool eigen_chosen = false;

}  // namespace

bool have_libxsmm() { return libxsmm_missing() == nullptr; }

GemmKernels gemm_kernels() { return have_libxsmm() && !eigen_chosen ? GemmKernels::libxsmm : GemmKernels::eigen; }

void set_gemm_kernels(GemmKernels kernels) {
  if (const char* missing = kernels == GemmKernels::libxsmm ? libxsmm_missing() : nullptr)
    fail<ValueError>("set_gemm_kernels: libxsmm's kernels are not available ({})", missing);
  eigen_chosen = kernels == GemmKernels::eigen;
}

std::string_view name(GemmKernels kernels) { return kernels == GemmKernels::libxsmm ? "libxsmm" : "eigen"; }

template <class T>
void gemm(ProductForm form, Index m, Index n, Index k, MatrixRef<T> a, MatrixRef<T> b, T* c, Index c_stride,
          bool accumulate, bool may_split, const T* bias) {
  assert(!(accumulate && bias));
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // an empty sum
    if (!accumulate) StridedMap<T>(c, m, n, Eigen::OuterStride<>(c_stride)).setZero();
    add_bias_rows(c, c_stride, bias, 0, m, n);
    return;
  }
#ifdef TAPEGRAD_HAVE_LIBXSMM
  if (gemm_kernels() == GemmKernels::libxsmm &&
      xsmm_gemm(form, {m, n, k}, a, b, c, c_stride, accumulate, may_split, bias))
    return;
#endif
  eigen_gemm(form, {m, n, k}, a, b, c, c_stride, accumulate, may_split, bias);
}

Index product_depth_start(Index k, Index start) {
  assert(start % 64 == 0 && start <= k);
  // Whether a product begun at depth s sums every element as the whole product does.
  auto same_sums = [k](Index s) {
    if (gemm_kernels() == GemmKernels::libxsmm) {
      // Depth blocks of kBlockDepth from the product's start: only the last can be short.
      const auto last_block = [](Index depth) { return depth - (depth - 1) / kBlockDepth * kBlockDepth; };
      return s % kBlockDepth == 0 || (last_block(k) >= 64 && last_block(k - s) >= 64);
    }
    // Eigen's GEMM sums a depth of up to its blocking's kc (256 or more for these sizes) in one pass; a
    // product of a few rows over a short depth leaves the GEMM for Eigen's coefficient-wise path.
    return s == 0 || (k <= 256 && k - s >= 64);
  };
  while (start > 0 && !same_sums(start)) start -= 64;
  return start;
}

bool product_columns_separable() {
  static_assert(64 % kEigenSplitGrain == 0);
  static_assert(kBlockCols == 64 && kBlockRows == 64);
  return gemm_kernels() == GemmKernels::libxsmm;
}

template void gemm(ProductForm, Index, Index, Index, MatrixRef<float>, MatrixRef<float>, float*, Index, bool, bool,
                   const float*);
template void gemm(ProductForm, Index, Index, Index, MatrixRef<double>, MatrixRef<double>, double*, Index, bool, bool,
                   const double*);

}  // namespace tapegrad::detail
