"""Shared helpers for the lwcc model zoo: an ONNX graph builder with
per-layer node helpers, shape tracking and deterministic weight init.

Every helper appends ONNX nodes (and their initializers) to a NetBuilder and
returns the name of the produced tensor.  The builder tracks the per-sample
shape of every tensor it produces ((C, H, W) for feature maps, (F,) after
Flatten/Gemm), so a network can size its layers from the actual feature map
and so an input that is too small fails with a clear ValueError instead of an
invalid model.

The helpers use only ops whose ONNX form is the same for opsets 13..latest
(Conv, BatchNormalization, Relu, MaxPool, AveragePool, GlobalAveragePool, LRN,
Concat, Add, Flatten, Gemm, Dropout, Constant); no Split/Reduce*/Resize, whose
attributes moved to inputs between opsets (zoo.py's upnet writes its Resize
and activations itself, for one opset).
"""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MIN_OPSET = 13
MAX_OPSET = onnx.defs.onnx_opset_version()


def scale_channels(c, width, multiple=1):
    """Channel count `c` scaled by the width multiplier, rounded to the
    nearest multiple of `multiple` and at least `multiple` (>= 1)."""
    return max(multiple, int(round(c * width / multiple)) * multiple)


def unique_name(used, base, sep="_"):
    """`base`, or the first of base{sep}1, base{sep}2, ... not in the set
    `used`; added to it."""
    name, i = base, 1
    while name in used:
        name = f"{base}{sep}{i}"
        i += 1
    used.add(name)
    return name


def pool_out(n, k, s, p):
    """Output length of a conv/pool window (ceil_mode=0, dilation 1)."""
    return (n + 2 * p - k) // s + 1


