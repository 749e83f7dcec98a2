#!/usr/bin/env python3
"""The training recipes on several devices train like one device.

LeNet at test size (batch 8) compiled with label smoothing, frozen
convolutions, no decay on biases, a parameter group and gradient clipping
(`--label-smoothing=0.1 --freeze=conv1.* --no-decay=bias,norm
--param-group=fc3.*:lr=0.5,wd=0.002 --clip-grad-norm=0.5`), as a `--gpus 1`
CPU trainer and as
`--gpus 2 --strategy=data|model` and `--gpus 4 --strategy=owt|layerwise`
ones, and the same in bf16 mixed precision (`--gpus 1` and `--gpus 2
--strategy=data`): 5 steps on synthetic data with the same seed, checked
with multi_device_trainer.py's comparison (losses, params, evaluation
logits and the export against one device's; in bf16 the first loss only,
as 16-bit gradients of each device's piece round differently). Every trainer keeps the
frozen params bit for bit as the model has them (the exported
initializers). The gradients' global norm that each trainer logs
(`grad_norm`) is the one device's within 1e-5 on every step (float32; the
first step within 1e-2 in bf16), and above 0.5 (the clipping is active).

--freeze-bn on several devices: ResNet-18 at test size (batch 8) compiled
with `--freeze=conv1.*,bn1.*,layer1.* --freeze-bn` (the stem and the first
stage frozen, their batch norms in eval mode) as a `--gpus 1` CPU trainer
and as `--gpus 2 --strategy=data|model` ones, 5 steps compared as above;
every trainer keeps the frozen params and those batch norms' running
statistics bit for bit as the model has them, while a later stage's
running statistics move. Ends with "N passed, M failed".

    python3 test/e2e/recipes_multi_device.py
"""
import concurrent.futures
import json
import os
import sys

import harness
import multi_device_trainer as md
import onnx
from onnx import numpy_helper

RECIPES = ["--label-smoothing=0.1", "--freeze=conv1.*", "--no-decay=bias,norm",
           "--param-group=fc3.*:lr=0.5,wd=0.002", "--clip-grad-norm=0.5"]
CLIP = 0.5
# 16-bit gradients of each device's piece round differently from one device's.
BF16_NORM_TOL = 1e-2
FROZEN = ("conv1.weight", "conv1.bias")


