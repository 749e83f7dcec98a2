#!/usr/bin/env python3
"""Every parallel strategy computes the step of one device.

For zoo models at test size: `lwcc MODEL --train-reference --steps 5` runs
five training steps of the materialized multi-device training graph on the
reference interpreter (float64, and float32 for two models) with `--gpus N --strategy S`, and the same
steps with `--gpus 1`, on the same seeded batch. The losses of all five
steps must agree within 1e-5 relative, and every param after five steps
(and every first-step gradient) within 1e-4 of its largest element. The
models have dropout (alexnet), batch norm (resnet18, inception) and
upsampling (upnet), and a batch that the devices do not divide evenly is
checked too. Ends with the
line "N passed, M failed".

    python3 test/e2e/parallel_step.py [--models lenet,alexnet] [--strategies hypergraph] [--quick]
"""
import argparse
import os
import sys
import tempfile

import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import ROOT  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "tools", "models"))
import zoo  # noqa: E402

STEPS = 5
LOSS_TOL = 1e-5
PARAM_TOL = 1e-4

# (model, batch, gpus, strategies): every zoo model on 2 and 4 devices; the
# batches are small so that the float64 interpreter stays quick.
CASES = [
    ("lenet", 4, [2, 4], "f64"),
    ("alexnet", 4, [2, 4], "f64"),
    ("alexnet_owt", 4, [2, 4], "f64"),
    ("vgg11", 4, [2, 4], "f64"),
    ("vgg16", 4, [2, 4], "f64"),
    ("resnet18", 4, [2, 4], "f64"),
    ("inception", 4, [2, 4], "f64"),
    # Uneven: 6 samples over 4 devices (2, 2, 1, 1).
    ("lenet", 6, [4], "f64"),
    ("resnet18", 6, [4], "f64"),
    # Float32, as trainers compute: the same step up to rounding.
    ("alexnet", 4, [4], "f32"),
    ("resnet18", 4, [2], "f32"),
    # Upsampling (resize split over samples, channels and, under layerwise,
    # rows and columns with halos), the model collections' activations, stateless
    # batch norm over a sample split.
    ("upnet", 4, [2], "f64"),
]
STRATEGIES = ["data", "model", "owt", "layerwise", "hypergraph"]
# At test size the real presets make layerwise keep almost every op whole on
# one device (launches and latency dominate); this spec makes compute slow
# and links cheap, so that the search splits layers along different dims
# and degrees and materialize has mixed configs to lay out.
LAYERWISE_SPEC = os.path.join(ROOT, "test", "e2e", "Inputs", "slow-compute.json")


def reference(model_path, data, dump, gpus, strategy, precision):
    flags = [f"--precision={precision}", "--lr=0.05"]
    if gpus > 1:
        flags += [f"--gpus={gpus}", f"--strategy={strategy}", "--bucket-bytes=4096"]
        if strategy == "layerwise":
            # The search's own plan, not a uniform one the simulator may prefer.
            flags += [f"--device-spec={LAYERWISE_SPEC}", "--check-search=false"]
    return harness.reference_steps(model_path, data, dump, STEPS, flags)


def compare(base, other):
    return harness.step_problems(base, other, LOSS_TOL, PARAM_TOL)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", help="comma-separated zoo models (default: all cases)")
    ap.add_argument("--quick", action="store_true", help="2 devices only")
    ap.add_argument("--strategies", default=",".join(STRATEGIES),
                    help=f"comma-separated strategies (default: {','.join(STRATEGIES)})")
    args = ap.parse_args()
    strategies = args.strategies.split(",")
    unknown = sorted(set(strategies) - set(STRATEGIES))
    if unknown:
        ap.error(f"unknown strategies: {', '.join(unknown)}")
    cases = CASES
    if args.models:
        keep = set(args.models.split(","))
        cases = [c for c in cases if c[0] in keep]
    with tempfile.TemporaryDirectory() as tmp:
        for name, batch, gpu_counts, precision in cases:
            if args.quick:
                gpu_counts = [g for g in gpu_counts if g == 2] or gpu_counts[:1]
            model = zoo.build(name, test_size=True, batch=batch)
            tag = f"{name}-b{batch}-{precision}"
            path = os.path.join(tmp, tag + ".onnx")
            onnx.save(model, path)
            data = os.path.join(tmp, tag + "-data")
            harness.write_batch(model, data, 5)
            try:
                base = reference(path, data, os.path.join(tmp, tag + "-1"), 1, "data", precision)
            except RuntimeError as e:
                harness.record(False, f"{tag} --gpus 1", str(e))
                continue
            for gpus in gpu_counts:
                for strategy in strategies:
                    label = f"{tag} --gpus {gpus} --strategy={strategy}"
                    try:
                        other = reference(path, data, os.path.join(tmp, f"{tag}-{gpus}-{strategy}"),
                                          gpus, strategy, precision)
                        problems = compare(base, other)
                    except RuntimeError as e:
                        problems = [str(e)]
                    harness.record(not problems, label, "; ".join(problems[:5]),
                                   "" if problems else
                                   f"5 losses and {len(other[1])} tensors agree "
                                   f"(loss {other[0][0]:.6f} -> {other[0][-1]:.6f})")
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
