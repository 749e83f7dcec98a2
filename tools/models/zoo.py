"""lwcc model zoo: ONNX generators for the networks lwcc is tested on.

Every builder has the signature

    build_NAME(size, channels, width, classes, batch, opset=17, seed=0,
               symbolic_batch=False) -> onnx.ModelProto

and produces an NCHW float32 inference graph with input "input"
[batch|N, channels, size, size] and output "logits" [batch|N, classes].
Parameters are initializers named like the torchvision state dict
(features.0.weight, layer1.0.bn1.running_var, ...), drawn deterministically
from `seed`.  `width` scales every channel count and hidden FC width
(rounded, at least 1; multiples of 2 for the grouped alexnet_owt).

REGISTRY maps NAME -> builder; DEFAULTS, TEST_PRESETS and MIN_SIZE give the
full-size parameters, the small test-size preset and the minimum input size.
"""

import os
import sys

import numpy as np
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from layers import NetBuilder, scale_channels  # noqa: E402

# Minimum input size (H = W) for which every layer has a >= 1 output
# (verified by tools/models/check_ort.py --min-sizes).
MIN_SIZE = {
    "lenet": 12,
    "alexnet": 63,
    "alexnet_owt": 63,
    "vgg11": 32,
    "vgg16": 32,
    "resnet18": 1,
    "inception": 1,
    "inception_v3": 75,
    "dropnet": 2,
    "upnet": 2,
}


def _builder(name, size, channels, batch, opset, seed, symbolic_batch):
    return NetBuilder(name, size=size, channels=channels, batch=batch,
                      opset=opset, seed=seed, symbolic_batch=symbolic_batch,
                      min_size=MIN_SIZE[name])


def _check_width(name, width):
    if not width > 0:
        raise ValueError(f"{name}: width must be > 0, got {width!r}")


def _check_classes(name, classes):
    if not isinstance(classes, (int, np.integer)) or classes < 1:
        raise ValueError(f"{name}: classes must be an integer >= 1, got {classes!r}")


def _finish(b, out, name, doc, **meta):
    meta = dict(net=name, **meta, opset=b.opset, batch_dim=b.batch_dim)
    return b.model(out, doc=doc, meta=meta)


# ------------------------------------------------------------------ LeNet-5
def build_lenet(size=28, channels=1, width=1.0, classes=10, batch=1,
                opset=17, seed=0, symbolic_batch=False):
    """LeNet-5 for 28x28x1 (Fashion-MNIST): Conv(6,5x5,p2)-Relu-MaxPool2-
    Conv(16,5x5)-Relu-MaxPool2-Flatten-Gemm(120)-Relu-Gemm(84)-Relu-Gemm."""
    name = "lenet"
    _check_width(name, width), _check_classes(name, classes)
    b = _builder(name, size, channels, batch, opset, seed, symbolic_batch)
    c = lambda n: scale_channels(n, width)  # noqa: E731
    x = b.conv(b.input, c(6), 5, pad=2, name="conv1")
    x = b.relu(x, name="relu1")
    x = b.maxpool(x, 2, 2, name="pool1")
    x = b.conv(x, c(16), 5, name="conv2")
    x = b.relu(x, name="relu2")
    x = b.maxpool(x, 2, 2, name="pool2")
    x = b.flatten(x, name="flatten")
    x = b.relu(b.gemm(x, c(120), name="fc1"), name="relu3")
    x = b.relu(b.gemm(x, c(84), name="fc2"), name="relu4")
    x = b.gemm(x, classes, name="fc3", gain=1.0)
    return _finish(b, x, name, build_lenet.__doc__, size=size, channels=channels,
                   width=width, classes=classes, batch=batch, seed=seed)


# ------------------------------------------------------------------ AlexNet
def _alexnet_head(b, x, width, classes, hidden_names, pool_name):
    """AdaptiveAvgPool(6x6) + Flatten + torchvision classifier
    (Dropout, Gemm 4096, ReLU, Dropout, Gemm 4096, ReLU, Gemm)."""
    (d0, l1, r2, d3, l4, r5, l6) = hidden_names
    x = b.adaptive_avgpool(x, 6, name=pool_name)
    x = b.flatten(x, name="flatten")
    hidden = scale_channels(4096, width)
    x = b.dropout(x, name=d0)
    x = b.relu(b.gemm(x, hidden, name=l1), name=r2)
    x = b.dropout(x, name=d3)
    x = b.relu(b.gemm(x, hidden, name=l4), name=r5)
    return b.gemm(x, classes, name=l6, gain=1.0)