class NetBuilder:
    """Accumulates nodes and initializers of one ONNX graph.

    name:     network name (used in error messages and the graph name)
    size:     input height = width
    channels: input channels
    batch:    fixed batch size (ignored for the input/output shape when
              symbolic_batch is set, then the batch dim is the parameter 'N')
    opset:    default-domain opset to import
    seed:     numpy seed for all initializers (drawn in graph order)
    """

    def __init__(self, name, *, size, channels, batch, opset, seed,
                 symbolic_batch=False, min_size=1):
        for what, v, lo in (("size", size, 1), ("channels", channels, 1),
                            ("batch", batch, 1)):
            if not isinstance(v, (int, np.integer)) or v < lo:
                raise ValueError(f"{name}: {what} must be an integer >= {lo}, got {v!r}")
        if size < min_size:
            raise ValueError(
                f"{name}: input size {size} is too small; the minimum input size "
                f"for {name} is {min_size} (below it some layer would get an empty "
                f"or too-small feature map)")
        if not MIN_OPSET <= opset <= MAX_OPSET:
            raise ValueError(f"opset {opset} not supported (use {MIN_OPSET}..{MAX_OPSET})")
        self.name = name
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.shapes = {}
        self._used = set()
        self.batch_dim = "N" if symbolic_batch else batch
        self.input = "input"
        self.shapes[self.input] = (channels, size, size)
        self._used.add(self.input)

    # ---------------------------------------------------------------- naming
    def _unique(self, name):
        return unique_name(self._used, name)

    def _node(self, op, inputs, name, shape, **attrs):
        out = self._unique(name)
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        self.shapes[out] = tuple(shape)
        return out

    def _fail(self, layer, msg):
        raise ValueError(f"{self.name}: input too small at layer '{layer}': {msg}")

    # ----------------------------------------------------------- parameters
    def param(self, name, array):
        name = self._unique(name)
        self.inits.append(numpy_helper.from_array(
            np.ascontiguousarray(array, dtype=np.float32), name))
        return name

    def he_normal(self, shape, fan_in, gain=2.0):
        return self.rng.standard_normal(shape) * np.sqrt(gain / fan_in)

    def small_uniform(self, shape, bound=0.05):
        return self.rng.uniform(-bound, bound, shape)

    # ------------------------------------------------------------------ ops
    def conv(self, x, cout, k, *, stride=1, pad=0, group=1, bias=True, name):
        """Conv with kernel `k` and padding `pad` each an int (square) or a
        (height, width) pair, as torchvision's 1x7 and 7x1 convolutions."""
        cin, h, w = self.shapes[x]
        if cin % group or cout % group:
            raise ValueError(f"{self.name}: conv '{name}' channels {cin}->{cout} "
                             f"not divisible by group {group}")
        kh, kw = (k, k) if isinstance(k, int) else k
        ph, pw = (pad, pad) if isinstance(pad, int) else pad
        ho, wo = pool_out(h, kh, stride, ph), pool_out(w, kw, stride, pw)
        if ho < 1 or wo < 1:
            self._fail(name, f"{kh}x{kw} conv (stride {stride}, pad {pad}) on a {h}x{w} map")
        fan_in = cin // group * kh * kw
        inputs = [x, self.param(f"{name}.weight",
                                self.he_normal((cout, cin // group, kh, kw), fan_in))]
        if bias:
            inputs.append(self.param(f"{name}.bias", self.small_uniform((cout,))))
        attrs = dict(kernel_shape=[kh, kw], strides=[stride, stride],
                     pads=[ph, pw, ph, pw], dilations=[1, 1])
        if group != 1:
            attrs["group"] = group
        return self._node("Conv", inputs, name, (cout, ho, wo), **attrs)

    def bn(self, x, *, name, eps=1e-5):
        """BatchNormalization (inference form) with non-trivial statistics:
        scale in [0.5, 1.5], bias in [-0.1, 0.1], running mean in
        [-0.1, 0.1], running var in [0.5, 1.5]."""
        c = self.shapes[x][0]
        r = self.rng
        inputs = [x,
                  self.param(f"{name}.weight", r.uniform(0.5, 1.5, (c,))),
                  self.param(f"{name}.bias", r.uniform(-0.1, 0.1, (c,))),
                  self.param(f"{name}.running_mean", r.uniform(-0.1, 0.1, (c,))),
                  self.param(f"{name}.running_var", r.uniform(0.5, 1.5, (c,)))]
        return self._node("BatchNormalization", inputs, name, self.shapes[x],
                          epsilon=eps, momentum=0.9)

    def relu(self, x, *, name):
        return self._node("Relu", [x], name, self.shapes[x])

    def _pool(self, op, x, k, stride, pad, name, count_include_pad=False):
        c, h, w = self.shapes[x]
        if pad >= k:
            raise ValueError(f"{self.name}: pool '{name}' pad {pad} >= kernel {k}")
        ho, wo = pool_out(h, k, stride, pad), pool_out(w, k, stride, pad)
        if ho < 1 or wo < 1 or h + 2 * pad < k:
            self._fail(name, f"{k}x{k} {op} (stride {stride}, pad {pad}) on a {h}x{w} map")
        attrs = dict(kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)
        if op == "AveragePool":
            attrs["count_include_pad"] = int(count_include_pad)
        return self._node(op, [x], name, (c, ho, wo), **attrs)

    def maxpool(self, x, k, stride, pad=0, *, name):
        return self._pool("MaxPool", x, k, stride, pad, name)

    def avgpool(self, x, k, stride, pad=0, *, name, count_include_pad=False):
        return self._pool("AveragePool", x, k, stride, pad, name, count_include_pad)

    def global_avgpool(self, x, *, name):
        c = self.shapes[x][0]
        return self._node("GlobalAveragePool", [x], name, (c, 1, 1))

    def adaptive_avgpool(self, x, target, *, name):
        """torchvision's AdaptiveAvgPool2d((target, target)) for the known
        feature-map size s (square maps only):
          s == target        -> no node (identity)
          s %  target == 0   -> AveragePool(kernel = stride = s/target), exact
          otherwise          -> GlobalAveragePool (s > 1) / nothing (s == 1);
                                the classifier then sees C*1*1 features.  This
                                differs from torchvision (which would replicate
                                or use uneven bins) but keeps the graph free of
                                Expand/Resize/uneven pooling."""
        c, h, w = self.shapes[x]
        assert h == w, "adaptive_avgpool expects square maps"
        if h == target:
            return x
        if h % target == 0:
            k = h // target
            return self.avgpool(x, k, k, name=name)
        if h == 1:
            return x
        return self.global_avgpool(x, name=name)

    def lrn(self, x, *, size=5, alpha=1e-4, beta=0.75, bias=2.0, name):
        """ONNX LRN: y = x / (bias + alpha/size * sum_sq)^beta.  Note ONNX (and
        PyTorch) divide alpha by size; the 2012 paper's k + alpha*sum has
        alpha_paper = alpha/size."""
        return self._node("LRN", [x], name, self.shapes[x],
                          size=size, alpha=alpha, beta=beta, bias=bias)

    def dropout(self, x, ratio=0.5, *, name):
        """Dropout (identity at inference).  The default ratio 0.5 is left
        implicit; another ratio is fed through a Constant node so no float
        initializer could be mistaken for a trainable parameter."""
        inputs = [x]
        if ratio != 0.5:
            r = self._unique(f"{name}.ratio")
            self.nodes.append(helper.make_node(
                "Constant", [], [r], name=r,
                value=numpy_helper.from_array(np.array(ratio, np.float32), r)))
            inputs.append(r)
        return self._node("Dropout", inputs, name, self.shapes[x])

    def concat(self, xs, *, name):
        c = sum(self.shapes[t][0] for t in xs)
        hw = {self.shapes[t][1:] for t in xs}
        if len(hw) != 1:
            raise ValueError(f"{self.name}: concat '{name}' spatial mismatch {hw}")
        return self._node("Concat", list(xs), name, (c,) + hw.pop(), axis=1)

    def add(self, a, b, *, name):
        if self.shapes[a] != self.shapes[b]:
            raise ValueError(f"{self.name}: add '{name}' shape mismatch "
                             f"{self.shapes[a]} vs {self.shapes[b]}")
        return self._node("Add", [a, b], name, self.shapes[a])

    def flatten(self, x, *, name):
        return self._node("Flatten", [x], name, (int(np.prod(self.shapes[x])),), axis=1)

    def gemm(self, x, nout, *, name, gain=2.0):
        (nin,) = self.shapes[x]
        w = self.param(f"{name}.weight", self.he_normal((nout, nin), nin, gain))
        b = self.param(f"{name}.bias", self.small_uniform((nout,)))
        return self._node("Gemm", [x, w, b], name, (nout,),
                          alpha=1.0, beta=1.0, transB=1)

    # ---------------------------------------------------------------- model
    def model(self, out, *, output_name="logits", doc="", meta=None):
        """Finishes the graph: renames the final tensor to `output_name` and
        returns a ModelProto with the minimum IR version for the opset."""
        last = self.nodes[-1]
        assert last.output[0] == out, "model output must be the last node's output"
        last.output[0] = output_name
        self.shapes[output_name] = self.shapes[out]
        c, h, w = self.shapes[self.input]
        inp = helper.make_tensor_value_info(
            self.input, TensorProto.FLOAT, [self.batch_dim, c, h, w])
        outp = helper.make_tensor_value_info(
            output_name, TensorProto.FLOAT, [self.batch_dim, *self.shapes[out]])
        graph = helper.make_graph(self.nodes, self.name, [inp], [outp],
                                  initializer=self.inits)
        opsets = [helper.make_opsetid("", self.opset)]
        model = helper.make_model(
            graph, opset_imports=opsets, producer_name="lwcc-zoo",
            producer_version="1", doc_string=doc,
            ir_version=helper.find_min_ir_version_for(opsets))
        for k, v in (meta or {}).items():
            model.metadata_props.add(key=str(k), value=str(v))
        return model
