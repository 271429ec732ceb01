#!/usr/bin/python3
"""Writes tests/data/optim_golden.txt: parameter values after every step of torch.optim's SGD, Adam
and AdamW (float64, single-tensor path), clip_grad_norm_ results and learning-rate schedules, for
tests/test_optimizer.cpp to compare against. Run by hand (the test suite never needs torch):

    /usr/bin/python3 tests/data/make_optim_golden.py      # Debian's python3-torch

Format, one header line per item, followed by one line of values when the item is a tensor:
    param <name> <rank> <dims...>            initial value of a parameter
    grad <step> <name> <rank> <dims...>      the gradient fed at that step (same for every case)
    case <name> <kind>                       kind: sgd, adam, adamw, clip, step_lr, cosine_warmup
    option <key> <value>                     constructor options of the case (no values line)
    lrs <rank> <dims...>                     optional: the lr set before each step (schedules drive it)
    value <step> <name> <rank> <dims...>     a parameter's value after that step
    norm <value>                             clip: the norm before clipping (no values line)
    clipped <name> <rank> <dims...>          clip: the gradient after clipping (grads of step 0)
    end
Values are written with repr(), so the C++ side reads the very same doubles.
"""
import math
import os
import warnings

import torch

# SequentialLR itself calls scheduler.step(0) at its milestone, which torch 1.13 warns about.
warnings.filterwarnings("ignore", message="The epoch parameter", category=UserWarning)

torch.manual_seed(20261122)
torch.set_default_dtype(torch.float64)

STEPS = 6
PARAMS = {
    "attn.wq": torch.randn(4, 3),
    "attn.bias": torch.randn(3),
    "embed.table": torch.randn(2, 2, 3),
}
GRADS = [{k: torch.randn(v.shape) * (0.5 + step) for k, v in PARAMS.items()} for step in range(STEPS)]

OPTIMIZER_CASES = [
    ("sgd_plain", "sgd", dict(lr=0.1), None),
    ("sgd_momentum", "sgd", dict(lr=0.1, momentum=0.9), None),
    ("sgd_momentum_dampening_decay", "sgd", dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01), None),
    ("sgd_nesterov_decay", "sgd", dict(lr=0.05, momentum=0.9, weight_decay=0.01, nesterov=True), None),
    ("adam_default", "adam", dict(), None),
    ("adam_decay", "adam", dict(lr=0.01, weight_decay=0.1), None),
    ("adamw_decay", "adamw", dict(lr=0.01, weight_decay=0.1), None),
    ("adamw_default", "adamw", dict(), None),
    ("adam_betas_changing_lr", "adam", dict(lr=0.02, beta1=0.8, beta2=0.99, eps=1e-6),
     [0.02, 0.01, 0.03, 0.0, 0.015, 0.005]),
]


def make_optimizer(kind, params, opts):
    opts = dict(opts)
    if kind == "sgd":
        return torch.optim.SGD(params, foreach=False, **opts)
    betas = (opts.pop("beta1", 0.9), opts.pop("beta2", 0.999))
    cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
    return cls(params, betas=betas, foreach=False, amsgrad=False, **opts)


def header(t):
    dims = list(t.shape)
    return f"{len(dims)} {' '.join(map(str, dims))}"


def values(t):
    return " ".join(repr(float(v)) for v in t.detach().reshape(-1).tolist())


def write_tensor(out, prefix, t):
    out.write(f"{prefix} {header(t)}\n{values(t)}\n")


def write_options(out, opts):
    for k, v in opts.items():
        out.write(f"option {k} {repr(float(v))}\n")


def optimizer_case(out, name, kind, opts, lrs):
    params = {k: v.clone().requires_grad_(True) for k, v in PARAMS.items()}
    opt = make_optimizer(kind, list(params.values()), opts)
    out.write(f"case {name} {kind}\n")
    write_options(out, opts)
    if lrs is not None:
        write_tensor(out, "lrs", torch.tensor(lrs))
    for step in range(STEPS):
        if lrs is not None:
            for group in opt.param_groups:
                group["lr"] = lrs[step]
        for k, p in params.items():
            p.grad = GRADS[step][k].clone()
        opt.step()
        for k, p in params.items():
            write_tensor(out, f"value {step} {k}", p)
    out.write("end\n")


