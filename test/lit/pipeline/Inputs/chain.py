#!/usr/bin/env python3
"""Write the chain of Inputs/chain.lwir as ONNX, without its loss (lwcc
appends it): five 256-wide matmuls fc1 .. fc5 from x: f32[64,1024], their
values h1 .. h5, their weights w1 .. w5.

  python3 chain.py OUT.onnx
"""

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(0)
shapes = [(1024, 256)] + [(256, 256)] * 4
inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.05).astype(np.float32), f"w{i + 1}")
         for i, s in enumerate(shapes)]
nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", f"w{i + 1}"], [f"h{i + 1}"],
                          name=f"fc{i + 1}") for i in range(5)]
graph = helper.make_graph(nodes, "chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 1024])],
                          [helper.make_tensor_value_info("h5", TensorProto.FLOAT, [64, 256])],
                          inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.checker.check_model(model, full_check=True)
onnx.save(model, sys.argv[1])
