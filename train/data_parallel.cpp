#include "tapegrad/train/data_parallel.hpp"

#include <Eigen/Core>

#include "tapegrad/core/crc32.hpp"
#include "tapegrad/core/escape.hpp"
#include "tapegrad/train/trainer.hpp"

namespace tapegrad {
namespace {

constexpr std::uint64_t kShardStream = 0x7368617264;  // "shard": + rank, a rank's stream of one step

const DataParallelOptions& checked(const DataParallelOptions& options) {
  if (options.check_every < 1)
    fail<ValueError>("set_collective: check_every must be >= 1, got {}", options.check_every);
  return options;
}

// What must be the same on every rank for the replicas to stay the same, each as a text (shown when it
// differs) whose CRC-32 the ranks compare.
std::vector<std::pair<std::string, std::string>> configuration_of(const TrainerBase& trainer) {
  const TrainerState state = trainer.state();
  const Optimizer<float>& optimizer = trainer.optimizer();
  std::vector<std::string> shapes;
  for (const Parameter<float>* p : optimizer.params())
    shapes.push_back(fmt::format("{} {}", p->name, p->value.shape().str()));
  const Sampler::State& order = state.data_order;
  Crc32 order_crc, rng_crc;
  for (Index i : order.order) order_crc.add_le(static_cast<std::uint64_t>(i));
  for (std::uint64_t word : order.rng.words) order_crc.add_le(word);
  for (std::uint64_t word : state.rng.words) rng_crc.add_le(word);
  const std::vector<std::string>& metrics = trainer.metric_names();
  return {
      {"training options", describe_settings(to_settings(trainer.options()))},
      {"model", trainer.model().model_record().describe()},
      {"parameters", fmt::format("{} tensors ({})", shapes.size(), fmt::join(shapes, ", "))},
      {"optimizer", fmt::format("{} after {} steps", optimizer.describe(), optimizer.steps_taken())},
      {"training data", fmt::format("{}, fingerprint {:08x}",
                                    order.order.empty() ? std::string("a computed order")
                                                        : fmt::format("{} examples", order.order.size()),
                                    state.data_fingerprint)},
      {"evaluation data",
       state.eval_fingerprint ? fmt::format("fingerprint {:08x}", *state.eval_fingerprint) : std::string("none")},
      {"metrics", metrics.empty() ? std::string("none") : fmt::format("{}", fmt::join(metrics, ", "))},
      {"training state",
       fmt::format("step {}, data order at epoch {} position {} (crc32 {:08x}), random stream crc32 {:08x}", state.step,
                   order.epoch, order.cursor, order_crc.value(), rng_crc.value())},
  };
}

}  // namespace

Shard shard_of(Index n, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size || n < 0)
    fail<ValueError>("shard_of: rank {} of {} ranks, {} items: needs 0 <= rank < ranks and items >= 0", rank, size, n);
  const Index r = rank, s = size, base = n / s, extra = n % s;
  const Index begin = r * base + std::min(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

std::unique_ptr<StepReducer> reducer_for(Collective& collective, DataParallelOptions options) {
  if (collective.size() > 1) return std::make_unique<DataParallel>(collective, options);
  checked(options);  // refused alike, whatever the number of ranks
  return std::make_unique<SingleProcess>();
}

DataParallel::DataParallel(Collective& collective, DataParallelOptions options)
    : collective_(collective), options_(checked(options)) {}

void DataParallel::start(TrainerBase& trainer) {
  if (started_) return;
  refuse_mismatch(configuration_of(trainer));
  // The same configuration: rank 0's weights everywhere (a fresh model's initialisation may depend on
  // more than its configuration: a user's seedless init).
  std::size_t values = 0;
  for (Parameter<float>* p : trainer.optimizer().params()) {
    collective_.broadcast(std::as_writable_bytes(p->value.span()), 0);
    values += static_cast<std::size_t>(p->value.numel());
  }
  metrics_ = trainer.metric_names().size();
  fused_.assign(values + 2 + 2 * metrics_, 0.0f);
  replica_crcs_.assign(static_cast<std::size_t>(size()), 0);
  started_ = true;
}

void DataParallel::refuse_mismatch(const std::vector<std::pair<std::string, std::string>>& configuration) {
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
    fail<ValueError>(
        "data-parallel: the ranks were started with different {}: rank{} {} differ{} from rank 0{}; rank 0 has: {}",
        configuration[k].first, differ.size() > 1 ? "s" : "", fmt::join(differ, ", "), differ.size() > 1 ? "" : "s",
        odd ? fmt::format(" (rank {} has: {})", rank, escaped(configuration[k].second, 300)) : "", escaped(first, 300));
  }
}

std::span<const Index> DataParallel::shard(std::span<const Index> batch, Rng& training) {
  step_stream_ = Rng(training.next_u64(), kShardStream + static_cast<std::uint64_t>(rank()));
  const Shard part = shard_of(static_cast<Index>(batch.size()), rank(), size());
  return batch.subspan(static_cast<std::size_t>(part.begin), static_cast<std::size_t>(part.size()));
}

// Forward was a mean over this rank's shard (weight w_r): loss_r, g_r. The global batch's mean is
// sum_r w_r loss_r / sum_r w_r, and its gradient sum_r w_r g_r / sum_r w_r, so every rank sends w_r g_r,
// w_r loss_r, w_r and its metric tallies in one buffer, summed in one all-reduce. A non-finite loss_r
// (no gradient) goes into the sum as it is, so that every rank stops at this step.
double DataParallel::reduce(std::span<Parameter<float>* const> params, std::optional<double> loss, double weight,
                            std::span<Tally> tallies) {
  if (tallies.size() != metrics_)
    fail<UsageError>(
        "data-parallel: a metric was added after the ranks started; add metrics before the first step, "
        "run() or evaluate()");
  // A rank that computed nothing, or whose loss is not finite (backward was not run), holds the zeros every
  // step starts from (TrainerBase::finish_step clears the gradients however a step ends, a backward that
  // threw part way included), so it sends zeros: w 0 = 0 for any finite weight.
  const auto w = static_cast<float>(weight);
  float* at = fused_.data();
  for (const Parameter<float>* p : params) {
    Eigen::Map<Eigen::ArrayXf>(at, p->grad.numel()) = p->grad.array() * w;
    at += p->grad.numel();
  }
  at[0] = loss ? static_cast<float>(*loss) * w : 0.0f;
  at[1] = w;
  for (std::size_t k = 0; k < tallies.size(); ++k) {
    at[2 + 2 * k] = static_cast<float>(tallies[k].sum);
    at[3 + 2 * k] = static_cast<float>(tallies[k].count);
  }
  collective_.all_reduce_sum(std::span<float>(fused_));
  // The means. If no rank weighed anything, the gradient is 0 / 0 too: the trainer stops on the loss and
  // clears it.
  const auto inverse = static_cast<float>(1.0 / static_cast<double>(at[1]));
  at = fused_.data();
  for (Parameter<float>* p : params) {
    p->grad.array() = Eigen::Map<const Eigen::ArrayXf>(at, p->grad.numel()) * inverse;
    at += p->grad.numel();
  }
  for (std::size_t k = 0; k < tallies.size(); ++k) tallies[k] = Tally{at[2 + 2 * k], at[3 + 2 * k]};
  return static_cast<double>(at[0]) / static_cast<double>(at[1]);  // NaN if no rank had anything to weigh
}

void DataParallel::check_replicas(std::span<Parameter<float>* const> params, Index step) {
  Crc32 crc;  // of every parameter's values, in the model's order
  for (const Parameter<float>* p : params)
    crc.add(p->value.data(), static_cast<std::size_t>(p->value.numel()) * sizeof(float));
  const std::uint32_t mine = crc.value();
  collective_.all_gather(std::span<const std::uint32_t>(&mine, 1), std::span<std::uint32_t>(replica_crcs_));
  std::vector<int> differ;
  for (std::size_t r = 1; r < replica_crcs_.size(); ++r)
    if (replica_crcs_[r] != replica_crcs_[0]) differ.push_back(static_cast<int>(r));
  if (!differ.empty())
    fail<DivergenceError>(
        "data-parallel: after step {} the parameters of rank{} {} differ from rank 0's (crc32 {:08x} on "
        "rank 0, {:08x} on rank {}); the replicas diverged",
        step, differ.size() > 1 ? "s" : "", fmt::join(differ, ", "), replica_crcs_[0],
        replica_crcs_[static_cast<std::size_t>(differ[0])], differ[0]);
}

}  // namespace tapegrad
