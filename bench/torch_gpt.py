#!/usr/bin/python3
"""bench/torch_gpt.py - bench_gpt's measurements in PyTorch.

    torch_gpt.py train [--preset 10m|gpt2|char] [--batch B] [--threads 1,2]
                       [--steps N] [--repeat R]
    torch_gpt.py memory [--preset gpt2] [--batch 4]

The same GPT-2 (pre-LayerNorm blocks, tanh GELU, tied head, no dropout)
written the way nanoGPT's model.py writes it for a PyTorch without fused
attention (Debian 12's 1.13): scores, mask, softmax, times v. AdamW with
fused=False, random tokens, best of R windows after a warm-up step. Each
thread count runs in its own process with OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS set: Debian's torch uses the pthread OpenBLAS.
"""
import argparse
import math
import os
import resource
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {"char": (4, 4, 128, 128, 256), "10m": (6, 6, 384, 256, 256), "gpt2": (12, 12, 768, 1024, 50257)}


class Block(nn.Module):
    def __init__(self, C, H, T):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.H))
        s = s.masked_fill(~self.mask[:T, :T], float("-inf"))
        y = (F.softmax(s, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.attn_proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, H, C, T, V):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H, T) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def make(preset, B):
    L, H, C, T, V = PRESETS[preset]
    torch.manual_seed(0)
    net = GPT(L, H, C, T, V)
    decay = [p for p in net.parameters() if p.dim() >= 2]
    rest = [p for p in net.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(42)
    x = torch.randint(0, V, (B, T), generator=g)
    y = torch.randint(0, V, (B, T), generator=g)
    return net, opt, x, y, T


def step(net, opt, x, y):
    opt.zero_grad(set_to_none=True)
    net(x, y).backward()
    opt.step()


def child(a):
    nt = int(a.threads)
    torch.set_num_threads(nt)
    net, opt, x, y, T = make(a.preset, a.batch)
    if a.mode == "memory":
        step(net, opt, x, y)
        step(net, opt, x, y)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        print("%-6s %5d %5d %16s %16s %12.1f MiB" % (a.preset, a.batch, T, "-", "-", rss), flush=True)
        return
    steps = a.steps or (2 if T >= 1024 else 5)
    step(net, opt, x, y)
    best = 1e30
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        for _ in range(steps):
            step(net, opt, x, y)
        best = min(best, time.perf_counter() - t0)
    print("%-6s %7d %5d %5d %12.0f" % (a.preset, nt, a.batch, T, steps * a.batch * T / best), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", nargs="?", default="train", choices=["train", "memory"])
    ap.add_argument("--preset", default=None, choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.preset = a.preset or ("gpt2" if a.mode == "memory" else "10m")
    a.batch = a.batch or (4 if a.mode == "memory" else 1 if a.preset == "gpt2" else 8)
    if a.child:
        child(a)
        return
    if a.mode == "memory":
        print("%-6s %5s %5s %16s %16s %16s" % ("model", "batch", "T", "allocator peak", "in use after", "max RSS"))
        a.threads = str(os.cpu_count())
    else:
        print("%-6s %7s %5s %5s %12s" % ("model", "threads", "batch", "T", "tokens/s"), flush=True)
    for nt in a.threads.split(","):
        env = dict(os.environ, OMP_NUM_THREADS=nt, OPENBLAS_NUM_THREADS=nt, MKL_NUM_THREADS=nt)
        args = [sys.executable, __file__, a.mode, "--child", "--preset", a.preset, "--threads", nt,
                "--batch", str(a.batch), "--steps", str(a.steps), "--repeat", str(a.repeat)]
        subprocess.run(args, env=env, check=True)


if __name__ == "__main__":
    main()
