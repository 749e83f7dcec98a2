"""onnx.helper reproduction of the position-encoding and normalized-attention
patterns that PyTorch's exporters write for small vision transformers
(CumSum, Tile, Mod, Sin, Cos, ReduceL2, ReduceL1, ReduceSumSquare), without
torch, in both exporter styles of exporter_graphs.Builder ("ts": TorchScript
at opset 17, axes of the reductions as attributes; "dyn": dynamo at opset 20,
axes as inputs). Static batch: Tile repeats the embedding over it.

  encoding_block  a conv stem pooled to T = 16 tokens of C channels;
      - a sinusoidal position encoding from CumSum of a learned step per
        token (positions), times constant frequencies, Sin and Cos
        concatenated, then Tile'd over the batch ([1, T, C] -> [N, T, C]);
      - torch.roll of the tokens along T by index arithmetic, as shifted
        windows compute it: (Range(T) + shift) % T folds at import (Mod of
        constants), then Gather;
      - a reverse exclusive CumSum over the tokens (a running context);
      - queries and keys L2-normalized as F.normalize writes it: ReduceL2
        (keepdims), Clip(min=eps), Div; values scaled by an L1 norm
        (ReduceL1) and the mixed tokens by an RMS (ReduceSumSquare, Sqrt);
      - softmax attention, the mean over tokens, a linear head;
      - mask_buffer=True: a shifted-window attention mask added to the
        scores, a float initializer that the dynamo exporter marks as a
        non-persistent buffer in its value metadata (InputSpec.kind BUFFER,
        persistent False): lwcc keeps it frozen (no gradient, no update).
"""
import numpy as np
from onnx import helper  # noqa: F401 - the Builder's nodes are onnx.helper's

T, C = 16, 8


def _const(b, scope, value, dtype):
    return b.const(scope, value, dtype)


def _reduce(b, op, x, scope, axes, shape, keepdims=1):
    """ts: axes as an attribute (opset 17); dyn: as an input (opset 18+)."""
    if b.ts:
        return b.node(op, [x], scope, "", shape, axes=axes, keepdims=keepdims)
    ax = _const(b, scope, np.array(axes, np.int64), np.int64)
    return b.node(op, [x, ax], scope, op.lower(), shape, keepdims=keepdims)


def _normalize(b, x, scope, shape):
    """F.normalize(x, dim=-1): x / max(||x||_2, eps)."""
    n = _reduce(b, "ReduceL2", x, scope, [-1], shape[:-1] + (1,))
    eps = _const(b, scope, np.array(1e-12, np.float32), np.float32)
    clipped = b.node("Clip", [n, eps], scope, "clamp_min", shape[:-1] + (1,))
    return b.node("Div", [x, clipped], scope, "div", shape)


MASK = "layers.0.blocks.1.attn_mask"


def _mark_buffer(model, name):
    """The dynamo exporter's value metadata of a non-persistent buffer, and of
    the other float initializers, the module's parameters, as it writes them."""
    from onnx import TensorProto

    def info(init_name):
        vi = next((v for v in model.graph.value_info if v.name == init_name), None)
        if vi is None:
            t = next(t for t in model.graph.initializer if t.name == init_name)
            model.graph.value_info.append(
                helper.make_tensor_value_info(init_name, TensorProto.FLOAT, list(t.dims)))
            vi = model.graph.value_info[-1]
        return vi
    for k, v in (("pkg.torch.export.graph_signature.InputSpec.kind", "BUFFER"),
                 ("pkg.torch.export.graph_signature.InputSpec.persistent", "False"),
                 ("pkg.torch.onnx.original_node_name", "b_" + name.replace(".", "_"))):
        info(name).metadata_props.add(key=k, value=v)
    for t in list(model.graph.initializer):
        if t.name != name and t.data_type == TensorProto.FLOAT and len(t.dims) > 0:
            vi = info(t.name)
            for k, v in (("pkg.torch.export.graph_signature.InputSpec.kind", "PARAMETER"),
                         ("pkg.torch.export.graph_signature.InputSpec.persistent", "None")):
                vi.metadata_props.add(key=k, value=v)
    return model