def build_alexnet(size=224, channels=3, width=1.0, classes=1000, batch=1,
                  opset=17, seed=0, symbolic_batch=False):
    """AlexNet, torchvision layout (single tower, no LRN).  features:
    Conv64 11x11 s4 p2, ReLU, MaxPool3 s2, Conv192 5x5 p2, ReLU, MaxPool3 s2,
    Conv384 3x3 p1, ReLU, Conv256, ReLU, Conv256, ReLU, MaxPool3 s2;
    AdaptiveAvgPool(6x6) expressed for the actual map size s: nothing when
    s == 6 (224 input), AveragePool(s/6) when 6 divides s, else
    GlobalAveragePool (classifier input C instead of C*36); then Flatten,
    Dropout, Gemm4096, ReLU, Dropout, Gemm4096, ReLU, Gemm(classes)."""
    name = "alexnet"
    _check_width(name, width), _check_classes(name, classes)
    b = _builder(name, size, channels, batch, opset, seed, symbolic_batch)
    c = lambda n: scale_channels(n, width)  # noqa: E731
    x = b.conv(b.input, c(64), 11, stride=4, pad=2, name="features.0")
    x = b.relu(x, name="features.1")
    x = b.maxpool(x, 3, 2, name="features.2")
    x = b.conv(x, c(192), 5, pad=2, name="features.3")
    x = b.relu(x, name="features.4")
    x = b.maxpool(x, 3, 2, name="features.5")
    x = b.conv(x, c(384), 3, pad=1, name="features.6")
    x = b.relu(x, name="features.7")
    x = b.conv(x, c(256), 3, pad=1, name="features.8")
    x = b.relu(x, name="features.9")
    x = b.conv(x, c(256), 3, pad=1, name="features.10")
    x = b.relu(x, name="features.11")
    x = b.maxpool(x, 3, 2, name="features.12")
    x = _alexnet_head(b, x, width, classes,
                      [f"classifier.{i}" for i in range(7)], "avgpool")
    return _finish(b, x, name, build_alexnet.__doc__, size=size, channels=channels,
                   width=width, classes=classes, batch=batch, seed=seed)


def build_alexnet_owt(size=224, channels=3, width=1.0, classes=1000, batch=1,
                      opset=17, seed=0, symbolic_batch=False):
    """AlexNet, original two-tower layout (Krizhevsky et al. 2012):
    conv1 96 11x11 s4 p2, ReLU, LRN, MaxPool3 s2; conv2 256 5x5 p2 group=2,
    ReLU, LRN, MaxPool3 s2; conv3 384 3x3 p1 (towers talk); conv4 384 3x3 p1
    group=2, ReLU; conv5 256 3x3 p1 group=2, ReLU, MaxPool3 s2; FC 4096,
    4096, classes with Dropout before fc6 and fc7.  LRN: size 5,
    alpha 1e-4 (ONNX convention, alpha/size per element), beta 0.75, bias 2.
    Channel counts are kept even so both towers get the same width.  The
    6x6 pooling before the classifier follows the same rule as alexnet."""
    name = "alexnet_owt"
    _check_width(name, width), _check_classes(name, classes)
    b = _builder(name, size, channels, batch, opset, seed, symbolic_batch)
    c = lambda n: scale_channels(n, width, multiple=2)  # noqa: E731
    x = b.conv(b.input, c(96), 11, stride=4, pad=2, name="conv1")
    x = b.lrn(b.relu(x, name="relu1"), name="norm1")
    x = b.maxpool(x, 3, 2, name="pool1")
    x = b.conv(x, c(256), 5, pad=2, group=2, name="conv2")
    x = b.lrn(b.relu(x, name="relu2"), name="norm2")
    x = b.maxpool(x, 3, 2, name="pool2")
    x = b.relu(b.conv(x, c(384), 3, pad=1, name="conv3"), name="relu3")
    x = b.relu(b.conv(x, c(384), 3, pad=1, group=2, name="conv4"), name="relu4")
    x = b.relu(b.conv(x, c(256), 3, pad=1, group=2, name="conv5"), name="relu5")
    x = b.maxpool(x, 3, 2, name="pool5")
    x = _alexnet_head(b, x, width, classes,
                      ["drop6", "fc6", "relu6", "drop7", "fc7", "relu7", "fc8"],
                      "avgpool")
    return _finish(b, x, name, build_alexnet_owt.__doc__, size=size,
                   channels=channels, width=width, classes=classes, batch=batch,
                   seed=seed)


