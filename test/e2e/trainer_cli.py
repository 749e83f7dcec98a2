#!/usr/bin/env python3
"""The compiled trainer as a user runs it, on the CPU target.

Builds the zoo LeNet (batch 32) with `lwcc --target=cpu -o trainer` and
checks, each as one test case:
  - training on a subset of Debian's Fashion-MNIST reaches at least 0.80 test
    accuracy, with a progress line on stdout and a JSONL log whose step lines
    hold step, loss, img_per_s and step_ms and whose eval lines hold epoch and
    accuracy;
  - a run killed with SIGKILL after a checkpoint and resumed ends with
    weights bit-identical to an uninterrupted run (and so does a resumed
    run on synthetic data, and one resumed with another --seed);
  - --export writes an ONNX model that onnxruntime runs, agreeing with the
    trainer's own evaluation (logits and accuracy);
  - runtime flags (--lr, --optimizer settings) change the run; a different
    optimizer family is refused; the input pipeline's threads and prefetch
    depth change nothing; --data-only times the pipeline alone;
  - --threads: runs with the same thread count are bit-identical (1 and 3
    threads, 3 being more than this 2-core machine has), and runs with
    different counts agree within 1e-4 (oneDNN's and OpenBLAS's sums round
    with the split);
  - bad input stops with a clear message and exit 1 (missing and corrupt data
    files, a checkpoint of another model, a corrupt checkpoint, a diverging
    run, which names the step, writes no checkpoint after the last finite
    step and keeps the one before), bad usage with exit 2.
Ends with the line "N passed, M failed".
"""
import glob
import gzip
import json
import os
import re
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import GEN, LWCC  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist"


def case(fn):
    harness.case(fn, timed=False)


def run(cmd, expect=0, timeout=900):
    return harness.check_output(cmd, expect=expect, timeout=timeout)


def build(tmp, name, *flags):
    model = os.path.join(tmp, name + ".onnx")
    if not os.path.exists(model):
        run([sys.executable, GEN, "lenet", "--batch", "32", "-o", model])
    exe = os.path.join(tmp, name + "-trainer")
    run([LWCC, model, "--target=cpu", "-o", exe, *flags])
    return model, exe


def read_params(folder):
    return {os.path.basename(p): open(p, "rb").read()
            for p in sorted(glob.glob(os.path.join(folder, "param_*.bin")))}


def load_idx_images(path, count):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    n, rows, cols = (int.from_bytes(data[4 + 4 * k:8 + 4 * k], "big") for k in range(3))
    pixels = np.frombuffer(data, np.uint8, offset=16).reshape(n, rows, cols)[:count]
    return ((pixels.astype(np.float32) / 255.0 - 0.2860) / 0.3530)[:, None, :, :]


def load_idx_labels(path, count):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    return np.frombuffer(data, np.uint8, offset=8)[:count].astype(np.int64)


def idx_file(stem):
    for p in (os.path.join(FASHION, stem), os.path.join(FASHION, stem + ".gz")):
        if os.path.exists(p):
            return p
    raise AssertionError(f"no {stem} under {FASHION}")


