#!/usr/bin/env python3
"""--data=tokens:PATH: llm.c's token shards train a causal language model.

A tiny causal LM written here with the `onnx` package (input_ids int64
[8, 8] -> Gather of a token embedding [16, 16] + a position embedding ->
Reshape [64, 16] -> LayerNormalization -> MatMul + Add -> Relu -> Gemm ->
logits [64, 16]) is built as a CPU trainer with lwcc's softmax
cross-entropy (--loss=softmax-xent, the default: it appends an int64 [64]
label input, the next token of each of the 64 positions). The shards hold a
learnable sequence: a fixed permutation of the 16 tokens, repeated; one
training shard of uint16 tokens (version 1), one of uint32 (version 2), and
a validation shard. Checks, each a test case:
  - the shards train it: the loss falls below a tenth of the first step's,
    every evaluation logs a loss and its perplexity (exp of the loss, no
    accuracy), and the trainer names the shards and counts the windows;
  - the evaluation's loss is the exported model's mean cross-entropy over
    every next token of the validation windows, computed here in numpy;
  - the same windows written as npy arrays (x_train.npy and y_train.npy:
    (windows, 8) int64 each, the labels' [64] input reading 8 per window)
    train bit for bit as the shards do: the same losses, params and
    evaluation;
  - the model with its loss in the graph (LogSoftmax and a one-hot of the
    labels, lwcc --loss=none) against a second input 'labels' [8, 8] takes
    the softmax cross-entropy model's steps (losses 1e-4), and --eval
    without a label input exits 1 saying why;
  - a run killed once its checkpoint of step 75 (inside the second epoch)
    is on disk and resumed from it ends bit-identical to an uninterrupted
    run: its losses from step 76 on, every dumped file and the export;
  - --gpus 2 --strategy=data takes one device's steps (losses 1e-5, params
    1e-4) and, as 2 processes under mpirun, its one-process steps bit for
    bit; the CUDA trainer on the emulated GPU takes the CPU trainer's steps
    (losses 1e-5, params 1e-4);
  - a malformed shard among good ones (a bad magic, an unsupported version,
    a file shorter than its header, one shorter than its token count, bytes
    after its tokens, a token outside the model's 16 classes), a glob that
    matches nothing and a validation shard with a bad magic stop the trainer
    with exit 1 and a message naming the file (and the offset); --eval
    without validation shards to find exits 1; --eval-data without
    --data=tokens: exits 2.
Ends with the line "N passed, M failed".

    python3 test/e2e/token_data.py [--no-mpirun] [--no-emulated]
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import multi_device_trainer as md  # noqa: E402

B, T, V, D, H = 8, 8, 16, 16, 32
FLAGS = ["--optimizer=adam", "--lr=0.01"]
MAGIC = 20240520
report = harness.record


def lm_model(path):
    """The tiny causal LM (weights seeded), logits [B * T, V]."""
    import onnx
    from onnx import helper, numpy_helper, TensorProto
    rng = np.random.default_rng(3)
    arrays = {"wte": rng.standard_normal((V, D)) * 0.5, "wpe": rng.standard_normal((T, D)) * 0.1,
              "ln_g": np.ones(D), "ln_b": np.zeros(D),
              "w1": rng.standard_normal((D, H)) * np.sqrt(2 / D), "b1": np.zeros(H),
              "w2": rng.standard_normal((H, V)) * np.sqrt(1 / H), "b2": np.zeros(V)}
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in arrays.items()]
    inits.append(numpy_helper.from_array(np.array([B * T, D], np.int64), "flat"))
    nodes = [helper.make_node("Gather", ["wte", "input_ids"], ["tok"], axis=0),
             helper.make_node("Add", ["tok", "wpe"], ["x"]),
             helper.make_node("Reshape", ["x", "flat"], ["x2"]),
             helper.make_node("LayerNormalization", ["x2", "ln_g", "ln_b"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "w1"], ["h0"]),
             helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h"]),
             helper.make_node("Gemm", ["h", "w2", "b2"], ["logits"])]
    g = helper.make_graph(
        nodes, "tiny_lm", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [B, T])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B * T, V])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)


def lm_in_graph_loss(path, base):
    """The LM of `base` with its mean cross-entropy in the graph, against a
    second input labels int64 [B, T] (LogSoftmax, a one-hot of Equal and
    Cast, Mul, ReduceSum, Neg, ReduceMean): lwcc's --loss=none."""
    import onnx
    from onnx import helper, numpy_helper, TensorProto
    m = onnx.load(base)
    g = m.graph
    g.input.append(helper.make_tensor_value_info("labels", TensorProto.INT64, [B, T]))
    g.initializer.extend([numpy_helper.from_array(np.array([B * T, 1], np.int64), "column"),
                          numpy_helper.from_array(np.arange(V, dtype=np.int64)[None], "vocab"),
                          numpy_helper.from_array(np.array([1], np.int64), "axis1")])
    g.node.extend([helper.make_node("LogSoftmax", ["logits"], ["lp"], axis=-1),
                   helper.make_node("Reshape", ["labels", "column"], ["lab"]),
                   helper.make_node("Equal", ["lab", "vocab"], ["hot"]),
                   helper.make_node("Cast", ["hot"], ["onehot"], to=TensorProto.FLOAT),
                   helper.make_node("Mul", ["lp", "onehot"], ["picked"]),
                   helper.make_node("ReduceSum", ["picked", "axis1"], ["per"], keepdims=0),
                   helper.make_node("Neg", ["per"], ["nll"]),
                   helper.make_node("ReduceMean", ["nll"], ["loss"], keepdims=0)])
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    onnx.checker.check_model(m)
    onnx.save(m, path)


