#pragma once
// The comparison the program runs: the bigram count model, then the same transformer with parameter-free
// and with learnable attention, over several seeds, on one split of a word list; and reloading a saved
// model to sample from it.

#include <cstdint>
#include <filesystem>
#include <string>

#include "char_lm/model.hpp"
#include "tapegrad/train/collective.hpp"

namespace char_lm {

// The defaults are the PyTorch reference: 2 pre-norm blocks of width 64, 4 heads, MLP 4d, AdamW lr
// 3e-3 and weight decay 0.01, 3000 steps of 64 words (72k and 105k parameters); the whole default
// comparison (2 seeds x 2 models, with evaluations) fits in the 3 minutes on one core. --help
// shows them.
struct Options {
  std::string data = "/usr/share/dict/american-english";
  std::string out = "char_lm_out";
  bool overwrite = false;
  int seeds = 2;                   // training seeds 0 .. seeds-1: initial weights, data order, dropout
  std::uint64_t data_seed = 0;     // the 90/10 split
  Index steps = 3000;
  Index batch = 64;
  Index eval_every = 0;            // 0: steps / 10
  double lr = 3e-3;
  double weight_decay = 0.01;
  CharLmConfig model{{.context = 23, .d_model = 64, .n_heads = 4, .n_layers = 2}};  // context (max_len), attention, seed set per run
  Index count = 20;                // words sampled from each model
  std::uint64_t sample_seed = 0;
};

// With a collective (--data-parallel), every model is trained by all its ranks together; rank 0 alone
// prints, takes --out and writes the files.
int run_comparison(const Options& o, tapegrad::Collective* collective = nullptr);

// Rebuilds the model saved in `file` and prints `count` sampled words, one per line, exactly as the
// training run sampled them with the same seed, through the model's cache or (`cache` false) recomputing
// each word's window for every letter: the same words.
int sample_from(const std::filesystem::path& file, Index count, std::uint64_t seed, bool cache);

}  // namespace char_lm
