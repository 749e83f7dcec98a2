#!/usr/bin/env python3
"""The trainer's measured profile and timeline, and lwcc reading them back.

Builds the zoo LeNet at test size as a CPU trainer (one stream, as a CPU
trainer runs it) and checks, each as one test case:
  - `--profile-ops=FILE` writes one entry per op of the step in the form
    lwcc's cost model reads ({"device", "ops": [{"op", "loc", "device",
    "seconds"}]}), with the mnemonics and locations of the training IR;
  - `--trace=FILE` writes Chrome trace-event JSON whose complete events are
    those ops, step after step, none overlapping on the one stream, and
    whose per-op times agree with the profile;
  - the profile's idle time between steps is the trace's mean gap between
    consecutive steps;
  - the simulator fed that profile (`lwcc-opt --simulate=spec=cpu,profile=`)
    predicts a step equal to the sum of the measured op times and that
    idle time;
  - bad usage (no file) exits 2, an unwritable file exits 1.
Then the same LeNet as `--gpus 2` CPU trainers, data and model parallel:
  - the profile has "devices": 2 and entries on both devices, keyed as the
    parallel IR names its ops ((mnemonic, loc, @dev) of every op that runs
    a kernel), communication ops on each participant;
  - the profile says when each stream's thread began the step, for the
    trace's streams, and an idle time between steps no longer than the
    trace's gaps;
  - the trace has events on pid 0 and 1, named, none overlapping within one
    (pid, tid), every profiled step on both devices;
  - lwcc --gpus 2 --strategy=S --cost-profile reads the profile back and
    predicts a positive, finite step (no ratio to the measured one: that
    depends on the machine).
Ends with the line "N passed, M failed".
"""
import json
import math
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import BIN, GEN, LWCC  # noqa: E402

LWCC_OPT = os.path.join(BIN, "lwcc-opt")

case = harness.case


def run(cmd, expect=0):
    return harness.check_output(cmd, expect=expect, tail=1500)


COMM = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce_to", "device_copy",
        "shard", "unshard"}
VIEWS = ("constant", "assign", "reshape", "flatten", "squeeze", "unsqueeze")


