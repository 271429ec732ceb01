// The step's products in bfloat16 through oneDNN (Debian's libdnnl-dev, 2.6), before any bf16 path is
// built on it (issue 59): for each product of W5's and W6's step (bench/step_shapes.hpp, in its form and
// shape), oneDNN's matmul with bf16 operands and float32 accumulation and output, beside tapegrad's float32
// gemm and oneDNN's float32 matmul; what rounding the two operands to bf16 costs (Eigen's cast, at this
// build's instruction set); and whether oneDNN's bf16 product gives the same bits at 1 thread as at 2 to 16
// (tapegrad promises bit-identical results at any thread count).
//
//   OMP_NUM_THREADS=1 taskset -c 1 build/bench/bf16_products
//
// One thread unless the line says otherwise, on one set of operands used call after call (step_products'
// "warm"). The bracket names oneDNN's kernel. By oneDNN 2.6's documentation of its data types (not tried
// here), a CPU without AVX-512 gets no bf16 product ("none") and one with AVX-512 (avx512_core) but not
// AVX512_BF16 an emulation; Zen 4, Zen 5, Cooper Lake and Xeons from Sapphire Rapids on have AVX512_BF16.
// The thread counts are OpenMP's, which Debian's oneDNN uses; with another runtime the check says it was
// not made. A build without oneDNN says so and exits.
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "step_shapes.hpp"

#ifdef TAPEGRAD_HAVE_DNNL
#include <omp.h>

#include <dnnl.hpp>

