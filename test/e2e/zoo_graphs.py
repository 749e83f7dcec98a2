"""onnx.helper reproductions of what torch.onnx.export writes for the blocks of
today's CNN model collections (timm, torchvision's segmentation networks),
without torch: the patterns lwcc imports for those networks, each
checked against real exports of the networks named below (torch 2.15,
timm 1.0; tools/torch_check/zoo.py sweeps the networks themselves).

Both exporter styles of exporter_graphs.Builder ("ts": TorchScript at
opset 17, "dyn": dynamo at opset 20 with optimize=False) unless noted:

  hard_block   MobileNetV3 / LCNet / FBNet: conv + batch norm + HardSwish,
               a depthwise block with squeeze-excitation gated by
               HardSigmoid (ts: alpha only; dyn: alpha and beta), x.mean
               (ReduceMean keepdims=1) for the squeeze.
  hrnet_fuse   HRNet's fusion: the low-resolution branch upsampled by
               nn.Upsample(scale_factor=2, mode="nearest") -> Resize(asymmetric,
               floor) with scales (ts: Concat of two Constants; dyn: a
               Constant), added to the high-resolution branch.
  unet_up      U-Net / FPN decoders: F.interpolate bilinear (half_pixel,
               scales), bilinear with align_corners to an explicit size
               (sizes from Shape, Slice/Shape(start, end), Cast, Concat).
  nf_stdconv   Normalizer-free ResNets' ScaledStdConv2d: the weight
               standardized by F.batch_norm(training=True) without running
               statistics (ts: BatchNormalization training_mode=1 with
               ReduceMean statistics; dyn: the inference form fed the batch's
               moments), then Conv.
  csp_leaky    CSPDarkNet: conv + batch norm + LeakyReLU(0.01) blocks whose
               last batch norm starts at zero (every LeakyReLU input at 0).
  acts         Elu, Selu, Celu, Softplus (ts; dyn: its threshold as
               Where(Greater(x, 20), x, Softplus(x))), Mish (dyn), Softsign
               (Abs/Add/Div), PRelu per channel and shared (slope Unsqueeze'd
               or Reshape'd to [C, 1, 1]), ReLU6 as Clip.
  groupnorm_bicubic  PoolFormer's nn.GroupNorm (ts: InstanceNormalization over
               [N, groups, -1]) and F.interpolate bicubic (Resize cubic),
               with a ThresholdedRelu.
  upsample9    nn.Upsample at opset 9 (TorchScript exporter): Upsample(x,
               scales from a Concat of Constants).
"""
import numpy as np
from onnx import TensorProto, helper, numpy_helper


def _const_node(b, scope, value, dtype, floats_attr=False):
    """A Constant node (both exporters write these with optimize=False); the
    dynamo exporter's float lists as value_floats."""
    arr = np.asarray(value, dtype=dtype)
    name = b._unique((b._ts_scope(scope) + "/Constant") if b.ts else f"val_{b._bump()}")
    out = b._unique(f"{name}_output_0") if b.ts else name
    if floats_attr and not b.ts:
        node = helper.make_node("Constant", [], [out], name=name,
                                value_floats=[float(v) for v in arr.ravel()])
    else:
        node = helper.make_node("Constant", [], [out], name=name,
                                value=numpy_helper.from_array(arr, ""))
    b.nodes.append(node)
    return out


def _act(b, op, x, scope, aten, **attrs):
    return b.node(op, [x], scope, aten, b.shape[x], **attrs)


def hardswish(b, x, scope):
    return _act(b, "HardSwish", x, scope, "hardswish")


def hardsigmoid(b, x, scope):
    attrs = dict(alpha=1.0 / 6.0) if b.ts else dict(alpha=1.0 / 6.0, beta=0.5)
    return _act(b, "HardSigmoid", x, scope, "hardsigmoid", **attrs)


