#!/usr/bin/env python3
"""Builds small models in the forms PyTorch's exporters write (for the lit
tests of shared initializers and of the folded batch norm warning).

    gen_exported.py CASE OUT     writes model CASE to OUT
    gen_exported.py --list       lists the cases

  ts-dedup        what torch.onnx.export(model.eval(), dynamo=False,
                  training=PRESERVE, do_constant_folding=False) writes for
                  conv -> bn -> relu -> conv -> bn -> pool -> linear with fresh
                  batch norms: equal initializers deduplicated, the other
                  layers reading them through Identity nodes named after their
                  own params ("bn2.bias = Identity(bn1.bias)").
  shared-direct   one weight read directly by two MatMul nodes.
  folded-ts       an eval-mode TorchScript export: batch norm folded into the
                  convolutions, whose params are named "onnx::Conv_N".
  folded-partly   folded-ts with a batch norm left that follows no convolution
                  (densenet's norm1), then another folded convolution.
  folded-dynamo   a dynamo export whose optimizer folded batch norm (the Conv
                  node's metadata names the FuseBatchNormIntoConv rule).
  bias-removed    a dynamo export whose optimizer removed a convolution's
                  zero bias (RemoveOptionalBiasFromConv).
  folded-other    folded-ts from a producer other than PyTorch.
  plain-pytorch   a PyTorch export of a network without batch norm
                  (convolutions with their own biases).
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CASES = {}


def case(fn):
    CASES[fn.__name__.replace("_", "-")] = fn
    return fn


def init(name, array):
    return numpy_helper.from_array(np.asarray(array, np.float32), name)


def rand(seed, *shape):
    return np.random.default_rng(seed).uniform(-0.5, 0.5, shape).astype(np.float32)


def model(nodes, inits, x_shape, out_shape, producer="pytorch", opset=17):
    graph = helper.make_graph(
        nodes, "main_graph",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, list(out_shape))],
        initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    m.producer_name = producer
    m.producer_version = "2.5.0"
    return m


def conv(name, x, w, out, bias=None):
    inputs = [x, w] + ([bias] if bias else [])
    return helper.make_node("Conv", inputs, [out], name=name, kernel_shape=[1, 1])


def head(x, c, classes=3):
    """GlobalAveragePool -> Flatten -> Gemm."""
    nodes = [helper.make_node("GlobalAveragePool", [x], ["pool"], name="/avgpool/GlobalAveragePool"),
             helper.make_node("Flatten", ["pool"], ["flat"], name="/Flatten", axis=1),
             helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="/fc/Gemm",
                              transB=1)]
    return nodes, [init("fc.weight", rand(9, classes, c)), init("fc.bias", rand(10, classes))]


@case
def ts_dedup(out, c=4):
    ones, zeros = np.ones(c, np.float32), np.zeros(c, np.float32)
    inits = [init("conv1.weight", rand(1, c, 3, 1, 1)), init("bn1.weight", ones),
             init("bn1.bias", zeros), init("conv2.weight", rand(2, c, c, 1, 1))]
    alias = [("bn1.running_mean", "bn1.bias"), ("bn1.running_var", "bn1.weight"),
             ("bn2.weight", "bn1.weight"), ("bn2.bias", "bn1.bias"),
             ("bn2.running_mean", "bn1.bias"), ("bn2.running_var", "bn1.weight")]
    nodes = [helper.make_node("Identity", [src], [dst], name=f"Identity_{k}")
             for k, (dst, src) in enumerate(reversed(alias))]
    x = "input"
    for k in (1, 2):
        nodes.append(conv(f"/conv{k}/Conv", x, f"conv{k}.weight", f"/conv{k}/Conv_output_0"))
        nodes.append(helper.make_node(
            "BatchNormalization",
            [f"/conv{k}/Conv_output_0"] + [f"bn{k}.{p}" for p in
                                           ("weight", "bias", "running_mean", "running_var")],
            [f"/bn{k}/BatchNormalization_output_0"], name=f"/bn{k}/BatchNormalization",
            epsilon=1e-5, momentum=0.9, training_mode=0))
        nodes.append(helper.make_node("Relu", [f"/bn{k}/BatchNormalization_output_0"],
                                      [f"/relu{k}/Relu_output_0"], name=f"/relu{k}/Relu"))
        x = f"/relu{k}/Relu_output_0"
    h_nodes, h_inits = head(x, c)
    return model(nodes + h_nodes, inits + h_inits, (2, 3, 4, 4), (2, 3))


@case
def shared_direct(out):
    nodes = [helper.make_node("MatMul", ["input", "w"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w"], ["logits"], name="mm2")]
    return model(nodes, [init("w", rand(3, 4, 4))], (2, 4), (2, 4))


def folded(producer, dynamo=False, rules="FuseBatchNormIntoConv, RemoveOptionalBiasFromConv"):
    c = 4
    inits = [init("onnx::Conv_5", rand(1, c, 3, 1, 1)), init("onnx::Conv_6", rand(2, c))]
    node = conv("/conv1/Conv", "input", "onnx::Conv_5", "/conv1/Conv_output_0",
                bias="onnx::Conv_6")
    if dynamo:
        inits = [init("conv1.weight", rand(1, c, 3, 1, 1)), init("conv1.weight_bias", rand(2, c))]
        node = conv("node_Conv_5", "input", "conv1.weight", "/conv1/Conv_output_0",
                    bias="conv1.weight_bias")
        entry = node.metadata_props.add()
        entry.key = "pkg.onnxscript.rewriter.rule_name"
        entry.value = rules
    nodes = [node, helper.make_node("Relu", ["/conv1/Conv_output_0"], ["r"], name="/relu/Relu")]
    h_nodes, h_inits = head("r", c)
    return model(nodes + h_nodes, inits + h_inits, (2, 3, 4, 4), (2, 3), producer=producer)


@case
def folded_partly(out):
    """densenet's eval-mode export: the norm that follows no convolution stays
    a BatchNormalization, the ones after a convolution are folded into it."""
    m = folded("pytorch")
    g = m.graph
    c = 4
    relu = [n for n in g.node if n.op_type == "Relu"][0]
    relu.output[0] = "r0"
    g.node.insert(2, helper.make_node(
        "BatchNormalization", ["r0", "norm.weight", "norm.bias", "norm.running_mean",
                               "norm.running_var"], ["n"], name="/norm/BatchNormalization"))
    g.node.insert(3, conv("/conv2/Conv", "n", "onnx::Conv_8", "r", bias="onnx::Conv_9"))
    g.initializer.extend([init("norm.weight", np.ones(c)), init("norm.bias", np.zeros(c)),
                          init("norm.running_mean", np.zeros(c)),
                          init("norm.running_var", np.ones(c)),
                          init("onnx::Conv_8", rand(3, c, c, 1, 1)), init("onnx::Conv_9", rand(4, c))])
    return m


@case
def folded_ts(out):
    return folded("pytorch")


@case
def folded_dynamo(out):
    return folded("pytorch", dynamo=True)


@case
def bias_removed(out):
    """The dynamo optimizer dropped a convolution's zero bias (squeezenet)."""
    m = folded("pytorch", dynamo=True, rules="RemoveOptionalBiasFromConv")
    conv_node = m.graph.node[0]
    del conv_node.input[2]
    kept = [t for t in m.graph.initializer if t.name != "conv1.weight_bias"]
    del m.graph.initializer[:]
    m.graph.initializer.extend(kept)
    return m


@case
def folded_other(out):
    return folded("another-exporter")


@case
def plain_pytorch(out):
    c = 4
    nodes = [conv("/features/features.0/Conv", "input", "features.0.weight", "c",
                  bias="features.0.bias"),
             helper.make_node("Relu", ["c"], ["r"], name="/features/features.1/Relu")]
    h_nodes, h_inits = head("r", c)
    inits = [init("features.0.weight", rand(1, c, 3, 1, 1)), init("features.0.bias", rand(2, c))]
    return model(nodes + h_nodes, inits + h_inits, (2, 3, 4, 4), (2, 3))


def main(argv):
    if len(argv) == 2 and argv[1] == "--list":
        print("\n".join(sorted(CASES)))
        return 0
    if len(argv) != 3 or argv[1] not in CASES:
        print(__doc__, file=sys.stderr)
        return 2
    m = CASES[argv[1]](argv[2])
    with open(argv[2], "wb") as f:
        f.write(m.SerializeToString())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
