#!/usr/bin/env python3
"""Multi-device CPU and emulated CUDA trainers under ThreadSanitizer; a deleted event is caught.

The CPU backend runs each (device, stream) of a `--gpus N` trainer on a
thread of its own; only events and collectives order them. This script
builds CPU trainers with `-fsanitize=thread` against a runtime built the
same way (PREFIX, made by `tools/dev.sh test`'s ThreadSanitizer suite in
build-tsan/) and checks:

  1. `--gpus 4` trainers (lenet with data and owt, resnet18 with data: batch
     norm's all-reduces, and with --shard=fsdp: params gathered for each
     layer on stream 1 a layer early, gradients reduce-scattered there, and
     the bytes of both reused after their readers; lenet as a 4-stage pipeline of 4 micro-batches,
     1F1B, its transfers on streams 2 and 3) run 3 steps with no
     ThreadSanitizer report, and
     again profiled (--profile-ops, --trace: a recorder per stream thread),
     each device's kernels on two threads of the pool (`--threads=8`: every
     stream thread with a team of its own), as does a one-device lenet
     trainer on two threads, a one-device inception trainer on four
     streams (its branches on streams 2 and 3, --stream-policy=all), and a
     one-device alexnet trainer whose batch flows through its layers as two
     fragments (--fragments=2), the second on the branch streams;
  2. the same lenet trainer's scheduled IR (`--emit=scheduled-ir`) with ONE
     wait deleted (device 0's, that orders the first gradient all-reduce on
     stream 1 after backward on stream 0) is refused at compile time
     (`lwcc --step-ir=FILE`: exit 1, the verifier naming the all-reduce and
     the op it is not ordered after), and, built with the verifier turned
     off (`--no-verify-schedule`, for this test only), is reported as a
     data race at run time (12 steps, up to 3 runs: whether a given step's
     accesses land in ThreadSanitizer's history depends on which thread
     gets there first).

  3. on the emulated CUDA device (runtime/emu, its library built with
     -fsanitize=thread in PREFIX too: every emulated stream is a thread, a
     block's GPU threads are fibers that tell ThreadSanitizer of their
     switches), `--gpus 4` CUDA trainers (lenet, data-parallel; and with
     --streams=2) run 3 steps with no report, and the CUDA trainer of the
     same scheduled IR with one wait deleted (device 0's, that orders its
     optimizer on stream 0 after the last gradient all-reduce on stream 1),
     built unverified, is reported as a data race or trains to other losses
     than the intact trainer (up to 3 runs). Deleting 2.'s wait instead
     deadlocks the emulated run (device 0's all-reduce takes the device's
     NCCL slot before the loss's reduce on stream 0 that the other devices'
     all-reduces wait behind; the emulator reports the hang). The emulated
     streams take one lock between their tasks, which orders for
     ThreadSanitizer any two tasks that did not overlap in time, so it sees
     the race only when the update and the all-reduce really overlap; when
     they do not, the update reads the previous step's sum. Skipped when
     PREFIX has no emulated runtime (no CUDA headers).

oneDNN (Debian's libdnnl, not instrumented) synchronizes its own state
(its primitive cache, made from several stream threads at once) in ways
ThreadSanitizer cannot see, so races whose stacks pass through libdnnl are
suppressed; lwcc's code, the pool's fork and join (cpu/Parallel.cpp tells
ThreadSanitizer of them) and every access of the runtime's kernels stay
checked.

Ends with the line "N passed, M failed".

    python3 test/e2e/tsan_trainer.py --prefix build-tsan
"""
import argparse
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import LWCC, ROOT  # noqa: E402

report = harness.record


def run(cmd, cwd=None, env=None, timeout=900):
    return harness.run(cmd, cwd=cwd, env=env, timeout=timeout)


def build(src, out, prefix):
    flags = "-fsanitize=thread -g1 -O1"  # line tables: reports keep files and lines
    r = run(["cmake", "-S", src, "-B", out, "-G", "Ninja", f"-DLWCC_PREFIX={prefix}",
             f"-DCMAKE_CXX_FLAGS={flags}", "-DCMAKE_BUILD_TYPE=None",
             "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread"])
    if r.returncode == 0:
        r = run(["cmake", "--build", out])
    return r


