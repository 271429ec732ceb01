#include "tapegrad/train/data_source.hpp"

#include <algorithm>

#include "tapegrad/autograd/ops.hpp"  // kIgnoreLabel
#include "tapegrad/core/crc32.hpp"

namespace tapegrad {
namespace {

// The dimension of a shape that counts its examples: cols for rank 1, rows for rank 2, batch for rank 3.
Index& leading(Shape& s) { return s.rank == 1 ? s.cols : s.rank == 2 ? s.rows : s.batch; }
Index leading_count(Shape s) { return leading(s); }

// out = the examples of `all` at `indices`, each a contiguous block of numel / N values.
template <class T>
void gather_examples(const TensorT<T>& all, std::span<const Index> indices, TensorT<T>& out) {
  const Index n = leading_count(all.shape());
  const Index per = n > 0 ? all.numel() / n : 0;
  Shape shape = all.shape();
  leading(shape) = static_cast<Index>(indices.size());
  out.resize(shape);
  for (std::size_t b = 0; b < indices.size(); ++b)
    std::copy_n(all.data() + indices[b] * per, per, out.data() + static_cast<Index>(b) * per);
}

template <class T>
void add_tensor(Crc32& crc, const TensorT<T>& t) {
  for (Index v : {Index(t.rank()), t.batch(), t.rows(), t.cols()}) crc.add_le(static_cast<std::uint64_t>(v));
  crc.add(t.data(), static_cast<std::size_t>(t.numel()) * sizeof(T));
}

// Every source's refusal of an index that is not one of its examples (a TokenWindows' window included).
void check_indices(std::string_view source, Index size, std::span<const Index> indices) {
  for (Index i : indices)
    if (i < 0 || i >= size)
      fail<ValueError>("fill: example {} is outside data source '{}' of {} examples", i, escaped(source), size);
}

}  // namespace

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

// Every example's length, token ids and label ids, then every name of both vocabularies, each with its
// length: the same ids under swapped label names are other data.
std::uint32_t SequenceSource::fingerprint() const {
  Crc32 crc;
  for (const auto& e : data_.examples) {
    crc.add_le(static_cast<std::uint32_t>(e.tokens.size()));
    for (auto t : e.tokens) crc.add_le(static_cast<std::uint32_t>(t));
    for (auto l : e.labels) crc.add_le(static_cast<std::uint32_t>(l));
  }
  for (const Vocabulary* v : {&data_.tokens, &data_.labels}) {
    crc.add_le(static_cast<std::uint64_t>(v->size()));
    for (const auto& name : v->names())
      crc.add_le(static_cast<std::uint64_t>(name.size())).add(name.data(), name.size());
  }
  return crc.value();
}

// ---- TokenWindows -----------------------------------------------------------------------------------

// None for a context below 1, which the windows' constructor refuses (a division by it would end the process).
Index consecutive_windows(Index n, Index context) { return n > 0 && context > 0 ? (n - 1) / context : 0; }

TokenWindows::TokenWindows(Kind kind, File file, Index context, Index stride, Index count,
                           std::vector<std::int32_t> map)
    : kind_(kind), file_(std::move(file)), context_(context), stride_(stride), count_(count), map_(std::move(map)) {
  if (context_ < 1) fail<ValueError>("{}: windows of a context of {}; give 1 or more", file_->op(), context_);
  if (file_->size() < context_ + 1)
    fail<FormatError>("{}: '{}' holds {} ids, fewer than one window of {} (a context of {} and the id after it)",
                      file_->op(), escaped(file_->path()), file_->size(), context_ + 1, context_);
  if (!map_.empty() && static_cast<Index>(map_.size()) != file_->vocab())
    fail<ValueError>("{}: a map of {} ids for '{}', whose vocabulary has {}", file_->op(), map_.size(),
                     escaped(file_->path()), file_->vocab());
  if (count_ < 1)
    fail<ValueError>("{}: '{}' holds {} ids, which make no window of {} taken every {}", file_->op(),
                     escaped(file_->path()), file_->size(), context_ + 1, stride_ / context_);
  ids_.resize(static_cast<std::size_t>(context_ + 1));
}

TokenWindows TokenWindows::training(File file, Index context, std::vector<std::int32_t> map) {
  const Index count = file->size() - context;  // starts 0 .. N - T - 1
  return TokenWindows(Kind::training, std::move(file), context, 1, count, std::move(map));
}

TokenWindows TokenWindows::consecutive(File file, Index context, Index every, std::vector<std::int32_t> map) {
  if (every < 1) fail<ValueError>("{}: every {}-th window; give 1 or more", file->op(), every);
  const Index count = consecutive_windows(file->size(), context) / every;
  return TokenWindows(Kind::consecutive, std::move(file), context, context * every, count, std::move(map));
}

TokenWindows TokenWindows::sample(File file, Index context, Index count, std::uint64_t seed,
                                  std::vector<std::int32_t> map) {
  const Index all = consecutive_windows(file->size(), context);
  if (count < 1) fail<ValueError>("{}: a sample of {} windows; give 1 or more", file->op(), count);
  if (count >= all) return consecutive(std::move(file), context, 1, std::move(map));
  TokenWindows w(Kind::sample, std::move(file), context, context, count, std::move(map));
  w.seed_ = seed;
  w.sampler_.emplace(all, 1, seed);
  return w;
}

Index TokenWindows::start(Index k) const {
  check_indices(name(), count_, std::span(&k, 1));
  return sampler_ ? sampler_->at(k) * context_ : k * stride_;
}

void TokenWindows::window(Index k, std::span<std::int32_t> out) const {
  if (static_cast<Index>(out.size()) != context_ + 1)
    fail<ValueError>("{}: a window of {} ids read into room for {}", file_->op(), context_ + 1, out.size());
  file_->read(start(k), out, map_);
}

void TokenWindows::fill(std::span<const Index> indices, SequenceBatch& out) const {
  const auto B = static_cast<Index>(indices.size()), T = context_;
  out.tokens.resize(Shape::mat(B, T));
  out.labels.resize(Shape::mat(B, T));
  out.padding.resize(Shape::mat(B, T));
  out.padding.set_zero();
  out.padded = false;
  out.labelled = B * T;
  for (Index b = 0; b < B; ++b) {
    window(indices[static_cast<std::size_t>(b)], ids_);
    std::copy_n(ids_.begin(), T, out.tokens.data() + b * T);
    std::copy_n(ids_.begin() + 1, T, out.labels.data() + b * T);
  }
}

std::uint32_t TokenWindows::fingerprint() const {
  Crc32 crc;
  crc.add_le(static_cast<std::uint8_t>(kind_));
  for (Index v : {context_, stride_, count_, population()}) crc.add_le(static_cast<std::uint64_t>(v));
  crc.add_le(seed_);
  crc.add_le(file_->fingerprint());
  crc.add_le(static_cast<std::uint64_t>(map_.size()));
  for (const std::int32_t id : map_) crc.add_le(static_cast<std::uint32_t>(id));
  return crc.value();
}

// ---- TensorSource -----------------------------------------------------------------------------------

TensorSource::TensorSource(std::string name, Tensor features, Ids labels)
    : name_(std::move(name)), features_(std::move(features)), labels_(std::move(labels)), size_(count_examples()) {}

TensorSource::TensorSource(std::string name, Tensor features, Tensor targets)
    : name_(std::move(name)), features_(std::move(features)), targets_(std::move(targets)), size_(count_examples()) {}

Index TensorSource::count_examples() const {
  if (labels_.rank() == 3)  // a targets source has none
    fail<ShapeError>("data source '{}': labels are {}; give one class per example (N) or per position (N, T)", name_,
                     labels_.shape());
  if (features_.rank() == 1)
    fail<ShapeError>(
        "data source '{}': features are a vector of {}; give (examples, features) or (examples, rows, "
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
    out.labelled = out.labels.numel() - std::ranges::count(out.labels.span(), kIgnoreLabel);
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