def clip_case(out, name, max_norm):
    params = {k: v.clone().requires_grad_(True) for k, v in PARAMS.items()}
    for k, p in params.items():
        p.grad = GRADS[0][k].clone()
    norm = torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm)
    out.write(f"case {name} clip\n")
    write_options(out, dict(max_norm=max_norm))
    out.write(f"norm {repr(float(norm))}\n")
    for k, p in params.items():
        write_tensor(out, f"clipped {k}", p.grad)
    out.write("end\n")


def schedule_lrs(make_scheduler, n):
    """The lr the optimizer uses at steps 0 .. n-1 under a torch scheduler."""
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    sched = make_scheduler(opt)
    lrs = []
    for _ in range(n):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def cosine_with_warmup(lr, warmup, total, min_lr, step):
    # tapegrad's definition, to check that the torch composition below really is the same schedule
    if step < warmup:
        return lr * (step + 1) / warmup
    if step >= total:
        return min_lr
    progress = (step - warmup) / (total - warmup)
    return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))


def schedule_cases(out):
    lr, step_size, gamma = 0.1, 3, 0.5

    def step_lr(opt):
        for g in opt.param_groups:
            g["lr"] = lr
        return torch.optim.lr_scheduler.StepLR(opt, step_size=step_size, gamma=gamma)

    out.write("case step_lr step_lr\n")
    write_options(out, dict(lr=lr, step_size=step_size, gamma=gamma))
    write_tensor(out, "lrs", torch.tensor(schedule_lrs(step_lr, 12)))
    out.write("end\n")

    # Linear warm-up lr (step + 1) / warmup, then cosine from lr to min_lr over total - warmup steps:
    # LinearLR from 1/warmup to 1 over warmup - 1 steps, then CosineAnnealingLR. After total_steps
    # tapegrad stays at min_lr while torch's cosine would rise again, so the sequence stops there.
    for lr, warmup, total, min_lr in [(0.3, 4, 14, 0.01), (0.2, 1, 7, 0.0)]:
        def cosine(opt):
            for g in opt.param_groups:
                g["lr"] = lr
            # (with warmup 1, a LinearLR from 1 to 1: the single warm-up step is at lr)
            warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / warmup, end_factor=1.0,
                                                     total_iters=max(warmup - 1, 1))
            cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=min_lr)
            return torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[warmup])

        lrs = schedule_lrs(cosine, total + 1)
        for step, got in enumerate(lrs):
            want = cosine_with_warmup(lr, warmup, total, min_lr, step)
            assert abs(got - want) <= 1e-13 * lr, (step, got, want)
        out.write(f"case cosine_warmup_{warmup}_{total} cosine_warmup\n")
        write_options(out, dict(lr=lr, warmup_steps=warmup, total_steps=total, min_lr=min_lr))
        write_tensor(out, "lrs", torch.tensor(lrs))
        out.write("end\n")


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim_golden.txt")
    with open(path, "w") as out:
        out.write(f"# written by tests/data/make_optim_golden.py with torch {torch.__version__}; do not edit\n")
        for k, v in PARAMS.items():
            write_tensor(out, f"param {k}", v)
        for step, grads in enumerate(GRADS):
            for k, g in grads.items():
                write_tensor(out, f"grad {step} {k}", g)
        for case in OPTIMIZER_CASES:
            optimizer_case(out, *case)
        clip_case(out, "clip_scaled", 1.5)
        clip_case(out, "clip_untouched", 100.0)
        schedule_cases(out)
    print(f"wrote {len(OPTIMIZER_CASES)} optimizer cases, 2 clip cases and 3 schedules to {path}")


if __name__ == "__main__":
    main()
