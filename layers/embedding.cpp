#include "tapegrad/layers/embedding.hpp"

#include <cmath>

#include "tapegrad/autograd/ops.hpp"

namespace tapegrad {

template <class T>
Embedding<T>::Embedding(std::string name, const EmbeddingOptions& options, Rng& rng) : Module<T>(std::move(name)) {
  if (options.vocab <= 0 || options.dim <= 0)
    fail<ValueError>("embedding '{}': vocab and dim must be positive, got {} and {}", this->name(), options.vocab,
                     options.dim);
  table_ = &this->register_parameter("table", options.init.make<T>(Shape::mat(options.vocab, options.dim), rng));
}

template <class T>
Var<T> Embedding<T>::forward(Tape<T>& tape, const Ids& ids) {
  return gather_rows(tape.param(*table_), ids);
}

template <class T>
Var<T> OneHotTokens<T>::forward(Tape<T>& tape, const Ids& ids) {
  if (ids.rank() == 3)
    fail<ShapeError>("one_hot_tokens '{}': ids are {}; they must be (N) or (batch, rows)", this->name(), ids.shape());
  for (Index i = 0; i < ids.numel(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab_)
      fail<ValueError>("one_hot_tokens '{}': id {} at position {} is outside the vocabulary of {}", this->name(),
                       ids[i], i, vocab_);
  // A constant built in place on the tape (no buffer here to copy from, no vocab x vocab table).
  const Shape shape = ids.rank() == 2 ? Shape::batched(ids.rows(), ids.cols(), vocab_) : Shape::mat(ids.cols(), vocab_);
  return tape.constant("one_hot_tokens", shape, [&](TensorT<T>& one_hot) {
    one_hot.set_zero();
    for (Index i = 0; i < ids.numel(); ++i) one_hot[i * vocab_ + ids[i]] = T(1);
  });
}

template <class T>
Positions<T>::Positions(std::string name, const PositionOptions& options, Rng* rng)
    : Module<T>(std::move(name)), options_(options) {
  if (options.max_len <= 0 || options.d_model <= 0)
    fail<ValueError>("positions '{}': max_len and d_model must be positive, got {} and {}", this->name(),
                     options.max_len, options.d_model);
  const Index L = options.max_len, D = options.d_model;
  // (One-hot positions are built per batch, (B, T, max_len): no (max_len, max_len) table.)
  if (options.kind == PositionEncoding::learned) {
    if (!rng)
      fail<ValueError>("positions '{}': learned positions initialise a table, so they need an Rng", this->name());
    learned_ = &this->register_parameter("table", options.init.make<T>(Shape::mat(L, D), *rng));
  }
  if (options.kind == PositionEncoding::sinusoidal) {
    // Vaswani et al.: PE(t, 2i) = sin(t / 10000^(2i/D)), PE(t, 2i+1) = cos(t / 10000^(2i/D)).
    table_.resize(Shape::mat(L, D));
    for (Index t = 0; t < L; ++t)
      for (Index c = 0; c < D; ++c) {
        const double angle =
            static_cast<double>(t) / std::pow(10000.0, static_cast<double>(c - c % 2) / static_cast<double>(D));
        table_.at(t, c) = static_cast<T>(c % 2 == 0 ? std::sin(angle) : std::cos(angle));
      }
  }
}

template <class T>
Var<T> Positions<T>::forward_from(Var<T> x, Index first) {
  Tape<T>& tape = Tape<T>::of("positions", {{"x", x}});
  const Shape s = x.shape();
  if (s.rank != 3 || s.cols != options_.d_model || (first == 0 && s.rows > options_.max_len))
    fail<ShapeError>("positions '{}': x is {} but the layer takes (batch, T <= {}, {}) inputs", this->name(), s,
                     options_.max_len, options_.d_model);
  if (first < 0 || first > options_.max_len - s.rows)
    fail<ValueError>("positions '{}': {} past the longest sequence, max_len {}", this->path(),
                     s.rows == 1 ? fmt::format("position {} is", first)
                                 : fmt::format("positions {} to {} go", first, first + s.rows - 1),
                     options_.max_len);
  if (options_.kind == PositionEncoding::none) return x;
  if (options_.kind == PositionEncoding::onehot) {
    // (B, T, max_len) with e_(first + t) in row t: a constant built in place on the tape.
    const Var<T> one_hot =
        tape.constant("one_hot_positions", Shape::batched(s.batch, s.rows, options_.max_len), [&](TensorT<T>& e) {
          e.set_zero();
          for (Index b = 0; b < s.batch; ++b)
            for (Index t = 0; t < s.rows; ++t) e.at(b, t, first + t) = T(1);
        });
    const Var<T> parts[] = {x, one_hot};
    return concat_cols<T>(parts);
  }
  positions_.resize(Shape::vec(s.rows));
  for (Index t = 0; t < s.rows; ++t) positions_[t] = static_cast<std::int32_t>(first + t);
  // Rows first .. first + T - 1 of the table (learned, or the sinusoidal one read in place), shared by the batch.
  const Var<T> table = learned_ ? tape.param(*learned_) : tape.constant_in_place(table_);
  return x + gather_rows(table, positions_);
}

template class Embedding<float>;
template class Embedding<double>;
template class OneHotTokens<float>;
template class OneHotTokens<double>;
template class Positions<float>;
template class Positions<double>;

}  // namespace tapegrad
