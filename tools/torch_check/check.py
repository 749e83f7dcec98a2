#!/usr/bin/env python3
"""lwcc against PyTorch on real torchvision exports (a development check, not CI).

For each model (random weights, 10 classes, batch 2) and exporter:

  export   torch.onnx.export of the model in eval mode:
             torchscript: dynamo=False, opset 17, training=TrainingMode.PRESERVE,
                          do_constant_folding=False (batch norm kept)
             dynamo:      dynamo=True at its default opset, optimize=False (its
                          optimizer folds batch norm into the convolutions even
                          for a model in training mode; --dynamo-optimize keeps it)
  import   lwcc MODEL --emit=train-ir
  forward  lwcc --run-reference against onnxruntime on the same input
           (max|lwcc - ort| / max|ort| < 1e-4)
  train    one SGD step (lr 0.01, momentum 0.9, weight decay 5e-4: lwcc's
           defaults) with lwcc --train-reference --precision=f64 against the
           model in float64 PyTorch, in training mode with dropout and
           stochastic depth off (lwcc draws its own masks): loss within 1e-9
           relative; every gradient within 1e-6 of the largest gradient; every
           updated param and batch norm running statistic within 1e-6 (relative
           to the tensor's largest element where that is above 1)

and prints one table row per export. Exit status 1 if any row failed.
`--set zoo` checks the models of zoo.py (timm's and a few written there)
instead of torchvision's.

    /work/venv-torch/bin/python tools/torch_check/check.py --lwcc build/bin/lwcc \\
        [--set torchvision|zoo] [--models resnet18 ...] [--exporter torchscript|dynamo|both]
        [--keep DIR]
"""
import argparse
import copy
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402

MODELS = ["resnet18", "resnet50", "googlenet", "inception_v3", "mobilenet_v2", "densenet121",
          "shufflenet_v2_x1_0", "efficientnet_b0", "regnet_y_400mf", "squeezenet1_0", "alexnet",
          "vgg11", "convnext_tiny"]
# Input sizes where 64x64 is too small: inception_v3's stem needs 75; alexnet
# and vgg11 end in an adaptive average pool that the TorchScript exporter
# only takes when its input is a multiple of the output (6x6, 7x7).
SIZE = {"inception_v3": 75, "alexnet": 224, "vgg11": 224}
NUM_CLASSES = 10
BATCH = 2
FORWARD_TOL = 1e-4
LOSS_TOL = 1e-9
GRAD_TOL = 1e-6
PARAM_TOL = 1e-6
LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 5e-4


def build_model(torch, torchvision, name):
    if name in zoo.MODELS or name in zoo.SWEEP:
        return zoo.build(torch, torchvision, name)
    torch.manual_seed(0)
    kw = {"num_classes": NUM_CLASSES}
    if name in ("googlenet", "inception_v3"):
        kw.update(aux_logits=False, init_weights=True)
    return getattr(torchvision.models, name)(**kw)


def export(torch, model, x, path, exporter, dynamo_optimize):
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17,
                              training=torch.onnx.TrainingMode.PRESERVE,
                              do_constant_folding=False, input_names=["input"],
                              output_names=["logits"])
        else:
            torch.onnx.export(model, (x,), path, dynamo=True, optimize=dynamo_optimize,
                              input_names=["input"], output_names=["logits"])


def write_tensor(onnx_mod, numpy_helper, array, path):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array).SerializeToString())


def lwcc(binary, args, timeout):
    r = subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout)
    text = (r.stderr.strip() or r.stdout.strip()).splitlines()
    return r.returncode, text


def first_error(lines):
    """lwcc's first error line, without the model's path and the list of
    supported ops."""
    line = next((ln for ln in lines if "error" in ln), lines[-1] if lines else "").strip()
    if ": error: " in line:
        line = line[line.index(": error: ") + 2:]
    return line.split("; supported: ")[0]


def torch_step(torch, model, x, labels):
    """One SGD step of `model` in float64; returns loss, grads, params, buffers."""
    m = copy.deepcopy(model).double()
    m.train()
    # lwcc draws its own dropout masks (and an eval-mode export has none):
    # compare the step without them.
    for mod in m.modules():
        cls = type(mod).__name__
        if cls.startswith("Dropout") or cls in ("StochasticDepth", "AlphaDropout", "DropPath",
                                                 "DropBlock2d"):
            mod.eval()
    opt = torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    opt.zero_grad()
    logits = m(torch.from_numpy(x).double())
    loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(labels))
    loss.backward()
    grads = {n: p.grad.detach().numpy().copy() for n, p in m.named_parameters()}
    opt.step()
    params = {n: p.detach().numpy().copy() for n, p in m.named_parameters()}
    stats = {n: b.detach().numpy().copy() for n, b in m.named_buffers()
             if n.endswith(("running_mean", "running_var"))}
    return float(loss), grads, params, stats


