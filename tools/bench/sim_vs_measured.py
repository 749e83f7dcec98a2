#!/usr/bin/env python3
"""The simulator's predicted step time against a CPU trainer's measured one.

For each model (zoo, test size) and each --streams setting: builds the CPU
trainer, runs it with `--profile-ops` to measure per-op times, feeds them
back with `lwcc --cost-profile=... --device-spec=cpu --emit=plan`, and
compares the predicted step with the trainer's measured step time (the
mean and median `step_ms` of an unprofiled run's JSONL log, after the
first quarter of the steps). Also
prints the prediction without a profile (the cpu spec's analytic times).

    python3 tools/bench/sim_vs_measured.py [--models alexnet,resnet18] [--steps 40] [--rounds 3]
    python3 tools/bench/sim_vs_measured.py --gpus 2 [--strategies data,model,owt,layerwise]

With --gpus N > 1: the profile comes from the one-device trainer (a
multi-device trainer does not time its ops yet), and each strategy's
`--gpus N` CPU trainer's measured step is set beside the simulator's
prediction for that strategy with that profile (ops priced by their
measured time scaled to the shard).
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


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr[-1500:]}")
    return r


def predicted(model, streams, profile=None, extra=()):
    cmd = [LWCC, model, "--target=cpu", "--device-spec=cpu", f"--streams={streams}",
           "--emit=plan", *extra]
    if profile:
        cmd.append(f"--cost-profile={profile}")
    out = run(cmd).stdout
    strategy = [a.split("=", 1)[1] for a in extra if a.startswith("--strategy=")]
    m = (re.search(r"^" + strategy[0] + r"\s+([0-9.]+)\s", out, re.M) if strategy else
         re.search(r"predicted step on \S+: ([0-9.]+) ms", out))
    if not m:
        sys.exit("no predicted step in --emit=plan's output")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="alexnet,resnet18")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--strategies", default="data,model,owt,layerwise")
    args = ap.parse_args()
    if args.gpus > 1:
        return multi(args)
    print(f"{'model':10} {'streams':>7} {'same run ms':>12} {'error':>7} {'other run ms':>13} "
          f"{'error':>7} {'predicted ms':>13} {'analytic ms':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model = os.path.join(tmp, name + ".onnx")
            run([sys.executable, GEN, name, "--test-size", "-o", model])
            for streams in (1, 2):
                trainer = os.path.join(tmp, f"{name}-s{streams}")
                run([LWCC, model, "--target=cpu", f"--streams={streams}", "-o", trainer])
                analytic = predicted(model, streams)
                for _ in range(args.rounds):
                    profile = os.path.join(tmp, f"{name}-s{streams}.json")
                    trace = os.path.join(tmp, f"{name}-s{streams}-trace.json")
                    run([trainer, f"--steps={args.steps}", "--data=synthetic",
                         f"--profile-ops={profile}", f"--trace={trace}"])
                    starts = {}
                    for e in json.load(open(trace))["traceEvents"]:
                        if e["ph"] == "X":
                            k = e["args"]["step"]
                            starts[k] = min(starts.get(k, e["ts"]), e["ts"])
                    ts = [starts[k] for k in sorted(starts)]
                    same = (ts[-1] - ts[0]) / (len(ts) - 1) / 1e3
                    log = os.path.join(tmp, f"{name}-s{streams}.jsonl")
                    run([trainer, f"--steps={args.steps}", "--data=synthetic", f"--log={log}"])
                    steps = [json.loads(line) for line in open(log)]
                    ms = [s["step_ms"] for s in steps if s.get("type") == "step"]
                    other = statistics.mean(ms[len(ms) // 4:])
                    pred = predicted(model, streams, profile)
                    print(f"{name:10} {streams:7} {same:12.3f} {100 * (pred - same) / same:+6.1f}% "
                          f"{other:13.3f} {100 * (pred - other) / other:+6.1f}% {pred:13.3f} "
                          f"{analytic:12.3f}")
                    sys.stdout.flush()


def measured_ms(trainer, steps, log):
    run([trainer, f"--steps={steps}", "--data=synthetic", f"--log={log}"])
    ms = [json.loads(line)["step_ms"] for line in open(log) if '"type":"step"' in line]
    return statistics.mean(ms[len(ms) // 4:])


def multi(args):
    print(f"{'model':10} {'strategy':10} {'gpus':>4} {'measured ms':>12} {'predicted ms':>13} "
          f"{'error':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model = os.path.join(tmp, name + ".onnx")
            run([sys.executable, GEN, name, "--test-size", "-o", model])
            one = os.path.join(tmp, f"{name}-1")
            run([LWCC, model, "--target=cpu", "-o", one])
            profile = os.path.join(tmp, f"{name}.json")
            run([one, f"--steps={args.steps}", "--data=synthetic", f"--profile-ops={profile}"])
            base = measured_ms(one, args.steps, os.path.join(tmp, f"{name}-1.jsonl"))
            pred = predicted(model, 1, profile)
            print(f"{name:10} {'-':10} {1:4} {base:12.3f} {pred:13.3f} "
                  f"{100 * (pred - base) / base:+6.1f}%")
            for strategy in args.strategies.split(","):
                extra = [f"--gpus={args.gpus}", f"--strategy={strategy}"]
                trainer = os.path.join(tmp, f"{name}-{strategy}")
                run([LWCC, model, "--target=cpu", *extra, "-o", trainer])
                for _ in range(args.rounds):
                    got = measured_ms(trainer, args.steps, os.path.join(tmp, f"{trainer}.jsonl"))
                    pred = predicted(model, 1, profile, extra)
                    print(f"{name:10} {strategy:10} {args.gpus:4} {got:12.3f} {pred:13.3f} "
                          f"{100 * (pred - got) / got:+6.1f}%")
                    sys.stdout.flush()


if __name__ == "__main__":
    main()
