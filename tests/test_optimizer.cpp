// train/optimizer and train/schedule: every step of SGD, Adam and AdamW, clip_grad_norm and the
// schedules against PyTorch (tests/data/make_optim_golden.py wrote tests/data/optim_golden.txt);
// the refusals and their messages; a strict load_state that changes nothing when it refuses; resuming
// from state() bit for bit; the float instantiation.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <numbers>
#include <sstream>

#include "golden_file.hpp"
#include "helpers.hpp"
#include "pin_crossover.hpp"
#include "tapegrad/train/optimizer.hpp"
#include "tapegrad/train/schedule.hpp"

using namespace tapegrad;
using test::random_tensor;

namespace {

// ---------------------------------------------------------------------------------------------
// The golden file (format described in make_optim_golden.py)

struct GoldenCase {
  std::string kind;
  std::map<std::string, double> options;
  TensorD lrs;                                           // lr before each step, if the case sets it
  std::map<int, std::map<std::string, TensorD>> values;  // step -> parameter -> value after the step
  double norm = 0;                                       // clip cases
  std::map<std::string, TensorD> clipped;
};

struct Golden {
  std::vector<std::pair<std::string, TensorD>> params;  // initial values, in the optimizer's order
  std::map<int, std::map<std::string, TensorD>> grads;  // step -> parameter -> grad
  std::map<std::string, GoldenCase> cases;
};

using test::read_shape;

TensorD read_values(std::istream& in, Shape s) { return test::read_values<double>(in, s); }

Golden read_golden() {
  std::ifstream in(TAPEGRAD_TEST_DATA "/optim_golden.txt");
  REQUIRE_MESSAGE(in.good(), "cannot open tests/data/optim_golden.txt");
  Golden g;
  GoldenCase* current = nullptr;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string kind, name;
    int step = 0;
    words >> kind;
    if (kind == "param") {
      words >> name;
      g.params.emplace_back(name, read_values(in, read_shape(words)));
    } else if (kind == "grad") {
      words >> step >> name;
      g.grads[step][name] = read_values(in, read_shape(words));
    } else if (kind == "case") {
      words >> name;
      current = &g.cases[name];
      words >> current->kind;
    } else if (kind == "end") {
      current = nullptr;
    } else {
      REQUIRE_MESSAGE(current != nullptr, "optim_golden.txt: '", kind, "' outside a case");
      if (kind == "option") {
        double value = 0;
        words >> name >> value;
        current->options[name] = value;
      } else if (kind == "lrs") {
        current->lrs = read_values(in, read_shape(words));
      } else if (kind == "value") {
        words >> step >> name;
        current->values[step][name] = read_values(in, read_shape(words));
      } else if (kind == "norm") {
        words >> current->norm;
      } else if (kind == "clipped") {
        words >> name;
        current->clipped[name] = read_values(in, read_shape(words));
      } else {
        FAIL("optim_golden.txt: unknown line kind '", kind, "'");
      }
    }
  }
  return g;
}

// Parameters at stable addresses (the optimizer keeps pointers).
struct Params {
  std::vector<std::unique_ptr<Parameter<double>>> owned;
  std::vector<Parameter<double>*> ptrs() const {
    std::vector<Parameter<double>*> out;
    for (const auto& p : owned) out.push_back(p.get());
    return out;
  }
};

Params golden_params(const Golden& g) {
  Params ps;
  for (const auto& entry : g.params) ps.owned.push_back(std::make_unique<Parameter<double>>(entry.first, entry.second));
  return ps;
}

// The case's options over the C++ defaults: cases without an option also check our defaults are torch's,
// but for AdamW's weight decay: torch's AdamW defaults to 0.01, tapegrad's one Adam options type to 0.
std::unique_ptr<Optimizer<double>> optimizer_for(const GoldenCase& c, std::vector<Parameter<double>*> ps) {
  auto opt = [&c](const char* key, double fallback) {
    const auto found = c.options.find(key);
    return found == c.options.end() ? fallback : found->second;
  };
  if (c.kind == "sgd") {
    SgdOptions o;
    o = {opt("lr", o.lr), opt("momentum", o.momentum), opt("dampening", o.dampening),
         opt("weight_decay", o.weight_decay), opt("nesterov", o.nesterov) != 0};
    return std::make_unique<SGD<double>>(std::move(ps), o);
  }
  if (c.kind == "adam") {
    AdamOptions o;
    o = {opt("lr", o.lr), opt("beta1", o.beta1), opt("beta2", o.beta2), opt("eps", o.eps),
         opt("weight_decay", o.weight_decay)};
    return std::make_unique<Adam<double>>(std::move(ps), o);
  }
  REQUIRE(c.kind == "adamw");
  AdamOptions o;
  CHECK(o.weight_decay == 0);
  o = {opt("lr", o.lr), opt("beta1", o.beta1), opt("beta2", o.beta2), opt("eps", o.eps), opt("weight_decay", 0.01)};
  return std::make_unique<AdamW<double>>(std::move(ps), o);
}

// Replays the golden gradients through every case of one kind; returns how many cases it ran.
int replay_against_torch(const std::string& kind) {
  const Golden g = read_golden();
  int replayed = 0;
  for (const auto& entry : g.cases) {
    const std::string& name = entry.first;
    const GoldenCase& c = entry.second;
    if (c.kind != kind) continue;
    CAPTURE(name);
    Params ps = golden_params(g);
    auto opt = optimizer_for(c, ps.ptrs());
    REQUIRE(c.values.size() == g.grads.size());
    for (int step = 0; step < static_cast<int>(g.grads.size()); ++step) {
      CAPTURE(step);
      if (c.lrs.numel() > 0) opt->set_lr(c.lrs[step]);
      for (auto& p : ps.owned) p->grad = g.grads.at(step).at(p->name);
      opt->step();
      for (const auto& p : ps.owned) {
        CAPTURE(p->name);
        CHECK_TENSOR_NEAR(p->value, c.values.at(step).at(p->name), 1e-15, 1e-12);
      }
    }
    CHECK(opt->steps_taken() == static_cast<std::int64_t>(g.grads.size()));
    ++replayed;
  }
  return replayed;
}

