"""torchvision's classification networks, node for node as torch.onnx.export
writes them in either style of exporter_graphs.Builder (see its docstring).

Each function takes a Builder `b` (style, input, batch, naming) and returns
its model, reduced in width (and depth where noted) so that each runs in
milliseconds; `c(n)` scales a channel count. Also two probes of the pooling
windows' arithmetic (avgpool_probe, maxpool_indices_probe).
"""


def _c(width):
    return lambda n: max(2, int(round(n * width)))


def alexnet(b, width=1 / 16, classes=10, pool_target=2, flat="auto", drop="elided",
            lin="gemm"):
    """torchvision alexnet; at 224 the features are 6x6 and AdaptiveAvgPool
    (6, 6) is an AveragePool with kernel 1 -- here the input is 99, the map
    2x2 and the target 2."""
    c = _c(width)
    x = b.input
    x = b.relu(b.conv(x, "features.0", c(64), 11, 4, 2), "features.1")
    x = b.maxpool(x, "features.2", 3, 2)
    x = b.relu(b.conv(x, "features.3", c(192), 5, 1, 2), "features.4")
    x = b.maxpool(x, "features.5", 3, 2)
    x = b.relu(b.conv(x, "features.6", c(384), 3, 1, 1), "features.7")
    x = b.relu(b.conv(x, "features.8", c(256), 3, 1, 1), "features.9")
    x = b.relu(b.conv(x, "features.10", c(256), 3, 1, 1), "features.11")
    x = b.maxpool(x, "features.12", 3, 2)
    x = b.adaptive_avgpool(x, "avgpool", pool_target)
    x = b.flatten(x, "", flat)
    x = b.dropout(x, "classifier.0", 0.5, drop)
    x = b.relu(b.linear(x, "classifier.1", c(4096), lin), "classifier.2")
    x = b.dropout(x, "classifier.3", 0.5, drop)
    x = b.relu(b.linear(x, "classifier.4", c(4096), lin), "classifier.5")
    x = b.linear(x, "classifier.6", classes, lin, gain=1.0)
    return b.model(x)


VGG_CFG = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
              512, 512, 512, "M"],
}


def vgg(b, cfg, width=1 / 16, classes=10, pool_target=2, flat="auto", drop="elided",
        lin="gemm"):
    """torchvision vgg11/vgg16 (no BN); input 64 -> 2x2 features,
    AdaptiveAvgPool target 2 (at 224: 7x7 and 7)."""
    c = _c(width)
    x, i = b.input, 0
    for v in VGG_CFG[cfg]:
        if v == "M":
            x = b.maxpool(x, f"features.{i}", 2, 2)
            i += 1
        else:
            x = b.conv(x, f"features.{i}", c(v), 3, 1, 1)
            x = b.relu(x, f"features.{i + 1}")
            i += 2
    x = b.adaptive_avgpool(x, "avgpool", pool_target)
    x = b.flatten(x, "", flat)
    x = b.relu(b.linear(x, "classifier.0", c(4096), lin), "classifier.1")
    x = b.dropout(x, "classifier.2", 0.5, drop)
    x = b.relu(b.linear(x, "classifier.3", c(4096), lin), "classifier.4")
    x = b.dropout(x, "classifier.5", 0.5, drop)
    x = b.linear(x, "classifier.6", classes, lin, gain=1.0)
    return b.model(x)


def _resnet_stem(b, c):
    x = b.conv_bn(b.input, "conv1", "bn1", c(64), 7, 2, 3)
    x = b.relu(x, "relu")
    return b.maxpool(x, "maxpool", 3, 2, 1)


def _resnet_head(b, x, classes, flat, lin):
    x = b.adaptive_avgpool(x, "avgpool", 1)
    x = b.flatten(x, "", flat)
    return b.linear(x, "fc", classes, lin, gain=1.0)