def _head(b, x, classes):
    c = b.shape[x][0]
    if b.ts:
        p = b.node("GlobalAveragePool", [x], "global_pool", "", (c, 1, 1))
        f = b.node("Flatten", [p], "", "flatten", (c,), axis=1)
    else:
        axes = _const_node(b, "", [-1, -2], np.int64)
        p = b.node("ReduceMean", [x, axes], "global_pool", "mean", (c, 1, 1), keepdims=1)
        f = b.flatten(p, "", "static")
    return b.linear(f, "classifier", classes)


def _mean_hw(b, x, scope):
    """x.mean((2, 3), keepdim=True)."""
    c = b.shape[x][0]
    if b.ts:
        return b.node("ReduceMean", [x], scope, "mean", (c, 1, 1), axes=[2, 3], keepdims=1)
    axes = _const_node(b, scope, [2, 3], np.int64)
    return b.node("ReduceMean", [x, axes], scope, "mean", (c, 1, 1), keepdims=1,
                  noop_with_empty_axes=0)


def hard_block(b, classes=10):
    x = hardswish(b, b.conv_bn(b.input, "conv_stem", "bn1", 8, 3, 2, 1), "bn1.act")
    y = hardswish(b, b.conv_bn(x, "blocks.0.conv_pw", "blocks.0.bn1", 16, 1), "blocks.0.bn1.act")
    y = hardswish(b, b.conv_bn(y, "blocks.0.conv_dw", "blocks.0.bn2", 16, 3, 1, 1, g=16),
                  "blocks.0.bn2.act")
    s = _mean_hw(b, y, "blocks.0.se")
    s = b.relu(b.conv(s, "blocks.0.se.conv_reduce", 4, 1), "blocks.0.se.act1")
    s = hardsigmoid(b, b.conv(s, "blocks.0.se.conv_expand", 16, 1), "blocks.0.se.gate")
    y = b.node("Mul", [y, s], "blocks.0.se", "mul", b.shape[y])
    y = b.conv_bn(y, "blocks.0.conv_pwl", "blocks.0.bn3", 8, 1)
    x = b.add(x, y, "blocks.0")
    return b.model(_head(b, hardswish(b, x, "head.act"), classes))


def _resize_scales(b, x, scope, scale, mode, coord):
    c, h, w = b.shape[x]
    if b.ts:
        a = _const_node(b, scope, [1.0, 1.0], np.float32)
        s = _const_node(b, scope, [float(scale)] * 2, np.float32)
        scales = b.node("Concat", [a, s], scope, "", (4,), axis=0)
        return b.node("Resize", [x, "", scales], scope, "", (c, h * scale, w * scale),
                      coordinate_transformation_mode=coord, cubic_coeff_a=-0.75, mode=mode,
                      nearest_mode="floor")
    scales = _const_node(b, scope, [1.0, 1.0, float(scale), float(scale)], np.float32, True)
    aten = "upsample_nearest2d" if mode == "nearest" else "upsample_bilinear2d"
    return b.node("Resize", [x, "", scales], scope, aten, (c, h * scale, w * scale),
                  keep_aspect_ratio_policy="stretch", antialias=0, extrapolation_value=0.0,
                  exclude_outside=0, nearest_mode="floor", coordinate_transformation_mode=coord,
                  cubic_coeff_a=-0.75, mode=mode)


def _resize_sizes(b, x, scope, size, coord):
    """F.interpolate(x, size=(size, size), mode="bilinear", align_corners=...)."""
    c = b.shape[x][0]
    hw = _const_node(b, scope, [size, size], np.int64)
    if b.ts:
        shape = b.node("Shape", [x], scope, "", (4,))
        starts = _const_node(b, scope, [0], np.int64)
        ends = _const_node(b, scope, [2], np.int64)
        axes = _const_node(b, scope, [0], np.int64)
        nc = b.node("Slice", [shape, starts, ends, axes], scope, "", (2,))
        hw = b.node("Cast", [hw], scope, "", (2,), to=TensorProto.INT64)
        sizes = b.node("Concat", [nc, hw], scope, "", (4,), axis=0)
        return b.node("Resize", [x, "", "", sizes], scope, "", (c, size, size),
                      coordinate_transformation_mode=coord, cubic_coeff_a=-0.75, mode="linear",
                      nearest_mode="floor")
    nc = b.node("Shape", [x], scope, "sym_size", (2,), start=0, end=2)
    hw = b.node("Cast", [hw], scope, "_to_copy", (2,), to=TensorProto.INT64)
    sizes = b.node("Concat", [nc, hw], scope, "cat", (4,), axis=0)
    return b.node("Resize", [x, "", "", sizes], scope, "upsample_bilinear2d", (c, size, size),
                  keep_aspect_ratio_policy="stretch", antialias=0, extrapolation_value=0.0,
                  exclude_outside=0, nearest_mode="floor", coordinate_transformation_mode=coord,
                  cubic_coeff_a=-0.75, mode="linear")


