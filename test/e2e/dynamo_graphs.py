"""What torch.onnx.export(..., dynamo=True) writes beyond exporter_graphs.py,
reproduced with onnx.helper (no torch), learned from exports of torchvision
2.x models with torch 2.15 (opset 20 by default, or 18):

  adaptive_avg_pool2d to a size the map does not divide: torch's
  decomposition into index arithmetic.  For each spatial dim,
      i0 = arange(out) * in // out            (start of each window)
      idx = i0[:, None] + arange(maxlength)   (clamped to in - 1 when the
                                               windows differ in length)
  then x[..., idx_h[:, :, None, None], idx_w] as Transpose(perm [2,3,0,1]),
  GatherND(indices [oh, kh, ow, kw, 2]), Transpose(perm [4,5,0,1,2,3]);
  with windows of one length a ReduceMean over axes [-3, -1]; otherwise
  masked_fill (Where with masks of the too-long taps, fill 0) and an
  unrolled sum of Gather(axis 3) / Gather(axis 4) selects, divided by the
  window sizes.
    optimize=True (the default): the indices, masks and sizes are
      initializers (bool masks, a float divisor).
    optimize=False ("raw"): they are computed in the graph: Range on Cast
      scalars, torch.div(rounding_mode="trunc") as Cast/Div/Abs/Floor/Sign/
      Mul/CastLike, Unsqueeze/Add/Min, Max + Shape + Expand + Concat for the
      broadcast index tuples, GreaterOrEqual masks, CastLike of the fill.

  ConvNeXt: LayerNorm2d and each block's norm are a Transpose to channels
  last, LayerNormalization(axis=-1, epsilon=1e-6, stash_type=1) and a
  Transpose back; nn.Linear on a 4-D tensor is MatMul with a pre-transposed
  [in, out] initializer + Add; nn.GELU is Gelu (opset 20) or, at opset 18,
  Div by sqrt(2), Erf, Add 1, Mul x, Mul 0.5; layer_scale is Mul(param
  [C, 1, 1], x); the head's LayerNorm2d reads a Gather (as_strided) of the
  flattened ReduceMean.
"""

import numpy as np
from onnx import TensorProto

from exporter_graphs import Builder


def _windows(n, out):
    """torch's adaptive_avg_pool2d decomposition for one dim: the tap indices
    [out, maxlength], whether the windows differ in length, the mask of taps
    past a window's end, the window lengths."""
    orange = np.arange(out)
    i0 = orange * n // out
    maxlength = n // out + 1
    mod = n % out
    adaptive = not (mod == 0 or out % mod == 0)
    if adaptive:
        maxlength += 1
    elif mod == 0:
        maxlength -= 1
    rmax = np.arange(maxlength)
    idx = i0[:, None] + rmax
    if not adaptive:
        return idx, False, None, np.full(out, maxlength)
    idx = np.minimum(idx, n - 1)
    length = ((orange + 1) * n + out - 1) // out - i0
    return idx, True, rmax[None, :] >= length[:, None], length


