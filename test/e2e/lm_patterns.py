#!/usr/bin/env python3
"""Language-model patterns of the exporters, generated with the onnx package.

Two small models reproduce what PyTorch's dynamo exporter writes for
Hugging Face causal LMs (GPT-2, Llama):

  causal_lm   token ids -> embedding -> one attention head whose causal mask
              is built from positions (Range, Unsqueeze, LessOrEqual, Not,
              And: compile-time data that folds at import) and combined with
              a padding mask computed from the ids at run time (Equal, Not,
              And, Where with -inf), -> logits [B, T, V]; trained with lwcc's
              appended loss on sequences (--ignore-index=-100).
  lm_loss     logits [B, T, C] -> SoftmaxCrossEntropyLoss over [B, C, T]
              (ignore_index -100, mean) + NegativeLogLikelihoodLoss with
              class weights (sum) + a GatherElements and a ScatterElements
              term: the graph's own loss (--loss=none).

Each is imported and run on lwcc's interpreter (--run-reference) against
onnxruntime, then a CPU trainer runs 3 steps against the interpreter
(--train-reference), as test/e2e/trainer_vs_reference.py compares them.
Ends with the line "N passed, M failed".
"""
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import trainer_vs_reference  # noqa: E402

B, T, V, D, C = 2, 6, 11, 8, 5
PAD = 0
TOLERANCE = 1e-4


def init(name, shape, rng, scale=0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def causal_lm():
    rng = np.random.default_rng(3)
    n = helper.make_node
    nodes = [
        n("Gather", ["wte", "ids"], ["x"]),
        n("MatMul", ["x", "wq"], ["q"]),
        n("MatMul", ["x", "wk"], ["k"]),
        n("MatMul", ["x", "wv"], ["v"]),
        n("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        n("MatMul", ["q", "kt"], ["qk"]),
        n("Mul", ["qk", "scale"], ["scores"]),
        # The causal mask from positions: j <= i, spelled not(j > i) and
        # anded with itself through LessOrEqual (compile-time: folds).
        n("Range", ["zero", "tlen", "one"], ["pos"]),
        n("Unsqueeze", ["pos", "ax0"], ["row"]),
        n("Unsqueeze", ["pos", "ax1"], ["col"]),
        n("Greater", ["row", "col"], ["future"]),
        n("Not", ["future"], ["past"]),
        n("LessOrEqual", ["row", "col"], ["past2"]),
        n("And", ["past", "past2"], ["causal"]),
        # The padding mask from the ids (run time): keys that are not PAD.
        n("Equal", ["ids", "pad"], ["is_pad"]),
        n("Not", ["is_pad"], ["keep"]),
        n("Unsqueeze", ["keep", "ax1"], ["keep3"]),
        n("And", ["causal", "keep3"], ["allowed"]),
        n("Or", ["allowed", "diag"], ["allowed2"]),
        n("Xor", ["allowed2", "nothing"], ["mask"]),
        n("Where", ["mask", "scores", "neg_inf"], ["masked"]),
        n("Softmax", ["masked"], ["attn"], axis=-1),
        n("MatMul", ["attn", "v"], ["h"]),
        n("Add", ["h", "x"], ["r"]),
        n("MatMul", ["r", "lm_head"], ["logits"]),
    ]
    eye = np.eye(T, dtype=bool)
    inits = [
        init("wte", [V, D], rng), init("wq", [D, D], rng), init("wk", [D, D], rng),
        init("wv", [D, D], rng), init("lm_head", [D, V], rng),
        numpy_helper.from_array(np.array(D ** -0.5, np.float32), "scale"),
        ints("zero", 0), ints("tlen", T), ints("one", 1), ints("ax0", [0]), ints("ax1", [1]),
        ints("pad", PAD),
        numpy_helper.from_array(eye, "diag"),
        numpy_helper.from_array(np.zeros([T, T], dtype=bool), "nothing"),
        numpy_helper.from_array(np.array(-np.inf, np.float32), "neg_inf"),
    ]
    graph = helper.make_graph(
        nodes, "causal_lm", [helper.make_tensor_value_info("ids", TensorProto.INT64, [B, T])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, T, V])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def lm_loss():
    rng = np.random.default_rng(5)
    n = helper.make_node
    idx = rng.integers(-C, C, size=[B, T, 2])
    nodes = [
        n("MatMul", ["x", "w"], ["logits"]),
        n("Transpose", ["logits"], ["scores"], perm=[0, 2, 1]),
        n("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["sce"], ignore_index=-100,
          reduction="mean"),
        n("LogSoftmax", ["scores"], ["logp"], axis=1),
        n("NegativeLogLikelihoodLoss", ["logp", "labels", "cw"], ["nll"], ignore_index=-100,
          reduction="sum"),
        n("GatherElements", ["logits", "idx"], ["picked"], axis=2),
        n("ReduceMean", ["picked"], ["aux"], keepdims=0),
        n("ScatterElements", ["logits", "idx2", "u"], ["scat"], axis=-1),
        n("Mul", ["scat", "scat"], ["sq"]),
        n("ReduceSum", ["sq"], ["reg"], keepdims=0),
        n("Mul", ["nll", "half"], ["nll2"]),
        n("Mul", ["reg", "small"], ["reg2"]),
        n("Add", ["sce", "nll2"], ["s1"]),
        n("Add", ["s1", "aux"], ["s2"]),
        n("Add", ["s2", "reg2"], ["loss"]),
    ]
    idx2 = np.stack([rng.permutation(C)[:2] for _ in range(B * T)]).reshape(B, T, 2)
    inits = [
        init("w", [D, C], rng), init("u", [B, T, 2], rng),
        numpy_helper.from_array(np.linspace(0.5, 1.5, C).astype(np.float32), "cw"),
        ints("idx", idx), ints("idx2", idx2),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(0.01, np.float32), "small"),
    ]
    graph = helper.make_graph(
        nodes, "lm_loss",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, T, D]),
         helper.make_tensor_value_info("labels", TensorProto.INT64, [B, T])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def token_ids(rng):
    ids = rng.integers(1, V, size=[B, T])
    ids[0, -2:] = PAD  # padding at the end of the first sequence
    return ids.astype(np.int64)


