// Notes 002 ("The dog is sitting on the mat"), 003 (the scaling claim) and 004 (the Apple example)
// recomputed.
#include "walkthrough/notes_support.hpp"

#include "tapegrad/core/rng.hpp"

namespace tapegrad::walkthrough::detail {

// ---- note 002: "The dog is sitting on the mat" -------------------------------------------------

Section note002() {
  Section s{"002", "Note 002: \"The dog is sitting on the mat\", query \"sitting\"", {}, {}, {}};
  const Names words = {"The", "dog", "is", "sitting", "on", "the"};
  const TensorD Q = mat(6, 3, {0.2, 0.5, 0.1, 0.4, 0.6, 0.2, 0.1, 0.3, 0.2, 0.3, 0.4, 0.1, 0.5, 0.2, 0.3, 0.3, 0.1, 0.5});
  const TensorD K = mat(6, 3, {0.1, 0.3, 0.6, 0.2, 0.4, 0.7, 0.3, 0.5, 0.4, 0.4, 0.3, 0.5, 0.6, 0.4, 0.2, 0.4, 0.2, 0.6});
  const TensorD V = mat(6, 3, {0.3, 0.2, 0.8, 0.5, 0.3, 0.9, 0.2, 0.1, 0.7, 0.6, 0.4, 0.9, 0.7, 0.5, 0.8, 0.8, 0.6, 0.9});
  const Index sitting = 3;

  // The note gives Q, K, V directly, not embeddings and weights. To run them through the layer, put
  // them side by side as X = [Q K V] (6, 9) and let Wq, Wk, Wv be the matrices that pick the blocks.
  TensorD X(Shape::mat(6, 9));
  for (Index t = 0; t < 6; ++t)
    for (Index c = 0; c < 3; ++c) {
      X.at(t, c) = Q.at(t, c);
      X.at(t, 3 + c) = K.at(t, c);
      X.at(t, 6 + c) = V.at(t, c);
    }
  s.tables.push_back(table("002.inputs", "the note's vectors: X = [Q K V] (no vectors for \"mat\")", words,
                           {"q1", "q2", "q3", "k1", "k2", "k3", "v1", "v2", "v3"}, X, 1));
  Rng rng(4);
  TensorD w_sqrt, w_d, out_sqrt, out_d;
  double divisor = 0;
  for (AttentionScale kind : {AttentionScale::inv_sqrt_d_head, AttentionScale::inv_d_head}) {
    SelfAttention<double> layer("attn", {.mode = AttentionMode::learnable, .d_model = 9, .d_head = 3, .scale = kind},
                                rng);
    Parameter<double>* picks[3] = {&layer.wq(), &layer.wk(), &layer.wv()};
    for (Index m = 0; m < 3; ++m) {
      picks[m]->value.set_zero();
      for (Index c = 0; c < 3; ++c) picks[m]->value.at(3 * m + c, c) = 1;
    }
    if (kind == AttentionScale::inv_sqrt_d_head) {
      out_sqrt = attend(layer, X, &w_sqrt);
      divisor = 1 / layer.scale_factor();
    } else {
      out_d = attend(layer, X, &w_d);
    }
  }
  Table weights{"002.sitting.weights", "weights of \"sitting\" over the six given tokens",
                {"1/sqrt(3)", "1/3 (note)"}, words, {}, 5};
  Table outputs{"002.sitting.output", "contextual \"sitting\" = weights x V", {"1/sqrt(3)", "1/3 (note)"},
                {"1", "2", "3"}, {}, 5};
  for (const auto* w : {&w_sqrt, &w_d})
    for (Index j = 0; j < 6; ++j) weights.values.push_back(w->at(0, sitting, j));
  for (const auto* o : {&out_sqrt, &out_d})
    for (Index c = 0; c < 3; ++c) outputs.values.push_back(o->at(0, sitting, c));

  Tape<double> tape;
  Var<double> q = tape.constant(rows_of(Q, {sitting}));
  const TensorD scores = matmul_bt(q, tape.constant(K)).value();  // (1, 6): sitting's query . every key
  s.tables.push_back(table("002.scores", "raw scores q_sitting . k_j (matmul_bt)", {"q_sitting"}, words, scores, 4));
  // What the note did: a softmax over "The" and "dog" only, dividing by 3.
  const TensorD pair_true =
      softmax_rows(scale(matmul_bt(q, tape.constant(rows_of(K, {0, 1}))), 1.0 / 3)).value();
  const TensorD pair_note = softmax_rows(scale(tape.constant(mat(1, 2, {0.13, 0.26})), 1.0 / 3)).value();
  const TensorD pair_sqrt =
      softmax_rows(scale(matmul_bt(q, tape.constant(rows_of(K, {0, 1}))), 1 / divisor)).value();
  Table pair{"002.pair", "softmax over \"The\" and \"dog\" only (as the note)",
             {"note scores, /3", "true scores, /3", "true scores, /sqrt3"}, {"The", "dog"}, {}, 5};
  for (const auto* p : {&pair_note, &pair_true, &pair_sqrt})
    for (Index j = 0; j < 2; ++j) pair.values.push_back(p->at(0, j));

  add(s, {.key = "002.tokens",
          .what = "tokens with Q, K, V",
          .stated = 7,
          .decimals = 0,
          .computed = static_cast<double>(Q.rows()),
          .if_wrong = "data the note never gives: the sentence has 7 words but only 6 get vectors; \"mat\" has no "
                      "Query, Key or Value, so the sentence cannot be computed in full, only its first six tokens",
          .tolerance_reason = "a count (the 7 words of the sentence)",
          .computed_decimals = 0});
  add(s, {.key = "002.dk",
          .what = "d_k",
          .stated = 3,
          .decimals = 0,
          .computed = static_cast<double>(K.cols()),
          .if_wrong = "d_k is the length of the key vectors",
          .tolerance_reason = "a count",
          .computed_decimals = 0});
  const double st_dot[2] = {0.13, 0.26};
  for (Index j = 0; j < 2; ++j) {
    const auto name = words[static_cast<std::size_t>(j)];
    std::string terms, products;
    for (Index c = 0; c < 3; ++c) {
      terms += fmt::format("{}{:.1f}x{:.1f}", c ? " + " : "", Q.at(sitting, c), K.at(j, c));
      products += fmt::format("{}{:.2f}", c ? " + " : "", Q.at(sitting, c) * K.at(j, c));
    }
    add(s, {.key = fmt::format("002.dot.{}", name),
            .what = fmt::format("q_sitting . k_{}", name),
            .stated = st_dot[j],
            .decimals = 2,
            .computed = scores.at(0, j),
            .if_wrong = fmt::format("an arithmetic slip: the note's own terms {} = {} add to {:.2f}{}", terms,
                                    products, scores.at(0, j),
                                    j == 1 ? " (the stated 0.26 is exactly twice the stated 0.13)" : "")});
  }
  add(s, {.key = "002.divisor",
          .what = "divisor of the scores",
          .stated = 3,
          .decimals = 0,
          .computed = divisor,
          .if_wrong = "division by d instead of sqrt(d): the note writes softmax(0.13/3), but its own formula two "
                      "paragraphs earlier is softmax(QK^T / sqrt(d_k)), and sqrt(3) = 1.7321 (tapegrad: "
                      "AttentionScale::inv_d_head reproduces the note's 1/3, shown beside the standard one)",
          .computed_decimals = 4});
  const double st_w[2] = {0.4, 0.6};
  const double gap = std::log(st_w[1] / st_w[0]);  // scaled score gap that 0.4 / 0.6 needs
  for (Index j = 0; j < 2; ++j) {
    const auto name = words[static_cast<std::size_t>(j)];
    add(s, {.key = fmt::format("002.weight.{}", name),
            .what = fmt::format("weight of \"{}\"", name),
            .stated = st_w[j],
            .decimals = 1,
            .computed = w_sqrt.at(0, sitting, j),
            .if_wrong = fmt::format(
                "inconsistent with the note's own numbers: over all six tokens with 1/sqrt(3) the weight is {:.4f} "
                "(with the note's 1/3: {:.4f}); even a softmax over just The and dog gives {:.4f} from the note's "
                "scores 0.13, 0.26 divided by 3, {:.4f} from the true scores. 0.4 vs 0.6 needs a scaled score gap "
                "of ln(1.5) = {:.3f}, i.e. raw scores {:.3f} apart with /3; the note's are 0.13 apart, the true ones "
                "{:.2f}",
                w_sqrt.at(0, sitting, j), w_d.at(0, sitting, j), pair_note.at(0, j), pair_true.at(0, j), gap, 3 * gap,
                scores.at(0, 1) - scores.at(0, 0))});
  }
  // The vectors the note multiplies in its weighted sums must be the Values it gave for The and dog.
  const std::array<std::array<double, 3>, 2> st_v = {{{0.3, 0.2, 0.8}, {0.5, 0.3, 0.9}}};
  for (Index j = 0; j < 2; ++j)
    for (Index c = 0; c < 3; ++c)
      add(s, {.key = fmt::format("002.sum_vector.{}.{}", words[static_cast<std::size_t>(j)], c + 1),
              .what = fmt::format("V({}) in the weighted sum, [{}]", words[static_cast<std::size_t>(j)], c + 1),
              .stated = st_v[static_cast<std::size_t>(j)][static_cast<std::size_t>(c)],
              .decimals = 1,
              .computed = V.at(j, c),
              .if_wrong = "not the Value vector the note gave for this token",
              .computed_decimals = 2});
  TensorD sums(Shape::mat(4, 3));
  for (Index c = 0; c < 3; ++c) {
    sums.at(0, c) = st_w[0] * V.at(0, c);
    sums.at(1, c) = st_w[1] * V.at(1, c);
    sums.at(2, c) = w_sqrt.at(0, sitting, 0) * V.at(0, c);
    sums.at(3, c) = w_sqrt.at(0, sitting, 1) * V.at(1, c);
  }
  s.tables.push_back(std::move(pair));
  s.tables.push_back(std::move(weights));
  s.tables.push_back(std::move(outputs));
  s.tables.push_back(table("002.weighted_sum", "the note's weighted sums vs the correct terms (1/sqrt 3, six tokens)",
                           {"0.4 x V(The) (note)", "0.6 x V(dog) (note)", "w x V(The)", "w x V(dog)"}, {"1", "2", "3"},
                           sums, 4));
  s.lines.push_back(
      "The note states no value for the weighted sums, only their form 0.4 x V(The) and 0.6 x V(dog), and stops "
      "there: it never adds the six terms into the contextual vector of \"sitting\". Both are computed here with "
      "SelfAttention<double> (learnable mode with X = [Q K V] and Wq, Wk, Wv that pick the three blocks), with "
      "the standard 1/sqrt(3) and with the note's 1/3 (AttentionScale::inv_d_head).");
  return s;
}

// ---- note 003 -----------------------------------------------------------------------------------

Section note003() {
  Section s{"003", "Note 003: scaling by sqrt(d_k), identity initialisation", {}, {}, {}};
  Rng rng(5);
  SelfAttention<double> four("attn", parameter_free(4, AttentionScale::inv_sqrt_d_head), rng);
  add(s, {.key = "003.sqrt_dk",
          .what = "sqrt(d_k) for d_k = 4",
          .stated = 2,
          .decimals = 0,
          .computed = 1 / four.scale_factor(),
          .if_wrong = "sqrt(4) = 2",
          .if_ok = "SelfAttention with d_model 4 divides its scores by 1/scale_factor() = 2",
          .computed_decimals = 4});

  // "These weight matrices are initially set (e.g., identity matrix)": then learnable = parameter-free.
  const TensorD E = e001();
  SelfAttention<double> free_layer("free", parameter_free(3, AttentionScale::inv_sqrt_d_head), rng);
  SelfAttention<double> identity(
      "eye", {.mode = AttentionMode::learnable, .d_model = 3, .init = Initializer::identity_plus_noise(0)}, rng);
  const TensorD a = attend(free_layer, E), b = attend(identity, E);
  double max_diff = 0;
  for (Index i = 0; i < a.numel(); ++i) max_diff = std::max(max_diff, std::abs(a[i] - b[i]));
  reference(s, "003.identity.max_diff", "|learnable(I) - free|, max", max_diff, 3,
            "largest difference between the learnable layer with Wq = Wk = Wv = I and the parameter-free layer on "
            "note 001's E (0: identical)");

  // "Without scaling, softmax can assign almost all attention weight to a single token."
  const TensorD E3 = rows_of(E, {0, 1, 2});
  double top[2] = {0, 0};
  int k = 0;
  for (AttentionScale kind : {AttentionScale::none, AttentionScale::inv_sqrt_d_head}) {
    SelfAttention<double> layer("attn", {.mode = AttentionMode::learnable, .d_model = 3, .scale = kind}, rng);
    set_weights001(layer);
    TensorD w;
    attend(layer, E3, &w);
    top[k++] = w.array().maxCoeff();
  }
  reference(s, "003.saturation.none", "largest weight, unscaled", top[0], 5,
            "note 001's learnable example (Money Bank Grows) without scaling");
  reference(s, "003.saturation.sqrt", "largest weight, 1/sqrt(3)", top[1], 5, "the same with 1/sqrt(3)");
  s.lines.push_back(fmt::format(
      "The note's only number is sqrt(4) = 2. Its qualitative claims check out on the notes' own data: with "
      "identity Wq, Wk, Wv the learnable layer is the parameter-free one (largest difference {:g}), and scaling "
      "flattens the weights (largest weight of note 001's learnable example: {:.4f} unscaled, {:.4f} scaled). With "
      "d = 3 the effect is mild; it grows with d, as dot products of d-dimensional vectors grow like sqrt(d).",
      max_diff, top[0], top[1]));
  return s;
}

// ---- note 004: the Apple example ----------------------------------------------------------------

Section note004() {
  Section s{"004", "Note 004: Apple, phone and the attention row of \"Apple\"", {}, {}, {}};
  Tape<double> tape;
  const TensorD abc = mat(3, 3, {1, 0, 0, 0, 10, 2, 2, 0, 2});
  Var<double> g = tape.constant(abc);
  const TensorD G = matmul_bt(g, g).value();  // (3, 3) dot products of a, b, c
  const std::pair<const char*, Index> dots[3] = {{"aa", 0}, {"ab", 1}, {"ac", 2}};
  const double st_dots[3] = {1, 0, 2};
  for (Index i = 0; i < 3; ++i)
    add(s, {.key = fmt::format("004.dot.{}", dots[i].first),
            .what = fmt::format("dot(a, {})", "abc"[i]),
            .stated = st_dots[i],
            .decimals = 0,
            .computed = G.at(0, dots[i].second),
            .if_wrong = "an arithmetic slip",
            .computed_decimals = 4});

  // Apple [5, 2, 0] and phone [0, 5, 0]: the only embeddings the note's text implies (the others are
  // in an image, img/emb1.png).
  const TensorD ap = mat(2, 3, {5, 2, 0, 0, 5, 0});
  Var<double> x = tape.constant(ap);
  Rng rng(6);
  SelfAttention<double> attn("attn", parameter_free(3, AttentionScale::inv_sqrt_d_head), rng);
  const TensorD sim = scale(matmul_bt(x, x), attn.scale_factor()).value();  // (2, 2) scaled scores
  TensorD w;
  attend(attn, ap, &w);
  add(s, {.key = "004.sim.apple_apple",
          .what = "similarity(apple, apple)",
          .stated = 16.74,
          .decimals = 2,
          .computed = sim.at(0, 0),
          .if_wrong = "(25 + 4 + 0) / sqrt(3)"});
  add(s, {.key = "004.sim.apple_phone",
          .what = "similarity(apple, phone)",
          .stated = 5.77,
          .decimals = 2,
          .computed = sim.at(0, 1),
          .if_wrong = "(0 + 10 + 0) / sqrt(3)"});
  add(s, {.key = "004.apple_dims",
          .what = "length of Apple's embedding",
          .stated = 5,
          .decimals = 0,
          .computed = static_cast<double>(ap.cols()),
          .if_wrong = "inconsistent with the note's own numbers: it first writes Apple[5, 0, 0, 2, 0] (5 entries), "
                      "then sets the embedding length to 3 and uses Apple = [5 (fruits), 2 (computers), 0 "
                      "(language)]. The same five numbers reappear as the second operand of the 4.99986 dot "
                      "product, where they can only be the 'fruits' column of V, one value per word (apple 5, is "
                      "0, phone 0, garden 2, the 0): that column, not Apple's embedding",
          .tolerance_reason = "a count",
          .computed_decimals = 0});
  const double st_row[5] = {0.99997, 0.00000, 0.00002, 0.00002, 0.00000};
  const double fruit[5] = {5, 0, 0, 2, 0};
  add(s, {.key = "004.fruit.apple",
          .what = "[5 0 0 2 0] entry 1 = fruits(apple)",
          .stated = fruit[0],
          .decimals = 0,
          .computed = ap.at(0, 0),
          .if_wrong = "the first entry is not Apple's 'fruits' feature",
          .if_ok = "consistent with reading [5 0 0 2 0] as V's 'fruits' column",
          .computed_decimals = 0});
  add(s, {.key = "004.fruit.phone",
          .what = "[5 0 0 2 0] entry 3 = fruits(phone)",
          .stated = fruit[2],
          .decimals = 0,
          .computed = ap.at(1, 0),
          .if_wrong = "the third entry is not phone's 'fruits' feature",
          .if_ok = "consistent with reading [5 0 0 2 0] as V's 'fruits' column",
          .computed_decimals = 0});

  const double ratio = w.at(0, 0, 1) / w.at(0, 0, 0);  // w_phone / w_apple = e^(5.77 - 16.74)
  add(s, {.key = "004.row.phone",
          .what = "weight of phone in Apple's row",
          .stated = st_row[2],
          .decimals = 5,
          .computed = st_row[0] * ratio,
          .if_wrong = "the two scores fix w_phone / w_apple",
          .if_ok = fmt::format("derivable: the two scores fix w_phone / w_apple = e^(5.7735 - 16.7432) = {:.4e} "
                               "(softmax_rows of the 2-word sequence), times the stated w_apple 0.99997",
                               ratio),
          .computed_decimals = 8});
  reference(s, "004.ratio", "w_phone / w_apple", ratio, 10, "from the softmax of the two scaled scores");
  reference(s, "004.apple_bound", "upper bound on w_apple", w.at(0, 0, 0), 7,
            "w_apple with phone as the only other word; more words can only lower it");
  Var<double> row = tape.constant(mat(1, 5, {st_row[0], st_row[1], st_row[2], st_row[3], st_row[4]}));
  add(s, {.key = "004.row.sum",
          .what = "the printed row sums to 1",
          .stated = 1,
          .decimals = 5,
          .computed = sum(row).value()[0],
          .if_wrong = "a softmax row sums to 1",
          .if_ok = "the printed row adds to 1.00001, within the rounding of its five 5-decimal entries",
          .tolerance = 5 * 0.5e-5,
          .tolerance_reason = "five entries rounded to 5 decimals"});
  add(s, {.key = "004.text_apple_weight",
          .what = "\"mostly similar to itself\"",
          .stated = 0.9997,
          .decimals = 4,
          .computed = st_row[0],
          .if_wrong = "a typo: the text says 0.9997 where the row it quotes says 0.99997 (a 9 dropped)"});
  const TensorD dot = matmul_bt(row, tape.constant(mat(1, 5, {fruit[0], fruit[1], fruit[2], fruit[3], fruit[4]}))).value();
  // Weights that round to the printed ones: each within half a unit of the 5th decimal.
  const double lo = 5 * (st_row[0] - 0.5e-5) + 2 * (st_row[3] - 0.5e-5);
  const double hi = 5 * (st_row[0] + 0.5e-5) + 2 * (st_row[3] + 0.5e-5);
  add(s, {.key = "004.dot_fruit",
          .what = "dot(row, [5 0 0 2 0])",
          .stated = 4.99986,
          .decimals = 5,
          .computed = dot.at(0, 0),
          .if_wrong = fmt::format(
              "inconsistent with the note's own numbers: the row and vector it prints give 5 x 0.99997 + 2 x "
              "0.00002 = {:.5f}. Weights that round to the printed ones give anything in [{:.6f}, {:.6f}], which "
              "contains 4.99986{}, so it was probably computed from unrounded weights that only the image shows",
              dot.at(0, 0), lo, hi, 4.99986 >= lo - 1e-12 && 4.99986 <= hi + 1e-12 ? " (at its low end)" : " NOT")});
  reference(s, "004.dot_fruit.lo", "lowest dot, rounded weights", lo, 6,
            "5 (0.99997 - 0.000005) + 2 (0.00002 - 0.000005)");
  reference(s, "004.dot_fruit.hi", "highest dot, rounded weights", hi, 6,
            "5 (0.99997 + 0.000005) + 2 (0.00002 + 0.000005)");
  // The inputs first, so that the output alone is enough to follow the example.
  s.tables.push_back(table("004.abc", "the note's vectors for its dot-product warm-up", {"a", "b", "c"},
                           {"x1", "x2", "x3"}, abc, 0));
  s.tables.push_back(table("004.inputs", "X: Apple and phone as the note's text implies (the rest is in images)",
                           {"apple", "phone"}, {"fruits", "computers", "language"}, ap, 0));
  s.tables.push_back(table("004.sim", "scaled scores (X X^T) / sqrt(3) of apple, phone", {"apple", "phone"},
                           {"apple", "phone"}, sim, 4));
  s.tables.push_back(table("004.weights", "softmax_rows of them (SelfAttention parameter_free)", {"apple", "phone"},
                           {"apple", "phone"}, w, 8));
  s.lines.push_back(fmt::format(
      "What cannot be checked: the embeddings of \"is\", \"garden\" and \"the\", the pairwise and scaled matrices, "
      "the attention matrix beyond the row it quotes and the adjusted embeddings are only in images "
      "(img/emb1.png, pairwise.png, pairwise_scaled.png, V_new_embeddings.png, adjusted_embed.png), so the "
      "weights of \"is\", \"garden\", \"the\" and Apple's own 0.99997 cannot be recomputed, nor can \"apple is more "
      "similar to garden than to phone\". What can: the phone weight follows from the two scores; Apple's weight "
      "must be at most {:.6f} (its weight with phone as the only other word), and 0.99997 is.",
      w.at(0, 0, 0)));
  return s;
}


}  // namespace tapegrad::walkthrough::detail