class DecompBuilder(Builder):
    """A dyn Builder whose adaptive_avgpool writes torch's decomposition when
    the map does not divide into the target (raw: optimize=False)."""

    def __init__(self, *a, raw=False, **kw):
        super().__init__(*a, **kw)
        assert not self.ts
        self.raw = raw

    def node(self, op, inputs, scope, aten, shapes, nout=1, **attrs):
        """Values without an aten name are the exporter's val_N."""
        if aten is None:
            aten = f"val_{self._bump()}"
        return super().node(op, inputs, scope, aten, shapes, nout, **attrs)

    def _k(self, value, dtype):
        """A constant: an initializer (optimized) or a Constant node (raw)."""
        if not self.raw:
            return self.const("", value, dtype)
        from onnx import numpy_helper, helper
        out = self._unique(f"val_{self._bump()}")
        self.nodes.append(helper.make_node(
            "Constant", [], [out], name=self._unique(f"node_Constant_{self.node_k}"),
            value=numpy_helper.from_array(np.asarray(value, dtype=dtype), "")))
        self.node_k += 1
        return out

    def adaptive_avgpool(self, x, scope, target):
        c, h, w = self.shape[x]
        if h % target == 0 and w % target == 0:
            return super().adaptive_avgpool(x, scope, target)
        ih, ah, mh, lh = _windows(h, target)
        iw, aw, mw, lw = _windows(w, target)
        assert ah == aw, "one kind of window per model here"
        if self.raw:
            hidx, widx = self._raw_index(h, target, True), self._raw_index(w, target, False)
        t = self.node("Transpose", [x], scope, None, None, perm=[2, 3, 0, 1])
        kh, kw = ih.shape[1], iw.shape[1]
        if self.raw:
            mx = self.node("Max", [hidx, widx], scope, None, None)
            shp = self.node("Shape", [mx], scope, None, None, start=0)
            m1 = self._k([-1], np.int64)
            parts = [self.node("Unsqueeze", [self.node("Expand", [v, shp], scope, None, None), m1],
                               scope, None, None) for v in (hidx, widx)]
            tuples = self.node("Concat", parts, scope, None, None, axis=-1)
        else:
            hh = np.broadcast_to(ih[:, :, None, None], (target, kh, target, kw))
            ww = np.broadcast_to(iw[None, None, :, :], (target, kh, target, kw))
            tuples = self.const(scope, np.stack([hh, ww], -1), np.int64)
        g = self.node("GatherND", [t, tuples], scope, None, None, batch_dims=0)
        vals = self.node("Transpose", [g], scope, "index", None, perm=[4, 5, 0, 1, 2, 3])
        if not ah:
            axes = self._k([-3, -1], np.int64)
            return self.node("ReduceMean", [vals, axes], scope, "mean", (c, target, target),
                             keepdims=0)
        zero = self._k(0.0, np.float32)
        if self.raw:
            zero = self.node("CastLike", [zero, vals], scope, None, None)
        if self.raw:  # taps at or past each window's length
            m1 = self._k([-1], np.int64)

            def past(length, k):
                lim = self.node("Cast", [self._k(k, np.int64)], scope, None, None,
                                to=TensorProto.INT64)
                lo = self._k(0, np.int64)
                taps = self.node("Range", [lo, lim, self._k(1, np.int64)], scope, None, None)
                u = self.node("Unsqueeze", [self._k(length, np.int64), m1], scope, None, None)
                return self.node("GreaterOrEqual", [taps, u], scope, "ge", None)

            mask_h = past(lh, kh)
            mask_h = self.node("Unsqueeze", [mask_h, m1], scope, None, None)
            mask_h = self.node("Unsqueeze", [mask_h, m1], scope, None, None)
            mask_w = past(lw, kw)
        else:
            mask_h = self.const(scope, mh[:, :, None, None], np.bool_)
            mask_w = self.const(scope, mw, np.bool_)
        vals = self.node("Where", [mask_h, zero, vals], scope, "masked_fill", None)
        vals = self.node("Where", [mask_w, zero, vals], scope, "masked_fill", None)
        total = None
        for i in range(kh):
            for j in range(kw):
                si = self.node("Gather", [vals, self._k(i, np.int64)], scope, "select", None,
                               axis=3)
                sj = self.node("Gather", [si, self._k(j, np.int64)], scope, "select", None,
                               axis=4)
                total = sj if total is None else self.node("Add", [total, sj], scope, "add",
                                                           None)
        if self.raw:  # the window sizes, multiplied and cast in the graph
            u = self.node("Unsqueeze", [self._k(lh, np.int64), self._k([-1], np.int64)], scope,
                          None, None)
            prod = self.node("Mul", [u, self._k(lw, np.int64)], scope, "mul", None)
            div = self.node("Cast", [prod], scope, "convert_element_type_default", None,
                            to=TensorProto.FLOAT)
        else:
            div = self.const(scope, lh[:, None] * lw[None, :], np.float32)
        return self.node("Div", [total, div], scope, "div", (c, target, target))

    def _raw_index(self, n, out, lead):
        """The window taps of one dim computed in the graph (optimize=False):
        idx = trunc(arange(out) * n / out)[:, None] + arange(maxlength),
        clamped with Min when the windows differ; [out, maxlength] for H is
        unsqueezed twice to [out, maxlength, 1, 1]."""
        idx, adaptive, _, _ = _windows(n, out)
        maxlength = idx.shape[1]
        i64 = TensorProto.INT64

        def arange(k):
            lim = self.node("Cast", [self._k(k, np.int64)], "", None, None, to=i64)
            lo = self.node("Cast", [self._k(0, np.int64)], "", None, None, to=i64)
            step = self.node("Cast", [self._k(1, np.int64)], "", None, None, to=i64)
            return self.node("Range", [lo, lim, step], "", "arange", None)

        orange = arange(out)
        prod = self.node("Mul", [orange, self._k(n, np.int64)], "", "mul", None)
        fp = self.node("Cast", [prod], "", None, None, to=TensorProto.FLOAT)
        fo = self.node("Cast", [self._k(out, np.int64)], "", None, None, to=TensorProto.FLOAT)
        q = self.node("Div", [fp, fo], "", None, None)
        fl = self.node("Floor", [self.node("Abs", [q], "", None, None)], "", None, None)
        tr = self.node("Mul", [fl, self.node("Sign", [q], "", None, None)], "", None, None)
        i0 = self.node("CastLike", [tr, prod], "", "div", None)
        u = self.node("Unsqueeze", [i0, self._k([-1], np.int64)], "", "unsqueeze", None)
        idx_v = self.node("Add", [u, arange(maxlength)], "", "add", None)
        if adaptive:
            top = self.node("Cast", [self._k(n - 1, np.int64)], "", "scalar_tensor", None,
                            to=i64)
            idx_v = self.node("Min", [idx_v, top], "", "minimum", None)
        if lead:
            m1 = self._k([-1], np.int64)
            idx_v = self.node("Unsqueeze", [idx_v, m1], "", "unsqueeze", None)
            idx_v = self.node("Unsqueeze", [idx_v, m1], "", "unsqueeze", None)
        return idx_v


