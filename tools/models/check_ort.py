#!/usr/bin/env python3
"""Check every model-zoo network in ONNX tooling and onnxruntime.

For each registered network (at its test-size preset by default): build it,
run strict ONNX shape inference and compare the inferred output shape with the
declared one, run onnx.checker.check_model(full_check=True), run one forward
pass in onnxruntime (CPU) on a seeded standard-normal input, and check that
the output has shape [batch, classes] and is finite.  Prints one line per
model; exits 1 if any model fails.

  python3 tools/models/check_ort.py [--opset 17] [--seed 0] [--symbolic-batch]
      [--nets lenet,resnet18] [--real] [--min-sizes] [--out-dir DIR]

--real       check the full-size configurations instead (224x224, and 56x56
             with 200 classes for the Tiny-ImageNet nets; 28x28x1 for lenet);
             alexnet/alexnet_owt at 56 are expected to be rejected (min 63).
--min-sizes  check that each net builds and runs at zoo.MIN_SIZE (test width,
             batch 1), that MIN_SIZE - 1 raises ValueError, and (label
             ending in '*') that it is also rejected by the per-layer
             geometry check with the up-front check disabled (MIN_SIZE is
             tight).
--out-dir    save NAME.onnx, NAME.input.npy/.bin and NAME.output.npy/.bin
             (raw little-endian float32, C order) for comparing other
             implementations (e.g. lwcc's reference interpreter) against ORT.
"""

import argparse
import math
import os
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import zoo  # noqa: E402

# (label, net, overrides, expect_error) for --real.
REAL_CONFIGS = [("lenet@28", "lenet", dict(size=28), False)]
for _n in zoo.REGISTRY:
    if _n != "lenet":
        REAL_CONFIGS.append((f"{_n}@224", _n, dict(size=224), False))
for _n in ("alexnet", "alexnet_owt", "vgg11", "vgg16", "resnet18", "inception"):
    REAL_CONFIGS.append((f"{_n}@56", _n, dict(size=56, classes=200),
                         zoo.MIN_SIZE[_n] > 56))


def _dims(vi):
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


def check_model(model, batch, seed, run_batch=None):
    """Returns (output array, info dict); raises on any failure."""
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True,
                                                 strict_mode=True, data_prop=True)
    declared, got = _dims(model.graph.output[0]), _dims(inferred.graph.output[0])
    if declared != got:
        raise AssertionError(f"inferred output shape {got} != declared {declared}")
    onnx.checker.check_model(model, full_check=True)

    in_dims = _dims(model.graph.input[0])
    n = run_batch if isinstance(in_dims[0], str) else in_dims[0]
    shape = (n or batch, *in_dims[1:])
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    t0 = time.perf_counter()
    (y,) = sess.run(None, {model.graph.input[0].name: x})
    ms = (time.perf_counter() - t0) * 1e3
    classes = declared[1]
    if y.shape != (shape[0], classes):
        raise AssertionError(f"ORT output shape {y.shape} != {(shape[0], classes)}")
    if not np.all(np.isfinite(y)):
        raise AssertionError("ORT output is not finite")
    params = sum(math.prod(t.dims) for t in model.graph.initializer)
    return x, y, dict(nodes=len(model.graph.node), params=params, ms=ms)


def _line(label, x, y, info):
    return (f"{label:<16} ok  input {str(tuple(x.shape)):<18} -> output "
            f"{str(tuple(y.shape)):<10} nodes {info['nodes']:>4}  "
            f"init values {info['params']:>10}  ort {info['ms']:8.1f} ms  "
            f"mean|y| {float(np.abs(y).mean()):.4g}")


def _save(out_dir, name, model, x, y):
    os.makedirs(out_dir, exist_ok=True)
    onnx.save(model, os.path.join(out_dir, f"{name}.onnx"))
    for tag, a in (("input", x), ("output", y)):
        np.save(os.path.join(out_dir, f"{name}.{tag}.npy"), a)
        a.astype("<f4").tofile(os.path.join(out_dir, f"{name}.{tag}.bin"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--seed", type=int, default=0, help="weight and input seed")
    ap.add_argument("--symbolic-batch", action="store_true")
    ap.add_argument("--nets", help="comma-separated subset of networks")
    ap.add_argument("--real", action="store_true", help="check full-size configs")
    ap.add_argument("--min-sizes", action="store_true", help="check zoo.MIN_SIZE")
    ap.add_argument("--out-dir", help="save models, inputs and ORT outputs here")
    args = ap.parse_args(argv)

    nets = args.nets.split(",") if args.nets else list(zoo.REGISTRY)
    unknown = [n for n in nets if n not in zoo.REGISTRY]
    if unknown:
        ap.error(f"unknown network(s) {unknown}; known: {', '.join(zoo.REGISTRY)}")
    common = dict(opset=args.opset, seed=args.seed, symbolic_batch=args.symbolic_batch)

    if args.real:
        jobs = [(lbl, n, dict(ov, batch=1), err) for lbl, n, ov, err in REAL_CONFIGS
                if n in nets]
        test_size = False
    elif args.min_sizes:
        jobs = []
        for n in nets:
            m = zoo.MIN_SIZE[n]
            jobs.append((f"{n}@{m}", n, dict(size=m, batch=1), False))
            if m > 1:
                # Rejected by the up-front check, and (tightness) also by the
                # per-layer geometry check when the up-front check is off.
                jobs.append((f"{n}@{m - 1}", n, dict(size=m - 1, batch=1), True))
                jobs.append((f"{n}@{m - 1}*", n, dict(size=m - 1, batch=1), True))
        test_size = True
    else:
        jobs = [(n, n, {}, False) for n in nets]
        test_size = True

    failed = 0
    for label, name, ov, expect_error in jobs:
        saved_min = zoo.MIN_SIZE[name]
        if label.endswith("*"):
            zoo.MIN_SIZE[name] = 1
        try:
            model = zoo.build(name, test_size=test_size, **common, **ov)
        except ValueError as e:
            if expect_error:
                print(f"{label:<16} ok  rejected as expected: {e}")
            else:
                print(f"{label:<16} FAIL build: {e}")
                failed += 1
            continue
        finally:
            zoo.MIN_SIZE[name] = saved_min
        if expect_error:
            print(f"{label:<16} FAIL expected a ValueError, but it built")
            failed += 1
            continue
        try:
            batch = (zoo.TEST_PRESETS if test_size else zoo.DEFAULTS)[name]["batch"]
            batch = ov.get("batch", batch)
            x, y, info = check_model(model, batch, args.seed, run_batch=batch)
        except Exception as e:  # noqa: BLE001 - report and continue
            print(f"{label:<16} FAIL {type(e).__name__}: {e}")
            failed += 1
            continue
        print(_line(label, x, y, info), flush=True)
        if args.out_dir:
            _save(args.out_dir, label.replace("@", "_"), model, x, y)
        del model
    print(f"{len(jobs) - failed}/{len(jobs)} passed (opset {args.opset}"
          f"{', symbolic batch' if args.symbolic_batch else ''})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
