#include "tapegrad/train/data_source.hpp"

#include <algorithm>

#include "tapegrad/autograd/ops.hpp"  // kIgnoreLabel
#include "tapegrad/core/crc32.hpp"

namespace tapegrad {
namespace {

// The shape of `count` examples of a tensor shaped like `s`.
Shape first_dim(const Shape& s, Index count) {
  switch (s.rank) {
    case 1: return Shape::vec(count);
    case 2: return Shape::mat(count, s.cols);
    default: return Shape::batched(count, s.rows, s.cols);
  }
}

// out = the examples of `all` at `indices`, each a contiguous block of numel / N values.
template <class T>
void gather_examples(const TensorT<T>& all, std::span<const Index> indices, TensorT<T>& out) {
  const Index n = leading_count(all.shape());
  const Index per = n > 0 ? all.numel() / n : 0;
  out.resize(first_dim(all.shape(), static_cast<Index>(indices.size())));
  for (std::size_t b = 0; b < indices.size(); ++b)
    std::copy_n(all.data() + indices[b] * per, per, out.data() + static_cast<Index>(b) * per);
}

template <class T>
void add_tensor(Crc32& crc, const TensorT<T>& t) {
  for (Index v : {Index(t.rank()), t.batch(), t.rows(), t.cols()}) crc.add_le(static_cast<std::uint64_t>(v));
  crc.add(t.data(), static_cast<std::size_t>(t.numel()) * sizeof(T));
}

void check_indices(std::string_view source, Index size, std::span<const Index> indices) {
  for (Index i : indices)
    if (i < 0 || i >= size)
      fail<ValueError>("fill: example {} is outside data source '{}' of {} examples", i, source, size);
}

}  // namespace

Index leading_count(const Shape& s) { return s.rank == 1 ? s.cols : s.rank == 2 ? s.rows : s.batch; }

// ---- SequenceSource ---------------------------------------------------------------------------------

SequenceSource::SequenceSource(const Dataset& data, Index length)
    : data_(data), length_(std::max(length, data.max_len())) {}

void SequenceSource::fill(std::span<const Index> indices, SequenceBatch& out) const {
  check_indices(name(), size(), indices);
  const auto B = static_cast<Index>(indices.size());
  out.tokens.resize(Shape::mat(B, length_));
  out.labels.resize(Shape::mat(B, length_));
  out.padding.resize(Shape::mat(B, length_));
  out.padded = false;
  out.labelled = 0;
  // Every example's vectors are allocated on their own, so each is a cache miss or two. Asked for all
  // at once, first, the misses of a batch overlap; taken in the copy loop, one example's copy fills the
  // CPU's window and they come one after another (docs/performance.md; perf record
  // build/examples/param_free_vs_learned --seeds 1).
  const auto example = [&](Index b) -> const Example& {
    return data_.examples[static_cast<std::size_t>(indices[static_cast<std::size_t>(b)])];
  };
  for (Index b = 0; b < B; ++b) {
    __builtin_prefetch(example(b).tokens.data());
    __builtin_prefetch(example(b).labels.data());
  }
  for (Index b = 0; b < B; ++b) {
    const Example& e = example(b);
    const auto n = static_cast<Index>(e.tokens.size());
    for (Index t = 0; t < length_; ++t) {
      const bool real = t < n;
      const std::int32_t label = real ? e.labels[static_cast<std::size_t>(t)] : kIgnoreLabel;
      out.tokens.at(b, t) = real ? e.tokens[static_cast<std::size_t>(t)] : 0;
      out.labels.at(b, t) = label;
      out.padding.at(b, t) = real ? 0 : 1;
      out.padded = out.padded || !real;
      out.labelled += label != kIgnoreLabel ? 1 : 0;
    }
  }
}

namespace {
void add_examples(Crc32& crc, const Dataset& data) {
  for (const auto& e : data.examples) {
    crc.add_le(static_cast<std::uint32_t>(e.tokens.size()));
    for (auto t : e.tokens) crc.add_le(static_cast<std::uint32_t>(t));
    for (auto l : e.labels) crc.add_le(static_cast<std::uint32_t>(l));
  }
}
}  // namespace

std::uint32_t examples_crc32(const Dataset& data) {
  Crc32 crc;
  add_examples(crc, data);
  return crc.value();
}

// Every example's length, token ids and label ids, then every name of both vocabularies, each with its
// length: the same ids under swapped label names are other data.
std::uint32_t SequenceSource::fingerprint() const {
  Crc32 crc;
  add_examples(crc, data_);
  for (const Vocabulary* v : {&data_.tokens, &data_.labels}) {
    crc.add_le(static_cast<std::uint64_t>(v->size()));
    for (const auto& name : v->names()) crc.add_le(static_cast<std::uint64_t>(name.size())).add(name.data(), name.size());
  }
  return crc.value();
}

// ---- TensorSource -----------------------------------------------------------------------------------

TensorSource::TensorSource(std::string name, Tensor features, Ids labels)
    : name_(std::move(name)), features_(std::move(features)), labels_(std::move(labels)) {
  if (labels_.rank() == 3)
    fail<ShapeError>("data source '{}': labels are {}; give one class per example (N) or per position (N, T)", name_,
                     labels_.shape());
  size_ = count_examples();
}

TensorSource::TensorSource(std::string name, Tensor features, Tensor targets)
    : name_(std::move(name)), features_(std::move(features)), targets_(std::move(targets)) {
  size_ = count_examples();
}

Index TensorSource::count_examples() const {
  if (features_.rank() == 1)
    fail<ShapeError>("data source '{}': features are a vector of {}; give (examples, features) or (examples, rows, "
                     "cols)",
                     name_, features_.shape());
  const Index n = leading_count(features_.shape());
  const bool classes = labels_.numel() > 0;
  const Shape other = classes ? labels_.shape() : targets_.shape();
  if (leading_count(other) != n)
    fail<ShapeError>("data source '{}': {} examples of features ({}) but {} of {} ({})", name_, n, features_.shape(),
                     leading_count(other), classes ? "labels" : "targets", other);
  if (n == 0) fail<ShapeError>("data source '{}': no examples", name_);
  return n;
}

void TensorSource::fill(std::span<const Index> indices, TensorBatch& out) const {
  check_indices(name(), size(), indices);
  gather_examples(features_, indices, out.features);
  out.examples = static_cast<Index>(indices.size());
  if (labels_.numel() > 0) {
    gather_examples(labels_, indices, out.labels);
    out.labelled = static_cast<Index>(std::count_if(out.labels.span().begin(), out.labels.span().end(),
                                                    [](std::int32_t l) { return l != kIgnoreLabel; }));
  } else {
    gather_examples(targets_, indices, out.targets);
  }
}

std::uint32_t TensorSource::fingerprint() const {
  Crc32 crc;
  add_tensor(crc, features_);
  add_tensor(crc, labels_);
  add_tensor(crc, targets_);
  return crc.value();
}

}  // namespace tapegrad
