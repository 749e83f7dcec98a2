#!/usr/bin/env python3
"""Pipeline plans on the simulator: bubbles, memory, and pipelines beside the other strategies.

Three parts, each from `lwcc --emit=plan --plan-json` (the simulator's
predicted step of each device spec; nothing runs on a device):

 1. bubble: a uniform 4-stage chain (a scale, then 4 equal 4096x4096
    matrix products, the loss) on 4 h100 devices, --strategy=pipeline
    --stages=4, M = 4, 8, 16 micro-batches of 4096 samples, GPipe, 1F1B
    and ZB-H1: each device's bubble (the fraction of the step its compute
    is idle) beside its formula, and each stage's peak arena (activations)
    under each schedule;
 2. vgg16: VGG-16 at 224x224, 64 samples per device, on 4 and 16 devices
    of h100 and p100-cluster: the predicted step of data, OWT, layer-wise
    and the best pipeline plan (S stages dividing the devices, M = S, 2S,
    4S), and the plan --strategy=layerwise keeps;
 3. memory: VGG-16 at a batch whose activations do not fit a device under
    data, model, OWT or the layer-wise search: --strategy=layerwise keeps a
    pipeline plan instead of failing.

    python3 tools/bench/pipeline_plans.py [--parts bubble,vgg16,memory] [--lwcc build/bin/lwcc]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GEN = os.path.join(ROOT, "tools", "models", "gen.py")


def chain(path, layers=4, width=4096):
    """x [N, width] -> scale -> `layers` matmuls -> (lwcc's) softmax-xent."""
    nodes, inits = [], []
    inits.append(numpy_helper.from_array(np.ones(width, np.float32), "scale"))
    nodes.append(helper.make_node("Mul", ["x", "scale"], ["h0"], name="scale"))
    for i in range(layers):
        w = np.zeros((width, width), np.float32)  # values do not matter to the simulator
        inits.append(numpy_helper.from_array(w, f"w{i + 1}"))
        nodes.append(helper.make_node("MatMul", [f"h{i}", f"w{i + 1}"], [f"h{i + 1}"],
                                      name=f"fc{i + 1}"))
    g = helper.make_graph(nodes, "chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
                          [helper.make_tensor_value_info(f"h{layers}", TensorProto.FLOAT,
                                                         ["N", width])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def lrn_chain(path, stages=4, channels=16384, size=16383, hw=2):
    """x [N, C, hw, hw] -> a per-channel scale (the trained param) -> `stages`
    LRNs of `size` channels -> global average pool -> flatten -> (lwcc's)
    softmax-xent.
    An LRN's backward is one op (its input's gradient), as long as its
    forward, so each stage's backward is one unit, as the classical bubble
    formula assumes; at 32770 FLOPs per element the compute dwarfs the
    transfers between stages and the loss, which the formula leaves out."""
    nodes, x = [], "m"
    inits = [numpy_helper.from_array(np.ones((channels, 1, 1), np.float32), "s")]
    nodes.append(helper.make_node("Mul", ["x", "s"], ["m"], name="scale"))
    for i in range(stages):
        nodes.append(helper.make_node("LRN", [x], [f"l{i}"], name=f"lrn{i}", size=size))
        x = f"l{i}"
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pooled"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["pooled"], ["logits"], name="flatten", axis=1))
    g = helper.make_graph(
        nodes, "lrn_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels, hw, hw])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", channels])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def plan(lwcc, model, flags, tmp, tag):
    out = os.path.join(tmp, tag + ".json")
    r = subprocess.run([lwcc, model, "--emit=plan", f"--plan-json={out}", "-o", os.devnull,
                        *flags], capture_output=True, text=True)
    if r.returncode:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"
    with open(out) as f:
        return json.load(f), ""


def bubble_table(lwcc, tmp, path, title, batch_per_mb, exact):
    """Per M and schedule: each device's bubble, the formula `exact(M,
    schedule)` gives, and each stage's peak arena."""
    print(title)
    print(f"{'M':>3} {'schedule':>8} {'bubble per device':>32} {'formula':>8} {'worst err':>9} "
          f"{'peak arena per stage (MiB)':>30}")
    for m in (4, 8, 16):
        for sched in ("gpipe", "1f1b", "zb-h1"):
            p, err = plan(lwcc, path, ["--gpus=4", "--strategy=pipeline", "--stages=4",
                                       f"--microbatches={m}", f"--schedule={sched}",
                                       "--device-spec=h100", f"--batch={batch_per_mb * m}"],
                          tmp, f"{os.path.basename(path)}-{m}-{sched}")
            if not p:
                print(f"{m:>3} {sched:>8} failed: {err}")
                continue
            devs = p["pipeline"]["devices"]
            want = exact(m, sched)
            bubbles = [d["bubble"] for d in devs]
            worst = max(abs(b - want) for b in bubbles)
            peaks = " ".join(f"{d['peak_bytes'] / 2**20:6.0f}" for d in devs)
            print(f"{m:>3} {sched:>8} {' '.join(f'{b:7.4f}' for b in bubbles):>32} {want:>8.4f} "
                  f"{worst:>9.4f} {peaks:>30}")


def bubble(lwcc, tmp):
    S = 4
    path = os.path.join(tmp, "lrn_chain.onnx")
    lrn_chain(path)
    bubble_table(lwcc, tmp, path,
                 "1a. A uniform 4-stage chain whose backward is one op a stage (a scale, then "
                 "an LRN of 16383 channels each),\n    4 h100, micro-batches of 64: bubble against "
                 "the classical (S-1)/(M+S-1)",
                 64, lambda m, sched: (S - 1) / (m + S - 1))
    # Matrix products: a stage's backward is its input's gradient, then its
    # weight's; the stage before starts its backward after the first. With
    # t_f, t_x, t_w one micro-batch's forward, input and weight gradient on
    # a stage, the fill and drain cost (S-1)(t_f + t_x) of a step of
    # M(t_f + t_x + t_w) + (S-1)(t_f + t_x): with t_x = t_w = 0.9 t_f
    # (the slices of the batch and the reads at stage 0 aside), t_f 2.29,
    # t_x = t_w = 2.06 ms in the simulator's trace.
    path = os.path.join(tmp, "chain.onnx")
    chain(path)
    # ZB-H1 moves the last stages' weight gradients into the drain, which
    # then costs (S-1)(t_f + t_x - t_w): with t_f = t_x = t_w, (S-1)/(3M)
    # of the compute, a third of 1F1B's (S-1)/M.
    tf, tx, tw = 2.29, 2.06, 2.06

    def matmul_chain(m, sched):
        fill = (S - 1) * (tf + tx - (tw if sched == "zb-h1" else 0))
        return fill / (m * (tf + tx + tw) + fill)
    bubble_table(lwcc, tmp, path,
                 "\n1b. A uniform 4-stage chain of matrix products (4096x4096), 4 h100, "
                 "micro-batches of 4096:\n    the input's gradient passes on before the "
                 "weight's: bubble against (S-1)(t_f+t_x) / (M(t_f+t_x+t_w) + (S-1)(t_f+t_x)),\n"
                 "    zb-h1 against (S-1)(t_f+t_x-t_w) / (M(t_f+t_x+t_w) + (S-1)(t_f+t_x-t_w))",
                 4096, matmul_chain)


def vgg16(lwcc, tmp):
    path = os.path.join(tmp, "vgg16.onnx")
    subprocess.run([sys.executable, GEN, "vgg16", "--symbolic-batch", "-o", path], check=True,
                   capture_output=True)
    print("\n2. VGG-16 at 224x224, 64 samples per device: predicted step (ms)")
    print(f"{'devices':>7} {'spec':>13} {'data':>9} {'owt':>9} {'layerwise':>9} "
          f"{'pipeline':>9} {'best pipeline':>16} {'layerwise keeps':>16}")
    for gpus in (4, 16):
        for spec in ("h100", "p100-cluster"):
            p, err = plan(lwcc, path, [f"--gpus={gpus}", f"--batch={64 * gpus}",
                                       f"--device-spec={spec}"], tmp, f"vgg-{gpus}-{spec}")
            if not p:
                print(f"{gpus:>7} {spec:>13} failed: {err}")
                continue
            s = {k: v["step_s"] * 1e3 for k, v in p["strategies"].items()}
            cands = p["search_check"]["candidates"]
            pipes = {k: v for k, v in cands.items() if k.startswith("pipeline/")}
            best = min(pipes, key=pipes.get)
            print(f"{gpus:>7} {spec:>13} {s['data']:>9.2f} {s['owt']:>9.2f} "
                  f"{s['layerwise']:>9.2f} {pipes[best] * 1e3:>9.2f} {best:>16} "
                  f"{p['search_check']['kept']:>16}")


def memory(lwcc, tmp, batch=3200, gpus=2):
    path = os.path.join(tmp, "vgg16.onnx")
    if not os.path.exists(path):
        subprocess.run([sys.executable, GEN, "vgg16", "--symbolic-batch", "-o", path],
                       check=True, capture_output=True)
    print(f"\n3. VGG-16 at 224x224, batch {batch} on {gpus} h100 (80 GiB each)")
    for strat in ("data", "model", "owt"):
        p, err = plan(lwcc, path, [f"--gpus={gpus}", f"--batch={batch}", "--device-spec=h100",
                                   f"--strategy={strat}"], tmp, f"mem-{strat}")
        print(f"  --strategy={strat}: " + ("fits" if p else err))
    p, err = plan(lwcc, path, [f"--gpus={gpus}", f"--batch={batch}", "--device-spec=h100"], tmp,
                  "mem-layerwise")
    if not p:
        print(f"  --strategy=layerwise: {err}")
        return
    kept = p["search_check"]["kept"]
    peak = p["strategies"]["layerwise"]["peak_bytes"] / 2**30
    print(f"  --strategy=layerwise keeps {kept}: predicted step "
          f"{p['strategies']['layerwise']['step_s'] * 1e3:.1f} ms, peak arena {peak:.1f} GiB "
          f"per device")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="bubble,vgg16,memory")
    ap.add_argument("--lwcc", default=os.path.join(ROOT, "build", "bin", "lwcc"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for part in args.parts.split(","):
            {"bubble": bubble, "vgg16": vgg16, "memory": memory}[part](args.lwcc, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
