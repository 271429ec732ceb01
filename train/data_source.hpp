#pragma once
// Data sources: what the training loop (train/trainer.hpp) draws batches from. A source is a fixed set
// of examples that can be put into a batch by index; the trainer orders them (a seeded Sampler, saved in
// checkpoints), so every source gets the same reproducible, resumable order.
//
//   SequenceSource   token sequences with a label per position (a Dataset)  -> SequenceBatch
//   TokenWindows     windows of a token file, read in place (any size)       -> SequenceBatch
//   TensorSource     dense features with a class or a value per example      -> TensorBatch
//
// A user's own data is a class deriving from DataSource<TheirBatch>; a batch type needs weight(): how
// many items a loss on it averages over (evaluation weighs batches by it).

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/core/tensor.hpp"
#include "tapegrad/train/data.hpp"
#include "tapegrad/train/data_tokens.hpp"

namespace tapegrad {

// A batch type: weight() is how many items a loss on it averages over (evaluation weighs batches by it).
template <class B>
concept TrainingBatch = requires(const B& b) {
  { b.weight() } -> std::convertible_to<double>;
};

template <TrainingBatch B>
class DataSource {
 public:
  using Batch = B;
  virtual ~DataSource() = default;
  virtual std::string_view name() const = 0;
  virtual Index size() const = 0;  // examples
  // Fills `out` with the examples at `indices` (each in [0, size())), reusing out's buffers: once they
  // have their size, filling allocates nothing.
  virtual void fill(std::span<const Index> indices, B& out) const = 0;
  // A CRC-32 of the examples, and of whatever gives them their meaning (a vocabulary's names): a resumed
  // run checks that it trains and evaluates on the data it was trained and evaluated on.
  virtual std::uint32_t fingerprint() const = 0;
};

// ---- token sequences --------------------------------------------------------------------------------

// B sequences padded to one length T: tokens and labels (B, T); padding (B, T), nonzero at positions
// past an example's end, which get token 0 and no label.
struct SequenceBatch {
  Ids tokens;
  Ids labels;  // class per position, kIgnoreLabel where there is none
  Mask padding;
  bool padded = false;  // whether any position is padding (attention can skip the mask if not)
  Index labelled = 0;   // positions with a label

  Index batch() const { return tokens.rows(); }
  Index length() const { return tokens.cols(); }
  double weight() const { return static_cast<double>(labelled); }  // what cross-entropy averages over
};

// The examples of a Dataset, each batch padded to `length` (default: the dataset's longest example;
// give a longer one to pad training and evaluation batches alike). Keeps a reference: the dataset must
// outlive the source.
class SequenceSource final : public DataSource<SequenceBatch> {
 public:
  explicit SequenceSource(const Dataset& data, Index length = 0);
  std::string_view name() const override { return data_.name; }
  Index size() const override { return data_.size(); }
  void fill(std::span<const Index> indices, SequenceBatch& out) const override;
  std::uint32_t fingerprint() const override;  // the examples' ids and the vocabularies' names
  Index length() const { return length_; }

 private:
  const Dataset& data_;
  Index length_;
};

// ---- windows of a token file ------------------------------------------------------------------------

// Consecutive windows of T + 1 ids, advancing by T, in a file of `n` ids: floor((n - 1) / T).
Index consecutive_windows(Index n, Index context);

// Windows of T + 1 consecutive ids of a token file (train/data_tokens.hpp) as SequenceBatch examples: the
// window at s gives tokens = ids [s, s + T) and labels = ids [s + 1, s + T + 1), no padding. Each is read
// from the file as a batch is filled, so memory does not grow with the file. Which windows:
//
//   training(file, T)              every start, 0 .. N - T - 1 (the trainer's sampler draws them)
//   consecutive(file, T, every)    k T for k = 0, 1, ...: windows that advance by T, so that every id after
//                                  the first is predicted once, as far as whole windows reach; each
//                                  `every`-th of them
//   sample(file, T, count, seed)   `count` of the consecutive windows, a seeded sample without replacement
//                                  (the first `count` of a Sampler's order of them); all of them, in order,
//                                  when there are no more than `count`
//
// `map`, when given, is the model's id for each of the file's ids (-1 for one the model has none for): a
// byte-level file read by a model of the bytes it saw, say. Reading an id without one is a FormatError
// naming the file and the position (TokenFile::verify(map) finds every such id before a run starts).
// The file is shared: any number of windows may read it.

class TokenWindows final : public DataSource<SequenceBatch> {
 public:
  using File = std::shared_ptr<const TokenFile>;
  static TokenWindows training(File file, Index context, std::vector<std::int32_t> map = {});
  static TokenWindows consecutive(File file, Index context, Index every = 1, std::vector<std::int32_t> map = {});
  static TokenWindows sample(File file, Index context, Index count, std::uint64_t seed,
                             std::vector<std::int32_t> map = {});