def resnet18(b, width=1 / 8, classes=10, flat="auto", lin="gemm"):
    """torchvision resnet18 (BasicBlock x [2, 2, 2, 2]), input 32."""
    c = _c(width)
    x = _resnet_stem(b, c)
    cin = c(64)
    for li, planes in enumerate((64, 128, 256, 512), 1):
        for bi in range(2):
            stride = 2 if li > 1 and bi == 0 else 1
            p = f"layer{li}.{bi}"
            y = b.relu(b.conv_bn(x, f"{p}.conv1", f"{p}.bn1", c(planes), 3, stride, 1),
                       f"{p}.relu")
            y = b.conv_bn(y, f"{p}.conv2", f"{p}.bn2", c(planes), 3, 1, 1)
            idn = x
            if stride != 1 or cin != c(planes):
                idn = b.conv_bn(x, f"{p}.downsample.0", f"{p}.downsample.1",
                                c(planes), 1, stride, 0)
            x = b.relu(b.add(y, idn, p), f"{p}.relu")
            cin = c(planes)
    return b.model(_resnet_head(b, x, classes, flat, lin))


def resnet50(b, width=1 / 16, classes=10, blocks=(2, 2, 2, 1), flat="auto", lin="gemm"):
    """torchvision resnet50 (Bottleneck, v1.5: stride on the 3x3), reduced
    to `blocks` per layer (real: 3, 4, 6, 3); input 32."""
    c = _c(width)
    x = _resnet_stem(b, c)
    cin = c(64)
    for li, planes in enumerate((64, 128, 256, 512), 1):
        for bi in range(blocks[li - 1]):
            stride = 2 if li > 1 and bi == 0 else 1
            p = f"layer{li}.{bi}"
            y = b.relu(b.conv_bn(x, f"{p}.conv1", f"{p}.bn1", c(planes), 1), f"{p}.relu")
            y = b.relu(b.conv_bn(y, f"{p}.conv2", f"{p}.bn2", c(planes), 3, stride, 1),
                       f"{p}.relu")
            y = b.conv_bn(y, f"{p}.conv3", f"{p}.bn3", c(planes) * 4, 1)
            idn = x
            if bi == 0:
                idn = b.conv_bn(x, f"{p}.downsample.0", f"{p}.downsample.1",
                                c(planes) * 4, 1, stride, 0)
            x = b.relu(b.add(y, idn, p), f"{p}.relu")
            cin = c(planes) * 4
    del cin
    return b.model(_resnet_head(b, x, classes, flat, lin))


def _basic_conv(b, x, scope, cout, k, s=1, p=0, eps=1e-3):
    """googlenet / inception_v3 BasicConv2d: conv(bias=False) + bn(eps=1e-3)
    + relu."""
    y = b.conv_bn(x, f"{scope}.conv", f"{scope}.bn", cout, k, s, p, eps=eps)
    return b.relu(y, scope)


GOOGLENET_BLOCKS = [
    ("inception3a", (64, 96, 128, 16, 32, 32)),
    ("inception3b", (128, 128, 192, 32, 96, 64)),
    ("maxpool3", (3, 2)),
    ("inception4a", (192, 96, 208, 16, 48, 64)),
    ("maxpool4", (2, 2)),
    ("inception5a", (256, 160, 320, 32, 128, 128)),
]