// ---------------------------------------------------------------------------------------------
// A small model for the state tests: "attn.wq" (2x3) then "attn.bias" (3).

struct TwoParams {
  Parameter<double> wq, bias;
  explicit TwoParams(std::uint64_t seed) {
    Rng rng(seed);
    wq = Parameter<double>("attn.wq", random_tensor(Shape::mat(2, 3), rng));
    bias = Parameter<double>("attn.bias", random_tensor(Shape::vec(3), rng));
  }
  std::vector<Parameter<double>*> ptrs() { return {&wq, &bias}; }
  void random_grads(Rng& rng) {
    wq.grad = random_tensor(wq.value.shape(), rng);
    bias.grad = random_tensor(bias.value.shape(), rng);
  }
};

void take_steps(Optimizer<double>& opt, TwoParams& m, Rng& rng, int steps) {
  for (int s = 0; s < steps; ++s) {
    m.random_grads(rng);
    opt.step();
  }
}

// Sets (or adds) a setting, removes one: the edits a forged state makes.
void set(Settings& s, const std::string& name, const std::string& value) {
  for (auto& x : s)
    if (x.name == name) {
      x.value = value;
      return;
    }
  s.push_back({name, value});
}
void erase_setting(Settings& s, const std::string& name) {
  std::erase_if(s, [&](const Setting& x) { return x.name == name; });
}

bool same_state(const OptimizerState<double>& a, const OptimizerState<double>& b) {
  return a.kind == b.kind && a.hyperparameters == b.hyperparameters && a.step == b.step && a.per_param == b.per_param;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Against PyTorch

TEST_CASE("optimizer: SGD matches torch.optim.SGD step by step (plain, momentum, dampening, Nesterov, decay)") {
  CHECK(replay_against_torch("sgd") == 4);
}

TEST_CASE("optimizer: Adam matches torch.optim.Adam step by step (defaults, L2 decay, betas, changing lr)") {
  CHECK(replay_against_torch("adam") == 3);
}

TEST_CASE("optimizer: AdamW matches torch.optim.AdamW step by step (defaults, decoupled decay)") {
  CHECK(replay_against_torch("adamw") == 2);
}

TEST_CASE("optimizer: clip_grad_norm matches torch.nn.utils.clip_grad_norm_") {
  const Golden g = read_golden();
  for (const char* name : {"clip_scaled", "clip_untouched"}) {
    CAPTURE(name);
    REQUIRE(g.cases.count(name) == 1);
    const GoldenCase& c = g.cases.at(name);
    Params ps = golden_params(g);
    for (auto& p : ps.owned) p->grad = g.grads.at(0).at(p->name);
    const double norm = clip_grad_norm(ps.ptrs(), c.options.at("max_norm"));
    CHECK(norm == doctest::Approx(c.norm).epsilon(1e-13));
    for (const auto& p : ps.owned) {
      CAPTURE(p->name);
      CHECK_TENSOR_NEAR(p->grad, c.clipped.at(p->name), 1e-15, 1e-12);
    }
  }
  // Below the threshold the gradients are not even multiplied by 1.
  Params ps = golden_params(g);
  for (auto& p : ps.owned) p->grad = g.grads.at(0).at(p->name);
  clip_grad_norm(ps.ptrs(), 100.0);
  for (const auto& p : ps.owned) CHECK(p->grad == g.grads.at(0).at(p->name));
}

TEST_CASE("schedule: StepLr and CosineWithWarmup match torch.optim.lr_scheduler") {
  const Golden g = read_golden();
  int checked = 0;
  for (const auto& entry : g.cases) {
    const std::string& name = entry.first;
    const GoldenCase& c = entry.second;
    std::unique_ptr<LrSchedule> schedule;
    const auto& o = c.options;
    if (c.kind == "step_lr")
      schedule = std::make_unique<StepLr>(StepLrOptions{static_cast<std::int64_t>(o.at("step_size")), o.at("gamma")});
    else if (c.kind == "cosine_warmup")
      schedule = std::make_unique<CosineWithWarmup>(CosineOptions{static_cast<std::int64_t>(o.at("warmup_steps")),
                                                                  static_cast<std::int64_t>(o.at("total_steps")), o.at("min_lr")});
    else
      continue;
    CAPTURE(name);
    REQUIRE(c.lrs.numel() > 0);
    for (Index step = 0; step < c.lrs.numel(); ++step) {
      CAPTURE(step);
      CHECK(schedule->lr_at(o.at("lr"), step) == doctest::Approx(c.lrs[step]).epsilon(1e-12));
    }
    // The same rates from an optimizer that carries the schedule: its lr is the one home of the rate.
    TwoParams m(12);
    SGD<double> sgd(m.ptrs(), {.lr = o.at("lr")});
    sgd.set_schedule(*schedule);
    for (Index step = 0; step < c.lrs.numel(); ++step) {
      CAPTURE(step);
      CHECK(sgd.current_lr() == doctest::Approx(c.lrs[step]).epsilon(1e-12));
      const TensorD before = m.wq.value;
      m.wq.grad = TensorD(m.wq.value.shape(), 1.0);
      m.bias.grad = TensorD(m.bias.value.shape(), 0.0);
      sgd.step();  // plain SGD: p -= rate * 1, so the step shows the rate it used
      CHECK(before[0] - m.wq.value[0] == doctest::Approx(c.lrs[step]).epsilon(1e-9));
    }
    CHECK(sgd.lr() == o.at("lr"));  // the schedule never overwrites the optimizer's lr
    ++checked;
  }
  CHECK(checked == 3);
}

// ---------------------------------------------------------------------------------------------
// Schedules

TEST_CASE("schedule: CosineWithWarmup by hand: warm-up, peak, cosine, floor") {
  const CosineWithWarmup s({.warmup_steps = 2, .total_steps = 6, .min_lr = 0.1});
  const double lr = 1.0;
  CHECK(s.lr_at(lr, 0) == 0.5);  // lr (0 + 1) / 2
  CHECK(s.lr_at(lr, 1) == 1.0);  // the last warm-up step is at lr
  CHECK(s.lr_at(lr, 2) == 1.0);  // the cosine starts at lr
  CHECK(s.lr_at(lr, 3) == doctest::Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi / 4))).epsilon(1e-15));
  CHECK(s.lr_at(lr, 4) == doctest::Approx(0.55).epsilon(1e-15));  // half way: (lr + min_lr) / 2
  CHECK(s.lr_at(lr, 6) == doctest::Approx(0.1).epsilon(1e-15));
  CHECK(s.lr_at(lr, 7) == 0.1);
  CHECK(s.lr_at(lr, 1000000) == 0.1);
  for (std::int64_t step = 2; step < 8; ++step) CHECK(s.lr_at(lr, step + 1) <= s.lr_at(lr, step));
  const CosineWithWarmup no_warmup({.warmup_steps = 0, .total_steps = 4});
  CHECK(no_warmup.lr_at(0.4, 0) == 0.4);
  CHECK(no_warmup.lr_at(0.4, 2) == doctest::Approx(0.2).epsilon(1e-15));
  CHECK(no_warmup.lr_at(0.4, 4) == 0.0);
}