def lm_losses(onnx_path, ids, labels):
    """The exported model's cross-entropy of every position, in float64."""
    import onnx
    from onnx import numpy_helper
    w = {i.name: numpy_helper.to_array(i).astype(np.float64)
         for i in onnx.load(onnx_path).graph.initializer}
    x = (w["wte"][ids] + w["wpe"]).reshape(-1, D)
    n = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    n = n * w["ln_g"] + w["ln_b"]
    logits = np.maximum(n @ w["w1"] + w["b1"], 0) @ w["w2"] + w["b2"]
    top = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - top).sum(-1)) + top[:, 0]
    return lse - logits[np.arange(len(logits)), labels.reshape(-1)]


def write_shard(path, tokens, version=1, magic=MAGIC, count=None, cut=0, extra=b""):
    """An llm.c shard: 256 int32 of header, then the tokens (uint16 for version
    1, uint32 for 2); `count` overrides the header's count, `cut` drops bytes
    from the end, `extra` is appended."""
    header = np.zeros(256, np.int32)
    header[:3] = [magic, version, len(tokens) if count is None else count]
    body = np.asarray(tokens, np.uint16 if version == 1 else np.uint32).tobytes()
    data = header.tobytes() + body + extra
    with open(path, "wb") as f:
        f.write(data[:len(data) - cut])