def multi_device(tmp, model, strategy):
    """The cases of a --gpus 2 CPU trainer of `strategy`."""
    flags = ["--gpus=2", f"--strategy={strategy}"]
    trainer = os.path.join(tmp, f"trainer-{strategy}")
    ir = os.path.join(tmp, f"parallel-{strategy}.lwir")
    profile = os.path.join(tmp, f"profile-{strategy}.json")
    trace = os.path.join(tmp, f"trace-{strategy}.json")
    steps = 4
    r = None

    def multi_build_and_profile():
        nonlocal r
        run([LWCC, model, "--target=cpu", *flags, "-o", trainer])
        run([LWCC, model, "--target=cpu", *flags, "--emit=parallel-ir", "-o", ir])
        r = run([trainer, f"--steps={steps}", "--data=synthetic", f"--profile-ops={profile}",
                 f"--trace={trace}", f"--profile={steps - 1}"])

    multi_build_and_profile.__name__ = f"multi_build_and_profile_{strategy}"
    case(multi_build_and_profile)
    if r is None:
        return
    # The parallel IR's ops: compute ops on their @dev (device 0's carry
    # none), communication ops on no @dev (their participants').
    compute, comm = set(), set()
    for line in open(ir):
        m = re.search(r"= (\w+)\(", line) or re.search(r"^\s+(\w+)\(", line)
        if not m or m.group(1) in VIEWS:
            continue
        loc = re.search(r'loc\("([^"]*)"\)\s*$', line)
        loc = loc.group(1) if loc else ""
        if m.group(1) in COMM:
            comm.add((m.group(1), loc))
        else:
            dev = re.search(r"@dev\((\d+)\)", line)
            compute.add((m.group(1), loc, int(dev.group(1)) if dev else 0))

    def multi_profile_format():
        assert f"{steps - 1} steps on 2 devices" in r.stdout, r.stdout[-2000:]
        assert re.search(r"\S+ @1 ", r.stdout), r.stdout[-2000:]
        p = json.load(open(profile))
        assert p["devices"] == 2 and p["steps"] == steps - 1, (p["devices"], p["steps"])
        # What the step spent outside its ops: the idle time between steps,
        # each stream thread's start, a blocked stream's wake-up (when one
        # blocked: that depends on the timing).
        assert p["step_gap_seconds"] >= 0, p["step_gap_seconds"]
        starts = {(e["device"], e["stream"]): e["seconds"] for e in p["stream_starts"]}
        assert {d for d, _ in starts} == {0, 1}, starts
        assert all(v >= 0 for v in starts.values()), starts
        assert ("wake_seconds" in p) == ("wakes_per_step" in p), p.keys()
        if "wake_seconds" in p:
            assert p["wake_seconds"] >= 0 and p["wakes_per_step"] > 0, p
        got = {(e["op"], e["loc"], e["device"]) for e in p["ops"]}
        for e in p["ops"]:
            assert set(e) - {"waited_seconds"} == {"op", "loc", "device", "seconds"}, e
            assert e["device"] in (0, 1) and e["seconds"] >= 0, e
            assert e.get("waited_seconds", 1) > 0, e  # written only where it is not 0
        # A collective's participants wait for each other (and for the
        # events before it): the profile says how long, on average.
        waited = {(e["op"], e["loc"]) for e in p["ops"] if "waited_seconds" in e}
        assert waited & set(comm), f"no communication op with waited_seconds: {sorted(comm)[:5]}"
        assert {d for _, _, d in got} == {0, 1}, got
        missing = [x for x in compute if x not in got]
        assert not missing, f"ops of the parallel IR not in the profile: {missing[:5]}"
        assert comm, "no communication op in the parallel IR"
        for op, loc in comm:
            devices = {d for o, l, d in got if (o, l) == (op, loc)}
            assert devices == {0, 1}, (op, loc, devices)

    def multi_trace_format():
        t = json.load(open(trace))
        ev = [e for e in t["traceEvents"] if e["ph"] == "X"]
        names = {(m["pid"], m["name"], m["args"]["name"]) for m in t["traceEvents"]
                 if m["ph"] == "M"}
        assert (0, "process_name", "device 0") in names and \
            (1, "process_name", "device 1") in names, names
        by = {}
        for e in ev:
            by.setdefault((e["pid"], e["tid"]), []).append(e)
        assert {pid for pid, _ in by} == {0, 1}, sorted(by)
        for (pid, tid), es in by.items():
            assert (pid, "thread_name", f"stream {tid}") in names, (pid, tid, names)
            es.sort(key=lambda e: e["ts"])
            for a, b in zip(es, es[1:]):
                assert b["ts"] >= a["ts"] + a["dur"] - 1e-3, (pid, tid, a, b)
        for pid in (0, 1):
            assert {e["args"]["step"] for e in ev if e["pid"] == pid} == set(range(steps - 1))
        assert any(e["cat"] == "comm" for e in ev), "no communication op in the trace"
        # The profile's streams are the trace's, and its idle time between
        # steps is at most the trace's gap from a step's last op to the next
        # step's first (a step starts when its first thread began it, at or
        # before its first op).
        p = json.load(open(profile))
        assert {(e["device"], e["stream"]) for e in p["stream_starts"]} == set(by), \
            (p["stream_starts"], sorted(by))
        gaps = []
        for k in range(steps - 2):
            end = max(e["ts"] + e["dur"] for e in ev if e["args"]["step"] == k)
            gaps.append(min(e["ts"] for e in ev if e["args"]["step"] == k + 1) - end)
        assert p["step_gap_seconds"] * 1e6 <= sum(gaps) / len(gaps) + 1e-3, \
            (p["step_gap_seconds"], gaps)

    def multi_simulator_reads_profile():
        out = run([LWCC, model, "--target=cpu", "--device-spec=cpu", *flags,
                   f"--cost-profile={profile}", "--emit=plan"]).stdout
        m = re.search(r"^" + strategy + r"\s+([0-9.]+)\s", out, re.M)
        assert m, out[-2000:]
        predicted = float(m.group(1))
        assert predicted > 0 and math.isfinite(predicted), predicted
        # The step includes the measured idle time between steps.
        gap = json.load(open(profile))["step_gap_seconds"] * 1e3
        assert predicted >= gap, (predicted, gap)

    for fn in (multi_profile_format, multi_trace_format, multi_simulator_reads_profile):
        fn.__name__ = f"{fn.__name__}_{strategy}"
        case(fn)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "lenet.onnx")
        trainer = os.path.join(tmp, "trainer")
        run([sys.executable, GEN, "lenet", "--test-size", "-o", model])
        run([LWCC, model, "--target=cpu", "--streams=1", "-o", trainer])
        ir = os.path.join(tmp, "train.lwir")
        run([LWCC, model, "--streams=1", "--emit=train-ir", "-o", ir])
        profile = os.path.join(tmp, "profile.json")
        trace = os.path.join(tmp, "trace.json")
        steps = 4
        run([trainer, f"--steps={steps}", "--data=synthetic", f"--profile-ops={profile}",
             f"--trace={trace}"])

        # The ops of the training IR that run a kernel, in order.
        expected = []
        for line in open(ir):
            m = re.search(r"= (\w+)\(.*loc\(\"([^\"]*)\"\)", line) or \
                re.search(r"^\s+(\w+)\(.*loc\(\"([^\"]*)\"\)", line)
            if m and m.group(1) not in ("constant", "assign", "reshape", "flatten", "squeeze",
                                        "unsqueeze"):
                expected.append((m.group(1), m.group(2)))

        def profile_format():
            p = json.load(open(profile))
            assert isinstance(p["device"], str) and p["device"], p["device"]
            assert p["steps"] == steps - 1, p["steps"]  # the first step is not timed
            for e in p["ops"]:
                assert set(e) == {"op", "loc", "device", "seconds"}, e
                assert e["device"] == 0 and e["seconds"] >= 0, e
            # One stream: no stream starts, no event waits.
            assert p["step_gap_seconds"] >= 0 and "stream_starts" not in p and \
                "wake_seconds" not in p, p.keys()
            got = [(e["op"], e["loc"]) for e in p["ops"]]
            kinds = {k for k, _ in got}
            assert "conv2d" in kinds and "sgd_update" in kinds, kinds
            missing = [x for x in expected if x not in got]
            assert not missing, f"ops of the IR not in the profile: {missing[:5]}"

        def trace_format():
            t = json.load(open(trace))
            ev = [e for e in t["traceEvents"] if e["ph"] == "X"]
            p = json.load(open(profile))
            n = len(p["ops"])
            assert len(ev) == n * (steps - 1), (len(ev), n)
            names = [m for m in t["traceEvents"] if m["ph"] == "M"]
            assert {m["args"]["name"] for m in names} == {"device 0", "stream 0"}, names
            for a, b in zip(ev, ev[1:]):
                assert b["ts"] >= a["ts"] + a["dur"] - 1e-3, (a, b)
            for i, e in enumerate(p["ops"]):
                durs = [ev[k * n + i]["dur"] for k in range(steps - 1)]
                assert ev[i]["name"] == e["op"] and ev[i]["args"]["loc"] == e["loc"], (ev[i], e)
                mean = sum(durs) / len(durs) / 1e6
                assert abs(mean - e["seconds"]) <= 1e-6 + 1e-3 * e["seconds"], (mean, e)
            # The idle time between steps: the trace's gaps from a step's
            # last op to the next step's first, on average.
            gaps = [ev[(k + 1) * n]["ts"] - (ev[k * n + n - 1]["ts"] + ev[k * n + n - 1]["dur"])
                    for k in range(steps - 2)]
            assert abs(sum(gaps) / len(gaps) / 1e6 - p["step_gap_seconds"]) <= 1e-7, \
                (gaps, p["step_gap_seconds"])

        def simulator_reads_profile():
            p = json.load(open(profile))
            # One stream: its ops one after another, and the idle time
            # between steps.
            total = sum(e["seconds"] for e in p["ops"]) + p["step_gap_seconds"]
            r = run([LWCC_OPT, f"--simulate=spec=cpu,profile={profile}", ir, "-o", os.devnull])
            m = re.search(r"simulate: step ([0-9.]+) ms", r.stderr)
            assert m, r.stderr
            predicted = float(m.group(1)) / 1e3
            # The simulator prints milliseconds to three decimals.
            assert abs(predicted - total) <= 1e-6 + 0.01 * total, (predicted, total)

        def bad_usage():
            r = run([trainer, "--steps=2", "--profile-ops="], expect=2)
            assert "--profile-ops" in r.stderr, r.stderr
            r = run([trainer, "--steps=2", "--trace"], expect=2)
            assert "--trace" in r.stderr, r.stderr
            r = run([trainer, "--steps=2", "--data=synthetic",
                     "--profile-ops=" + os.path.join(tmp, "no", "such", "p.json")], expect=1)
            assert "cannot write" in r.stderr or "cannot write" in r.stdout, r.stderr

        for fn in (profile_format, trace_format, simulator_reads_profile, bad_usage):
            case(fn)
        for strategy in ("data", "model"):
            multi_device(tmp, model, strategy)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
