#!/usr/bin/env python3
"""Deduplicated initializers and batch norm's running statistics, end to end.

PyTorch's TorchScript exporter (eval mode, batch norm kept with
training=PRESERVE, do_constant_folding=False) deduplicates equal
initializers: fresh batch norms' scales, biases and running statistics
become one initializer per width that the other layers read through Identity
nodes. Each case below is one test:

  - untied trainer: the CPU trainer compiled from such a model (a reduced
    resnet18 built by torchvision_graphs.py) trains every layer's params and
    statistics on their own; its --export loads in onnxruntime, agrees with
    lwcc's interpreter on it, holds the trained values, and has one
    initializer per param under the names the nodes read (no Identity left
    for them);
  - tied trainer: with --tied-initializers=keep the trainable params stay one
    initializer read through the exporter's Identity nodes (the input's
    layout), the running statistics are still one initializer per layer;
  - running variance: one step of `lwcc --train-reference --precision=f64`
    on a batch norm that sees the input updates the running mean and
    variance as PyTorch does (unbiased batch variance, n/(n-1)), and with
    --bn-running-var=biased as ONNX's reference does.
  - tied by name: a GPT-2-like tied table stays one param under auto; a
    matrix two MatMuls read is an error (exit 1) naming it, its readers and
    the flags, and --tied-initializers=keep:w trains it as one param whose
    float64 gradient is the sum of untie:w's two params' gradients.
Ends with the line "N passed, M failed".
"""
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import exporter_graphs as eg  # noqa: E402
import torchvision_graphs as tv  # noqa: E402
import harness  # noqa: E402
from harness import LWCC  # noqa: E402

case = harness.case


def run(cmd, timeout=600):
    return harness.check_output(cmd, timeout=timeout)


def safe(name):
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def dedup_resnet(path):
    b = eg.Builder("resnet18-bn-kept", "ts", (3, 16, 16), batch=4, sym_batch=False, seed=3,
                   bn_kept="identity")
    m = tv.resnet18(b, classes=5)
    onnx.save(m, path)
    return m


def read_names(graph):
    return {i for n in graph.node for i in n.input}


def train_and_export(tmp, tag, *flags):
    model = os.path.join(tmp, f"{tag}.onnx")
    m = dedup_resnet(model)
    exe = os.path.join(tmp, f"{tag}-trainer")
    run([LWCC, model, "--target=cpu", "-o", exe, *flags])
    exported = os.path.join(tmp, f"{tag}-trained.onnx")
    dump = os.path.join(tmp, f"{tag}-dump")
    run([exe, "--data=synthetic", "--steps=3", "--lr=0.05", "--progress=off",
         f"--export={exported}", f"--dump={dump}"])
    out = onnx.load(exported)
    onnx.checker.check_model(out, full_check=True)
    # onnxruntime runs the export and agrees with lwcc's interpreter on it.
    import onnxruntime as ort
    x = np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32)
    sess = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
    want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    ins, outs = os.path.join(tmp, f"{tag}-in"), os.path.join(tmp, f"{tag}-out")
    os.makedirs(ins)
    onnx.save_tensor(numpy_helper.from_array(x), os.path.join(ins, "input_0.pb"))
    run([LWCC, exported, "--run-reference", "--inputs", ins, "--outputs", outs])
    got = numpy_helper.to_array(onnx.load_tensor(os.path.join(outs, "output_0.pb")))
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    assert err < 1e-4, f"lwcc and onnxruntime differ by {err:.2e} on the export"
    # The export holds the trained values, one initializer per param.
    inits = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    for name, value in inits.items():
        f = os.path.join(dump, f"param_{safe(name)}.bin")
        assert os.path.exists(f), f"initializer {name} of the export is no trainer param"
        trained = np.fromfile(f, value.dtype)
        assert trained.tobytes() == value.tobytes(), f"{name}: not the trained value"
    return m, out, inits