def googlenet(b, width=1 / 16, classes=10, transform="gather", flat="auto", drop="elided",
              lin="gemm"):
    """torchvision googlenet (transform_input=True, eval: no aux heads),
    reduced to inception 3a, 3b, 4a, 5a; input 64.  MaxPools use
    ceil_mode=True; branch3 is 1x1 -> 3x3 as in torchvision."""
    c = _c(width)
    x = b.transform_input(b.input, transform)
    x = _basic_conv(b, x, "conv1", c(64), 7, 2, 3)
    x = b.maxpool(x, "maxpool1", 3, 2, 0, ceil=1)
    x = _basic_conv(b, x, "conv2", c(64), 1)
    x = _basic_conv(b, x, "conv3", c(192), 3, 1, 1)
    x = b.maxpool(x, "maxpool2", 3, 2, 0, ceil=1)
    for name, cfg in GOOGLENET_BLOCKS:
        if name.startswith("maxpool"):
            x = b.maxpool(x, name, cfg[0], cfg[1], 0, ceil=1)
            continue
        c1, c3r, c3, c5r, c5, pp = (c(v) for v in cfg)
        b1 = _basic_conv(b, x, f"{name}.branch1", c1, 1)
        b2 = _basic_conv(b, x, f"{name}.branch2.0", c3r, 1)
        b2 = _basic_conv(b, b2, f"{name}.branch2.1", c3, 3, 1, 1)
        b3 = _basic_conv(b, x, f"{name}.branch3.0", c5r, 1)
        b3 = _basic_conv(b, b3, f"{name}.branch3.1", c5, 3, 1, 1)
        b4 = b.maxpool(x, f"{name}.branch4.0", 3, 1, 1, ceil=1)
        b4 = _basic_conv(b, b4, f"{name}.branch4.1", pp, 1)
        x = b.concat([b1, b2, b3, b4], name)
    x = b.adaptive_avgpool(x, "avgpool", 1)
    x = b.flatten(x, "", flat)
    x = b.dropout(x, "dropout", 0.2, drop)
    return b.model(b.linear(x, "fc", classes, lin, gain=1.0))