namespace {

using namespace tapegrad;
using namespace tapegrad::bench;
using Eigen::bfloat16;
using Type = dnnl::memory::data_type;

// C = op(A) op(B) of `p` as a oneDNN matmul on operands of `type`: the transposed forms are strides, as
// tapegrad's gemm reads them in place. Empty when oneDNN has no implementation for this CPU.
struct Matmul {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
  dnnl::memory a, b, c;
  void run(dnnl::stream& s) {
    primitive.execute(s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    s.wait();
  }
};

std::optional<Matmul> matmul(const dnnl::engine& engine, const Product& p, Type type, void* a, void* b, float* c) {
  using Dims = dnnl::memory::dims;
  const dnnl::memory::desc a_md({p.m, p.k}, type, p.form == ProductForm::atb ? Dims{1, p.lda} : Dims{p.lda, 1});
  const dnnl::memory::desc b_md({p.k, p.n}, type, p.form == ProductForm::abt ? Dims{1, p.ldb} : Dims{p.ldb, 1});
  const dnnl::memory::desc c_md({p.m, p.n}, Type::f32, Dims{p.ldc, 1});
  try {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
    return Matmul{pd, dnnl::matmul(pd), dnnl::memory(a_md, engine, a), dnnl::memory(b_md, engine, b),
                  dnnl::memory(c_md, engine, c)};
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

struct Totals {
  double tapegrad = 0, f32 = 0, bf16 = 0, rounding = 0;
};

void product(const dnnl::engine& engine, dnnl::stream& stream, const std::string& workload, const Product& p,
             Totals& totals) {
  Rng rng(3);
  Operands operands = random_operands(p, rng);
  std::vector<float>&a = operands.a, &b = operands.b, &c = operands.c;
  // The bf16 operands in the float ones' layout; rounding reads and writes only the elements the product
  // reads (a head's columns of rows `lda` wide, not the other heads').
  std::vector<bfloat16> a16(a.size()), b16(b.size());
  const auto round = [](const std::vector<float>& from, std::vector<bfloat16>& to, Index rows, Index cols, Index ld) {
    using Stride = Eigen::OuterStride<>;
    Eigen::Map<Eigen::Array<bfloat16, -1, -1, Eigen::RowMajor>, 0, Stride>(to.data(), rows, cols, Stride(ld)) =
        Eigen::Map<const Eigen::Array<float, -1, -1, Eigen::RowMajor>, 0, Stride>(from.data(), rows, cols, Stride(ld))
            .cast<bfloat16>();
  };
  const auto round_operands = [&] {
    round(a, a16, p.a_rows(), p.a_cols(), p.lda);
    round(b, b16, p.b_rows(), p.b_cols(), p.ldb);
  };
  round_operands();
  const auto us = [](auto&& call) { return median_seconds(3, 2, call, 1) * 1e6; };
  const double tapegrad_us = product_us(p, 1, 2, 3, 1), rounding_us = us(round_operands);
  auto f32 = matmul(engine, p, Type::f32, a.data(), b.data(), c.data());
  auto bf16 = matmul(engine, p, Type::bf16, a16.data(), b16.data(), c.data());
  const double f32_us = f32 ? us([&] { f32->run(stream); }) : 0;
  std::string bf16_text = "none", bits_text;
  if (bf16) {
    const double bf16_us = us([&] { bf16->run(stream); });
    totals.bf16 += static_cast<double>(p.count) * bf16_us;
    bf16_text = fmt::format("{:8.1f} us ({:.2f}x tapegrad's float32)", bf16_us, tapegrad_us / bf16_us);
    // The same product made and run at more threads (oneDNN fixes how it splits a product over the
    // threads when it makes it): the thread counts whose bits differ from one thread's.
    const std::vector<float> one_thread = c;
    std::vector<int> differ;
    for (const int threads : {2, 3, 4, 8, 16}) {
      omp_set_num_threads(threads);
      auto more = matmul(engine, p, Type::bf16, a16.data(), b16.data(), c.data());
      if (!more) fail<Error>("bf16_products: oneDNN has a bf16 product for one thread but not for {}", threads);
      more->run(stream);
      if (std::memcmp(c.data(), one_thread.data(), c.size() * sizeof(float)) != 0) differ.push_back(threads);
    }
    omp_set_num_threads(1);
    bits_text = dnnl_version()->cpu_runtime != DNNL_RUNTIME_OMP ? "bits at more threads not checked (not OpenMP)"
                : differ.empty()                                ? "same bits at 2-16 threads"
                                 : fmt::format("other bits at {} threads", fmt::join(differ, ", "));
  }
  totals.tapegrad += static_cast<double>(p.count) * tapegrad_us;
  totals.f32 += static_cast<double>(p.count) * f32_us;
  totals.rounding += static_cast<double>(p.count) * rounding_us;
  fmt::print(
      "{} {:<32} {:<5} {:>4} x {:>4} x {:>4} x{:<3}: tapegrad {:8.1f} us, oneDNN float32 {:8.1f}, bf16 {}; "
      "rounding the operands {:.1f} us; {} [{}]\n",
      workload, p.what, form_name(p.form), p.m, p.n, p.k, p.count, tapegrad_us, f32_us, bf16_text, rounding_us,
      bits_text, bf16 ? bf16->pd.impl_info_str() : "");
}

}  // namespace
#endif

int main(int argc, char** argv) {
  if (tapegrad::bench::refused_arguments("bf16_products", argc, argv)) return 2;
#ifndef TAPEGRAD_HAVE_DNNL
  fmt::print(
      "bf16_products: this build has no oneDNN (libdnnl-dev and ocl-icd-opencl-dev, with OpenMP), so nothing to "
      "measure\n");
#else
  omp_set_num_threads(1);
  const dnnl::version_t* v = dnnl_version();
  fmt::print("oneDNN {}.{}.{}, one thread unless said\n", v->major, v->minor, v->patch);
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  for (const Workload& w : kWorkloads) {
    if (w.name != "W5" && w.name != "W6") continue;
    Totals t;
    for (const Product& p : step_products(w)) product(engine, stream, w.name, p, t);
    fmt::print("{}: the step's products take tapegrad {:.1f} ms in float32, oneDNN {:.1f} ms in float32", w.name,
               t.tapegrad / 1e3, t.f32 / 1e3);
    if (t.bf16 == 0)
      fmt::print("; no bf16 product on this CPU\n");
    else
      fmt::print(" and {:.1f} ms in bf16 ({:.2f}x tapegrad's), {:.1f} ms with rounding every operand ({:.2f}x)\n",
                 t.bf16 / 1e3, t.tapegrad / t.bf16, (t.bf16 + t.rounding) / 1e3, t.tapegrad / (t.bf16 + t.rounding));
  }
#endif
}