TEST_CASE("schedule: ConstantLr, StepLr by hand, records describe them and rebuild them") {
  const ConstantLr constant;
  CHECK(constant.lr_at(0.3, 0) == 0.3);
  CHECK(constant.lr_at(0.3, 123456) == 0.3);
  const StepLr step({.step_size = 2, .gamma = 0.5});
  CHECK(step.lr_at(0.8, 0) == 0.8);
  CHECK(step.lr_at(0.8, 1) == 0.8);
  CHECK(step.lr_at(0.8, 2) == 0.4);
  CHECK(step.lr_at(0.8, 5) == 0.2);
  CHECK(constant.describe() == "constant");
  CHECK(step.describe() == "step (step_size 2, gamma 0.5)");
  const CosineWithWarmup cosine({.warmup_steps = 10, .total_steps = 100, .min_lr = 0.001});
  CHECK(cosine.describe() == "cosine (warmup_steps 10, total_steps 100, min_lr 0.001)");
  for (const LrSchedule* s : std::initializer_list<const LrSchedule*>{&constant, &step, &cosine}) {
    CAPTURE(s->describe());
    const auto rebuilt = make_schedule(s->record());
    CHECK(rebuilt->record() == s->record());
    for (std::int64_t k : {0, 1, 7, 55, 99, 100, 1000}) CHECK(rebuilt->lr_at(0.1, k) == s->lr_at(0.1, k));
  }
}

TEST_CASE("schedule: invalid settings are refused with a sentence") {
  CHECK_THROWS_WITH_AS(StepLr({.step_size = 0, .gamma = 0.5}), "StepLr: step_size must be finite and >= 1, got 0", ValueError);
  CHECK_THROWS_WITH_AS(StepLr({.step_size = 3, .gamma = -0.5}), "StepLr: gamma must be finite and > 0, got -0.5", ValueError);
  CHECK_THROWS_WITH_AS(CosineWithWarmup({.warmup_steps = 20, .total_steps = 10}),
                       "CosineWithWarmup: warmup_steps 20 is more than total_steps 10", ValueError);
  CHECK_THROWS_WITH_AS(CosineWithWarmup({.warmup_steps = -1, .total_steps = 10}),
                       "CosineWithWarmup: warmup_steps must be finite and >= 0, got -1", ValueError);
  CHECK_THROWS_WITH_AS(CosineWithWarmup({.warmup_steps = 0, .total_steps = 0}),
                       "CosineWithWarmup: total_steps must be finite and >= 1, got 0", ValueError);
  CHECK_THROWS_WITH_AS(CosineWithWarmup({.warmup_steps = 1, .total_steps = 10, .min_lr = -0.2}),
                       "CosineWithWarmup: min_lr must be finite and >= 0, got -0.2", ValueError);
  // min_lr is checked against the optimizer's lr where the two meet.
  CHECK_THROWS_WITH_AS(CosineWithWarmup({.warmup_steps = 1, .total_steps = 10, .min_lr = 0.2}).lr_at(0.1, 3),
                       "CosineWithWarmup: min_lr 0.2 is above the optimizer's lr 0.1", ValueError);
  CHECK_THROWS_WITH_AS(ConstantLr().lr_at(0.1, -1), "lr_at: step must be >= 0, got -1", ValueError);
  // An optimizer refuses a schedule that does not fit its lr when it is attached, not steps later, and an
  // lr that its schedule does not fit; neither changes anything.
  TwoParams m(13);
  SGD<double> sgd(m.ptrs(), {.lr = 0.1});
  CHECK_THROWS_WITH_AS(sgd.set_schedule(CosineWithWarmup({.warmup_steps = 1, .total_steps = 10, .min_lr = 0.2})),
                       "CosineWithWarmup: min_lr 0.2 is above the optimizer's lr 0.1", ValueError);
  CHECK(sgd.schedule().describe() == "constant");
  sgd.set_schedule(CosineWithWarmup({.warmup_steps = 1, .total_steps = 10, .min_lr = 0.05}));
  CHECK_THROWS_WITH_AS(sgd.set_lr(0.01), "CosineWithWarmup: min_lr 0.05 is above the optimizer's lr 0.01", ValueError);
  CHECK(sgd.lr() == 0.1);
  CHECK_THROWS_WITH_AS(make_schedule({"linear", {}}), "schedule: unknown name 'linear'; choose constant, step or cosine",
                       NameError);
  CHECK_THROWS_WITH_AS(make_schedule({"step", {{"step_size", "3"}}}), "schedule 'step': missing 'gamma'", NameError);
  CHECK_THROWS_WITH_AS(make_schedule({"step", {{"step_size", "three"}, {"gamma", "0.5"}}}),
                       "schedule 'step': step_size is 'three', which is not a whole number", ValueError);
  CHECK_THROWS_WITH_AS(make_schedule({"constant", {{"gamma", "0.5"}}}), "schedule 'constant': takes no settings, got gamma 0.5",
                       NameError);
}