# ---------------------------------------------------------------------- VGG
VGG_CFGS = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
              512, 512, 512, "M", 512, 512, 512, "M"],
}


def _build_vgg(name, size, channels, width, classes, batch, opset, seed,
               symbolic_batch, doc):
    _check_width(name, width), _check_classes(name, classes)
    b = _builder(name, size, channels, batch, opset, seed, symbolic_batch)
    x, i = b.input, 0
    for v in VGG_CFGS[name]:
        if v == "M":
            x = b.maxpool(x, 2, 2, name=f"features.{i}")
            i += 1
        else:
            x = b.conv(x, scale_channels(v, width), 3, pad=1, name=f"features.{i}")
            x = b.relu(x, name=f"features.{i + 1}")
            i += 2
    x = b.adaptive_avgpool(x, 7, name="avgpool")
    x = b.flatten(x, name="flatten")
    hidden = scale_channels(4096, width)
    x = b.relu(b.gemm(x, hidden, name="classifier.0"), name="classifier.1")
    x = b.dropout(x, name="classifier.2")
    x = b.relu(b.gemm(x, hidden, name="classifier.3"), name="classifier.4")
    x = b.dropout(x, name="classifier.5")
    x = b.gemm(x, classes, name="classifier.6", gain=1.0)
    return _finish(b, x, name, doc, size=size, channels=channels, width=width,
                   classes=classes, batch=batch, seed=seed)


_VGG_DOC = """VGG-{n} (torchvision config {cfg}): 3x3 p1 Conv + ReLU blocks with
    MaxPool 2 s2 between stages; AdaptiveAvgPool(7x7) expressed for the actual
    map size s (nothing when s == 7, i.e. 224 input; AveragePool(s/7) when 7
    divides s; else GlobalAveragePool, or nothing at s == 1); Flatten; Gemm4096,
    ReLU, Dropout, Gemm4096, ReLU, Dropout, Gemm(classes)."""


def build_vgg11(size=224, channels=3, width=1.0, classes=1000, batch=1,
                opset=17, seed=0, symbolic_batch=False):
    return _build_vgg("vgg11", size, channels, width, classes, batch, opset,
                      seed, symbolic_batch, build_vgg11.__doc__)


def build_vgg16(size=224, channels=3, width=1.0, classes=1000, batch=1,
                opset=17, seed=0, symbolic_batch=False):
    return _build_vgg("vgg16", size, channels, width, classes, batch, opset,
                      seed, symbolic_batch, build_vgg16.__doc__)


build_vgg11.__doc__ = _VGG_DOC.format(n=11, cfg="A")
build_vgg16.__doc__ = _VGG_DOC.format(n=16, cfg="D")


# ------------------------------------------------------------------- ResNet
def _basic_block(b, x, planes, stride, prefix):
    cin = b.shapes[x][0]
    out = b.conv(x, planes, 3, stride=stride, pad=1, bias=False, name=f"{prefix}.conv1")
    out = b.relu(b.bn(out, name=f"{prefix}.bn1"), name=f"{prefix}.relu1")
    out = b.conv(out, planes, 3, pad=1, bias=False, name=f"{prefix}.conv2")
    out = b.bn(out, name=f"{prefix}.bn2")
    if stride != 1 or cin != planes:
        x = b.conv(x, planes, 1, stride=stride, bias=False, name=f"{prefix}.downsample.0")
        x = b.bn(x, name=f"{prefix}.downsample.1")
    out = b.add(out, x, name=f"{prefix}.add")
    return b.relu(out, name=f"{prefix}.relu2")


def build_resnet18(size=224, channels=3, width=1.0, classes=1000, batch=1,
                   opset=17, seed=0, symbolic_batch=False):
    """ResNet-18: stem Conv64 7x7 s2 p3 (no bias) + BN + ReLU + MaxPool3 s2 p1;
    BasicBlocks [2, 2, 2, 2] with widths 64/128/256/512 and strides 1/2/2/2,
    downsample = 1x1 Conv (stride) + BN where stride or width changes;
    GlobalAveragePool, Flatten, Gemm(classes)."""
    name = "resnet18"
    _check_width(name, width), _check_classes(name, classes)
    b = _builder(name, size, channels, batch, opset, seed, symbolic_batch)
    x = b.conv(b.input, scale_channels(64, width), 7, stride=2, pad=3, bias=False,
               name="conv1")
    x = b.relu(b.bn(x, name="bn1"), name="relu")
    x = b.maxpool(x, 3, 2, 1, name="maxpool")
    for li, (planes, stride) in enumerate(zip((64, 128, 256, 512), (1, 2, 2, 2))):
        for bi in range(2):
            x = _basic_block(b, x, scale_channels(planes, width),
                             stride if bi == 0 else 1, f"layer{li + 1}.{bi}")
    x = b.global_avgpool(x, name="avgpool")
    x = b.flatten(x, name="flatten")
    x = b.gemm(x, classes, name="fc", gain=1.0)
    return _finish(b, x, name, build_resnet18.__doc__, size=size, channels=channels,
                   width=width, classes=classes, batch=batch, seed=seed)


