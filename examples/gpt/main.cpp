// A character GPT on running text: nanoGPT's character model (4 blocks of width 128, context 64) on Debian's
// fortunes, trained as nanoGPT trains it on a laptop's CPU. It trains the same stack with parameter-free and
// with learnable attention, beside the bigram floor; prints the validation loss of the three (nats per
// character), training times and samples; writes checkpoints, samples, curves, attention pictures and
// report.md to --out. Sampling goes one character at a time through a cache of keys and values.
//
//   build/examples/gpt                                          # /usr/share/games/fortunes -> gpt_out/
//   build/examples/gpt --data mytext.txt --out runs/mine --steps 5000
//   build/examples/gpt --data big/ --prepared big_data --prepare-only   # prepare once (nanoGPT's prepare.py)
//   build/examples/gpt --sample-from gpt_out/learnable.tgck --prompt "The meaning of life" --length 500
//   build/examples/gpt --resume gpt_out/checkpoints/learnable/checkpoint-00001000.tgck --out runs/resumed
//   mpirun -np 2 build/examples/gpt --data-parallel              # each model trained by 2 ranks
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "command_line.hpp"
#include "data_parallel.hpp"
#include "gpt/run.hpp"
#include "tapegrad/core/parallel.hpp"
#include "tapegrad/train/program/progress.hpp"
#include "tapegrad/train/program/run_program.hpp"

using namespace tapegrad;

