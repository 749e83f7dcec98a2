#!/usr/bin/env python3
"""Predicted step time of every strategy on the P100 cluster of Jia et al.

For torchvision-shaped AlexNet and VGG-16 (224x224) and Inception-v3
(299x299, the zoo's bench-only inception_v3: torchvision's layer shapes),
with 64 samples per device on --gpus devices (default 16) of
--spec (default p100-cluster): the layer-wise cost function's predicted step
time of layerwise, data, model and owt configs, the speedups over data
parallelism and over the best of data/model/owt, and the search time
(search_s). Runs the passes up to parallelize (lwcc-opt), not the whole
pipeline; gradients priced in lwcc's default 25 MiB all-reduce buckets.
The simulator's figures for the whole step (what lwcc --emit=plan compares,
and what --strategy=layerwise keeps the fastest plan by) come from
`lwcc X.onnx --gpus 16 --device-spec=p100-cluster --emit=plan --plan-json=F`.

    python3 tools/bench/layerwise_p100.py [--gpus 16] [--spec p100-cluster] [--models alexnet]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("LWCC_BIN_DIR") or os.path.join(ROOT, "build", "bin")
MODELS = {"alexnet": 224, "vgg16": 224, "inception_v3": 299}
STRATEGIES = ["layerwise", "data", "model", "owt"]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr[-2000:]}")
    return r.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=16)
    ap.add_argument("--spec", default="p100-cluster")
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    print(f"{'model':<12} {'strategy':<10} {'step_s':>10} {'vs data':>8} {'vs best':>8} search_s")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            onnx_path = os.path.join(tmp, name + ".onnx")
            ir = os.path.join(tmp, name + ".lwir")
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "models", "gen.py"), name,
                            "--size", str(MODELS[name]), "--batch", str(64 * args.gpus),
                            "-o", onnx_path], check=True, capture_output=True)
            subprocess.run([os.path.join(BIN, "lwcc"), onnx_path, "--emit=ir", "-o", ir],
                           check=True, capture_output=True)
            os.remove(onnx_path)
            step, search = {}, None
            for s in STRATEGIES:
                err = run([os.path.join(BIN, "lwcc-opt"), "--canonicalize", "--append-loss",
                           "--train-mode",
                           f"--parallelize={s},gpus={args.gpus},spec={args.spec},report=1,"
                           f"bucket_bytes={25 << 20}",
                           ir, "-o", os.devnull])
                m = re.search(r"predicted step ([0-9.e+-]+) s", err)
                step[s] = float(m.group(1))
                m = re.search(r"search_s ([0-9.]+)", err)
                if m:
                    search = float(m.group(1))
            best = min(step[s] for s in STRATEGIES if s != "layerwise")
            for s in STRATEGIES:
                print(f"{name:<12} {s:<10} {step[s]:>10.4f} {step['data'] / step[s]:>7.2f}x "
                      f"{best / step[s]:>7.2f}x {search if s == 'layerwise' else ''}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