  std::string_view name() const override { return file_->path().native(); }
  Index size() const override { return count_; }
  void fill(std::span<const Index> indices, SequenceBatch& out) const override;
  // The CRC-32 of which windows these are (kind, T, stride, count; a sample's seed) and of the map, and
  // the file's fingerprint (its header, which holds the CRC of every id): it reads nothing, whatever the
  // file's size.
  std::uint32_t fingerprint() const override;

  // The T + 1 ids of window k, through the map.
  void window(Index k, std::span<std::int32_t> out) const;
  Index start(Index k) const;  // where window k starts in the file
  Index context() const { return context_; }
  // Between consecutive starts (a sample's: between the windows it samples from).
  Index stride() const { return stride_; }
  Index predicted() const { return count_ * context_; }  // ids whose loss a pass over every window averages
  // The windows a sample was drawn from (size() otherwise).
  Index population() const { return sampler_ ? consecutive_windows(file_->size(), context_) : count_; }
  bool sampled() const { return sampler_.has_value(); }
  const TokenFile& file() const { return *file_; }
  const std::vector<std::int32_t>& map() const { return map_; }

 private:
  enum class Kind : std::uint8_t { training, consecutive, sample };
  TokenWindows(Kind kind, File file, Index context, Index stride, Index count, std::vector<std::int32_t> map);

  Kind kind_;
  File file_;
  Index context_, stride_, count_;
  std::vector<std::int32_t> map_;
  std::optional<Sampler> sampler_;  // a sample's order of the consecutive windows
  std::uint64_t seed_ = 0;
  mutable std::vector<std::int32_t> ids_;  // one window's T + 1 ids, as read
};

// ---- dense tensors ----------------------------------------------------------------------------------

// B examples of a TensorSource: features (B, ...) and either labels (B) or (B, T), or targets (B, ...).
struct TensorBatch {
  Tensor features;
  Ids labels;          // classification: a class per example (or per position), kIgnoreLabel = none
  Tensor targets;      // regression: a value (or a row of them) per example
  Index labelled = 0;  // labels that are not kIgnoreLabel (with labels)
  Index examples = 0;

  double weight() const { return static_cast<double>(labels.numel() > 0 ? labelled : examples); }
};

// N examples along the first dimension of each tensor: features (N, F) or (N, R, C); labels (N) or
// (N, T); targets (N), (N, K) or (N, R, C). Holds its own copies.
class TensorSource final : public DataSource<TensorBatch> {
 public:
  TensorSource(std::string name, Tensor features, Ids labels);  // ShapeError if the counts differ
  TensorSource(std::string name, Tensor features, Tensor targets);
  std::string_view name() const override { return name_; }
  Index size() const override { return size_; }
  void fill(std::span<const Index> indices, TensorBatch& out) const override;
  std::uint32_t fingerprint() const override;
  const Tensor& features() const { return features_; }
  const Ids& labels() const { return labels_; }

 private:
  // ShapeError unless every tensor holds the same number, or for labels of rank 3 (one class per example or
  // per position).
  Index count_examples() const;

  std::string name_;
  Tensor features_;
  Ids labels_;
  Tensor targets_;
  Index size_ = 0;
};

}  // namespace tapegrad
