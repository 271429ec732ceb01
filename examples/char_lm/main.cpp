// A makemore-style next-character model of English words: what learnable Wq, Wk, Wv buy on real data.
// On one 90/10 split of a word list it trains a bigram count model (the floor) and the same small
// transformer twice, with parameter-free and with learnable attention, over several seeds; prints the
// validation NLL per character (mean ± sd), parameter counts and training times, and 20 sampled words
// from each model; writes checkpoints, samples, training curves, attention maps and report.md to --out.
//
//   build/examples/char_lm                                   # /usr/share/dict/american-english -> char_lm_out/
//   build/examples/char_lm --data names.txt --out runs/names --steps 3000
//   build/examples/char_lm --sample-from char_lm_out/learnable_seed0.tgck   # the same 20 words, in a new process
//   mpirun -np 2 build/examples/char_lm --data-parallel    # each model trained by 2 ranks (docs/data_parallel.md)
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <fmt/format.h>

#include "char_lm/compare.hpp"
#include "command_line.hpp"
#include "data_parallel.hpp"
#include "tapegrad/core/parallel.hpp"
#include "tapegrad/train/program/progress.hpp"
#include "tapegrad/train/program/run_program.hpp"

using namespace tapegrad;

int main(int argc, char** argv) {
  char_lm::Options o;
  CLI::App app{"Next-character models of English words (makemore-style): a bigram count model, then one transformer "
               "with parameter-free and with learnable self-attention, compared on the same split.\n"
               "Words are the lower-case a-z lines of --data, each framed by the end symbol '.' (input '.word', "
               "targets 'word.'); other lines are dropped."};
  std::string sample_file;
  int threads = 0;
  bool data_parallel = false;
  bool no_cache = false;
  auto* data = app.add_option("--data", o.data, "Word list, one word per line")->capture_default_str();
  auto* out = app.add_option("--out", o.out, "Folder for checkpoints, samples, pictures and report.md")->capture_default_str();
  auto* overwrite = app.add_flag("--overwrite", o.overwrite, "Replace the files of an earlier run in --out");
  auto* seeds = app.add_option("--seeds", o.seeds, "Training seeds 0..N-1 per attention model")
                    ->capture_default_str()->check(CLI::Range(1, 100));
  auto* data_seed = app.add_option("--data-seed", o.data_seed, "Seed of the 90/10 train/validation split")->capture_default_str();
  auto* steps = app.add_option("--steps", o.steps, "Training steps per model")->capture_default_str()->check(CLI::Range(1, 10000000));
  auto* batch = app.add_option("--batch", o.batch, "Words per training batch")->capture_default_str()->check(CLI::Range(1, 65536));
  auto* eval = app.add_option("--eval-every", o.eval_every, "Validation every N steps (0: steps / 10)")
                   ->capture_default_str()->check(CLI::Range(0, 10000000));
  auto* layers = app.add_option("--layers", o.model.n_layers, "Transformer blocks")->capture_default_str()->check(CLI::Range(1, 64));
  auto* width = app.add_option("--d-model", o.model.d_model, "Width of the embedding and the blocks")
                    ->capture_default_str()->check(CLI::Range(1, 4096));
  auto* heads = app.add_option("--heads", o.model.n_heads, "Attention heads (dividing --d-model)")
                    ->capture_default_str()->check(CLI::Range(1, 256));
  auto* d_ff = app.add_option("--d-ff", o.model.d_ff, "Hidden width of the MLP (default: 4 x --d-model)")
                   ->check(CLI::Range(1, 65536));
  auto* tie = app.add_flag("--tie", o.model.tie, "Tie the output head to the embedding (logits h E^T); default: its own weight");
  auto* lr = app.add_option("--lr", o.lr, "AdamW learning rate (warm-up, then cosine to a tenth)")
                 ->capture_default_str()->check(examples::positive);
  auto* decay = app.add_option("--weight-decay", o.weight_decay, "AdamW decoupled weight decay")
                    ->capture_default_str()->check(examples::within(0, 1));
  auto* dropout = app.add_option("--dropout", o.model.dropout, "Dropout in the blocks, in [0, 0.9]")
                      ->capture_default_str()->check(examples::within(0, 0.9));
  app.add_option("--count", o.count, "Words sampled from each model")->capture_default_str()->check(CLI::Range(1, 100000));
  app.add_option("--seed", o.sample_seed, "Seed of the sampled words")->capture_default_str();
  auto* parallel = app.add_flag("--data-parallel", data_parallel, examples::kDataParallelHelp);
  app.add_option("--threads", threads, "Threads for matrix products (default: OMP_NUM_THREADS)")->check(CLI::Range(1, 256));
  auto* sample = app.add_option("--sample-from", sample_file,
                                "Rebuild the model saved in this checkpoint and print --count words sampled with --seed "
                                "(the words the training run sampled, with the same seed); trains nothing");
  auto* recompute = app.add_flag("--no-cache", no_cache,
                                 "With --sample-from: recompute each word's window for every letter instead of reading "
                                 "the model's key-value cache (the same words, slower)");
  app.footer("Examples:\n"
             "  char_lm                                  # the default comparison, into char_lm_out/\n"
             "  char_lm --data names.txt --out runs/names --steps 3000 --tie\n"
             "  char_lm --sample-from char_lm_out/learnable_seed0.tgck --count 20 --seed 0\n"
             "  mpirun -np 2 char_lm --data-parallel     # 2 ranks share every batch; rank 0 writes --out\n");
  if (const auto stop = examples::parse_command_line(app, "char_lm", argc, argv)) return *stop;
  examples::Job job;
  return job.run("char_lm", data_parallel && sample->count() == 0, &argc, &argv, [&] {
    for (const CLI::Option* training : {data, out, overwrite, seeds, data_seed, steps, batch, eval, layers, width, heads, d_ff,
                                        tie, lr, decay, dropout, parallel})
      if (sample->count() > 0 && training->count() > 0)
        fail<ValueError>("{} is a training flag; --sample-from takes only --count, --seed, --no-cache and --threads",
                         training->get_name());
    if (recompute->count() > 0 && sample->count() == 0) fail<ValueError>("--no-cache goes with --sample-from");
    if (threads > 0) set_num_threads(threads);
    if (sample->count() > 0) return char_lm::sample_from(sample_file, o.count, o.sample_seed, !no_cache);
    return char_lm::run_comparison(o, job.collective());
  });
}