# ---------------------------------------------------------------- Inception
# (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool proj) as in GoogLeNet.
INCEPTION_BLOCKS = [
    ("inception3a", (64, 96, 128, 16, 32, 32)),
    ("inception3b", (128, 128, 192, 32, 96, 64)),
    "maxpool3",
    ("inception4a", (192, 96, 208, 16, 48, 64)),
    ("inception4b", (160, 112, 224, 24, 64, 64)),
]


def _conv_bn_relu(b, x, cout, k, *, stride=1, pad=0, name):
    x = b.conv(x, cout, k, stride=stride, pad=pad, bias=False, name=f"{name}.conv")
    return b.relu(b.bn(x, name=f"{name}.bn"), name=f"{name}.relu")


def _inception_block(b, x, cfg, width, prefix):
    c1, c3r, c3, c5r, c5, cp = (scale_channels(v, width) for v in cfg)
    y1 = _conv_bn_relu(b, x, c1, 1, name=f"{prefix}.branch1")
    y2 = _conv_bn_relu(b, x, c3r, 1, name=f"{prefix}.branch2.0")
    y2 = _conv_bn_relu(b, y2, c3, 3, pad=1, name=f"{prefix}.branch2.1")
    y3 = _conv_bn_relu(b, x, c5r, 1, name=f"{prefix}.branch3.0")
    y3 = _conv_bn_relu(b, y3, c5, 5, pad=2, name=f"{prefix}.branch3.1")
    y4 = b.maxpool(x, 3, 1, 1, name=f"{prefix}.branch4.0")
    y4 = _conv_bn_relu(b, y4, cp, 1, name=f"{prefix}.branch4.1")
    return b.concat([y1, y2, y3, y4], name=f"{prefix}.concat")


def build_inception(size=224, channels=3, width=1.0, classes=1000, batch=1,
                    opset=17, seed=0, symbolic_batch=False):
    """GoogLeNet-style Inception net (trimmed, with BN like torchvision's
    BasicConv2d = Conv(no bias) + BN + ReLU).  Stem: conv1 64 7x7 s2 p3,
    MaxPool3 s2 p1, conv2 64 1x1, conv3 192 3x3 p1, MaxPool3 s2 p1.
    Blocks inception3a, 3b, MaxPool3 s2 p1, 4a, 4b; each block has four
    branches (1x1; 1x1->3x3; 1x1->5x5; MaxPool3 s1 p1->1x1) concatenated on
    channels (Concat axis=1).  GlobalAveragePool, Flatten, Gemm(classes)."""
    name = "inception"
    _check_width(name, width), _check_classes(name, classes)
    b = _builder(name, size, channels, batch, opset, seed, symbolic_batch)
    c = lambda n: scale_channels(n, width)  # noqa: E731
    x = _conv_bn_relu(b, b.input, c(64), 7, stride=2, pad=3, name="conv1")
    x = b.maxpool(x, 3, 2, 1, name="maxpool1")
    x = _conv_bn_relu(b, x, c(64), 1, name="conv2")
    x = _conv_bn_relu(b, x, c(192), 3, pad=1, name="conv3")
    x = b.maxpool(x, 3, 2, 1, name="maxpool2")
    for blk in INCEPTION_BLOCKS:
        if isinstance(blk, str):
            x = b.maxpool(x, 3, 2, 1, name=blk)
        else:
            x = _inception_block(b, x, blk[1], width, blk[0])
    x = b.global_avgpool(x, name="avgpool")
    x = b.flatten(x, name="flatten")
    x = b.gemm(x, classes, name="fc", gain=1.0)
    return _finish(b, x, name, build_inception.__doc__, size=size, channels=channels,
                   width=width, classes=classes, batch=batch, seed=seed)