def inception_v3(b, width=1 / 16, classes=10, transform="gather", flat="auto",
                 drop="elided", lin="gemm"):
    """torchvision inception_v3 (transform_input=True, eval: no AuxLogits),
    one block of each kind: Mixed_5b (A), 6a (B), 6b (C), 7a (D), 7b (E);
    input 75 (the minimum).  Branch pools are F.avg_pool2d(3, 1, 1) with the
    default count_include_pad=True."""
    c = _c(width)
    x = b.transform_input(b.input, transform)
    x = _basic_conv(b, x, "Conv2d_1a_3x3", c(32), 3, 2)
    x = _basic_conv(b, x, "Conv2d_2a_3x3", c(32), 3)
    x = _basic_conv(b, x, "Conv2d_2b_3x3", c(64), 3, 1, 1)
    x = b.maxpool(x, "maxpool1", 3, 2)
    x = _basic_conv(b, x, "Conv2d_3b_1x1", c(80), 1)
    x = _basic_conv(b, x, "Conv2d_4a_3x3", c(192), 3)
    x = b.maxpool(x, "maxpool2", 3, 2)

    # InceptionA (Mixed_5b, pool_features=32)
    m = "Mixed_5b"
    b1 = _basic_conv(b, x, f"{m}.branch1x1", c(64), 1)
    b5 = _basic_conv(b, x, f"{m}.branch5x5_1", c(48), 1)
    b5 = _basic_conv(b, b5, f"{m}.branch5x5_2", c(64), 5, 1, 2)
    bd = _basic_conv(b, x, f"{m}.branch3x3dbl_1", c(64), 1)
    bd = _basic_conv(b, bd, f"{m}.branch3x3dbl_2", c(96), 3, 1, 1)
    bd = _basic_conv(b, bd, f"{m}.branch3x3dbl_3", c(96), 3, 1, 1)
    bp = b.avgpool(x, m, 3, 1, 1)
    bp = _basic_conv(b, bp, f"{m}.branch_pool", c(32), 1)
    x = b.concat([b1, b5, bd, bp], m)

    # InceptionB (Mixed_6a)
    m = "Mixed_6a"
    b3 = _basic_conv(b, x, f"{m}.branch3x3", c(384), 3, 2)
    bd = _basic_conv(b, x, f"{m}.branch3x3dbl_1", c(64), 1)
    bd = _basic_conv(b, bd, f"{m}.branch3x3dbl_2", c(96), 3, 1, 1)
    bd = _basic_conv(b, bd, f"{m}.branch3x3dbl_3", c(96), 3, 2)
    bp = b.maxpool(x, m, 3, 2)
    x = b.concat([b3, bd, bp], m)

    # InceptionC (Mixed_6b, channels_7x7=128)
    m, c7 = "Mixed_6b", c(128)
    b1 = _basic_conv(b, x, f"{m}.branch1x1", c(192), 1)
    b7 = _basic_conv(b, x, f"{m}.branch7x7_1", c7, 1)
    b7 = _basic_conv(b, b7, f"{m}.branch7x7_2", c7, (1, 7), 1, (0, 3))
    b7 = _basic_conv(b, b7, f"{m}.branch7x7_3", c(192), (7, 1), 1, (3, 0))
    bd = _basic_conv(b, x, f"{m}.branch7x7dbl_1", c7, 1)
    bd = _basic_conv(b, bd, f"{m}.branch7x7dbl_2", c7, (7, 1), 1, (3, 0))
    bd = _basic_conv(b, bd, f"{m}.branch7x7dbl_3", c7, (1, 7), 1, (0, 3))
    bd = _basic_conv(b, bd, f"{m}.branch7x7dbl_4", c7, (7, 1), 1, (3, 0))
    bd = _basic_conv(b, bd, f"{m}.branch7x7dbl_5", c(192), (1, 7), 1, (0, 3))
    bp = b.avgpool(x, m, 3, 1, 1)
    bp = _basic_conv(b, bp, f"{m}.branch_pool", c(192), 1)
    x = b.concat([b1, b7, bd, bp], m)

    # InceptionD (Mixed_7a)
    m = "Mixed_7a"
    b3 = _basic_conv(b, x, f"{m}.branch3x3_1", c(192), 1)
    b3 = _basic_conv(b, b3, f"{m}.branch3x3_2", c(320), 3, 2)
    b7 = _basic_conv(b, x, f"{m}.branch7x7x3_1", c(192), 1)
    b7 = _basic_conv(b, b7, f"{m}.branch7x7x3_2", c(192), (1, 7), 1, (0, 3))
    b7 = _basic_conv(b, b7, f"{m}.branch7x7x3_3", c(192), (7, 1), 1, (3, 0))
    b7 = _basic_conv(b, b7, f"{m}.branch7x7x3_4", c(192), 3, 2)
    bp = b.maxpool(x, m, 3, 2)
    x = b.concat([b3, b7, bp], m)

    # InceptionE (Mixed_7b): nested torch.cat
    m = "Mixed_7b"
    b1 = _basic_conv(b, x, f"{m}.branch1x1", c(320), 1)
    b3 = _basic_conv(b, x, f"{m}.branch3x3_1", c(384), 1)
    b3 = b.concat([_basic_conv(b, b3, f"{m}.branch3x3_2a", c(384), (1, 3), 1, (0, 1)),
                   _basic_conv(b, b3, f"{m}.branch3x3_2b", c(384), (3, 1), 1, (1, 0))], m)
    bd = _basic_conv(b, x, f"{m}.branch3x3dbl_1", c(448), 1)
    bd = _basic_conv(b, bd, f"{m}.branch3x3dbl_2", c(384), 3, 1, 1)
    bd = b.concat([_basic_conv(b, bd, f"{m}.branch3x3dbl_3a", c(384), (1, 3), 1, (0, 1)),
                   _basic_conv(b, bd, f"{m}.branch3x3dbl_3b", c(384), (3, 1), 1, (1, 0))], m)
    bp = b.avgpool(x, m, 3, 1, 1)
    bp = _basic_conv(b, bp, f"{m}.branch_pool", c(192), 1)
    x = b.concat([b1, b3, bd, bp], m)

    x = b.adaptive_avgpool(x, "avgpool", 1)
    x = b.dropout(x, "dropout", 0.5, drop)
    x = b.flatten(x, "", flat)
    return b.model(b.linear(x, "fc", classes, lin, gain=1.0))


