#!/usr/bin/env python3
"""Sharded data parallelism (`--shard=zero1|zero2|fsdp`) trains as data
parallelism does, with each device keeping only its share of the optimizer
state (zero1), of the gradients too (zero2) and of the params too (fsdp).

For lenet and resnet18 at test size (batch 8), CPU trainers built with
`--shard=...` run 5 steps with the same seed on synthetic data, then
evaluate, against the one-device trainer:
  - resnet18 `--gpus 2 --strategy=data` (SGD with momentum) under zero1,
    zero2 and fsdp, lenet `--gpus 4 --strategy=data` under zero1 and fsdp
    (rows that do not divide by 4: shares of 3, 3, 2 and 2 rows), lenet
    `--gpus 4` with AdamW under the planner's layer-wise plan with zero1
    and fsdp (sharded layers keep their own state, the replicated ones
    share theirs), lenet `--gpus 4 --strategy=data` with AdamW under
    zero2, and fsdp with micro-batches (each gathers the params for itself:
    lenet `--gpus 2 --strategy=data --microbatches=2` and a 2-stage
    pipeline of 2 replicas a stage, 2 micro-batches, against one device;
    resnet18 `--gpus 2 --microbatches=2` against one device with the same
    2 micro-batches, its batch norm normalizing each), and lenet `--gpus 4
    --strategy=data --shard=fsdp --shard-min-bytes=4096` (its 3 largest
    weights sharded, the other params replicated): losses within 1e-5
    relative, every param and optimizer state
    within 1e-4 (the trainer gathers the state's shares into the logical
    tensors it dumps), evaluation and export logits within 1e-4;
  - killed after its step-3 checkpoint and resumed, resnet18's zero1 and
    fsdp runs end bit-identical at step 6; lenet's 4-device fsdp
    checkpoint resumed by the 2-device fsdp trainer ends within 1e-4 of
    one device's 6 steps;
  - each device's memory after training (the trainer's report): its plan's
    part is lwcc's plan for the device and what the CPU measured in use
    is that (fsdp, lenet on 4 devices, all params and those of 4 KB and
    more, resnet18 on 2 devices, and resnet18's with micro-batches); one
    device
    evaluating each epoch (--eval) does so in its training arena, holding
    no arena of the evaluation's own, and takes the same steps as without;
  - the IR: under zero1 a replicated param's gradients are reduce-scattered
    and the param all-gathered, its momentum a shard of the rows on each
    device; under fsdp the param is shares gathered before its layer and
    again before its backward;
  - the memory plan (`lwcc --emit=plan`'s breakdown), resnet18 with AdamW:
    on 2 devices each device's optimizer state about 1/2 of data
    parallelism's with zero1; on 4 devices zero2's gradients below zero1's
    and fsdp's params, state and gradients below 40% of data parallelism's;
  - `--shard=zero3` is a usage error (exit 2), and so is `--shard=zero1`
    with `--clip-grad-norm`.
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


def breakdown(onnx_path, flags):
    """Device 0's memory breakdown (--emit=plan) as a dict of byte counts
    (params, state, gradient_peak), or None; and what lwcc printed."""
    r = run([LWCC, onnx_path, *flags, "--emit=plan", "-o", "-"], timeout=900)
    m = re.search(r"device 0: params (\d+) bytes, other state (\d+) .* at most (\d+) bytes of "
                  r"gradients and gathered params live at once", r.stdout)
    if not m or r.returncode:
        return None, r.stdout + r.stderr
    return dict(params=int(m.group(1)), state=int(m.group(2)),
                gradient_peak=int(m.group(3))), r.stdout


def main():
    with harness.scratch("lwcc-zero-") as tmp:
        for m in ("lenet", "resnet18"):
            if not harness.generate(m, os.path.join(tmp, f"{m}.onnx"), batch=8):
                return harness.finish()
        adamw = ["--optimizer=adamw"]
        data2, data4 = ["--gpus=2", "--strategy=data"], ["--gpus=4", "--strategy=data"]
        # (name, model, lwcc flags, devices)
        mb2 = ["--microbatches=2"]
        # FSDP of the params of 4 KB and more (conv2, fc1, fc2's weights),
        # the others replicated.
        fsdp_big = ["--shard=fsdp", "--shard-min-bytes=4096"]
        cases = [("lenet-g1", "lenet", [], 1), ("resnet18-g1", "resnet18", [], 1),
                 ("lenet-g1-adamw", "lenet", adamw, 1), ("resnet18-g1-mb2", "resnet18", mb2, 1),
                 ("resnet18-g2-data-zero1", "resnet18", [*data2, "--shard=zero1"], 2),
                 ("resnet18-g2-data-zero2", "resnet18", [*data2, "--shard=zero2"], 2),
                 ("resnet18-g2-data-fsdp", "resnet18", [*data2, "--shard=fsdp"], 2),
                 ("lenet-g4-data-zero1", "lenet", [*data4, "--shard=zero1"], 4),
                 ("lenet-g4-data-fsdp", "lenet", [*data4, "--shard=fsdp"], 4),
                 ("lenet-g2-data-fsdp", "lenet", [*data2, "--shard=fsdp"], 2),
                 ("lenet-g4-data-fsdp-big", "lenet", [*data4, *fsdp_big], 4),
                 ("lenet-g4-data-zero2-adamw", "lenet", [*data4, "--shard=zero2", *adamw], 4),
                 ("lenet-g4-layerwise-zero1-adamw", "lenet", ["--gpus=4", "--shard=zero1", *adamw],
                  4),
                 ("lenet-g4-layerwise-fsdp-adamw", "lenet", ["--gpus=4", "--shard=fsdp", *adamw],
                  4),
                 ("lenet-g2-data-fsdp-mb2", "lenet", [*data2, "--shard=fsdp", *mb2], 2),
                 ("lenet-g4-pipeline-fsdp", "lenet",
                  ["--gpus=4", "--strategy=pipeline", "--stages=2", *mb2, "--shard=fsdp"], 4),
                 ("resnet18-g2-data-fsdp-mb2", "resnet18", [*data2, "--shard=fsdp", *mb2], 2)]
        built, runs = md.build_and_train(md.steady(cases), tmp)
        for name, ref in [("resnet18-g2-data-zero1", "resnet18-g1"),
                          ("resnet18-g2-data-zero2", "resnet18-g1"),
                          ("resnet18-g2-data-fsdp", "resnet18-g1"),
                          ("lenet-g4-data-zero1", "lenet-g1"),
                          ("lenet-g4-data-fsdp", "lenet-g1"),
                          ("lenet-g4-data-fsdp-big", "lenet-g1"),
                          ("lenet-g4-data-zero2-adamw", "lenet-g1-adamw"),
                          ("lenet-g4-layerwise-zero1-adamw", "lenet-g1-adamw"),
                          ("lenet-g4-layerwise-fsdp-adamw", "lenet-g1-adamw"),
                          ("lenet-g2-data-fsdp-mb2", "lenet-g1"),
                          ("lenet-g4-pipeline-fsdp", "lenet-g1"),
                          ("resnet18-g2-data-fsdp-mb2", "resnet18-g1-mb2")]:
            if name in runs and ref in runs:
                md.compare(f"{name} vs one device", runs[ref], runs[name])
        for shard in ("zero1", "fsdp"):
            exe = built.get(f"resnet18-g2-data-{shard}", (None,))[0]
            if exe:
                md.resumed_bit_identical(f"resnet18 --gpus 2 --strategy=data --shard={shard}: "
                                         "killed after step 3, resumed, bit-identical at step 6",
                                         exe, os.path.join(tmp, f"resnet18-g2-data-{shard}"), 2)
        resumed_elsewhere(tmp, built)
        for name, model, flags in (("lenet-g4-data-fsdp", "lenet", [*data4, "--shard=fsdp"]),
                                   ("lenet-g4-data-fsdp-big", "lenet", [*data4, *fsdp_big]),
                                   ("resnet18-g2-data-fsdp", "resnet18",
                                    [*data2, "--shard=fsdp"]),
                                   ("resnet18-g2-data-fsdp-mb2", "resnet18",
                                    [*data2, "--shard=fsdp", *mb2])):
            if name in runs:
                memory_measured(name, os.path.join(tmp, f"{model}.onnx"), flags, runs[name])

        for m in ("lenet", "resnet18"):
            if f"{m}-g1" in built:
                evaluates_in_arena(m, built[f"{m}-g1"][0], os.path.join(tmp, f"{m}.onnx"),
                                   os.path.join(tmp, f"{m}-eval"))

        lenet = os.path.join(tmp, "lenet.onnx")
        r = run([LWCC, lenet, *data2, "--shard=zero1", "--emit=parallel-ir", "-o", "-"])
        ir = r.stdout
        report(r.returncode == 0 and "reduce_scatter(%fc1.weight.grad, %fc1.weight.d1.grad)" in ir
               and "all_reduce" not in ir and "all_gather" in ir
               and 'param "opt.momentum.fc1.weight" zeros shard(0: 60 of 120) : f32[60,400] @dev(1)'
               in ir, "lenet --gpus 2 --shard=zero1: gradients reduce-scattered, params "
               "all-gathered, momentum a shard of the rows", (r.stderr or ir)[-800:])
        r = run([LWCC, lenet, *data2, "--shard=fsdp", "--emit=parallel-ir", "-o", "-"])
        ir = r.stdout
        gathers = re.findall(r"= all_gather\(%fc2\.weight\.s0\.d0, %fc2\.weight\.s42\.d1\) "
                             r".* loc\(\"(fc2(?:\.regather)?)\"\)", ir)
        report(r.returncode == 0 and "all_reduce" not in ir
               and 'param "fc2.weight" shard(0: 42 of 84) : f32[42,120] @dev(1)' in ir
               and gathers == ["fc2", "fc2.regather"]
               and re.search(r"%fc2\.weight\.s0\.d0\.grad, %fc2\.weight\.s42\.d1\.grad = "
                             r"reduce_scatter\(.*\) \{devices = \[0, 1\], axis = 0, "
                             r"sizes = \[42, 42\]\}.* @stream\(1\)", ir),
               "lenet --gpus 2 --shard=fsdp: params kept as shares, gathered for the forward and "
               "again for the backward, gradients reduce-scattered on stream 1",
               f"gathers {gathers}: {(r.stderr or ir)[-800:]}")

        path = os.path.join(tmp, "resnet18.onnx")
        mem = {}
        for devices, shard in ((2, "none"), (2, "zero1"), (4, "none"), (4, "zero1"),
                               (4, "zero2"), (4, "fsdp")):
            mem[devices, shard], log = breakdown(path, [f"--gpus={devices}", "--strategy=data",
                                                        f"--shard={shard}", *adamw])
            if mem[devices, shard] is None:
                report(False, f"resnet18 --gpus {devices} --shard={shard}: memory breakdown",
                       log[-800:])
                return harness.finish()
        report(mem[2, "zero1"]["state"] < 0.6 * mem[2, "none"]["state"],
               "resnet18 --gpus 2: each device's optimizer state about half of data "
               "parallelism's with --shard=zero1",
               f"{mem[2, 'zero1']['state']} bytes vs {mem[2, 'none']['state']}",
               f"{mem[2, 'none']['state']} -> {mem[2, 'zero1']['state']} bytes")
        report(mem[4, "zero2"]["gradient_peak"] < mem[4, "zero1"]["gradient_peak"],
               "resnet18 --gpus 4: zero2 holds fewer gradient bytes at once than zero1",
               f"{mem[4, 'zero2']} vs {mem[4, 'zero1']}",
               f"{mem[4, 'zero1']['gradient_peak']} -> {mem[4, 'zero2']['gradient_peak']} bytes")
        model = {k: v["params"] + v["state"] + v["gradient_peak"] for k, v in mem.items()}
        report(model[4, "fsdp"] < 0.4 * model[4, "none"],
               "resnet18 --gpus 4 adamw: fsdp's params, optimizer state and gradients per device "
               "below 40% of data parallelism's", f"{mem[4, 'fsdp']} vs {mem[4, 'none']}",
               f"{model[4, 'none']} -> {model[4, 'fsdp']} bytes "
               f"({100 * model[4, 'fsdp'] / model[4, 'none']:.0f}%)")

        harness.lwcc_refuses([lenet, "--gpus=2", "--shard=zero3"],
                             "--shard=zero3: exit 2 naming the choices",
                             "--shard=zero3 is not one of: none, zero1, zero2, fsdp, auto")
        harness.lwcc_refuses([lenet, "--gpus=2", "--shard=zero1", "--clip-grad-norm=1"],
                             "--shard=zero1 with --clip-grad-norm: exit 2",
                             "--shard=zero1 does not go with --clip-grad-norm")
    return harness.finish()


def memory_measured(name, onnx_path, flags, work):
    """The trainer's report of each device's memory after training: its
    planned part (arena, params and state) is what lwcc's plan predicted for
    that device, and what the CPU runner measured in use is that and the
    trainer's other buffers (none: the CPU's devices read the host's batch),
    each allocation rounded to 256 bytes; no device holds the whole model
    (device 0 holds it, and a batch, only while it evaluates)."""
    records = md.memory_records(work)
    plan = md.planned_memory(onnx_path, ["--batch=8", *flags])
    bad = []
    for r in records:
        (d,) = r["devices"]
        planned = r["arena_bytes"] + r["state_bytes"]
        if plan is None or plan.get(d) != planned:
            bad.append(f"device {d}: planned {planned}, lwcc's plan {plan and plan.get(d)}")
        if not 0 <= r["measured_bytes"] - planned - r["other_bytes"] < 256 * 4:
            bad.append(f"device {d}: measured {r['measured_bytes']}, planned {planned} and other "
                       f"{r['other_bytes']}")
    devices = len(plan or {})
    report(devices and len(records) == devices and not bad,
           f"{name}: each device's memory measured after training is lwcc's plan for it",
           "; ".join(bad) or f"{records}",
           ", ".join(f"device {r['devices'][0]}: {r['measured_bytes']} bytes" for r in records))


def evaluates_in_arena(model, exe, onnx_path, work):
    """One device evaluates (--eval, each epoch) in its training arena: the
    device holds the arena, the params and state and the batch, no arena of
    the evaluation's own (the CPU runner's measure: its allocations, each
    rounded to 256 bytes); the steps take the same losses as without --eval
    (the step's constants written again after each evaluation) and --dump
    writes the last step's outputs, not what the evaluation left there."""
    import json
    import onnx
    g = onnx.load(onnx_path).graph
    # The images and the labels the trainer adds (int64 [N]), each at a
    # 256-byte aligned offset.
    batch = (8 * g.input[0].type.tensor_type.shape.dim[0].dim_value + 255) // 256 * 256
    for i in g.input:
        t = i.type.tensor_type
        size = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.INT64: 8}[t.elem_type]
        for d in t.shape.dim:
            size *= d.dim_value
        batch += (size + 255) // 256 * 256
    logs = {}
    for flags in ([], ["--eval"]):
        sub = os.path.join(work, "eval" if flags else "plain")
        r = md.train(exe, sub, ["--synthetic-batches=3", "--epochs=2", "--log=log.jsonl",
                                "--dump=dump", *flags], 1)
        if r.returncode:
            report(False, f"{model}, one device, --eval: trains", r.stderr[-800:])
            return
        with open(os.path.join(sub, "log.jsonl")) as f:
            logs[bool(flags)] = [json.loads(line) for line in f]
    losses = {k: [x["loss"] for x in v if x["type"] == "step"] for k, v in logs.items()}
    # The last step's outputs (--dump), written after the last evaluation.
    outputs = {}
    for k in ("plain", "eval"):
        d = os.path.join(work, k, "dump")
        outputs[k] = {f: open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d))
                      if f.startswith("output_")}
    evals = [x for x in logs[True] if x["type"] == "eval"]
    (mem,) = [x for x in logs[True] if x["type"] == "memory"] or [None]
    extra = mem and mem["measured_bytes"] - mem["arena_bytes"] - mem["state_bytes"] - batch
    report(len(evals) == 2 and losses[True] == losses[False] and len(losses[True]) == 6
           and outputs["plain"] and outputs["plain"] == outputs["eval"]
           and mem is not None and mem["other_bytes"] == batch and 0 <= extra < 256 * 3,
           f"{model}, one device, --eval each epoch: evaluates in the training arena (measured: "
           "arena, params and state, batch), the same losses and last outputs as without --eval",
           f"evals {evals}; losses {losses}; memory {mem}, batch {batch} bytes",
           mem and f"{mem['measured_bytes']} bytes measured, the arena {mem['arena_bytes']}")


