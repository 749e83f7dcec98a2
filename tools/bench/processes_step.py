#!/usr/bin/env python3
"""A --gpus N CPU trainer's step as 1, 2, 4 ... processes, beside the simulator.

For each model (zoo, test size) and strategy: builds the `--gpus N` CPU
trainer from `lwcc --emit=source` at --opt (default -O0: the step is glue
around the runtime's kernels, which keep their -O2; at -O2 ResNet-18's
--gpus 4 source alone takes over 15 minutes to compile on 2 loaded cores),
measures its step as R processes
(`mpirun --oversubscribe -np R`, R = 1 without mpirun, for each R dividing
N up to --max-processes): the mean `step_ms` of rank 0's JSONL log after the
first quarter of the steps, the configurations taking turns (1, 2, 4, 1, 2,
4, ...) for --rounds rounds so that the machine's drift touches all alike,
the median round reported. Beside each, the simulator's predicted step for
that placement (`lwcc --devices-per-node=N/R --emit=plan`: the devices of a
process as one node, the links between processes priced by the cpu spec's
inter-node figures, MPI messages between processes of this machine):
  - analytic: the cpu spec's times for every op;
  - measured ops: compute ops at their times in the one-process trainer's
    `--profile-ops` (communication ops left to the links: the profile's
    were measured inside one process).

    python3 tools/bench/processes_step.py [--models resnet18] [--strategies data,owt]
        [--gpus 4] [--steps 60] [--rounds 3] [--batch 8] [--opt -O0]

As root, OpenMPI needs OMPI_ALLOW_RUN_AS_ROOT=1 and
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (set here).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("LWCC_BIN_DIR") or os.path.join(ROOT, "build", "bin")
LWCC = os.path.join(BIN, "lwcc")
GEN = os.path.join(ROOT, "tools", "models", "gen.py")
COMM_OPS = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce_to",
            "device_copy", "shard", "unshard"}


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, **kw)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr[-1500:]}")
    return r


def predicted(model, flags, per_node, profile=None):
    cmd = [LWCC, model, "--target=cpu", "--device-spec=cpu", *flags,
           f"--devices-per-node={per_node}", "--emit=plan"]
    if profile:
        cmd.append(f"--cost-profile={profile}")
    strategy = [f.split("=", 1)[1] for f in flags if f.startswith("--strategy=")][0]
    m = re.search(r"^" + strategy + r"\s+([0-9.]+)\s", run(cmd).stdout, re.M)
    if not m:
        sys.exit("no predicted step in --emit=plan's output")
    return float(m.group(1))


def measured(trainer, processes, steps, log, env):
    """The mean step_ms of rank 0's log after the first quarter of the steps."""
    cmd = [trainer, f"--steps={steps}", "--data=synthetic", "--progress=off", f"--log={log}"]
    if processes > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(processes)] + cmd
    run(cmd, env=env)
    ms = [s["step_ms"] for s in map(json.loads, open(log)) if s.get("type") == "step"]
    return statistics.mean(ms[len(ms) // 4:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet18")
    ap.add_argument("--strategies", default="data")
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--max-processes", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--opt", default="-O0")
    args = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    counts = [r for r in range(1, args.max_processes + 1) if args.gpus % r == 0]
    print(f"{'model':10} {'strategy':10} {'processes':>9} {'measured ms':>12} "
          f"{'predicted ms':>13} {'error':>7} {'analytic ms':>12} {'rounds (ms)'}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model = os.path.join(tmp, name + ".onnx")
            run([sys.executable, GEN, name, "--test-size", "--batch", str(args.batch), "-o",
                 model])
            for strategy in args.strategies.split(","):
                flags = [f"--gpus={args.gpus}", f"--strategy={strategy}"]
                src = os.path.join(tmp, f"{name}-{strategy}")
                run([LWCC, model, "--target=cpu", *flags, "--emit=source", "-o", src])
                prefix = os.path.dirname(BIN)
                with open(os.path.join(prefix, "lib", "liblwcc_runtime_cpu.libs")) as f:
                    libs = f.read().split()
                trainer = os.path.join(src, "trainer")
                run(["c++", "-std=c++20", args.opt, "-I" + os.path.join(prefix, "include"),
                     *sorted(f for f in os.listdir(src) if f.startswith("trainer") and
                             f.endswith(".cc")),
                     os.path.join(prefix, "lib", "liblwcc_runtime_cpu.a"), *libs,
                     "-o", trainer], cwd=src)
                # The one-process trainer's compute ops, for the predictions.
                profile = trainer + "-ops.json"
                run([trainer, f"--steps={args.steps}", "--data=synthetic", "--progress=off",
                     f"--profile-ops={profile}"])
                doc = json.load(open(profile))
                doc["ops"] = [e for e in doc["ops"] if e["op"] not in COMM_OPS]
                json.dump(doc, open(profile, "w"))
                times = {r: [] for r in counts}
                for k in range(args.rounds):
                    for r in counts:
                        times[r].append(measured(trainer, r, args.steps,
                                                 f"{trainer}-{r}-{k}.jsonl", env))
                for r in counts:
                    per_node = args.gpus // r
                    got = statistics.median(times[r])
                    pred = predicted(model, flags, per_node, profile)
                    analytic = predicted(model, flags, per_node)
                    print(f"{name:10} {strategy:10} {r:9} {got:12.3f} {pred:13.3f} "
                          f"{100 * (pred - got) / got:+6.1f}% {analytic:12.3f} "
                          f"{' '.join(f'{t:.2f}' for t in times[r])}")
                    sys.stdout.flush()


if __name__ == "__main__":
    main()
