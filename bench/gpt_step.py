#!/usr/bin/python3
"""The character GPT's training step in PyTorch (Debian's python3-torch), for the comparison with
bench/gpt_step.cpp: nanoGPT's model (model.py, without flash attention, which torch 1.13 lacks) at its CPU
setting, 4 pre-norm blocks of width 128, 4 heads, MLP 4x with GELU, biases, a final LayerNorm and a head tied
to the token embedding; AdamW lr 1e-3, betas (0.9, 0.99), weight decay 0.1 on the parameters of 2 or more
dimensions only; gradients clipped at norm 1; batches of 12 random windows of 65 bytes of the fortunes, read
as examples/gpt/text.hpp says. One step = a batch, forward, loss, zero_grad, backward, clip, update.
Prints one JSON line; characters a second are the batch's 12 x 64 predicted bytes over the median step time,
and the first lines of torch.__config__.show() name the build. Its BLAS's threads are its environment's
(OPENBLAS_NUM_THREADS); bench/gpt_compare.sh runs it in each arrangement.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/gpt_step.py --threads 2
"""
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def read_fortunes(path):
    """The training stream's bytes: examples/gpt/text.hpp's rules."""
    if os.path.isdir(path):
        names = sorted((n for n in os.listdir(path) if '.' not in n and os.path.isfile(os.path.join(path, n))),
                       key=lambda n: n.encode())
        files = [os.path.join(path, n) for n in names]
    else:
        files = [path]
    fortunes = []
    for f in files:
        lines = open(f, 'rb').read().split(b'\n')
        if lines and lines[-1] == b'':
            lines.pop()
        current = b''
        for line in lines:
            if line == b'%':
                if current:
                    fortunes.append(current)
                current = b''
            else:
                current += line + b'\n'
        if current:
            fortunes.append(current)
    train = b''.join(f + b'%\n' for i, f in enumerate(fortunes) if i % 10 != 9)
    validation = b''.join(f + b'%\n' for i, f in enumerate(fortunes) if i % 10 == 9)
    vocab = sorted(set(train) | set(validation))
    index = {b: i for i, b in enumerate(vocab)}
    return torch.tensor([index[b] for b in train], dtype=torch.long), len(vocab)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.attn_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))  # (B, H, T, dh)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        att = F.softmax(att.masked_fill(~causal, float('-inf')), dim=-1)
        return self.attn_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, context, d, heads, layers):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():  # nanoGPT's initialisation
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith('proj.weight') else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith('bias'):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--data', default='/usr/share/games/fortunes')
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--steps', type=int, default=200, help='timed steps per repeat')
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--warmup', type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    B, T, D, H, L = 12, 64, 128, 4, 4
    data, vocab = read_fortunes(args.data)
    model = Gpt(vocab, T, D, H, L)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{'params': decay, 'weight_decay': 0.1}, {'params': no_decay, 'weight_decay': 0.0}],
                                  lr=1e-3, betas=(0.9, 0.99), eps=1e-8)

    def step():
        ix = torch.randint(len(data) - T, (B,))
        x = torch.stack([data[i:i + T] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + T] for i in ix])
        loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    per_step = []
    loss = 0.0
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(args.steps):
            loss = step()
        per_step.append((time.perf_counter() - start) / args.steps)
    seconds = statistics.median(per_step)
    config = torch.__config__.show().strip().split('\n')
    print(json.dumps({'program': 'pytorch', 'torch': torch.__version__, 'build': config[:6],
                      'parameters': sum(p.numel() for p in model.parameters()), 'batch': B, 'context': T,
                      'threads': torch.get_num_threads(), 'step_ms': round(1e3 * seconds, 3),
                      'chars_per_second': round(B * T / seconds), 'loss': round(loss, 4)}))


if __name__ == '__main__':
    main()
