#!/usr/bin/env python3
"""Pipeline CPU trainers train like one device with the same micro-batches.

`--strategy=pipeline` CPU trainers (emulated devices, each stream on a
thread of its own: a missing event is a real race) against
`--gpus 1 --microbatches=M` CPU trainers, 5 steps on synthetic data with the
same seed, batch 8; the checks of test/e2e/multi_device_trainer.py: the 5
losses within 1e-5 relative, every param after 5 steps within 1e-4 of its
largest element, the evaluation's logits, and the --export run in
onnxruntime. Every device runs its kernels on two threads, as in
test/e2e/multi_device_trainer.py (the same rounding whatever the cores).
Cases:
  - lenet: --gpus 2 (2 stages), --gpus 4 (4 stages) and --gpus 4 --stages=2
    (two stages of two replicas), each with --schedule=gpipe and 1f1b and
    M = 2, 4 and 3 (uneven), and zb-h1 with M = 3;
  - every other zoo model once, the layouts, schedules and M in turn
    (resnet18 and inception: batch norm per micro-batch; alexnet and vgg:
    dropout masks of the global sample index);
  - a --gpus 4 pipeline trainer killed (SIGKILL) once its step-3 checkpoint
    is on disk and resumed from it ends bit-identical at step 6 to an
    uninterrupted run (params, outputs and export);
  - the same trainer profiled (--profile-ops, --trace): every device's ops
    in the profile, the transfers between stages on their streams in the
    trace, and the profile read back by `lwcc --cost-profile`.
Ends with the line "N passed, M failed".

    python3 test/e2e/pipeline_trainer.py [--models lenet,resnet18] [--quick]
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import multi_device_trainer as md  # noqa: E402

# One case per model besides lenet: (model, gpus, stages, schedule, M).
OTHERS = [
    ("alexnet", 2, 2, "gpipe", 2),
    ("alexnet_owt", 4, 4, "1f1b", 4),
    ("vgg11", 4, 2, "zb-h1", 3),
    ("vgg16", 2, 2, "1f1b", 3),
    ("resnet18", 4, 4, "gpipe", 2),
    ("inception", 4, 2, "zb-h1", 2),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="lenet," + ",".join(c[0] for c in OTHERS))
    ap.add_argument("--quick", action="store_true", help="lenet, 1f1b, M = 3")
    args = ap.parse_args()
    models = ["lenet"] if args.quick else args.models.split(",")
    tmp = tempfile.mkdtemp(prefix="lwcc-pipe-")
    try:
        # (model, gpus, stages, schedule, M); gpus 1 is the reference of M.
        cases = []
        if "lenet" in models:
            for m in [3] if args.quick else [2, 4, 3]:
                cases.append(("lenet", 1, 1, "1f1b", m))
                for gpus, stages in [(2, 2), (4, 4), (4, 2)]:
                    scheds = ["gpipe", "1f1b"] + (["zb-h1"] if m == 3 else [])
                    for sched in ["1f1b"] if args.quick else scheds:
                        cases.append(("lenet", gpus, stages, sched, m))
        for c in OTHERS:
            if c[0] in models:
                cases += [(c[0], 1, 1, "1f1b", c[4]), c]
        for m in sorted({c[0] for c in cases}):
            if not harness.generate(m, os.path.join(tmp, f"{m}.onnx")):
                return harness.finish()

        def key(c):
            return f"{c[0]}-g{c[1]}-s{c[2]}-{c[3]}-m{c[4]}"

        def make(c):
            m, gpus, stages, sched, mb = c
            flags = [f"--microbatches={mb}", f"--schedule={sched}"]
            if gpus > 1:
                flags += [f"--gpus={gpus}", "--strategy=pipeline", f"--stages={stages}"]
            return md.build(os.path.join(tmp, f"{m}.onnx"), flags, os.path.join(tmp, key(c)),
                            via_lwcc=(c == ("lenet", 2, 2, "1f1b", 3)))

        built = harness.build_all(cases, key, make)
        runs = {}
        for c in cases:
            work = os.path.join(tmp, key(c), "run")
            if md.train_built(key(c), built[key(c)], work, c[1],
                              ["--check-replicas"] if c[1] > 1 else []):
                runs[c] = work
        for c, work in runs.items():
            ref = runs.get((c[0], 1, 1, "1f1b", c[4]))
            if c[1] > 1 and ref:
                md.compare(f"{c[0]} --gpus {c[1]} --stages={c[2]} --schedule={c[3]} "
                           f"--microbatches={c[4]}", ref, work)

        # Killed once its step-3 checkpoint is on disk, resumed: bit-identical.
        c = ("lenet", 4, 4, "1f1b", 3) if not args.quick else ("lenet", 4, 2, "1f1b", 3)
        if built.get(key(c), (None,))[0]:
            md.resumed_bit_identical(f"lenet --gpus 4 --stages={c[2]} pipeline: killed after "
                                     "step 3, resumed, bit-identical at step 6",
                                     built[key(c)][0], os.path.join(tmp, key(c)), c[1])
        # Profiled: each device's ops and the transfer streams, read back.
        if built.get(key(c), (None,))[0]:
            exe, base = built[key(c)][0], os.path.join(tmp, key(c))
            work = os.path.join(base, "profiled")
            r = md.train(exe, work, ["--steps=4", "--profile-ops=ops.json", "--trace=trace.json"], 4)
            name = f"lenet --gpus 4 --stages={c[2]} pipeline: --profile-ops and --trace"
            if r.returncode:
                harness.record(False, name, (r.stdout + r.stderr)[-1500:])
            else:
                with open(os.path.join(work, "ops.json")) as f:
                    ops = json.load(f)
                with open(os.path.join(work, "trace.json")) as f:
                    events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
                devices = {e.get("device", 0) for e in ops["ops"]}
                copies = {(e["pid"], e["tid"]) for e in events if e["name"] == "device_copy"}
                ok = devices == set(range(4)) and copies and all(t >= 2 for _, t in copies)
                harness.record(ok, name + f" ({len(ops['ops'])} profiled ops on devices "
                               f"{sorted(devices)}, transfers on (device, stream) "
                               f"{sorted(copies)})", f"devices {devices}, copies {copies}")
                flags = ["--gpus=4", "--strategy=pipeline", f"--stages={c[2]}",
                         f"--microbatches={c[4]}", "--target=cpu", "--device-spec=cpu",
                         f"--cost-profile={os.path.join(work, 'ops.json')}", "--emit=plan"]
                r = md.run([md.LWCC, os.path.join(tmp, "lenet.onnx"), *flags])
                harness.record(r.returncode == 0 and "(chosen)" in r.stdout,
                               "lwcc --cost-profile reads the pipeline trainer's profile",
                               r.stderr[-1000:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