def train(exe, workdir, steps=3, extra=(), threads=8):
    """Runs a trainer under ThreadSanitizer; threads=None for a CUDA trainer."""
    suppressions = os.path.join(workdir, "tsan-suppressions.txt")
    with open(suppressions, "w") as f:
        f.write("race:libdnnl.so.2\n")  # oneDNN's own state (see above)
    env = dict(os.environ, TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 "
               f"suppressions={suppressions}", LWEMU_HANG_SECONDS="10")
    return run([exe, "--data=synthetic", f"--steps={steps}", "--seed=1", "--data-threads=1",
                *([f"--threads={threads}"] if threads else []), *extra], cwd=workdir, env=env)


def build_emulated(src, prefix):
    """Compiles the CUDA trainer lwcc emitted in src (trainer.cu) for the
    emulated device with -fsanitize=thread, against PREFIX's emulated
    runtime (as lwcc --emulate-gpu builds one; -O0: the kernels are in the
    library)."""
    return harness.build_emulated_trainer(src, ["-fsanitize=thread", "-g1", "-O0"], prefix)


def built(r, lwcc_case, build_step, build_case):
    """Whether lwcc's run `r` succeeded and then build_step() (a build of
    what it emitted) did too; the first that failed is recorded as the case
    lwcc_case (with lwcc's stderr) or build_case (with the build's output)."""
    if r.returncode:
        report(False, lwcc_case, r.stderr[-1000:])
        return False
    r = build_step()
    if r.returncode:
        report(False, build_case, (r.stdout + r.stderr)[-2000:])
        return False
    return True


def losses(workdir):
    """The losses of the steps a trainer logged to workdir/log.jsonl."""
    out = []
    with open(os.path.join(workdir, "log.jsonl")) as f:
        for line in f:
            m = re.search(r'"type":"step".*"loss":([-+0-9.eE]+|nan|inf)', line)
            if m:
                out.append(float(m.group(1)))
    return out


def emulated_cases(tmp, prefix):
    """3. of the docstring: --gpus 4 CUDA trainers on the emulated device."""
    onnx_path = os.path.join(tmp, "lenet.onnx")
    if not os.path.exists(onnx_path) and not harness.generate("lenet", onnx_path):
        return
    parallel = ["--gpus=4", "--strategy=data", "--bucket-bytes=20000"]
    intact = None
    for extra in ([], ["--streams=2"]):
        name = f"emulated GPU: lenet --gpus 4 --strategy=data {' '.join(extra)}".rstrip()
        src = os.path.join(tmp, "emu" + "".join(extra).replace("=", ""))
        r = run([LWCC, onnx_path, "--target=cuda", *parallel, *extra, "--emit=source",
                 "-o", src])
        if not built(r, f"{name}: lwcc", lambda: build_emulated(src, prefix),
                     f"{name}: build with -fsanitize=thread"):
            continue
        work = os.path.join(src, "run")
        os.makedirs(work)
        r = train(os.path.join(src, "trainer"), work, extra=["--log=log.jsonl"], threads=None)
        clean = r.returncode == 0 and "ThreadSanitizer" not in r.stderr
        report(clean, f"{name}: 3 steps, no ThreadSanitizer report",
               f"exit {r.returncode}: {r.stderr[-3000:]}")
        if clean and not extra:
            intact = losses(work)
    # The scheduled IR with device 0's wait before its optimizer deleted.
    name = "emulated GPU: lenet --gpus 4 --strategy=data"
    bad, event = without_wait(onnx_path, "cuda", parallel, delete_update_wait, tmp, "emu-", name)
    if bad is None:
        return
    bsrc = os.path.join(tmp, "emu-deleted-wait")
    r = run([LWCC, onnx_path, "--target=cuda", f"--step-ir={bad}", "--emit=source", "-o", bsrc])
    refused = (r.returncode == 1 and "verify-schedule" in r.stderr and
               "'sgd_update' op" in r.stderr and "nothing orders stream 0" in r.stderr)
    report(refused, f"{name} without wait {event} before the update: lwcc --step-ir refuses it",
           f"exit {r.returncode}: {r.stderr[-1500:]}")
    r = run([LWCC, onnx_path, "--target=cuda", f"--step-ir={bad}", "--no-verify-schedule",
             "--emit=source", "-o", bsrc])
    if not built(r, f"{name} without wait {event}: lwcc --no-verify-schedule",
                 lambda: build_emulated(bsrc, prefix), f"{name} without wait {event}: build"):
        return
    if intact is None:
        report(False, f"{name} without wait {event}: no losses of the intact trainer to compare")
        return
    # Up to 3 runs: whether the update reads the new sum depends on which
    # stream gets there first.
    verdict = ""
    for _ in range(3):
        work = os.path.join(bsrc, "run")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        r = train(os.path.join(bsrc, "trainer"), work, extra=["--log=log.jsonl"], threads=None)
        if r.returncode != 0 and "data race" in r.stderr:
            verdict = "ThreadSanitizer reports a data race"
            break
        got = losses(work) if r.returncode == 0 else []
        if r.returncode == 0 and len(got) == len(intact) and got != intact:
            verdict = f"losses {got} instead of the intact trainer's {intact}"
            break
    report(bool(verdict), f"{name} without wait {event} before the update, built unverified: "
                          f"{verdict or 'not caught'}",
           f"exit {r.returncode}, losses {losses(work) if r.returncode == 0 else '-'} as the "
           f"intact trainer's {intact}; stderr tail: {r.stderr[-1500:]}")


