#!/usr/bin/env python3
"""Every zoo model at test size: lwcc's reference interpreter against onnxruntime.

For each network of tools/models/zoo.py, builds the test-size preset, runs it
in onnxruntime and with `lwcc MODEL --run-reference` (float32) on the same
seeded input, and requires max|lwcc - ort| / max|ort| < 1e-4. Also imports
each model with a symbolic batch through --batch. Ends with the line
"N passed, M failed".
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
sys.path.insert(0, os.path.join(harness.ROOT, "tools", "models"))
import zoo  # noqa: E402

TOLERANCE = 1e-4


def run_one(lwcc, name, tmp, symbolic):
    model = zoo.build(name, test_size=True, symbolic_batch=symbolic)
    path = os.path.join(tmp, f"{name}{'_sym' if symbolic else ''}.onnx")
    onnx.save(model, path)
    inp = model.graph.input[0]
    dims = [d.dim_value if d.HasField("dim_value") else 2 for d in inp.type.tensor_type.shape.dim]
    x = np.random.default_rng(7).standard_normal(dims).astype(np.float32)
    expected = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {inp.name: x})[0]
    ins, outs = os.path.join(tmp, name + "_in"), os.path.join(tmp, name + "_out")
    os.makedirs(ins, exist_ok=True)
    with open(os.path.join(ins, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x).SerializeToString())
    cmd = [lwcc, path, "--run-reference", "--inputs", ins, "--outputs", outs]
    if symbolic:
        cmd.append(f"--batch={dims[0]}")
    r = harness.run(cmd, timeout=300)
    if r.returncode != 0:
        return False, f"lwcc exited {r.returncode}: {r.stderr.strip()}"
    got = numpy_helper.to_array(onnx.load_tensor(os.path.join(outs, "output_0.pb")))
    if got.shape != expected.shape:
        return False, f"shape {got.shape} != onnxruntime's {expected.shape}"
    rel = harness.rel_error(got, expected)
    return rel < TOLERANCE, f"relative error {rel:.2e} (limit {TOLERANCE:.0e})"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lwcc", default=harness.LWCC)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in zoo.REGISTRY:
            for symbolic in (False, True):
                ok, msg = run_one(args.lwcc, name, tmp, symbolic)
                harness.record(ok, name + (" (symbolic batch)" if symbolic else ""), info=msg)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
