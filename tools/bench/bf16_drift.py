#!/usr/bin/env python3
"""How far a bf16 trainer's losses drift from float32's, beside how far
float32's own drift under a bf16-sized nudge of the initial weights.

For each model (zoo, test size unless --size/--width): three CPU trainers
of the same ONNX file, trained --steps steps with the same seed and data:

  f32      the float32 trainer;
  bf16     `--mixed-precision=bf16` (convolutions and matrix products on
           bf16 operands, activations between layers in bf16);
  nudged   the float32 trainer of the same model whose float initializers
           (not running statistics) are each multiplied by 1 + u,
           u uniform in [-2^-9, 2^-9]: at most one bf16 rounding of each
           weight, and no 16-bit arithmetic at all.

It prints each step's loss relative to f32's for bf16 and nudged, and their
largest and mean relative differences. Where nudged drifts as far as bf16,
what the losses measure is the model's sensitivity to a bf16-sized change,
not a flaw of the bf16 arithmetic (whose exactness the interpreter checks
bit for bit in the test suite).

    python3 tools/bench/bf16_drift.py [--models resnet18,lenet] [--steps 20] [--batch 16]
        [--data synthetic|idx:/usr/share/datasets/fashion-mnist] [--seed 1]
"""
import json
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

from timing import GEN, LWCC, parser, run


def nudge(src, dst, seed):
    """`src` with each float initializer (not running statistics) times
    1 + u, u uniform in [-2^-9, 2^-9]."""
    m = onnx.load(src)
    rng = np.random.default_rng(seed)
    for i, t in enumerate(m.graph.initializer):
        a = numpy_helper.to_array(t)
        if a.dtype != np.float32 or a.size < 2 or "running" in t.name:
            continue
        a = (a * (1 + rng.uniform(-2.0**-9, 2.0**-9, a.shape))).astype(np.float32)
        m.graph.initializer[i].CopyFrom(numpy_helper.from_array(a, t.name))
    onnx.save(m, dst)


def losses(trainer, args, log):
    run([trainer, f"--steps={args.steps}", f"--seed={args.seed}", f"--data={args.data}",
         f"--log={log}", "--progress=off"])
    return [r["loss"] for r in map(json.loads, open(log)) if r.get("type") == "step"]


def main():
    ap = parser("resnet18,lenet", 20)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default="synthetic")
    ap.add_argument("--gen-args", default="", help="extra gen.py arguments (e.g. '--channels 1')")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model = os.path.join(tmp, name + ".onnx")
            run([sys.executable, GEN, name, "--test-size", "--batch", str(args.batch), "-o", model,
                 *args.gen_args.split()])
            nudged = os.path.join(tmp, name + "-nudged.onnx")
            nudge(model, nudged, args.seed)
            got = {}
            for kind, path, flags in (("f32", model, []),
                                      ("bf16", model, ["--mixed-precision=bf16"]),
                                      ("nudged", nudged, [])):
                trainer = os.path.join(tmp, f"{name}-{kind}")
                run([LWCC, path, "--target=cpu", *flags, "-o", trainer])
                got[kind] = losses(trainer, args, trainer + ".jsonl")
            f32 = got["f32"]
            print(f"{name}: {len(f32)} steps, batch {args.batch}, data {args.data}")
            print(f"  {'step':>4} {'f32':>9} {'bf16':>9} {'rel':>7} {'nudged':>9} {'rel':>7}")
            rel = {k: [abs(a - b) / abs(b) for a, b in zip(got[k], f32)] for k in ("bf16", "nudged")}
            for i, ref in enumerate(f32):
                print(f"  {i + 1:>4} {ref:9.5f} {got['bf16'][i]:9.5f} {100 * rel['bf16'][i]:6.2f}% "
                      f"{got['nudged'][i]:9.5f} {100 * rel['nudged'][i]:6.2f}%")
            for k in ("bf16", "nudged"):
                r = rel[k]
                print(f"  {k:>6} vs f32: largest {100 * max(r):.2f}%, mean {100 * sum(r) / len(r):.2f}%, "
                      f"steps within 5%: {sum(x <= 0.05 for x in r)} of {len(r)}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