def hrnet_fuse(b, classes=10):
    x = b.relu(b.conv_bn(b.input, "conv1", "bn1", 8, 3, 1, 1), "relu")
    hi = b.relu(b.conv_bn(x, "branches.0", "branches.0.bn", 8, 3, 1, 1), "branches.0.relu")
    lo = b.relu(b.conv_bn(x, "branches.1", "branches.1.bn", 12, 3, 2, 1), "branches.1.relu")
    up = b.conv_bn(lo, "fuse_layers.0.1.0", "fuse_layers.0.1.1", 8, 1)
    up = _resize_scales(b, up, "fuse_layers.0.1.2", 2, "nearest", "asymmetric")
    y = b.relu(b.add(hi, up, "fuse"), "fuse.relu")
    return b.model(_head(b, y, classes))


def unet_up(b, classes=10):
    x1 = b.relu(b.conv_bn(b.input, "e1.0", "e1.1", 6, 3, 1, 1), "e1.2")
    x2 = b.relu(b.conv_bn(b.maxpool(x1, "pool1", 2, 2), "e2.0", "e2.1", 8, 3, 1, 1), "e2.2")
    x3 = b.relu(b.conv_bn(b.maxpool(x2, "pool2", 2, 2), "e3.0", "e3.1", 8, 3, 1, 1), "e3.2")
    u2 = _resize_scales(b, x3, "up2", 2, "nearest", "asymmetric")
    y2 = b.relu(b.conv_bn(b.concat([u2, x2], "cat2"), "d2.0", "d2.1", 6, 3, 1, 1), "d2.2")
    h = b.shape[x1][1]
    u1 = _resize_scales(b, y2, "up1", 2, "linear", "half_pixel")
    u1 = b.add(u1, _resize_sizes(b, y2, "up1b", h, "align_corners"), "up1")
    y1 = b.relu(b.conv_bn(b.concat([u1, x1], "cat1"), "d1.0", "d1.1", 6, 3, 1, 1), "d1.2")
    return b.model(_head(b, b.conv(y1, "head", 6, 1), classes))