# ------------------------------------------------------------- Inception-v3
# Full-size benchmark network (not in REGISTRY: the CI suites that run every
# zoo model at test size leave it out; the benches use it at 299x299).
def _v3_conv(b, x, cout, k, *, stride=1, pad=0, name):
    """torchvision's BasicConv2d: Conv (no bias) + BN (eps 1e-3) + ReLU."""
    x = b.conv(x, cout, k, stride=stride, pad=pad, bias=False, name=f"{name}.conv")
    return b.relu(b.bn(x, name=f"{name}.bn", eps=1e-3), name=f"{name}.relu")


def _v3_pool_branch(b, x, cout, c, prefix):
    """3x3 average pool (stride 1, pad 1, zeros counted) then a 1x1 conv."""
    y = b.avgpool(x, 3, 1, 1, name=f"{prefix}.branch_pool.avg", count_include_pad=True)
    return _v3_conv(b, y, c(cout), 1, name=f"{prefix}.branch_pool")


def _v3_a(b, x, pool_features, c, p):
    y1 = _v3_conv(b, x, c(64), 1, name=f"{p}.branch1x1")
    y5 = _v3_conv(b, x, c(48), 1, name=f"{p}.branch5x5_1")
    y5 = _v3_conv(b, y5, c(64), 5, pad=2, name=f"{p}.branch5x5_2")
    y3 = _v3_conv(b, x, c(64), 1, name=f"{p}.branch3x3dbl_1")
    y3 = _v3_conv(b, y3, c(96), 3, pad=1, name=f"{p}.branch3x3dbl_2")
    y3 = _v3_conv(b, y3, c(96), 3, pad=1, name=f"{p}.branch3x3dbl_3")
    yp = _v3_pool_branch(b, x, pool_features, c, p)
    return b.concat([y1, y5, y3, yp], name=f"{p}.concat")


def _v3_b(b, x, c, p):
    y3 = _v3_conv(b, x, c(384), 3, stride=2, name=f"{p}.branch3x3")
    yd = _v3_conv(b, x, c(64), 1, name=f"{p}.branch3x3dbl_1")
    yd = _v3_conv(b, yd, c(96), 3, pad=1, name=f"{p}.branch3x3dbl_2")
    yd = _v3_conv(b, yd, c(96), 3, stride=2, name=f"{p}.branch3x3dbl_3")
    yp = b.maxpool(x, 3, 2, name=f"{p}.branch_pool")
    return b.concat([y3, yd, yp], name=f"{p}.concat")


def _v3_c(b, x, c7, c, p):
    row, col = ((1, 7), (0, 3)), ((7, 1), (3, 0))  # (kernel, pad) pairs
    y1 = _v3_conv(b, x, c(192), 1, name=f"{p}.branch1x1")
    y7 = _v3_conv(b, x, c(c7), 1, name=f"{p}.branch7x7_1")
    y7 = _v3_conv(b, y7, c(c7), row[0], pad=row[1], name=f"{p}.branch7x7_2")
    y7 = _v3_conv(b, y7, c(192), col[0], pad=col[1], name=f"{p}.branch7x7_3")
    yd = _v3_conv(b, x, c(c7), 1, name=f"{p}.branch7x7dbl_1")
    for i, (kp, cout) in enumerate([(col, c7), (row, c7), (col, c7), (row, 192)], start=2):
        yd = _v3_conv(b, yd, c(cout), kp[0], pad=kp[1], name=f"{p}.branch7x7dbl_{i}")
    yp = _v3_pool_branch(b, x, 192, c, p)
    return b.concat([y1, y7, yd, yp], name=f"{p}.concat")


def _v3_d(b, x, c, p):
    y3 = _v3_conv(b, x, c(192), 1, name=f"{p}.branch3x3_1")
    y3 = _v3_conv(b, y3, c(320), 3, stride=2, name=f"{p}.branch3x3_2")
    y7 = _v3_conv(b, x, c(192), 1, name=f"{p}.branch7x7x3_1")
    y7 = _v3_conv(b, y7, c(192), (1, 7), pad=(0, 3), name=f"{p}.branch7x7x3_2")
    y7 = _v3_conv(b, y7, c(192), (7, 1), pad=(3, 0), name=f"{p}.branch7x7x3_3")
    y7 = _v3_conv(b, y7, c(192), 3, stride=2, name=f"{p}.branch7x7x3_4")
    yp = b.maxpool(x, 3, 2, name=f"{p}.branch_pool")
    return b.concat([y3, y7, yp], name=f"{p}.concat")


