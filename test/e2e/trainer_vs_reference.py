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
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import LWCC, rel_error as rel  # noqa: E402
sys.path.insert(0, os.path.join(harness.ROOT, "tools", "models"))
import zoo  # noqa: E402

TOLERANCE = 1e-4


def safe(name):
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def run(cmd):
    return harness.check_output(cmd).stdout


def check(name, tmp):
    return check_model(zoo.build(name, test_size=True), name, tmp)


def check_model(model, name, tmp, flags=(), write_batch=None, steps=1):
    """`steps` steps of the CPU trainer of `model` (compiled with lwcc
    `flags`) against the reference, on the batch write_batch(model, dir)
    writes (a zoo classifier's by default): the last step's loss, the first
    step's gradients (those --train-reference dumps; a trainer's --dump
    holds its last step's, so they come from a one-step run) and the params
    after the last step. Returns (worst relative error, gradients checked,
    params, reference gradients)."""
    path = os.path.join(tmp, name + ".onnx")
    onnx.save(model, path)
    data = os.path.join(tmp, name + "_data")
    if write_batch:
        write_batch(model, data)
    else:
        harness.write_batch(model, data, 11, raw=True)

    exe = os.path.join(tmp, name + "_trainer")
    run([LWCC, path, *flags, "--emit=exe", "--target=cpu", "-o", exe])
    got = os.path.join(tmp, name + "_got")
    ref = os.path.join(tmp, name + "_ref")
    os.makedirs(got, exist_ok=True)
    run([exe, f"--steps={steps}", f"--data=raw:{data}", f"--dump={got}"])
    got_grads = got
    if steps > 1:
        got_grads = os.path.join(tmp, name + "_got_first")
        os.makedirs(got_grads, exist_ok=True)
        run([exe, "--steps=1", f"--data=raw:{data}", f"--dump={got_grads}"])
    run([LWCC, path, *flags, "--train-reference", "--inputs", data, "--steps", str(steps),
         "--dump", ref])

    def pb(file):
        return numpy_helper.to_array(onnx.load_tensor(os.path.join(ref, file)))

    worst = rel(np.fromfile(os.path.join(got, "output_0.bin"), np.float32),
                pb(f"loss_{steps - 1}.pb").ravel())
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
        have = np.fromfile(os.path.join(got_grads, f"output_{k}.bin"),
                           np.float32).reshape(want.shape)
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


def trainer_case(name, model, tmp, file_name):
    """The case `name`: the CPU trainer of model() against the interpreter,
    its files named file_name in tmp."""
    def check_case():
        worst, checked, nparams, ngrads = check_model(model(), file_name, tmp)
        assert worst < TOLERANCE and checked == ngrads and checked > 0, \
            f"{checked} of {ngrads} gradients checked, worst relative error {worst:.2e}"
        return (f"loss, {checked} gradients and {nparams} params: worst relative error "
                f"{worst:.2e}")
    harness.case(check_case, name)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for name in zoo.REGISTRY:
            trainer_case(name, lambda: zoo.build(name, test_size=True), tmp, name)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
