// The character GPT's training step (examples/gpt at its default setting: nanoGPT's CPU setting) timed
// alone, without the evaluations a training run interleaves, for the comparison with the same step in
// PyTorch (bench/gpt_step.py): a batch of 12 random windows of 65 bytes of the fortunes, the forward, the
// loss, the backward, clipping at norm 1 and AdamW. Prints one JSON line; characters a second are the
// batch's 12 x 64 predicted bytes over the median step time. The last loss is a sanity check (it falls),
// not a comparison: the two programs' initial weights, data order and schedules differ.
//
//   build/bench/gpt_step --threads 2
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "command_line.hpp"
#include "gpt/model.hpp"
#include "gpt/prepare.hpp"
#include "tapegrad/core/parallel.hpp"
#include "tapegrad/train/program/progress.hpp"
#include "tapegrad/train/program/run_program.hpp"
#include "tapegrad/train/schedule.hpp"
#include "timing.hpp"

using namespace tapegrad;

int main(int argc, char** argv) {
  CLI::App app{"Time the character GPT's training step (examples/gpt's default model and batch) on the fortunes"};
  std::string data(gpt::kFortunes), prepared = "gpt_data", attention = "learnable";
  int steps = 200, warmup = 20, repeats = 5, threads = 0, against = 0;
  app.add_option("--data", data, "Fortune folder or text file")->capture_default_str();
  app.add_option("--prepared", prepared, "Folder it is prepared in, as gpt's --prepared")->capture_default_str();
  app.add_option("--attention", attention, "learnable or parameter_free")->capture_default_str();
  app.add_option("--steps", steps, "Timed steps per repeat")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--repeats", repeats, "Repeats (the median is reported)")->capture_default_str()->check(CLI::Range(1, 100));
  app.add_option("--warmup", warmup, "Untimed steps first")->capture_default_str()->check(CLI::Range(0, 100000));
  app.add_option("--threads", threads, "Threads (default: OMP_NUM_THREADS)")->check(CLI::Range(1, 256));
  app.add_option("--against-threads", against,
                 "Also time each repeat at this many threads, in turns with --threads (each turn's first step untimed), "
                 "and print both medians and their ratio: a comparison that a shared machine's changes of speed do not "
                 "skew as they do two separate runs")
      ->check(CLI::Range(1, 256));
  if (const auto stop = examples::parse_command_line(app, "gpt_step", argc, argv)) return *stop;
  return run_program("gpt_step", [&] {
    if (threads > 0) set_num_threads(threads);
    constexpr Index kBatch = 12, kContext = 64;
    const gpt::Prepared prepared_data = gpt::prepare_data(data, prepared, "--data");
    const gpt::ByteVocabulary& vocabulary = prepared_data.vocabulary;
    const TokenWindows train = TokenWindows::training(prepared_data.train, kContext, vocabulary.map());
    gpt::GptConfig config{{.context = kContext, .attention = parse_enum<AttentionMode>(attention)}, vocabulary.hex()};
    gpt::Gpt<float> model(config);
    AdamW<float> adamw(model.parameters(), {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1, .decay_on = DecayOn::matrices});
    const Index total = warmup + static_cast<Index>(steps) * repeats;
    adamw.set_schedule(CosineWithWarmup({.warmup_steps = 100, .total_steps = std::max<Index>(total, 100), .min_lr = 1e-4}));
    Trainer trainer(model, adamw, train, [&](Tape<float>& tape, const SequenceBatch& b) { return model.loss(tape, b); },
                    {.steps = total, .batch = kBatch, .eval_every = total, .clip = 1.0});
    const int main_count = num_threads();
    for (int i = 0; i < warmup; ++i) trainer.step();
    std::vector<double> per_step, against_per_step;
    double loss = 0;
    std::uint64_t regions_counted = 0;  // over the timed steps at the main count
    for (int r = 0; r < repeats; ++r) {
      const std::uint64_t before = parallel_regions_started();
      const auto start = bench::Clock::now();
      for (int i = 0; i < steps; ++i) loss = trainer.step();
      per_step.push_back(bench::seconds_since(start) / steps);
      regions_counted += parallel_regions_started() - before;
      if (against > 0) {  // a turn at the other count; the first step after each change untimed (it wakes or idles the workers)
        set_num_threads(against);
        trainer.step();
        const auto other = bench::Clock::now();
        for (int i = 0; i < steps; ++i) loss = trainer.step();
        against_per_step.push_back(bench::seconds_since(other) / steps);
        set_num_threads(main_count);
        trainer.step();
      }
    }
    const double seconds = bench::median(per_step);
    const double timed = static_cast<double>(steps) * repeats;
    // Parallel regions a step (core/parallel.hpp): each is a start and a wait for the pieces of every thread.
    const double regions = static_cast<double>(regions_counted) / timed;
    fmt::print("{{\"program\": \"tapegrad\", \"attention\": \"{}\", \"parameters\": {}, \"batch\": {}, \"context\": {}, "
               "\"threads\": {}, \"step_ms\": {:.3f}, \"chars_per_second\": {:.0f}, \"loss\": {:.4f}, \"regions_per_step\": {:.1f}{}}}\n",
               attention, model.count_parameters(), kBatch, kContext, num_threads(), 1e3 * seconds,
               static_cast<double>(kBatch * kContext) / seconds, loss, regions,
               against > 0 ? fmt::format(", \"against_threads\": {}, \"against_step_ms\": {:.3f}, \"x_against\": {:.3f}", against,
                                         1e3 * bench::median(against_per_step), seconds / bench::median(against_per_step))
                           : std::string());
    return 0;
  });
}