def _v3_e(b, x, c, p):
    def split(y, stem):  # a 1x3 and a 3x1 conv side by side, concatenated
        ya = _v3_conv(b, y, c(384), (1, 3), pad=(0, 1), name=f"{p}.{stem}a")
        yb = _v3_conv(b, y, c(384), (3, 1), pad=(1, 0), name=f"{p}.{stem}b")
        return b.concat([ya, yb], name=f"{p}.{stem}.concat")
    y1 = _v3_conv(b, x, c(320), 1, name=f"{p}.branch1x1")
    y3 = split(_v3_conv(b, x, c(384), 1, name=f"{p}.branch3x3_1"), "branch3x3_2")
    yd = _v3_conv(b, x, c(448), 1, name=f"{p}.branch3x3dbl_1")
    yd = _v3_conv(b, yd, c(384), 3, pad=1, name=f"{p}.branch3x3dbl_2")
    yd = split(yd, "branch3x3dbl_3")
    yp = _v3_pool_branch(b, x, 192, c, p)
    return b.concat([y1, y3, yd, yp], name=f"{p}.concat")


def build_inception_v3(size=299, channels=3, width=1.0, classes=1000, batch=1,
                       opset=17, seed=0, symbolic_batch=False):
    """Inception-v3 with torchvision's layer shapes and names (no auxiliary
    classifier, no input transform; dropout is gone in an eval-mode
    export): stem Conv2d_1a..4a with two 3x3 s2 max pools, Mixed_5b-5d
    (InceptionA), 6a (B), 6b-6e (C, with 1x7 and 7x1 convolutions), 7a
    (D), 7b-7c (E), global average pool and fc. Every conv is Conv (no
    bias) + BN (eps 1e-3) + ReLU; the pool branches average 3x3 windows
    counting the padding, as torch's avg_pool2d does by default."""
    name = "inception_v3"
    _check_width(name, width), _check_classes(name, classes)
    b = _builder(name, size, channels, batch, opset, seed, symbolic_batch)
    c = lambda n: scale_channels(n, width)  # noqa: E731
    x = _v3_conv(b, b.input, c(32), 3, stride=2, name="Conv2d_1a_3x3")
    x = _v3_conv(b, x, c(32), 3, name="Conv2d_2a_3x3")
    x = _v3_conv(b, x, c(64), 3, pad=1, name="Conv2d_2b_3x3")
    x = b.maxpool(x, 3, 2, name="maxpool1")
    x = _v3_conv(b, x, c(80), 1, name="Conv2d_3b_1x1")
    x = _v3_conv(b, x, c(192), 3, name="Conv2d_4a_3x3")
    x = b.maxpool(x, 3, 2, name="maxpool2")
    for p, pool_features in (("Mixed_5b", 32), ("Mixed_5c", 64), ("Mixed_5d", 64)):
        x = _v3_a(b, x, pool_features, c, p)
    x = _v3_b(b, x, c, "Mixed_6a")
    for p, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        x = _v3_c(b, x, c7, c, p)
    x = _v3_d(b, x, c, "Mixed_7a")
    x = _v3_e(b, x, c, "Mixed_7b")
    x = _v3_e(b, x, c, "Mixed_7c")
    x = b.global_avgpool(x, name="avgpool")
    x = b.flatten(x, name="flatten")
    x = b.gemm(x, classes, name="fc", gain=1.0)
    return _finish(b, x, name, build_inception_v3.__doc__, size=size, channels=channels,
                   width=width, classes=classes, batch=batch, seed=seed)


# ------------------------------------------------- dropout after every layer
def build_dropnet(size=16, channels=3, width=1.0, classes=10, batch=1,
                  opset=17, seed=0, symbolic_batch=False):
    """A small net with Dropout after its convolutions and its fully
    connected layers (ratios 0.3 and 0.5), for the tests of dropout masks
    split over samples, channels, rows and columns: Conv(8,3x3,p1)-Relu-
    Dropout-Conv(8,3x3,p1)-Relu-Dropout-MaxPool2-Flatten-Gemm(32)-Relu-
    Dropout-Gemm."""
    name = "dropnet"
    _check_width(name, width), _check_classes(name, classes)
    b = _builder(name, size, channels, batch, opset, seed, symbolic_batch)
    c = lambda n: scale_channels(n, width)  # noqa: E731
    x = b.relu(b.conv(b.input, c(8), 3, pad=1, name="conv1"), name="relu1")
    x = b.dropout(x, 0.3, name="drop1")
    x = b.relu(b.conv(x, c(8), 3, pad=1, name="conv2"), name="relu2")
    x = b.dropout(x, 0.3, name="drop2")
    x = b.maxpool(x, 2, 2, name="pool")
    x = b.flatten(x, name="flatten")
    x = b.relu(b.gemm(x, c(32), name="fc1"), name="relu3")
    x = b.dropout(x, name="drop3")
    x = b.gemm(x, classes, name="fc2", gain=1.0)
    return _finish(b, x, name, build_dropnet.__doc__, size=size, channels=channels,
                   width=width, classes=classes, batch=batch, seed=seed)


