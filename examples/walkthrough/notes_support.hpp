#pragma once
// Shared by the walkthrough's note files: small tensor helpers, the Check -> Claim bookkeeping, and
// the data of note 001. Internal to examples/walkthrough.

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/layers/self_attention.hpp"
#include "walkthrough/notes.hpp"

namespace tapegrad::walkthrough::detail {

using Names = std::vector<std::string>;

inline TensorD mat(Index rows, Index cols, std::initializer_list<double> values) {
  return TensorD(Shape::mat(rows, cols), values);
}

// (T, D) -> (1, T, D): one sentence, as SelfAttention takes it.
inline TensorD as_sequence(const TensorD& m) { return TensorD(Shape::batched(1, m.rows(), m.cols()), m.span()); }

inline TensorD rows_of(const TensorD& m, std::initializer_list<Index> rows) {
  TensorD out(Shape::mat(static_cast<Index>(rows.size()), m.cols()));
  Index k = 0;
  for (Index r : rows) {
    for (Index c = 0; c < m.cols(); ++c) out.at(k, c) = m.at(r, c);
    ++k;
  }
  return out;
}

// list += sep + item, or just item when list is empty.
inline void append_item(std::string& list, std::string_view sep, std::string_view item) {
  if (!list.empty()) list += sep;
  list += item;
}

inline std::string vec_str(std::span<const double> v, int decimals) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{:.{}f}", i ? ", " : "", v[i], decimals);
  return s + "]";
}

inline std::string row_str(const TensorD& t, Index r, int decimals, Index batch = 0) {
  std::vector<double> v;
  for (Index c = 0; c < t.cols(); ++c) v.push_back(t.at(batch, r, c));
  return vec_str(v, decimals);
}

// Rows x cols of batch item `batch` of t (a matrix or a (B, T, D) tensor).
inline Table table(std::string key, std::string caption, Names rows, Names cols, const TensorD& t, int decimals,
            Index batch = 0) {
  Table out{std::move(key), std::move(caption), std::move(rows), std::move(cols), {}, decimals};
  for (std::size_t r = 0; r < out.row_names.size(); ++r)
    for (std::size_t c = 0; c < out.col_names.size(); ++c)
      out.values.push_back(t.at(batch, static_cast<Index>(r), static_cast<Index>(c)));
  return out;
}

// One number a note states. `if_wrong` explains a disagreement; it is written before the check runs,
// so it quotes numbers but never presumes the verdict.
struct Check {
  std::string key, what;
  double stated = 0;
  int decimals = 4;
  double computed = 0;
  std::string if_wrong;
  std::string if_ok = {};
  double tolerance = -1;             // default: half a unit in the last stated decimal
  std::string tolerance_reason = {};  // says why, when the default is not used
  int computed_decimals = -1;        // default: decimals + 3
};

// What every claim has, stated or not: its key, its description and the computed value with how it is shown.
inline Claim computed_claim(std::string key, std::string what, double computed, int decimals, int computed_decimals) {
  Claim claim;
  claim.key = std::move(key);
  claim.what = std::move(what);
  claim.computed = computed;
  claim.decimals = decimals;
  claim.computed_decimals = computed_decimals;
  return claim;
}

inline void add(Section& s, Check c) {
  const double tol = c.tolerance >= 0 ? c.tolerance : 0.5 * std::pow(10.0, -c.decimals);
  Claim claim = computed_claim(std::move(c.key), std::move(c.what), c.computed, c.decimals,
                               c.computed_decimals >= 0 ? c.computed_decimals : c.decimals + 3);
  claim.stated = c.stated;
  claim.tolerance = tol + 1e-12;
  claim.ok = std::abs(c.computed - c.stated) <= claim.tolerance;
  const std::string precision =
      c.tolerance_reason.empty()
          ? fmt::format("stated {}: ok iff |computed - stated| <= {:g} (+1e-12)",
                        c.decimals == 0   ? std::string("as an integer")
                        : c.decimals == 1 ? std::string("with 1 decimal")
                                          : fmt::format("with {} decimals", c.decimals),
                        tol)
          : fmt::format("{}: ok iff |computed - stated| <= {:g} (+1e-12)", c.tolerance_reason, tol);
  if (claim.ok)
    claim.why = c.if_ok.empty() ? precision : fmt::format("{}. {}", c.if_ok, precision);
  else
    claim.why = fmt::format("{}. {}", c.if_wrong.empty() ? "No explanation found" : c.if_wrong, precision);
  s.claims.push_back(std::move(claim));
}

// A number computed for reference; no note states it.
inline void reference(Section& s, std::string key, std::string what, double computed, int decimals, std::string why) {
  Claim claim = computed_claim(std::move(key), std::move(what), computed, decimals, decimals);
  claim.why = std::move(why);
  s.claims.push_back(std::move(claim));
}

// ---- the notes' data ---------------------------------------------------------------------------

inline const Names kWords001 = {"Money", "Bank", "Grows", "River", "Flows"};
inline const Names kXYZ = {"x", "y", "z"};

inline TensorD e001() {  // (5, 3), note 001
  return mat(5, 3, {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.2, 0.1, 0.4, 0.5, 0.3, 0.2});
}
inline TensorD wq001() { return mat(3, 3, {0.3, 0.6, 0.9, 0.1, 0.4, 0.7, 0.2, 0.5, 0.8}); }
inline TensorD wk001() { return mat(3, 3, {0.5, 0.2, 0.1, 0.4, 0.3, 0.6, 0.7, 0.8, 0.9}); }
inline TensorD wv001() { return mat(3, 3, {0.6, 0.1, 0.4, 0.3, 0.5, 0.2, 0.8, 0.7, 0.9}); }

// Note 001's Wq, Wk, Wv as the parameters of a learnable layer (d_model 3).
inline void set_weights001(SelfAttention<double>& layer) {
  layer.wq().assign(wq001());
  layer.wk().assign(wk001());
  layer.wv().assign(wv001());
}

inline SelfAttentionOptions parameter_free(Index d, AttentionScale kind) {
  return {.mode = AttentionMode::parameter_free, .d_model = d, .scale = kind};
}

// Runs `layer` on one sentence x (T, D); returns the output (1, T, D') and copies the weights (1, T, T).
inline TensorD attend(SelfAttention<double>& layer, const TensorD& x, TensorD* weights = nullptr) {
  Tape<double> tape;
  layer.keep_weights(weights != nullptr);
  TensorD out = layer.forward(tape.constant(as_sequence(x))).value();
  if (weights) *weights = layer.attention_weights()[0];
  return out;
}


// One function per worked example (notes_001.cpp, notes_002_004.cpp), run in note order.
Section note000();
Section note001_scores();
Section note001_softmax();
Section note001_normalization();
Section note001_two_sentences();
Section note001_learnable();
Section note002();
Section note003();
Section note004();

}  // namespace tapegrad::walkthrough::detail
