#!/usr/bin/env python3
"""Compares a CUDA trainer's first-step dump with the CPU backend's.

compare.py [--params-only] [--tol=T] CPU_DIR GPU_DIR: every output_<k>.bin
(the loss, then the gradients) and param_<name>.bin must agree within T
(default 1e-3) relative
(max |a - b| / max |b|, floored at 1e-3 of the largest gradient as in
test/e2e/trainer_vs_reference.py). Prints the worst error; exit 1 above it,
or when a file is missing or differs in size. --params-only compares the
params alone (a --gpus 2 step against a single-device one, whose outputs
are numbered differently: the gradients of each device). A bf16 step takes
a larger T: the CPU and cuDNN sum a convolution's products in different
orders, so a value may round to the neighbouring bf16 (2^-8 apart).
"""
import glob
import os
import sys

import numpy as np

tol = 1e-3
args = []
for a in sys.argv[1:]:
    if a.startswith("--tol="):
        try:
            tol = float(a[len("--tol="):])
        except ValueError:
            tol = -1.0
    elif a != "--params-only":
        args.append(a)
params_only = "--params-only" in sys.argv[1:]
if len(args) != 2 or not tol > 0:
    print(__doc__.strip())
    sys.exit(2)
cpu, gpu = args
files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(cpu, "*.bin")))
files = [f for f in files if f.startswith("param_" if params_only else ("output_", "param_"))
         and "opt." not in f]
if not files:
    print(f"no dump in {cpu}")
    sys.exit(1)
grads = [np.fromfile(os.path.join(cpu, f), np.float32) for f in files if f.startswith("output_")]
floor = 1e-3 * max(float(np.max(np.abs(g))) for g in grads[1:]) if len(grads) > 1 else 1e-30
worst, where = 0.0, ""
for f in files:
    a = np.fromfile(os.path.join(cpu, f), np.uint8)
    b_path = os.path.join(gpu, f)
    if not os.path.exists(b_path):
        print(f"missing {f}")
        sys.exit(1)
    if f.endswith(".bin") and ("train.step" in f):
        continue
    a = np.fromfile(os.path.join(cpu, f), np.float32).astype(np.float64)
    b = np.fromfile(b_path, np.float32).astype(np.float64)
    if a.shape != b.shape:
        print(f"{f}: {a.size} vs {b.size} elements")
        sys.exit(1)
    scale = max(float(np.max(np.abs(a))) if a.size else 0.0, floor if f.startswith("output_") else 1e-30)
    err = float(np.max(np.abs(a - b)) / scale) if a.size else 0.0
    if not np.isfinite(err) or err > worst:
        worst, where = err, f
print(f"worst {worst:.2e} ({where})")
sys.exit(0 if worst < tol else 1)