# -------------------------------------- the ops of today's model collections
def _const(b, name, array):
    """A Constant node (no initializer: nothing that could train)."""
    out = b._unique(name)
    b.nodes.append(helper.make_node("Constant", [], [out], name=out,
                                    value=numpy_helper.from_array(np.asarray(array), out)))
    return out


def build_upnet(size=16, channels=3, width=1.0, classes=10, batch=1,
                opset=18, seed=0, symbolic_batch=False):
    """A small net with upsampling and the activations of today's model
    collections, for the tests of those ops: Conv(8)-HardSwish
    with squeeze-excitation (GlobalAveragePool-Conv-Relu-Conv-HardSigmoid
    (1/6, 1/2)-Mul); MaxPool2-Conv(12)-PRelu(per channel)-stateless
    BatchNormalization(training_mode=1)-LeakyRelu; Resize nearest 2x
    (asymmetric, floor) and Resize linear 2x (half_pixel) of that, Max of
    the two, Concat with the full-resolution map; Conv(8)-Elu-Selu-Celu-
    Mish-Softplus-Softsign-ThresholdedRelu(-2: below softsign's range, the
    identity here: its jump would defeat finite differences)-Min with the
    Resize's sum-Where(y > 0, y, y/2); GlobalAveragePool-Flatten-Gemm.
    Opset 18 at least (Mish)."""
    name = "upnet"
    _check_width(name, width), _check_classes(name, classes)
    opset = max(opset, 18)  # Mish is an op from opset 18 on
    b = _builder(name, size, channels, batch, opset, seed, symbolic_batch)
    c = lambda n: scale_channels(n, width)  # noqa: E731
    x = b.conv(b.input, c(8), 3, pad=1, name="conv1")
    x = b._node("HardSwish", [x], "hswish", b.shapes[x])
    g = b.global_avgpool(x, name="se.pool")
    g = b.relu(b.conv(g, c(4), 1, name="se.reduce"), name="se.relu")
    g = b.conv(g, c(8), 1, name="se.expand")
    # A quarter of the logit: the gate stays inside its ramp (finite
    # differences stay clear of its ends, which test/unit/KinkTest.cpp checks).
    quarter = _const(b, "se.quarter", np.array(0.25, np.float32))
    g = b._node("Mul", [g, quarter], "se.scale", b.shapes[g])
    g = b._node("HardSigmoid", [g], "se.gate", b.shapes[g], alpha=1.0 / 6.0, beta=0.5)
    x = b._node("Mul", [x, g], "se.mul", b.shapes[x])
    d = b.conv(b.maxpool(x, 2, 2, name="pool"), c(12), 3, pad=1, name="conv2")
    n = b.shapes[d][0]
    slope = b.param("prelu.weight", np.full((n, 1, 1), 0.25))
    d = b._node("PRelu", [d, slope], "prelu", b.shapes[d])
    bn = [b.param("bn.weight", b.rng.uniform(0.5, 1.5, (n,))),
          b.param("bn.bias", b.rng.uniform(-0.1, 0.1, (n,))),
          _const(b, "bn.mean", np.zeros(n, np.float32)),
          _const(b, "bn.var", np.ones(n, np.float32))]
    # F.batch_norm(d, None, None, weight, bias, training=True): the running
    # statistics outputs, which training mode must have, go unread.
    d = b._node("BatchNormalization", [d] + bn, "bn", b.shapes[d], epsilon=1e-5, momentum=1.0,
                training_mode=1)
    b.nodes[-1].output.extend([b._unique("bn.running_mean"), b._unique("bn.running_var")])
    d = b._node("LeakyRelu", [d], "leaky", b.shapes[d], alpha=0.1)
    h, w = b.shapes[d][1:]
    up = (n, 2 * h, 2 * w)
    scales = _const(b, "up.scales", np.array([1, 1, 2, 2], np.float32))
    u1 = b._node("Resize", [d, "", scales], "up.nearest", up, mode="nearest",
                 coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    u2 = b._node("Resize", [d, "", scales], "up.linear", up, mode="linear",
                 coordinate_transformation_mode="half_pixel")
    u = b._node("Max", [u1, u2], "up.max", up)
    y = b.conv(b.concat([u, x], name="cat"), c(8), 3, pad=1, name="conv3")
    for op, attrs in (("Elu", dict(alpha=0.7)), ("Selu", {}), ("Celu", dict(alpha=1.3)),
                      ("Mish", {}), ("Softplus", {}), ("Softsign", {}),
                      # Below softsign's range: the identity, no jump to trip
                      # finite differences.
                      ("ThresholdedRelu", dict(alpha=-2.0))):
        y = b._node(op, [y], op.lower(), b.shapes[y], **attrs)
    s = b.conv(b._node("Add", [u1, u2], "up.sum", up), c(8), 1, name="conv4")
    y = b._node("Min", [y, s], "min", b.shapes[y])
    # Where of a run-time condition: y > 0 ? y : y / 2.
    zero = _const(b, "where.zero", np.array(0.0, np.float32))
    half = _const(b, "where.half", np.array(0.5, np.float32))
    pos = b._node("Greater", [y, zero], "where.pos", b.shapes[y])
    y = b._node("Where", [pos, y, b._node("Mul", [y, half], "where.half_y", b.shapes[y])],
                "where", b.shapes[y])
    y = b.flatten(b.global_avgpool(y, name="gap"), name="flatten")
    y = b.gemm(y, classes, name="fc", gain=1.0)
    return _finish(b, y, name, build_upnet.__doc__, size=size, channels=channels,
                   width=width, classes=classes, batch=batch, seed=seed)


# ----------------------------------------------------------------- registry
REGISTRY = {
    "lenet": build_lenet,
    "alexnet": build_alexnet,
    "alexnet_owt": build_alexnet_owt,
    "vgg11": build_vgg11,
    "vgg16": build_vgg16,
    "resnet18": build_resnet18,
    "inception": build_inception,
}

_IMAGENET = dict(size=224, channels=3, width=1.0, classes=1000, batch=1)
# Full-size defaults (used by gen.py when a flag is not given).
DEFAULTS = {n: dict(_IMAGENET) for n in REGISTRY}
DEFAULTS["lenet"] = dict(size=28, channels=1, width=1.0, classes=10, batch=1)

# Networks for the benches only (full size; gen.py builds them like the rest).
BENCH_REGISTRY = {"inception_v3": build_inception_v3}
DEFAULTS["inception_v3"] = dict(_IMAGENET, size=299)
# Networks for particular tests only (gen.py builds them like the rest).
TEST_REGISTRY = {"dropnet": build_dropnet, "upnet": build_upnet}
DEFAULTS["dropnet"] = dict(size=16, channels=3, width=1.0, classes=10, batch=1)
DEFAULTS["upnet"] = dict(size=16, channels=3, width=1.0, classes=10, batch=1, opset=18)

# Small presets: a plain-loop reference interpreter runs a forward pass of
# each in well under a second.
_SMALL = dict(channels=3, width=1 / 16, classes=10, batch=2)
TEST_PRESETS = {
    "lenet": dict(size=28, channels=1, width=1.0, classes=10, batch=2),
    "alexnet": dict(size=64, **_SMALL),
    "alexnet_owt": dict(size=64, **_SMALL),
    "vgg11": dict(size=32, **_SMALL),
    "vgg16": dict(size=32, **_SMALL),
    # 64, not 32: at 32 the last stage is 1x1, and batch norm over two values
    # makes the training loss too ill-conditioned for finite differences.
    "resnet18": dict(size=64, **_SMALL),
    "inception": dict(size=64, **_SMALL),
    "inception_v3": dict(size=75, **_SMALL),
    "dropnet": dict(size=16, channels=3, width=1.0, classes=10, batch=8),
    "upnet": dict(size=8, channels=3, width=1.0, classes=10, batch=4, opset=18),
}


def build(name, test_size=False, **overrides):
    """Builds registered network `name` from its DEFAULTS (or TEST_PRESETS
    when test_size) updated with `overrides` (keys of the builder's
    signature; None values are ignored)."""
    builders = {**REGISTRY, **BENCH_REGISTRY, **TEST_REGISTRY}
    if name not in builders:
        raise KeyError(f"unknown network {name!r}; known: {', '.join(builders)}")
    params = dict((TEST_PRESETS if test_size else DEFAULTS)[name])
    params.update({k: v for k, v in overrides.items() if v is not None})
    return builders[name](**params)