SQUEEZENET_FIRES = [  # (features index, squeeze, expand1x1, expand3x3) and pools
    (3, 16, 64, 64), (4, 16, 64, 64), (5, 32, 128, 128), ("M", 6),
    (7, 32, 128, 128), (8, 48, 192, 192), (9, 48, 192, 192), (10, 64, 256, 256),
    ("M", 11), (12, 64, 256, 256),
]


def squeezenet1_0(b, width=1 / 8, classes=10, flat="auto", drop="elided"):
    """torchvision squeezenet1_0 (all 8 Fire modules); input 63.  MaxPools
    are (3, 2, ceil_mode=True); the classifier is Dropout, Conv 1x1, ReLU,
    AdaptiveAvgPool(1), then torch.flatten."""
    c = _c(width)
    x = b.relu(b.conv(b.input, "features.0", c(96), 7, 2), "features.1")
    x = b.maxpool(x, "features.2", 3, 2, 0, ceil=1)
    for f in SQUEEZENET_FIRES:
        if f[0] == "M":
            x = b.maxpool(x, f"features.{f[1]}", 3, 2, 0, ceil=1)
            continue
        i, s, e1, e3 = f
        p = f"features.{i}"
        sq = b.relu(b.conv(x, f"{p}.squeeze", c(s), 1), f"{p}.squeeze_activation")
        a = b.relu(b.conv(sq, f"{p}.expand1x1", c(e1), 1), f"{p}.expand1x1_activation")
        e = b.relu(b.conv(sq, f"{p}.expand3x3", c(e3), 3, 1, 1), f"{p}.expand3x3_activation")
        x = b.concat([a, e], p)
    x = b.dropout(x, "classifier.0", 0.5, drop)
    x = b.relu(b.conv(x, "classifier.1", classes, 1), "classifier.2")
    x = b.adaptive_avgpool(x, "classifier.3", 1)
    return b.model(b.flatten(x, "", flat))


MOBILENET_SETTINGS = [  # t, c, n, s (real: 7 rows, n up to 4)
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 2, 2), (6, 64, 1, 2), (6, 96, 1, 1),
]


def mobilenet_v2(b, width=1 / 4, classes=10, pool="adaptive", flat="auto", drop="elided",
                 lin="gemm"):
    """torchvision mobilenet_v2 (Conv-BN-ReLU6, inverted residuals with a
    depthwise 3x3 and a linear 1x1 projection, residual Add when stride 1 and
    cin == cout), reduced settings; input 32.  pool: "adaptive" (current
    torchvision: adaptive_avg_pool2d(1) + torch.flatten) or "mean" (older:
    x.mean([2, 3]) -> ReduceMean(axes=[2, 3], keepdims=0), no flatten)."""
    c = lambda n: max(4, int(round(n * width / 4)) * 4)  # noqa: E731
    x = b.conv_bn(b.input, "features.0.0", "features.0.1", c(32), 3, 2, 1)
    x = b.relu6(x, "features.0.2")
    cin, i = c(32), 1
    for t, ch, n, s in MOBILENET_SETTINGS:
        cout = c(ch)
        for r in range(n):
            stride = s if r == 0 else 1
            hidden = cin * t
            p, j = f"features.{i}.conv", 0
            y = x
            if t != 1:
                y = b.conv_bn(y, f"{p}.0.0", f"{p}.0.1", hidden, 1)
                y = b.relu6(y, f"{p}.0.2")
                j = 1
            y = b.conv_bn(y, f"{p}.{j}.0", f"{p}.{j}.1", hidden, 3, stride, 1, g=hidden)
            y = b.relu6(y, f"{p}.{j}.2")
            y = b.conv_bn(y, f"{p}.{j + 1}", f"{p}.{j + 2}", cout, 1)
            x = b.add(x, y, f"features.{i}") if stride == 1 and cin == cout else y
            cin, i = cout, i + 1
    x = b.conv_bn(x, f"features.{i}.0", f"features.{i}.1", c(1280), 1)
    x = b.relu6(x, f"features.{i}.2")
    if pool == "mean":
        x = b.reduce_mean_hw(x, "")
    else:
        x = b.adaptive_avgpool(x, "", 1)
        x = b.flatten(x, "", flat)
    x = b.dropout(x, "classifier.0", 0.2, drop)
    return b.model(b.linear(x, "classifier.1", classes, lin, gain=1.0))