def _std_weight(b, scope, cout, cin, k):
    """ScaledStdConv2d's weight: F.batch_norm(W.reshape(1, cout, -1), None,
    None, weight=(gain * scale).view(-1), training=True, momentum=0.,
    eps=1e-5).reshape_as(W)."""
    fan = cin * k * k
    w = b.param(f"{scope}.weight", b.he((cout, cin, k, k), fan))
    gain = b.param(f"{scope}.gain", np.ones((cout, 1, 1, 1)))
    if b.ts:
        s1 = _const_node(b, scope, [1, cout, -1], np.int64)
        view = b.node("Reshape", [w, s1], scope, "", (cout, fan), allowzero=0)
        sc = _const_node(b, scope, [1.0 / np.sqrt(fan)], np.float32)
        g = b.node("Mul", [gain, sc], scope, "", None)
        m1 = _const_node(b, scope, [-1], np.int64)
        gv = b.node("Reshape", [g, m1], scope, "", None, allowzero=0)
        zeros = _const_node(b, scope, np.zeros(cout), np.float32)
        s2 = _const_node(b, scope, [1, cout, -1], np.int64)
        v2 = b.node("Reshape", [view, s2], scope, "", None, allowzero=0)
        t = b.node("Transpose", [v2], scope, "", None, perm=[0, 2, 1])
        mean = b.node("ReduceMean", [t], scope, "", None, axes=[0, 1], keepdims=0)
        mk = b.node("ReduceMean", [t], scope, "", None, axes=[0, 1], keepdims=1)
        d = b.node("Sub", [t, mk], scope, "", None)
        sq = b.node("Mul", [d, d], scope, "", None)
        var = b.node("ReduceMean", [sq], scope, "", None, axes=[0, 1], keepdims=0)
        bn = b.node("BatchNormalization", [view, gv, zeros, mean, var], scope, "", [None] * 3,
                    nout=3, epsilon=1e-5, momentum=1.0, training_mode=1)[0]
        shape = b.node("Shape", [w], scope, "", None)
        return b.node("Reshape", [bn, shape], scope, "", None, allowzero=0)
    dims = [_const_node(b, scope, [v], np.int64) for v in (1, cout, -1)]
    s1 = b.node("Concat", dims, scope, "cat", None, axis=0)
    view = b.node("Reshape", [w, s1], scope, "view", None, allowzero=1)
    sc = _const_node(b, scope, 1.0 / np.sqrt(fan), np.float32)
    g = b.node("Mul", [gain, sc], scope, "mul", None)
    m1 = b.node("Concat", [_const_node(b, scope, [-1], np.int64)], scope, "cat", None, axis=0)
    gv = b.node("Reshape", [g, m1], scope, "view", None, allowzero=1)
    zero = b.node("CastLike", [_const_node(b, scope, [0.0], np.float32, True), view], scope,
                  "zeros_like", None)
    cdim = b.node("Shape", [view], scope, "sym_size", None, start=1, end=2)
    zeros = b.node("Expand", [zero, cdim], scope, "expand", None)
    axes = _const_node(b, scope, [0, 2], np.int64)
    mean = b.node("ReduceMean", [view, axes], scope, "mean", None, keepdims=0,
                  noop_with_empty_axes=0)
    mk = b.node("ReduceMean", [view, axes], scope, "mean", None, keepdims=1,
                noop_with_empty_axes=0)
    d = b.node("Sub", [view, mk], scope, "sub", None)
    sq = b.node("Mul", [d, d], scope, "mul", None)
    var = b.node("ReduceMean", [sq, axes], scope, "mean", None, keepdims=0,
                 noop_with_empty_axes=0)
    bn = b.node("BatchNormalization", [view, gv, zeros, mean, var], scope,
                "_native_batch_norm_legit", None, epsilon=1e-5, momentum=1.0)
    dims = [_const_node(b, scope, [v], np.int64) for v in (cout, cin, k, k)]
    s2 = b.node("Concat", dims, scope, "cat", None, axis=0)
    return b.node("Reshape", [bn, s2], scope, "view", None, allowzero=1)


def _std_conv(b, x, scope, cout, k, s=1, p=0):
    cin, h, w = b.shape[x]
    wt = _std_weight(b, scope, cout, cin, k)
    bias = b.param(f"{scope}.bias", np.zeros(cout))
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    attrs = dict(dilations=[1, 1], group=1, kernel_shape=[k, k], pads=[p] * 4, strides=[s, s])
    if not b.ts:
        attrs["auto_pad"] = "NOTSET"
    return b.node("Conv", [x, wt, bias], scope, "conv2d", (cout, ho, wo), **attrs)


def nf_stdconv(b, classes=10):
    x = b.relu(_std_conv(b, b.input, "stem.conv", 8, 3, 2, 1), "stem.act")
    y = b.relu(_std_conv(b, x, "stages.0.conv1", 8, 3, 1, 1), "stages.0.act")
    y = _std_conv(b, y, "stages.0.conv2", 8, 1)
    return b.model(_head(b, b.add(x, y, "stages.0"), classes))


