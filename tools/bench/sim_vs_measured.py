#!/usr/bin/env python3
"""The simulator's predicted step time against a CPU trainer's measured one.

For each model (zoo, test size) and each --streams setting: builds the CPU
trainer, runs it with `--profile-ops` to measure per-op times, feeds them
back with `lwcc --cost-profile=... --device-spec=cpu --emit=plan`, and
compares the predicted step with the trainer's measured step time: in the
profiled run itself ("same run": the mean gap between the starts of
consecutive profiled steps in its trace) and in an unprofiled run ("other
run": the mean `step_ms` of its JSONL log after the first quarter of the
steps). Also prints the prediction without a profile (the cpu spec's
analytic times). With 3 and more streams the trainer and the prediction
take the same --stream-policy (default all: the branches on streams of
their own, where the simulator would keep them on stream 0 on the cpu
spec), so both see the same schedule.

    python3 tools/bench/sim_vs_measured.py [--models alexnet,resnet18] [--steps 200] [--rounds 3]
        [--streams 1,2,4f2,4c2] [--stream-policy sim|all]
        (4f2: 4 streams, --fragments=2; 4c2: 4 streams, heavy ops in 2 pieces of their channels)
    python3 tools/bench/sim_vs_measured.py --gpus 2 [--strategies data,model,owt,layerwise,hypergraph,pipeline]
        [--microbatches 4] [--batch 8]
    ... [--lwcc-flags="--recompute=all"]   (given to every lwcc call: trainer and prediction)
    ... --strategies data,data+zero1,data+fsdp,data+recompute   (+S: --shard=S, +recompute:
        --recompute=all)
    python3 tools/bench/sim_vs_measured.py --logical --gpus 2 [--spec h100|FILE.json]
        [--strategies data,model,owt,layerwise,pipeline] [--size 224 --batch 128] [--emulate-gpu]

With --gpus N > 1: each strategy's own `--gpus N` CPU trainer runs with
`--profile-ops` and `--trace` (a multi-device trainer times each device's
ops, leaving out the waits for events and for the other participants of
communication ops), and the simulator's prediction for that strategy with
that profile (`--gpus N --strategy=S --cost-profile=... --emit=plan`: the
parallel graph's ops, shards already, priced by their measured time as is,
communication ops by their measured time; with what the profile measured
outside the ops: the idle time between steps, each stream thread's start
and a blocked thread's wake-up) is set beside the step time measured in
the same profiled run and in an unprofiled one. The first row is the
`--gpus 1` trainer, measured and predicted the same way. `pipeline` is N
stages of --microbatches micro-batches (1F1B). The strategies' searches
(layerwise, hypergraph) choose on the cpu spec's analytic times in the
trainer and in the prediction alike: a multi-device profile prices no whole
op, so both see the same plan. After a model's rows: Kendall's tau between
the simulator's ranking of its multi-device strategies and the measured one
(the means of the rounds), in the same runs and in the other runs.

With --logical (on a GPU machine): the planner's multi-device prices
checked on the one GPU there. Each strategy's CUDA trainer for --gpus N runs
its N logical devices on GPU 0 (`--devices=0,0,...`), and its measured step
(the mean `step_ms` of its JSONL log after the first quarter of the steps)
is set beside the simulator's step for the same plan priced as N logical
devices of one GPU (`--devices-per-gpu=N` on --spec: their kernels share the
GPU's compute and memory, what moves between them is copied inside it); the
first row is the one-device trainer and its prediction. After a model's
rows: Kendall's tau between the predicted and the measured ranking of its
strategies. --emulate-gpu runs the same on the emulated CUDA device (a test
of the script: its times are not a GPU's).
"""
import json
import os
import re
import statistics
import sys
import tempfile

from timing import GEN, LWCC, parser, run


def predicted(model, streams, profile=None, extra=(), policy="all"):
    cmd = [LWCC, model, "--target=cpu", "--device-spec=cpu", f"--streams={streams}",
           f"--stream-policy={policy}", "--emit=plan", *extra]
    if profile:
        cmd.append(f"--cost-profile={profile}")
    out = run(cmd).stdout
    strategy = [a.split("=", 1)[1] for a in extra if a.startswith("--strategy=")]
    m = (re.search(r"^" + strategy[0] + r"\s+([0-9.]+)\s", out, re.M) if strategy else
         re.search(r"predicted step on \S+: ([0-9.]+) ms", out))
    if not m:
        sys.exit("no predicted step in --emit=plan's output")
    return float(m.group(1))


def models(args, tmp):
    """Each of --models at test size (with --batch where given), generated into
    tmp one after the other: (name, ONNX path)."""
    for name in args.models.split(","):
        model = os.path.join(tmp, name + ".onnx")
        run([sys.executable, GEN, name, "--test-size", "-o", model] +
            ([f"--batch={args.batch}"] if args.batch else []))
        yield name, model


