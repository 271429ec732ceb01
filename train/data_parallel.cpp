#include "tapegrad/train/data_parallel.hpp"

#include <Eigen/Core>

#include "tapegrad/core/crc32.hpp"

namespace tapegrad {
namespace {

constexpr std::uint64_t kShardStream = 0x7368617264;  // "shard": + rank, a rank's stream of one step

// A CRC-32 of every parameter's values, in the model's order.
std::uint32_t parameters_crc32(std::span<Parameter<float>* const> params) {
  Crc32 crc;
  for (const Parameter<float>* p : params) crc.add(p->value.data(), static_cast<std::size_t>(p->value.numel()) * sizeof(float));
  return crc.value();
}

// "1, 3" for a list of ranks.
std::string rank_list(const std::vector<int>& ranks) { return fmt::format("{}", fmt::join(ranks, ", ")); }

std::string shortened(const std::string& text) { return text.size() <= 300 ? text : text.substr(0, 300) + " ..."; }

}  // namespace

Shard shard_of(Index n, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size || n < 0)
    fail<ValueError>("shard_of: rank {} of {} ranks, {} items: needs 0 <= rank < ranks and items >= 0", rank, size, n);
  const Index r = rank, s = size, base = n / s, extra = n % s;
  const Index begin = r * base + std::min(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

DataParallel::DataParallel(Collective& collective, DataParallelOptions options) : collective_(collective), options_(options) {
  if (options.check_every < 1) fail<ValueError>("set_collective: check_every must be >= 1, got {}", options.check_every);
}

void DataParallel::start(const std::vector<std::pair<std::string, std::string>>& configuration,
                         std::span<Parameter<float>* const> params, std::size_t metrics) {
  const int rank = this->rank(), size = this->size();
  std::vector<std::uint32_t> mine, all(configuration.size() * static_cast<std::size_t>(size));
  for (const auto& [what, text] : configuration) mine.push_back(Crc32().add(text.data(), text.size()).value());
  collective_.all_gather(mine, all);
  // The first part that differs anywhere: every rank finds the same one, takes rank 0's text of it and
  // refuses to start, naming the ranks that differ.
  for (std::size_t k = 0; k < configuration.size(); ++k) {
    std::vector<int> differ;
    for (int r = 1; r < size; ++r)
      if (all[static_cast<std::size_t>(r) * configuration.size() + k] != all[k]) differ.push_back(r);
    if (differ.empty()) continue;
    std::string first = configuration[k].second;
    std::uint64_t length = first.size();
    collective_.broadcast(std::as_writable_bytes(std::span(&length, 1)), 0);
    first.resize(length);
    collective_.broadcast(std::as_writable_bytes(std::span(first.data(), first.size())), 0);
    const bool odd = mine[k] != all[k];
    fail<ValueError>("data-parallel: the ranks were started with different {}: rank{} {} differ{} from rank 0{}; rank 0 has: {}",
                     configuration[k].first, differ.size() > 1 ? "s" : "", rank_list(differ), differ.size() > 1 ? "" : "s",
                     odd ? fmt::format(" (rank {} has: {})", rank, shortened(configuration[k].second)) : "", shortened(first));
  }
  // The same configuration: rank 0's weights everywhere (a fresh model's initialisation may depend on
  // more than its configuration: a user's seedless init).
  std::size_t values = 0;
  for (Parameter<float>* p : params) {
    collective_.broadcast(std::as_writable_bytes(p->value.span()), 0);
    values += static_cast<std::size_t>(p->value.numel());
  }
  fused_.assign(values + 2 + 2 * metrics, 0.0f);
  step_tallies_.assign(metrics, Tally{});
  replica_crcs_.assign(static_cast<std::size_t>(size), 0);
  started_ = true;
}

std::span<const Index> DataParallel::shard(std::span<const Index> batch, Rng& stream) {
  step_stream_ = Rng(stream.next_u64(), kShardStream + static_cast<std::uint64_t>(rank()));
  const Shard part = shard_of(static_cast<Index>(batch.size()), rank(), size());
  return batch.subspan(static_cast<std::size_t>(part.begin), static_cast<std::size_t>(part.size()));
}

// Forward was a mean over this rank's shard (weight w_r): loss_r, g_r. The global batch's mean is
// sum_r w_r loss_r / sum_r w_r, and its gradient sum_r w_r g_r / sum_r w_r, so every rank sends w_r g_r,
// w_r loss_r, w_r and its metric tallies in one buffer, summed in one all-reduce.
double DataParallel::reduce(std::span<Parameter<float>* const> params, bool have_gradient, double loss, double weight) {
  const auto w = static_cast<float>(weight);
  float* at = fused_.data();
  for (const Parameter<float>* p : params) {
    auto slot = Eigen::Map<Eigen::ArrayXf>(at, p->grad.numel());
    if (have_gradient)
      slot = p->grad.array() * w;
    else
      slot.setZero();
    at += p->grad.numel();
  }
  at[0] = have_gradient ? static_cast<float>(loss) * w : 0.0f;
  at[1] = w;
  for (std::size_t k = 0; k < step_tallies_.size(); ++k) {
    at[2 + 2 * k] = static_cast<float>(step_tallies_[k].sum);
    at[3 + 2 * k] = static_cast<float>(step_tallies_[k].count);
  }
  collective_.all_reduce_sum(std::span<float>(fused_));
  return static_cast<double>(at[0]) / static_cast<double>(at[1]);  // NaN if no rank had anything to weigh
}

void DataParallel::take_mean(std::span<Parameter<float>* const> params, std::span<MetricWindow> windows) {
  float* at = fused_.data();
  std::size_t values = 0;
  for (const Parameter<float>* p : params) values += static_cast<std::size_t>(p->grad.numel());
  const auto inverse = static_cast<float>(1.0 / static_cast<double>(fused_[values + 1]));
  for (Parameter<float>* p : params) {
    p->grad.array() = Eigen::Map<const Eigen::ArrayXf>(at, p->grad.numel()) * inverse;
    at += p->grad.numel();
  }
  for (std::size_t k = 0; k < windows.size(); ++k) windows[k].tally += Tally{at[2 + 2 * k], at[3 + 2 * k]};
}

void DataParallel::check_replicas(std::span<Parameter<float>* const> params, Index step) {
  const std::uint32_t mine = parameters_crc32(params);
  collective_.all_gather(std::span<const std::uint32_t>(&mine, 1), std::span<std::uint32_t>(replica_crcs_));
  std::vector<int> differ;
  for (std::size_t r = 1; r < replica_crcs_.size(); ++r)
    if (replica_crcs_[r] != replica_crcs_[0]) differ.push_back(static_cast<int>(r));
  if (!differ.empty())
    fail<DivergenceError>("data-parallel: after step {} the parameters of rank{} {} differ from rank 0's (crc32 {:08x} on "
                          "rank 0, {:08x} on rank {}); the replicas diverged",
                          step, differ.size() > 1 ? "s" : "", rank_list(differ), replica_crcs_[0],
                          replica_crcs_[static_cast<std::size_t>(differ[0])], differ[0]);
}

}  // namespace tapegrad
