#!/usr/bin/env python3
"""Fused kernels (passes/Fuse.cpp, codegen/FusedKernels.cpp) compute what the
ops they fuse computed: a trainer built as lwcc builds it by default trains
bit for bit as the one built with --no-fuse (one runtime call per op).

Zoo models at test size (batch 8), 5 steps on synthetic data: the losses
and every param (--dump) must be the same bytes, for
  - CPU trainers of LeNet, AlexNet, ResNet-18 and Inception in float32 and
    bf16 (the casts, bias adds and relus of each 16-bit convolution in one
    kernel), and ResNet-18 in bf16 on 2 devices (data parallel);
  - CUDA trainers on the emulated GPU (the generated CUDA kernels run there)
    of AlexNet in bf16, ResNet-18 in float32 and Inception in bf16;
  - AlexNet in bf16 with AdamW on both (the multi-tensor Adam update);
the optimizer's multi-tensor updates and the weights' multi-tensor casts
to bf16 are what --no-fuse writes one call per param, too.
Also: `--emit=plan` counts fewer kernels for the fused step than for the
unfused one, and the generated source names each kernel after its layers
with the IR it computes above it.

    python3 test/e2e/fused_kernels.py
"""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

STEPS = 5


def outputs(work):
    """The losses of the log and each dumped param, as bytes."""
    with open(os.path.join(work, "log.jsonl")) as f:
        losses = [line.split('"loss":')[1].split(",")[0] for line in f if '"type":"step"' in line]
    dumped = {os.path.basename(p): open(p, "rb").read()
              for p in sorted(glob.glob(os.path.join(work, "dump", "*.bin")))}
    return losses, dumped


def build_and_train(tmp, tag, model, flags, emulated):
    exe = os.path.join(tmp, tag, "trainer")
    os.makedirs(os.path.dirname(exe), exist_ok=True)
    target = ["--emulate-gpu"] if emulated else ["--target=cpu"]
    harness.check_output([harness.LWCC, model, *target, *flags, "-o", exe], timeout=900)
    work = os.path.join(tmp, tag, "run")
    os.makedirs(work, exist_ok=True)
    run = [exe, "--data=synthetic", "--seed=5", f"--steps={STEPS}", "--progress=off",
           "--log=log.jsonl", "--dump=dump", "--no-tf32" if emulated else "--threads=2"]
    harness.check_output(run, cwd=work, timeout=900)
    return outputs(work)


def same_as_unfused(tmp, name, flags, emulated=False):
    model = os.path.join(tmp, f"{name}.onnx")
    if not os.path.exists(model):
        harness.generate(name, model, batch=8)
    tag = "-".join([name] + [f.strip("-").replace("=", "") for f in flags] +
                   ["emu" if emulated else "cpu"])
    label = f"{name} {' '.join(flags)} {'--emulate-gpu' if emulated else '--target=cpu'}"

    def fn():
        fused = build_and_train(tmp, tag + "-fused", model, flags, emulated)
        plain = build_and_train(tmp, tag + "-plain", model, flags + ["--no-fuse"], emulated)
        ok = fused == plain and len(fused[0]) == STEPS and any(
            k.startswith("param_") for k in fused[1])
        differ = [k for k in fused[1] if fused[1].get(k) != plain[1].get(k)]
        return ok, f"losses {fused[0]} vs {plain[0]}; params that differ: {differ[:5]}"

    harness.check(f"{label}: fused trains as --no-fuse, bit for bit", fn)


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
        for name in ("lenet", "alexnet", "resnet18", "inception"):
            for precision in ([], ["--mixed-precision=bf16"]):
                same_as_unfused(tmp, name, precision)
        same_as_unfused(tmp, "resnet18", ["--mixed-precision=bf16", "--gpus=2", "--strategy=data"])
        same_as_unfused(tmp, "alexnet", ["--mixed-precision=bf16", "--optimizer=adamw"])
        same_as_unfused(tmp, "alexnet", ["--mixed-precision=bf16"], emulated=True)
        same_as_unfused(tmp, "alexnet", ["--mixed-precision=bf16", "--optimizer=adamw"],
                        emulated=True)
        same_as_unfused(tmp, "resnet18", [], emulated=True)
        same_as_unfused(tmp, "inception", ["--mixed-precision=bf16"], emulated=True)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