def resumed_elsewhere(tmp, built):
    """lenet's 4-device fsdp run killed after its step-3 checkpoint, resumed
    by the 2-device fsdp trainer to step 6: within 1e-4 of one device's 6
    steps (the checkpoint holds the logical params and state)."""
    name = "lenet --shard=fsdp: a 4-device checkpoint resumed on 2 devices"
    four = built.get("lenet-g4-data-fsdp", (None,))[0]
    two = built.get("lenet-g2-data-fsdp", (None,))[0]
    one = built.get("lenet-g1", (None,))[0]
    if not (four and two and one):
        report(False, name, "a trainer did not build")
        return
    base = os.path.join(tmp, "resume-elsewhere")
    ck = md.kill_after_checkpoint(four, os.path.join(base, "killed"), 3, 4)
    if not ck:
        report(False, name, "no step-3 checkpoint before the run ended")
        return
    ref = md.train(one, os.path.join(base, "one"), ["--steps=6", "--dump=dump", "--log=log.jsonl"],
                   1)
    got = md.train(two, os.path.join(base, "two"),
                   ["--steps=6", f"--resume={ck}", "--dump=dump", "--log=log.jsonl"], 2)
    if ref.returncode or got.returncode:
        report(False, name, (ref.stderr + got.stderr)[-1500:])
        return
    # The resumed run trains steps 4 to 6 only, their losses one device's.
    lr = harness.log_losses(os.path.join(base, "one", "log.jsonl"))
    lg = harness.log_losses(os.path.join(base, "two", "log.jsonl"))
    report(len(lg) == 3 and harness.losses_within(lg, lr[3:], md.LOSS_TOL),
           f"{name}: steps 4 to 6 trained, losses within {md.LOSS_TOL} of one device's",
           f"{lg} vs {lr}")
    params, bad = md.params_off(os.path.join(base, "one", "dump"),
                                os.path.join(base, "two", "dump"))
    report(params and not bad, f"{name}: {len(params)} params at step 6 within {md.PARAM_TOL} of "
           "one device's", "; ".join(bad[:5]))


if __name__ == "__main__":
    sys.exit(main())
