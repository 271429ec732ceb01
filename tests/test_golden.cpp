// Golden references: outputs and gradients of op compositions computed by PyTorch in float64
// (tests/data/make_golden.py wrote tests/data/golden_ops.txt); the same compositions on the tape
// must agree to rounding.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>

#include "tapegrad/autograd/ops.hpp"
#include "golden_file.hpp"
#include "helpers.hpp"

using namespace tapegrad;
using test::GoldenCase;

namespace {

using V = Var<double>;
using Composition = std::function<V(std::span<const V> in, const GoldenCase& c)>;

// dropout with the generator make_golden.py reproduced: rng holds (seed, stream, p in percent).
V dropout_as_recorded(V x, const Ids& rng_spec) {
  Rng rng(static_cast<std::uint64_t>(rng_spec[0]), static_cast<std::uint64_t>(rng_spec[1]));
  return dropout(x, rng_spec[2] / 100.0, rng);
}

// The same compositions as make_golden.py, case by case.
const std::map<std::string, Composition>& compositions() {
  static const std::map<std::string, Composition> table = {
      {"matmul_2d", [](auto in, auto&) { return matmul(in[0], in[1]); }},
      {"matmul_bt_batched", [](auto in, auto&) { return matmul_bt(in[0], in[1]); }},
      {"matmul_at_batched", [](auto in, auto&) { return matmul_at(in[0], in[1]); }},
      {"matmul_at_2d", [](auto in, auto&) { return matmul_at(in[0], in[1]); }},
      {"matmul_shared_weight", [](auto in, auto&) { return matmul(in[0], in[1]); }},
      {"matmul_bt_shared_weight", [](auto in, auto&) { return matmul_bt(in[0], in[1]); }},
      {"linear_bias_gelu", [](auto in, auto&) { return gelu(affine(in[0], in[1], in[2])); }},  // as Linear computes it
      {"affine_2d_row_bias", [](auto in, auto&) { return affine(in[0], in[1], in[2]); }},
      {"broadcast_mul_sub", [](auto in, auto&) { return sub(mul(in[0], in[1]), in[2]); }},
      {"add_same_shape", [](auto in, auto&) { return add(in[0], mul(in[1], in[1])); }},
      {"relu_scale_tanh", [](auto in, auto&) { return tanh(scale(relu(in[0]), 0.7)); }},
      {"transpose_matmul", [](auto in, auto&) { return matmul(transpose(in[0]), in[1]); }},
      {"softmax_full_mask", [](auto in, auto& c) { return softmax_rows(in[0], &c.masks.at("mask")); }},
      {"softmax_shared_mask", [](auto in, auto& c) { return softmax_rows(in[0], &c.masks.at("mask")); }},
      {"softmax_unmasked", [](auto in, auto&) { return softmax_rows(in[0]); }},
      {"attention_causal",
       [](auto in, auto& c) {
         V q = matmul(in[0], in[1]), k = matmul(in[0], in[2]), v = matmul(in[0], in[3]);
         V weights = softmax_rows(scale(matmul_bt(q, k), 1 / std::sqrt(3.0)), &c.masks.at("mask"));
         return matmul(weights, v);
       }},
      {"log_softmax", [](auto in, auto&) { return log_softmax_rows(in[0]); }},
      {"attention_heads_causal",
       [](auto in, auto& c) { return attention(in[0], in[1], in[2], 2, &c.masks.at("mask"), 0.6); }},
      {"attention_cross_padding",
       [](auto in, auto& c) { return attention(in[0], in[1], in[2], 2, &c.masks.at("mask"), 0.5); }},
      {"attention_shared_qkv", [](auto in, auto&) { return attention(in[0], in[0], in[0], 3, nullptr, 1 / std::sqrt(2.0)); }},
      {"cross_entropy_ignore", [](auto in, auto& c) { return cross_entropy(in[0], c.ids.at("targets")); }},
      {"cross_entropy_2d", [](auto in, auto& c) { return cross_entropy(in[0], c.ids.at("targets")); }},
      {"mse", [](auto in, auto&) { return mse(in[0], in[1]); }},
      {"sum_and_mean", [](auto in, auto&) { return add(sum(in[0]), mean(mul(in[0], in[0]))); }},
      {"slice_concat_heads",
       [](auto in, auto&) {
         const std::array<V, 2> parts = {slice_cols(in[0], 4, 2), slice_cols(in[0], 0, 3)};
         return tanh(concat_cols(std::span<const V>(parts)));
       }},
      {"gather_embedding", [](auto in, auto& c) { return scale(gather_rows(in[0], c.ids.at("ids")), 1.5); }},
      {"reshape_3d_to_2d", [](auto in, auto&) { return matmul(reshape(in[0], Shape::mat(6, 4)), in[1]); }},
      {"reshape_2d_to_3d", [](auto in, auto&) { return matmul(reshape(in[0], Shape::batched(2, 3, 4)), in[1]); }},
      {"pick_positions", [](auto in, auto& c) { return tanh(pick_positions(in[0], c.ids.at("positions"))); }},
      {"row_reductions",
       [](auto in, auto&) { return sub(mul(row_sum(in[0]), row_max(in[0])), row_mean(mul(in[0], in[0]))); }},
      {"row_max_shifted_exp", [](auto in, auto&) { return exp(sub(in[0], row_max(in[0]))); }},
      {"layer_norm_composed",
       [](auto in, auto&) {
         V centred = sub(in[0], row_mean(in[0]));
         V var = row_mean(mul(centred, centred));  // (2, 3, 1)
         V eps = in[0].tape->constant(TensorD(var.shape(), 1e-5));
         return div(centred, sqrt(add(var, eps)));
       }},
      {"layer_norm_3d", [](auto in, auto&) { return layer_norm(in[0], in[1], in[2], 1e-5); }},
      {"layer_norm_2d_row_params", [](auto in, auto&) { return layer_norm(in[0], in[1], in[2], 0.01); }},
      {"column_broadcast", [](auto in, auto&) { return sub(mul(add(in[0], in[1]), in[2]), in[1]); }},
      {"column_broadcast_2d", [](auto in, auto&) { return add(mul(in[0], in[1]), in[1]); }},
      {"div_column", [](auto in, auto&) { return div(in[0], exp(in[1])); }},
      {"div_same_and_row", [](auto in, auto&) { return div(div(in[0], exp(in[1])), sigmoid(in[2])); }},
      {"exp_log_sqrt_sigmoid", [](auto in, auto&) { return add(log(sigmoid(in[0])), sqrt(exp(in[0]))); }},
      {"log_sqrt_of_squares", [](auto in, auto&) { return mul(log(mul(in[0], in[0])), sqrt(mul(in[1], in[1]))); }},
      {"dropout", [](auto in, auto& c) { return dropout_as_recorded(in[0], c.ids.at("rng")); }},
      {"dropout_3d_tanh", [](auto in, auto& c) { return tanh(dropout_as_recorded(in[0], c.ids.at("rng"))); }},
  };
  return table;
}

}  // namespace

TEST_CASE("golden: every composition matches PyTorch float64, output and gradients") {
  const auto cases = test::read_golden("golden_ops.txt");
  REQUIRE(cases.size() == compositions().size());
  for (const auto& entry : cases) {  // not a structured binding: clang 14 cannot capture those (CAPTURE)
    const std::string& name = entry.first;
    const GoldenCase& c = entry.second;
    CAPTURE(name);
    REQUIRE_MESSAGE(compositions().count(name) == 1, "no C++ composition for golden case ", name);
    Tape<double> tape;
    std::vector<V> vars;
    for (const auto& [input_name, value] : c.inputs) vars.push_back(tape.input(value));
    V y = compositions().at(name)(vars, c);
    // Same maths, different summation orders: agreement to ~1e-15 relative is expected.
    CHECK_TENSOR_NEAR(y.value(), c.output, 1e-12, 1e-11);
    tape.backward(y, c.projection);
    for (std::size_t k = 0; k < vars.size(); ++k) {
      CAPTURE(c.inputs[k].first);
      CHECK_TENSOR_NEAR(vars[k].grad(), c.grads.at(c.inputs[k].first), 1e-12, 1e-11);
    }
  }
}