def main():
    ap = parser("alexnet,resnet18", 200)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--strategies", default="data,model,owt,layerwise,hypergraph")
    ap.add_argument("--microbatches", type=int, default=4, help="of the pipeline strategy")
    ap.add_argument("--batch", type=int, help="the models' batch (default: the test preset's)")
    ap.add_argument("--streams", default="1,2",
                    help="one device: the --streams settings (4f2: 4 streams, --fragments=2; "
                    "4c2: --fragments=2 --fragment-along=channels)")
    ap.add_argument("--stream-policy", default="all", choices=["sim", "all"])
    ap.add_argument("--lwcc-flags", default="",
                    help="more lwcc flags for the trainers and the predictions alike")
    ap.add_argument("--logical", action="store_true",
                    help="CUDA trainers of --gpus N logical devices on one GPU (see above)")
    ap.add_argument("--spec", default="h100", help="--logical: the device spec predicted on")
    ap.add_argument("--size", type=int, help="--logical: the models' input size (default: test size)")
    ap.add_argument("--emulate-gpu", action="store_true",
                    help="--logical on the emulated CUDA device (a test of the script)")
    args = ap.parse_args()
    more = args.lwcc_flags.split()
    if args.logical:
        return logical(args)
    if args.gpus > 1:
        return multi(args)
    print(f"{'model':10} {'streams':>7} {'same run ms':>12} {'error':>7} {'other run ms':>13} "
          f"{'error':>7} {'predicted ms':>13} {'analytic ms':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in models(args, tmp):
            for setting in args.streams.split(","):
                # "4f2": 4 streams, the batch in 2 fragments (--fragments); "4c2":
                # each heavy op in 2 pieces of its channels.
                m = re.fullmatch(r"(\d+)(?:([fc])(\d+))?", setting)
                if not m:
                    sys.exit(f"--streams: '{setting}' is not N, NfK or NcK")
                streams = int(m.group(1))
                frag = ([f"--fragments={m.group(3)}",
                         "--fragment-along=" + ("samples" if m.group(2) == "f" else "channels")]
                        if m.group(2) else []) + more
                trainer = os.path.join(tmp, f"{name}-s{setting}")
                run([LWCC, model, "--target=cpu", f"--streams={streams}",
                     f"--stream-policy={args.stream_policy}", *frag, "-o", trainer])
                analytic = predicted(model, streams, extra=frag, policy=args.stream_policy)
                for _ in range(args.rounds):
                    profile = os.path.join(tmp, f"{name}-s{setting}.json")
                    trace = os.path.join(tmp, f"{name}-s{setting}-trace.json")
                    same = profiled(trainer, args.steps, profile, trace)
                    other = unprofiled(trainer, args.steps, os.path.join(tmp, f"{name}-s{setting}.jsonl"))
                    pred = predicted(model, streams, profile, extra=frag, policy=args.stream_policy)
                    print(f"{name:10} {setting:>7} {same:12.3f} {100 * (pred - same) / same:+6.1f}% "
                          f"{other:13.3f} {100 * (pred - other) / other:+6.1f}% {pred:13.3f} "
                          f"{analytic:12.3f}")
                    sys.stdout.flush()


def profiled(trainer, steps, profile, trace):
    """Runs `trainer` with --profile-ops and --trace; the mean step (ms) of
    that run: the gap between the first and last profiled steps' starts."""
    run([trainer, f"--steps={steps}", "--data=synthetic", f"--profile-ops={profile}",
         f"--trace={trace}"])
    starts = {}
    for e in json.load(open(trace))["traceEvents"]:
        if e["ph"] == "X":
            k = e["args"]["step"]
            starts[k] = min(starts.get(k, e["ts"]), e["ts"])
    ts = [starts[k] for k in sorted(starts)]
    return (ts[-1] - ts[0]) / (len(ts) - 1) / 1e3


def unprofiled(trainer, steps, log, extra=()):
    """The mean step (ms) of an unprofiled run of `trainer`: its JSONL
    log's step_ms after the first quarter of the steps."""
    run([trainer, f"--steps={steps}", "--data=synthetic", f"--log={log}", *extra])
    ms = [s["step_ms"] for s in map(json.loads, open(log)) if s.get("type") == "step"]
    return statistics.mean(ms[len(ms) // 4:])


def multi(args):
    print(f"{'model':10} {'strategy':10} {'gpus':>4} {'same run ms':>12} {'error':>7} "
          f"{'other run ms':>13} {'error':>7} {'predicted ms':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in models(args, tmp):
            rows = [("-", 1, args.lwcc_flags.split())]
            for strategy in args.strategies.split(","):
                # "data+fsdp": --strategy=data --shard=fsdp; "+recompute": --recompute=all.
                base, *more = strategy.split("+")
                extra = [f"--gpus={args.gpus}", f"--strategy={base}"]
                for m in more:
                    extra.append("--recompute=all" if m == "recompute" else f"--shard={m}")
                if base == "pipeline":
                    extra += [f"--stages={args.gpus}", f"--microbatches={args.microbatches}"]
                rows.append((strategy, args.gpus, extra + args.lwcc_flags.split()))
            means = []  # (strategy, same run, other run, predicted) of the multi-device rows
            for strategy, gpus, extra in rows:
                trainer = os.path.join(tmp, f"{name}-{strategy}-{gpus}")
                run([LWCC, model, "--target=cpu", *extra, "-o", trainer])
                seen = []
                for r in range(args.rounds):
                    profile = f"{trainer}-{r}.json"
                    got = profiled(trainer, args.steps, profile, f"{trainer}-{r}-trace.json")
                    other = unprofiled(trainer, args.steps, f"{trainer}-{r}.jsonl")
                    pred = predicted(model, 1, profile, extra)
                    seen.append((got, other, pred))
                    print(f"{name:10} {strategy:10} {gpus:4} {got:12.3f} "
                          f"{100 * (pred - got) / got:+6.1f}% {other:13.3f} "
                          f"{100 * (pred - other) / other:+6.1f}% {pred:13.3f}")
                    sys.stdout.flush()
                if gpus > 1:
                    means.append((strategy, *(statistics.mean(x) for x in zip(*seen))))
            if len(means) > 2:
                pred = [m[3] for m in means]
                print(f"{name}: the simulator's ranking of the {len(means)} strategies "
                      f"({', '.join(m[0] for m in means)}) against the measured one, Kendall's "
                      f"tau: {kendall_tau(pred, [m[1] for m in means]):+.2f} (same runs), "
                      f"{kendall_tau(pred, [m[2] for m in means]):+.2f} (other runs)")


def logical(args):
    """--logical: each strategy's trainer on N logical devices of GPU 0 against
    the simulator's step for N logical devices of one GPU of --spec."""
    gpu = "the emulated CUDA device" if args.emulate_gpu else "GPU 0"
    print(f"# {args.gpus} logical devices on {gpu}, predicted on {args.spec} with "
          f"--devices-per-gpu={args.gpus}")
    print(f"{'model':10} {'strategy':10} {'devices':>7} {'measured ms':>12} {'predicted ms':>13} "
          f"{'error':>7}")
    build = ["--emulate-gpu"] if args.emulate_gpu else []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model = os.path.join(tmp, name + ".onnx")
            run([sys.executable, GEN, name, *([f"--size={args.size}"] if args.size else
                                              ["--test-size"]),
                 *([f"--batch={args.batch}"] if args.batch else []), "-o", model])
            rows = [("-", 1, [])]
            for strategy in args.strategies.split(","):
                extra = [f"--gpus={args.gpus}", f"--strategy={strategy}"]
                if strategy == "pipeline":
                    extra += [f"--stages={args.gpus}", f"--microbatches={args.microbatches}"]
                rows.append((strategy, args.gpus, extra))
            means = []
            for strategy, devices, extra in rows:
                flags = extra + args.lwcc_flags.split()
                trainer = os.path.join(tmp, f"{name}-{strategy}-{devices}")
                run([LWCC, model, *build, *flags, "-o", trainer])
                place = [f"--devices={','.join(['0'] * devices)}"] if devices > 1 else []
                measured = statistics.mean(
                    unprofiled(trainer, args.steps, f"{trainer}-{r}.jsonl", place)
                    for r in range(args.rounds))
                shared = [f"--devices-per-gpu={devices}"] if devices > 1 else []
                out = run([LWCC, model, f"--device-spec={args.spec}", *shared, *flags,
                           "--emit=plan", "-o", "-"]).stdout
                m = (re.search(r"^" + strategy + r"\s+([0-9.]+)\s", out, re.M) if devices > 1
                     else re.search(r"predicted step on \S+: ([0-9.]+) ms", out))
                if not m:
                    sys.exit(f"{name} {strategy}: no predicted step in --emit=plan's output")
                pred = float(m.group(1))
                print(f"{name:10} {strategy:10} {devices:7} {measured:12.3f} {pred:13.3f} "
                      f"{100 * (pred - measured) / measured:+6.1f}%")
                sys.stdout.flush()
                if devices > 1:
                    means.append((strategy, measured, pred))
            if len(means) > 2:
                print(f"{name}: the simulator's ranking of the {len(means)} strategies "
                      f"({', '.join(m[0] for m in means)}) against the measured one, Kendall's "
                      f"tau: {kendall_tau([m[2] for m in means], [m[1] for m in means]):+.2f}")


def kendall_tau(a, b):
    """Kendall's tau-a of two equally long lists: (concordant - discordant)
    pairs over all pairs; +1 when they rank alike, -1 when reversed."""
    n, score = len(a), 0
    for i in range(n):
        for j in range(i + 1, n):
            p = (a[i] - a[j]) * (b[i] - b[j])
            score += (p > 0) - (p < 0)
    return score / (n * (n - 1) / 2)


if __name__ == "__main__":
    main()