def safe(name):
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def compare_step(onnx_mod, numpy_helper, dump, initial, loss, grads, params, stats):
    """Returns (ok, cells, note) for lwcc's dump against PyTorch's step."""
    def load(f):
        return numpy_helper.to_array(onnx_mod.load_tensor(os.path.join(dump, f))).astype(
            np.float64)

    got_loss = float(load("loss_0.pb"))
    loss_err = abs(got_loss - loss) / max(abs(loss), 1e-300)
    files = set(os.listdir(dump))
    missing = []

    def worst(tensors, prefix, scale):
        """(the largest error, its tensor's name) of the dump's PREFIX_NAME.pb
        against each (name, PyTorch's tensor) of `tensors`, the error relative
        to scale(tensor); a file the dump lacks goes to `missing`."""
        out = (0.0, "")
        for n, t in tensors:
            f = f"{prefix}_{safe(n)}.pb"
            if f not in files:
                missing.append(f)
                continue
            got = load(f)
            s = scale(t)
            err = float(np.max(np.abs(got - t))) / s if got.shape == t.shape else np.inf
            out = max(out, (err, n))
        return out

    gmax = max(float(np.max(np.abs(g))) for g in grads.values())
    worst_grad = worst(grads.items(), "grad", lambda g: gmax)
    worst_param = worst([*params.items(), *stats.items()], "param",
                        lambda w: max(float(np.max(np.abs(w))), 1.0))
    # lwcc params that are no PyTorch state: exporter constants lwcc must not train.
    known = {f"param_{safe(n)}.pb" for n in list(params) + list(stats)}
    moved = []
    for f in sorted(files):
        if f.startswith("param_") and f not in known:
            name = f[len("param_"):-len(".pb")]
            if name in initial and not np.array_equal(load(f), initial[name]):
                moved.append(name)
    ok = (loss_err <= LOSS_TOL and worst_grad[0] <= GRAD_TOL and worst_param[0] <= PARAM_TOL
          and not missing and not moved)
    notes = []
    if loss_err > LOSS_TOL:
        notes.append(f"loss {got_loss!r} vs PyTorch's {loss!r}")
    if missing:
        notes.append(f"{len(missing)} missing in the dump, e.g. {missing[0]}")
    if moved:
        notes.append(f"{len(moved)} non-PyTorch params changed, e.g. {moved[0]}")
    if worst_grad[0] > GRAD_TOL:
        notes.append(f"worst grad {worst_grad[1]}")
    if worst_param[0] > PARAM_TOL:
        notes.append(f"worst param {worst_param[1]}")
    cells = (f"{loss_err:.1e}", f"{worst_grad[0]:.1e}", f"{worst_param[0]:.1e}")
    return ok, cells, "; ".join(notes)


def check_one(args, mods, name, exporter, work):
    torch, torchvision, onnx_mod, numpy_helper, ort = mods
    row = {"model": name, "exporter": exporter, "import": "-", "forward": "-", "loss": "-",
           "grad": "-", "param": "-", "ok": False, "note": ""}
    size = SIZE.get(name, zoo.SIZE.get(name, 64))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((BATCH, 3, size, size)).astype(np.float32)
    labels = rng.integers(0, NUM_CLASSES, size=BATCH).astype(np.int64)
    model = build_model(torch, torchvision, name)
    path = os.path.join(work, f"{name}-{exporter}.onnx")
    try:
        export(torch, model, torch.from_numpy(x), path, exporter, args.dynamo_optimize)
    except Exception as e:  # noqa: BLE001 - the exporter's own failure is a row
        row["note"] = f"export failed: {type(e).__name__}: {str(e).splitlines()[0][:150]}"
        return row
    ins = os.path.join(work, f"{name}-{exporter}-in")
    os.makedirs(ins, exist_ok=True)
    write_tensor(onnx_mod, numpy_helper, x, os.path.join(ins, "input_0.pb"))
    write_tensor(onnx_mod, numpy_helper, labels, os.path.join(ins, "input_1.pb"))

    rc, out = lwcc(args.lwcc, [path, "--emit=train-ir", "-o", os.devnull], args.timeout)
    row["import"] = "ok" if rc == 0 else "FAIL"
    warning = next((ln for ln in out if "warning" in ln), "")
    if rc != 0:
        row["note"] = first_error(out)
        return row

    outs = os.path.join(work, f"{name}-{exporter}-out")
    rc, out = lwcc(args.lwcc, [path, "--run-reference", "--inputs", ins, "--outputs", outs],
                   args.timeout)
    if rc != 0:
        row["forward"] = "FAIL"
        row["note"] = first_error(out)
        return row
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    got = numpy_helper.to_array(onnx_mod.load_tensor(os.path.join(outs, "output_0.pb")))
    fwd = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30)) \
        if got.shape == want.shape else np.inf
    row["forward"] = f"{fwd:.1e}"

    dump = os.path.join(work, f"{name}-{exporter}-dump")
    rc, out = lwcc(args.lwcc, [path, "--train-reference", "--inputs", ins, "--steps", "1",
                               "--dump", dump, "--precision=f64"], args.timeout)
    if rc != 0:
        row["loss"] = "FAIL"
        row["note"] = first_error(out)
        return row
    graph = onnx_mod.load(path, load_external_data=True).graph
    initial = {safe(t.name): numpy_helper.to_array(t).astype(np.float64)
               for t in graph.initializer}
    loss, grads, params, stats = torch_step(torch, model, x, labels)
    ok, cells, note = compare_step(onnx_mod, numpy_helper, dump, initial, loss, grads, params,
                                   stats)
    row["loss"], row["grad"], row["param"] = cells
    row["ok"] = ok and fwd < FORWARD_TOL
    notes = [n for n in (note, "forward differs" if fwd >= FORWARD_TOL else "",
                         "lwcc warned: " + warning if warning else "") if n]
    row["note"] = "; ".join(notes)
    return row


