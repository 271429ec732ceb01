// What activation checkpointing costs and saves, measured: training steps of a DecoderLm in the shape of
// the step benchmark's W5 (B 8, T 128, d 256, 8 heads, 4 blocks, FFN 1024, 64 tokens) or, with "w6",
// W6's model at batch 4 (T 256, d 512, 8 heads, 6 blocks, FFN 2048, 256 tokens), with the stack's blocks
// checkpointed every K (0: none). One process per setting, so that its peak RSS is that setting's alone.
// Prints one JSON line: the median step time, the process's peak RSS, the memory the steps added to the
// built model (RSS after the steps minus before the first: the tapes' buffers and the threads' scratch),
// and the nodes on the tape and on its sub-tape.
//
//   OMP_NUM_THREADS=2 build/bench/checkpoint_memory 0     # every block kept
//   OMP_NUM_THREADS=2 build/bench/checkpoint_memory 1     # every block recomputed in backward
//   OMP_NUM_THREADS=2 build/bench/checkpoint_memory 1 w6
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.hpp>

using namespace tapegrad;

namespace {

// Resident memory now, in MiB (/proc/self/statm's second field, in pages).
double rss_mib() {
  long pages = 0, resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

double peak_rss_mib() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

}  // namespace

int main(int argc, char** argv) {
  const Index every = argc > 1 ? std::atoi(argv[1]) : 0;
  const bool w6 = argc > 2 && std::string(argv[2]) == "w6";
  const Index B = w6 ? 4 : 8, T = w6 ? 256 : 128, V = w6 ? 256 : 64;
  DecoderLm<float> model({.vocab = V, .context = T, .d_model = w6 ? 512 : 256, .n_heads = 8, .n_layers = w6 ? 6 : 4,
                          .d_ff = w6 ? 2048 : 1024, .seed = 1});
  model.stack().set_checkpoint_every(every);
  Rng rng(2);
  Ids tokens(Shape::mat(B, T)), labels(Shape::mat(B, T));
  for (Index i = 0; i < tokens.numel(); ++i) {
    tokens[i] = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(V)));
    labels[i] = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(V)));
  }
  SGD<float> sgd(model.parameters(), {.lr = 0.01});
  Tape<float> tape;
  const double before = rss_mib();
  auto step = [&] {
    sgd.zero_grad();
    tape.reset();
    tape.backward(cross_entropy(model.forward(tape, tokens, nullptr), labels));
    sgd.step();
  };
  for (int i = 0; i < 2; ++i) step();  // sizes every buffer
  std::vector<double> ms;
  for (int i = 0; i < (w6 ? 5 : 15); ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(ms.begin(), ms.begin() + static_cast<std::ptrdiff_t>(ms.size() / 2), ms.end());
  fmt::print("{{\"model\": \"{}\", \"checkpoint_every\": {}, \"threads\": {}, \"median_step_ms\": {:.1f}, "
             "\"peak_rss_mib\": {:.1f}, \"steps_added_mib\": {:.1f}, \"tape_nodes\": {}, \"sub_tape_nodes\": {}}}\n",
             w6 ? "w6 at batch 4" : "w5", every, num_threads(), ms[ms.size() / 2], peak_rss_mib(), rss_mib() - before,
             tape.size(), tape.sub_tape().size());
}