def without_wait(onnx_path, target, parallel, delete, tmp, tag, name):
    """Writes to tmp/TAGdeleted-wait.lwir the scheduled IR of onnx_path (lwcc
    --emit=scheduled-ir with the flags `parallel`, into tmp/TAGstep.lwir) with
    the wait that `delete` (IR -> (IR, event)) takes out; (that file, the
    event), or (None, None) with the case "NAME: --emit=scheduled-ir" failed
    when lwcc fails."""
    ir_path = os.path.join(tmp, tag + "step.lwir")
    bad = os.path.join(tmp, tag + "deleted-wait.lwir")
    r = run([LWCC, onnx_path, f"--target={target}", *parallel, "--emit=scheduled-ir",
             "-o", ir_path])
    if r.returncode:
        report(False, f"{name}: --emit=scheduled-ir", r.stderr[-1000:])
        return None, None
    with open(ir_path) as f:
        broken, event = delete(f.read())
    with open(bad, "w") as f:
        f.write(broken)
    return bad, event


def delete_update_wait(ir):
    """Deletes, from a scheduled IR, device 0's wait on stream 0 right before
    its first optimizer update: (the IR, the event)."""
    lines = ir.split("\n")
    for i, line in enumerate(lines[:-1]):
        m = re.match(r"\s*wait\(\) \{event = (\d+)\} @dev\(0\) @stream\(0\)", line)
        if m and "_update(" in lines[i + 1]:
            return "\n".join(lines[:i] + lines[i + 1:]), int(m.group(1))
    raise RuntimeError("no wait of device 0 stream 0 right before an optimizer update")


