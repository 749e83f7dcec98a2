#!/usr/bin/env python3
"""Write the chain of Inputs/chain.lwir as ONNX, without its loss (lwcc
appends it): five 256-wide matmuls fc1 .. fc5 from x: f32[64,1024], their
values h1 .. h5, their weights w1 .. w5.

With --skip, a chain whose first value skips ahead: h1 .. h4 as above,
s = h4 + h1 (the node "skip"), h5 = s @ w5 (fc5) and h6 = h5 @ w6 (fc6).
Cut into four stages, h1 crosses from the first stage to the last.

  python3 chain.py [--skip] OUT.onnx
"""

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

skip = "--skip" in sys.argv[1:]
out = [a for a in sys.argv[1:] if a != "--skip"][0]
layers = 6 if skip else 5
rng = np.random.default_rng(0)
shapes = [(1024, 256)] + [(256, 256)] * (layers - 1)
inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.05).astype(np.float32), f"w{i + 1}")
         for i, s in enumerate(shapes)]
nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", f"w{i + 1}"], [f"h{i + 1}"],
                          name=f"fc{i + 1}") for i in range(4 if skip else 5)]
if skip:
    nodes.append(helper.make_node("Add", ["h4", "h1"], ["s"], name="skip"))
    nodes.append(helper.make_node("MatMul", ["s", "w5"], ["h5"], name="fc5"))
    nodes.append(helper.make_node("MatMul", ["h5", "w6"], ["h6"], name="fc6"))
graph = helper.make_graph(nodes, "skip" if skip else "chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 1024])],
                          [helper.make_tensor_value_info(f"h{layers}", TensorProto.FLOAT,
                                                         [64, 256])],
                          inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.checker.check_model(model, full_check=True)
onnx.save(model, out)
