#!/usr/bin/env python3
"""Generate one model-zoo network as an ONNX file.

  python3 tools/models/gen.py NAME [--size 224] [--channels 3] [--width 1.0]
      [--classes 1000] [--batch 1] [--opset 17] [--seed 0] [--symbolic-batch]
      [--test-size] -o OUT.onnx
  python3 tools/models/gen.py --list

Flags that are not given take the network's full-size default (224x224x3,
1000 classes, batch 1; lenet: 28x28x1, 10 classes), or with --test-size the
network's small test preset; explicit flags override either.  The model is
checked with onnx.checker.check_model(full_check=True) before it is saved.
"""

import argparse
import math
import os
import sys

import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import zoo  # noqa: E402


def _fmt(p):
    return (f"size={p['size']} channels={p['channels']} width={p['width']:g} "
            f"classes={p['classes']} batch={p['batch']}")


def list_nets():
    nets = {**zoo.REGISTRY, **zoo.BENCH_REGISTRY, **zoo.TEST_REGISTRY}
    w = max(map(len, nets))
    for name in nets:
        print(f"{name:<{w}}  min size {zoo.MIN_SIZE[name]:>3}  "
              f"default: {_fmt(zoo.DEFAULTS[name])}")
        print(f"{'':<{w}}  {'':<12}  test:    {_fmt(zoo.TEST_PRESETS[name])}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("name", nargs="?", help="network name (see --list)")
    ap.add_argument("--list", action="store_true", help="list the networks and exit")
    ap.add_argument("--size", type=int, help="input height = width")
    ap.add_argument("--channels", type=int, help="input channels")
    ap.add_argument("--width", type=float, help="channel width multiplier")
    ap.add_argument("--classes", type=int, help="number of classes")
    ap.add_argument("--batch", type=int, help="batch size")
    ap.add_argument("--opset", type=int, default=17, help="ONNX opset (13..%d)" % zoo_max())
    ap.add_argument("--seed", type=int, default=0, help="weight seed")
    ap.add_argument("--symbolic-batch", action="store_true",
                    help="use a symbolic batch dim 'N' instead of --batch")
    ap.add_argument("--test-size", action="store_true",
                    help="start from the network's small test preset")
    ap.add_argument("-o", "--output", help="output .onnx path")
    args = ap.parse_args(argv)

    if args.list:
        list_nets()
        return 0
    if not args.name or not args.output:
        ap.error("NAME and -o OUT.onnx are required (or --list)")
    known = {**zoo.REGISTRY, **zoo.BENCH_REGISTRY, **zoo.TEST_REGISTRY}
    if args.name not in known:
        ap.error(f"unknown network {args.name!r}; known: {', '.join(known)}")
    try:
        model = zoo.build(args.name, test_size=args.test_size, size=args.size,
                          channels=args.channels, width=args.width,
                          classes=args.classes, batch=args.batch, opset=args.opset,
                          seed=args.seed, symbolic_batch=args.symbolic_batch)
    except ValueError as e:
        print(f"gen.py: error: {e}", file=sys.stderr)
        return 1
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, args.output)
    n_params = sum(math.prod(t.dims) for t in model.graph.initializer)
    out = model.graph.output[0].type.tensor_type.shape.dim
    print(f"{args.name}: {len(model.graph.node)} nodes, {n_params} initializer values, "
          f"output [{', '.join(d.dim_param or str(d.dim_value) for d in out)}] "
          f"-> {args.output}")
    return 0


def zoo_max():
    from layers import MAX_OPSET
    return MAX_OPSET


if __name__ == "__main__":
    sys.exit(main())