def _ln_last(b, x, scope, c, eps=1e-6):
    """LayerNormalization over the last (channel) axis of a channels-last
    value."""
    wgt = b.param(f"{scope}.weight", b.rng.uniform(0.5, 1.5, (c,)))
    bias = b.param(f"{scope}.bias", b.rng.uniform(-0.1, 0.1, (c,)))
    return b.node("LayerNormalization", [x, wgt, bias], scope, "layer_norm", None,
                  axis=-1, epsilon=eps, stash_type=1)


def _layernorm2d(b, x, scope):
    c, h, w = b.shape[x]
    p = b.node("Transpose", [x], scope, "permute", (h, w, c), perm=[0, 2, 3, 1])
    n = _ln_last(b, p, scope, c)
    return b.node("Transpose", [n], scope, "permute", (c, h, w), perm=[0, 3, 1, 2])


def _gelu(b, x, scope):
    if b.opset >= 20:
        return b.node("Gelu", [x], scope, "gelu", None, approximate="none")
    d = b.node("Div", [x, b.const(scope, 1.4142135623730951, np.float32)], scope, None, None)
    e = b.node("Erf", [d], scope, None, None)
    a = b.node("Add", [e, b.const(scope, 1.0, np.float32)], scope, None, None)
    m = b.node("Mul", [x, a], scope, None, None)
    return b.node("Mul", [b.const(scope, 0.5, np.float32), m], scope, "gelu", None)


def _linear_last(b, x, scope, nin, nout):
    w = b.param(f"val_{b._bump()}", b.he((nout, nin), nin).T)
    bias = b.param(f"{scope}.bias", b.small((nout,)))
    mm = b.node("MatMul", [x, w], scope, None, None)
    return b.node("Add", [mm, bias], scope, "linear", None)


def _cnblock(b, x, scope):
    c, h, w = b.shape[x]
    d = b.conv(x, f"{scope}.block.0", c, 7, 1, 3, g=c, bias=True)
    p = b.node("Transpose", [d], scope, "permute", (h, w, c), perm=[0, 2, 3, 1])
    n = _ln_last(b, p, f"{scope}.block.2", c)
    y = _linear_last(b, n, f"{scope}.block.3", c, 4 * c)
    y = _gelu(b, y, f"{scope}.block.4")
    y = _linear_last(b, y, f"{scope}.block.5", 4 * c, c)
    y = b.node("Transpose", [y], scope, "permute", (c, h, w), perm=[0, 3, 1, 2])
    ls = b.param(f"{scope}.layer_scale", b.rng.uniform(0.5, 1.5, (c, 1, 1)))
    y = b.node("Mul", [ls, y], scope, "mul", (c, h, w))
    return b.add(y, x, scope)


def convnext(b, dims=(8, 16), classes=10):
    """torchvision convnext_tiny reduced to two stages of one block each."""
    x = b.conv(b.input, "features.0.0", dims[0], 4, 4, 0)
    x = _layernorm2d(b, x, "features.0.1")
    x = _cnblock(b, x, "features.1.0")
    x = _layernorm2d(b, x, "features.2.0")
    x = b.conv(x, "features.2.1", dims[1], 2, 2, 0)
    x = _cnblock(b, x, "features.3.0")
    c = dims[1]
    axes = b.const("avgpool", [-1, -2], np.int64)
    x = b.node("ReduceMean", [x, axes], "avgpool", "mean", (c, 1, 1), keepdims=1)
    if not b.sym_batch:  # as_strided: a Gather of the flattened mean
        flat = b.node("Reshape", [x, b.const("", [-1], np.int64)], "", None, None)
        at = np.arange(b.batch * c).reshape(b.batch, c, 1, 1)
        x = b.node("Gather", [flat, b.const("", at, np.int64)], "", "as_strided", (c, 1, 1),
                   axis=0)
    x = _layernorm2d(b, x, "classifier.0")
    x = b.flatten(x, "classifier.1")
    x = b.linear(x, "classifier.2", classes, gain=1.0)
    return b.model(x)
