#!/usr/bin/env python3
"""The default plan computes one device's step: a batch-norm model compiled
for several devices with the default strategy trains as one device does.

ResNet-18 at test size (batch 16, batch norm after every convolution): the
default compile for 4 CPU devices must keep no plan of micro-batches (its
batch norm would normalize each micro-batch by its own statistics), and its
5 losses on synthetic data must equal the one-device trainer's within 1e-5
relative. `--emit=plan` names the pipelines it left out and why; with
--batch-norm-per-microbatch they are candidates again (and at this batch the
planner keeps pipeline/4/4, whose first loss differs from one device's).

    python3 test/e2e/default_plan.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

STEPS = 5


def train(tmp, model, tag, flags):
    exe = os.path.join(tmp, tag, "trainer")
    os.makedirs(os.path.dirname(exe), exist_ok=True)
    harness.check_output([harness.LWCC, model, "--target=cpu", *flags, "-o", exe], timeout=900)
    work = os.path.dirname(exe)
    harness.check_output([exe, "--data=synthetic", "--seed=9", f"--steps={STEPS}",
                          "--progress=off", "--log=log.jsonl", "--threads=2"], cwd=work,
                         timeout=900)
    return harness.log_losses(os.path.join(work, "log.jsonl"))


def main():
    with harness.scratch("lwcc-default-plan-") as tmp:
        model = os.path.join(tmp, "resnet18.onnx")
        if not harness.generate("resnet18", model, batch=16):
            return harness.finish()

        def plan():
            out = harness.check_output([harness.LWCC, model, "--gpus=4", "--target=cpu",
                                        "--emit=plan", "-o", "-"]).stdout
            kept = [line for line in out.splitlines() if line.startswith("layerwise: the search")]
            left = [line for line in out.splitlines() if "left out, their step not one" in line]
            ok = (len(kept) == 1 and "kept pipeline" not in kept[0] and len(left) == 1 and
                  "pipeline/4/4" in left[0] and "batch norm" in left[0])
            allowed = harness.check_output([harness.LWCC, model, "--gpus=4", "--target=cpu",
                                            "--emit=plan", "--batch-norm-per-microbatch", "-o",
                                            "-"]).stdout
            # Allowed, the planner keeps the faster pipeline of 4 micro-batches here.
            ok = ok and "left out, their step not one" not in allowed and any(
                line.startswith("layerwise: the search") and "kept pipeline/4/4" in line
                for line in allowed.splitlines())
            return ok, (kept + left)[:2]

        harness.check("resnet18 --gpus=4 --emit=plan: no micro-batches kept, the pipelines left "
                      "out named; --batch-norm-per-microbatch makes them candidates", plan)

        def same():
            one = train(tmp, model, "one", [])
            four = train(tmp, model, "four", ["--gpus=4"])
            ok = len(one) == STEPS and harness.losses_within(four, one, 1e-5)
            return ok, f"4 devices {four} vs 1 {one}"

        harness.check("resnet18 --gpus=4 (the default plan) CPU trainer: one device's losses "
                      "within 1e-5", same)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
