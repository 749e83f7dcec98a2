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

  dynamo_lm   what the dynamo exporter's optimizer (its default) writes of
              GPT-2: value metadata naming the module's parameters
              (InputSpec.kind PARAMETER); an output layer tied to the token
              embedding (one table a Gather and a Transpose read); weights
              folded into their transposes (metadata folded_from one param);
              a position table folded from a param and other values, and
              scalar constants (GELU's coefficients, Pow's exponent) without
              metadata; attention's Where(IsNaN(softmax), 0, softmax).
              lwcc trains the parameters, the tied table as one (its
              gradient the sum of both uses), the folded transposes; keeps
              the constants and the folded table as written, and warns that
              PyTorch trains the position table's param.

  rows_lm     GPT-2's linear layers as the exporter writes them (Reshape
              [B, T, D] to [B * T, D], Gemm, Reshape back) and Hugging
              Face's causal LM loss (labels padded with -100 and shifted,
              SoftmaxCrossEntropyLoss over [B * T, V] with ignore_index
              -100, mean), one sequence's labels all ignored: data
              parallelism splits the Gemm's rows in whole samples and the
              loss by the labels each device counts (--loss=none).

Each is imported and run on lwcc's interpreter (--run-reference) against
onnxruntime, then a CPU trainer runs 3 steps against the interpreter
(--train-reference), as test/e2e/trainer_vs_reference.py compares them.
causal_lm, dynamo_lm and rows_lm also train 3 steps in float64 on the interpreter
with --gpus 2 data and model parallelism, the default plan on 4 devices,
ZeRO-2 and a 2-stage pipeline, against one device (the pipeline against
one device with its 2 micro-batches), and their data-parallel step has the
embedding's lookups, the layer norm and the loss on both devices and
nothing gathered (rows_lm: the Gemm on half the rows on each); rows_lm's
CPU trainer on 2 devices runs against the interpreter. --shift-labels is
checked against labels shifted by hand, and a trainer of such logits
evaluates them (--eval: the loss of the logits at t against the labels at
t + 1, -100 left out) from npy labels holding -100.
causal_lm and lm_loss are also built as CUDA trainers for the emulated GPU
(the language kernels of runtime/cuda: gather and scatter of elements,
nll_loss's block reduction and its gradient) and trained 3 steps against the
CPU trainer on the same batch: every loss and dumped tensor within
EMULATED_TOL relative; causal_lm also in bf16 (its weight gradients sum a
bf16 value over the batch), within bf16's rounding (2e-2); rows_lm on 2
emulated GPUs with data parallelism against the CPU trainer on 2 devices.
Ends with the line "N passed, M failed".
"""
import os
import re
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


def signed(model, kinds):
    """`model` with the dynamo exporter's value metadata: {name: [(key, value)]}."""
    for name, props in kinds.items():
        t = next(t for t in model.graph.initializer if t.name == name)
        vi = helper.make_tensor_value_info(name, t.data_type, list(t.dims))
        for k, v in props:
            vi.metadata_props.add(key=k, value=v)
        model.graph.value_info.append(vi)
    return model


KIND = "pkg.torch.export.graph_signature.InputSpec.kind"
FOLDED = "pkg.onnxscript.optimizer.folded_from"


def dynamo_lm():
    rng = np.random.default_rng(9)
    n = helper.make_node
    nodes = [
        n("Gather", ["m.lm_head.weight", "ids"], ["tok"]),
        n("Add", ["tok", "embedding_1"], ["x"]),
        n("LayerNormalization", ["x", "m.ln.weight", "m.ln.bias"], ["xn"], axis=-1),
        n("MatMul", ["xn", "val_12"], ["q3"]),
        n("MatMul", ["xn", "val_13"], ["k3"]),
        # One head, [B, 1, T, D]; K^T through the flattened heads, as the
        # exporter writes it: [B*1, T, D], transposed, reshaped back.
        n("Reshape", ["q3", "heads"], ["q"]),
        n("Reshape", ["k3", "split_heads"], ["k4"]),
        n("Transpose", ["k4"], ["k"], perm=[0, 2, 1, 3]),
        n("Reshape", ["xn", "heads"], ["v"]),
        n("Reshape", ["k", "flat"], ["kf"]),
        n("Transpose", ["kf"], ["kft"], perm=[0, 2, 1]),
        n("Reshape", ["kft", "heads_t"], ["kt"]),
        n("MatMul", ["q", "kt"], ["qk"]),
        n("Mul", ["qk", "val_7"], ["scores"]),
        n("Add", ["scores", "val_78"], ["masked"]),
        n("Softmax", ["masked"], ["sm"], axis=-1),
        n("IsNaN", ["sm"], ["nan"]),
        n("Where", ["nan", "val_76", "sm"], ["attn"]),
        n("MatMul", ["attn", "v"], ["h4"]),
        n("Reshape", ["h4", "unheads"], ["h"]),
        # GPT-2's gelu_new: 0.5 h (1 + tanh(0.79788 (h + 0.044715 h^3)))
        n("Pow", ["h", "val_116"], ["h3"]),
        n("Mul", ["h3", "val_117"], ["c"]),
        n("Add", ["h", "c"], ["inner"]),
        n("Mul", ["inner", "val_118"], ["scaled"]),
        n("Tanh", ["scaled"], ["t"]),
        n("Add", ["t", "val_one"], ["t1"]),
        n("Mul", ["h", "t1"], ["ht"]),
        n("Mul", ["ht", "val_72"], ["g"]),
        n("Transpose", ["m.lm_head.weight"], ["wt"], perm=[1, 0]),
        n("MatMul", ["g", "wt"], ["logits"]),
    ]
    causal = np.where(np.tril(np.ones([T, T], bool)), 0.0, -np.inf).astype(np.float32)
    scalar = {"val_7": D ** -0.5, "val_76": 0.0, "val_116": 3.0, "val_117": 0.044715,
              "val_118": 0.7978846, "val_one": 1.0, "val_72": 0.5}
    inits = [
        init("m.lm_head.weight", [V, D], rng), init("embedding_1", [1, T, D], rng),
        numpy_helper.from_array(np.ones(D, np.float32), "m.ln.weight"),
        numpy_helper.from_array(np.zeros(D, np.float32), "m.ln.bias"),
        init("val_12", [D, D], rng), init("val_13", [D, D], rng),
        numpy_helper.from_array(causal[None], "val_78"),
        ints("heads", [B, 1, T, D]), ints("flat", [B, T, D]), ints("heads_t", [B, 1, D, T]),
        ints("split_heads", [B, T, 1, D]),
        ints("unheads", [B, T, D]),
        *(numpy_helper.from_array(np.array(v, np.float32), k) for k, v in scalar.items()),
    ]
    graph = helper.make_graph(
        nodes, "dynamo_lm", [helper.make_tensor_value_info("ids", TensorProto.INT64, [B, T])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, T, V])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    param = [(KIND, "PARAMETER"), ("pkg.torch.export.graph_signature.InputSpec.persistent",
                                   "None")]
    return signed(model, {
        "m.lm_head.weight": param, "m.ln.weight": param, "m.ln.bias": param,
        "val_12": [(FOLDED, "['m.attn.q.weight']")], "val_13": [(FOLDED, "['m.attn.k.weight']")],
        "embedding_1": [(FOLDED, "['add', 'arange', 'm.wpe.weight', 'val_4']")],
        "val_78": [(FOLDED, "['arange_3', 'le', 'val_19']")]})


def rows_lm():
    """GPT-2's Conv1D and Hugging Face's causal LM loss as the dynamo
    exporter writes them: the Gemm takes [B * T, D] rows reshaped from
    [B, T, D] and its result is reshaped back; the labels are padded with
    -100 and shifted, and the loss reads [B * T, V] logits and [B * T]
    labels (SoftmaxCrossEntropyLoss, ignore_index -100, mean)."""
    rng = np.random.default_rng(13)
    n = helper.make_node
    nodes = [
        n("Gather", ["wte", "ids"], ["x"]),
        n("Reshape", ["x", "rows"], ["xr"]),
        n("Gemm", ["xr", "w_fc", "b_fc"], ["h2"]),
        n("Reshape", ["h2", "btd"], ["h"]),
        n("Tanh", ["h"], ["a"]),
        n("Add", ["a", "x"], ["r"]),
        n("MatMul", ["r", "lm_head"], ["logits"]),
        n("Reshape", ["logits", "rows_v"], ["flat"]),
        n("Pad", ["labels", "pad_end", "ignored"], ["padded"]),
        n("Slice", ["padded", "one1", "big1", "ax1"], ["shifted"]),
        n("Reshape", ["shifted", "all"], ["targets"]),
        n("SoftmaxCrossEntropyLoss", ["flat", "targets"], ["loss"], ignore_index=-100,
          reduction="mean"),
    ]
    inits = [
        init("wte", [V, D], rng), init("w_fc", [D, D], rng), init("b_fc", [D], rng),
        init("lm_head", [D, V], rng),
        ints("rows", [B * T, D]), ints("btd", [B, T, D]), ints("rows_v", [B * T, V]),
        ints("pad_end", [0, 0, 0, 1]), ints("ignored", -100), ints("one1", [1]),
        ints("big1", [2 ** 62]), ints("ax1", [1]), ints("all", [-1]),
    ]
    graph = helper.make_graph(
        nodes, "rows_lm", [helper.make_tensor_value_info("ids", TensorProto.INT64, [B, T]),
                           helper.make_tensor_value_info("labels", TensorProto.INT64, [B, T])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)


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
    if name in ("causal_lm", "dynamo_lm"):
        return [token_ids(rng)]
    if name == "rows_lm":
        # The second sequence's labels all ignored: on 2 devices one shard
        # has no label that counts.
        y = labels(rng, V)
        y[1] = -100
        return [token_ids(rng), y]
    return [rng.standard_normal([B, T, D]).astype(np.float32), labels(rng, C)]


def write_batch(name, data, seed, raw):
    """A seeded batch of model `name`'s inputs in `data`, with the label
    input lwcc appends for the models trained with its loss."""
    rng = np.random.default_rng(seed)
    arrays = inputs_of(name, rng)
    if name in ("causal_lm", "dynamo_lm"):
        arrays.append(labels(rng, V))
    write(arrays, data, raw=raw)


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
    "dynamo_lm": (dynamo_lm, ["--ignore-index=-100"]),
    "rows_lm": (rows_lm, ["--loss=none"]),
}


def dynamo_params_case(tmp):
    def check():
        path = os.path.join(tmp, "dynamo_lm_params.onnx")
        onnx.save(dynamo_lm(), path)
        r = harness.run([harness.LWCC, path, "--ignore-index=-100", "--emit=train-ir", "-o",
                         "-"])
        assert r.returncode == 0, r.stderr[-500:]
        grads = sorted(re.findall(r"@grad\(%([\w.]+)\)", r.stdout))
        want = ["m.lm_head.weight", "m.ln.bias", "m.ln.weight", "val_12", "val_13"]
        assert grads == want, f"trained {grads}, expected {want}"
        # The tied table: one param, its gradient summing the Gather's and
        # the output layer's.
        assert r.stdout.count('param "m.lm_head.weight') == 1, "the tied table was split"
        # Attention as one op: the scale a constant, K^T through the flattened
        # heads, the NaN-safe softmax, the additive causal mask.
        assert r.stdout.count("= attention(") == 1, "attention not fused"
        warned = ("initializer 'embedding_1' is what the exporter's optimizer computed from "
                  "m.wpe.weight and other values")
        assert warned in r.stderr, r.stderr[-400:]
        return f"trained {', '.join(grads)}; warned of embedding_1; attention fused"
    harness.case(check, "dynamo_lm: the PARAMETERs, the tied table once and the folded "
                 "transposes train; the export's constants stay; attention is one op")


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


def trainer_case(name, tmp, extra=()):
    build, flags = MODELS[name]
    flags = [*flags, *extra]

    def batch(model, data):
        write_batch(name, data, 11, raw=True)

    def check():
        worst, checked, nparams, ngrads = trainer_vs_reference.check_model(
            build(), name + "_train" + "".join(f.split("=")[-1] for f in extra), tmp, flags=flags, write_batch=batch, steps=3)
        assert worst < TOLERANCE and checked == ngrads and checked > 0, \
            f"{checked} of {ngrads} gradients checked, worst relative error {worst:.2e}"
        return f"3 steps: loss, {checked} gradients, {nparams} params within {worst:.2e}"
    harness.case(check, f"{name}: CPU trainer vs interpreter ({' '.join(flags)})")


def shift_labels_case(tmp):
    """--shift-labels on the ids as labels equals the loss on labels shifted
    by hand (ids[:, 1:], then -100): the first step's loss and gradients in
    float64."""
    def check():
        path = os.path.join(tmp, "shift.onnx")
        onnx.save(causal_lm(), path)
        ids = token_ids(np.random.default_rng(13))
        labels = np.where(ids == PAD, -100, ids).astype(np.int64)
        shifted = np.concatenate([labels[:, 1:], np.full((B, 1), -100, np.int64)], axis=1)
        dumps = []
        for tag, given, flags in (("shift", labels, ["--shift-labels"]), ("hand", shifted, [])):
            data, dump = os.path.join(tmp, tag + "_in"), os.path.join(tmp, tag + "_dump")
            write([ids, given], data, raw=False)
            harness.check_output([harness.LWCC, path, "--ignore-index=-100", *flags,
                                  "--train-reference", "--precision=f64", "--inputs", data,
                                  "--steps", "1", "--dump", dump])
            dumps.append(dump)
        worst = 0.0
        files = sorted(f for f in os.listdir(dumps[1]) if f.startswith(("loss_", "grad_")))
        assert len(files) > 2, files
        for f in files:
            a, b = (numpy_helper.to_array(onnx.load_tensor(os.path.join(d, f))) for d in dumps)
            worst = max(worst, harness.rel_error(a, b))
        assert worst < 1e-12, f"--shift-labels differs from the hand-shifted labels by {worst:.2e}"
        r = harness.run([harness.LWCC, path, "--loss=mse", "--shift-labels", "--emit=train-ir",
                         "-o", os.devnull])
        assert r.returncode != 0 and "--shift-labels applies to the softmax-xent loss only" in \
            r.stderr, r.stderr[-300:]
        return f"loss and {len(files) - 1} gradients within {worst:.1e} in float64"
    harness.case(check, "causal_lm --shift-labels: Hugging Face's causal loss from the ids")


STRATEGIES = [["--gpus=2", "--strategy=data"], ["--gpus=2", "--strategy=model"], ["--gpus=4"],
              ["--gpus=2", "--strategy=data", "--shard=zero2"],
              ["--gpus=2", "--strategy=pipeline", "--stages=2", "--microbatches=2"]]


def strategies_case(name, tmp):
    """Every strategy's step on the interpreter (float64, 3 steps) against
    one device's (a pipeline's too: its micro-batches' losses weighed by the
    labels each counts), the data-parallel step really split (the lookups,
    the layer norm and the loss on both devices, nothing gathered), and the
    loss run on each micro-batch."""
    build, flags = MODELS[name]

    def check():
        path = os.path.join(tmp, name + "_par.onnx")
        onnx.save(build(), path)
        data = os.path.join(tmp, name + "_par_in")
        write_batch(name, data, 17, raw=False)

        def run(extra, tag):
            dump = os.path.join(tmp, f"{name}_{tag}")
            harness.check_output([harness.LWCC, path, *flags, *extra, "--train-reference",
                                  "--precision=f64", "--inputs", data, "--steps", "3",
                                  "--dump", dump])
            # ZeRO-2 dumps each device's share of a gradient: its losses and
            # params are compared.
            kinds = ("loss_", "param_") if "--shard=zero2" in extra else ("loss_", "param_",
                                                                          "grad_")
            return {f: numpy_helper.to_array(onnx.load_tensor(os.path.join(dump, f)))
                    for f in os.listdir(dump) if f.startswith(kinds)}
        one = run([], "one")
        worst = 0.0
        for k, extra in enumerate(STRATEGIES):
            # A pipeline's micro-batches weigh their losses by the labels
            # each counts: one device's step without micro-batches.
            ref = one
            got = run(extra, f"s{k}")
            assert set(got) <= set(ref) and len(got) > 3, f"{extra}: dumped {sorted(got)}"
            for f in got:
                assert got[f].shape == ref[f].shape, \
                    f"{' '.join(extra)}: {f} is {got[f].shape}, one device's {ref[f].shape}"
                err = harness.rel_error(got[f], ref[f])
                assert err < 1e-9, f"{' '.join(extra)}: {f} differs by {err:.2e}"
                worst = max(worst, err)
        ir = harness.check_output([harness.LWCC, path, *flags, "--gpus=2", "--strategy=data",
                                   "--emit=parallel-ir", "-o", "-"]).stdout
        for op in ("gather(", "layer_norm(", "softmax_xent(", "nll_loss("):
            if op in ir:
                devs = set(re.findall(r"\b" + op.replace("(", r"\(") + r".*@dev\((\d)\)", ir))
                assert devs == {"0", "1"}, f"data parallel: {op} on devices {devs}"
        # The loss over the labels that count is split too (each device
        # counts its own): only the counts, the loss and gradients cross.
        assert "all_gather(" not in ir, "data parallel: values gathered across devices"
        if name == "rows_lm":
            rows = re.findall(r"= gemm\(.*: f32\[(\d+),\d+\].*@par\(n = 2.*@dev", ir)
            assert rows == [str(B * T // 2)] * 2, f"data parallel: the Gemm's rows {rows}"
        # Micro-batches run the loss on each one's rows (its copies @mb(0)
        # and @mb(1)), not once on the rows gathered back.
        ir = harness.check_output([harness.LWCC, path, *flags, "--microbatches=2",
                                   "--emit=train-ir", "-o", "-"]).stdout
        losses = re.findall(r"= (?:softmax_xent|nll_loss)\(.*@mb\((\d)\)", ir)
        assert sorted(losses) == ["0", "1"], f"micro-batches: the loss runs on {losses}"
        return (f"{len(STRATEGIES)} strategies: losses, gradients and params within {worst:.1e} "
                "in float64")
    harness.case(check, f"{name}: data, model, the default on 4, ZeRO-2 and a pipeline vs one "
                 "device")


EMULATED_TOL = 1e-6  # float32 both sides, the same kernels' math; seen within 2e-7


def emulated_case(name, tmp, extra_flags=(), tol=None):
    """The CUDA trainer on the emulated GPU (gather and scatter of elements,
    nll_loss and its gradient, the sequence loss's kernels) against the CPU
    trainer: 3 steps on the same batch, every loss and every dumped param
    within EMULATED_TOL relative (`tol` for bf16, whose values may land on
    the neighbouring bf16 number)."""
    build, flags = MODELS[name]
    flags = [*flags, *extra_flags]
    tol = tol or EMULATED_TOL
    tag = name + "".join("_" + f.strip("-").split("=")[-1] for f in extra_flags)

    def check():
        if not os.path.exists(os.path.join(harness.PREFIX, "lib", "liblwcc_runtime_emu.a")):
            raise AssertionError("no liblwcc_runtime_emu.a (ninja -C build lwcc_runtime_emu)")
        path = os.path.join(tmp, tag + "_emu.onnx")
        onnx.save(build(), path)
        data = os.path.join(tmp, tag + "_emu_batch")
        write_batch(name, data, 11, raw=True)
        runs = {}
        for target, ext in (("cpu", "cpu"), ("cuda", "emu")):
            out = os.path.join(tmp, f"{tag}_{ext}")
            harness.check_output([harness.LWCC, path, f"--target={target}", *flags,
                                  "--emit=source", "-o", out])
            r = (harness.build_cpu_trainer(out) if target == "cpu" else
                 harness.build_emulated_trainer(out, timeout=600))
            ok = r[0] if target == "cpu" else r.returncode == 0
            assert ok, f"{target} trainer build: {(r[1] if target == 'cpu' else r.stderr)[-800:]}"
            extra = ["--no-tf32"] if target == "cuda" else ["--threads=2"]
            work = os.path.join(out, "run")
            os.makedirs(work, exist_ok=True)
            harness.check_output([os.path.join(out, "trainer"), "--steps=3", f"--data=raw:{data}",
                                  "--progress=off", "--log=log.jsonl", "--dump=dump", *extra],
                                 cwd=work)
            runs[ext] = work
        lc, le = (harness.log_losses(os.path.join(runs[k], "log.jsonl")) for k in ("cpu", "emu"))
        assert len(lc) == 3 and harness.losses_within(le, lc, tol), \
            f"losses {le} vs the CPU's {lc}"
        worst = max(harness.rel_error(a, b) for a, b in zip(le, lc))
        dc, de = (os.path.join(runs[k], "dump") for k in ("cpu", "emu"))
        files = sorted(f for f in os.listdir(dc) if f.endswith(".bin"))
        assert files and sorted(f for f in os.listdir(de) if f.endswith(".bin")) == files, \
            f"dumps differ: {files} vs {sorted(os.listdir(de))}"
        for f in files:
            if f == "param_train.step.bin":  # the step counter: the same bytes
                assert open(os.path.join(de, f), "rb").read() == \
                    open(os.path.join(dc, f), "rb").read(), "the step counters differ"
                continue
            a, b = (np.fromfile(os.path.join(d, f), np.float32) for d in (de, dc))
            assert a.size == b.size and a.size > 0, f"{f}: {a.size} vs {b.size} values"
            err = harness.rel_error(a, b)
            assert err < tol, f"{f}: {err:.2e} from the CPU trainer's"
            worst = max(worst, err)
        return f"3 losses and {len(files)} dumped tensors within {worst:.1e}"
    flags_said = "".join(" " + f for f in extra_flags)
    harness.case(check, f"{name}{flags_said}: the emulated GPU's trainer vs the CPU trainer")


def eval_case(tmp):
    """--eval of a causal LM's [B, T, V] logits as Hugging Face's labels
    train it (--shift-labels --ignore-index=-100, labels the ids with -100
    at padding): npy labels may hold -100, and the evaluation's loss is the
    mean cross-entropy of the logits at t against the labels at t + 1 over
    the labels that are not -100, computed here from the trainer's dumped
    evaluation logits. Token data, whose labels are shifted already, is
    refused by such a trainer."""
    def check():
        path = os.path.join(tmp, "causal_eval.onnx")
        onnx.save(causal_lm(), path)
        exe = os.path.join(tmp, "causal_eval_trainer")
        harness.check_output([harness.LWCC, path, "--target=cpu", "--ignore-index=-100",
                              "--shift-labels", "-o", exe])
        rng = np.random.default_rng(21)
        data = os.path.join(tmp, "causal_eval_npy")
        os.makedirs(data, exist_ok=True)
        for split, count in (("train", 2 * B), ("test", B)):
            ids = rng.integers(1, V, size=(count, T)).astype(np.int64)
            labels = ids.copy()
            labels[:, -2:] = -100  # padding at the end of each sequence
            labels[0, 2] = -100
            np.save(os.path.join(data, f"x_{split}.npy"), ids)
            np.save(os.path.join(data, f"y_{split}.npy"), labels)
        work = os.path.join(tmp, "causal_eval_run")
        os.makedirs(work, exist_ok=True)
        harness.check_output([exe, f"--data=npy:{data}", "--steps=2", "--eval", "--progress=off",
                              "--log=log.jsonl", "--dump=dump", "--threads=2"], cwd=work)
        import json
        with open(os.path.join(work, "log.jsonl")) as f:
            evals = [r for r in map(json.loads, f) if r.get("type") == "eval"]
        assert evals, "no evaluation in the log"
        logits = np.fromfile(os.path.join(work, "dump", "eval_logits.bin"),
                             np.float32).astype(np.float64).reshape(B, T, V)
        labels = np.load(os.path.join(data, "y_test.npy"))
        losses = []
        for b in range(B):
            for t in range(1, T):
                if labels[b, t] == -100:
                    continue
                row = logits[b, t - 1]
                mx = row.max()
                losses.append(np.log(np.exp(row - mx).sum()) + mx - row[labels[b, t]])
        want = float(np.mean(losses))
        got = evals[-1]["loss"]
        assert abs(got - want) <= 1e-5 * abs(want), f"eval loss {got}, from the logits {want}"
        r = harness.run([exe, "--data=tokens:" + os.path.join(tmp, "none_*.bin"), "--steps=1"],
                        cwd=work)
        assert r.returncode == 1 and "--shift-labels" in r.stderr, \
            f"token data: exit {r.returncode}, {r.stderr[-300:]}"
        return f"eval loss {got:.6f} over {len(losses)} tokens, from the logits {want:.6f}; " \
               "token data refused"
    harness.case(check, "causal_lm --shift-labels --ignore-index=-100: --eval on [B, T, V] "
                        "logits, npy labels with -100")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            forward_case(name, tmp)
            trainer_case(name, tmp)
        dynamo_params_case(tmp)
        shift_labels_case(tmp)
        eval_case(tmp)
        trainer_case("rows_lm", tmp, ["--gpus=2", "--strategy=data"])
        for name in ("causal_lm", "dynamo_lm", "rows_lm"):
            strategies_case(name, tmp)
        for name in ("causal_lm", "lm_loss"):
            emulated_case(name, tmp)
        # bf16: the weight gradients of [B, T, D] x [D, D] sum a bf16 value
        # over the batch (a 16-bit reduce_sum on both backends).
        emulated_case("causal_lm", tmp, ["--mixed-precision=bf16"], tol=2e-2)
        # Data parallelism on 2 emulated GPUs: the label counts (compare,
        # where, reduce_sum on each device) and their all-reduce.
        emulated_case("rows_lm", tmp, ["--gpus=2", "--strategy=data"])
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