def encoding_block(b, classes=10, shift=3, mask_buffer=False):
    n = b.batch
    x = b.conv(b.input, "stem", C, 3, 1, 1)
    x = b.relu(x, "stem_act")
    x = b.maxpool(x, "stem_pool", 2, 2)  # [C, 4, 4]
    assert b.shape[x] == (C, 4, 4), b.shape[x]
    to = _const(b, "tokens", np.array([n, C, T], np.int64), np.int64)
    x = b.node("Reshape", [x, to], "tokens", "view", (C, T))
    x = b.node("Transpose", [x], "tokens", "permute", (T, C), perm=[0, 2, 1])

    # Position encoding: positions = cumsum(step), angles = pos * freq.
    step = b.param("pos.step", b.rng.uniform(0.5, 1.5, (T, 1)))
    pos = b.node("CumSum", [step, _const(b, "pos", np.array(0, np.int64), np.int64)], "pos",
                 "cumsum", None)
    freq = _const(b, "pos", (1.0 / 10000 ** (np.arange(C // 2) * 2.0 / C))[None, :],
                  np.float32)
    ang = b.node("Mul", [pos, freq], "pos", "mul", None)  # [T, C/2]
    pe = b.node("Concat", [b.node("Sin", [ang], "pos", "sin", None),
                           b.node("Cos", [ang], "pos", "cos", None)], "pos", "cat", None,
                axis=-1)
    pe_to = _const(b, "pos", np.array([1, T, C], np.int64), np.int64)
    pe = b.node("Reshape", [pe, pe_to], "pos", "view", None)
    reps = _const(b, "pos", np.array([n, 1, 1], np.int64), np.int64)
    pe = b.node("Tile", [pe, reps], "pos", "repeat", (T, C))
    x = b.node("Add", [x, pe], "pos", "add", (T, C))

    # torch.roll(x, shift, 1) by index arithmetic: Mod folds at import.
    idx = b.node("Range", [_const(b, "roll", np.array(0, np.int64), np.int64),
                           _const(b, "roll", np.array(T, np.int64), np.int64),
                           _const(b, "roll", np.array(1, np.int64), np.int64)],
                 "roll", "arange", None)
    idx = b.node("Add", [idx, _const(b, "roll", np.array(T - shift, np.int64), np.int64)],
                 "roll", "add", None)
    idx = b.node("Mod", [idx, _const(b, "roll", np.array(T, np.int64), np.int64)], "roll",
                 "remainder", None)
    rolled = b.node("Gather", [x, idx], "roll", "index", (T, C), axis=1)
    ctx = b.node("CumSum", [rolled, _const(b, "ctx", np.array(-2, np.int64), np.int64)], "ctx",
                 "cumsum", (T, C), exclusive=1, reverse=1)
    scale = _const(b, "ctx", np.array(1.0 / T, np.float32), np.float32)
    ctx = b.node("Mul", [ctx, scale], "ctx", "mul", (T, C))
    h = b.node("Add", [x, ctx], "ctx", "add", (T, C))

    def proj(name):
        w = b.param(f"attn.{name}.weight", b.he((C, C), C, 1.0))
        return b.node("MatMul", [h, w], f"attn.{name}", "matmul", (T, C))

    q = _normalize(b, proj("q"), "attn.q_norm", (T, C))
    k = _normalize(b, proj("k"), "attn.k_norm", (T, C))
    v = proj("v")
    l1 = _reduce(b, "ReduceL1", v, "attn.v_norm", [-1], (T, 1))
    one = _const(b, "attn.v_norm", np.array(1.0, np.float32), np.float32)
    v = b.node("Div", [v, b.node("Add", [l1, one], "attn.v_norm", "add", (T, 1))],
               "attn.v_norm", "div", (T, C))
    kt = b.node("Transpose", [k], "attn", "transpose", (C, T), perm=[0, 2, 1])
    s = b.node("MatMul", [q, kt], "attn", "matmul", (T, T))
    s = b.node("Mul", [s, _const(b, "attn", np.array(4.0, np.float32), np.float32)], "attn",
               "mul", (T, T))
    if mask_buffer:
        win = np.arange(T) // 4
        mask = b.param(MASK, np.where(win[:, None] == win[None, :], 0.0, -100.0))
        s = b.node("Add", [s, mask], "attn", "add", (T, T))
    a = b.node("Softmax", [s], "attn", "softmax", (T, T), axis=-1)
    o = b.node("MatMul", [a, v], "attn", "matmul", (T, C))
    ss = _reduce(b, "ReduceSumSquare", o, "rms", [-1], (T, 1))
    ms = b.node("Add", [b.node("Mul", [ss, _const(b, "rms", np.array(1.0 / C, np.float32),
                                                      np.float32)], "rms", "mul", (T, 1)),
                        _const(b, "rms", np.array(1e-6, np.float32), np.float32)], "rms",
                "add", (T, 1))
    o = b.node("Div", [o, b.node("Sqrt", [ms], "rms", "sqrt", (T, 1))], "rms", "div", (T, C))
    pooled = _reduce(b, "ReduceMean", o, "head", [1], (C,), keepdims=0)
    m = b.model(b.linear(pooled, "head", classes))
    return _mark_buffer(m, MASK) if mask_buffer else m
