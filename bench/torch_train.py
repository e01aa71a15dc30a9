#!/usr/bin/python3
"""bench/torch_train.py - the same benchmark as bench_train, in PyTorch.

Same models (mlp, lenet), same Fashion-MNIST data and normalisation,
SGD, batch and thread count; best of R timed windows after a warmup.
Needs Debian's python3-torch (scripts/install-deps.sh --bench); run
with /usr/bin/python3. Each thread count runs in its own process with
OMP_NUM_THREADS and OPENBLAS_NUM_THREADS set: Debian's torch uses the
pthread OpenBLAS, which ignores torch.set_num_threads.
"""
import argparse
import gzip
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn


def load_images(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[4:8], "big")
    return np.frombuffer(data, dtype=np.uint8, offset=16).reshape(n, 1, 28, 28)


def load_labels(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    return np.frombuffer(data, dtype=np.uint8, offset=8).astype(np.int64)


def model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(), nn.Dropout(0.5), nn.Linear(512, 10))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="all", choices=["mlp", "lenet", "all"])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if not a.child:
        print("%-6s %7s %6s %12s" % ("model", "threads", "batch", "samples/s"), flush=True)
        for name in (["mlp", "lenet"] if a.model == "all" else [a.model]):
            for nt in a.threads.split(","):
                env = dict(os.environ, OMP_NUM_THREADS=nt, OPENBLAS_NUM_THREADS=nt, MKL_NUM_THREADS=nt)
                args = [sys.executable, __file__, "--child", "--model", name, "--threads", nt,
                        "--batch", str(a.batch), "--steps", str(a.steps), "--repeat", str(a.repeat),
                        "--data-dir", a.data_dir]
                subprocess.run(args, env=env, check=True)
        return
    images = load_images(a.data_dir + "/train-images-idx3-ubyte.gz")
    x_all = torch.from_numpy(((images / 255.0 - 0.2860) / 0.3530).astype(np.float32))
    y_all = torch.from_numpy(load_labels(a.data_dir + "/train-labels-idx1-ubyte.gz"))
    for name in [a.model]:
        steps = a.steps or (200 if name == "mlp" else 20)
        warmup = 20 if name == "mlp" else 3
        for nt in [int(t) for t in a.threads.split(",")]:
            torch.set_num_threads(nt)
            torch.manual_seed(0)
            net = model(name)
            opt = torch.optim.SGD(net.parameters(), lr=0.01)
            loss_fn = nn.CrossEntropyLoss()
            perm = torch.randperm(x_all.shape[0])
            pos = [0]

            def window(n):
                t0 = time.perf_counter()
                for _ in range(n):
                    if pos[0] + a.batch > x_all.shape[0]:
                        pos[0] = 0
                    idx = perm[pos[0]:pos[0] + a.batch]
                    pos[0] += a.batch
                    x, y = x_all[idx], y_all[idx]
                    opt.zero_grad(set_to_none=True)
                    loss = loss_fn(net(x), y)
                    loss.backward()
                    opt.step()
                return time.perf_counter() - t0

            window(warmup)
            best = min(window(steps) for _ in range(a.repeat))
            print("%-6s %7d %6d %12.0f" % (name, nt, a.batch, steps * a.batch / best), flush=True)


if __name__ == "__main__":
    main()
