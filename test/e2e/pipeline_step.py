#!/usr/bin/env python3
"""Pipelines and micro-batches compute the step of one device with the same micro-batches.

On the reference interpreter (float64), for every zoo model at test size on
a seeded batch of 8, five training steps of
  - `--gpus 1 --microbatches=M` (the oracle), M = 2, 4 and 3 (uneven: 3+3+2);
  - `--gpus 2|4 --strategy=pipeline --stages=2|4` (one device per stage) with
    `--schedule=gpipe` and `--schedule=1f1b`, each M, and `--schedule=zb-h1`
    (weight gradients put off) with M = 3;
  - `--gpus 4 --stages=2` (two stages of two replicas that split the
    samples), each schedule and M;
must give the oracle's 5 losses within 1e-5 relative and every param after
5 steps (and every first-step gradient) within 1e-4 of its largest element.
The models have dropout (alexnet, vgg) and batch norm (resnet18, inception),
which normalizes each micro-batch by its own statistics. Also:
  - `--microbatches=1` builds exactly today's training step (the same IR);
  - for models without batch norm, `--microbatches=M` is the plain step up
    to float reassociation (gradient accumulation).
Ends with the line "N passed, M failed".

    python3 test/e2e/pipeline_step.py [--models lenet,resnet18] [--quick]
"""
import argparse
import os
import sys
import tempfile

import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import LWCC, ROOT  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "tools", "models"))
import zoo  # noqa: E402

STEPS = 5
LOSS_TOL = 1e-5
PARAM_TOL = 1e-4
BATCH = 8
MICROBATCHES = [2, 4, 3]
# (gpus, stages): one device per stage, and two stages of two replicas.
LAYOUTS = [(2, 2), (4, 4), (4, 2)]
WITHOUT_BN = {"lenet", "alexnet", "alexnet_owt", "vgg11", "vgg16"}


def run(cmd):
    return harness.check_output(cmd, timeout=1800).stdout


def reference(model_path, data, dump, flags):
    return harness.reference_steps(model_path, data, dump, STEPS,
                                   ["--precision=f64", "--lr=0.05", *flags])


def compare(base, other):
    return harness.step_problems(base, other, LOSS_TOL, PARAM_TOL)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(zoo.REGISTRY),
                    help="comma-separated zoo models (default: all)")
    ap.add_argument("--quick", action="store_true", help="M = 3 and 1f1b only")
    args = ap.parse_args()

    def report(problems, label, detail):
        harness.record(not problems, label, "; ".join(problems[:5]), "" if problems else detail)

    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model = zoo.build(name, test_size=True, batch=BATCH)
            path = os.path.join(tmp, name + ".onnx")
            onnx.save(model, path)
            data = os.path.join(tmp, name + "-data")
            harness.write_batch(model, data, 5)

            # --microbatches=1 is today's step, op for op.
            try:
                plain = run([LWCC, path, "--emit=train-ir"])
                one = run([LWCC, path, "--emit=train-ir", "--microbatches=1"])
                report([] if plain == one else ["the training IR differs"],
                       f"{name} --microbatches=1", "the same training IR as without the flag")
            except RuntimeError as e:
                report([str(e)], f"{name} --microbatches=1", "")
            try:
                whole = reference(path, data, os.path.join(tmp, name + "-m1"), [])
            except RuntimeError as e:
                report([str(e)], f"{name} --gpus 1", "")
                continue
            for m in [3] if args.quick else MICROBATCHES:
                label = f"{name} batch {BATCH} --microbatches={m}"
                try:
                    oracle = reference(path, data, os.path.join(tmp, f"{name}-m{m}"),
                                       [f"--microbatches={m}"])
                except RuntimeError as e:
                    report([str(e)], label, "")
                    continue
                if name in WITHOUT_BN:
                    report(compare(whole, oracle), f"{label} vs the plain step",
                           "gradient accumulation: the same step")
                for gpus, stages in LAYOUTS:
                    scheds = ["gpipe", "1f1b"] + (["zb-h1"] if m == 3 else [])
                    for sched in ["1f1b"] if args.quick else scheds:
                        flags = [f"--gpus={gpus}", "--strategy=pipeline", f"--stages={stages}",
                                 f"--microbatches={m}", f"--schedule={sched}",
                                 "--bucket-bytes=4096"]
                        what = f"{label} --gpus {gpus} --stages {stages} --schedule={sched}"
                        try:
                            other = reference(path, data,
                                              os.path.join(tmp, f"{name}-{gpus}-{stages}-{m}-"
                                                                f"{sched}"), flags)
                            problems = compare(oracle, other)
                        except RuntimeError as e:
                            problems = [str(e)]
                        report(problems, what, f"5 losses and {len(oracle[1])} tensors agree "
                               f"with --gpus 1 (loss {oracle[0][0]:.6f} -> {oracle[0][-1]:.6f})")
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
