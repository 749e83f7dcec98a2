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
    M = 2, 4 and 3 (uneven);
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
import concurrent.futures
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import multi_device_trainer as md  # noqa: E402

# One case per model besides lenet: (model, gpus, stages, schedule, M).
OTHERS = [
    ("alexnet", 2, 2, "gpipe", 2),
    ("alexnet_owt", 4, 4, "1f1b", 4),
    ("vgg11", 4, 2, "1f1b", 3),
    ("vgg16", 2, 2, "1f1b", 3),
    ("resnet18", 4, 4, "gpipe", 2),
    ("inception", 4, 2, "1f1b", 2),
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
                    for sched in ["1f1b"] if args.quick else ["gpipe", "1f1b"]:
                        cases.append(("lenet", gpus, stages, sched, m))
        for c in OTHERS:
            if c[0] in models:
                cases += [(c[0], 1, 1, "1f1b", c[4]), c]
        for m in sorted({c[0] for c in cases}):
            r = md.run([sys.executable, md.GEN, m, "--test-size", "--batch", "8", "-o",
                        os.path.join(tmp, f"{m}.onnx")])
            if r.returncode:
                md.report(False, f"{m}: generate", r.stderr[-500:])
                return 1

        def key(c):
            return f"{c[0]}-g{c[1]}-s{c[2]}-{c[3]}-m{c[4]}"

        def make(c):
            m, gpus, stages, sched, mb = c
            flags = [f"--microbatches={mb}", f"--schedule={sched}"]
            if gpus > 1:
                flags += [f"--gpus={gpus}", "--strategy=pipeline", f"--stages={stages}"]
            return md.build(os.path.join(tmp, f"{m}.onnx"), flags, os.path.join(tmp, key(c)),
                            via_lwcc=(c == ("lenet", 2, 2, "1f1b", 3)))

        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            built = dict(zip(map(key, cases), pool.map(make, cases)))
        runs = {}
        for c in cases:
            exe, err = built[key(c)]
            if not exe:
                md.report(False, f"{key(c)}: build", err)
                continue
            work = os.path.join(tmp, key(c), "run")
            r = md.train(exe, work, [f"--steps={md.STEPS}", "--eval", "--log=log.jsonl",
                                     "--dump=dump", "--export=model.onnx"] +
                         (["--check-replicas"] if c[1] > 1 else []), c[1])
            if r.returncode:
                md.report(False, f"{key(c)}: train", (r.stdout + r.stderr)[-1500:])
                continue
            runs[c] = work
        for c, work in runs.items():
            ref = runs.get((c[0], 1, 1, "1f1b", c[4]))
            if c[1] > 1 and ref:
                md.compare(f"{c[0]} --gpus {c[1]} --stages={c[2]} --schedule={c[3]} "
                           f"--microbatches={c[4]}", ref, work)

        # Killed once its step-3 checkpoint is on disk, resumed: bit-identical.
        c = ("lenet", 4, 4, "1f1b", 3) if not args.quick else ("lenet", 4, 2, "1f1b", 3)
        if built.get(key(c), (None,))[0]:
            exe, base = built[key(c)][0], os.path.join(tmp, key(c))
            full = md.train(exe, os.path.join(base, "full"),
                            ["--steps=6", "--dump=dump", "--export=model.onnx"], c[1])
            first = md.kill_after_checkpoint(exe, os.path.join(base, "killed"), 3, c[1])
            name = f"lenet --gpus 4 --stages={c[2]} pipeline: killed after step 3, resumed, " \
                   "bit-identical at step 6"
            if not first:
                md.report(False, name, "no step-3 checkpoint before the run ended")
            else:
                second = md.train(exe, os.path.join(base, "resumed"),
                                  ["--steps=6", f"--resume={first}", "--dump=dump",
                                   "--export=model.onnx"], c[1])
                if full.returncode or second.returncode:
                    md.report(False, name, (full.stderr + second.stderr)[-1500:])
                else:
                    a, b = os.path.join(base, "full"), os.path.join(base, "resumed")
                    files = sorted(os.listdir(os.path.join(a, "dump")))
                    differ = [f for f in files
                              if open(os.path.join(a, "dump", f), "rb").read() !=
                              open(os.path.join(b, "dump", f), "rb").read()]
                    if open(os.path.join(a, "model.onnx"), "rb").read() != \
                            open(os.path.join(b, "model.onnx"), "rb").read():
                        differ.append("model.onnx")
                    md.report(files and not differ,
                              name + f" ({len(files)} dumped files and the export)",
                              f"differ: {differ[:5]}")
        # Profiled: each device's ops and the transfer streams, read back.
        if built.get(key(c), (None,))[0]:
            exe, base = built[key(c)][0], os.path.join(tmp, key(c))
            work = os.path.join(base, "profiled")
            r = md.train(exe, work, ["--steps=4", "--profile-ops=ops.json", "--trace=trace.json"], 4)
            name = f"lenet --gpus 4 --stages={c[2]} pipeline: --profile-ops and --trace"
            if r.returncode:
                md.report(False, name, (r.stdout + r.stderr)[-1500:])
            else:
                with open(os.path.join(work, "ops.json")) as f:
                    ops = json.load(f)
                with open(os.path.join(work, "trace.json")) as f:
                    events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
                devices = {e.get("device", 0) for e in ops["ops"]}
                copies = {(e["pid"], e["tid"]) for e in events if e["name"] == "device_copy"}
                ok = devices == set(range(4)) and copies and all(t >= 2 for _, t in copies)
                md.report(ok, name + f" ({len(ops['ops'])} profiled ops on devices "
                          f"{sorted(devices)}, transfers on (device, stream) {sorted(copies)})",
                          f"devices {devices}, copies {copies}")
                flags = ["--gpus=4", "--strategy=pipeline", f"--stages={c[2]}",
                         f"--microbatches={c[4]}", "--target=cpu", "--device-spec=cpu",
                         f"--cost-profile={os.path.join(work, 'ops.json')}", "--emit=plan"]
                r = md.run([md.LWCC, os.path.join(tmp, "lenet.onnx"), *flags])
                md.report(r.returncode == 0 and "(chosen)" in r.stdout,
                          "lwcc --cost-profile reads the pipeline trainer's profile",
                          r.stderr[-1000:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{md.passed} passed, {md.failed} failed")
    return 0 if md.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