def main():
    tmp = tempfile.mkdtemp(prefix="lwcc-trainer-cli-")
    model, exe = build(tmp, "lenet")
    log = os.path.join(tmp, "train.jsonl")
    dump = os.path.join(tmp, "dump")
    exported = os.path.join(tmp, "trained.onnx")
    state = {}

    def fashion_accuracy():
        r = run([exe, f"--data=idx:{FASHION}", "--train-examples=12000", "--eval-examples=2000",
                 "--epochs=2", "--eval", f"--log={log}", "--lr=0.02", "--progress=lines",
                 f"--export={exported}", f"--dump={dump}"])
        state["stdout"] = r.stdout
        lines = [json.loads(line) for line in open(log)]
        steps = [x for x in lines if x.get("type") == "step"]
        evals = [x for x in lines if x.get("type") == "eval"]
        assert len(steps) == 750, f"{len(steps)} step lines, expected 750 (2 x 12000 / 32)"
        for key in ("step", "loss", "img_per_s", "step_ms"):
            assert all(key in x for x in steps), f"a step line lacks {key}"
        assert [x["epoch"] for x in evals] == [1, 2], f"eval lines {evals}"
        acc = evals[-1]["accuracy"]
        state["accuracy"] = acc
        print(f"  LeNet, 12000 Fashion-MNIST examples, 2 epochs: test accuracy {acc:.4f} "
              f"on 2000 t10k examples; loss {steps[0]['loss']:.4f} -> {steps[-1]['loss']:.4f}")
        assert acc >= 0.80, f"accuracy {acc} below 0.80"
        assert "epoch 2/2  step 375/375" in r.stdout, "no progress line"
        assert "img/s" in r.stdout and "ETA" in r.stdout, "progress line lacks rate or ETA"

    def export_round_trip():
        import onnxruntime as ort
        assert os.path.exists(exported), "no export (the accuracy case failed first?)"
        sess = ort.InferenceSession(exported, providers=["CPUExecutionProvider"])
        x = load_idx_images(idx_file("t10k-images-idx3-ubyte"), 2000)
        y = load_idx_labels(idx_file("t10k-labels-idx1-ubyte"), 2000)
        name = sess.get_inputs()[0].name
        logits = np.concatenate([sess.run(None, {name: x[i:i + 32]})[0]
                                 for i in range(0, 1984, 32)] +
                                [sess.run(None, {name: np.concatenate([x[1984:], x[:16]])})[0][:16]])
        ours = np.fromfile(os.path.join(dump, "eval_logits.bin"), np.float32).reshape(32, -1)
        err = float(np.max(np.abs(ours - logits[:32])) / np.max(np.abs(logits[:32])))
        acc = float(np.mean(np.argmax(logits, 1) == y))
        print(f"  onnxruntime on the export: accuracy {acc:.4f} (trainer {state['accuracy']:.4f}); "
              f"first batch's logits differ by {err:.2e} relative")
        assert err < 1e-4, f"logits differ by {err}"
        assert abs(acc - state["accuracy"]) <= 1.0 / 2000 + 1e-12, "accuracies differ"
        # The trained weights, not the initial ones.
        import onnx
        from onnx import numpy_helper
        m = onnx.load(exported)
        w = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
        for name, blob in read_params(dump).items():
            key = next((k for k in w if "param_" + "".join(
                c if c.isalnum() or c in "._-" else "_" for c in k) + ".bin" == name), None)
            if key is not None:
                assert w[key].tobytes() == blob, f"{key} in the export is not the trained value"

    def kill_and_resume():
        common = [f"--data=idx:{FASHION}", "--train-examples=6400", "--epochs=3", "--seed=7",
                  "--progress=off"]
        full = os.path.join(tmp, "full")
        run([exe, *common, f"--dump={full}"])
        ck = os.path.join(tmp, "ck")
        part = os.path.join(tmp, "resumed")
        saved = harness.kill_at_first_checkpoint(
            [exe, *common, f"--checkpoint-dir={ck}", "--checkpoint-every=50"], ck, 300)
        assert saved, "no checkpoint written before the kill"
        assert "ckpt-600.lwckpt" not in saved, "the run ended before it was killed"
        r = run([exe, *common, f"--checkpoint-dir={ck}", "--resume", f"--dump={part}"])
        assert "from step 0," not in r.stdout, "did not resume"
        a, b = read_params(full), read_params(part)
        assert a.keys() == b.keys() and a, "different params dumped"
        diff = [k for k in a if a[k] != b[k]]
        print(f"  killed (SIGKILL) with {saved[-1]} on disk; resumed to step 600: "
              f"{len(a) - len(diff)}/{len(a)} params bit-identical to the uninterrupted run")
        assert not diff, f"params differ: {diff[:3]}"

    def runtime_flags():
        base = [f"--data=idx:{FASHION}", "--train-examples=320", "--steps=10", "--progress=off",
                "--dump"]
        a, b, c = (os.path.join(tmp, d) for d in ("flags_a", "flags_b", "flags_c"))
        run([exe, *base[:-1], f"--dump={a}"])
        run([exe, *base[:-1], f"--dump={b}", "--lr=0.05", "--momentum=0.5", "--nesterov"])
        run([exe, *base[:-1], f"--dump={c}"])
        assert read_params(a) == read_params(c), "two identical runs differ"
        # The input pipeline's threads and depth decide when a batch is
        # prepared, never what it holds.
        d = os.path.join(tmp, "flags_threads")
        run([exe, *base[:-1], f"--dump={d}", "--data-threads=3", "--prefetch=5"])
        assert read_params(a) == read_params(d), "--data-threads/--prefetch changed the weights"
        r = run([exe, *base[:-1], "--data-only"])
        assert "data only: 10 batches" in r.stdout and "img/s" in r.stdout, r.stdout
        assert read_params(a) != read_params(b), "--lr/--momentum changed nothing"
        # Two streams: the CPU runs the same ops in the same order, so the
        # weights must be bit-identical to the one-stream trainer's.
        _, two = build(tmp, "lenet-streams", "--streams=2")
        d = os.path.join(tmp, "flags_streams")
        run([two, *base[:-1], f"--dump={d}"])
        assert read_params(a) == read_params(d), "--streams=2 changed the weights"
        # Weights in a side file instead of inside the trainer: the same run.
        _, sep = build(tmp, "lenet-separate", "--weights=separate")
        assert os.path.getsize(sep + ".weights") == 61706 * 4, "no side file of LeNet's weights"
        d = os.path.join(tmp, "flags_separate")
        run([sep, *base[:-1], f"--dump={d}"])
        assert read_params(a) == read_params(d), "--weights=separate changed the weights"
        r = run([exe, "--optimizer=adam"], expect=2)
        assert "compiled for sgd" in r.stderr, r.stderr
        r = run([exe, "--help"])
        assert "--checkpoint-dir" in r.stdout and "optimizer sgd" in r.stdout

    def threads():
        base = [f"--data=idx:{FASHION}", "--train-examples=640", "--steps=20", "--progress=off"]
        dumps = {}
        for n in (1, 1, 3, 3):
            d = os.path.join(tmp, f"threads_{n}_{len(dumps)}")
            r = run([exe, *base, f"--threads={n}", f"--dump={d}"])
            assert f"on CPU, {n} threads" in r.stdout, r.stdout
            dumps.setdefault(n, []).append(read_params(d))
        for n, (a, b) in dumps.items():
            assert a and a == b, f"two runs with --threads={n} differ"
        worst = 0.0
        for name, blob in dumps[1][0].items():
            x = np.frombuffer(blob, np.float32)
            y = np.frombuffer(dumps[3][0][name], np.float32)
            worst = max(worst, float(np.max(np.abs(x - y)) / max(np.max(np.abs(x)), 1e-30)))
        print(f"  20 steps: --threads=1 and --threads=3 each bit-identical run to run; "
              f"the two counts differ by {worst:.2e} relative")
        assert worst < 1e-4, f"--threads=1 and --threads=3 differ by {worst}"

    def resume_data_and_seed():
        # Synthetic batches come from a pool drawn from the seed: a run
        # stopped after 5 steps and resumed ends where an uninterrupted one does.
        full, part, ck = (os.path.join(tmp, d) for d in ("syn_full", "syn_part", "syn_ck"))
        common = ["--data=synthetic", "--synthetic-batches=4", "--seed=3", "--progress=off"]
        run([exe, *common, "--steps=10", f"--dump={full}"])
        run([exe, *common, "--steps=5", f"--checkpoint-dir={ck}"])
        r = run([exe, *common, "--steps=10", f"--checkpoint-dir={ck}", "--resume",
                 f"--dump={part}"])
        assert "from step 5," in r.stdout, "did not resume"
        a, b = read_params(full), read_params(part)
        assert a and a == b, "a resumed synthetic run differs from an uninterrupted one"
        # Resuming with another --seed keeps the checkpoint's: the training
        # set is shuffled as the run that wrote it did.
        idx = [f"--data=idx:{FASHION}", "--train-examples=640", "--progress=off"]
        full, part, ck = (os.path.join(tmp, d) for d in ("seed_full", "seed_part", "seed_ck"))
        run([exe, *idx, "--seed=5", "--steps=12", f"--dump={full}"])
        run([exe, *idx, "--seed=5", "--steps=6", f"--checkpoint-dir={ck}"])
        r = run([exe, *idx, "--seed=9", "--steps=12", f"--checkpoint-dir={ck}", "--resume",
                 f"--dump={part}"])
        assert "checkpoint's seed 5" in r.stderr, r.stderr
        assert read_params(full) == read_params(part), "resumed with another seed's shuffle"
        other = os.path.join(tmp, "syn_other")
        run([exe, *common[:-2], "--seed=4", "--progress=off", "--steps=10", f"--dump={other}"])
        assert read_params(other) != a, "--seed changed nothing"

    def adam_trainer():
        _, adam = build(tmp, "lenet-adam", "--optimizer=adamw", "--lr=0.001")
        log2 = os.path.join(tmp, "adam.jsonl")
        run([adam, f"--data=idx:{FASHION}", "--train-examples=640", "--steps=20",
             "--progress=off", f"--log={log2}", "--optimizer=adam"])
        losses = [json.loads(x)["loss"] for x in open(log2) if '"type":"step"' in x]
        assert losses[-1] < losses[0], f"adam did not lower the loss: {losses[0]} -> {losses[-1]}"

    def bad_input():
        def fails(args, text, code=1):
            r = run([exe, *args], expect=code)
            assert text in r.stderr, f"{args}: stderr lacks '{text}':\n{r.stderr}"
            return r

        fails(["--data=idx:/nonexistent"], "/nonexistent")
        bad = os.path.join(tmp, "bad_idx")
        os.makedirs(bad)
        for f in os.listdir(FASHION):
            shutil.copy(os.path.join(FASHION, f), bad)
        img = next(f for f in os.listdir(bad) if f.startswith("train-images"))
        with open(os.path.join(bad, img), "r+b") as f:
            f.truncate(1000)
        fails([f"--data=idx:{bad}"], img.split(".")[0])
        # A checkpoint of another model (a wider LeNet) and a corrupt one.
        other_model = os.path.join(tmp, "other.onnx")
        run([sys.executable, GEN, "lenet", "--batch", "32", "--width", "2", "-o", other_model])
        other = os.path.join(tmp, "other-trainer")
        run([LWCC, other_model, "--target=cpu", "-o", other])
        ck = os.path.join(tmp, "ck_other")
        run([other, "--steps=2", f"--checkpoint-dir={ck}", "--progress=off"])
        fails([f"--checkpoint-dir={ck}", "--resume", "--steps=3"], "another model")
        ckfile = glob.glob(os.path.join(ck, "*.lwckpt"))[0]
        mine = os.path.join(tmp, "ck_mine")
        run([exe, "--steps=2", f"--checkpoint-dir={mine}", "--progress=off"])
        good = glob.glob(os.path.join(mine, "*.lwckpt"))[0]
        corrupt = os.path.join(tmp, "corrupt.lwckpt")
        data = bytearray(open(good, "rb").read())
        data[len(data) // 2] ^= 0xFF
        open(corrupt, "wb").write(bytes(data))
        fails([f"--resume={corrupt}", "--steps=3"], "corrupt.lwckpt")
        assert os.path.exists(ckfile)
        # Divergence. Which step first shows it, and whether as a non-finite
        # loss or as non-finite weights at a checkpoint, depends on the
        # machine's floating-point path; the behaviour does not: exit 1, a
        # message naming the step S, no checkpoint after the last finite
        # step S-1, and the one of S-1 (if any) named as kept and resumable.
        r = fails(["--steps=40", "--lr=1e30", "--progress=off"], "not a finite number")
        assert re.search(r"\bstep \d+: the loss is (nan|inf|-inf)\b", r.stderr), r.stderr
        # A huge rate, a large one, and a step schedule whose second rate
        # overflows float (the weights turn infinite a step before the loss).
        for k, flags in enumerate([["--lr=1e30"], ["--lr=1e6"],
                                   ["--lr=0.01", "--lr-schedule=step", "--step-size=1",
                                    "--gamma=1e45"]]):
            lr = " ".join(flags)
            nan = os.path.join(tmp, f"ck_nan_{k}")
            r = run([exe, "--steps=40", f"--checkpoint-dir={nan}", "--checkpoint-every=1",
                     *flags, "--progress=off"], expect=1)
            m = (re.search(r"\bafter step (\d+) .* is not finite: no checkpoint written", r.stderr)
                 or re.search(r"\bstep (\d+): the loss is (?:nan|inf|-inf), not a finite number",
                              r.stderr))
            assert m, f"{lr}: no diverging step named:\n{r.stderr}"
            bad = int(m.group(1))
            kept = sorted(os.listdir(nan)) if os.path.isdir(nan) else []
            names = [re.fullmatch(r"ckpt-(\d+)\.lwckpt", f) for f in kept]
            assert all(names), f"{lr}: unexpected files {kept}"
            steps = sorted(int(n.group(1)) for n in names)
            print(f"  {lr}: diverged at step {bad}; checkpoints kept: {kept}")
            assert all(s < bad for s in steps), \
                f"{lr}: a checkpoint at or after the diverging step {bad}: {kept}"
            if bad == 1:
                assert not steps, kept
                continue
            assert steps and steps[-1] == bad - 1, \
                f"{lr}: the last finite step {bad - 1} has no checkpoint: {kept}"
            assert f"ckpt-{bad - 1}.lwckpt" in r.stderr and "kept" in r.stderr, r.stderr
            from_kept = run([exe, f"--checkpoint-dir={nan}", "--resume", f"--steps={bad - 1}",
                             "--progress=off"])
            assert f"from step {bad - 1}," in from_kept.stdout, from_kept.stdout
        # Bad usage.
        fails(["--epochs=x"], "--epochs", code=2)
        fails(["--frobnicate"], "unknown argument", code=2)
        fails(["--data=csv:x"], "--data", code=2)
        fails(["--checkpoint-every=5"], "--checkpoint-dir", code=2)
        fails(["--cudnn-api=fast"], "--cudnn-api", code=2)
        fails(["--tf32=half"], "--tf32 takes conv, all or off", code=2)
        fails(["--kernels=fast"], "--kernels takes cudnn or own", code=2)
        fails(["--prefetch=0"], "--prefetch", code=2)
        fails(["--data-threads=x"], "--data-threads", code=2)
        fails(["--threads=0"], "--threads", code=2)
        fails(["--threads=two"], "--threads", code=2)

    case(fashion_accuracy)
    case(export_round_trip)
    case(kill_and_resume)
    case(runtime_flags)
    case(threads)
    case(resume_data_and_seed)
    case(adam_trainer)
    case(bad_input)
    shutil.rmtree(tmp, ignore_errors=True)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