// ---------------------------------------------------------------------------------------------
// Refusals

TEST_CASE("optimizer: construction refuses no parameters, null pointers, empty and duplicate names") {
  TwoParams m(1);
  Parameter<double> unnamed("", TensorD(Shape::mat(2, 2)));
  Parameter<double> again("attn.wq", TensorD(Shape::vec(4)));
  CHECK_THROWS_WITH_AS(SGD<double>({}), "sgd: no parameters to optimize", ValueError);
  CHECK_THROWS_WITH_AS(SGD<double>({&m.wq, nullptr}), "sgd: parameter 1 is a null pointer", ValueError);
  CHECK_THROWS_WITH_AS(Adam<double>({&m.wq, &unnamed}), "adam: parameter 1 (2x2) has an empty name", NameError);
  CHECK_THROWS_WITH_AS(AdamW<double>({&m.wq, &m.bias, &again}),
                       "adamw: parameter name 'attn.wq' is used twice, by parameters 0 and 2", NameError);
  CHECK_THROWS_WITH_AS(SGD<double>({&m.bias, &m.bias}),
                       "sgd: parameter name 'attn.bias' is used twice, by parameters 0 and 1", NameError);
}

TEST_CASE("optimizer: invalid options are refused as torch refuses them") {
  TwoParams m(2);
  auto sgd = [&m](SgdOptions o) { SGD<double> opt(m.ptrs(), o); };
  auto adam = [&m](AdamOptions o) { Adam<double> opt(m.ptrs(), o); };
  auto adamw = [&m](AdamOptions o) { AdamW<double> opt(m.ptrs(), o); };
  CHECK_THROWS_WITH_AS(sgd(SgdOptions{.lr = -0.1}), "sgd: lr must be finite and >= 0, got -0.1", ValueError);
  CHECK_THROWS_WITH_AS(sgd(SgdOptions{.momentum = -0.9}), "sgd: momentum must be finite and >= 0, got -0.9",
                       ValueError);
  CHECK_THROWS_WITH_AS(sgd(SgdOptions{.dampening = -1}), "sgd: dampening must be finite and >= 0, got -1", ValueError);
  CHECK_THROWS_WITH_AS(sgd(SgdOptions{.weight_decay = -0.01}), "sgd: weight_decay must be finite and >= 0, got -0.01",
                       ValueError);
  CHECK_THROWS_WITH_AS(sgd(SgdOptions{.nesterov = true}),
                       "sgd: Nesterov momentum needs momentum > 0 and dampening 0, got momentum 0 and dampening 0",
                       ValueError);
  CHECK_THROWS_WITH_AS(sgd(SgdOptions{.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                       "sgd: Nesterov momentum needs momentum > 0 and dampening 0, got momentum 0.9 and dampening 0.1",
                       ValueError);
  CHECK_THROWS_WITH_AS(adam(AdamOptions{.lr = std::numeric_limits<double>::quiet_NaN()}),
                       "adam: lr must be finite and >= 0, got nan", ValueError);
  CHECK_THROWS_WITH_AS(adam(AdamOptions{.beta1 = 1.0}), "adam: beta1 must be in [0, 1), got 1", ValueError);
  CHECK_THROWS_WITH_AS(adam(AdamOptions{.beta2 = -0.5}), "adam: beta2 must be in [0, 1), got -0.5", ValueError);
  CHECK_THROWS_WITH_AS(adam(AdamOptions{.eps = -1e-8}), "adam: eps must be finite and >= 0, got -1e-08", ValueError);
  CHECK_THROWS_WITH_AS(adamw(AdamOptions{.weight_decay = -0.1}),
                       "adamw: weight_decay must be finite and >= 0, got -0.1", ValueError);
  SGD<double> opt(m.ptrs());
  CHECK_THROWS_WITH_AS(opt.set_lr(-1), "set_lr: lr must be finite and >= 0, got -1", ValueError);
  CHECK(opt.lr() == 0.01);
  CHECK(AdamW<double>(m.ptrs()).options().weight_decay == 0.0);  // one options type, one default (torch's AdamW: 0.01)
  CHECK(Adam<double>(m.ptrs()).options().weight_decay == 0.0);
}

TEST_CASE("optimizer: step refuses a grad of the wrong shape and updates nothing") {
  TwoParams m(3);
  Rng rng(33);
  SGD<double> opt(m.ptrs(), {.lr = 0.1, .momentum = 0.9});
  m.random_grads(rng);
  m.bias.grad = TensorD(Shape::mat(3, 3), 1.0);
  const TensorD wq_before = m.wq.value, bias_before = m.bias.value;
  CHECK_THROWS_WITH_AS(opt.step(), "sgd step: 'attn.bias' grad is 3x3 but its value is 3", ShapeError);
  CHECK(m.wq.value == wq_before);  // checked before anything moved
  CHECK(m.bias.value == bias_before);
  CHECK(opt.steps_taken() == 0);
  CHECK(opt.state().per_param.at("attn.wq").empty());
  Adam<double> adam(m.ptrs());
  CHECK_THROWS_WITH_AS(adam.step(), "adam step: 'attn.bias' grad is 3x3 but its value is 3", ShapeError);
  CHECK(adam.steps_taken() == 0);
}

TEST_CASE("optimizer: load_state refuses a mismatched state, names every offender, and changes nothing") {
  TwoParams m(4);
  Rng rng(44);
  SGD<double> opt(m.ptrs(), {.lr = 0.1, .momentum = 0.9});
  take_steps(opt, m, rng, 2);
  const OptimizerState<double> before = opt.state();
  const TensorD wq_before = m.wq.value, bias_before = m.bias.value;
  auto unchanged = [&] {
    CHECK(same_state(opt.state(), before));
    CHECK(opt.lr() == 0.1);
    CHECK(m.wq.value == wq_before);
    CHECK(m.bias.value == bias_before);
  };

  OptimizerState<double> bad = before;
  bad.kind = "adam";
  CHECK_THROWS_WITH_AS(opt.load_state(bad), "load_state: the state is from 'adam' but this optimizer is 'sgd'",
                       ValueError);
  unchanged();

  bad = before;
  bad.per_param["attn.b"] = bad.per_param.at("attn.bias");
  bad.per_param.erase("attn.bias");
  bad.per_param["attn.wq"]["velocity"] = TensorD(Shape::mat(2, 3));
  erase_setting(bad.hyperparameters, "momentum");
  set(bad.hyperparameters, "beta1", "0.9");
  CHECK_THROWS_WITH_AS(opt.load_state(bad),
                       "load_state: hyperparameters missing from the state: 'momentum'; hyperparameters unknown to "
                       "sgd: 'beta1'; parameters missing from the state: 'attn.bias'; parameters in the state but not "
                       "in the model: 'attn.b'; buffers unknown to sgd (it keeps momentum_buffer): 'attn.wq' velocity",
                       NameError);
  unchanged();

  // Every mis-shaped buffer is named; the valid parts of the state (a new lr) are not applied either.
  bad = before;
  set(bad.hyperparameters, "lr", "0.5");
  bad.per_param["attn.wq"]["momentum_buffer"] = TensorD(Shape::mat(3, 2));
  bad.per_param["attn.bias"]["momentum_buffer"] = TensorD(Shape::vec(4));
  CHECK_THROWS_WITH_AS(opt.load_state(bad),
                       "load_state: 'attn.wq' momentum_buffer is 3x2 in the state but 2x3 in the model; 'attn.bias' "
                       "momentum_buffer is 4 in the state but 3 in the model",
                       ShapeError);
  unchanged();

  bad = before;
  set(bad.hyperparameters, "lr", "-1");
  CHECK_THROWS_WITH_AS(opt.load_state(bad), "load_state: lr must be finite and >= 0, got -1", ValueError);
  unchanged();

  bad = before;
  set(bad.hyperparameters, "nesterov", "0.5");
  CHECK_THROWS_WITH_AS(opt.load_state(bad), "load_state: nesterov is '0.5', which is not true or false", ValueError);
  unchanged();

  bad = before;
  set(bad.hyperparameters, "momentum", "nan");
  CHECK_THROWS_WITH_AS(opt.load_state(bad), "load_state: momentum must be finite and >= 0, got nan", ValueError);
  unchanged();

  bad = before;
  bad.schedule = {"cosine", to_settings(CosineOptions{.warmup_steps = 1, .total_steps = 10})};
  CHECK_THROWS_WITH_AS(opt.load_state(bad),
                       "load_state: the state's schedule is cosine (warmup_steps 1, total_steps 10, min_lr 0) but this "
                       "optimizer's is constant",
                       ValueError);
  unchanged();

  bad = before;
  set(bad.hyperparameters, "nesterov", "true");
  set(bad.hyperparameters, "dampening", "0.1");
  CHECK_THROWS_WITH_AS(
      opt.load_state(bad),
      "load_state: Nesterov momentum needs momentum > 0 and dampening 0, got momentum 0.9 and dampening 0.1",
      ValueError);
  unchanged();

  bad = before;
  bad.step = -1;
  CHECK_THROWS_WITH_AS(opt.load_state(bad), "load_state: step must be >= 0, got -1", ValueError);
  unchanged();

  // The caller's operation starts every refusal, the options reader's too (a value, a repeated name).
  bad = before;
  set(bad.hyperparameters, "lr", "-1");
  CHECK_THROWS_WITH_AS(opt.check_state(bad, "resume"), "resume: lr must be finite and >= 0, got -1", ValueError);
  bad = before;
  bad.hyperparameters.push_back(bad.hyperparameters.front());
  CHECK_THROWS_WITH_AS(opt.check_state(bad, "resume"), "resume: given twice: 'lr'", NameError);
}

TEST_CASE("optimizer: load_state refuses an Adam state with half a parameter's buffers") {
  TwoParams m(5);
  Rng rng(55);
  Adam<double> opt(m.ptrs());
  take_steps(opt, m, rng, 1);
  const OptimizerState<double> before = opt.state();
  OptimizerState<double> bad = before;
  bad.per_param["attn.wq"].erase("exp_avg_sq");
  bad.per_param["attn.bias"].erase("exp_avg");
  CHECK_THROWS_WITH_AS(opt.load_state(bad),
                       "load_state: buffers missing from the state: 'attn.wq' exp_avg_sq, 'attn.bias' exp_avg",
                       NameError);
  CHECK(same_state(opt.state(), before));
  // A parameter with no buffers at all is a parameter not stepped yet: accepted.
  bad = before;
  bad.per_param["attn.bias"].clear();
  opt.load_state(bad);
  CHECK(opt.state().per_param.at("attn.bias").empty());
  CHECK(opt.state().per_param.at("attn.wq").size() == 2);
}

// ---------------------------------------------------------------------------------------------
// State and resume

TEST_CASE("optimizer: the state names every parameter, buffers appear with the first step") {
  TwoParams m(6);
  Rng rng(66);
  SGD<double> plain(m.ptrs(), {.lr = 0.1});
  Adam<double> adam(m.ptrs(), {.lr = 0.01, .weight_decay = 0.1});
  const auto fresh = adam.state();
  CHECK(fresh.kind == "adam");
  CHECK(fresh.step == 0);
  CHECK(fresh.per_param.size() == 2);
  CHECK(fresh.per_param.at("attn.wq").empty());
  const Settings h = {{"lr", "0.01"}, {"beta1", "0.9"}, {"beta2", "0.999"}, {"eps", "1e-08"}, {"weight_decay", "0.1"}};
  CHECK(fresh.hyperparameters == h);
  CHECK(fresh.schedule == ScheduleRecord{"constant", {}});
  take_steps(adam, m, rng, 2);
  plain.step();
  const auto stepped = adam.state();
  CHECK(stepped.step == 2);
  CHECK(stepped.per_param.at("attn.wq").at("exp_avg").shape() == Shape::mat(2, 3));
  CHECK(stepped.per_param.at("attn.bias").at("exp_avg_sq").shape() == Shape::vec(3));
  CHECK(plain.state().per_param.at("attn.wq").empty());  // SGD without momentum keeps no buffer
  CHECK(*find_setting(plain.state().hyperparameters, "nesterov") == "false");
}

TEST_CASE("optimizer: state() then load_state() into a fresh optimizer resumes bit for bit") {
  auto resume = [](auto make_original, auto make_fresh) {
    TwoParams a(7), b(7);
    Rng rng(77);
    auto original = make_original(a.ptrs());
    take_steps(*original, a, rng, 3);
    b.wq.value = a.wq.value;  // the parameters as a checkpoint restores them
    b.bias.value = a.bias.value;
    auto resumed = make_fresh(b.ptrs());  // other hyperparameters: load_state must restore them
    resumed->load_state(original->state());
    CHECK(resumed->lr() == original->lr());
    CHECK(resumed->steps_taken() == 3);
    for (int s = 0; s < 3; ++s) {
      a.random_grads(rng);
      b.wq.grad = a.wq.grad;
      b.bias.grad = a.bias.grad;
      original->step();
      resumed->step();
    }
    CHECK(b.wq.value == a.wq.value);  // bit-identical
    CHECK(b.bias.value == a.bias.value);
    CHECK(same_state(resumed->state(), original->state()));
  };
  using Ptrs = std::vector<Parameter<double>*>;
  const SgdOptions nesterov = {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true};
  resume([&](Ptrs p) { return std::make_unique<SGD<double>>(p, nesterov); },
         [](Ptrs p) { return std::make_unique<SGD<double>>(p); });
  const AdamOptions adam = {.lr = 0.02, .beta1 = 0.8, .weight_decay = 0.1};
  resume([&](Ptrs p) { return std::make_unique<Adam<double>>(p, adam); },
         [](Ptrs p) { return std::make_unique<Adam<double>>(p); });
  resume([](Ptrs p) { return std::make_unique<AdamW<double>>(p, AdamOptions{.lr = 0.03, .weight_decay = 0.2}); },
         [](Ptrs p) { return std::make_unique<AdamW<double>>(p); });
}

TEST_CASE("optimizer: Adam and AdamW decay the matrices only when asked, save that choice, and resume it exactly") {
  // With zero gradients an AdamW step is its decay alone (m = v = 0 add nothing): p *= 1 - lr wd.
  TwoParams m(9);
  const TensorD wq = m.wq.value, bias = m.bias.value;
  AdamW<double> matrices(m.ptrs(), {.lr = 0.1, .weight_decay = 0.5, .decay_on = DecayOn::matrices});
  m.wq.zero_grad();
  m.bias.zero_grad();
  matrices.step();
  CHECK_TENSOR_NEAR(m.wq.value, TensorD(wq.shape(), std::span<const double>((wq.array() * 0.95).eval().data(), 6)), 0, 1e-15);
  CHECK(m.bias.value == bias);  // a vector: not decayed
  CHECK(matrices.decay_on() == DecayOn::matrices);
  const Settings h = matrices.state().hyperparameters;
  CHECK(h.back() == Setting{"decay_on", "matrices"});
  CHECK(matrices.describe().find("decay_on matrices") != std::string::npos);
  // Decaying every parameter saves what it saved before the choice existed: no decay_on at all.
  AdamW<double> all(m.ptrs(), {.lr = 0.1, .weight_decay = 0.5});
  CHECK_FALSE(find_setting(all.state().hyperparameters, "decay_on"));
  // The one rule, which the format-1 converter calls too, and the settings as a state is read: complete.
  CHECK(AdamW<double>::saved_settings(all.options()) == all.state().hyperparameters);
  CHECK(AdamW<double>::saved_settings(matrices.options()) == h);
  CHECK(AdamW<double>::with_absent_defaults(all.state().hyperparameters) == to_settings(all.options()));
  CHECK(AdamW<double>::with_absent_defaults(h) == h);
  // Adam's L2 penalty follows the same choice: with zero gradients and decay on the matrices only, the bias
  // sees no gradient at all and does not move.
  TwoParams n(10);
  const TensorD n_bias = n.bias.value;
  Adam<double> adam(n.ptrs(), {.lr = 0.1, .weight_decay = 0.5, .decay_on = DecayOn::matrices});
  n.wq.zero_grad();
  n.bias.zero_grad();
  adam.step();
  CHECK(n.bias.value == n_bias);
  CHECK(n.wq.value != TwoParams(10).wq.value);

  // A resume is exact, through load_state and through make_optimizer (a checkpoint's hyperparameters), and
  // through an optimizer built with the other choice: load_state sets decay_on from the state, as it sets the
  // lr and the weight decay (the names are compared with an absent decay_on as its default, all).
  TwoParams a(11), b(11), c(11), d(11);
  Rng rng(111);
  AdamW<double> original(a.ptrs(), {.lr = 0.03, .weight_decay = 0.2, .decay_on = DecayOn::matrices});
  take_steps(original, a, rng, 3);
  for (TwoParams* copy : {&b, &c, &d}) {
    copy->wq.value = a.wq.value;
    copy->bias.value = a.bias.value;
  }
  AdamW<double> resumed(b.ptrs(), {.decay_on = DecayOn::matrices});
  resumed.load_state(original.state());
  auto rebuilt = make_optimizer<double>(OptimizerKind::adamw, c.ptrs(), original.state().hyperparameters);
  rebuilt->load_state(original.state());
  AdamW<double> built_all(d.ptrs());
  built_all.load_state(original.state());
  CHECK(built_all.decay_on() == DecayOn::matrices);
  CHECK(built_all.state().hyperparameters == original.state().hyperparameters);
  for (int s = 0; s < 3; ++s) {
    a.random_grads(rng);
    for (TwoParams* copy : {&b, &c, &d}) {
      copy->wq.grad = a.wq.grad;
      copy->bias.grad = a.bias.grad;
    }
    original.step();
    resumed.step();
    rebuilt->step();
    built_all.step();
  }
  for (TwoParams* copy : {&b, &c, &d}) {
    CHECK(copy->wq.value == a.wq.value);  // bit-identical
    CHECK(copy->bias.value == a.bias.value);
  }
  // The other way: a state that decays every parameter (no decay_on saved) into one built for the matrices.
  AdamW<double> decays_all(c.ptrs());
  AdamW<double> built_matrices(c.ptrs(), {.decay_on = DecayOn::matrices});
  built_matrices.load_state(decays_all.state());
  CHECK(built_matrices.decay_on() == DecayOn::all);
  CHECK_FALSE(find_setting(built_matrices.state().hyperparameters, "decay_on"));
  Settings forged = original.state().hyperparameters;
  forged.back().value = "vec\ntors";
  CHECK_THROWS_WITH_AS(make_optimizer<double>(OptimizerKind::adamw, c.ptrs(), forged),
                       "optimizer 'adamw': decay_on is 'vec\\x0ators', which is not one of all or matrices", ValueError);
  OptimizerState<double> forged_state = original.state();
  forged_state.hyperparameters = forged;
  CHECK_THROWS_WITH_AS(resumed.load_state(forged_state),
                       "load_state: decay_on is 'vec\\x0ators', which is not one of all or matrices", ValueError);
  CHECK(resumed.decay_on() == DecayOn::matrices);  // unchanged
  // "decay_on = all" given explicitly (a command line's full table, a hand-written file) is the default, as
  // its absence is: it makes an optimizer that decays every parameter, which saves no decay_on, and a state
  // that holds it loads as one without it does.
  forged.back().value = "all";
  auto explicit_all = make_optimizer<double>(OptimizerKind::adamw, c.ptrs(), forged);
  CHECK(dynamic_cast<AdamW<double>&>(*explicit_all).decay_on() == DecayOn::all);
  CHECK_FALSE(find_setting(explicit_all->state().hyperparameters, "decay_on"));
  OptimizerState<double> explicit_state = original.state();
  explicit_state.hyperparameters = forged;
  decays_all.load_state(explicit_state);
  CHECK(decays_all.decay_on() == DecayOn::all);
  CHECK(decays_all.lr() == 0.03);
  resumed.load_state(explicit_state);
  CHECK(resumed.decay_on() == DecayOn::all);
  forged.push_back(forged.back());
  CHECK_THROWS_WITH_AS(make_optimizer<double>(OptimizerKind::adamw, c.ptrs(), forged),
                       "optimizer 'adamw': given twice: 'decay_on'", NameError);
  explicit_state.hyperparameters = forged;
  CHECK_THROWS_WITH_AS(resumed.load_state(explicit_state), "load_state: given twice: 'decay_on'", NameError);
  // The defaults a command line starts from list it, so a program's --decay-on overrides it.
  CHECK(default_hyperparameters(OptimizerKind::adamw).back() == Setting{"decay_on", "all"});
  CHECK_FALSE(find_setting(default_hyperparameters(OptimizerKind::sgd), "decay_on"));
}

TEST_CASE("optimizer: zero_grad zeroes every gradient") {
  TwoParams m(8);
  Rng rng(88);
  m.random_grads(rng);
  SGD<double> opt(m.ptrs());
  opt.zero_grad();
  CHECK(m.wq.grad == TensorD(Shape::mat(2, 3)));
  CHECK(m.bias.grad == TensorD(Shape::vec(3)));
}

// ---------------------------------------------------------------------------------------------
// clip_grad_norm beyond torch's values

TEST_CASE("optimizer: clip_grad_norm returns a non-finite norm and leaves the grads alone") {
  TwoParams m(9);
  Rng rng(99);
  m.random_grads(rng);
  const TensorD wq_grad = m.wq.grad;
  m.bias.grad[1] = std::numeric_limits<double>::infinity();
  const TensorD bias_grad = m.bias.grad;
  CHECK(std::isinf(clip_grad_norm(m.ptrs(), 1.0)));
  CHECK(m.wq.grad == wq_grad);
  CHECK(m.bias.grad == bias_grad);
  m.bias.grad[1] = std::numeric_limits<double>::quiet_NaN();
  CHECK(std::isnan(clip_grad_norm(m.ptrs(), 1.0)));
  CHECK(m.wq.grad == wq_grad);
}

TEST_CASE("optimizer: clip_grad_norm refuses a bad max_norm or a null parameter") {
  TwoParams m(10);
  Rng rng(100);
  m.random_grads(rng);
  const TensorD wq_grad = m.wq.grad;
  CHECK_THROWS_WITH_AS(clip_grad_norm(m.ptrs(), -1.0), "clip_grad_norm: max_norm must be finite and >= 0, got -1",
                       ValueError);
  const std::vector<Parameter<double>*> with_null = {&m.wq, nullptr};
  CHECK_THROWS_WITH_AS(clip_grad_norm(with_null, 1e-3), "clip_grad_norm: parameter 1 is a null pointer", ValueError);
  CHECK(m.wq.grad == wq_grad);  // nothing scaled before the null was found
}

// ---------------------------------------------------------------------------------------------
// float

TEST_CASE("optimizer: the float instantiation minimises a quadratic with every optimizer") {
  // f(w) = 1/2 |w - target|^2, grad = w - target
  const Tensor target(Shape::mat(2, 2), {1.0f, -2.0f, 0.5f, 3.0f});
  auto run = [&target](auto make, int steps) {
    Parameter<float> w("w", Tensor(Shape::mat(2, 2)));
    auto opt = make(std::vector<Parameter<float>*>{&w});
    auto loss = [&] { return 0.5 * (w.value.array() - target.array()).square().template cast<double>().sum(); };
    const double initial = loss();
    for (int s = 0; s < steps; ++s) {
      opt->zero_grad();
      w.grad.array() += w.value.array() - target.array();
      clip_grad_norm(opt->params(), 10.0);
      opt->step();
    }
    CHECK(initial > 7);
    CHECK(loss() < 1e-4 * initial);
  };
  using Ptrs = std::vector<Parameter<float>*>;
  run([](Ptrs p) { return std::make_unique<SGD<float>>(p, SgdOptions{.lr = 0.1, .momentum = 0.9}); }, 200);
  const SgdOptions nesterov = {.lr = 0.1, .momentum = 0.5, .nesterov = true};
  run([&](Ptrs p) { return std::make_unique<SGD<float>>(p, nesterov); }, 200);
  run([](Ptrs p) { return std::make_unique<Adam<float>>(p, AdamOptions{.lr = 0.1}); }, 400);
  run([](Ptrs p) { return std::make_unique<AdamW<float>>(p, AdamOptions{.lr = 0.1, .weight_decay = 0}); }, 400);
}

// ---------------------------------------------------------------------------------------------
// By name: what a checkpoint or a command line rebuilds an optimizer from

TEST_CASE("optimizer: make_optimizer rebuilds each kind from its hyperparameters, strictly") {
  TwoParams m(11);
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::adamw}) {
    CAPTURE(to_string(kind));
    Settings h = with_overrides(default_hyperparameters(kind), {{"lr", "0.25"}, {"weight_decay", "0.5"}}, "test");
    const auto opt = make_optimizer<double>(kind, m.ptrs(), h);
    CHECK(opt->kind() == to_string(kind));  // the library's names, the enum's spellings
    CHECK(opt->lr() == 0.25);
    // As saved: the defaults list "decay_on = all", which a state leaves out (a field whose absence means it).
    if (kind != OptimizerKind::sgd) {
      CHECK(h.back() == Setting{"decay_on", "all"});
      h.pop_back();
    }
    CHECK(opt->hyperparameters() == h);
  }
  CHECK(parse_enum<OptimizerKind>("adamw") == OptimizerKind::adamw);
  CHECK_THROWS_WITH_AS(parse_enum<OptimizerKind>("lbfgs"), "optimizer: unknown name 'lbfgs'; choose sgd, adam or adamw",
                       NameError);
  CHECK_THROWS_WITH_AS(make_optimizer<double>(OptimizerKind::sgd, m.ptrs(), {{"lr", "0.1"}, {"beta1", "0.9"}}),
                       "optimizer 'sgd': missing 'momentum', 'dampening', 'weight_decay', 'nesterov'; unknown 'beta1' "
                       "(known: lr, momentum, dampening, weight_decay, nesterov)",
                       NameError);
  CHECK_THROWS_WITH_AS(with_overrides(default_hyperparameters(OptimizerKind::sgd), {{"beta1", "0.9"}}, "sgd"),
                       "sgd: has no setting 'beta1' (it has lr, momentum, dampening, weight_decay, nesterov)", NameError);
  SGD<double> sgd(m.ptrs(), {.lr = 0.1, .momentum = 0.9});
  CHECK(sgd.describe() == "sgd (lr 0.1, momentum 0.9, dampening 0, weight_decay 0, nesterov false), schedule constant");
}

