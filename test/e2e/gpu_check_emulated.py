#!/usr/bin/env python3
"""tools/gpu/prepare.sh and check.sh's build, correct and multi phases on the emulated CUDA device.

The GPU checks (tools/gpu/check.sh) run on a GPU machine only now and then;
this runs the same scripts end to end here, on the emulated device
(runtime/emu), so that their first run on a GPU meets scripts that work:

  1. `LWCC_EMULATE_GPU=1 LWCC_GPU_MODELS=... bash tools/gpu/prepare.sh`
     into a temporary folder (LWCC_GPU_OUT): the CUDA sources of the models
     (and their --streams=2, --recompute=all and bf16 variants where prepare.sh makes them,
     and data-parallel LeNet on --gpus 2) and the CPU backend's reference
     dumps;
  2. `LWCC_EMULATE_GPU=1 bash FOLDER/check.sh build correct multi`: every
     trainer built with the host compiler against the emulated runtime,
     then each model's first step (cuDNN graph and legacy APIs, TF32 off),
     three steps with the CUDA graph replayed, and the bf16 steps, against
     the CPU backend's dumps (check.sh's compare.py), and the --gpus 2
     trainer's step on one emulated GPU (--devices=0,0) and on two
     (--devices=0,1: NCCL) against the CPU backend's --gpus 2 step;
  3. its table: named after the emulated GPU, every trainer built, and
     every correctness and multi-device row PASS (each row is one result
     here), with as many rows as the models call for, and the --gpus 2
     trainer's memory rows: the libraries 42 MiB a stream, as the GPU
     device specs count them.

Ends with the line "N passed, M failed".

    python3 test/e2e/gpu_check_emulated.py [--models lenet,resnet18] [--keep DIR]
"""
import argparse
import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import BIN, ROOT  # noqa: E402

# As in prepare.sh: the models with a --streams=2 variant, a --recompute=all
# one, and the bf16 ones.
STREAMS2 = {"lenet", "resnet18"}
RECOMPUTE = {"resnet18", "inception"}
BF16 = {"lenet", "alexnet", "resnet18"}

report = harness.record


def expected_rows(models):
    """The correctness and multi-device rows check.sh prints for these
    models (prepare.sh's variants of each; --gpus 2 data-parallel LeNet)."""
    rows = []
    if "lenet" in models:
        rows += [f"multi-device lenet-g2-data --devices={d} " for d in ("0,0", "0,1")]
    for m in models:
        rows.append(f"correctness {m} (cuDNN graph API")
        if m in STREAMS2:
            rows.append(f"correctness {m}-s2 (cuDNN graph API")
        if m in RECOMPUTE:
            rows.append(f"correctness {m}-rc (cuDNN graph API")
        rows.append(f"correctness {m}/legacy (cuDNN legacy API")
        rows.append(f"correctness {m}, 3 steps, CUDA graph replayed")
        if m in BF16:
            rows.append(f"correctness {m} bf16, 1 step(s)")
            rows.append(f"correctness {m} bf16, 3 step(s)")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="lenet,resnet18",
                    help="comma-separated zoo models to prepare and check")
    ap.add_argument("--keep", help="prepare into this folder and keep it (default: a temporary "
                    "one)")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m]
    if not os.path.exists(os.path.join(os.path.dirname(BIN), "lib", "liblwcc_runtime_emu.a")):
        report(False, "the emulated CUDA runtime is built",
               f"none beside {BIN} (no CUDA headers when it was built)")
        return harness.finish()
    tmp = os.path.abspath(args.keep) if args.keep else tempfile.mkdtemp(prefix="lwcc-gpu-emu-")
    os.makedirs(tmp, exist_ok=True)
    gpu, out, scratch = (os.path.join(tmp, d) for d in ("gpu", "out", "scratch"))
    os.makedirs(scratch, exist_ok=True)
    env = dict(os.environ, LWCC_EMULATE_GPU="1", LWCC_GPU_MODELS=" ".join(models),
               LWCC_GPU_MULTI="lenet:data" if "lenet" in models else "",
               LWCC_GPU_BF16=" ".join(m for m in models if m in BF16), LWCC_GPU_OUT=gpu,
               LWCC_BIN_DIR=BIN, OUT=out, LWCC_GPU_SCRATCH=scratch, LWCC_GPU_JOBS="2")
    try:
        t0 = time.time()
        r = harness.run(["bash", os.path.join(ROOT, "tools", "gpu", "prepare.sh")], env=env,
                        timeout=900)
        report(r.returncode == 0, f"prepare.sh for the emulated device ({', '.join(models)}) in "
                                  f"{time.time() - t0:.0f} s", (r.stdout + r.stderr)[-2000:])
        if r.returncode:
            return harness.finish()
        t0 = time.time()
        r = harness.run(["bash", os.path.join(gpu, "check.sh"), "build", "correct", "multi"],
                        env=env, timeout=900)
        print(f"check.sh build correct multi: exit {r.returncode} in {time.time() - t0:.0f} s")
        table = r.stdout.split("==== lwcc GPU checks on ", 1)
        if len(table) != 2:
            report(False, "check.sh prints its table", (r.stdout + r.stderr)[-2000:])
            return harness.finish()
        head, _, body = table[1].partition("\n")
        head = head.removesuffix(" ====")
        rows = [line for line in body.splitlines() if line.strip()]
        report(head.startswith("emulated GPU"), f"the table names the emulated GPU: {head}")
        built = [x for x in rows if x.startswith("build: ")]
        m = re.match(r"build: (\d+) of (\d+) trainers built", built[0]) if built else None
        report(bool(m) and m.group(1) == m.group(2) and int(m.group(1)) > 0,
               built[0] if built else "no build row", "\n".join(rows))
        for want in expected_rows(models):
            got = [x for x in rows if x.startswith(want)]
            if not got:
                report(False, f"{want}...: no such row", "\n".join(rows))
                continue
            report(len(got) == 1 and ": PASS " in got[0], got[0])
        extra = [x for x in rows if x.startswith(("correctness", "multi-device lenet")) and
                 not any(x.startswith(w) for w in expected_rows(models))]
        for x in extra:
            report(": PASS " in x, x)
        # The memory rows of the --gpus 2 trainer: on each GPU the plan, the
        # batch and the libraries' 42 MiB for each of its logical devices'
        # 2 streams (a cuBLAS workspace and a handle pair per stream; the
        # runtime sizes cuBLAS's default pool to nothing) and under 8 MiB of
        # the convolutions' workspaces.
        if "lenet" in models:
            for devices, per_gpu in (("0,0", 2), ("0,1", 1)):
                title = f"memory lenet-g2-data --devices={devices}: "
                got = [x for x in rows if x.startswith(title)]
                libs = [float(v) for v in re.findall(r"libraries (-?[\d.]+) MiB", got[0])] \
                    if len(got) == 1 else []
                want = 2 * per_gpu * 42
                report(len(libs) == 2 // per_gpu and all(want <= v < want + 8 for v in libs),
                       f"{title.strip()} each GPU's libraries {want} MiB and under 8 more",
                       "\n".join(got) or "no such row")
        if harness.results.failed and args.keep:
            print(f"check.sh's logs: {out}")
        elif harness.results.failed:
            print("(--keep DIR keeps check.sh's logs in DIR/out)")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