def _leaky(b, x, scope):
    return b.node("LeakyRelu", [x], scope, "leaky_relu", b.shape[x], alpha=0.01)


def _conv_bn_zero(b, x, scope, cout, k, p):
    """nn.Conv2d(bias=False) + a batch norm whose weight and bias start at 0."""
    cin = b.shape[x][0]
    w = b.param(f"{scope}.conv.weight", b.he((cout, cin, k, k), cin * k * k))
    y = b._conv_node(x, f"{scope}.conv", w, None, (k, k), (1, 1), (p, p), 1, cout)
    zeros, ones = np.zeros(cout), np.ones(cout)
    ins = [y, b.param(f"{scope}.bn.weight", zeros), b.param(f"{scope}.bn.bias", zeros),
           b.param(f"{scope}.bn.running_mean", zeros), b.param(f"{scope}.bn.running_var", ones)]
    attrs = dict(epsilon=1e-5, momentum=0.9)
    if b.ts:
        attrs["training_mode"] = 0
    return b.node("BatchNormalization", ins, f"{scope}.bn", "_native_batch_norm_legit_no_training",
                  b.shape[y], **attrs)


def csp_leaky(b, classes=10):
    x = _leaky(b, b.conv_bn(b.input, "stem.conv", "stem.bn", 8, 3, 2, 1), "stem.act")
    for i in range(2):
        s = f"stages.0.blocks.{i}"
        y = _leaky(b, b.conv_bn(x, f"{s}.conv1.conv", f"{s}.conv1.bn", 4, 1), f"{s}.conv1.act")
        y = _leaky(b, _conv_bn_zero(b, y, f"{s}.conv2", 8, 3, 1), f"{s}.conv2.act")
        x = b.add(x, y, s)
    return b.model(_head(b, x, classes))


def _prelu(b, x, scope, per_channel):
    c = b.shape[x][0]
    n = c if per_channel else 1
    w = b.param(f"{scope}.weight", np.full(n, 0.25 if per_channel else 0.2))
    if b.ts:
        ax = _const_node(b, scope, [1, 2], np.int64)
        slope = b.node("Unsqueeze", [w, ax], scope, "", (n, 1, 1))
    else:
        shp = _const_node(b, scope, [n, 1, 1], np.int64)
        slope = b.node("Reshape", [w, shp], scope, "view", (n, 1, 1))
    return b.node("PRelu", [x, slope], scope, "prelu", b.shape[x])


def _softsign(b, x, scope):
    a = b.node("Abs", [x], scope, "abs", b.shape[x])
    one = _const_node(b, scope, 1.0, np.float32)
    d = b.node("Add", [a, one], scope, "add", b.shape[x])
    return b.node("Div", [x, d], scope, "div", b.shape[x])


def _softplus_dyn(b, x, scope):
    """nn.Softplus() as the dynamo exporter writes it: the threshold above
    which it is the identity as a Where of a run-time Greater."""
    beta = _const_node(b, scope, 1.0, np.float32)
    scaled = b.node("Mul", [x, beta], scope, "self_scaled", b.shape[x])
    sp = b.node("Softplus", [scaled], scope, "tmp", b.shape[x])
    y = b.node("Div", [sp, beta], scope, "softplus", b.shape[x])
    thr = _const_node(b, scope, 20.0, np.float32)
    above = b.node("Greater", [scaled, thr], scope, "tmp", b.shape[x])
    return b.node("Where", [above, x, y], scope, "softplus", b.shape[x])