def untied_trainer():
    with tempfile.TemporaryDirectory() as tmp:
        m, out, inits = train_and_export(tmp, "untied")
        identities = {n.output[0]: n.input[0] for n in m.graph.node if n.op_type == "Identity"}
        assert len(identities) > 20, f"the model has only {len(identities)} Identity nodes"
        # The input's names, one initializer each; no Identity left.
        want = {t.name for t in m.graph.initializer} | set(identities)
        assert set(inits) == want, f"initializers differ: {sorted(set(inits) ^ want)[:6]}"
        assert not [n for n in out.graph.node if n.op_type == "Identity"], "Identity nodes left"
        assert read_names(out.graph) >= want, "an initializer no node reads"
        # Layers that shared an initializer trained apart.
        for a, b in (("bn1.bias", "layer1.0.bn1.bias"), ("bn1.weight", "layer1.1.bn2.weight"),
                     ("bn1.running_mean", "layer1.0.bn2.running_mean"),
                     ("bn1.running_var", "layer1.1.bn1.running_var")):
            assert identities.get(b) == identities.get(a, a), f"{a}, {b} were not one tensor"
            assert not np.array_equal(inits[a], inits[b]), f"{a} and {b} trained as one"


def tied_trainer():
    with tempfile.TemporaryDirectory() as tmp:
        m, out, inits = train_and_export(tmp, "tied", "--tied-initializers=keep")
        identities = {n.output[0]: n.input[0] for n in m.graph.node if n.op_type == "Identity"}
        stats = {k for k in identities if k.endswith(("running_mean", "running_var"))}
        kept = {n.output[0]: n.input[0] for n in out.graph.node if n.op_type == "Identity"}
        assert kept == {k: v for k, v in identities.items() if k not in stats}, \
            "the trainable params' Identity nodes are not the input's"
        want = {t.name for t in m.graph.initializer} | stats
        assert set(inits) == want, f"initializers differ: {sorted(set(inits) ^ want)[:6]}"
        assert not np.array_equal(inits["bn1.running_mean"], inits["layer1.0.bn2.running_mean"])


def running_variance():
    c, n = 3, 5
    x = np.random.default_rng(4).standard_normal((n, c, 2, 2)) * [[[[1.0]], [[2.0]], [[0.5]]]]
    x = x.astype(np.float32)
    rm0 = np.array([0.1, -0.2, 0.3], np.float32)
    rv0 = np.array([1.0, 2.0, 0.5], np.float32)
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "rm", "rv"], ["y"],
                              name="bn", epsilon=1e-5, momentum=0.9),
             helper.make_node("Flatten", ["y"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "w"], ["logits"], name="fc", transB=1)]
    inits = [numpy_helper.from_array(np.ones(c, np.float32), "s"),
             numpy_helper.from_array(np.zeros(c, np.float32), "b"),
             numpy_helper.from_array(rm0, "rm"), numpy_helper.from_array(rv0, "rv"),
             numpy_helper.from_array(
                 np.random.default_rng(5).uniform(-1, 1, (4, c * 4)).astype(np.float32), "w")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [n, c, 2, 2])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [n, 4])],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    m.ir_version = 8
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bn.onnx")
        onnx.save(m, path)
        ins = os.path.join(tmp, "in")
        os.makedirs(ins)
        onnx.save_tensor(numpy_helper.from_array(x), os.path.join(ins, "input_0.pb"))
        onnx.save_tensor(numpy_helper.from_array(np.arange(n, dtype=np.int64) % 4),
                         os.path.join(ins, "input_1.pb"))
        xd = x.astype(np.float64)
        mean = xd.mean(axis=(0, 2, 3))
        for rule, ddof in (("unbiased", 1), ("biased", 0)):
            dump = os.path.join(tmp, rule)
            run([LWCC, path, "--train-reference", "--inputs", ins, "--steps", "1", "--dump",
                 dump, "--precision=f64", f"--bn-running-var={rule}"])
            load = lambda f: numpy_helper.to_array(onnx.load_tensor(os.path.join(dump, f)))  # noqa
            var = xd.var(axis=(0, 2, 3), ddof=ddof)
            want_m = 0.9 * rm0.astype(np.float64) + 0.1 * mean
            want_v = 0.9 * rv0.astype(np.float64) + 0.1 * var
            got_m, got_v = load("param_rm.pb"), load("param_rv.pb")
            assert np.allclose(got_m, want_m, rtol=1e-12, atol=0), f"{rule}: mean {got_m}"
            assert np.allclose(got_v, want_v, rtol=1e-12, atol=0), \
                f"{rule}: running var {got_v}, expected {want_v}"
            other = 0.9 * rv0 + 0.1 * xd.var(axis=(0, 2, 3), ddof=1 - ddof)
            assert not np.allclose(got_v, other, rtol=1e-6), f"{rule}: the other rule's value"


