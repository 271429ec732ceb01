#pragma once
// What the program does: the comparison (the bigram floor, then the same GPT with parameter-free and with
// learnable attention, trained alike on the same data), resuming one model's training from a checkpoint,
// and sampling from a saved model.

#include <cstdint>
#include <string>

#include "gpt/model.hpp"
#include "tapegrad/train/collective.hpp"
#include "tapegrad/train/optimizer.hpp"

namespace gpt {

// The defaults are nanoGPT's CPU setting for its Shakespeare character model (README, "I only have a
// macbook"): 4 pre-norm blocks of width 128, 4 heads, context 64, batch 12, 2000 steps, no dropout; AdamW
// lr 1e-3, betas (0.9, 0.99), weight decay 0.1 on matrices only, 100 warm-up steps then cosine to 1e-4,
// gradients clipped at norm 1 (config/train_shakespeare_char.py and train.py). --help shows them.
struct Options {
  std::string data = std::string(kFortunes);
  std::string prepared;         // where --data is prepared when given (else default_prepared, gpt/prepare.hpp)
  bool prepared_given = false;  // --prepared was given (with --resume: instead of the checkpoint's)
  std::string out = "gpt_out";
  bool overwrite = false;
  std::string attention = "both";  // which models: both, learnable or parameter_free
  GptConfig model;        // vocabulary and attention are set per run
  Index steps = 2000;
  Index batch = 12;
  double lr = 1e-3;
  double min_lr = 1e-4;
  Index warmup = 100;
  double beta1 = 0.9, beta2 = 0.99;
  double weight_decay = 0.1;
  tapegrad::DecayOn decay_on = tapegrad::DecayOn::matrices;
  double clip = 1.0;
  std::uint64_t train_seed = 0;  // initial weights and data order
  Index eval_every = 200;        // a point of the curves every N steps
  Index curve_windows = 256;     // validation windows each point evaluates, evenly spaced (0: all)
  // The table's validation windows: all of them when there are at most this many, else a seeded sample of
  // this many (nanoGPT's eval_iters), with its standard error; 0: all. The fortunes have 4,104: all.
  Index eval_windows = 8192;
  Index checkpoint_every = 0;    // 0: only the model at the end
  int keep = 2;
  std::string resume;            // a checkpoint to go on from
  // Sampling: after training (each model) and with --sample-from.
  Index length = 400;            // bytes sampled
  std::uint64_t seed = 0;        // the draws' random stream
  std::string prompt = std::string(kSeparator);  // "%\n": what starts a fortune
  double temperature = 1.0;
  bool cache = true;             // false: recompute the window for every byte
};

// With a collective (--data-parallel), each model is trained by all the ranks together; rank 0 alone
// prints, takes --out and writes the files.
int run_comparison(const Options& o, tapegrad::Collective* collective = nullptr);
// Trains the model of a checkpoint written by this program (<model>.tgck or checkpoints/...) on to
// o.steps (the checkpoint's own if not given: 0), with every other setting the checkpoint's.
int resume(const Options& o, tapegrad::Collective* collective = nullptr);
// Prepares o.data in its prepared folder (or finds it prepared) and says so: nanoGPT's prepare.py, alone.
int prepare_only(const Options& o);
// Rebuilds the model saved in `file` and prints o.prompt and o.length bytes sampled after it, exactly as
// the training run sampled them for the same settings; the rate goes to stderr.
int sample_from(const std::string& file, const Options& o);

}  // namespace gpt
