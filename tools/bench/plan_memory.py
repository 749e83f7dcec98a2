#!/usr/bin/env python3
"""How little device memory each zoo model's training step can be planned in.

For each model (test size unless --full-size) on --gpus devices it measures,
with `lwcc --emit=plan --plan-json` (the memory plan: a device's arena plus
its params and state, the bytes lwcc checks against the device spec):

  data     what data parallelism needs per device (--strategy=data
           --shard=none --recompute=none): the "data-parallel plan";
  least    the least memory the default planner needs (--strategy=layerwise,
           --shard=auto, --recompute=auto), found by bisection over the
           spec's memory_bytes down to --step of `data`, with the plan it
           keeps there and its predicted step;
  at data/4  what the default planner does on devices of a quarter of
           `data`: the plan it keeps (and its predicted step) or its error.

With --vs OTHER_LWCC (say, a build of an earlier commit) the same for that
lwcc beside each row. The device spec is a small one whose memory the
bisection varies (the lit tests' `fits` spec): a test-size model's step
needs about a megabyte.

    python3 tools/bench/plan_memory.py [--models resnet18,vgg16] [--gpus 4] [--batch 8]
        [--optimizer adamw] [--size 16 --width 0.25] [--step 0.01] [--lwcc build/bin/lwcc]
        [--vs OLD_LWCC]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("LWCC_BIN_DIR") or os.path.join(ROOT, "build", "bin")
GEN = os.path.join(ROOT, "tools", "models", "gen.py")
ZOO = ["lenet", "alexnet", "vgg16", "resnet18", "inception", "inception_v3"]
SPEC = {"name": "fits", "fp32_flops": 1e12, "mem_bandwidth": 1e12, "launch_seconds": 1e-6,
        "memory_bytes": 1e12, "intra_bandwidth": 1e10, "intra_latency": 1e-6,
        "inter_bandwidth": 1e9, "inter_latency": 1e-5, "devices_per_node": 8}


def plan(lwcc, model, flags, memory, tmp):
    """One planning run on devices of `memory` bytes: (kept plan, step ms,
    bytes per device) or (None, error line, None)."""
    spec = os.path.join(tmp, "spec.json")
    with open(spec, "w") as f:
        json.dump(dict(SPEC, memory_bytes=float(memory)), f)
    out = os.path.join(tmp, "plan.json")
    if os.path.exists(out):
        os.remove(out)
    r = subprocess.run([lwcc, model, *flags, f"--device-spec={spec}", "--emit=plan",
                        f"--plan-json={out}", "-o", os.devnull], capture_output=True, text=True)
    if r.returncode:
        lines = [x for x in r.stderr.strip().splitlines() if "error" in x]
        return None, (lines[0] if lines else f"exit {r.returncode}"), None
    with open(out) as f:
        j = json.load(f)
    chosen = j["chosen"]
    kept = (j.get("search_check") or {}).get("kept", chosen)
    used = max(d["params_bytes"] + d["state_bytes"] + d["arena_bytes"] for d in j["memory"])
    return kept, j["strategies"][chosen]["step_s"] * 1e3, used


def least(lwcc, model, flags, data, step, tmp):
    """The least memory (to `step` of data) the default planner fits: (bytes,
    kept, step ms), or None when it does not fit `data` either."""
    kept, ms, _ = plan(lwcc, model, flags, data, tmp)
    if kept is None:
        return None
    lo, hi, best = 0, data, (data, kept, ms)
    while hi - lo > step * data:
        mid = (lo + hi) // 2
        k, m, _ = plan(lwcc, model, flags, mid, tmp)
        if k is None:
            lo = mid
        else:
            hi, best = mid, (mid, k, m)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(ZOO))
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--full-size", action="store_true")
    ap.add_argument("--size", type=int, help="input height = width (gen.py --size)")
    ap.add_argument("--width", type=float, help="channel width multiplier (gen.py --width)")
    ap.add_argument("--step", type=float, default=0.01, help="bisection step, of `data`")
    ap.add_argument("--lwcc", default=os.path.join(BIN, "lwcc"))
    ap.add_argument("--vs", help="a second lwcc to run beside (before)")
    a = ap.parse_args()
    flags = [f"--gpus={a.gpus}", f"--batch={a.batch}", f"--optimizer={a.optimizer}"]
    sides = [("after", a.lwcc)] + ([("before", a.vs)] if a.vs else [])
    print(f"{a.gpus} devices, batch {a.batch}, {a.optimizer}; bytes per device "
          "(params + state + arena)")
    print(f"{'model':13} {'side':6} {'data':>9} {'least':>9} {'of data':>7} {'kept there':28} "
          f"{'ms':>7}  at data/4")
    with tempfile.TemporaryDirectory(prefix="lwcc-plan-memory-") as tmp:
        for name in a.models.split(","):
            model = os.path.join(tmp, f"{name}.onnx")
            gen = [sys.executable, GEN, name, "--symbolic-batch", "-o", model]
            if not a.full_size:
                gen.insert(3, "--test-size")
            for opt in ("size", "width"):
                if getattr(a, opt) is not None:
                    gen += [f"--{opt}", str(getattr(a, opt))]
            subprocess.run(gen, check=True, capture_output=True)
            for side, lwcc in sides:
                _, _, data = plan(lwcc, model, [*flags, "--strategy=data", "--shard=none",
                                                "--recompute=none"], 1e12, tmp)
                if data is None:
                    print(f"{name:13} {side:6} data-parallel plan failed")
                    continue
                best = least(lwcc, model, flags, data, a.step, tmp)
                k4, m4, _ = plan(lwcc, model, flags, data // 4, tmp)
                quarter = f"{k4} ({m4:.3f} ms)" if k4 else f"no plan: {m4[:60]}"
                if best is None:
                    print(f"{name:13} {side:6} {data:9} {'-':>9} {'-':>7} {'-':28} {'-':>7}  "
                          f"{quarter}")
                    continue
                mem, kept, ms = best
                print(f"{name:13} {side:6} {data:9} {mem:9} {mem / data:7.2f} {kept[:28]:28} "
                      f"{ms:7.3f}  {quarter}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
