#!/usr/bin/env python3
"""Fused kernels (passes/Fuse.cpp, codegen/FusedKernels.cpp) compute what the
ops they fuse computed: a trainer built as lwcc builds it by default trains
as the one built with --no-fuse (one runtime call per op): bit for bit
where no fused region holds a reduction; where one does (a bias gradient's
reduce_sum joins the region of the relu_grad and casts it sums), its sums
add in another order (one sum per output element, in double) than the
runtime's reduce_sum, so the losses must agree within a float
reassociation tolerance (relative 1e-4) and every param within 1e-4 of its
largest magnitude instead.

Zoo models at test size (batch 8), 5 steps on synthetic data: the losses
and every param (--dump) must so agree, for
  - CPU trainers of LeNet, AlexNet, ResNet-18 and Inception in float32 and
    bf16 (the casts, bias adds and relus of each 16-bit convolution in one
    kernel), and ResNet-18 in bf16 on 2 devices (data parallel);
  - CUDA trainers on the emulated GPU (the generated CUDA kernels run there)
    of AlexNet and ResNet-18 in float32 and bf16 and Inception in bf16;
  - AlexNet in bf16 with AdamW on both (the multi-tensor Adam update);
the optimizer's multi-tensor updates and the weights' multi-tensor casts
to bf16 are what --no-fuse writes one call per param, too, and so are
ResNet-18's and Inception's batch norms with their ReLUs (batchNormTrainAct
in bf16, batchNormGradAct reading relu_grad's operands: bit for bit the
two calls' values, so the losses agree as before). Each of those
trainers profiles two steps (--profile=2): the kernels it says it launched
a step, on each device, must be what `--emit=plan` counts for the same
build (fused and --no-fuse, CPU and CUDA).
Also: `--emit=plan` counts fewer kernels for the fused step than for the
unfused one; AlexNet's bias gradients are each summed in the fused op of
their relu_grad, the last in one with its gradient's cast (no reduce_sum of
its own); a fused CPU trainer with
reductions trains bit for bit the same on 1 and 2 threads (each sum's
order is fixed); the generated source names each kernel after its layers
with the IR it computes above it.

    python3 test/e2e/fused_kernels.py
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

STEPS = 5


RTOL = 1e-4


def build_and_train(tmp, tag, model, flags, emulated, threads=2):
    exe = os.path.join(tmp, tag, "trainer")
    os.makedirs(os.path.dirname(exe), exist_ok=True)
    target = ["--emulate-gpu"] if emulated else ["--target=cpu"]
    harness.check_output([harness.LWCC, model, *target, *flags, "-o", exe], timeout=900)
    work = os.path.join(tmp, tag, "run")
    os.makedirs(work, exist_ok=True)
    run = [exe, "--data=synthetic", "--seed=5", f"--steps={STEPS}", "--progress=off",
           "--log=log.jsonl", "--dump=dump", "--no-tf32" if emulated else f"--threads={threads}",
           "--profile=2"]
    out = harness.check_output(run, cwd=work, timeout=900).stdout
    launched[tag] = launches_said(out)
    return harness.trainer_outputs(work)


# Per trainer tag: {device: kernels launched a step} from its --profile.
launched = {}


def launches_said(out):
    """The trainer's --profile line `kernels launched a step: N` (one device)
    or `... device 0: N, device 1: M` as {device: N}."""
    m = re.search(r"^kernels launched a step: (.*) \(", out, re.M)
    if not m:
        return None
    if "device" not in m.group(1):
        return {0: int(m.group(1))}
    return {int(d): int(n) for d, n in re.findall(r"device (\d+): (\d+)", m.group(1))}


def planned_launches(model, flags, emulated):
    """--emit=plan's `device D: N kernels a step` lines as {D: N}."""
    target = ["--emulate-gpu"] if emulated else ["--target=cpu"]
    out = harness.check_output([harness.LWCC, model, *target, *flags, "--emit=plan",
                                "-o", "-"]).stdout
    return {int(d): int(n) for d, n in re.findall(r"^device (\d+): (\d+) kernels a step", out,
                                                   re.M)}


