#!/usr/bin/env python3
"""Attention as one op (passes/AttentionFusion.cpp) on small generated models.

Three models as exporters write attention:
  causal_lm     test/e2e/lm_patterns.py's: one head, Where(mask, scores, -inf)
                with a mask from positions and the ids (its scale and fill
                as Constant nodes: initializers are trained params, whose
                values the pass does not fold).
  bert_padding  two heads [B, H, T, Dh] after Reshape/Transpose, scores
                divided by sqrt(Dh), plus a padding mask (1 - keep) * -1e9 of
                shape [B, 1, 1, T] computed from the ids at run time.
  gpt2_causal   bert_padding's heads with transformers' causal mask instead:
                Where(Expand(constant lower triangle), 0, finfo.min), which
                the pass makes causal = 1 (no mask operand).

For each: the compiled training step (--emit=train-ir) uses attention and
attention_grad, and with --no-attention-fusion neither; the interpreter's
float64 training steps with the pass and without it agree within 1e-9
relative (losses, first-step gradients, params after 3 steps); lwcc
--check-gradients passes on the fused model; and the CPU trainers match
the interpreter over 3 steps, and the emulated CUDA trainers (attention's CUDA
kernels on the emulated device) match the CPU trainers (--no-emulated
leaves them out).
Ends with the line "N passed, M failed".
"""
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import lm_patterns  # noqa: E402
import trainer_vs_reference  # noqa: E402

B, T, V, H, DH = 2, 6, 11, 2, 4
D = H * DH
PAD = 0
EXACT = 1e-9


def constant(name, value):
    """A float32 scalar as a Constant node (an initializer would be a
    trained param)."""
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
        np.array(value, np.float32), name))


def causal_lm():
    """lm_patterns.py's causal_lm with its scale and -inf fill as Constant
    nodes, as the exporters write them."""
    model = lm_patterns.causal_lm()
    g = model.graph
    values = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    for name in ("scale", "neg_inf"):
        g.initializer.remove(next(i for i in g.initializer if i.name == name))
        g.node.insert(0, constant(name, float(values[name])))
    return model


def bert_padding():
    rng = np.random.default_rng(5)
    n = helper.make_node

    def heads(x, out):
        return [n("Reshape", [x, "split_shape"], [out + "_r"]),
                n("Transpose", [out + "_r"], [out], perm=[0, 2, 1, 3])]

    nodes = [
        n("Gather", ["wte", "ids"], ["x"]),
        n("MatMul", ["x", "wq"], ["q0"]), n("MatMul", ["x", "wk"], ["k0"]),
        n("MatMul", ["x", "wv"], ["v0"]),
        *heads("q0", "q"), *heads("k0", "k"), *heads("v0", "v"),
        n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        n("MatMul", ["q", "kt"], ["qk"]),
        n("Div", ["qk", "sqrt_d"], ["scores"]),
        # The padding mask: (1 - keep) * -1e9 as [B, 1, 1, T].
        n("Equal", ["ids", "pad"], ["is_pad"]),
        n("Not", ["is_pad"], ["keep"]),
        n("Cast", ["keep"], ["keepf"], to=TensorProto.FLOAT),
        n("Sub", ["one_f", "keepf"], ["dropf"]),
        n("Mul", ["dropf", "big_neg"], ["pad_add"]),
        n("Unsqueeze", ["pad_add", "ax12"], ["mask"]),
        n("Add", ["scores", "mask"], ["masked"]),
        n("Softmax", ["masked"], ["attn"], axis=-1),
        n("MatMul", ["attn", "v"], ["ctx"]),
        n("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx_t", "merge_shape"], ["h"]),
        n("MatMul", ["h", "wo"], ["o"]),
        n("Add", ["o", "x"], ["r"]),
        n("MatMul", ["r", "lm_head"], ["logits"]),
    ]
    init = lm_patterns.init
    inits = [
        init("wte", [V, D], rng), init("wq", [D, D], rng), init("wk", [D, D], rng),
        init("wv", [D, D], rng), init("wo", [D, D], rng), init("lm_head", [D, V], rng),
        lm_patterns.ints("split_shape", [B, T, H, DH]), lm_patterns.ints("merge_shape", [B, T, D]),
        lm_patterns.ints("ax12", [1, 2]), lm_patterns.ints("pad", PAD),
    ]
    nodes = [constant("sqrt_d", DH ** 0.5), constant("one_f", 1.0), constant("big_neg", -1e9),
             *nodes]
    graph = helper.make_graph(
        nodes, "bert_padding", [helper.make_tensor_value_info("ids", TensorProto.INT64, [B, T])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, T, V])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def gpt2_causal():
    """transformers' GPT-2 and Llama exports: the causal mask made once as
    Where(Expand(lower triangle), 0, finfo.min) of shape [B, 1, T, T] and
    added to the heads' scaled scores; the pass makes it causal = 1."""
    model = bert_padding()
    g = model.graph
    keep = [nd for nd in g.node if nd.output[0] not in
            ("is_pad", "keep", "keepf", "dropf", "pad_add", "mask")]
    tri = np.tril(np.ones((T, T), bool)).reshape(1, 1, T, T)
    mask_nodes = [
        helper.make_node("Constant", [], ["tri"], value=numpy_helper.from_array(tri, "tri")),
        helper.make_node("Expand", ["tri", "mask_shape"], ["cond"]),
        constant("zero_f", 0.0),
        constant("lowest", float(np.finfo(np.float32).min)),
        helper.make_node("Where", ["cond", "zero_f", "lowest"], ["mask"]),
    ]
    del g.node[:]
    g.node.extend(mask_nodes + keep)
    g.initializer.append(lm_patterns.ints("mask_shape", [B, 1, T, T]))
    g.name = "gpt2_causal"
    return model


