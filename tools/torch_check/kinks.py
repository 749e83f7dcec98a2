#!/usr/bin/env python3
"""PyTorch's gradient at exactly the kink of each activation and pooling op.

Prints d sum(f(x)) / dx in float64 at the points test/unit/KinkTest.cpp
checks lwcc's interpreter and CPU kernels at (a development check, not CI;
needs PyTorch):

    /work/venv-torch/bin/python tools/torch_check/kinks.py

With PyTorch 2.15: relu 0 at 0; leaky_relu alpha at 0; relu6, hardtanh and
clamp with scalar bounds 0 at both bounds (clamp with tensor bounds splits
ties in halves, as maximum and minimum do); hardswish 0 at -3 and 1 at 3;
hardsigmoid 0 at -3 and 3; abs 0 at 0; elu alpha, selu scale*alpha and
celu 1 at 0; prelu its slope at 0; threshold 0 at its threshold; max
pooling the first maximum of a window in row-major order.
"""
import torch
import torch.nn.functional as F


def grad(f, xs, *others):
    x = torch.tensor(xs, dtype=torch.float64, requires_grad=True)
    y = f(x, *others)
    y.backward(torch.ones_like(y))
    return x.grad.flatten().tolist()


def main():
    z = torch.zeros(3, dtype=torch.float64)
    rows = [
        ("relu", grad(F.relu, [0.0, 1.0, -1.0])),
        ("leaky_relu(0.1)", grad(lambda x: F.leaky_relu(x, 0.1), [0.0, 2.0, -2.0])),
        ("relu6", grad(F.relu6, [0.0, 6.0, 3.0, -1.0, 7.0])),
        ("hardtanh(0, 6)", grad(lambda x: F.hardtanh(x, 0.0, 6.0), [0.0, 6.0, 3.0])),
        ("clamp(0, 6)", grad(lambda x: torch.clamp(x, 0.0, 6.0), [0.0, 6.0, 3.0])),
        ("clamp(max=6)", grad(lambda x: torch.clamp(x, max=6.0), [6.0, 5.0])),
        ("clamp(tensor bounds)", grad(lambda x: torch.clamp(x, z, z + 6), [0.0, 6.0, 3.0])),
        ("hardswish", grad(F.hardswish, [-3.0, 3.0, 0.0, -4.0, 4.0])),
        ("hardsigmoid", grad(F.hardsigmoid, [-3.0, 3.0, 0.0])),
        ("abs", grad(torch.abs, [0.0, 2.0, -2.0])),
        ("maximum(x, 0)", grad(lambda x: torch.maximum(x, z), [0.0, 1.0, -1.0])),
        ("minimum(x, 0)", grad(lambda x: torch.minimum(x, z), [0.0, 1.0, -1.0])),
        ("elu(0.5)", grad(lambda x: F.elu(x, 0.5), [0.0])),
        ("selu", grad(F.selu, [0.0])),
        ("celu(0.5)", grad(lambda x: F.celu(x, 0.5), [0.0])),
        ("prelu(0.25)", grad(lambda x: F.prelu(x, torch.tensor([0.25], dtype=torch.float64)),
                             [0.0, -1.0])),
        ("threshold(1, 0)", grad(lambda x: F.threshold(x, 1.0, 0.0), [1.0, 1.5, 0.5])),
        ("softplus", grad(F.softplus, [0.0])),
        ("mish", grad(F.mish, [0.0])),
        ("softsign", grad(F.softsign, [0.0])),
        ("max_pool2d(2, 2) ties", grad(lambda x: F.max_pool2d(x.view(1, 1, 2, 2), 2),
                                       [1.0] * 4)),
        ("max_pool2d(3, 1, 1) ties", grad(lambda x: F.max_pool2d(x.view(1, 1, 3, 3), 3, 1, 1),
                                          [1.0] * 9)),
        ("max_pool2d(2, 2, 1) ties", grad(lambda x: F.max_pool2d(x.view(1, 1, 3, 3), 2, 2, 1),
                                          [-1.0] * 9)),
    ]
    print(f"torch {torch.__version__}")
    for name, g in rows:
        print(f"{name:26s} {g}")


if __name__ == "__main__":
    main()
