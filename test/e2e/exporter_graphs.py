"""onnx.helper builders that reproduce, node for node, what torch.onnx.export
writes for torchvision's classification networks, without torch.

Two exporter styles are modelled (see Builder):

  "ts"   the TorchScript exporter (torch.onnx.export(..., dynamo=False)) at
         opset 17, eval mode, do_constant_folding=True, input_names=["input"],
         output_names=["output"], dynamic_axes={"input": {0: "batch_size"},
         "output": {0: "batch_size"}}:
           - Conv followed by BatchNorm is folded into one Conv with a bias;
             the folded parameters get names like "onnx::Conv_301".  A BN that
             does not follow a Conv (densenet norm1 / transition norm / norm5)
             stays a BatchNormalization(epsilon, momentum=0.9).
           - nodes are named after the module scope, "/layer1/layer1.0/conv1/
             Conv", values "<node>_output_0".
           - scalars (Clip's min/max, transform_input's index/scale/shift,
             Unsqueeze axes, view()'s -1) are Constant nodes.
           - MaxPool(ceil_mode, kernel_shape, pads, strides); avg_pool2d ->
             AveragePool(ceil_mode, count_include_pad, kernel_shape, pads,
             strides); adaptive_avg_pool2d -> GlobalAveragePool for (1, 1),
             otherwise AveragePool(kernel_shape=k, strides=k) only.
           - torch.flatten(x, 1) -> Flatten(axis=1); x.view(x.size(0), -1) ->
             Shape, Gather(Constant 0), Unsqueeze(Constant [0]), Concat with
             Constant [-1], Reshape.
           - nn.Linear -> Gemm(alpha=1, beta=1, transB=1).
           - eval-mode Dropout is removed by the exporter; with
             training=TrainingMode.PRESERVE (or older exporters) it is kept as
             Dropout(x, Constant ratio, Constant training_mode=False).
         With bn_kept ("identity" or "direct"; the export of a model in eval
         mode with training=TrainingMode.PRESERVE, do_constant_folding=False):
           - Conv without bias + BatchNormalization(epsilon, momentum=0.9,
             training_mode=0), params named like the state dict, batch norms
             fresh (weight and running_var ones, bias and running_mean zeros).
           - initializers with equal values are deduplicated: the first one
             stays, the others become Identity nodes named "Identity_N" at
             the top of the graph whose outputs carry the duplicates' names
             ("layer1.0.bn1.bias = Identity(bn1.bias)"), as torch writes it
             ("identity"); "direct" instead makes the readers read the first
             initializer by its own name (a shared initializer read directly
             by several nodes).
  "dyn"  the dynamo exporter (torch.onnx.export(..., dynamo=True)) at opset 18:
           - every constant is an initializer (scalars "val_12", int64 shapes
             for Reshape, ReduceMean axes, Clip bounds, Unsqueeze axes).
           - BatchNorm is not folded: Conv without bias, then
             BatchNormalization(epsilon, momentum=0.9, training_mode=0).
           - nodes are "node_Conv_12", values are aten names ("conv2d",
             "relu_3", "getitem_1", ...); with scoped=True values carry the
             module path with '/' and ':' ("layer1/0/conv1/conv2d:3").
           - adaptive_avg_pool2d(1) -> ReduceMean(x, axes=[-1, -2] input,
             keepdims=1); torch.flatten -> Reshape with an int64 shape
             initializer (or a Shape(start=0, end=1)/Concat chain for a
             dynamic batch); nn.Linear -> Gemm(transB=1), MatMul + Add, or
             Transpose + Gemm; clone/dropout -> Identity; dtype-preserving
             .to() -> Cast(to=FLOAT); chunk/split -> Split(num_outputs).

The torchvision networks built with it are in torchvision_graphs.py.
"""

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tools", "models"))
from layers import unique_name  # noqa: E402  (tools/models/layers.py)


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _win(n, k, s, p0, p1, ceil):
    """Output length of a conv/pool window (dilation 1)."""
    span = n + p0 + p1 - k
    if ceil:
        out = -(-span // s) + 1
        # torch (and ONNX since opset 19 / onnxruntime) drop a last window
        # that would start inside the right padding
        if (out - 1) * s >= n + p0:
            out -= 1
        return out
    return span // s + 1


class Builder:
    """One ONNX graph in one exporter style.

    style:  "ts" (TorchScript exporter) or "dyn" (dynamo exporter)
    chw:    per-sample input shape (C, H, W)
    batch:  batch of the test input; the graph's batch dim is symbolic
            ("batch_size" for ts, "s0" for dyn) when sym_batch is set
    scoped: dyn only, value names carry the module path with '/' and ':'
    init_inputs: ts only, initializers are also graph inputs
    legacy_avgpool: ts only, torch 1.13-2.0's avg_pool2d form (see avgpool)
    bn_kept: ts only, batch norm kept and equal initializers deduplicated
             ("identity" or "direct"; see the module docstring)
    """

    def __init__(self, name, style, chw, *, batch=2, sym_batch=True, seed=0,
                 opset=None, scoped=False, init_inputs=False, legacy_avgpool=False,
                 bn_kept=None):
        assert style in ("ts", "dyn")
        self.name, self.style = name, style
        self.ts = style == "ts"
        self.opset = opset or (17 if self.ts else 18)
        self.rng = np.random.default_rng(seed)
        self.batch = batch
        self.sym_batch = sym_batch
        self.scoped = scoped
        self.init_inputs = init_inputs
        self.legacy_avgpool = legacy_avgpool
        assert bn_kept in (None, "identity", "direct") and (not bn_kept or self.ts)
        self.bn_kept = bn_kept
        self.nodes, self.inits = [], []
        self.shape = {}
        self.used = set()
        self.node_k = 0
        self.val_k = 0
        self.onnx_k = 300
        self.input = "input" if self.ts else "x"
        self.used.add(self.input)
        self.shape[self.input] = tuple(chw)

    # ------------------------------------------------------------- naming
    def _unique(self, base, sep="_"):
        return unique_name(self.used, base, sep)

    @staticmethod
    def _ts_scope(scope):
        """'layer1.0.conv1' -> '/layer1/layer1.0/conv1' (torch's scope names:
        a numeric Sequential child carries its parent's qualified name)."""
        if not scope:
            return ""
        parts, out = scope.split("."), []
        for p in parts:
            if p.isdigit() and out:
                out.append(out[-1] + "." + p)
            else:
                out.append(p)
        return "/" + "/".join(out)

    def _dyn_value(self, scope, aten):
        if self.scoped and scope:
            base = scope.replace(".", "/") + "/" + aten
            k = 0
            while f"{base}:{k}" in self.used:
                k += 1
            return self._unique(f"{base}:{k}")
        return self._unique(aten)

    def node(self, op, inputs, scope, aten, shapes, nout=1, **attrs):
        """Appends one node and returns its output name(s); shapes is the
        per-sample shape of each output (a tuple, or a list for nout > 1)."""
        if self.ts:
            nname = self._unique(self._ts_scope(scope) + "/" + op)
            outs = [self._unique(f"{nname}_output_{i}") for i in range(nout)]
        else:
            nname = self._unique(f"node_{op}_{self.node_k}")
            self.node_k += 1
            outs = [self._dyn_value(scope, aten) for _ in range(nout)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=nname, **attrs))
        if nout == 1:
            shapes = [shapes]
        for o, s in zip(outs, shapes):
            if s is not None:
                self.shape[o] = tuple(s)
        return outs[0] if nout == 1 else outs

    # ---------------------------------------------------------- constants
    def param(self, name, array, dtype=np.float32):
        name = self._unique(name)
        self.inits.append(numpy_helper.from_array(np.asarray(array, dtype=dtype), name))
        return name

    def const(self, scope, value, dtype):
        """A constant operand the way the exporter writes it: a Constant node
        (ts) or an initializer named val_N (dyn)."""
        arr = np.asarray(value, dtype=dtype)
        if self.ts:
            nname = self._unique(self._ts_scope(scope) + "/Constant")
            out = self._unique(f"{nname}_output_0")
            self.nodes.append(helper.make_node(
                "Constant", [], [out], name=nname,
                value=numpy_helper.from_array(arr, "")))
            return out
        name = self._unique(f"val_{self.val_k}")
        self.val_k += 1
        self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def he(self, shape, fan_in, gain=2.0):
        return self.rng.standard_normal(shape) * np.sqrt(gain / fan_in)

    def small(self, shape, bound=0.05):
        return self.rng.uniform(-bound, bound, shape)

    # ----------------------------------------------------------------- ops
    def _conv_node(self, x, scope, w, b, k, s, p, g, cout):
        kh, kw = k
        sh, sw = s
        ph, pw = p
        _, h, wd = self.shape[x]
        ho, wo = _win(h, kh, sh, ph, ph, 0), _win(wd, kw, sw, pw, pw, 0)
        assert ho >= 1 and wo >= 1, (self.name, scope, self.shape[x])
        attrs = dict(dilations=[1, 1], group=g, kernel_shape=[kh, kw],
                     pads=[ph, pw, ph, pw], strides=[sh, sw])
        if not self.ts:
            attrs["auto_pad"] = "NOTSET"
        ins = [x, w] + ([b] if b else [])
        return self.node("Conv", ins, scope, "conv2d", (cout, ho, wo), **attrs)

    def conv(self, x, scope, cout, k, s=1, p=0, g=1, bias=True):
        """nn.Conv2d (parameters named like the state dict)."""
        k, s, p = _pair(k), _pair(s), _pair(p)
        cin = self.shape[x][0]
        assert cin % g == 0 and cout % g == 0
        fan = cin // g * k[0] * k[1]
        w = self.param(f"{scope}.weight", self.he((cout, cin // g) + k, fan))
        b = self.param(f"{scope}.bias", self.small((cout,))) if bias else None
        return self._conv_node(x, scope, w, b, k, s, p, g, cout)

    def conv_bn(self, x, conv_scope, bn_scope, cout, k, s=1, p=0, g=1, eps=1e-5):
        """nn.Conv2d(bias=False) + nn.BatchNorm2d: one Conv with a folded bias
        (ts) or Conv + BatchNormalization(training_mode=0) (dyn)."""
        k, s, p = _pair(k), _pair(s), _pair(p)
        cin = self.shape[x][0]
        fan = cin // g * k[0] * k[1]
        if self.ts and not self.bn_kept:
            self.onnx_k += 2
            w = self.param(f"onnx::Conv_{self.onnx_k}",
                           self.he((cout, cin // g) + k, fan))
            b = self.param(f"onnx::Conv_{self.onnx_k + 1}", self.small((cout,), 0.1))
            return self._conv_node(x, conv_scope, w, b, k, s, p, g, cout)
        w = self.param(f"{conv_scope}.weight", self.he((cout, cin // g) + k, fan))
        y = self._conv_node(x, conv_scope, w, None, k, s, p, g, cout)
        return self.bn(y, bn_scope, eps)

    def bn(self, x, scope, eps=1e-5):
        c = self.shape[x][0]
        r = self.rng
        if self.bn_kept:  # a fresh nn.BatchNorm2d
            ones, zeros = np.ones(c), np.zeros(c)
            ins = [x, self.param(f"{scope}.weight", ones), self.param(f"{scope}.bias", zeros),
                   self.param(f"{scope}.running_mean", zeros),
                   self.param(f"{scope}.running_var", ones)]
            return self.node("BatchNormalization", ins, scope, "", self.shape[x], epsilon=eps,
                             momentum=0.9, training_mode=0)
        ins = [x,
               self.param(f"{scope}.weight", r.uniform(0.5, 1.5, (c,))),
               self.param(f"{scope}.bias", r.uniform(-0.1, 0.1, (c,))),
               self.param(f"{scope}.running_mean", r.uniform(-0.1, 0.1, (c,))),
               self.param(f"{scope}.running_var", r.uniform(0.5, 1.5, (c,)))]
        attrs = dict(epsilon=eps, momentum=0.9)
        if not self.ts:
            attrs["training_mode"] = 0
        return self.node("BatchNormalization", ins, scope,
                         "_native_batch_norm_legit_no_training", self.shape[x], **attrs)

    def relu(self, x, scope):
        return self.node("Relu", [x], scope, "relu", self.shape[x])

    def relu6(self, x, scope):
        """nn.ReLU6 -> hardtanh -> Clip(x, min, max) with scalar bounds."""
        lo = self.const(scope, 0.0, np.float32)
        hi = self.const(scope, 6.0, np.float32)
        return self.node("Clip", [x, lo, hi], scope, "hardtanh", self.shape[x])

    def maxpool(self, x, scope, k, s, p=0, ceil=0, indices=False):
        c, h, w = self.shape[x]
        ho, wo = _win(h, k, s, p, p, ceil), _win(w, k, s, p, p, ceil)
        assert ho >= 1 and wo >= 1, (self.name, scope, self.shape[x])
        attrs = dict(ceil_mode=ceil, kernel_shape=[k, k], pads=[p] * 4, strides=[s, s])
        if not self.ts:
            attrs["dilations"] = [1, 1]
        if indices:  # max_pool2d_with_indices; the Indices output is unused
            return self.node("MaxPool", [x], scope, "max_pool2d_with_indices",
                             [(c, ho, wo), None], nout=2, **attrs)[0]
        return self.node("MaxPool", [x], scope, "max_pool2d", (c, ho, wo), **attrs)

    def avgpool(self, x, scope, k, s, p=0, ceil=0, count_include_pad=1):
        """nn.AvgPool2d / F.avg_pool2d.  torch >= 2.1 (both exporters):
        AveragePool(ceil_mode, count_include_pad, kernel_shape, pads,
        strides).  ts with legacy_avgpool (torch 1.13-2.0 at opset 17, the
        opset-11 symbolic): count_include_pad=True with padding becomes
        Pad(x, Constant pads, mode="constant") + AveragePool with zero pads,
        and AveragePool never has a count_include_pad attribute (0)."""
        c, h, w = self.shape[x]
        ho, wo = _win(h, k, s, p, p, ceil), _win(w, k, s, p, p, ceil)
        assert ho >= 1 and wo >= 1, (self.name, scope, self.shape[x])
        if self.ts and self.legacy_avgpool:
            if count_include_pad and p:
                pads = self.const(scope, [0, 0, p, p, 0, 0, p, p], np.int64)
                x = self.node("Pad", [x, pads], scope, "", (c, h + 2 * p, w + 2 * p),
                              mode="constant")
                p = 0
            return self.node("AveragePool", [x], scope, "", (c, ho, wo), ceil_mode=ceil,
                             kernel_shape=[k, k], pads=[p] * 4, strides=[s, s])
        return self.node("AveragePool", [x], scope, "avg_pool2d", (c, ho, wo),
                         ceil_mode=ceil, count_include_pad=count_include_pad,
                         kernel_shape=[k, k], pads=[p] * 4, strides=[s, s])

    def adaptive_avgpool(self, x, scope, target):
        """nn.AdaptiveAvgPool2d((target, target)).  ts: GlobalAveragePool for
        1, otherwise AveragePool(kernel_shape=k, strides=k) with no other
        attribute (torch's _adaptive_pool).  dyn: ReduceMean over the
        spatial axes (axes an initializer) for 1, otherwise the avg_pool2d
        decomposition."""
        c, h, w = self.shape[x]
        assert h == w and h % target == 0, (self.name, scope, self.shape[x], target)
        if target == 1:
            if self.ts:
                return self.node("GlobalAveragePool", [x], scope, "", (c, 1, 1))
            axes = self.const(scope, [-1, -2], np.int64)
            return self.node("ReduceMean", [x, axes], scope, "mean", (c, 1, 1), keepdims=1)
        k = h // target
        if self.ts:
            return self.node("AveragePool", [x], scope, "", (c, target, target),
                             kernel_shape=[k, k], strides=[k, k])
        return self.avgpool(x, scope, k, k)

    def global_avgpool(self, x, scope):
        c = self.shape[x][0]
        return self.node("GlobalAveragePool", [x], scope, "adaptive_avg_pool2d", (c, 1, 1))

    def reduce_mean_hw(self, x, scope):
        """Old mobilenet_v2 x.mean([2, 3]) at opset 17: ReduceMean(axes
        attribute, keepdims=0)."""
        c = self.shape[x][0]
        return self.node("ReduceMean", [x], scope, "mean", (c,), axes=[2, 3], keepdims=0)

    def flatten(self, x, scope="", how="auto"):
        """torch.flatten(x, 1) / x.view(x.size(0), -1).
        how: "flatten" (ts Flatten), "view" (ts Shape/Gather/Unsqueeze/
        Concat/Reshape chain), "static" (dyn Reshape with [batch, F]),
        "minus1" (dyn Reshape with [-1, F]), "dynamic" (dyn Shape(start=0,
        end=1) + Concat with [F] + Reshape)."""
        if how == "auto":
            how = "flatten" if self.ts else ("dynamic" if self.sym_batch else "static")
        f = int(np.prod(self.shape[x]))
        if how == "flatten":
            return self.node("Flatten", [x], scope, "flatten", (f,), axis=1)
        if how == "view":
            shp = self.node("Shape", [x], scope, "", (4,))
            i0 = self.const(scope, 0, np.int64)
            n = self.node("Gather", [shp, i0], scope, "", (), axis=0)
            ax = self.const(scope, [0], np.int64)
            n1 = self.node("Unsqueeze", [n, ax], scope, "", (1,))
            m1 = self.const(scope, [-1], np.int64)
            cat = self.node("Concat", [n1, m1], scope, "", (2,), axis=0)
            return self.node("Reshape", [x, cat], scope, "", (f,))
        if how in ("static", "minus1"):
            lead = self.batch if how == "static" else -1
            s = self.const(scope, [lead, f], np.int64)
            return self.node("Reshape", [x, s], scope, "view", (f,))
        assert how == "dynamic"
        n = self.node("Shape", [x], scope, "sym_size_int", (1,), start=0, end=1)
        tail = self.const(scope, [f], np.int64)
        cat = self.node("Concat", [n, tail], scope, "cat", (2,), axis=0)
        return self.node("Reshape", [x, cat], scope, "view", (f,))

    def linear(self, x, scope, nout, how="gemm", gain=2.0):
        """nn.Linear.  how: "gemm" Gemm(transB=1); "matmul" MatMul with the
        weight pre-transposed ([in, out] initializer) + Add; "tgemm"
        Transpose(weight) + Gemm."""
        (nin,) = self.shape[x]
        wv = self.he((nout, nin), nin, gain)
        bv = self.small((nout,))
        if how == "matmul":
            w = self.param(f"{scope}.weight" if self.ts else f"val_{self._bump()}", wv.T)
            b = self.param(f"{scope}.bias", bv)
            mm = self.node("MatMul", [x, w], scope, "matmul", (nout,))
            return self.node("Add", [mm, b], scope, "linear", (nout,))
        w = self.param(f"{scope}.weight", wv)
        b = self.param(f"{scope}.bias", bv)
        if how == "tgemm":
            wt = self.node("Transpose", [w], scope, "t", None, perm=[1, 0])
            return self.node("Gemm", [x, wt, b], scope, "addmm", (nout,), alpha=1.0, beta=1.0)
        return self.node("Gemm", [x, w, b], scope, "linear", (nout,),
                         alpha=1.0, beta=1.0, transB=1)

    def _bump(self):
        self.val_k += 1
        return self.val_k - 1

    def dropout(self, x, scope, p=0.5, how="elided"):
        """eval-mode nn.Dropout.  "elided": no node (what both exporters
        write by default); "node": opset-12+ Dropout(x, ratio, training_mode
        = False) with the operands as Constant nodes (ts, TrainingMode.
        PRESERVE); "plain": Dropout(x) alone; "identity": Identity (dyn
        clone)."""
        if how == "elided":
            return x
        if how == "identity":
            return self.node("Identity", [x], scope, "clone", self.shape[x])
        if how == "plain":
            return self.node("Dropout", [x], scope, "dropout", self.shape[x])
        ratio = self.const(scope, p, np.float32)
        train = self.const(scope, False, np.bool_)
        return self.node("Dropout", [x, ratio, train], scope, "dropout", self.shape[x])

    def identity(self, x, scope=""):
        return self.node("Identity", [x], scope, "clone", self.shape[x])

    def cast_noop(self, x, scope=""):
        return self.node("Cast", [x], scope, "_to_copy", self.shape[x], to=TensorProto.FLOAT)

    def add(self, a, b, scope=""):
        assert self.shape[a] == self.shape[b], (self.name, scope, self.shape[a], self.shape[b])
        return self.node("Add", [a, b], scope, "add", self.shape[a])

    def concat(self, xs, scope=""):
        hw = {self.shape[t][1:] for t in xs}
        assert len(hw) == 1, (self.name, scope, [self.shape[t] for t in xs])
        c = sum(self.shape[t][0] for t in xs)
        return self.node("Concat", list(xs), scope, "cat", (c,) + hw.pop(), axis=1)

    def transform_input(self, x, how="gather"):
        """googlenet / inception_v3 transform_input=True:
            x_ch0 = torch.unsqueeze(x[:, 0], 1) * (0.229 / 0.5) + (0.485 - 0.5) / 0.5
            ... ch1, ch2 ...; x = torch.cat((x_ch0, x_ch1, x_ch2), 1)
        how: "gather" x[:, i] -> Gather(axis=1, scalar index) + Unsqueeze
        (axes an input, opset 13 form); "split" (dyn) Split(axis=1,
        num_outputs=3) then Mul/Add per channel, with a no-op Cast."""
        c, h, w = self.shape[x]
        assert c == 3
        mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
        chans = []
        if how == "split":
            parts = self.node("Split", [x], "", "split", [(1, h, w)] * 3, nout=3,
                              axis=1, num_outputs=3)
            parts = [self.cast_noop(p) for p in parts]
        for i in range(3):
            if how == "split":
                u = parts[i]
            else:
                idx = self.const("", i, np.int64)
                g = self.node("Gather", [x, idx], "", "select", (h, w), axis=1)
                ax = self.const("", [1], np.int64)
                u = self.node("Unsqueeze", [g, ax], "", "unsqueeze", (1, h, w))
            sc = self.const("", std[i] / 0.5, np.float32)
            m = self.node("Mul", [u, sc], "", "mul", (1, h, w))
            sh = self.const("", (mean[i] - 0.5) / 0.5, np.float32)
            chans.append(self.node("Add", [m, sh], "", "add", (1, h, w)))
        return self.concat(chans)

    # -------------------------------------------------------------- model
    def _deduplicate(self):
        """torch's deduplication of initializers with equal values (see
        bn_kept): the first stays; the others become Identity nodes at the top
        of the graph, or their readers read the first by name."""
        first, kept, aliases = {}, [], []
        for t in self.inits:
            key = (t.data_type, tuple(t.dims), numpy_helper.to_array(t).tobytes())
            if key in first:
                aliases.append((t.name, first[key]))
            else:
                first[key] = t.name
                kept.append(t)
        self.inits = kept
        if self.bn_kept == "identity":
            ids = [helper.make_node("Identity", [src], [dst], name=f"Identity_{k}")
                   for k, (dst, src) in enumerate(reversed(aliases))]
            self.nodes = ids + self.nodes
            return
        rename = dict(aliases)
        for n in self.nodes:
            for i, name in enumerate(n.input):
                if name in rename:
                    n.input[i] = rename[name]

    def model(self, out):
        """Finishes the graph.  ts: the last value is renamed "output", IR 8,
        opset 17.  dyn: IR 10, opset 18 plus the (unused) onnxscript
        torch_lib domain the dynamo exporter always imports, and node
        metadata_props as torch writes them.  Both carry value_info for the
        intermediate values (the exporters run ONNX shape inference), with
        the symbolic batch propagated; ts with init_inputs=True also lists
        every initializer as a graph input (keep_initializers_as_inputs)."""
        dims = self.shape[out]
        if self.bn_kept:
            self._deduplicate()
        if self.ts:
            last = self.nodes[-1]
            assert last.output[0] == out
            last.output[0] = "output"
            out = "output"
        bdim = ("batch_size" if self.ts else "s0") if self.sym_batch else self.batch
        c, h, w = self.shape[self.input]
        gi = [helper.make_tensor_value_info(self.input, TensorProto.FLOAT, [bdim, c, h, w])]
        if self.init_inputs:
            gi += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                   for t in self.inits]
        go = helper.make_tensor_value_info(out, TensorProto.FLOAT, [bdim, *dims])
        graph = helper.make_graph(self.nodes, "main_graph", gi, [go], initializer=self.inits)
        if self.ts:
            opsets = [helper.make_opsetid("", self.opset)]
            m = helper.make_model(graph, opset_imports=opsets, producer_name="pytorch",
                                  producer_version="2.5.0", ir_version=8)
        else:
            opsets = [helper.make_opsetid("", self.opset),
                      helper.make_opsetid("pkg.onnxscript.torch_lib.common", 1)]
            m = helper.make_model(graph, opset_imports=opsets, producer_name="pytorch",
                                  producer_version="2.6.0", ir_version=10)
            for n in m.graph.node:
                for k, v in (("namespace", f": {self.name}/{n.op_type}"),
                             ("pkg.torch.onnx.class_hierarchy", "['torchvision.models']"),
                             ("pkg.torch.onnx.name_scopes", "['']")):
                    n.metadata_props.add(key=k, value=v)
        return onnx.shape_inference.infer_shapes(m, strict_mode=True)
