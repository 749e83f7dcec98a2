#!/usr/bin/env python3
"""torch.onnx.export patterns for torchvision classifiers, without torch.

lwcc must import what real exporters write for torchvision's alexnet,
vgg11/16, resnet18/50, googlenet, inception_v3, squeezenet1_0, mobilenet_v2
and densenet121: the TorchScript exporter at opset 17 and the dynamo
exporter at opset 18.  torchvision_graphs.py rebuilds those graphs node for
node with exporter_graphs.py's onnx.helper Builder (small widths and inputs;
the node patterns, attributes, constant forms and naming are the exporters';
see its docstring);
zoo_graphs.py the blocks of timm's networks and torchvision's segmentation
networks (hard activations, upsampling, stateless batch norm, the other
activations); encoding_graphs.py the position encodings and normalized
attention of small vision transformers (CumSum, Tile, Mod, Sin, Cos, the norm
reductions).

For each graph: onnx.checker, onnxruntime and `lwcc --run-reference` on the
same seeded input (batch 2; symbolic batch dims are fixed with --batch=2),
requiring max|lwcc - ort| / max|ort| < 1e-4, and `lwcc --emit=ir` must
succeed (and `--emit=train-ir` for the cases marked train: the exports with
batch norm kept, whose deduplicated initializers lwcc splits per layer).  One line per graph; ends with "N passed, M failed"; exit 1 on a
failure.  A case marked XFAIL records a known lwcc gap: it passes the script
when it fails as recorded ("XFAIL") and is reported as "XPASS" (still
counted as passed) once lwcc handles it, so the mark can be removed.
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import torchvision_graphs as tv  # noqa: E402
from exporter_graphs import Builder  # noqa: E402
import dynamo_graphs as dg  # noqa: E402
import zoo_graphs as zg  # noqa: E402
import encoding_graphs as encg  # noqa: E402
import harness  # noqa: E402

TOLERANCE = 1e-4
BATCH = 2


def case(label, fn, style, chw, *, sym=True, scoped=False, init_inputs=False, legacy=False,
         bn_kept=None, train=False, frozen=(), xfail=None, make=Builder, opset=None, **kw):
    """make: the Builder class (dynamo_graphs.DecompBuilder for the dynamo
    exporter's adaptive-pool decomposition); opset: the Builder's default
    when None; train: also `lwcc --emit=train-ir` must build the training
    step; frozen: params that the training step must keep frozen)."""
    return dict(label=label, fn=fn, style=style, chw=chw, sym=sym, scoped=scoped,
                init_inputs=init_inputs, legacy=legacy, bn_kept=bn_kept, train=train,
                frozen=frozen,
                xfail=xfail, make=make, opset=opset, kw=kw)


def raw_decomp(*a, **kw):
    """A DecompBuilder for torch.onnx.export(..., dynamo=True, optimize=False)."""
    return dg.DecompBuilder(*a, raw=True, **kw)


IMG = lambda s: (3, s, s)  # noqa: E731

CASES = [
    # ---------------- TorchScript exporter, opset 17, dynamic 'batch_size'
    case("ts17/alexnet", tv.alexnet, "ts", IMG(99)),
    case("ts17/alexnet view+Dropout", tv.alexnet, "ts", IMG(99), flat="view", drop="node"),
    case("ts17/vgg11", tv.vgg, "ts", IMG(64), cfg="vgg11"),
    case("ts17/vgg16 Dropout(x)", tv.vgg, "ts", IMG(64), cfg="vgg16", drop="plain"),
    case("ts17/resnet18", tv.resnet18, "ts", IMG(32)),
    case("ts17/resnet50", tv.resnet50, "ts", IMG(32)),
    case("ts17/resnet18 view", tv.resnet18, "ts", IMG(32), flat="view"),
    case("ts17/googlenet", tv.googlenet, "ts", IMG(64)),
    case("ts17/inception_v3", tv.inception_v3, "ts", IMG(75)),
    case("ts17/squeezenet1_0", tv.squeezenet1_0, "ts", IMG(63)),
    case("ts17/squeezenet1_0 Dropout", tv.squeezenet1_0, "ts", IMG(63), drop="node"),
    case("ts17/mobilenet_v2", tv.mobilenet_v2, "ts", IMG(32)),
    case("ts17/mobilenet_v2 mean", tv.mobilenet_v2, "ts", IMG(32), pool="mean"),
    case("ts17/densenet121", tv.densenet121, "ts", IMG(32)),
    # torch 1.13-2.0 at opset 17: avg_pool2d via the opset-11 symbolic
    case("ts17/inception_v3 Pad+AveragePool", tv.inception_v3, "ts", IMG(75), legacy=True),
    case("ts17/densenet121 AveragePool(cip=0)", tv.densenet121, "ts", IMG(32), legacy=True),
    case("ts17/AvgPool2d(3,2,1) Pad+AveragePool", tv.avgpool_probe, "ts", IMG(9),
         legacy=True, count_include_pad=1),
    case("ts17/AvgPool2d(3,2,1) cip=1", tv.avgpool_probe, "ts", IMG(9), count_include_pad=1),
    case("ts17/AvgPool2d(3,2,1) cip=0", tv.avgpool_probe, "ts", IMG(9), count_include_pad=0),
    case("ts17/AvgPool2d(3,2,1,ceil) cip=0", tv.avgpool_probe, "ts", IMG(10),
         count_include_pad=0, ceil=1),
    case("ts17/resnet18 static batch", tv.resnet18, "ts", IMG(32), sym=False),
    case("ts17/resnet18 initializers as inputs", tv.resnet18, "ts", IMG(32),
         init_inputs=True),
    # eval mode with training=PRESERVE, do_constant_folding=False: batch norm
    # kept, equal initializers deduplicated (through Identity nodes, or read
    # directly); the training step needs one param per layer.
    case("ts17/resnet18 BN kept, dedup via Identity", tv.resnet18, "ts", IMG(32),
         bn_kept="identity", train=True),
    case("ts17/densenet121 BN kept, dedup via Identity", tv.densenet121, "ts", IMG(32),
         bn_kept="identity", train=True),
    case("ts17/mobilenet_v2 BN kept, dedup read directly", tv.mobilenet_v2, "ts", IMG(32),
         bn_kept="direct", train=True),
    # ---------------- dynamo exporter, opset 18
    case("dyn18/alexnet static", tv.alexnet, "dyn", IMG(99), sym=False, drop="identity"),
    case("dyn18/alexnet MatMul+Add", tv.alexnet, "dyn", IMG(99), lin="matmul"),
    case("dyn18/vgg11", tv.vgg, "dyn", IMG(64), cfg="vgg11"),
    case("dyn18/vgg16 Transpose+Gemm", tv.vgg, "dyn", IMG(64), cfg="vgg16", lin="tgemm",
         flat="minus1"),
    case("dyn18/resnet18 scoped names", tv.resnet18, "dyn", IMG(32), scoped=True),
    case("dyn18/resnet18 static", tv.resnet18, "dyn", IMG(32), sym=False),
    case("dyn18/resnet50", tv.resnet50, "dyn", IMG(32), lin="matmul"),
    case("dyn18/googlenet", tv.googlenet, "dyn", IMG(64), drop="identity"),
    case("dyn18/inception_v3 Split+Cast", tv.inception_v3, "dyn", IMG(75), transform="split"),
    case("dyn18/inception_v3", tv.inception_v3, "dyn", IMG(75), sym=False),
    case("dyn18/squeezenet1_0", tv.squeezenet1_0, "dyn", IMG(63)),
    case("dyn18/mobilenet_v2", tv.mobilenet_v2, "dyn", IMG(32)),
    case("dyn18/mobilenet_v2 static", tv.mobilenet_v2, "dyn", IMG(32), sym=False,
         drop="identity"),
    case("dyn18/densenet121", tv.densenet121, "dyn", IMG(32), scoped=True),
    case("dyn18/AvgPool2d(3,2,1,ceil) cip=1", tv.avgpool_probe, "dyn", IMG(10),
         count_include_pad=1, ceil=1),
    # max_pool2d_with_indices lowered by onnxscript's torchlib (torch 2.1-2.4
    # dynamo_export) is a MaxPool with a second, unused Indices output: lwcc
    # imports it, since nothing reads Indices.
    case("dyn18/MaxPool with unused Indices output", tv.maxpool_indices_probe, "dyn", IMG(32)),
    # ---------------- dynamo exporter (torch 2.9+), opset 20 and 18
    # adaptive_avg_pool2d to a size the map does not divide: GatherND over
    # torch's window indices (dynamo_graphs.py); optimized, and raw
    # (optimize=False: Range, Floor/Sign, CastLike, Min/Max, GreaterOrEqual).
    case("dyn20/alexnet@64 pool 1->6 GatherND+ReduceMean", tv.alexnet, "dyn", IMG(64),
         pool_target=6, make=dg.DecompBuilder, opset=20),
    case("dyn20/alexnet@64 pool 1->6 unoptimized", tv.alexnet, "dyn", IMG(64), pool_target=6,
         make=raw_decomp, opset=20),
    case("dyn20/vgg11@64 pool 2->7 GatherND+Where", tv.vgg, "dyn", IMG(64), cfg="vgg11",
         pool_target=7, make=dg.DecompBuilder, opset=20),
    case("dyn20/vgg11@64 pool 2->7 unoptimized", tv.vgg, "dyn", IMG(64), cfg="vgg11",
         pool_target=7, make=raw_decomp, opset=20),
    case("dyn18/alexnet@99 pool 2->3 unoptimized", tv.alexnet, "dyn", IMG(99), pool_target=3,
         make=raw_decomp),
    # ConvNeXt: LayerNormalization over channels last, MatMul+Add, Gelu
    # (opset 20) or its Erf form (opset 18), layer_scale Mul.
    case("dyn20/convnext Gelu", dg.convnext, "dyn", IMG(32), sym=False, opset=20,
         make=dg.DecompBuilder),
    case("dyn18/convnext Erf", dg.convnext, "dyn", IMG(32), opset=18, make=dg.DecompBuilder),
    # ---------------- today's model collections (zoo_graphs.py)
    case("ts17/mobilenetv3 HardSwish, SE HardSigmoid", zg.hard_block, "ts", IMG(16),
         bn_kept="identity", train=True),
    case("dyn20/mobilenetv3 HardSwish, SE HardSigmoid", zg.hard_block, "dyn", IMG(16), sym=False,
         opset=20, train=True),
    case("ts17/hrnet fuse Resize nearest 2x", zg.hrnet_fuse, "ts", IMG(16), bn_kept="identity",
         train=True),
    case("dyn20/hrnet fuse Resize nearest 2x", zg.hrnet_fuse, "dyn", IMG(16), sym=False, opset=20,
         train=True),
    case("ts17/unet Resize nearest, bilinear, align_corners", zg.unet_up, "ts", IMG(16),
         bn_kept="identity", train=True),
    case("dyn20/unet Resize nearest, bilinear, align_corners", zg.unet_up, "dyn", IMG(16),
         sym=False, opset=20, train=True),
    case("ts17/nf_resnet StdConv BN training_mode=1", zg.nf_stdconv, "ts", IMG(16), train=True),
    case("dyn20/nf_resnet StdConv BN of batch moments", zg.nf_stdconv, "dyn", IMG(16), sym=False,
         opset=20, train=True),
    case("ts17/cspdarknet LeakyRelu, zero batch norm", zg.csp_leaky, "ts", IMG(16),
         bn_kept="identity", train=True),
    case("dyn20/cspdarknet LeakyRelu, zero batch norm", zg.csp_leaky, "dyn", IMG(16), sym=False,
         opset=20, train=True),
    case("ts17/Elu Selu Celu Softplus Softsign PRelu Clip", zg.acts, "ts", IMG(16),
         bn_kept="identity", train=True),
    case("dyn20/Elu Selu Celu Mish Softsign PRelu Clip Softplus-Where", zg.acts, "dyn", IMG(16),
         sym=False,
         opset=20, train=True),
    case("ts9/Upsample nearest", zg.upsample9, "ts", IMG(8), opset=9, train=True),
    case("ts17/GroupNorm bicubic ThresholdedRelu", zg.groupnorm_bicubic, "ts", IMG(8),
         train=True),
    # ---------------- position encodings and normalized attention
    # (encoding_graphs.py): CumSum, Sin/Cos, Tile over the batch, Mod folded
    # on index arithmetic, ReduceL2/L1/SumSquare
    case("ts17/pos-encoding CumSum Sin Cos Tile Mod ReduceL2", encg.encoding_block, "ts", IMG(8),
         sym=False, train=True),
    case("dyn20/pos-encoding CumSum Sin Cos Tile Mod ReduceL2", encg.encoding_block, "dyn",
         IMG(8), sym=False, opset=20, train=True),
    # a non-persistent buffer (swin's attention mask) stays frozen
    case("dyn20/attention mask buffer frozen", encg.encoding_block, "dyn", IMG(8), sym=False,
         opset=20, train=True, frozen=[encg.MASK], mask_buffer=True),
]


def build(c):
    b = c["make"](c["label"], c["style"], c["chw"], batch=BATCH, sym_batch=c["sym"],
                  seed=sum(map(ord, c["label"])), scoped=c["scoped"],
                  init_inputs=c["init_inputs"], legacy_avgpool=c["legacy"], opset=c["opset"],
                  bn_kept=c["bn_kept"])
    return c["fn"](b, **c["kw"])


def lwcc_run(lwcc, args, timeout=120):
    r = harness.run([lwcc, *args], timeout=timeout)
    return r.returncode, (r.stderr.strip() or r.stdout.strip()).splitlines()


def run_one(lwcc, c, tmp, idx):
    """Returns (ok, message)."""
    model = build(c)
    onnx.checker.check_model(model, full_check=True)
    path = os.path.join(tmp, f"case{idx}.onnx")
    onnx.save(model, path)
    inp = model.graph.input[0]
    dims = [d.dim_value if d.HasField("dim_value") else BATCH
            for d in inp.type.tensor_type.shape.dim]
    x = np.random.default_rng(idx + 1).standard_normal(dims).astype(np.float32)
    so = ort.SessionOptions()
    so.log_severity_level = 3  # no warnings about initializers listed as inputs
    expected = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(
        None, {inp.name: x})[0]
    ins, outs = os.path.join(tmp, f"in{idx}"), os.path.join(tmp, f"out{idx}")
    os.makedirs(ins)
    with open(os.path.join(ins, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x).SerializeToString())
    batch = [f"--batch={BATCH}"] if c["sym"] else []
    rc, err = lwcc_run(lwcc, [path, "--emit=ir", "-o", os.path.join(tmp, f"case{idx}.lwir"),
                              *batch])
    if rc != 0:
        return False, f"lwcc --emit=ir exited {rc}: {' | '.join(err[-3:])}"
    if c["train"]:
        tir = os.path.join(tmp, f"case{idx}.train.lwir")
        rc, err = lwcc_run(lwcc, [path, "--emit=train-ir", "-o", tir, *batch])
        if rc != 0:
            return False, f"lwcc --emit=train-ir exited {rc}: {' | '.join(err[-3:])}"
        with open(tir) as f:
            text = f.read()
        for name in c["frozen"]:
            if f'param "{name}" frozen' not in text:
                return False, f"param '{name}' is not frozen in the training step"
    rc, err = lwcc_run(lwcc, [path, "--run-reference", "--inputs", ins, "--outputs", outs,
                              *batch])
    if rc != 0:
        return False, f"lwcc --run-reference exited {rc}: {' | '.join(err[-3:])}"
    got = numpy_helper.to_array(onnx.load_tensor(os.path.join(outs, "output_0.pb")))
    if got.shape != expected.shape:
        return False, f"shape {got.shape} != onnxruntime's {expected.shape}"
    rel = harness.rel_error(got, expected)
    n = len(model.graph.node)
    return rel < TOLERANCE, f"{n:4d} nodes, relative error {rel:.2e}"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lwcc", default=harness.LWCC)
    ap.add_argument("--save", metavar="DIR", help="also write every model to DIR")
    ap.add_argument("-k", metavar="SUBSTR", help="only the cases whose label contains SUBSTR")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for idx, c in enumerate(CASES):
            if args.k and args.k not in c["label"]:
                continue
            try:
                ok, msg = run_one(args.lwcc, c, tmp, idx)
            except Exception as e:  # checker / onnxruntime / timeout
                ok, msg = False, f"{type(e).__name__}: {e}"
            if args.save:
                os.makedirs(args.save, exist_ok=True)
                onnx.save(build(c), os.path.join(
                    args.save, c["label"].replace("/", "_").replace(" ", "_") + ".onnx"))
            if c["xfail"]:
                msg = f"{'XPASS' if ok else 'XFAIL'} {msg}  [expected failure: {c['xfail']}]"
                ok = True
            harness.record(ok, c["label"], info=msg)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