def table(rows, cols, last, below=None, clip=True):
    """Prints `rows` (dicts with "ok"; the result column PASS or FAIL) under a
    header: the columns `cols` ((key, width); a cell cut to its width where
    `clip`), then the key `last` unpadded, and the key `below`, where given
    and not empty, on a line of its own under the first column; then the
    counts passed and failed."""
    head = " ".join(f"{c:<{w}}" for c, w in cols) + " " + last
    print(head)
    print("-" * len(head))
    for r in rows:
        vals = dict(r, result="PASS" if r["ok"] else "FAIL")
        print(" ".join(f"{str(vals[c])[:w if clip else None]:<{w}}" for c, w in cols) + " " +
              r[last])
        if below and r[below]:
            print(" " * (cols[0][1] + 1) + r[below])
    passed = sum(r["ok"] for r in rows)
    print(f"{passed} passed, {len(rows) - passed} failed")


def print_table(rows):
    width = max([18] + [len(r["model"]) for r in rows])
    cols = [("model", width), ("exporter", 11), ("import", 6), ("forward", 8), ("loss", 8),
            ("grad", 8), ("param", 8), ("result", 6)]
    table(rows, cols, "note")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lwcc", default="build/bin/lwcc")
    ap.add_argument("--set", choices=["torchvision", "zoo", "sweep"], default="torchvision",
                    help="the models checked by default: torchvision's, zoo.py's, or zoo.py's "
                    "sweep of today's timm families")
    ap.add_argument("--models", nargs="+", metavar="MODEL",
                    help="model names of the set (default: all of it; torchvision: " +
                    ", ".join(MODELS) + "; zoo: " + ", ".join(zoo.MODELS) + "; sweep: " +
                    ", ".join(zoo.SWEEP) + ")")
    ap.add_argument("--exporter", choices=["torchscript", "dynamo", "both"], default="both")
    ap.add_argument("--dynamo-optimize", action="store_true",
                    help="let the dynamo exporter run its optimizer (which folds batch norm)")
    ap.add_argument("--keep", metavar="DIR", help="write the exports and dumps into DIR")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per lwcc run")
    args = ap.parse_args()
    args.lwcc = os.path.abspath(args.lwcc)
    if not args.models:
        args.models = {"zoo": zoo.MODELS, "sweep": zoo.SWEEP}.get(args.set, MODELS)
    if not os.path.isfile(args.lwcc):
        print(f"check.py: no lwcc at {args.lwcc} (build first, or give --lwcc)", file=sys.stderr)
        return 2
    try:
        import onnx as onnx_mod
        import onnxruntime as ort
        import torch
        import torchvision
        from onnx import numpy_helper
    except ImportError as e:
        print(f"check.py: {e}; run it with the PyTorch venv (see tools/torch_check/README.md)",
              file=sys.stderr)
        return 2
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    mods = (torch, torchvision, onnx_mod, numpy_helper, ort)
    exporters = ["torchscript", "dynamo"] if args.exporter == "both" else [args.exporter]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or tmp
        os.makedirs(work, exist_ok=True)
        for name in args.models:
            for exporter in exporters:
                t0 = time.time()
                try:
                    row = check_one(args, mods, name, exporter, work)
                except Exception as e:  # noqa: BLE001 - report the row, go on
                    row = {"model": name, "exporter": exporter, "import": "-", "forward": "-",
                           "loss": "-", "grad": "-", "param": "-", "ok": False,
                           "note": f"{type(e).__name__}: {str(e).splitlines()[0][:150]}"}
                rows.append(row)
                print(f"[{time.time() - t0:6.1f} s] {name} {exporter}: "
                      f"{'PASS' if row['ok'] else 'FAIL'} {row['note']}", flush=True)
    print()
    print_table(rows)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