def tied_by_name():
    """A GPT-2-like model: token table `wte` that a Gather and (through a
    Transpose) the logits' MatMul read, and a matrix `w` two MatMuls read
    (the file cannot tell one weight applied twice from two deduplicated).
    Plain `auto` errors with exit 1 naming `w`, its readers and the flags;
    keep:w / untie:w decide it. One float64 step of the interpreter: wte's
    gradient is the one param's, and keep:w's gradient of w equals the sum
    of untie:w's two params' gradients."""
    rng = np.random.default_rng(7)
    vocab, d, b, t = 7, 4, 2, 3
    inits = [numpy_helper.from_array((rng.standard_normal((vocab, d)) * 0.5).astype(np.float32),
                                     "wte"),
             numpy_helper.from_array((rng.standard_normal((d, d)) * 0.5).astype(np.float32), "w")]
    nodes = [helper.make_node("Gather", ["wte", "ids"], ["h"], name="embed"),
             helper.make_node("MatMul", ["h", "w"], ["h1"], name="first"),
             helper.make_node("Tanh", ["h1"], ["a1"], name="act"),
             helper.make_node("MatMul", ["a1", "w"], ["h2"], name="second"),
             helper.make_node("Transpose", ["wte"], ["wt"], name="lm_head_t", perm=[1, 0]),
             helper.make_node("MatMul", ["h2", "wt"], ["l3"], name="lm_head"),
             helper.make_node("Reshape", ["l3", "shape"], ["logits"], name="flat")]
    inits.append(numpy_helper.from_array(np.array([b * t, vocab], np.int64), "shape"))
    graph = helper.make_graph(
        nodes, "tied_by_name",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [b, t])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [b * t, vocab])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tied.onnx")
        onnx.save(model, path)
        r = harness.run([LWCC, path, "--emit=train-ir", "-o", os.devnull])
        assert r.returncode == 1, f"exit {r.returncode}: {r.stderr[-400:]}"
        for want in ("initializer 'w'", "'first' (MatMul)", "'second' (MatMul)",
                     "--tied-initializers=keep:w", "--tied-initializers=untie:w"):
            assert want in r.stderr, f"{want!r} not in: {r.stderr[-600:]}"
        assert "wte" not in r.stderr, f"the tied table was refused: {r.stderr[-600:]}"
        # A name no two nodes read: a bad input (1); a bad value: bad usage (2).
        for bad, named, rc in (("--tied-initializers=keep:nothing", "'nothing'", 1),
                               ("--tied-initializers=tie", "'tie'", 2)):
            r = harness.run([LWCC, path, bad, "--emit=train-ir", "-o", os.devnull])
            assert r.returncode == rc and named in r.stderr, \
                f"{bad}: exit {r.returncode}: {r.stderr[-400:]}"
        data = os.path.join(tmp, "in")
        os.makedirs(data)
        ids = rng.integers(0, vocab, (b, t)).astype(np.int64)
        labels = rng.integers(0, vocab, (b * t,)).astype(np.int64)
        for k, a in enumerate((ids, labels)):
            onnx.save_tensor(numpy_helper.from_array(a), os.path.join(data, f"input_{k}.pb"))
        grads = {}
        for choice in ("keep:w", "untie:w"):
            dump = os.path.join(tmp, choice.replace(":", "_"))
            run([LWCC, path, f"--tied-initializers={choice}", "--train-reference",
                 "--precision=f64", "--inputs", data, "--steps", "1", "--dump", dump])
            grads[choice] = {f[len("grad_"):-len(".pb")]: numpy_helper.to_array(
                onnx.load_tensor(os.path.join(dump, f)))
                for f in os.listdir(dump) if f.startswith("grad_")}
        keep, untie = grads["keep:w"], grads["untie:w"]
        assert sorted(keep) == ["w", "wte"], f"keep:w trains {sorted(keep)}"
        assert len(untie) == 3 and "wte" in untie and "w" in untie, \
            f"untie:w trains {sorted(untie)}"
        (copy,) = set(untie) - {"w", "wte"}
        summed = untie["w"] + untie[copy]
        err = harness.rel_error(keep["w"], summed)
        assert err < 1e-12, f"keep:w's gradient is {err:.2e} from the sum of the untied ones"
        assert harness.rel_error(keep["w"], untie["w"]) > 1e-3, "both uses' gradients are equal"
        assert harness.rel_error(keep["wte"], untie["wte"]) < 1e-12
        return f"w's kept gradient = the sum of its untied ones within {err:.1e}"


def main():
    for fn in (untied_trainer, tied_trainer, running_variance, tied_by_name):
        case(fn)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
