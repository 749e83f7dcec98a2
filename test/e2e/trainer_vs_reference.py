#!/usr/bin/env python3
"""The compiled CPU trainer against lwcc's reference interpreter.

For every zoo model at test size: `lwcc MODEL --emit=exe` builds the trainer
(generated C++ on the CPU runtime), which runs one training step on a seeded
batch; `lwcc MODEL --train-reference` runs the same step on the interpreter.
The loss, every gradient and every updated param must agree within a
relative error of 1e-4 (max |a - b| / max |b|, float32). A gradient whose
largest element is below 1e-3 of the model's largest gradient element (a
bias feeding a batch norm, say, is zero up to rounding) is compared against
that floor instead of its own size; a scalar param's gradient (a sum over a
whole tensor, whose rounding follows its terms, not their sum) against ten
times that floor. Ends with the line "N passed, M failed".
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "models"))
import zoo  # noqa: E402

LWCC = os.path.join(ROOT, "build", "bin", "lwcc")
TOLERANCE = 1e-4


def safe(name):
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def rel(a, b, floor=1e-30):
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), floor))


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}... exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def check(name, tmp):
    return check_model(zoo.build(name, test_size=True), name, tmp)


def check_model(model, name, tmp):
    """One step of the CPU trainer of `model` against the reference; returns
    (worst relative error, gradients checked, params, reference gradients)."""
    path = os.path.join(tmp, name + ".onnx")
    onnx.save(model, path)
    inp = model.graph.input[0]
    dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    classes = model.graph.output[0].type.tensor_type.shape.dim[1].dim_value
    rng = np.random.default_rng(11)
    x = rng.standard_normal(dims).astype(np.float32)
    y = rng.integers(0, classes, size=dims[0]).astype(np.int64)
    data = os.path.join(tmp, name + "_data")
    os.makedirs(data, exist_ok=True)
    for k, arr in enumerate([x, y]):
        with open(os.path.join(data, f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(arr).SerializeToString())
        arr.tofile(os.path.join(data, f"input_{k}.bin"))

    exe = os.path.join(tmp, name + "_trainer")
    run([LWCC, path, "--emit=exe", "--target=cpu", "-o", exe])
    got = os.path.join(tmp, name + "_got")
    ref = os.path.join(tmp, name + "_ref")
    os.makedirs(got, exist_ok=True)
    run([exe, "--steps=1", f"--data=raw:{data}", f"--dump={got}"])
    run([LWCC, path, "--train-reference", "--inputs", data, "--steps", "1", "--dump", ref])

    def pb(file):
        return numpy_helper.to_array(onnx.load_tensor(os.path.join(ref, file)))

    worst = rel(np.fromfile(os.path.join(got, "output_0.bin"), np.float32), pb("loss_0.pb").ravel())
    grads = sorted(f for f in os.listdir(ref) if f.startswith("grad_"))
    params = sorted(f for f in os.listdir(ref) if f.startswith("param_"))
    checked = 0
    order = [i.name for i in model.graph.initializer]
    grad_names = [n for n in order if os.path.exists(os.path.join(ref, f"grad_{safe(n)}.pb"))]
    # Output k (k >= 1) is the gradient of the k-th param with a gradient, in
    # the graph's param order, which lwcc keeps sorted by initializer name.
    pairs = []
    for k, n in enumerate(sorted(grad_names), start=1):
        want = pb(f"grad_{safe(n)}.pb")
        have = np.fromfile(os.path.join(got, f"output_{k}.bin"), np.float32).reshape(want.shape)
        pairs.append((have, want))
    floor = 1e-3 * max((float(np.max(np.abs(w))) for _, w in pairs), default=0.0)
    for have, want in pairs:
        # A scalar param's gradient sums a whole tensor's products: its
        # rounding follows the size of those terms, not of their (possibly
        # cancelling) sum, so its floor is ten times higher.
        worst = max(worst, rel(have, want, floor * (10 if want.size == 1 else 1)))
        checked += 1
    for f in params:
        want = pb(f)
        have = np.fromfile(os.path.join(got, f.replace(".pb", ".bin")), np.float32)
        worst = max(worst, rel(have.reshape(want.shape), want))
    return worst, checked, len(params), len(grads)


def main():
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in zoo.REGISTRY:
            try:
                worst, checked, nparams, ngrads = check(name, tmp)
                ok = worst < TOLERANCE and checked == ngrads and checked > 0
                msg = (f"loss, {checked} gradients and {nparams} params: worst relative error "
                       f"{worst:.2e}")
            except Exception as e:  # noqa: BLE001 - report and count it
                ok, msg = False, str(e)
            print(f"{'PASS' if ok else 'FAIL'}: {name:12s} {msg}")
            passed += ok
            failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
