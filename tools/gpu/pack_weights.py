#!/usr/bin/env python3
"""pack_weights.py MODEL.onnx PARAMS.txt OUT.weights: the initializers of
MODEL in the order `TRAINER --list-params` printed (PARAMS.txt), float32,
packed, skipping the zero-initialized optimizer state: the file a trainer
built with `lwcc --weights=separate` reads."""
import sys

import numpy as np
import onnx
from onnx import numpy_helper

model = onnx.load(sys.argv[1])
init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
with open(sys.argv[3], "wb") as out:
    for line in open(sys.argv[2]):
        parts = line.split()
        if not parts or parts[-1] == "zeros":
            continue
        out.write(np.ascontiguousarray(init[parts[0]]).tobytes())