def labels(rng, classes):
    y = rng.integers(0, classes, size=[B, T]).astype(np.int64)
    y[0, -2:] = -100  # ignored, as a causal LM's padded or shifted-out labels
    y[1, 0] = -100
    return y


def inputs_of(name, rng):
    if name == "causal_lm":
        return [token_ids(rng)]
    return [rng.standard_normal([B, T, D]).astype(np.float32), labels(rng, C)]


def write(arrays, data, raw):
    os.makedirs(data, exist_ok=True)
    for k, arr in enumerate(arrays):
        with open(os.path.join(data, f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(arr).SerializeToString())
        if raw:
            arr.tofile(os.path.join(data, f"input_{k}.bin"))


MODELS = {
    # name: (builder, lwcc flags of its training step)
    "causal_lm": (causal_lm, ["--ignore-index=-100"]),
    "lm_loss": (lm_loss, ["--loss=none"]),
}


def forward_case(name, tmp):
    def check():
        model = MODELS[name][0]()
        path = os.path.join(tmp, name + ".onnx")
        onnx.save(model, path)
        arrays = inputs_of(name, np.random.default_rng(7))
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        feed = {i.name: a for i, a in zip(model.graph.input, arrays)}
        want = sess.run(None, feed)[0]
        ins, outs = os.path.join(tmp, name + "_in"), os.path.join(tmp, name + "_out")
        write(arrays, ins, raw=False)
        harness.check_output([harness.LWCC, path, "--run-reference", "--inputs", ins,
                              "--outputs", outs])
        got = numpy_helper.to_array(onnx.load_tensor(os.path.join(outs, "output_0.pb")))
        assert got.shape == want.shape, f"shape {got.shape} != onnxruntime's {want.shape}"
        err = harness.rel_error(got, want)
        assert err < TOLERANCE, f"relative error {err:.2e} against onnxruntime"
        return f"relative error {err:.2e} against onnxruntime"
    harness.case(check, f"{name}: interpreter vs onnxruntime")


def trainer_case(name, tmp):
    build, flags = MODELS[name]

    def batch(model, data):
        rng = np.random.default_rng(11)
        arrays = inputs_of(name, rng)
        if name == "causal_lm":  # the label input lwcc appends
            arrays.append(labels(rng, V))
        write(arrays, data, raw=True)

    def check():
        worst, checked, nparams, ngrads = trainer_vs_reference.check_model(
            build(), name + "_train", tmp, flags=flags, write_batch=batch, steps=3)
        assert worst < TOLERANCE and checked == ngrads and checked > 0, \
            f"{checked} of {ngrads} gradients checked, worst relative error {worst:.2e}"
        return f"3 steps: loss, {checked} gradients, {nparams} params within {worst:.2e}"
    harness.case(check, f"{name}: CPU trainer vs interpreter ({' '.join(flags)})")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            forward_case(name, tmp)
            trainer_case(name, tmp)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
