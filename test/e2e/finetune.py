#!/usr/bin/env python3
"""Fine-tuning as a user does it: train, export, freeze, train on a new task.

1. LeNet (batch 32) trains 20 steps on Fashion-MNIST and exports
   `pre.onnx` (`--export`).
2. `lwcc pre.onnx --freeze=conv* --label-smoothing=0.1` builds a trainer of
   the exported model with the convolutions frozen; it trains 20 steps on
   another task: the same images with the labels mapped to (label + 5) mod 10
   (an IDX folder written here).
3. The export after fine-tuning keeps every convolution initializer bit for
   bit as `pre.onnx` has it, and every fully connected one has changed.
Also: a --freeze pattern that matches no param is a compile error naming it
(exit 1), --freeze-bn alone and the trainer's --label-smoothing out of
[0, 1] are usage errors (exit 2). Ends with "N passed, M failed".

    python3 test/e2e/finetune.py
"""
import gzip
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import GEN, LWCC  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist"
report = harness.record


def run(cmd, timeout=900):
    return harness.run(cmd, timeout=timeout)


def initializers(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def remapped_idx(dst):
    """An IDX folder of Fashion-MNIST's images with labels (label + 5) mod 10."""
    os.makedirs(dst)
    for split in ("train", "t10k"):
        for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
            stem = f"{split}-{kind}"
            src = next(p for p in (os.path.join(FASHION, stem), os.path.join(FASHION, stem + ".gz"))
                       if os.path.exists(p))
            if kind.startswith("images"):
                os.symlink(src, os.path.join(dst, os.path.basename(src)))
                continue
            data = (gzip.open if src.endswith(".gz") else open)(src, "rb").read()
            labels = (np.frombuffer(data, np.uint8, offset=8) + 5) % 10
            with open(os.path.join(dst, stem), "wb") as f:
                f.write(data[:8] + labels.astype(np.uint8).tobytes())


def main():
    with harness.scratch("lwcc-finetune-") as tmp:
        model = os.path.join(tmp, "lenet.onnx")
        r = run([sys.executable, GEN, "lenet", "--batch", "32", "-o", model])
        if r.returncode:
            report(False, "generate lenet", r.stderr[-800:])
            return harness.finish()
        common = ["--train-examples=640", "--steps=20", "--progress=off", "--seed=3"]
        exe = os.path.join(tmp, "pretrain")
        pre = os.path.join(tmp, "pre.onnx")
        r = run([LWCC, model, "--target=cpu", "-o", exe])
        if not r.returncode:
            r = run([exe, f"--data=idx:{FASHION}", *common, f"--export={pre}"])
        report(r.returncode == 0, "pre-train 20 steps and export", (r.stdout + r.stderr)[-1500:])
        if r.returncode:
            return harness.finish()

        remapped_idx(os.path.join(tmp, "remapped"))
        ft = os.path.join(tmp, "finetune")
        r = run([LWCC, pre, "--target=cpu", "--freeze=conv*", "--label-smoothing=0.1", "-o", ft])
        report(r.returncode == 0, "compile the export with --freeze=conv*", r.stderr[-1500:])
        if r.returncode:
            return harness.finish()
        after = os.path.join(tmp, "finetuned.onnx")
        r = run([ft, f"--data=idx:{os.path.join(tmp, 'remapped')}", *common, "--eval",
                 f"--export={after}"])
        report(r.returncode == 0, "fine-tune 20 steps on the remapped labels",
               (r.stdout + r.stderr)[-1500:])
        if r.returncode:
            return harness.finish()
        a, b = initializers(pre), initializers(after)
        convs = [n for n in a if n.startswith("conv")]
        fcs = [n for n in a if n.startswith("fc")]
        same = [n for n in convs if a[n].tobytes() == b[n].tobytes()]
        report(convs and len(same) == len(convs),
               f"the {len(convs)} frozen convolution initializers are bit-identical",
               f"changed: {sorted(set(convs) - set(same))}")
        moved = [n for n in fcs if not np.array_equal(a[n], b[n])]
        report(fcs and len(moved) == len(fcs), f"the {len(fcs)} head initializers changed",
               f"unchanged: {sorted(set(fcs) - set(moved))}")

        r = run([LWCC, pre, "--target=cpu", "--freeze=conv*,head.*", "--emit=train-ir"])
        harness.exits_with(r, 1, "a --freeze pattern that matches nothing: exit 1 naming it",
                           "'head.*' matches no trainable parameter")
        r = run([LWCC, pre, "--target=cpu", "--freeze-bn", "--emit=train-ir"])
        harness.exits_with(r, 2, "--freeze-bn without --freeze: exit 2",
                           "--freeze-bn needs --freeze")
        r = run([ft, "--data=synthetic", "--steps=1", "--label-smoothing=1.5"])
        harness.exits_with(r, 2, "the trainer's --label-smoothing=1.5: exit 2", "--label-smoothing")
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
