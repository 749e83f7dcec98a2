#!/usr/bin/env python3
"""Compiled CPU trainers of the exporters' new patterns against lwcc's
reference interpreter.

The graphs of exporter_patterns.py that need layer_norm, gather_nd, erf and
the folded adaptive-pool arithmetic (dynamo_graphs.py), those of the ops
of today's model collections (zoo_graphs.py) and the position encodings of
encoding_graphs.py are compiled with
`lwcc --emit=exe --target=cpu`; one training step on a seeded batch must
match `lwcc --train-reference` (loss, every gradient, every updated param)
within a relative error of 1e-4, as trainer_vs_reference.py checks the zoo.
Ends with the line "N passed, M failed".
"""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import exporter_patterns as ep  # noqa: E402
import harness  # noqa: E402
import trainer_vs_reference as tvr  # noqa: E402

LABELS = [
    "dyn20/alexnet@64 pool 1->6 GatherND+ReduceMean",
    "dyn20/vgg11@64 pool 2->7 GatherND+Where",
    "dyn20/convnext Gelu",
    "dyn18/convnext Erf",
    # today's model collections: hard activations, resize, stateless batch norm, activations
    "dyn20/mobilenetv3 HardSwish, SE HardSigmoid",
    "dyn20/unet Resize nearest, bilinear, align_corners",
    "ts17/nf_resnet StdConv BN training_mode=1",
    "dyn20/nf_resnet StdConv BN of batch moments",
    "dyn20/Elu Selu Celu Mish Softsign PRelu Clip Softplus-Where",
    "ts17/GroupNorm bicubic ThresholdedRelu",
    # position encodings and normalized attention: CumSum, Sin, Cos, Tile,
    # ReduceL2, ReduceL1, ReduceSumSquare (Mod folds at import)
    "ts17/pos-encoding CumSum Sin Cos Tile Mod ReduceL2",
    "dyn20/pos-encoding CumSum Sin Cos Tile Mod ReduceL2",
]


def main():
    cases = {c["label"]: c for c in ep.CASES}
    with tempfile.TemporaryDirectory() as tmp:
        for k, label in enumerate(LABELS):
            c = dict(cases[label], sym=False)  # the trainer takes a static batch
            tvr.trainer_case(label, lambda: ep.build(c), tmp, f"case{k}")
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
