#!/usr/bin/env python3
"""lwcc --check-gradients on a loss with kinks.

A two-block inception net whose branches end in ReLU and whose pooling branch
is a 3x3 stride-1 MaxPool over the ReLU outputs of the block before, with
every bias zero: its loss has kinks (relu inputs at 0, tied maxima) where
finite differences agree with no gradient rule. lwcc's gradients are right
there, so the check must pass for every seed, and report the kinks it met
in their own column instead of failing on them. Cases:
  - `lwcc MODEL --check-gradients --check-seed=S` exits 0 for five seeds,
    its table has a kinks column, and its last line says "all within";
  - over the five seeds some element sat on a kink (the model exercises the
    kink path: without it this test would check nothing new).
That a wrong gradient still fails among kinks is a unit test
(GradCheck.AWrongReluRuleFailsAmongKinks and the like): ONNX cannot carry a
wrong gradient rule. Ends with the line "N passed, M failed".
"""
import os
import re
import sys
import tempfile

import numpy as np
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import LWCC  # noqa: E402
sys.path.insert(0, os.path.join(harness.ROOT, "tools", "models"))
from layers import NetBuilder  # noqa: E402

SEEDS = [1, 2, 3, 4, 5]


def relu_conv(b, x, cout, k, pad, name):
    return b.relu(b.conv(x, cout, k, pad=pad, name=name), name=name + ".relu")


def block(b, x, prefix):
    y1 = relu_conv(b, x, 3, 1, 0, f"{prefix}.branch1")
    y2 = relu_conv(b, x, 2, 1, 0, f"{prefix}.branch2.0")
    y2 = relu_conv(b, y2, 3, 3, 1, f"{prefix}.branch2.1")
    y4 = b.maxpool(x, 3, 1, 1, name=f"{prefix}.branch4.0")
    y4 = relu_conv(b, y4, 2, 1, 0, f"{prefix}.branch4.1")
    return b.concat([y1, y2, y4], name=f"{prefix}.concat")


def inception2():
    """Stem conv+ReLU, two inception blocks, global average pool, FC; zero biases."""
    b = NetBuilder("inception2", size=6, channels=2, batch=2, opset=17, seed=3)
    x = relu_conv(b, b.input, 4, 3, 1, "stem")
    x = block(b, x, "block1")
    x = block(b, x, "block2")
    x = b.flatten(b.global_avgpool(x, name="avgpool"), name="flatten")
    x = b.gemm(x, 4, name="fc")
    model = b.model(x)
    for init in model.graph.initializer:
        if init.name.endswith(".bias"):
            init.CopyFrom(numpy_helper.from_array(
                np.zeros_like(numpy_helper.to_array(init)), init.name))
    return model


def main():
    import onnx
    with tempfile.TemporaryDirectory(prefix="lwcc-gradcheck-kinks-") as tmp:
        path = os.path.join(tmp, "inception2.onnx")
        onnx.save(inception2(), path)
        kinks = 0
        for seed in SEEDS:
            r = harness.run([LWCC, path, "--check-gradients", f"--check-seed={seed}"])
            lines = r.stdout.strip().splitlines()
            header = lines[0].split() if lines else []
            rows = [ln.split() for ln in lines[1:] if re.match(r"^\S+\s+\d+\s+\d+\s", ln)]
            seen = sum(int(row[2]) for row in rows)
            kinks += seen
            problem = None
            if r.returncode != 0:
                problem = f"exit {r.returncode}:\n{r.stdout}{r.stderr}"
            elif header[:3] != ["param", "checked", "kinks"]:
                problem = f"no kinks column: {lines[:1]}"
            elif not lines[-1].endswith("all within"):
                problem = f"last line {lines[-1]!r}"
            elif not rows:
                problem = "no param rows"
            harness.record(not problem, f"seed {seed}", problem,
                           f"--check-seed={seed}: {len(rows)} params, {seen} element(s) on a kink")
        harness.record(kinks > 0, "kinks met", "no element sat on a kink for any seed",
                       f"over {len(SEEDS)} seeds: {kinks}")
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
