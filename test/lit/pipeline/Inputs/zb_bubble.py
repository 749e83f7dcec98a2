"""ZB-H1's bubble on a uniform chain against the zero-bubble formula.

A per-feature scale, then a chain of four equal matrix products (1024x1024
weights) on four stages of a device spec whose only cost is arithmetic
(memory traffic, launches and transfers free: the assumptions of the
formula), M = 4, 8 and 16 micro-batches of 64 samples. A stage's forward,
input gradient and weight gradient are one matrix product each (t_F = t_B =
t_W). For each schedule
this prints each device's bubble rate, its idle time over its compute
(the simulator's bubble b is idle over the step: the rate is b / (1 - b)),
beside the formula:
  zb-h1  (S-1)/(3M): the weight gradients fill the drain;
  1f1b   2(S-1)/(3M): lwcc's backward sends the input gradient before it
         computes the weight's, so the previous stage waits t_F + t_B, not
         t_F + t_B + t_W as the classical (S-1)/M counts.
It exits 1 when the slowest stage's rate (the one the step is made of) is
not within 2% of its formula, or any device's within 0.005 of it.

Then the same on the h100 spec, where memory traffic, launches and the
transfers between stages cost too. There the chain is made so that the
products' arithmetic is nearly all of each unit: four 8192x8192 products a
stage and micro-batches of 32768 samples, so that the weight gradient's
accumulation and the transposes (memory traffic of the weights' size, the
same for every sample count) and a micro-batch's transfer (a thin slice of
its products' time) stay small. Its weights (4 GiB) lie in an external
data file with holes: the plan reads no weight. The slowest stage's rate
must again be within 2% of the formula; the middle stages, which wait for
a transfer on both sides, within 0.01.

    zb_bubble.py LWCC TMPDIR
"""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

S = 4


def external(name, width, data, offset):
    """A width x width float weight whose bytes lie in `data` at `offset`."""
    t = TensorProto()
    t.name, t.data_type, t.data_location = name, TensorProto.FLOAT, TensorProto.EXTERNAL
    t.dims.extend([width, width])
    for key, value in (("location", data), ("offset", offset), ("length", width * width * 4)):
        entry = t.external_data.add()
        entry.key, entry.value = key, str(value)
    return t


def chain(path, width, per_stage=1, external_data=False):
    # A per-feature scale (a trained param) first, so that stage 0 too
    # computes its input's gradient (the first product's input then needs one).
    nodes = [helper.make_node("Mul", ["x", "scale"], ["scaled"], name="scale")]
    inits, x = [numpy_helper.from_array(np.ones(width, np.float32), "scale")], "scaled"
    data = os.path.basename(path) + ".data"
    for i in range(S * per_stage):
        if external_data:
            inits.append(external(f"w{i}", width, data, i * width * width * 4))
        else:
            inits.append(numpy_helper.from_array(np.zeros((width, width), np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"h{i}"], name=f"fc{i}"))
        x = f"h{i}"
    g = helper.make_graph(nodes, "chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", width])],
                          inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    if external_data:  # zeros, as holes: nothing is written
        with open(os.path.join(os.path.dirname(path), data), "wb") as f:
            f.truncate(S * per_stage * width * width * 4)


def compare(lwcc, tmp, label, model, spec, per_mb, middle_tolerance):
    """Prints each schedule's bubble rates against its formula; False when
    the slowest stage is not within 2% of it or another stage not within
    `middle_tolerance`."""
    ok = True
    for m in (4, 8, 16):
        for sched, formula in (("zb-h1", (S - 1) / (3 * m)), ("1f1b", 2 * (S - 1) / (3 * m))):
            out = os.path.join(tmp, f"{label}-{sched}-{m}.json")
            subprocess.run([lwcc, model, f"--gpus={S}", "--strategy=pipeline", f"--stages={S}",
                            f"--microbatches={m}", f"--schedule={sched}", f"--batch={per_mb * m}",
                            f"--device-spec={spec}", "--emit=plan", f"--plan-json={out}", "-o",
                            os.devnull], check=True, capture_output=True)
            devs = json.load(open(out))["pipeline"]["devices"]
            rates = [d["bubble"] / (1 - d["bubble"]) for d in devs]
            slowest = rates[max(range(len(devs)), key=lambda i: devs[i]["compute_s"])]
            good = (abs(slowest - formula) <= 0.02 * formula and
                    all(abs(r - formula) <= middle_tolerance for r in rates))
            ok = ok and good
            print(f"{label} M={m} {sched}: bubble rate per device "
                  f"{' '.join(f'{r:.4f}' for r in rates)}, slowest stage {slowest:.4f}, "
                  f"formula {formula:.4f}: {'within' if good else 'NOT within'}")
    return ok


def main():
    lwcc, tmp = sys.argv[1:3]
    os.makedirs(tmp, exist_ok=True)
    model, spec = os.path.join(tmp, "chain.onnx"), os.path.join(tmp, "arithmetic.json")
    chain(model, 1024)
    json.dump({"name": "arithmetic-only", "fp32_flops": 1e12, "mem_bandwidth": 1e18,
               "launch_seconds": 0, "memory_bytes": 1e12, "intra_bandwidth": 1e18,
               "intra_latency": 0, "inter_bandwidth": 1e18, "inter_latency": 0,
               "devices_per_node": 8}, open(spec, "w"))
    ok = compare(lwcc, tmp, "arithmetic", model, spec, 64, 0.005)
    wide = os.path.join(tmp, "wide.onnx")
    chain(wide, 8192, per_stage=4, external_data=True)
    ok = compare(lwcc, tmp, "h100", wide, "h100", 32768, 0.01) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
