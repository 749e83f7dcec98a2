#!/usr/bin/env python3
"""Throughput of the trainer's input pipeline, on a model that does almost nothing.

Builds a tiny classifier (GlobalAveragePool + one Gemm, input 128x3x224x224,
10 classes), compiles it with `lwcc --target=cpu`, and prints img/s of:
  - training with --data=synthetic and with --data=idx:DIR (Fashion-MNIST,
    28x28 gray resized to 224x224, replicated to 3 channels), a fixed number
    of steps each;
  - the input pipeline alone (--data-only: batches prepared, nothing trained)
    for both sources.
The step itself costs one pass over the batch, so the numbers measure how
fast batches reach the step.

  python3 tools/bench/input_pipeline.py [--lwcc build/bin/lwcc] [--steps 60]
      [--data /usr/share/datasets/fashion-mnist] [--batch 128] [--size 224]
      [--data-only | --no-data-only] [-- EXTRA TRAINER FLAGS]

--lwcc may name another build's lwcc (an older one, to compare); a trainer
without --data-only gets its loader rows skipped.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import onnx
from onnx import TensorProto, helper, numpy_helper
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tiny_model(path, batch, size, classes):
    """image [batch,3,size,size] -> GlobalAveragePool -> Flatten -> Gemm -> logits."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((classes, 3)) * 0.1).astype(np.float32), "fc.weight")
    b = numpy_helper.from_array(np.zeros(classes, np.float32), "fc.bias")
    nodes = [
        helper.make_node("GlobalAveragePool", ["image"], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny_gap_gemm",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])],
        initializer=[w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)


def run(cmd):
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout, time.time() - t


def rate(out, pattern):
    m = re.search(pattern, out)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lwcc", default=os.path.join(ROOT, "build", "bin", "lwcc"))
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--data-only", action=argparse.BooleanOptionalAction, default=True,
                    help="also time the loader alone (trainers with --data-only)")
    ap.add_argument("extra", nargs="*", help="flags passed to every trainer run")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="lwcc-bench-input-") as tmp:
        model = os.path.join(tmp, "tiny.onnx")
        exe = os.path.join(tmp, "tiny-trainer")
        tiny_model(model, args.batch, args.size, 10)
        run([args.lwcc, model, "--target=cpu", "-o", exe])
        common = [f"--steps={args.steps}", "--progress=off", *args.extra]
        rows = []
        for name, data in (("synthetic", "--data=synthetic"), ("idx", f"--data=idx:{args.data}")):
            out, wall = run([exe, data, *common])
            rows.append((f"train, {name}", rate(out, r"\(([0-9.]+) img/s\)"), wall))
            if args.data_only:
                out, wall = run([exe, data, "--data-only", *common])
                drawn = rate(out, r"drew [0-9]+ batches up front in [0-9.]+ s \(([0-9.]+) img/s\)")
                if drawn is not None:  # a pool of batches: the drawing is the work
                    rows.append((f"loader alone, {name} (draw)", drawn, wall))
                else:
                    rows.append((f"loader alone, {name}", rate(out, r"batches in [0-9.]+ s \(([0-9.]+) img/s\)"), wall))
        print(f"tiny model (GlobalAveragePool + Gemm), input {args.batch}x3x{args.size}x{args.size}, "
              f"{args.steps} steps, CPU target, {os.cpu_count()} cores; lwcc: {args.lwcc}")
        print(f"  {'run':<26} {'img/s':>10} {'wall s':>8}")
        for name, r, wall in rows:
            print(f"  {name:<26} {r if r is not None else float('nan'):>10.1f} {wall:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
