// The documentation's short C++ fragments, compiled and run: each block between "// [readme:<name>]"
// markers (at the left margin, as the page shows it) is what README.md or a page of docs/ shows
// (tests/cli/readme_excerpts.cmake checks it line for line, and that no page has a C++ block that is not
// such an excerpt); the checks around it prove it does what the page says.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <span>

#include "helpers.hpp"
#include "tapegrad/autograd/gradcheck.hpp"
#include "tapegrad/autograd/ops.hpp"
#include "tapegrad/layers/transformer.hpp"
#include "tapegrad/train/checkpoint/checkpoint.hpp"
#include "tapegrad/train/optimizer.hpp"
#include "tapegrad/train/trainer.hpp"
#include "user_models.hpp"

using namespace tapegrad;
namespace fs = std::filesystem;

namespace {

Tensor logits_of(test::Mlp& model, const Tensor& x) {
  Tape<float> tape;
  NoGradGuard<float> guard(tape);
  return model.forward(tape.constant(x)).value();
}

}  // namespace

TEST_CASE("readme: the checkpoint calls save, resume, rebuild and partly load a user's model") {
  using Mlp = test::Mlp;
  const fs::path dir = test::scratch_dir("readme", "checkpoint");
  const fs::path path = dir / "run.tgck";
  const TensorSource data = test::classification_data(64, 3);
  auto make_run = [&](Mlp& model, Adam<float>& optimizer, Index steps) {
    return Trainer<TensorBatch>(model, optimizer, data, [&model](Tape<float>& tape, const TensorBatch& b) -> StepOutput<float> {
      Var<float> logits = model.forward(tape.constant(b.features));
      return {cross_entropy(logits, b.labels), logits};
    }, {.steps = steps, .batch = 8, .eval_every = 5});
  };
  Mlp trained({.in = 2, .hidden = 4, .out = 2, .seed = 1});
  Adam<float> adam(trained.parameters(), {.lr = 0.05});
  Trainer<TensorBatch> trainer = make_run(trained, adam, 10);
  trainer.run();
  Mlp other_model({.in = 2, .hidden = 4, .out = 3, .seed = 2});  // another readout: only "hidden.*" fits
  const Tensor before = other_model.parameter("out.weight").value;

// [readme:checkpoint]
save_checkpoint(path, snapshot(trainer));                      // atomic; snapshot(model): weights and record
restore(read_checkpoint(path), trainer);                       // strict, all or nothing
auto model = model_from_checkpoint<Mlp>(read_checkpoint(path));  // rebuilt from its record
LoadReport report = load_weights(read_checkpoint(path), other_model, {.strict = false});  // the subset that fits
// [readme:checkpoint-end]

  // The rebuilt model predicts as the trained one, bit for bit.
  const Tensor x = data.features();
  CHECK(logits_of(*model, x) == logits_of(trained, x));
  // The partial load took the hidden layer, named what it left, and left the readout as it was.
  CHECK(report.loaded == std::vector<std::string>{"hidden.weight", "hidden.bias"});
  CHECK(report.mismatched.size() == 2);
  CHECK(other_model.parameter("hidden.weight").value == trained.parameter("hidden.weight").value);
  CHECK(other_model.parameter("out.weight").value == before);
  // A resumed trainer goes on from step 10, as a straight run of 20 steps would.
  Mlp straight_model({.in = 2, .hidden = 4, .out = 2, .seed = 1});
  Adam<float> straight_adam(straight_model.parameters(), {.lr = 0.05});
  Trainer<TensorBatch> straight = make_run(straight_model, straight_adam, 20);
  straight.run();
  Mlp resumed_model({.in = 2, .hidden = 4, .out = 2, .seed = 1});  // the same settings, or it is refused
  resumed_model.parameter("out.bias").value[0] += 1;  // weights the load must replace
  Adam<float> resumed_adam(resumed_model.parameters(), {.lr = 0.05});
  Trainer<TensorBatch> resumed = make_run(resumed_model, resumed_adam, 20);
  restore(read_checkpoint(path), resumed);
  resumed.run();
  CHECK(logits_of(resumed_model, x) == logits_of(straight_model, x));
  CHECK(test::same_curve(resumed.curve(), straight.curve()));
  fs::remove_all(dir);
}

TEST_CASE("readme: the gradcheck call checks softmax(q k^T) and prints nothing when the derivatives agree") {
  Rng rng(4);
  TensorD q(Shape::mat(3, 4)), k(Shape::mat(5, 4));
  for (Index i = 0; i < q.numel(); ++i) q[i] = rng.normal();
  for (Index i = 0; i < k.numel(); ++i) k[i] = rng.normal();

// [readme:gradcheck]
auto report = gradcheck([](Tape<double>&, std::span<const Var<double>> in) {
  return softmax_rows(matmul_bt(in[0], in[1]));
}, {{"q", q}, {"k", k}});
if (!report.ok()) std::puts(report.str().c_str());   // "MISMATCH k[1, 2]: analytic ..., numeric ..."
// [readme:gradcheck-end]

  CHECK(report.ok());
  CHECK(report.checked == q.numel() + k.numel());
}

TEST_CASE("readme: summary() prints the tree of modules, their types and their parameters' shapes") {
  Rng rng(17);
// [readme:summary]
TransformerBlock<float> block("block", {.d_model = 8, .n_heads = 2, .d_ff = 16}, rng);
CHECK(block.summary() == R"(block: TransformerBlock (600 values)
  attn: SelfAttention (288 values)
    wq  8x8
    wk  8x8
    wv  8x8
    bq  8
    bk  8
    bv  8
    wo  8x8
    bo  8
  ff: FeedForward (280 values)
    linear1: Linear (144 values)
      weight  8x16
      bias  16
    linear2: Linear (136 values)
      weight  16x8
      bias  8
    dropout: Dropout
  norm1: LayerNorm (16 values)
    weight  8
    bias  8
  norm2: LayerNorm (16 values)
    weight  8
    bias  8
  dropout1: Dropout
  dropout2: Dropout
)");
// [readme:summary-end]
  CHECK(block.count_parameters() == 600);
}