def sequence(n, start=0):
    """n tokens of the learnable sequence: a fixed permutation of the vocabulary, repeated."""
    perm = np.random.default_rng(1).permutation(V)
    return np.tile(perm, (start + n) // V + 1)[start:start + n]


def windows(tokens):
    """A shard's windows as the loader cuts them: (ids, next tokens), each (W, T)."""
    count = (len(tokens) - 1) // T
    ids = np.stack([tokens[T * w:T * w + T] for w in range(count)])
    nxt = np.stack([tokens[T * w + 1:T * w + T + 1] for w in range(count)])
    return ids.astype(np.int64), nxt.astype(np.int64)


def write_data(folder):
    """Two training shards (uint16, uint32) and a validation shard: {name: tokens}."""
    os.makedirs(folder, exist_ok=True)
    shards = {"tiny_train_000001.bin": (sequence(1601), 1),
              "tiny_train_000002.bin": (sequence(1601, 5), 2),
              "tiny_val_000000.bin": (sequence(401, 3), 1)}
    for name, (tokens, version) in shards.items():
        write_shard(os.path.join(folder, name), tokens, version)
    return {name: tokens for name, (tokens, _) in shards.items()}


def train(exe, work, extra, devices=1):
    return md.train(exe, work, extra, devices)


def expect_ok(r, name):
    if r.returncode:
        report(False, name, (r.stdout + r.stderr)[-1500:])
        return False
    return True


def evals_of(log):
    return [json.loads(line) for line in open(log) if '"type":"eval"' in line]


def raw_of(folder):
    return {f: open(os.path.join(folder, f), "rb").read() for f in sorted(os.listdir(folder))}


def training_cases(exe, tmp, data, tokens):
    name = "--data=tokens: a causal LM"
    pattern = os.path.join(data, "tiny_train_*.bin")
    work = os.path.join(tmp, "fit")
    r = train(exe, work, [f"--data=tokens:{pattern}", "--epochs=3", "--eval", "--log=log.jsonl",
                          "--progress=lines"])
    if expect_ok(r, name):
        losses = harness.log_losses(os.path.join(work, "log.jsonl"))
        evals = evals_of(os.path.join(work, "log.jsonl"))
        report(len(losses) == 150 and losses[-1] < 0.1 * losses[0],
               f"{name}: the loss of the repeating sequence falls below a tenth of the first "
               "step's", f"first {losses[:1]}, last {losses[-1:]} of {len(losses)}")
        report(len(evals) == 3 and all("accuracy" not in e and "top5" not in e and
                                       abs(e["perplexity"] - np.exp(e["loss"])) <=
                                       1e-6 * e["perplexity"] for e in evals) and
               evals[-1]["perplexity"] < 1.5,
               f"{name}: every evaluation logs the loss per token and its perplexity, exp(loss)",
               str(evals))
        report(f"tokens: 400 training windows of 9 tokens ({pattern}: 2 shard(s), 3202 tokens), "
               f"50 validation windows ({os.path.join(data, 'tiny_val_*.bin')})" in r.stdout and
               "eval  epoch 3  loss " in r.stdout and "perplexity 1.0" in r.stdout,
               f"{name}: the trainer names the shards and counts the windows", r.stdout[:700])

    # The evaluation against numpy on the exported model, early in training.
    work = os.path.join(tmp, "eval")
    r = train(exe, work, [f"--data=tokens:{pattern}", "--steps=12", "--eval", "--log=log.jsonl",
                          "--export=model.onnx"])
    if expect_ok(r, f"{name}: 12 steps"):
        logged = evals_of(os.path.join(work, "log.jsonl"))[-1]["loss"]
        ids, nxt = windows(tokens["tiny_val_000000.bin"])
        want = float(np.mean(lm_losses(os.path.join(work, "model.onnx"), ids, nxt)))
        report(abs(logged - want) <= 1e-4 * want,
               f"{name}: the evaluation's loss is the exported model's mean cross-entropy over "
               "the validation windows' next tokens", f"logged {logged}, numpy {want}")


def npy_case(exe, tmp, data, tokens):
    """The shards' windows as npy arrays train bit for bit as the shards."""
    name = "--data=tokens: against the same windows as npy arrays"
    npy = os.path.join(tmp, "npy")
    os.makedirs(npy)
    parts = [windows(tokens[f"tiny_train_00000{k}.bin"]) for k in (1, 2)]
    np.save(os.path.join(npy, "x_train.npy"), np.concatenate([p[0] for p in parts]))
    np.save(os.path.join(npy, "y_train.npy"), np.concatenate([p[1] for p in parts]))
    ids, nxt = windows(tokens["tiny_val_000000.bin"])
    np.save(os.path.join(npy, "x_test.npy"), ids)
    np.save(os.path.join(npy, "y_test.npy"), nxt)
    run = ["--steps=60", "--eval", "--log=log.jsonl", "--dump=dump"]
    a, b = os.path.join(tmp, "run-tokens"), os.path.join(tmp, "run-npy")
    pattern = os.path.join(data, "tiny_train_*.bin")
    if not (expect_ok(train(exe, a, [f"--data=tokens:{pattern}", *run]), name + ": tokens") and
            expect_ok(train(exe, b, [f"--data=npy:{npy}", *run]), name + ": npy")):
        return
    la, lb = (harness.log_losses(os.path.join(w, "log.jsonl")) for w in (a, b))
    ea, eb = (evals_of(os.path.join(w, "log.jsonl")) for w in (a, b))
    dumps = raw_of(os.path.join(a, "dump")), raw_of(os.path.join(b, "dump"))
    report(len(la) == 60 and la == lb and ea == eb and dumps[0] == dumps[1],
           f"{name} (x_train.npy, y_train.npy (windows, {T}) int64): the same losses, params "
           "and evaluation bit for bit", f"losses {la[:3]} vs {lb[:3]}; evals {ea} vs {eb}")


def resume_case(exe, tmp, data):
    name = "--data=tokens: killed at step 75 (inside epoch 2) and resumed"
    flags = [f"--data=tokens:{os.path.join(data, 'tiny_train_*.bin')}"]
    base = os.path.join(tmp, "resume")
    full = train(exe, os.path.join(base, "full"),
                 [*flags, "--steps=120", "--log=log.jsonl", "--dump=dump", "--export=model.onnx"])
    kept = md.kill_after_checkpoint(exe, os.path.join(base, "killed"), 75, 1,
                                    [md.threads(1), *flags])
    if not kept:
        report(False, name, "no step-75 checkpoint before the run ended")
        return
    resumed = train(exe, os.path.join(base, "resumed"),
                    [*flags, "--steps=120", f"--resume={kept}", "--log=log.jsonl", "--dump=dump",
                     "--export=model.onnx"])
    if not (expect_ok(full, name + ": uninterrupted") and expect_ok(resumed, name)):
        return
    a, b = os.path.join(base, "full"), os.path.join(base, "resumed")
    want, got = (harness.log_losses(os.path.join(w, "log.jsonl")) for w in (a, b))
    files = sorted(os.listdir(os.path.join(a, "dump")))
    differ = harness.files_differ(os.path.join(a, "dump"), os.path.join(b, "dump"), files)
    differ += harness.files_differ(a, b, ["model.onnx"])
    report(len(want) == 120 and got == want[75:] and files and not differ,
           f"{name}: bit-identical to an uninterrupted run (losses of steps 76-120, "
           f"{len(files)} dumped files and the export)",
           f"losses {got[:3]} vs {want[75:78]} ({len(got)}); differ {differ[:5]}")


def multi_device_case(model, single, tmp, data, mpirun, emulated):
    """single: the one-device trainer."""
    name = "--data=tokens: --gpus 2 --strategy=data"
    exe, err = md.build(model, [*FLAGS, "--gpus=2", "--strategy=data"], os.path.join(tmp, "g2"))
    if not exe:
        report(False, f"{name}: build", err)
        return
    run = [f"--data=tokens:{os.path.join(data, 'tiny_train_*.bin')}", "--steps=20",
           "--log=log.jsonl", "--dump=dump"]
    one, two = os.path.join(tmp, "g1-steps"), os.path.join(tmp, "g2-steps")
    if not (expect_ok(train(single, one, run), f"{name}: one device") and
            expect_ok(train(exe, two, run, 2), name)):
        return
    want, got = (harness.log_losses(os.path.join(w, "log.jsonl")) for w in (one, two))
    params = [{n: np.frombuffer(v, np.float32) for n, v in raw_of(os.path.join(w, "dump")).items()
               if n.startswith("param_")} for w in (one, two)]
    bad = [n for n, v in params[0].items()
           if not harness.close(params[1].get(n, np.zeros(0, np.float32)), v, 1e-4)[0]]
    report(len(got) == 20 and harness.losses_within(got, want, 1e-5) and params[0] and not bad,
           f"{name}: one device's losses (1e-5) and params (1e-4)",
           f"losses {got[:3]} vs {want[:3]}; params {bad[:4]}")
    if emulated:
        emulated_case(model, tmp, run, want, params[0])
    else:
        harness.skip("--data=tokens: the CUDA trainer on the emulated GPU", "--no-emulated")
    if not mpirun:
        harness.skip(f"{name} under mpirun -np 2", "--no-mpirun")
        return
    if not shutil.which("mpirun"):
        report(False, f"{name} under mpirun -np 2", "no mpirun")
        return
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    work = two + "-mpi"
    os.makedirs(work)
    r = harness.run(["mpirun", "--oversubscribe", "-np", "2", exe, f"--seed={md.SEED}",
                     "--progress=off", "--data-threads=1", md.threads(2), *run], cwd=work, env=env)
    if expect_ok(r, f"{name} under mpirun -np 2"):
        report(harness.log_losses(os.path.join(work, "log.jsonl")) == got and
               raw_of(os.path.join(work, "dump")) == raw_of(os.path.join(two, "dump")),
               f"{name} under mpirun -np 2: the one-process losses and dumps bit for bit")


def in_graph_loss_case(model, single, tmp, data):
    """A model computing its loss in the graph from a second input 'labels'
    [B, T] takes the same steps as the softmax cross-entropy one."""
    name = "--data=tokens: labels as a second input [B, T] (a loss in the graph, --loss=none)"
    path = os.path.join(tmp, "lm_none.onnx")
    lm_in_graph_loss(path, model)
    exe, err = md.build(path, ["--loss=none", *FLAGS], os.path.join(tmp, "none"))
    if not exe:
        report(False, f"{name}: build", err)
        return
    run = [f"--data=tokens:{os.path.join(data, 'tiny_train_*.bin')}", "--steps=30",
           "--log=log.jsonl"]
    a, b = os.path.join(tmp, "xent-steps"), os.path.join(tmp, "none-steps")
    if not (expect_ok(train(single, a, run), f"{name}: softmax-xent") and
            expect_ok(train(exe, b, run), name)):
        return
    want, got = (harness.log_losses(os.path.join(w, "log.jsonl")) for w in (a, b))
    report(len(got) == 30 and harness.losses_within(got, want, 1e-4) and got[-1] < 0.1 * got[0],
           f"{name}: the appended softmax cross-entropy's losses (1e-4), falling",
           f"losses {got[:3]}..{got[-1:]} vs {want[:3]}..{want[-1:]}")
    r = train(exe, b, [*run, "--eval"])
    report(r.returncode == 1 and "--eval: the model has no single label" in r.stderr,
           f"{name}: --eval without the label input exits 1 saying why",
           f"exit {r.returncode}: {r.stderr[-400:]}")


def emulated_case(model, tmp, run, want, want_params):
    """The CUDA trainer on the emulated GPU takes the CPU trainer's steps."""
    import emulated_gpu as eg
    name = "--data=tokens: the CUDA trainer on the emulated GPU"
    exe, err = eg.build_emulated(model, FLAGS, os.path.join(tmp, "emu"))
    if not exe:
        report(False, f"{name}: build", err)
        return
    work = os.path.join(tmp, "emu-steps")
    if not expect_ok(eg.train(exe, work, run, True), name):
        return
    got = harness.log_losses(os.path.join(work, "log.jsonl"))
    params = {n: np.frombuffer(v, np.float32) for n, v in raw_of(os.path.join(work, "dump")).items()
              if n.startswith("param_")}
    bad = [n for n, v in want_params.items()
           if not harness.close(params.get(n, np.zeros(0, np.float32)), v, 1e-4)[0]]
    report(len(got) == 20 and harness.losses_within(got, want, 1e-5) and not bad,
           f"{name}: the CPU trainer's losses (1e-5) and params (1e-4)",
           f"losses {got[:3]} vs {want[:3]}; params {bad[:4]}")


def bad_shard_cases(exe, tmp, tokens):
    """Each malformed shard beside a good one: exit 1, the file and the words."""
    good = tokens["tiny_train_000001.bin"]
    bad_tokens = good.copy()
    bad_tokens[100] = V
    cases = {  # name: (write_shard's arguments, words)
        "bad magic": ({"tokens": good, "magic": 20240519}, "magic 20240519 at offset 0"),
        "version 3": ({"tokens": good, "version": 3}, "version 3 at offset 4"),
        "shorter than its header": ({"tokens": [], "cut": 1000},
                                    "24 bytes, shorter than a token shard's 1024-byte header"),
        "shorter than its count": ({"tokens": good, "count": 2000},
                                   "truncated: the header says 2000 tokens (offset 8)"),
        "bytes after its tokens": ({"tokens": good, "extra": b"\0\0"},
                                   "2 bytes after its 1601 tokens, from offset 4226"),
        "a token outside the vocabulary": (
            {"tokens": bad_tokens},
            f"token {V} (token 100, at offset 1224) is not below the vocabulary size {V}"),
    }
    for name, (args, words) in cases.items():
        folder = os.path.join(tmp, "bad-" + name.replace(" ", "-"))
        os.makedirs(folder)
        write_shard(os.path.join(folder, "x_train_1.bin"), good)
        bad = os.path.join(folder, "x_train_2.bin")
        args = dict(args)
        write_shard(bad, args.pop("tokens"), **args)
        r = train(exe, os.path.join(tmp, "bad-run"),
                  [f"--data=tokens:{os.path.join(folder, 'x_train_*.bin')}", "--steps=1"])
        report(r.returncode == 1 and f"{bad}: {words}" in r.stderr,
               f"malformed shard, {name}: exit 1 naming the file ({words})",
               f"exit {r.returncode}: {r.stderr[-600:]}")
    nothing = os.path.join(tmp, "none_*.bin")
    r = train(exe, os.path.join(tmp, "bad-run"), [f"--data=tokens:{nothing}", "--steps=1"])
    report(r.returncode == 1 and f"{nothing}: no file matches" in r.stderr,
           "a glob that matches no shard: exit 1 naming it", f"exit {r.returncode}: {r.stderr}")
    # The validation shards: a bad one, none derivable, --eval-data without tokens.
    folder = os.path.join(tmp, "bad-val")
    os.makedirs(folder)
    write_shard(os.path.join(folder, "x_train.bin"), good)
    write_shard(os.path.join(folder, "x_val.bin"), good, magic=7)
    write_shard(os.path.join(folder, "plain.bin"), good)
    r = train(exe, os.path.join(tmp, "bad-run"),
              [f"--data=tokens:{os.path.join(folder, 'x_train.bin')}", "--steps=1", "--eval"])
    report(r.returncode == 1 and f"{os.path.join(folder, 'x_val.bin')}: magic 7" in r.stderr,
           "a malformed validation shard: exit 1 naming the file",
           f"exit {r.returncode}: {r.stderr[-600:]}")
    r = train(exe, os.path.join(tmp, "bad-run"),
              [f"--data=tokens:{os.path.join(folder, 'plain.bin')}", "--steps=1", "--eval"])
    report(r.returncode == 1 and "needs --eval-data=tokens:PATH" in r.stderr,
           "--eval of shards without 'train' in their name and no --eval-data: exit 1",
           f"exit {r.returncode}: {r.stderr[-600:]}")
    r = train(exe, os.path.join(tmp, "bad-run"),
              [f"--data=tokens:{os.path.join(folder, 'plain.bin')}", "--steps=1", "--eval",
               f"--eval-data=tokens:{os.path.join(folder, 'x_train.bin')}"])
    report(r.returncode == 0, "--eval-data=tokens:PATH names the validation shards",
           f"exit {r.returncode}: {r.stderr[-600:]}")
    r = train(exe, os.path.join(tmp, "bad-run"),
              [f"--eval-data=tokens:{os.path.join(folder, 'x_train.bin')}", "--steps=1"])
    report(r.returncode == 2 and "--eval-data applies to --data=tokens:PATH" in r.stderr,
           "usage: --eval-data without --data=tokens: exits 2", f"exit {r.returncode}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-mpirun", action="store_true",
                    help="leave out the --gpus 2 trainer as 2 processes")
    ap.add_argument("--no-emulated", action="store_true",
                    help="leave out the CUDA trainer on the emulated GPU")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="lwcc-token-data-")
    try:
        model = os.path.join(tmp, "lm.onnx")
        lm_model(model)
        data = os.path.join(tmp, "shards")
        tokens = write_data(data)
        exe, err = md.build(model, FLAGS, os.path.join(tmp, "g1"))
        if not exe:
            report(False, "tiny causal LM: build", err)
        else:
            training_cases(exe, tmp, data, tokens)
            npy_case(exe, tmp, data, tokens)
            resume_case(exe, tmp, data)
            in_graph_loss_case(model, exe, tmp, data)
            multi_device_case(model, exe, tmp, data, not args.no_mpirun, not args.no_emulated)
            bad_shard_cases(exe, tmp, tokens)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