MODELS = {"causal_lm": causal_lm, "bert_padding": bert_padding, "gpt2_causal": gpt2_causal}
FLAGS = ["--ignore-index=-100"]


def batch(model, data):
    rng = np.random.default_rng(11)
    ids = lm_patterns.token_ids(rng)
    lm_patterns.write([ids, lm_patterns.labels(rng, V)], data, raw=True)


def saved(name, tmp):
    path = os.path.join(tmp, name + ".onnx")
    onnx.save(MODELS[name](), path)
    return path


def ir_case(name, tmp):
    def check():
        path = saved(name, tmp)
        fused = harness.check_output([harness.LWCC, path, *FLAGS, "--emit=train-ir"]).stdout
        plain = harness.check_output([harness.LWCC, path, *FLAGS, "--emit=train-ir",
                                      "--no-attention-fusion"]).stdout
        assert " = attention(" in fused and " = attention_grad(" in fused, \
            "the training step does not use attention and attention_grad"
        assert "attention" not in plain, "--no-attention-fusion still uses attention"
        assert "softmax(" not in fused, "a softmax is left beside the attention op"
        if name == "gpt2_causal":
            assert "causal = 1" in fused and " where(" not in fused, \
                "the expanded causal mask is not causal = 1"
            return "attention (causal = 1, no mask) and attention_grad in the step; none with " \
                   "--no-attention-fusion"
        return "attention and attention_grad in the step; none with --no-attention-fusion"
    harness.case(check, f"{name}: the compiled step uses the attention op")


def f64_case(name, tmp):
    def check():
        path = saved(name, tmp)
        data = os.path.join(tmp, name + "_data")
        batch(None, data)
        dumps = []
        for extra in ([], ["--no-attention-fusion"]):
            out = os.path.join(tmp, f"{name}_f64{len(dumps)}")
            os.makedirs(out, exist_ok=True)
            harness.check_output([harness.LWCC, path, *FLAGS, *extra, "--train-reference",
                                  "--precision=f64", "--inputs", data, "--steps", "3",
                                  "--dump", out])
            dumps.append(out)
        files = sorted(os.listdir(dumps[1]))
        assert sorted(os.listdir(dumps[0])) == files, "the two runs dump different tensors"
        assert any(f.startswith("grad_") for f in files) and "loss_2.pb" in files
        worst = 0.0
        for f in files:
            a, b = (numpy_helper.to_array(onnx.load_tensor(os.path.join(d, f))) for d in dumps)
            assert a.dtype == np.float64, f"{f} is {a.dtype}, not float64"
            worst = max(worst, harness.rel_error(a, b))
        assert worst < EXACT, f"worst relative difference {worst:.2e}"
        return f"{len(files)} tensors (3 steps) within {worst:.1e}"
    harness.case(check, f"{name}: float64 interpreter steps, fused vs plain ops")


def gradcheck_case(name, tmp):
    def check():
        path = saved(name, tmp)
        out = harness.check_output([harness.LWCC, path, *FLAGS, "--check-gradients"]).stdout
        return out.strip().splitlines()[-1] if out.strip() else "passed"
    harness.case(check, f"{name}: --check-gradients with the attention op")


def trainer_case(name, tmp):
    def check():
        worst, checked, nparams, ngrads = trainer_vs_reference.check_model(
            MODELS[name](), name + "_train", tmp, flags=FLAGS, write_batch=batch, steps=3)
        assert worst < lm_patterns.TOLERANCE and checked == ngrads and checked > 0, \
            f"{checked} of {ngrads} gradients checked, worst relative error {worst:.2e}"
        return f"3 steps: loss, {checked} gradients, {nparams} params within {worst:.2e}"
    harness.case(check, f"{name}: CPU trainer vs interpreter")


def emulated_case(name, tmp):
    """The emulated CUDA trainer (attention's CUDA kernels compiled for the
    emulated device) against the CPU trainer: 3 steps, every dumped tensor."""
    def check():
        path = saved(name, tmp)
        data = os.path.join(tmp, name + "_emu_data")
        batch(None, data)
        dumps = []
        for target in (["--target=cpu"], ["--emulate-gpu"]):
            exe = os.path.join(tmp, f"{name}_emu{len(dumps)}")
            harness.check_output([harness.LWCC, path, *FLAGS, *target, "-o", exe])
            out = exe + "_dump"
            os.makedirs(out, exist_ok=True)
            extra = ["--no-tf32"] if target == ["--emulate-gpu"] else []
            harness.check_output([exe, "--steps=3", f"--data=raw:{data}", f"--dump={out}",
                                  *extra])
            dumps.append(out)
        files = sorted(f for f in os.listdir(dumps[0]) if f.endswith(".bin"))
        assert files and sorted(f for f in os.listdir(dumps[1]) if f.endswith(".bin")) == files
        worst = 0.0
        for f in files:
            a, b = (np.fromfile(os.path.join(d, f), np.float32) for d in dumps)
            worst = max(worst, harness.rel_error(b, a))
        assert worst < lm_patterns.TOLERANCE, f"worst relative error {worst:.2e}"
        return f"{len(files)} tensors after 3 steps within {worst:.2e}"
    harness.case(check, f"{name}: emulated CUDA trainer vs CPU trainer")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            ir_case(name, tmp)
            f64_case(name, tmp)
            gradcheck_case(name, tmp)
            trainer_case(name, tmp)
            if "--no-emulated" not in sys.argv:
                emulated_case(name, tmp)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
