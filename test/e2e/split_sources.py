#!/usr/bin/env python3
"""A trainer whose step is written as several source files (--ops-per-file)
trains as the one-file trainer of the same step, bit for bit.

LeNet at test size (batch 8). For each configuration, lwcc builds the
trainer twice as a user does (`lwcc -o`: the files compiled in parallel,
then linked), with --ops-per-file=0 (one file) and --ops-per-file=20 (a file
per 20 ops), and both train 6 steps on synthetic data with --eval: the
losses, every param (--dump) and the evaluation logits must be the same
bytes. Configurations: the CPU on one device, --gpus 2 --strategy=data and
--gpus 4 --strategy=model, and the CUDA trainer on the emulated GPU
(--emulate-gpu) with --gpus 2 --strategy=model. Also, for the --gpus 4 one,
the source lwcc writes with --emit=source builds with its own CMakeLists.txt
and with every file on one compiler command line (as the tests build
trainers), and trains the same.

    python3 test/e2e/split_sources.py
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

STEPS = 6


def train(exe, work, emulated):
    os.makedirs(work, exist_ok=True)
    flags = ["--data=synthetic", "--seed=3", f"--steps={STEPS}", "--eval", "--progress=off",
             "--log=log.jsonl", "--dump=dump"]
    flags.append("--no-tf32" if emulated else "--threads=2")
    r = harness.run([exe, *flags], cwd=work)
    return r if r.returncode == 0 else None


def compare(name, want, work, exe, emulated):
    r = train(exe, work, emulated)
    if r is None:
        harness.record(False, f"{name}: train", "")
        return
    got = harness.trainer_outputs(work)
    same = got == want and len(got[0]) == STEPS and any(k.startswith("param_") for k in got[1])
    harness.record(same, f"{name}: the one-file trainer's losses, params and eval logits, "
                   "bit for bit", f"losses {got[0]} vs {want[0]}")


def case(tmp, model, flags, emulated=False, source_builds=False):
    name = "lenet " + " ".join(flags + (["--emulate-gpu"] if emulated else ["--target=cpu"]))
    tag = "-".join(f.strip("-").replace("=", "") for f in flags) or "g1"
    tag += "-emu" if emulated else "-cpu"
    target = ["--emulate-gpu"] if emulated else ["--target=cpu"]
    exes = {}
    for per in (0, 20):
        exe = os.path.join(tmp, f"{tag}-{per}", "trainer")
        os.makedirs(os.path.dirname(exe), exist_ok=True)
        r = harness.run([harness.LWCC, model, *target, *flags, f"--ops-per-file={per}", "-o", exe])
        if r.returncode:
            harness.record(False, f"{name} --ops-per-file={per}: build", r.stderr[-1500:])
            return
        exes[per] = exe
    one = os.path.join(tmp, f"{tag}-run-one")
    if train(exes[0], one, emulated) is None:
        harness.record(False, f"{name}: train the one-file trainer", "")
        return
    want = harness.trainer_outputs(one)
    compare(f"{name} --ops-per-file=20", want, os.path.join(tmp, f"{tag}-run-split"), exes[20],
            emulated)
    if not source_builds:
        return
    src = os.path.join(tmp, f"{tag}-src")
    r = harness.run([harness.LWCC, model, *target, *flags, "--ops-per-file=20", "--emit=source",
                     "-o", src])
    parts = harness.trainer_sources(src, ".cc") if r.returncode == 0 else []
    if len(parts) < 3:
        harness.record(False, f"{name}: --emit=source writes several files", r.stderr[-800:])
        return
    exe, err = harness.build_cpu_trainer(src)
    if not exe:
        harness.record(False, f"{name}: the {len(parts)} files on one command line", err)
    else:
        compare(f"{name}: the {len(parts)} files on one command line", want,
                os.path.join(tmp, f"{tag}-run-cmdline"), exe, emulated)
    build = os.path.join(src, "build")
    r = harness.run(["cmake", "-S", src, "-B", build, "-G", "Ninja"])
    if r.returncode == 0:
        r = harness.run(["cmake", "--build", build])
    if r.returncode:
        harness.record(False, f"{name}: its CMakeLists.txt builds", (r.stdout + r.stderr)[-1500:])
    else:
        compare(f"{name}: built with its CMakeLists.txt", want,
                os.path.join(tmp, f"{tag}-run-cmake"), os.path.join(build, "trainer"), emulated)


def main():
    tmp = tempfile.mkdtemp(prefix="lwcc-split-sources-")
    try:
        model = os.path.join(tmp, "lenet.onnx")
        if harness.generate("lenet", model):
            case(tmp, model, [])
            case(tmp, model, ["--gpus=2", "--strategy=data"])
            case(tmp, model, ["--gpus=4", "--strategy=model"], source_builds=True)
            case(tmp, model, ["--gpus=2", "--strategy=model"], emulated=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.finish("split sources")


if __name__ == "__main__":
    sys.exit(main())
