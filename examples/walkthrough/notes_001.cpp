// Note 001 recomputed: the scores E E^T, softmax and C1 (unscaled as the note, and scaled), the two
// sentences "Money Bank Grows" and "River Bank Flows", and the Wq/Wk/Wv example for "Bank".
#include "walkthrough/notes_support.hpp"

#include "tapegrad/core/rng.hpp"

namespace tapegrad::walkthrough::detail {

// ---- note 000 -----------------------------------------------------------------------------------

Section note000() {
  Section s{"000", "Note 000: the formula, no numbers", {}, {}, {}};
  s.lines.push_back(
      "Note 000 has no worked example, only the recipe: A = softmax(Q K^T / sqrt(dk)), C = A V with "
      "Q = K = V = X. That is SelfAttention's parameter-free mode with its default scale 1/sqrt(d_head); "
      "the sections below use it, and its variants, on the numbers of the other notes.");
  return s;
}

// ---- note 001: scores ---------------------------------------------------------------------------

Section note001_scores() {
  Section s{"001", "Note 001: the scores S = E E^T of Money, Bank, Grows, River, Flows", {}, {}, {}};
  const TensorD E = e001();
  Tape<double> tape;
  Var<double> e = tape.constant(E);
  const TensorD S = matmul_bt(e, e).value();  // (5, 5): S[i][j] = E_i . E_j
  s.lines.push_back("tapegrad: S = matmul_bt(E, E), every one of the 25 entries the note writes out.");
  s.tables.push_back(table("001.E", "E (note 001), one row per word", kWords001, kXYZ, E, 1));
  s.tables.push_back(table("001.S", "S = E E^T (matmul_bt)", kWords001, kWords001, S, 4));
  const double stated[5][5] = {{0.14, 0.32, 0.50, 0.16, 0.17},
                               {0.32, 0.77, 1.22, 0.37, 0.47},
                               {0.50, 1.22, 1.94, 0.58, 0.77},
                               {0.16, 0.37, 0.58, 0.21, 0.21},
                               {0.17, 0.47, 0.77, 0.21, 0.38}};
  for (Index i = 0; i < 5; ++i)
    for (Index j = 0; j < 5; ++j) {
      const auto& a = kWords001[static_cast<std::size_t>(i)];
      const auto& b = kWords001[static_cast<std::size_t>(j)];
      add(s, {.key = fmt::format("001.S.r{}c{}", i + 1, j + 1),
              .what = fmt::format("S[{}][{}] {}.{}", i + 1, j + 1, a, b),
              .stated = stated[i][j],
              .decimals = 2,
              .computed = S.at(i, j),
              .if_wrong = fmt::format("an arithmetic slip: {} . {} = {:.4f}", a, b, S.at(i, j))});
    }
  return s;
}

// ---- note 001: softmax of row 1 and C1, unscaled (as the note) and scaled --------------------

Section note001_softmax() {
  Section s{"001", "Note 001: softmax of row 1 and C1, unscaled (the note) vs 1/sqrt(3)", {}, {}, {}};
  const TensorD E = e001();
  Rng rng(1);
  SelfAttention<double> plain("plain", parameter_free(3, AttentionScale::none), rng);
  SelfAttention<double> scaled("scaled", parameter_free(3, AttentionScale::inv_sqrt_d_head), rng);
  TensorD A_none, A_sqrt;
  const TensorD C_none = attend(plain, E, &A_none);  // (1, 5, 3)
  const TensorD C_sqrt = attend(scaled, E, &A_sqrt);
  const double k = scaled.scale_factor();  // 1/sqrt(3)

  Tape<double> tape;
  Var<double> e = tape.constant(E);
  const TensorD S = matmul_bt(e, e).value();
  std::array<double, 5> ex{}, ex_scaled{};
  double total = 0;
  for (Index j = 0; j < 5; ++j) {  // the exponentials the note writes out (the layer keeps only A)
    ex[static_cast<std::size_t>(j)] = std::exp(S.at(0, j));
    ex_scaled[static_cast<std::size_t>(j)] = std::exp(S.at(0, j) * k);
    total += ex[static_cast<std::size_t>(j)];
  }

  const std::array<double, 5> st_exp = {1.1503, 1.3771, 1.6487, 1.1735, 1.1855};
  const std::array<double, 5> st_p = {0.1761, 0.2107, 0.2522, 0.1796, 0.1814};
  const double st_sum = 6.5351;
  int match_plain = 0, match_scaled = 0;
  double sum_of_stated = 0;
  for (std::size_t j = 0; j < 5; ++j) {
    match_plain += std::abs(ex[j] - st_exp[j]) <= 0.5e-4 + 1e-12;
    match_scaled += std::abs(ex_scaled[j] - st_exp[j]) <= 0.5e-4 + 1e-12;
    sum_of_stated += st_exp[j];
  }
  s.lines.push_back(fmt::format(
      "Which variant did the note use? Its exponentials match e^s of the raw scores in {} of 5 places "
      "and e^(s/sqrt 3) in {} of 5: the note did NOT scale. It says the dot products are \"Scaled i.e. "
      "Normalized using Softmax\", but softmax is not the 1/sqrt(d) scaling of note 000 and of "
      "Vaswani et al. The claims below are checked against the computation the note did (tapegrad: "
      "SelfAttention parameter_free, AttentionScale::none); the scaled variant (inv_sqrt_d_head) is shown "
      "beside it.",
      match_plain, match_scaled));
  add(s, {.key = "001.score_scale",
          .what = "factor on the scores",
          .stated = 1.0,
          .decimals = 0,
          .computed = k,
          .if_wrong = fmt::format("a missing scaling: the note exponentiates the raw scores (factor 1: its "
                                  "e^0.14 = 1.1503 is e^s, e^(s/sqrt 3) would be {:.4f}); note 000 and the "
                                  "standard formula divide by sqrt(d) = sqrt(3)",
                                  ex_scaled[0]),
          .tolerance = 0,
          .tolerance_reason = "a factor, compared exactly",
          .computed_decimals = 4});

  Table row1{"001.row1", "Row 1 (Money): unscaled (the note) beside scaled by 1/sqrt(3)",
             {"e^s", "e^(s/sqrt3)", "p unscaled", "p scaled"}, kWords001, {}, 5};
  for (const auto* v : {&ex, &ex_scaled}) row1.values.insert(row1.values.end(), v->begin(), v->end());
  for (const auto* a : {&A_none, &A_sqrt})
    for (Index j = 0; j < 5; ++j) row1.values.push_back(a->at(0, 0, j));
  s.tables.push_back(std::move(row1));

  for (std::size_t j = 0; j < 5; ++j) {
    const double s0j = S.at(0, static_cast<Index>(j));
    add(s, {.key = fmt::format("001.softmax_row1.exp{}", j + 1),
            .what = fmt::format("e^{:.2f}", s0j),
            .stated = st_exp[j],
            .decimals = 4,
            .computed = ex[j],
            .if_wrong = fmt::format("an arithmetic slip: e^{:.2f} = {:.7f}, which rounds to {:.4f}", s0j, ex[j],
                                    ex[j])});
  }
  add(s, {.key = "001.softmax_row1.sum",
          .what = "sum of the exponentials",
          .stated = st_sum,
          .decimals = 4,
          .computed = total,
          .if_wrong = fmt::format("the slip carried forward: the note's own five 4-decimal exponentials "
                                  "(with 1.1855 for e^0.17) add to {:.4f}; the exact sum is {:.7f}",
                                  sum_of_stated, total)});
  for (std::size_t j = 0; j < 5; ++j) {
    const double own = st_exp[j] / st_sum;  // the note's own quotient
    add(s, {.key = fmt::format("001.softmax_row1.p{}", j + 1),
            .what = fmt::format("p{} = A[1][{}] ({})", j + 1, j + 1, kWords001[j]),
            .stated = st_p[j],
            .decimals = 4,
            .computed = A_none.at(0, 0, static_cast<Index>(j)),
            .if_wrong = fmt::format("a slip in the last digit: the exact weight {:.7f} rounds to {:.4f}, and "
                                    "even the note's own quotient {:.4f}/{:.4f} = {:.7f} rounds to {:.4f}",
                                    A_none.at(0, 0, static_cast<Index>(j)), A_none.at(0, 0, static_cast<Index>(j)),
                                    st_exp[j], st_sum, own, own)});
  }
  double row_sum = 0;
  for (Index j = 0; j < 5; ++j) row_sum += A_none.at(0, 0, j);
  add(s, {.key = "001.softmax_row1.row_sum",
          .what = "row 1 of A sums to 1",
          .stated = 1.0,
          .decimals = 4,
          .computed = row_sum,
          .if_wrong = "softmax rows sum to 1 up to rounding"});

  // C1 from the note's own 4-decimal weights, through the same matmul: the rounding carried forward.
  const TensorD C1_from_stated =
      matmul(tape.constant(mat(1, 5, {st_p[0], st_p[1], st_p[2], st_p[3], st_p[4]})), e).value();
  const std::array<double, 3> st_c1 = {0.40505, 0.41471, 0.51435};
  for (std::size_t c = 0; c < 3; ++c) {
    const auto ci = static_cast<Index>(c);
    add(s, {.key = fmt::format("001.C1.{}", c + 1),
            .what = fmt::format("C1[{}] (Money, contextual)", c + 1),
            .stated = st_c1[c],
            .decimals = 5,
            .computed = C_none.at(0, 0, ci),
            .if_wrong = fmt::format("rounding carried forward: the note multiplied its printed 4-decimal weights "
                                    "(with the slips in p1 and p3) by E, which gives {:.7f}; the exact weights "
                                    "give {:.7f}. Five decimals are more than 4-decimal weights support",
                                    C1_from_stated.at(0, ci), C_none.at(0, 0, ci))});
  }
  Table c1{"001.C1", "C1 (Money): the note's weights x E, exact unscaled, exact scaled",
           {"note weights", "unscaled", "scaled"}, kXYZ, {}, 7};
  for (Index c = 0; c < 3; ++c) c1.values.push_back(C1_from_stated.at(0, c));
  for (const auto* C : {&C_none, &C_sqrt})
    for (Index c = 0; c < 3; ++c) c1.values.push_back(C->at(0, 0, c));
  s.tables.push_back(std::move(c1));

  s.tables.push_back(table("001.A.none", "A = softmax(S), the whole matrix (the note gives row 1 only)", kWords001,
                           kWords001, A_none, 5));
  s.tables.push_back(table("001.C.none", "C = A E, unscaled", kWords001, kXYZ, C_none, 5));
  s.tables.push_back(table("001.A.sqrt", "A = softmax(S / sqrt 3)", kWords001, kWords001, A_sqrt, 5));
  s.tables.push_back(table("001.C.sqrt", "C = A E, scaled", kWords001, kXYZ, C_sqrt, 5));
  s.lines.push_back(
      "The note gives only row 1 of A and of C (the other rows are '...'), so only row 1 can be checked; "
      "the tables show all rows as tapegrad computes them.");
  return s;
}

// ---- note 001: "Normalization helps in bringing these values to a similar scale" ---------------

Section note001_normalization() {
  Section s{"001", "Note 001: does softmax bring [10, 20, 30] and [0.1, 0.2, 0.3] to a similar scale?", {}, {}, {}};
  Tape<double> tape;
  const TensorD scores = mat(2, 3, {10, 20, 30, 0.1, 0.2, 0.3});
  const TensorD p = softmax_rows(tape.constant(scores)).value();
  s.tables.push_back(table("001.normalization", "softmax_rows of the note's two score rows",
                           {"[10, 20, 30]", "[0.1, 0.2, 0.3]"}, {"1", "2", "3"}, p, 6));
  s.lines.push_back(fmt::format(
      "No. Softmax makes both rows sum to 1 but does not undo their scale: the first row puts {:.5f} "
      "on one word (saturated), the second is almost uniform (largest {:.4f}). Dividing the scores "
      "(by sqrt(d), as note 000 does) is what controls their scale, not the softmax. No number is stated "
      "here, so nothing is counted.",
      p.at(0, 2), p.at(1, 2)));
  return s;
}

// ---- note 001: "Money Bank Grows" and "River Bank Flows" as two sentences ----------------------

// Where Bank's attention goes in each sentence and why, from the numbers: which word gets the most, how long
// each vector is, and whether the neighbours only shift Bank along [1, 1, 1].
std::string bank_attention_story(const TensorD& E, const Index (&order)[2][3], const TensorD& w, const TensorD& out) {
  auto norm = [&E](Index word) { return E.mat().row(word).norm(); };
  auto name = [](Index word) { return kWords001[static_cast<std::size_t>(word)]; };
  std::string story;
  for (Index b = 0; b < 2; ++b) {
    Index top = 0, longest = 0;
    for (Index t = 1; t < 3; ++t) {
      if (w.at(b, 1, t) > w.at(b, 1, top)) top = t;
      if (norm(order[b][t]) > norm(order[b][longest])) longest = t;
    }
    const double others = w.at(b, 1, 0) + w.at(b, 1, 2);
    story += fmt::format(
        "In sentence {} (\"{} {} {}\") Bank's largest weight, {:.4f}, goes to {}{}; the two other words get {:.4f} "
        "together, {} than Bank's own {:.4f}. ",
        b + 1, name(order[b][0]), name(order[b][1]), name(order[b][2]), w.at(b, 1, top),
        top == 1 ? "itself" : name(order[b][top]),
        top == longest && top != 1
            ? fmt::format(" because it is the longest vector (|{}| = {:.4f}) and dot products reward length, not "
                          "meaning",
                          name(order[b][top]), norm(order[b][top]))
            : std::string(),
        others, others > w.at(b, 1, 1) ? "more" : "less", w.at(b, 1, 1));
  }
  // Money = Bank - 0.3 and Grows = Bank + 0.3 in every component: then any mix of the three is Bank
  // plus a multiple of [1, 1, 1].
  bool collinear = true;
  for (Index c = 0; c < 3; ++c)
    collinear = collinear && std::abs(E.at(0, c) - E.at(1, c) + 0.3) < 1e-12 && std::abs(E.at(2, c) - E.at(1, c) - 0.3) < 1e-12;
  if (collinear)
    story += fmt::format("Money = Bank - 0.3 and Grows = Bank + 0.3 in every component, so in sentence 1 attention "
                         "can only move Bank along [1, 1, 1]: C_Bank - E_Bank = [{:.5f}, {:.5f}, {:.5f}]. ",
                         out.at(0, 1, 0) - E.at(1, 0), out.at(0, 1, 1) - E.at(1, 1), out.at(0, 1, 2) - E.at(1, 2));
  story += "With toy embeddings and no learned parameters nothing here separates a money bank from a river bank: "
           "the note's claim is about what trained embeddings and Wq, Wk, Wv can do, which these numbers cannot "
           "show.";
  return story;
}

Section note001_two_sentences() {
  Section s{"001", "Note 001: 'Bank' in \"Money Bank Grows\" vs \"River Bank Flows\" (two sentences)", {}, {}, {}};
  const TensorD E = e001();
  TensorD x(Shape::batched(2, 3, 3));  // two sentences, each its own sequence: (B=2, T=3, D=3)
  const Index order[2][3] = {{0, 1, 2}, {3, 1, 4}};
  for (Index b = 0; b < 2; ++b)
    for (Index t = 0; t < 3; ++t)
      for (Index c = 0; c < 3; ++c) x.at(b, t, c) = E.at(order[b][t], c);
  s.lines.push_back(
      "The note puts all five words into one 5-word sequence. Here the two sentences are two separate "
      "3-word sequences (one batch of 2 through SelfAttention parameter_free), and Bank is row 2 of each.");

  Rng rng(2);
  struct Variant {
    const char* tag;
    const char* label;
    AttentionScale scale;
  };
  const Variant variants[2] = {{"none", "unscaled (as the note)", AttentionScale::none},
                               {"sqrt", "scaled 1/sqrt(3)", AttentionScale::inv_sqrt_d_head}};
  for (const Variant& v : variants) {
    SelfAttention<double> layer("attn", parameter_free(3, v.scale), rng);
    layer.keep_weights(true);
    Tape<double> tape;
    const TensorD out = layer.forward(tape.constant(x)).value();  // (2, 3, 3)
    const TensorD& w = layer.attention_weights()[0];               // (2, 3, 3)
    Table weights{fmt::format("001.sentences.{}.weights", v.tag),
                  fmt::format("Bank's attention weights, {}", v.label),
                  {"Money Bank Grows", "River Bank Flows"}, {"word 1", "Bank", "word 3"}, {}, 5};
    Table bank{fmt::format("001.sentences.{}.bank", v.tag), fmt::format("contextual Bank, {}", v.label),
               {"Money Bank Grows", "River Bank Flows"}, kXYZ, {}, 5};
    for (Index b = 0; b < 2; ++b)
      for (Index c = 0; c < 3; ++c) {
        weights.values.push_back(w.at(b, 1, c));
        bank.values.push_back(out.at(b, 1, c));
      }
    const auto bank1 = out.mat(0).row(1), bank2 = out.mat(1).row(1);  // Bank is row 2 of each sentence
    const double n1 = bank1.norm(), n2 = bank2.norm(), diff = (bank1 - bank2).norm();
    const double cosine = bank1.dot(bank2) / (n1 * n2);
    reference(s, fmt::format("001.sentences.{}.diff_norm", v.tag), fmt::format("|Bank1 - Bank2|, {}", v.tag),
              diff, 5, "Euclidean distance between the two contextual Bank vectors");
    reference(s, fmt::format("001.sentences.{}.cosine", v.tag), fmt::format("cos(Bank1, Bank2), {}", v.tag), cosine,
              5, "cosine similarity of the two contextual Bank vectors (1 = same direction)");
    for (std::size_t b = 0; b < 2; ++b)
      reference(s, fmt::format("001.sentences.{}.others{}", v.tag, b + 1),
                fmt::format("s{}: weight on the other words", b + 1), weights.at(b, 0) + weights.at(b, 2), 5,
                "Bank's attention on the two words around it (the rest goes to itself)");
    if (v.scale == AttentionScale::none) {
      s.lines.push_back(fmt::format(
          "Does the note's motivating claim hold? Unscaled, the two contextual Bank vectors are {} and {}. They "
          "differ (distance {:.4f}), so in the literal sense yes; but their cosine similarity is {:.4f}: {}, and "
          "they differ {} in length ({:.4f} vs {:.4f}).",
          row_str(out, 1, 5, 0), row_str(out, 1, 5, 1), diff, cosine,
          cosine > 0.95 ? "they point almost the same way" : "their directions differ",
          cosine > 0.95 ? "mostly" : "also", n1, n2));
      s.lines.push_back(bank_attention_story(E, order, w, out));
    } else {
      s.lines.push_back(fmt::format("Scaled by 1/sqrt(3) the weights are flatter (Bank's largest weight {:.4f} and "
                                    "{:.4f}); cosine {:.4f}, distance {:.4f}.",
                                    *std::max_element(weights.values.begin(), weights.values.begin() + 3),
                                    *std::max_element(weights.values.begin() + 3, weights.values.end()), cosine,
                                    diff));
    }
    s.tables.push_back(std::move(weights));
    s.tables.push_back(std::move(bank));
  }
  return s;
}

// ---- note 001: Wq, Wk, Wv for "Bank" ------------------------------------------------------------

struct NamedMatrix {
  std::string name;
  TensorD value;  // (3, 3)
};

struct Explanation {
  std::vector<std::string> lines;  // every hypothesis tried and what it gives
  std::string summary;             // for the claims' `why`
};

// Tests ways the note could have got `stated` for E_Bank W from its own data: W transposed, another
// row of E, another of the three matrices, a single changed entry of E_Bank or of W. Every product is
// a tapegrad matmul.
Explanation explain_projection(const std::string& vec, const std::array<double, 3>& stated, const TensorD& E,
                               const std::vector<NamedMatrix>& Ws, std::size_t intended) {
  const double tol = 0.005 + 1e-12;  // the note states two decimals
  auto same = [&stated, tol](const TensorD& R, Index r) {
    bool hit = true;
    for (Index c = 0; c < 3; ++c) hit = hit && std::abs(R.at(r, c) - stated[static_cast<std::size_t>(c)]) <= tol;
    return hit;
  };
  Tape<double> tape;
  Var<double> e = tape.constant(E);
  const NamedMatrix& W = Ws[intended];
  const TensorD P = matmul(e, tape.constant(W.value)).value();      // (5, 3): every row of E times W
  const TensorD Pt = matmul_bt(e, tape.constant(W.value)).value();  // (5, 3): ... times W^T
  std::array<double, 3> exact{};
  for (Index c = 0; c < 3; ++c) exact[static_cast<std::size_t>(c)] = P.at(1, c);

  Explanation out;
  std::vector<std::string> found;  // hypotheses that reproduce the stated vector
  out.lines.push_back(fmt::format("{} = E_Bank {}: tapegrad {}, the note {}.", vec, W.name, vec_str(exact, 2),
                                  vec_str(stated, 2)));
  const bool transposed_hit = same(Pt, 1);
  out.lines.push_back(fmt::format("W transposed, E_Bank {}^T = {}: {}", W.name, row_str(Pt, 1, 2),
                                  transposed_hit ? "reproduces it" : "no"));
  if (transposed_hit) found.push_back(fmt::format("E_Bank {}^T (W transposed)", W.name));
  int products = 0;
  std::vector<std::string> other_hits;
  for (const NamedMatrix& M : Ws)
    for (bool transposed : {false, true}) {
      Var<double> m = tape.constant(M.value);
      const TensorD R = (transposed ? matmul_bt(e, m) : matmul(e, m)).value();  // E M or E M^T
      for (Index r = 0; r < 5; ++r) {
        if (r == 1 && &M == &W) continue;  // the stated formula and its transpose, above
        ++products;
        if (same(R, r))
          other_hits.push_back(fmt::format("E_{} {}{}", kWords001[static_cast<std::size_t>(r)], M.name,
                                           transposed ? "^T" : ""));
      }
    }
  std::string hits;
  for (const auto& h : other_hits) append_item(hits, ", ", h);
  out.lines.push_back(fmt::format("another row of E or another matrix ({} products E_word M and E_word M^T, M in "
                                  "Wq, Wk, Wv): {}", products, hits.empty() ? "none reproduces it" : hits));
  found.insert(found.end(), other_hits.begin(), other_hits.end());

  // One entry of E_Bank changed: the result moves by delta * (row i of W).
  std::string e_hits;
  for (Index i = 0; i < 3; ++i) {
    double num = 0, den = 0;
    for (Index c = 0; c < 3; ++c) {
      num += (stated[static_cast<std::size_t>(c)] - exact[static_cast<std::size_t>(c)]) * W.value.at(i, c);
      den += W.value.at(i, c) * W.value.at(i, c);
    }
    const double delta = num / den;  // least squares
    bool hit = true;
    for (Index c = 0; c < 3; ++c)
      hit = hit && std::abs(exact[static_cast<std::size_t>(c)] + delta * W.value.at(i, c) -
                            stated[static_cast<std::size_t>(c)]) <= tol;
    if (hit) {
      const std::string hit_text =
          fmt::format("E_Bank[{}] = {:.4f} instead of {:.1f}", i + 1, E.at(1, i) + delta, E.at(1, i));
      append_item(e_hits, ", ", hit_text);
      found.push_back(hit_text);
    }
  }
  out.lines.push_back(fmt::format("a single changed entry of E_Bank: {}", e_hits.empty() ? "none reproduces it"
                                                                                           : e_hits));

  // One entry of W changed: only one component of the result moves, by E_Bank[i] * delta.
  std::vector<Index> bad;
  for (std::size_t c = 0; c < 3; ++c)
    if (std::abs(exact[c] - stated[c]) > tol) bad.push_back(static_cast<Index>(c));
  if (bad.size() != 1) {
    out.lines.push_back(fmt::format("a single changed entry of {}: impossible, it moves one component and {} "
                                    "differ", W.name, bad.size()));
  } else {
    const Index j = bad[0];
    const double diff = stated[static_cast<std::size_t>(j)] - exact[static_cast<std::size_t>(j)];
    for (Index i = 0; i < 3; ++i) {
      const double now = W.value.at(i, j);
      double then = now + diff / E.at(1, i);
      if (std::abs(then) < 1e-9) then = 0;  // no "-0.0000"
      const bool one_decimal = then > -1e-9 && then < 1 + 1e-9 && std::abs(then * 10 - std::round(then * 10)) < 1e-9;
      std::string what = fmt::format("{}({},{}) = {:.4f} instead of {:.1f}", W.name, i + 1, j + 1, then, now);
      if (std::abs(then) < 1e-9)
        what += fmt::format(" (the term {:.1f} x {:.1f} = {:.2f} dropped)", E.at(1, i), now, E.at(1, i) * now);
      out.lines.push_back(fmt::format("a single changed entry of {}: {}: {}", W.name, what,
                                      one_decimal ? "reproduces it, with a one-decimal value like the note's"
                                                  : "would reproduce it, but is no value of the note's kind"));
      if (one_decimal) found.push_back(what);
    }
  }

  if (found.empty()) {
    out.summary = fmt::format(
        "not explained: E_Bank {} = {}; neither W transposed ({}), nor another row of E or another of Wq, Wk, Wv, "
        "nor a single changed entry of E_Bank{} gives the stated {}: not derivable from the note's data",
        W.name, vec_str(exact, 2), row_str(Pt, 1, 2), bad.size() == 1 ? fmt::format(" or of {}", W.name) : std::string(), vec_str(stated, 2));
  } else {
    std::string list;
    for (const auto& f : found) append_item(list, "; or ", f);
    out.summary = fmt::format("{}: E_Bank {} = {} but the note has {}; reproduced by {}",
                              bad.size() == 1 ? fmt::format("a slip in component {} only", bad[0] + 1)
                                              : std::string("a different product"),
                              W.name, vec_str(exact, 2), vec_str(stated, 2), list);
  }
  return out;
}

Section note001_learnable() {
  Section s{"001", "Note 001: Q, K, V of Bank with the note's Wq, Wk, Wv; the learnable layer", {}, {}, {}};
  const TensorD E = e001();
  const TensorD E3 = rows_of(E, {0, 1, 2});  // Money Bank Grows
  const std::vector<NamedMatrix> Ws = {{"Wq", wq001()}, {"Wk", wk001()}, {"Wv", wv001()}};
  for (const auto& W : Ws) s.tables.push_back(table(fmt::format("001.{}", W.name), fmt::format("{} (note 001)", W.name), {"1", "2", "3"},
                                                    {"1", "2", "3"}, W.value, 1));

  Rng rng(3);
  SelfAttention<double> attn("attn", {.mode = AttentionMode::learnable, .d_model = 3}, rng);
  set_weights001(attn);  // the note's matrices as the layer's parameters
  Tape<double> tape;
  Var<double> x = tape.constant(as_sequence(E3));
  const std::array<Parameter<double>*, 3> params = {&attn.wq(), &attn.wk(), &attn.wv()};
  const std::array<std::array<double, 3>, 3> stated = {{{0.32, 0.59, 0.86}, {0.62, 0.71, 0.88}, {0.74, 0.67, 0.88}}};
  const char* vecs[3] = {"Q", "K", "V"};
  const char* lower[3] = {"q", "k", "v"};
  for (std::size_t m = 0; m < 3; ++m) {
    const TensorD P = matmul(x, tape.param(*params[m])).value();  // (1, 3, 3): Q = X Wq, ...
    s.tables.push_back(table(fmt::format("001.learnable.{}", vecs[m]), fmt::format("{} = X {} (matmul with the "
                             "layer's parameter)", vecs[m], Ws[m].name), {"Money", "Bank", "Grows"}, {"1", "2", "3"},
                             P, 4));
    const Explanation ex = explain_projection(vecs[m], stated[m], E, Ws, m);
    std::string tried;
    for (std::size_t l = 1; l < ex.lines.size(); ++l) append_item(tried, "; ", ex.lines[l]);
    s.lines.push_back(fmt::format("{} Tried: {}.", ex.lines[0], tried));
    for (std::size_t c = 0; c < 3; ++c)
      add(s, {.key = fmt::format("001.bank.{}{}", lower[m], c + 1),
              .what = fmt::format("{} of Bank, component {}", vecs[m], c + 1),
              .stated = stated[m][c],
              .decimals = 2,
              .computed = P.at(0, 1, static_cast<Index>(c)),
              .if_wrong = ex.summary,
              .computed_decimals = 4});
  }

  // The whole layer on "Money Bank Grows", with the standard scale and with none (as note 001).
  for (AttentionScale kind : {AttentionScale::inv_sqrt_d_head, AttentionScale::none}) {
    SelfAttention<double> layer("attn", {.mode = AttentionMode::learnable, .d_model = 3, .scale = kind}, rng);
    set_weights001(layer);
    TensorD w;
    const TensorD out = attend(layer, E3, &w);
    const std::string tag = kind == AttentionScale::none ? "none" : "sqrt";
    s.tables.push_back(table(fmt::format("001.learnable.{}.weights", tag),
                             fmt::format("attention weights softmax(Q K^T s), s = {}", to_string(kind)),
                             {"Money", "Bank", "Grows"}, {"Money", "Bank", "Grows"}, w, 5));
    s.tables.push_back(table(fmt::format("001.learnable.{}.output", tag),
                             fmt::format("outputs A V, s = {}", to_string(kind)), {"Money", "Bank", "Grows"},
                             {"1", "2", "3"}, out, 5));
  }
  s.lines.push_back(
      "The learnable SelfAttention<double> with these three matrices set as its parameters (attn.wq, attn.wk, "
      "attn.wv) on \"Money Bank Grows\"; the note stops at Bank's Q, K, V, so these are for reference.");
  return s;
}


}  // namespace tapegrad::walkthrough::detail