def delete_wait(ir):
    """Deletes, from a scheduled IR, device 0's wait on stream 1 among the
    waits right before the first all_reduce: (the IR, the event)."""
    lines = ir.split("\n")
    for i, line in enumerate(lines):
        if "= all_reduce(" not in line:
            continue
        j = i - 1
        while j >= 0 and re.match(r"\s*wait\(\)", lines[j]):
            m = re.match(r"\s*wait\(\) \{event = (\d+)\} @dev\(0\) @stream\(1\)", lines[j])
            if m:
                return "\n".join(lines[:j] + lines[j + 1:]), int(m.group(1))
            j -= 1
        break
    raise RuntimeError("no wait of device 0 stream 1 right before the first all_reduce")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefix", default=os.path.join(ROOT, "build-tsan"),
                    help="folder with include/ and lib/liblwcc_runtime_cpu.a built with TSan")
    ap.add_argument("--emulated-only", action="store_true",
                    help="check only the emulated CUDA device's trainers (3.)")
    args = ap.parse_args()
    prefix = os.path.abspath(args.prefix)
    if not os.path.exists(os.path.join(prefix, "lib", "liblwcc_runtime_cpu.a")):
        report(False, "the ThreadSanitizer runtime is built", f"none under {prefix}")
        return harness.finish()
    tmp = tempfile.mkdtemp(prefix="lwcc-tsan-")
    try:
        # (model, strategy, lwcc flags): the pipeline runs 4 stages of 4
        # micro-batches, its transfers on streams of their own (1F1B);
        # strategy None: one device.
        cases = [("lenet", "data", []), ("lenet", "owt", []), ("resnet18", "data", []),
                 # FSDP: params gathered on stream 1 a layer ahead of the
                 # compute on stream 0, gradients reduce-scattered on stream
                 # 1, and the bytes of each reused once read on the other
                 # stream (events order the reuse).
                 ("resnet18", "data", ["--shard=fsdp"]),
                 ("lenet", "pipeline", ["--stages=4", "--microbatches=4", "--schedule=1f1b"]),
                 ("lenet", None, []),
                 # Four streams: weight gradients on 1, the inception blocks'
                 # branches (and their gradients) on 2 and 3.
                 ("inception", None, ["--streams=4", "--stream-policy=all"]),
                 # Fragments: two halves of the batch through alexnet's
                 # layers, the second on branch streams.
                 ("alexnet", None, ["--streams=4", "--stream-policy=all", "--fragments=2"])]
        for index, (model, strategy, extra) in enumerate([] if args.emulated_only else cases):
            onnx_path = os.path.join(tmp, f"{model}.onnx")
            if not os.path.exists(onnx_path) and not harness.generate(model, onnx_path):
                continue
            name = (f"{model} --gpus 4 --strategy={strategy} {' '.join(extra)}".rstrip()
                    if strategy else f"{model} one device {' '.join(extra)}".rstrip())
            parallel = ["--gpus=4", f"--strategy={strategy}", "--bucket-bytes=20000"]
            threads = 8 if strategy else 2
            src = os.path.join(tmp, f"{model}-{strategy}-{index}-src")
            out = os.path.join(tmp, f"{model}-{strategy}-{index}-build")
            r = run([LWCC, onnx_path, "--target=cpu", *(parallel if strategy else []),
                     *extra, "--emit=source", "-o", src])
            if not built(r, f"{name}: lwcc", lambda: build(src, out, prefix),
                         f"{name}: build with -fsanitize=thread"):
                continue
            r = train(os.path.join(out, "trainer"), tmp, threads=threads)
            clean = r.returncode == 0 and "ThreadSanitizer" not in r.stderr
            report(clean, f"{name}, --threads={threads}: 3 steps, no ThreadSanitizer report",
                   f"exit {r.returncode}: {r.stderr[-3000:]}")
            # Profiled: each stream's thread records its own marks.
            r = train(os.path.join(out, "trainer"), tmp, threads=threads,
                      extra=[f"--profile-ops={out}/profile.json", f"--trace={out}/trace.json",
                             "--profile=2"])
            clean = r.returncode == 0 and "ThreadSanitizer" not in r.stderr
            report(clean, f"{name}, --threads={threads}: 3 profiled steps, no ThreadSanitizer report",
                   f"exit {r.returncode}: {r.stderr[-3000:]}")
            if (model, strategy, extra) != ("lenet", "data", []):
                continue
            # The same step with one event wait deleted from its scheduled IR.
            bad, event = without_wait(onnx_path, "cpu", parallel, delete_wait, tmp, "", name)
            if bad is None:
                continue
            bsrc = os.path.join(tmp, "deleted-event-src")
            # Compile time: lwcc proves the schedule before building anything.
            r = run([LWCC, onnx_path, "--target=cpu", f"--step-ir={bad}", "--emit=source",
                     "-o", bsrc])
            refused = (r.returncode == 1 and "verify-schedule" in r.stderr and
                       "'all_reduce' op" in r.stderr and "nothing orders stream 1" in r.stderr and
                       not os.path.exists(os.path.join(bsrc, "trainer.cc")))
            report(refused, f"{name} without wait {event} before the all-reduce: lwcc --step-ir "
                            "refuses the schedule, naming the unordered ops",
                   f"exit {r.returncode}: {r.stderr[-1500:]}")
            # Run time: built without the proof, ThreadSanitizer sees the race.
            bout = os.path.join(tmp, "deleted-event-build")
            r = run([LWCC, onnx_path, "--target=cpu", f"--step-ir={bad}", "--no-verify-schedule",
                     "--emit=source", "-o", bsrc])
            if not built(r, "deleted wait: lwcc --no-verify-schedule",
                         lambda: build(bsrc, bout, prefix), "deleted event: build"):
                continue
            # ThreadSanitizer sees a race when both accesses land in its
            # history; which thread reaches the all-reduce first varies from
            # step to step, so the broken trainer runs 12 steps, up to 3 times.
            for _ in range(3):
                r = train(os.path.join(bout, "trainer"), tmp, steps=12)
                caught = r.returncode != 0 and "data race" in r.stderr
                if caught:
                    break
            report(caught, f"{name} without wait {event} before the all-reduce, built unverified: "
                           "ThreadSanitizer reports a data race",
                   f"exit {r.returncode}; stderr tail: {r.stderr[-1500:]}")
        if os.path.exists(os.path.join(prefix, "lib", "liblwcc_runtime_emu.a")):
            emulated_cases(tmp, prefix)
        else:
            print(f"no emulated CUDA runtime under {prefix} (no CUDA headers): "
                  "its trainers were not checked")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