int main(int argc, char** argv) {
  gpt::Options o;
  CLI::App app{"A character GPT on running text (nanoGPT's character model, its CPU setting by default): the bigram "
               "floor, then the same transformer with parameter-free and with learnable self-attention, trained alike "
               "and compared on validation loss; sampling with a cache of keys and values.\n"
               "Data: the files of the --data folder whose names have no '.', in byte order (or one file), split into "
               "fortunes at lines that are exactly '%'; every 10th fortune is validation; symbols are bytes. The text is "
               "prepared once, streaming, into token files (--prepared) that training reads in place."};
  std::string sample_file;
  int threads = 0;
  bool data_parallel = false, no_cache = false, prepare_only = false;
  std::string decay_on(to_string(o.decay_on));
  const std::string data_group = "Data and output", model_group = "Model", training_group = "Training",
                    sampling_group = "Sampling";
  std::vector<CLI::Option*> training_flags;  // refused with --resume and --sample-from
  auto training = [&](CLI::Option* opt, const std::string& group) {
    training_flags.push_back(opt->group(group));
    return opt;
  };
  auto* data = training(app.add_option("--data", o.data, "A folder of fortune files, or one text file (or a --prepared folder)"),
                       data_group)->capture_default_str();
  auto* prepared = app.add_option("--prepared", o.prepared,
                                  "Folder of the prepared data (train.bin, val.bin, meta.json), made from --data once "
                                  "and used as long as --data is unchanged; --data may also name such a folder "
                                  "[default: gpt_data/<name>-<CRC-32 of --data's absolute path>]")
                       ->group(data_group);
  auto* prepare = app.add_flag("--prepare-only", prepare_only, "Prepare --data in --prepared and stop (nanoGPT's prepare.py)")
                      ->group(data_group);
  auto* out = app.add_option("--out", o.out, "Folder for checkpoints, samples, pictures and report.md")
                  ->capture_default_str()->group(data_group);
  auto* overwrite = app.add_flag("--overwrite", o.overwrite, "Replace the files of an earlier run in --out")->group(data_group);
  training(app.add_option("--attention", o.attention, "Which models: both, learnable or parameter_free"), model_group)
      ->capture_default_str()->check(CLI::IsMember({"both", "learnable", "parameter_free"}));
  training(app.add_option("--context", o.model.context, "Context: the positions of a window (nanoGPT's block_size)"),
           model_group)->capture_default_str()->check(CLI::Range(1, 4096));
  training(app.add_option("--layers", o.model.n_layers, "Transformer blocks"), model_group)
      ->capture_default_str()->check(CLI::Range(1, 64));
  training(app.add_option("--d-model", o.model.d_model, "Width of the embedding and the blocks"), model_group)
      ->capture_default_str()->check(CLI::Range(1, 4096));
  training(app.add_option("--heads", o.model.n_heads, "Attention heads (dividing --d-model)"), model_group)
      ->capture_default_str()->check(CLI::Range(1, 256));
  training(app.add_option("--d-ff", o.model.d_ff, "Hidden width of the MLP (default: 4 x --d-model)"), model_group)
      ->check(CLI::Range(1, 65536));
  training(app.add_option("--dropout", o.model.dropout, "Dropout in the blocks, in [0, 0.9]"), model_group)
      ->capture_default_str()->check(examples::within(0, 0.9));
  auto* steps = app.add_option("--steps", o.steps, "Training steps per model (with --resume: the new last step)")
                    ->capture_default_str()->check(CLI::Range(1, 10000000))->group(training_group);
  training(app.add_option("--batch", o.batch, "Windows per training batch"), training_group)
      ->capture_default_str()->check(CLI::Range(1, 65536));
  training(app.add_option("--lr", o.lr, "AdamW learning rate, reached after the warm-up"), training_group)
      ->capture_default_str()->check(examples::positive);
  training(app.add_option("--min-lr", o.min_lr, "The rate the cosine decays to at the last step"), training_group)
      ->capture_default_str()->check(examples::within(0, 1));
  training(app.add_option("--warmup", o.warmup, "Steps of linear warm-up"), training_group)
      ->capture_default_str()->check(CLI::Range(0, 10000000));
  training(app.add_option("--beta1", o.beta1, "AdamW beta1"), training_group)
      ->capture_default_str()->check(examples::within(0, 0.9999));
  training(app.add_option("--beta2", o.beta2, "AdamW beta2"), training_group)
      ->capture_default_str()->check(examples::within(0, 0.9999));
  training(app.add_option("--weight-decay", o.weight_decay, "AdamW decoupled weight decay"), training_group)
      ->capture_default_str()->check(examples::within(0, 1));
  training(app.add_option("--decay-on", decay_on, "Which parameters decay: matrices (not biases, not LayerNorms) or all"),
           training_group)->capture_default_str()->check(CLI::IsMember(enum_names<DecayOn>()));
  training(app.add_option("--clip", o.clip, "Clip the gradient to this global norm (0: no clipping)"), training_group)
      ->capture_default_str()->check(examples::within(0, 1e6));
  training(app.add_option("--train-seed", o.train_seed, "Seed of the initial weights and the order of the windows"),
           training_group)->capture_default_str();
  training(app.add_option("--eval-every", o.eval_every, "A point of the curves every N steps"), training_group)
      ->capture_default_str()->check(CLI::Range(1, 10000000));
  training(app.add_option("--curve-windows", o.curve_windows,
                          "Validation windows a point of the curves evaluates, evenly spaced (0: all)"),
           training_group)->capture_default_str()->check(CLI::Range(0, 100000000));
  training(app.add_option("--eval-windows", o.eval_windows,
                          "Validation windows the table evaluates: all when there are at most N, else a seeded sample "
                          "of N with its standard error (0: all)"),
           training_group)->capture_default_str()->check(CLI::Range(0, 100000000));
  auto* checkpoint_every = app.add_option("--checkpoint-every", o.checkpoint_every,
                                          "Save the state of training every N steps in --out/checkpoints/<model>/ (0: "
                                          "only at the end)")
                               ->capture_default_str()->check(CLI::Range(0, 10000000))->group(training_group);
  auto* keep = app.add_option("--keep", o.keep, "Checkpoints kept per model")
                   ->capture_default_str()->check(CLI::Range(1, 1000))->group(training_group);
  auto* resume = app.add_option("--resume", o.resume,
                                "Train the model of this checkpoint on to --steps with its own settings and data, "
                                "into --out")->group(training_group);
  app.add_option("--length", o.length, "Characters sampled (from each model)")
      ->capture_default_str()->check(CLI::Range(0, 10000000))->group(sampling_group);
  app.add_option("--seed", o.seed, "Seed of the sampling draws")->capture_default_str()->group(sampling_group);
  app.add_option("--prompt", o.prompt, "Text the samples start from (default: '%' and a newline, the start of a fortune)")
      ->group(sampling_group);
  app.add_option("--temperature", o.temperature, "Divides the logits: below 1 sharper, above 1 flatter")
      ->capture_default_str()->check(examples::within(0.01, 100))->group(sampling_group);
  app.add_flag("--no-cache", no_cache, "Sample by a forward of the whole window for every character (the same text, slower)")
      ->group(sampling_group);
  auto* sample = app.add_option("--sample-from", sample_file,
                                "Rebuild the model saved in this checkpoint and print --prompt and --length characters "
                                "sampled after it with --seed (what the training run sampled, for the same settings); "
                                "trains nothing")->group(sampling_group);
  auto* parallel = app.add_flag("--data-parallel", data_parallel, examples::kDataParallelHelp);
  app.add_option("--threads", threads, "Threads for matrix products (default: OMP_NUM_THREADS)")->check(CLI::Range(1, 256));
  app.footer("Examples:\n"
             "  gpt                                     # both models on the fortunes, into gpt_out/\n"
             "  gpt --data mytext.txt --out runs/mine --steps 5000\n"
             "  gpt --sample-from gpt_out/learnable.tgck --prompt \"The meaning of life\" --length 500\n"
             "  gpt --resume gpt_out/checkpoints/learnable/checkpoint-00001000.tgck --out runs/resumed\n"
             "  mpirun -np 2 gpt --data-parallel        # 2 ranks share every batch; rank 0 writes --out\n");
  if (const auto stop = examples::parse_command_line(app, "gpt", argc, argv)) return *stop;
  o.cache = !no_cache;
  o.decay_on = parse_enum<DecayOn>(decay_on);
  examples::Job job;
  return job.run("gpt", data_parallel && sample->count() == 0, &argc, &argv, [&] {
    if (sample->count() > 0) {
      for (const CLI::Option* other : training_flags)
        if (other->count() > 0)
          fail<ValueError>("{} is a training flag; --sample-from takes only --prompt, --length, --seed, --temperature, "
                           "--no-cache and --threads",
                           other->get_name());
      for (const CLI::Option* other : {out, overwrite, steps, checkpoint_every, keep, resume, parallel, prepared, prepare})
        if (other->count() > 0)
          fail<ValueError>("{} trains; --sample-from takes only --prompt, --length, --seed, --temperature, --no-cache and "
                           "--threads",
                           other->get_name());
    }
    if (prepare_only) {
      for (const CLI::Option* other : {out, overwrite, steps, checkpoint_every, keep, resume, parallel})
        if (other->count() > 0) fail<ValueError>("{} trains; --prepare-only takes --data and --prepared", other->get_name());
      for (const CLI::Option* other : training_flags)
        if (other->count() > 0 && other != data)
          fail<ValueError>("{} is a training flag; --prepare-only takes --data and --prepared", other->get_name());
    }
    if (resume->count() > 0)
      for (const CLI::Option* other : training_flags)
        if (other->count() > 0)
          fail<ValueError>("{} is a setting of the run being resumed, which --resume reads from the checkpoint; it takes "
                           "--steps, --out, --overwrite, --checkpoint-every, --keep and the sampling flags",
                           other->get_name());
    if (threads > 0) set_num_threads(threads);
    o.prepared_given = prepared->count() > 0;
    if (sample->count() > 0) return gpt::sample_from(sample_file, o);
    if (prepare_only) return gpt::prepare_only(o);
    if (resume->count() > 0) {
      gpt::Options resumed = o;
      resumed.steps = steps->count() > 0 ? o.steps : 0;  // 0: the checkpoint's own
      return gpt::resume(resumed, job.collective());
    }
    return gpt::run_comparison(o, job.collective());
  });
}
