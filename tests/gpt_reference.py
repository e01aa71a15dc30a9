#!/usr/bin/env python3
"""tests/gpt_reference.py - an independent GPT-2 in PyTorch (float64) that
loads the weights of an mpiflow checkpoint with h5py and checks the loss
and every parameter gradient that tests/gpt_grads wrote.
    gpt_reference.py CKPT.h5 GRADS.txt
Exit 0 when all agree within 1e-5 (relative to each tensor's largest
gradient), 1 otherwise."""
import math
import sys

import h5py
import torch
import torch.nn.functional as F


def main():
    ckpt, grads_path = sys.argv[1], sys.argv[2]
    with h5py.File(ckpt, "r") as f:
        attrs = f["model"].attrs
        L, H, C = int(attrs["n_layer"]), int(attrs["n_head"]), int(attrs["n_embd"])
        sd = {k: torch.tensor(f["model"][k][...], dtype=torch.float64, requires_grad=True) for k in f["model"].keys()}
    lines = open(grads_path).read().split("\n")
    tok = lines[0].split()
    B, T = int(tok[1]), int(tok[2])
    vals = [int(v) for v in tok[3:]]
    x = torch.tensor(vals[: B * T]).view(B, T)
    y = torch.tensor(vals[B * T :]).view(B, T)
    want_loss = float(lines[1].split()[1])

    def p(name):
        return sd["transformer." + name]

    def ln(h, name):
        return F.layer_norm(h, (C,), p(name + ".weight"), p(name + ".bias"), 1e-5)

    def lin(h, name, bias=True):   # c_attn is stored [3, C, C]: nanoGPT's [3C, C] with q, k, v leading
        w = p(name + ".weight")
        return F.linear(h, w.reshape(-1, w.shape[-1]), p(name + ".bias").reshape(-1) if bias else None)

    h = p("wte.weight")[x] + p("wpe.weight")[torch.arange(T)]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(L):
        b = "h.%d." % i
        a = lin(ln(h, b + "ln_1"), b + "attn.c_attn")
        q, k, v = a.split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        s = s.masked_fill(~mask, float("-inf"))
        o = (F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        h = h + lin(o, b + "attn.c_proj")
        m = F.gelu(lin(ln(h, b + "ln_2"), b + "mlp.c_fc"), approximate="tanh")
        h = h + lin(m, b + "mlp.c_proj")
    h = ln(h, "ln_f")
    logits = h @ p("wte.weight").t()   # the tied head
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    loss.backward()
    bad = 0
    if abs(loss.item() - want_loss) > 1e-5 * max(1.0, abs(loss.item())):
        print("loss: mpiflow %.9g, PyTorch %.9g" % (want_loss, loss.item()))
        bad = 1
    n = 0
    for line in lines[2:]:
        if not line.startswith("grad "):
            continue
        parts = line.split()
        name, count = parts[1], int(parts[2])
        got = torch.tensor([float(v) for v in parts[3 : 3 + count]], dtype=torch.float64)
        ref = sd[name].grad.reshape(-1)
        scale = max(ref.abs().max().item(), 1e-12)
        err = (got - ref).abs().max().item() / scale
        if err > 1e-5:
            print("%s: gradients differ by %.3g of the largest (%.3g)" % (name, err, scale))
            bad = 1
        n += 1
    if n != len(sd):
        print("%d gradients for %d parameters" % (n, len(sd)))
        bad = 1
    print("loss %.9g (PyTorch %.9g); %d gradients compared%s" % (want_loss, loss.item(), n, "" if bad else ", all within 1e-5"))
    return bad


if __name__ == "__main__":
    sys.exit(main())
