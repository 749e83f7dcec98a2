#!/usr/bin/env python3
"""ZeRO stage 1 (`--shard=zero1`) trains as data parallelism does, with each
device keeping only its share of the optimizer state.

For lenet and resnet18 at test size (batch 8), CPU trainers built with
`--shard=zero1` run 5 steps with the same seed on synthetic data, then
evaluate, against the one-device trainer:
  - resnet18 `--gpus 2 --strategy=data` (SGD with momentum), lenet
    `--gpus 4 --strategy=data` (rows that do not divide by 4: shares of
    3, 3, 2 and 2 rows) and lenet `--gpus 4` with AdamW under the
    planner's layer-wise plan (sharded layers keep their own state, the
    replicated ones share theirs): losses within 1e-5 relative, every param
    and optimizer state within 1e-4 (the trainer gathers the state's shares
    into the logical tensors it dumps), evaluation and export logits within
    1e-4;
  - killed after its step-3 checkpoint and resumed, resnet18's run ends
    bit-identical at step 6;
  - the IR: a replicated param's gradients are reduce-scattered and the
    param all-gathered, its momentum a shard of the rows on each device;
  - the memory plan (`lwcc --emit=plan`'s breakdown): each device's
    optimizer state ("other state") about 1/p of data parallelism's;
  - `--shard=zero2` is a usage error (exit 2), and `--shard=zero1` with
    `--clip-grad-norm` too.
Ends with the line "N passed, M failed".

    python3 test/e2e/zero_trainer.py
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import multi_device_trainer as md  # noqa: E402
from harness import LWCC, run  # noqa: E402

report = harness.record


def state_bytes(onnx_path, flags):
    """Device 0's optimizer state and other state in bytes (the memory
    breakdown of --emit=plan), or None; and what lwcc printed."""
    r = run([LWCC, onnx_path, *flags, "--emit=plan", "-o", "-"], timeout=900)
    m = re.search(r"device 0: params \d+ bytes, other state (\d+)", r.stdout)
    return (int(m.group(1)) if m and r.returncode == 0 else None), r.stdout + r.stderr


def main():
    with harness.scratch("lwcc-zero-") as tmp:
        for m in ("lenet", "resnet18"):
            if not harness.generate(m, os.path.join(tmp, f"{m}.onnx"), batch=8):
                return harness.finish()
        adamw = ["--optimizer=adamw"]
        # (name, model, lwcc flags, devices)
        cases = [("lenet-g1", "lenet", [], 1), ("resnet18-g1", "resnet18", [], 1),
                 ("lenet-g1-adamw", "lenet", adamw, 1),
                 ("resnet18-g2-data-zero1", "resnet18",
                  ["--gpus=2", "--strategy=data", "--shard=zero1"], 2),
                 ("lenet-g4-data-zero1", "lenet", ["--gpus=4", "--strategy=data", "--shard=zero1"],
                  4),
                 ("lenet-g4-layerwise-zero1-adamw", "lenet", ["--gpus=4", "--shard=zero1", *adamw],
                  4)]
        built, runs = md.build_and_train(cases, tmp)
        for name, ref in [("resnet18-g2-data-zero1", "resnet18-g1"),
                          ("lenet-g4-data-zero1", "lenet-g1"),
                          ("lenet-g4-layerwise-zero1-adamw", "lenet-g1-adamw")]:
            if name in runs and ref in runs:
                md.compare(f"{name} vs one device", runs[ref], runs[name])
        exe = built.get("resnet18-g2-data-zero1", (None,))[0]
        if exe:
            md.resumed_bit_identical("resnet18 --gpus 2 --strategy=data --shard=zero1: killed "
                                     "after step 3, resumed, bit-identical at step 6", exe,
                                     os.path.join(tmp, "resnet18-g2-data-zero1"), 2)

        lenet = os.path.join(tmp, "lenet.onnx")
        r = run([LWCC, lenet, "--gpus=2", "--strategy=data", "--shard=zero1",
                 "--emit=parallel-ir", "-o", "-"])
        ir = r.stdout
        report(r.returncode == 0 and "reduce_scatter(%fc1.weight.grad, %fc1.weight.d1.grad)" in ir
               and "all_reduce" not in ir and "all_gather" in ir
               and 'param "opt.momentum.fc1.weight" zeros shard(0: 60 of 120) : f32[60,400] @dev(1)'
               in ir, "lenet --gpus 2 --shard=zero1: gradients reduce-scattered, params "
               "all-gathered, momentum a shard of the rows", (r.stderr or ir)[-800:])

        path = os.path.join(tmp, "resnet18.onnx")
        data, log_data = state_bytes(path, ["--gpus=2", "--strategy=data", "--shard=none"])
        zero, log_zero = state_bytes(path, ["--gpus=2", "--strategy=data", "--shard=zero1"])
        report(data is not None and zero is not None and zero < 0.6 * data,
               "resnet18 --gpus 2: each device's optimizer state about half of data "
               "parallelism's with --shard=zero1", f"{zero} bytes vs {data}: "
               f"{(log_zero if zero is None else log_data)[-600:]}", f"{data} -> {zero} bytes")

        harness.lwcc_refuses([lenet, "--gpus=2", "--shard=zero2"],
                             "--shard=zero2: exit 2 naming the choices",
                             "--shard=zero2 is not one of: none, zero1, auto")
        harness.lwcc_refuses([lenet, "--gpus=2", "--shard=zero1", "--clip-grad-norm=1"],
                             "--shard=zero1 with --clip-grad-norm: exit 2",
                             "--shard=zero1 does not go with --clip-grad-norm")
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