def initializers(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def grad_norms(work):
    with open(os.path.join(work, "log.jsonl")) as f:
        return [json.loads(line).get("grad_norm") for line in f if '"type":"step"' in line]


FREEZE_BN = ["--freeze=conv1.*,bn1.*,layer1.*", "--freeze-bn"]


def freeze_bn(tmp):
    """--freeze-bn on one device and on several: the same training, the frozen
    batch norms' running statistics untouched on every device."""
    model = os.path.join(tmp, "resnet18.onnx")
    r = harness.run([sys.executable, harness.GEN, "resnet18", "--test-size", "--batch", "8", "-o", model])
    if r.returncode:
        md.report(False, "resnet18: generate", r.stderr[-500:])
        return
    start = initializers(model)
    frozen = [n for n in start if n.startswith(("conv1.", "bn1.", "layer1."))]
    stats = [n for n in frozen if "running_" in n]
    moving = [n for n in start if n.startswith("layer2.") and "running_" in n]
    cases = [(1, "data"), (2, "data"), (2, "model")]

    def make(c):
        flags = list(FREEZE_BN) + ([f"--gpus={c[0]}", f"--strategy={c[1]}"] if c[0] > 1 else [])
        return md.build(model, flags, os.path.join(tmp, f"bn-g{c[0]}-{c[1]}"))

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        built = dict(zip(cases, pool.map(make, cases)))
    runs = {}
    for c in cases:
        name = f"resnet18 --freeze-bn --gpus {c[0]} --strategy={c[1]}"
        exe, err = built[c]
        if not exe:
            md.report(False, f"{name}: build", err)
            continue
        work = os.path.join(tmp, f"bn-g{c[0]}-{c[1]}", "run")
        r = md.train(exe, work, [f"--steps={md.STEPS}", "--eval", "--log=log.jsonl",
                                 "--dump=dump", "--export=model.onnx"] +
                     (["--check-replicas"] if c[0] > 1 else []), c[0])
        if r.returncode:
            md.report(False, f"{name}: train", (r.stdout + r.stderr)[-1500:])
            continue
        runs[c] = work
        trained = initializers(os.path.join(work, "model.onnx"))
        changed = [n for n in frozen if not (trained[n] == start[n]).all()]
        moved = [n for n in moving if not (trained[n] == start[n]).all()]
        md.report(stats and not changed and len(moved) == len(moving),
                  f"{name}: {len(frozen)} frozen params and running statistics bit-identical, "
                  f"{len(moving)} later running statistics moved",
                  f"changed {changed[:5]}, moved {len(moved)} of {len(moving)}")
    ref = runs.get((1, "data"))
    for c, work in runs.items():
        if c[0] > 1 and ref:
            md.compare(f"resnet18 --freeze-bn --gpus {c[0]} --strategy={c[1]}", ref, work)


def main():
    with harness.scratch("lwcc-recipes-") as tmp:
        model = os.path.join(tmp, "lenet.onnx")
        if not harness.generate("lenet", model):
            return harness.finish()
        # (precision, gpus, strategy); gpus 1 is each precision's reference.
        cases = [("f32", 1, "data"), ("f32", 2, "data"), ("f32", 2, "model"),
                 ("f32", 4, "owt"), ("f32", 4, "layerwise"), ("bf16", 1, "data"),
                 ("bf16", 2, "data")]

        def key(c):
            return f"{c[0]}-g{c[1]}-{c[2]}"

        def make(c):
            flags = list(RECIPES)
            if c[0] != "f32":
                flags.append(f"--mixed-precision={c[0]}")
            if c[1] > 1:
                flags += [f"--gpus={c[1]}", f"--strategy={c[2]}"]
            return md.build(model, flags, os.path.join(tmp, key(c)))

        built = harness.build_all(cases, key, make)
        start = initializers(model)
        runs = {}
        for c in cases:
            work = os.path.join(tmp, key(c), "run")
            if not md.train_built(key(c), built[key(c)], work, c[1],
                                  ["--check-replicas"] if c[1] > 1 else []):
                continue
            runs[c] = work
            trained = initializers(os.path.join(work, "model.onnx"))
            same = [n for n in FROZEN if (trained[n] == start[n]).all()]
            moved = [n for n in ("fc3.weight", "fc1.bias") if not (trained[n] == start[n]).all()]
            harness.record(len(same) == len(FROZEN) and len(moved) == 2,
                           f"{key(c)}: frozen params bit-identical after training, the others "
                           "moved",
                           f"unchanged frozen {same}, moved {moved}")
        for c, work in runs.items():
            ref = runs.get((c[0], 1, "data"))
            if c[1] > 1 and ref:
                # The norm every device computes: the sum over the devices' pieces,
                # each replicated param counted once.
                a, b = grad_norms(ref), grad_norms(work)
                n, tol = (md.STEPS, md.LOSS_TOL) if c[0] == "f32" else (1, BF16_NORM_TOL)
                ok = (len(a) == len(b) == md.STEPS and None not in a + b and a[0] > CLIP and
                      all(abs(x - y) <= tol * abs(x) for x, y in zip(a[:n], b[:n])))
                harness.record(ok, f"lenet recipes {c[0]} --gpus {c[1]} --strategy={c[2]}: "
                               f"grad_norm of {n} step(s) within {tol} relative, above {CLIP}",
                               f"{b} vs {a}")
            if c[1] > 1 and ref and c[0] == "f32":
                md.compare(f"lenet recipes {c[0]} --gpus {c[1]} --strategy={c[2]}", ref, work)
            elif c[1] > 1 and ref:
                # 16-bit gradients of each device's piece round differently from
                # one device's, and SGD amplifies it: the first step only.
                a = md.losses(os.path.join(ref, "log.jsonl"))[0]
                b = md.losses(os.path.join(work, "log.jsonl"))[0]
                harness.record(abs(a - b) <= md.LOSS_TOL * abs(a),
                               f"lenet recipes {c[0]} --gpus {c[1]} --strategy={c[2]}: first loss "
                               f"within {md.LOSS_TOL} relative", f"{b} vs {a}")
        freeze_bn(tmp)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
