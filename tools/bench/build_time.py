#!/usr/bin/env python3
"""How long a trainer takes to build, against the size of its training step.

For each zoo model (test size unless --full-size) x --gpus x --strategies x
--targets it runs lwcc twice on the same ONNX file:

    lwcc MODEL --gpus=N --strategy=S --target=T --weights=separate --emit=source -o DIR -v
    lwcc MODEL --gpus=N --strategy=S --target=T --weights=separate -o TRAINER

The first gives the generated source: its runtime calls (one RUN_OP per op
of the scheduled step that runs a kernel: the "ops" below), its lines, and
lwcc's own time; the second the whole build.
It prints, per row, the ops, the source lines, the compiler's seconds (the
second run's wall time less the first's), the peak resident memory of the
build (lwcc and the compiler it waits for) and the compiler's seconds per
thousand ops; at the end the smallest and largest seconds per thousand ops
of the rows, and their ratio (flat growth: a ratio near 1).

    python3 tools/bench/build_time.py [--models lenet,resnet18] [--gpus 1,4,8]
        [--strategies data,model,layerwise] [--targets cpu,cuda] [--full-size]
        [--batch 8] [--timeout 1800] [--json out.json] [--vs OTHER_LWCC]

`--gpus 1` builds one row per model and target (no strategy). A CUDA row
needs nvcc (/usr/local/cuda), not a GPU. A build past --timeout seconds is
a row with its time as "> T".
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
LWCC = os.path.join(BIN, "lwcc")
GEN = os.path.join(ROOT, "tools", "models", "gen.py")


def row(model, gpus, strategy, target, tmp, timeout, lwcc=LWCC, suffix=""):
    tag = f"{os.path.basename(model)}-{gpus}-{strategy or 'one'}-{target}{suffix}"
    flags = [f"--gpus={gpus}", f"--target={target}", "--weights=separate"]
    if strategy:
        flags.append(f"--strategy={strategy}")
    src = os.path.join(tmp, tag + "-src")
    gen_s, _, code, err = timed([lwcc, model] + flags + ["--emit=source", "-o", src], timeout)
    if code != 0:
        return {"error": (err.strip().splitlines() or [f"exit {code}"])[-1]}
    ops = lines = 0
    for name in os.listdir(src):
        if name.endswith((".cc", ".cu", ".h", ".inc")):
            with open(os.path.join(src, name), errors="replace") as f:
                for line in f:
                    lines += 1
                    ops += line.lstrip().startswith("RUN_OP(")
    exe = os.path.join(tmp, tag)
    total_s, rss, code, err = timed([lwcc, model] + flags + ["-o", exe], timeout)
    out = {"ops": ops, "lines": lines, "lwcc_s": gen_s, "rss_mib": rss}
    if total_s is None:
        out["timeout"] = timeout
        return out
    if code != 0:
        out["error"] = (err.strip().splitlines() or [f"exit {code}"])[-1]
        return out
    out["build_s"] = max(0.0, total_s - gen_s)
    out["s_per_kop"] = out["build_s"] / (ops / 1000) if ops else None
    return out


def fit(label, points):
    """The least-squares line build s = a + b * kops through the rows, and the
    largest distance of a row from it: a build linear in the model is a
    fixed start-up (a) and a constant cost per thousand ops (b)."""
    if len(points) < 3:
        return
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    a = my - b * mx
    worst = max(abs(y - (a + b * x)) for x, y in points)
    print(f"{label}fit: build s = {a:.2f} + {b:.2f} per thousand ops; the farthest row "
          f"{worst:.1f} s from it")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="lenet,alexnet,resnet18,inception")
    ap.add_argument("--gpus", default="1,4,8")
    ap.add_argument("--strategies", default="data,model,layerwise")
    ap.add_argument("--targets", default="cpu,cuda")
    ap.add_argument("--full-size", action="store_true")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json", help="write every row here")
    ap.add_argument("--vs", metavar="OTHER_LWCC",
                    help="also build each row with this lwcc (its own runtime beside it), "
                         "right after this one's, and print its build seconds and MiB")
    a = ap.parse_args()

    rows = []
    print(f"{'model':12} {'gpus':>4} {'strategy':10} {'target':6} {'ops':>7} {'lines':>8} "
          f"{'lwcc s':>7} {'build s':>8} {'MiB':>7} {'s/kop':>7}" +
          (f" | {'vs s':>8} {'MiB':>7} {'s/kop':>7}" if a.vs else ""))
    with tempfile.TemporaryDirectory(prefix="lwcc-build-time-") as tmp:
        for name in a.models.split(","):
            model = os.path.join(tmp, f"{name}.onnx")
            gen = [sys.executable, GEN, name, "--batch", str(a.batch), "-o", model]
            if not a.full_size:
                gen.insert(3, "--test-size")
            subprocess.run(gen, check=True, capture_output=True)
            for gpus in [int(g) for g in a.gpus.split(",")]:
                for strategy in (a.strategies.split(",") if gpus > 1 else [None]):
                    for target in a.targets.split(","):
                        r = row(model, gpus, strategy, target, tmp, a.timeout)
                        r.update(model=name, gpus=gpus, strategy=strategy or "-", target=target)
                        rows.append(r)
                        if "error" in r:
                            print(f"{name:12} {gpus:4} {r['strategy']:10} {target:6} "
                                  f"error: {r['error'][:80]}", flush=True)
                            continue
                        build = (f"> {r['timeout']:.0f}" if "timeout" in r
                                 else f"{r['build_s']:.1f}")
                        per = f"{r['s_per_kop']:.2f}" if r.get("s_per_kop") else "-"
                        line = (f"{name:12} {gpus:4} {r['strategy']:10} {target:6} {r['ops']:7} "
                                f"{r['lines']:8} {r['lwcc_s']:7.1f} {build:>8} "
                                f"{r['rss_mib']:7.0f} {per:>7}")
                        if a.vs:
                            v = row(model, gpus, strategy, target, tmp, a.timeout, a.vs, "-vs")
                            r["vs"] = v
                            if "error" in v:
                                line += f" | error: {v['error'][:40]}"
                            else:
                                vb = (f"> {v['timeout']:.0f}" if "timeout" in v
                                      else f"{v['build_s']:.1f}")
                                vp = f"{v['s_per_kop']:.2f}" if v.get("s_per_kop") else "-"
                                line += f" | {vb:>8} {v['rss_mib']:7.0f} {vp:>7}"
                        print(line, flush=True)
    for label, runs in (("", rows), ("vs: ", [r["vs"] for r in rows if "vs" in r])):
        per = [r["s_per_kop"] for r in runs if r.get("s_per_kop")]
        if per:
            print(f"{label}seconds per thousand ops: smallest {min(per):.2f}, largest "
                  f"{max(per):.2f}, ratio {max(per) / min(per):.1f}")
        fit(label, [(r["ops"] / 1000, r["build_s"]) for r in runs if r.get("build_s")])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
