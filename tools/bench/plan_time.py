#!/usr/bin/env python3
"""How long lwcc takes to plan a model for many devices, and how much memory.

For each zoo model (full size unless --test-size) x --gpus x --spec it runs

    lwcc MODEL.onnx --gpus=N --device-spec=SPEC --emit=plan --plan-json=J -o /dev/null

and prints the end-to-end wall time, the process's peak resident memory,
the strategy the planner kept, its plan (the kept candidate) and its
predicted step. With --vs OTHER_LWCC the same runs of a second lwcc (say, a
build of an earlier commit) are printed beside each row, and whether both
kept the same plan with the same predicted step and printed the same
report: a faster planner must choose what the slower one chose.

    python3 tools/bench/plan_time.py [--models inception_v3,resnet18] [--gpus 4,16,64,256]
        [--spec h100,p100-cluster] [--batch 64] [--test-size] [--timeout 900]
        [--lwcc build/bin/lwcc] [--vs /path/to/old/lwcc] [--json out.json]
        [--flags "--strategy=pipeline --stages=16 --microbatches=64"]

--flags are more lwcc arguments for every run (both lwccs): a fixed
strategy's compile, say. A run past --timeout seconds is a row with its time as "> T". The models
are generated once into a temporary folder (tools/models/gen.py).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from timing import timed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("LWCC_BIN_DIR") or os.path.join(ROOT, "build", "bin")
GEN = os.path.join(ROOT, "tools", "models", "gen.py")
ZOO = ["lenet", "alexnet", "vgg16", "resnet18", "inception", "inception_v3"]


def plan(lwcc, model, gpus, spec, timeout, workdir, tag, flags=()):
    """One planning run: its seconds, peak RSS in MiB, the plan JSON and the report."""
    jpath = os.path.join(workdir, f"{tag}.json")
    rpath = os.path.join(workdir, f"{tag}.txt")
    for p in (jpath, rpath):
        if os.path.exists(p):
            os.remove(p)
    cmd = [lwcc, model, f"--gpus={gpus}", f"--device-spec={spec}", "--emit=plan",
           f"--plan-json={jpath}", "-o", rpath, *flags]
    seconds, rss, code, err = timed(cmd, timeout)
    if seconds is None:
        return {"seconds": None, "timeout": timeout, "rss_mib": rss}
    out = {"seconds": seconds, "rss_mib": rss, "exit": code}
    if code != 0:
        out["error"] = err.strip().splitlines()[-1] if err.strip() else f"exit {code}"
        return out
    with open(jpath) as f:
        j = json.load(f)
    with open(rpath) as f:
        out["report"] = f.read()
    check = j.get("search_check") or {}
    chosen = j["chosen"]
    out["strategy"] = chosen
    out["kept"] = check.get("kept", chosen)
    if chosen in j["strategies"]:
        out["step_ms"] = j["strategies"][chosen]["step_s"] * 1e3
    else:  # one device: no strategies side by side, the report's prediction
        line = [l for l in out["report"].splitlines() if l.startswith("predicted step on ")]
        out["step_ms"] = float(line[0].split(": ")[1].split()[0]) if line else float("nan")
    return out


def cell(r):
    if r.get("seconds") is None:
        return f"> {r['timeout']:.0f} s".rjust(10) + f" {r['rss_mib']:8.0f}"
    return f"{r['seconds']:10.2f} {r['rss_mib']:8.0f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(ZOO))
    ap.add_argument("--gpus", default="4,16,64,256")
    ap.add_argument("--spec", default="h100,p100-cluster")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--test-size", action="store_true", help="the zoo's test sizes, not full size")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--lwcc", default=os.path.join(BIN, "lwcc"))
    ap.add_argument("--vs", help="a second lwcc to run beside (before)")
    ap.add_argument("--json", help="write every row here")
    ap.add_argument("--flags", default="", help="more lwcc arguments, split at spaces")
    a = ap.parse_args()

    rows = []
    with tempfile.TemporaryDirectory(prefix="lwcc-plan-time-") as tmp:
        print(f"{'model':14} {'gpus':>4} {'spec':13} {'seconds':>10} {'MiB':>8} "
              f"{'kept':16} {'step ms':>10}" + (
                  f" | {'before s':>10} {'MiB':>8} {'kept':16} same" if a.vs else ""))
        for name in a.models.split(","):
            model = os.path.join(tmp, f"{name}.onnx")
            gen = [sys.executable, GEN, name, "--batch", str(a.batch), "-o", model]
            if a.test_size:
                gen.insert(3, "--test-size")
            subprocess.run(gen, check=True, capture_output=True)
            for gpus in [int(g) for g in a.gpus.split(",")]:
                for spec in a.spec.split(","):
                    r = plan(a.lwcc, model, gpus, spec, a.timeout, tmp, "new", a.flags.split())
                    row = {"model": name, "gpus": gpus, "spec": spec, "after": r}
                    line = f"{name:14} {gpus:4} {spec:13} {cell(r)} "
                    line += (f"{r.get('kept', r.get('error', '-'))[:16]:16} "
                             f"{r.get('step_ms', float('nan')):10.3f}")
                    if a.vs:
                        b = plan(a.vs, model, gpus, spec, a.timeout, tmp, "old", a.flags.split())
                        row["before"] = b
                        if "report" in r and "report" in b:
                            same = "yes" if r["report"] == b["report"] else (
                                "plan" if (r["kept"], r["step_ms"]) == (b["kept"], b["step_ms"])
                                else "NO")
                        else:
                            same = "-"
                        row["same"] = same
                        line += (f" | {cell(b)} {b.get('kept', b.get('error', '-'))[:16]:16} "
                                 f"{same}")
                    for side in ("after", "before"):
                        row.get(side, {}).pop("report", None)
                    rows.append(row)
                    print(line, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