def acts(b, classes=10):
    x = b.maxpool(b.input, "pool", 2, 2)
    layers = [("elu", lambda y, s: _act(b, "Elu", y, s, "elu", alpha=0.7)),
              ("selu", lambda y, s: _act(b, "Selu", y, s, "selu")),
              ("celu", lambda y, s: _act(b, "Celu", y, s, "celu", alpha=1.3)),
              ("softplus" if b.ts else "mish",
               lambda y, s: _act(b, "Softplus" if b.ts else "Mish", y, s, "softplus")),
              ("softsign", lambda y, s: _softsign(b, y, s)),
              ("prelu_c", lambda y, s: _prelu(b, y, s, True)),
              ("prelu_1", lambda y, s: _prelu(b, y, s, False)),
              ("relu6", lambda y, s: b.relu6(y, s))]
    if not b.ts:
        layers.append(("softplus", lambda y, s: _softplus_dyn(b, y, s)))
    for k, (name, fn) in enumerate(layers):
        x = fn(b.conv_bn(x, f"body.{k}.0", f"body.{k}.1", 6, 3, 1, 1), f"body.{k}.{name}")
    return b.model(_head(b, x, classes))


def _group_norm(b, x, scope, groups):
    """nn.GroupNorm as the TorchScript exporter writes it: Reshape to
    [N, groups, -1], InstanceNormalization (unit scale, zero bias),
    Reshape back, then the per-channel weight and bias, Unsqueeze'd."""
    c = b.shape[x][0]
    to = _const_node(b, scope, [0, groups, -1], np.int64)
    r = b.node("Reshape", [x, to], scope, "", None)
    ones = _const_node(b, scope, np.ones(groups), np.float32)
    zeros = _const_node(b, scope, np.zeros(groups), np.float32)
    n = b.node("InstanceNormalization", [r, ones, zeros], scope, "", None, epsilon=1e-5)
    shape = b.node("Shape", [x], scope, "", None)
    back = b.node("Reshape", [n, shape], scope, "", b.shape[x])
    w = b.param(f"{scope}.weight", b.rng.uniform(0.5, 1.5, c))
    bias = b.param(f"{scope}.bias", b.rng.uniform(-0.1, 0.1, c))
    ax = _const_node(b, scope, [1, 2], np.int64)
    wu = b.node("Unsqueeze", [w, ax], scope, "", (c, 1, 1))
    m = b.node("Mul", [back, wu], scope, "", b.shape[x])
    ax2 = _const_node(b, scope, [1, 2], np.int64)
    bu = b.node("Unsqueeze", [bias, ax2], scope, "", (c, 1, 1))
    return b.node("Add", [m, bu], scope, "", b.shape[x])


def groupnorm_bicubic(b, classes=10):
    """PoolFormer's GroupNorm (ts form), F.interpolate(mode="bicubic") ->
    Resize cubic (half_pixel, A = -0.75), and ONNX's ThresholdedRelu (which
    no PyTorch module exports: here so that a CPU trainer runs every new
    op)."""
    assert b.ts
    x = b.conv(b.input, "stem", 8, 3, 1, 1)
    x = _group_norm(b, x, "norm1", 2)
    x = _act(b, "ThresholdedRelu", x, "thr", "", alpha=-0.5)
    c, h, w = b.shape[x]
    a = _const_node(b, "up", [1.0, 1.0], np.float32)
    s2 = _const_node(b, "up", [2.0, 2.0], np.float32)
    scales = b.node("Concat", [a, s2], "up", "", (4,), axis=0)
    x = b.node("Resize", [x, "", scales], "up", "", (c, 2 * h, 2 * w),
               coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, mode="cubic",
               nearest_mode="floor")
    return b.model(_head(b, b.conv(x, "head", 6, 3, 2, 1), classes))


def upsample9(b, classes=10):
    """The TorchScript exporter at opset 9 (b.opset == 9)."""
    x = b.relu(b.conv(b.input, "c", 6, 3, 1, 1), "relu")
    c, h, w = b.shape[x]
    a = _const_node(b, "u", [1.0, 1.0], np.float32)
    s = _const_node(b, "u", [2.0, 2.0], np.float32)
    scales = b.node("Concat", [a, s], "u", "", (4,), axis=0)
    y = b.node("Upsample", [x, scales], "u", "", (c, 2 * h, 2 * w), mode="nearest")
    p = b.node("GlobalAveragePool", [y], "pool", "", (c, 1, 1))
    f = b.node("Flatten", [p], "", "flatten", (c,), axis=1)
    return b.model(b.linear(f, "fc", classes))
