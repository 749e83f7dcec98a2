#!/usr/bin/env python3
"""Writes a small classifier whose names are spelled as PyTorch's exporter
spells them, for the lit test of the generated trainer's names:

    /fc1/Gemm  -> /fc1/Gemm_output_0   (reads fc1.weight, fc1.bias)
    /act/Relu  -> relu                 (a runtime function's name)
    /fc2/Gemm  -> 7                    (a number)
    /out/Mul   -> logits

    names_model.py OUT
"""
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def main():
    rng = np.random.default_rng(0)
    init = [
        numpy_helper.from_array(rng.standard_normal((5, 4)).astype(np.float32), "fc1.weight"),
        numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "fc1.bias"),
        numpy_helper.from_array(rng.standard_normal((3, 5)).astype(np.float32), "fc2.weight"),
        numpy_helper.from_array(np.array(0.5, np.float32), "scale"),
    ]
    nodes = [
        helper.make_node("Gemm", ["input.1", "fc1.weight", "fc1.bias"], ["/fc1/Gemm_output_0"],
                         name="/fc1/Gemm", transB=1),
        helper.make_node("Relu", ["/fc1/Gemm_output_0"], ["relu"], name="/act/Relu"),
        helper.make_node("Gemm", ["relu", "fc2.weight"], ["7"], name="/fc2/Gemm", transB=1),
        helper.make_node("Mul", ["7", "scale"], ["logits"], name="/out/Mul"),
    ]
    graph = helper.make_graph(
        nodes, "names", [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 3])], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    with open(sys.argv[1], "wb") as f:
        f.write(model.SerializeToString())


if __name__ == "__main__":
    main()