def fuses_reductions(model, flags, emulated):
    """Whether a fused op of the trainer lwcc builds holds a reduction."""
    target = ["--emulate-gpu"] if emulated else ["--target=cpu"]
    out = harness.check_output([harness.LWCC, model, *target, *flags, "--emit=scheduled-ir",
                                "-o", "-"]).stdout
    return re.search(r'= fused\([^)]*\) \{body = "[^"]*reduce_sum', out) is not None


def close(fused, plain):
    """Losses and params of two runs within the reassociation tolerance."""
    import numpy as np
    if len(fused[0]) != len(plain[0]) or set(fused[1]) != set(plain[1]):
        return False, []
    losses = all(abs(float(a) - float(b)) <= RTOL * abs(float(b))
                 for a, b in zip(fused[0], plain[0]))
    differ = []
    for k in fused[1]:
        a, b = fused[1][k], plain[1][k]
        if len(a) != len(b) or len(a) % 4:
            differ.append(k)
            continue
        x = np.frombuffer(a, dtype=np.float32).astype(np.float64)
        y = np.frombuffer(b, dtype=np.float32).astype(np.float64)
        scale = float(np.max(np.abs(y))) if y.size else 0.0
        if not np.all(np.isfinite(x)) or float(np.max(np.abs(x - y), initial=0.0)) > RTOL * scale:
            differ.append(k)
    return losses and not differ, differ


def same_as_unfused(tmp, name, flags, emulated=False):
    model = os.path.join(tmp, f"{name}.onnx")
    if not os.path.exists(model):
        harness.generate(name, model, batch=8)
    tag = "-".join([name] + [f.strip("-").replace("=", "") for f in flags] +
                   ["emu" if emulated else "cpu"])
    label = f"{name} {' '.join(flags)} {'--emulate-gpu' if emulated else '--target=cpu'}"

    reduces = fuses_reductions(model, flags, emulated)

    def fn():
        fused = build_and_train(tmp, tag + "-fused", model, flags, emulated)
        plain = build_and_train(tmp, tag + "-plain", model, flags + ["--no-fuse"], emulated)
        enough = len(fused[0]) == STEPS and any(k.startswith("param_") for k in fused[1])
        # What each trainer launched, as the plan counts it.
        counts = (launched[tag + "-fused"], planned_launches(model, flags, emulated),
                  launched[tag + "-plain"],
                  planned_launches(model, flags + ["--no-fuse"], emulated))
        if not counts[1] or counts[0] != counts[1] or counts[2] != counts[3]:
            return False, (f"kernels launched a step (fused, its plan; --no-fuse, its plan): "
                           f"{counts}")
        if reduces:
            ok, differ = close(fused, plain)
        else:
            ok = fused == plain
            differ = [k for k in fused[1] if fused[1].get(k) != plain[1].get(k)]
        return ok and enough, (f"losses {fused[0]} vs {plain[0]}; params that differ: "
                               f"{differ[:5]}; kernels launched a step {counts[0]} (plan "
                               f"{counts[1]}), --no-fuse {counts[2]} (plan {counts[3]})")

    how = f"within relative {RTOL} (fused reductions)" if reduces else "bit for bit"
    harness.check(f"{label}: fused trains as --no-fuse, {how}; launches what the plan counts",
                  fn)


def threads_agree(tmp, name, flags):
    """A fused CPU trainer with reductions: the same bytes on 1 and 2 threads."""
    model = os.path.join(tmp, f"{name}.onnx")
    if not os.path.exists(model):
        harness.generate(name, model, batch=8)
    tag = "-".join([name] + [f.strip("-").replace("=", "") for f in flags] + ["threads"])

    def fn():
        if not fuses_reductions(model, flags, False):
            return False, "no fused reduction"
        one = build_and_train(tmp, tag + "-1", model, flags, False, threads=1)
        two = build_and_train(tmp, tag + "-2", model, flags, False, threads=2)
        return one == two and len(one[0]) == STEPS, f"losses {one[0]} vs {two[0]}"

    harness.check(f"{name} {' '.join(flags)} --target=cpu: fused reductions, the same bytes on "
                  "1 and 2 threads", fn)