def densenet121(b, growth=4, bn_size=4, blocks=(2, 2, 2, 2), init=8, classes=10,
                flat="auto", lin="gemm"):
    """torchvision densenet121 (real: growth 32, blocks 6, 12, 24, 16, init
    64), reduced; input 32.  Each _DenseLayer concatenates all previous
    features (the first one a Concat of a single input), then norm1 - relu1
    - conv1 (1x1) - norm2 - relu2 - conv2 (3x3); norm2 is folded into conv1
    by ts, norm1 is not.  Transitions: norm - relu - conv 1x1 -
    AvgPool2d(2, 2) (count_include_pad=1, no padding)."""
    x = b.conv_bn(b.input, "features.conv0", "features.norm0", init, 7, 2, 3)
    x = b.relu(x, "features.relu0")
    x = b.maxpool(x, "features.pool0", 3, 2, 1)
    nf = init
    for bi, nl in enumerate(blocks, 1):
        feats = [x]
        for li in range(1, nl + 1):
            p = f"features.denseblock{bi}.denselayer{li}"
            y = b.concat(feats, p)
            y = b.relu(b.bn(y, f"{p}.norm1"), f"{p}.relu1")
            y = b.conv_bn(y, f"{p}.conv1", f"{p}.norm2", bn_size * growth, 1)
            y = b.relu(y, f"{p}.relu2")
            y = b.conv(y, f"{p}.conv2", growth, 3, 1, 1, bias=False)
            feats.append(y)
        x = b.concat(feats, f"features.denseblock{bi}")
        nf += nl * growth
        if bi != len(blocks):
            p = f"features.transition{bi}"
            x = b.relu(b.bn(x, f"{p}.norm"), f"{p}.relu")
            nf //= 2
            x = b.conv(x, f"{p}.conv", nf, 1, bias=False)
            x = b.avgpool(x, f"{p}.pool", 2, 2)
    x = b.bn(x, "features.norm5")
    x = b.relu(x, "")
    x = b.adaptive_avgpool(x, "", 1)
    x = b.flatten(x, "", flat)
    return b.model(b.linear(x, "classifier", classes, lin, gain=1.0))


def avgpool_probe(b, count_include_pad, ceil=0):
    """Single-layer probes: nn.AvgPool2d(3, 2, 1, ceil_mode, count_include_pad)
    after a Conv, as torch exports it (AveragePool with pads)."""
    x = b.relu(b.conv(b.input, "conv", 8, 3, 1, 1), "relu")
    x = b.avgpool(x, "pool", 3, 2, 1, ceil=ceil, count_include_pad=count_include_pad)
    x = b.flatten(x, "")
    return b.model(b.linear(x, "fc", 10, gain=1.0))


def maxpool_indices_probe(b):
    """dynamo_export (torch 2.1-2.4) wrote max_pool2d as MaxPool with a second,
    unused Indices output (resnet stem)."""
    x = b.relu(b.conv_bn(b.input, "conv1", "bn1", 8, 7, 2, 3), "relu")
    x = b.maxpool(x, "maxpool", 3, 2, 1, indices=True)
    x = b.adaptive_avgpool(x, "avgpool", 1)
    x = b.flatten(x, "")
    return b.model(b.linear(x, "fc", 10, gain=1.0))