namespace {

// A user's optimizer that writes down what the library hands its update(): the rate and the step number into
// the values, a count of visits and of fresh buffers into its two buffers.
struct ProbeOptions {
  double lr = 1;
  template <class S, class F>
  static void fields(S& s, F&& field) {
    field("lr", s.lr, "learning rate", at_least(0));
  }
};

class Probe final : public OptimizerWith<Probe, double, ProbeOptions> {
 public:
  explicit Probe(std::vector<Parameter<double>*> params) : OptimizerWith(std::move(params), {}, "probe", {"visits", "fresh"}) {}
  static void update(const ProbeOptions& o, std::int64_t t, ParamSlice<double> s) {
    s.value += o.lr * static_cast<double>(t);  // p += rate_t t
    s.buffer(0) += 1;
    if (s.fresh) s.buffer(1) += 1;
  }
};

}  // namespace

TEST_CASE("optimizer: a user's update() sees each element once a step, the scheduled rate and fresh zero buffers") {
  test::RestoreThreads restore;
  const test::PinCrossover pin(0, 0);  // split whatever the size: ranges that cut parameters
  set_num_threads(have_openmp() ? 2 : 1);
  Rng rng(5);
  const std::vector<Shape> shapes = {Shape::vec(1), Shape::mat(0, 3), Shape::mat(33, 7), Shape::vec(17),
                                     Shape::mat(64, 65)};
  std::vector<std::unique_ptr<Parameter<double>>> params;
  std::vector<Parameter<double>*> ptrs;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    params.push_back(std::make_unique<Parameter<double>>(fmt::format("p{}", i), random_tensor<double>(shapes[i], rng)));
    ptrs.push_back(params.back().get());
  }
  std::vector<TensorD> expected;  // p + 1 * 1, + 0.5 * 2, + 0.25 * 3
  for (auto* p : ptrs) {
    expected.push_back(p->value);
    for (double add : {1.0, 1.0, 0.75}) expected.back().array() += add;
  }
  Probe probe(ptrs);
  probe.set_schedule(StepLr({.step_size = 1, .gamma = 0.5}));  // rates 1, 0.5, 0.25
  CHECK(probe.state().per_param.at("p2").empty());             // no buffers before the first step
  for (int step = 0; step < 3; ++step) probe.step();
  const auto state = probe.state();
  for (std::size_t i = 0; i < ptrs.size(); ++i) {
    CAPTURE(i);
    CHECK(ptrs[i]->value == expected[i]);
    CHECK(state.per_param.at(ptrs[i]->name).at("visits").array().isConstant(3));  // every element, once a step
    CHECK(state.per_param.at(ptrs[i]->name).at("fresh").array().isConstant(1));   // fresh on the first step only
  }
}
