#!/usr/bin/env python3
"""Activation recomputation (`--recompute=all`) trains as keeping them does,
in less memory.

For resnet18, inception and lenet at test size (batch 8), CPU trainers built
with `--recompute=all` run 5 steps with the same seed on synthetic data, then
evaluate, against the trainer built without it:
  - one device: the losses, every param, the evaluation's logits and the
    export's logits bit-identical (recomputed values are the same bits);
  - resnet18 `--gpus 2 --strategy=data` and lenet `--gpus 4 --strategy=owt`
    against the one-device trainer without recomputation: losses within 1e-5
    relative, params, evaluation and export logits within 1e-4 (as
    multi_device_trainer.py checks every strategy); killed after its step-3
    checkpoint and resumed, resnet18's ends bit-identical at step 6;
  - a 2-stage resnet18 pipeline of 2 micro-batches, 1f1b and zb-h1: bit-identical to the
    same pipeline without recomputation (the schedule runs the copies in each
    micro-batch's backward);
  - `--recompute=3` (only the 3 layers whose values hold the most bytes:
    what the planner's `PLAN+recompute(3)` builds), resnet18 and
    inception on one device and resnet18's 1f1b pipeline: bit-identical to
    the trainer without;
  - the memory plan (`lwcc -v`): resnet18's and inception's arena smaller
    with `--recompute=all` than without, and with `--recompute=3` between;
  - `--recompute=some` is a usage error (exit 2).
Ends with the line "N passed, M failed".

    python3 test/e2e/recompute_trainer.py
"""
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import multi_device_trainer as md  # noqa: E402
from harness import LWCC, run  # noqa: E402

report = harness.record


def arena(onnx_path, flags):
    """Device 0's planned arena in bytes (lwcc -v), or None."""
    r = run([LWCC, onnx_path, *flags, "-v", "--emit=plan", "-o", os.devnull], timeout=900)
    m = re.search(r"memory plan: device 0: arena (\d+) bytes", r.stderr)
    return int(m.group(1)) if m and r.returncode == 0 else None


def same_bits(name, ref, got):
    """Two runs' losses, dumped tensors and exports, bit for bit."""
    lr, lg = md.losses(os.path.join(ref, "log.jsonl")), md.losses(os.path.join(got, "log.jsonl"))
    rd, gd = os.path.join(ref, "dump"), os.path.join(got, "dump")
    files = sorted(os.listdir(rd))
    differ = [f for f in files if not os.path.exists(os.path.join(gd, f)) or
              not np.array_equal(np.fromfile(os.path.join(rd, f), np.uint8),
                                 np.fromfile(os.path.join(gd, f), np.uint8))]
    report(len(lr) == md.STEPS and lg == lr and files and not differ,
           f"{name}: losses and {len(files)} dumped tensors bit-identical",
           f"losses {lg} vs {lr}; differ: {differ[:5]}")


def main():
    with harness.scratch("lwcc-recompute-") as tmp:
        models = ("lenet", "resnet18", "inception")
        for m in models:
            if not harness.generate(m, os.path.join(tmp, f"{m}.onnx"), batch=8):
                return harness.finish()
        pipe = ["--gpus=2", "--strategy=pipeline", "--stages=2", "--microbatches=2"]
        # (name, model, lwcc flags, devices)
        cases = [(f"{m}-g1", m, [], 1) for m in models]
        cases += [(f"{m}-g1-rc", m, ["--recompute=all"], 1) for m in models]
        # Only the 3 layers whose values hold the most bytes (what the
        # planner's --recompute=auto builds as PLAN+recompute(3)).
        cases += [(f"{m}-g1-rc3", m, ["--recompute=3"], 1) for m in ("resnet18", "inception")]
        cases += [("resnet18-g2-data-rc", "resnet18",
                   ["--gpus=2", "--strategy=data", "--recompute=all"], 2),
                  ("lenet-g4-owt-rc", "lenet", ["--gpus=4", "--strategy=owt", "--recompute=all"], 4)]
        for sched in ("1f1b", "zb-h1"):
            cases += [(f"resnet18-pipe-{sched}", "resnet18", pipe + [f"--schedule={sched}"], 2),
                      (f"resnet18-pipe-{sched}-rc", "resnet18",
                       pipe + [f"--schedule={sched}", "--recompute=all"], 2)]
        cases.append(("resnet18-pipe-1f1b-rc3", "resnet18",
                      pipe + ["--schedule=1f1b", "--recompute=3"], 2))
        built, runs = md.build_and_train(md.steady(cases), tmp)
        for m in models:
            if f"{m}-g1" in runs and f"{m}-g1-rc" in runs:
                same_bits(f"{m} --recompute=all on one device vs without", runs[f"{m}-g1"],
                          runs[f"{m}-g1-rc"])
            if f"{m}-g1" in runs and f"{m}-g1-rc3" in runs:
                same_bits(f"{m} --recompute=3 on one device vs without", runs[f"{m}-g1"],
                          runs[f"{m}-g1-rc3"])
        for name, ref in [("resnet18-g2-data-rc", "resnet18-g1"), ("lenet-g4-owt-rc", "lenet-g1")]:
            if name in runs and ref in runs:
                md.compare(f"{name} vs one device without recomputation", runs[ref], runs[name])
        for sched in ("1f1b", "zb-h1"):
            a, b = f"resnet18-pipe-{sched}", f"resnet18-pipe-{sched}-rc"
            if a in runs and b in runs:
                same_bits(f"resnet18 2-stage {sched} pipeline, --recompute=all vs without",
                          runs[a], runs[b])
        a, b = "resnet18-pipe-1f1b", "resnet18-pipe-1f1b-rc3"
        if a in runs and b in runs:
            same_bits("resnet18 2-stage 1f1b pipeline, --recompute=3 vs without", runs[a], runs[b])
        exe = built.get("resnet18-g2-data-rc", (None,))[0]
        if exe:
            md.resumed_bit_identical("resnet18 --gpus 2 --strategy=data --recompute=all: killed "
                                     "after step 3, resumed, bit-identical at step 6", exe,
                                     os.path.join(tmp, "resnet18-g2-data-rc"), 2)

        for m in ("resnet18", "inception"):
            path = os.path.join(tmp, f"{m}.onnx")
            keep, again = arena(path, []), arena(path, ["--recompute=all"])
            report(keep is not None and again is not None and again < keep,
                   f"{m}: the planned arena is smaller with --recompute=all",
                   f"{again} bytes vs {keep}", f"{keep} -> {again} bytes")
            some = arena(path, ["--recompute=3"])
            report(None not in (keep, again, some) and again <= some < keep,
                   f"{m}: --recompute=3's arena is smaller than none's, no smaller than all's",
                   f"none {keep}, 3 {some}, all {again} bytes", f"{some} bytes")
        harness.lwcc_refuses([os.path.join(tmp, "lenet.onnx"), "--recompute=some"],
                             "--recompute=some: exit 2 naming the choices",
                             "--recompute=some is not one of: none, all, auto")
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