def kernel_counts(tmp):
    model = os.path.join(tmp, "alexnet.onnx")
    if not os.path.exists(model):
        harness.generate("alexnet", model, batch=8)

    def count(*flags):
        out = harness.check_output([harness.LWCC, model, "--mixed-precision=bf16", "--emit=plan",
                                    *flags, "-o", "-"]).stdout
        m = re.search(r"device 0: (\d+) kernels a step \((\d+) fused\), (\d+) bytes", out)
        return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None

    def fn():
        fused, plain = count(), count("--no-fuse")
        if not fused or not plain:
            return False, f"no kernel line: {fused} {plain}"
        ok = fused[1] > 0 and plain[1] == 0 and fused[0] < plain[0] and fused[2] < plain[2]
        return ok, f"fused {fused}, unfused {plain} (kernels, fused, bytes)"

    harness.check("alexnet bf16 --emit=plan: fewer kernels and bytes fused", fn)

    def bias_grads():
        out = harness.check_output([harness.LWCC, model, "--mixed-precision=bf16",
                                    "--emit=scheduled-ir", "-o", "-"]).stdout
        summed = re.findall(r"%([\w.]+\.bias\.grad), %\w+ = fused\([^)]*\) \{body = "
                            r'"[^"]*relu_grad[^"]*reduce_sum\(', out)
        # The last layer's sums softmax_xent_grad's value (no region
        # computes it) in one pass with the value's cast to bf16.
        beside = re.findall(r"%([\w.]+\.bias\.grad), %\w+ = fused\([^)]*\) \{body = "
                            r'"%t0 = reduce_sum\(%0\)[^"]*; %t1 = cast\(%0\) : bf16"', out)
        alone = re.findall(r"%([\w.]+\.bias\.grad) = reduce_sum\(", out)
        return len(summed) == 7 and beside == ["classifier.6.bias.grad"] and not alone, \
            f"fused {summed}, beside its cast {beside}, alone {alone}"

    harness.check("alexnet bf16: each bias gradient summed in a fused op (of its relu_grad, "
                  "or beside its value's cast)", bias_grads)

    def source():
        src = os.path.join(tmp, "alexnet-source")
        harness.check_output([harness.LWCC, model, "--mixed-precision=bf16", "--emit=source",
                              "--target=cpu", "-o", src])
        with open(os.path.join(src, "trainer.cc")) as f:
            out = f.read()
        named = re.search(r"// (fused_features_0_\d+): 4 ops of the IR in one pass over "
                          r"bf16\[8,4,15,15\] \(features\.0,features\.1\):\n"
                          r"//   %0: bf16\[8,4,15,15\]\n//   %1: f32\[1,4,1,1\], broadcast\n"
                          r"//   %t0 = cast\(%0\) : f32\n", out)
        called = named and f"RUN_OP({named.group(1)}(" in out
        return bool(named and called), "no kernel named after features.0 with its IR, called"

    harness.check("alexnet bf16 --emit=source: kernels named after their layers, IR above", source)


def main():
    with harness.scratch("lwcc-fused-") as tmp:
        kernel_counts(tmp)
        threads_agree(tmp, "alexnet", ["--mixed-precision=bf16"])
        for name in ("lenet", "alexnet", "resnet18", "inception"):
            for precision in ([], ["--mixed-precision=bf16"]):
                same_as_unfused(tmp, name, precision)
        same_as_unfused(tmp, "resnet18", ["--mixed-precision=bf16", "--gpus=2", "--strategy=data"])
        same_as_unfused(tmp, "alexnet", ["--mixed-precision=bf16", "--optimizer=adamw"])
        same_as_unfused(tmp, "alexnet", ["--mixed-precision=bf16"], emulated=True)
        same_as_unfused(tmp, "alexnet", ["--mixed-precision=bf16", "--optimizer=adamw"],
                        emulated=True)
        same_as_unfused(tmp, "alexnet", [], emulated=True)
        same_as_unfused(tmp, "resnet18", [], emulated=True)
        same_as_unfused(tmp, "resnet18", ["--mixed-precision=bf16"], emulated=True)
        same_as_unfused(tmp, "inception", ["--mixed-precision=bf16"], emulated=True)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
