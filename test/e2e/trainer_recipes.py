#!/usr/bin/env python3
"""The trainer's run-time recipes: --ema, --data=npy:DIR and --tensorboard=DIR.

LeNet at test size (batch 8), and an MLP regression for npy's non-image
data, as CPU trainers (`--gpus 1`, and `--gpus 2|4` for the moving average
and the regression) and as CUDA trainers on the emulated GPU. Checks,
each a test case:
  - --ema=0.9 --ema-warmup: after 4 steps the average (--dump's
    ema_param_*.bin) is the reference computed here from the params of runs
    of 0, 1, 2, 3 and 4 steps (ema += w * (p - ema) in float32, w = 1 -
    min(0.9, (1 + s) / (10 + s)) after step s from 0), within 1e-6 of each
    tensor's largest element; --ema=0.75 without warm-up likewise; the
    params themselves are those of a run without --ema, bit for bit;
  - a run checkpointed at step 2 and resumed to step 4 ends with the
    average (and the params) bit-identical to an uninterrupted run;
  - --eval --eval-ema gives other evaluation logits than --eval;
    --export-ema writes the average's params as the initializers;
  - --gpus 2 --strategy=data|model and --gpus 4 --strategy=owt trainers with
    --ema, --eval-ema and --export-ema train like `--gpus 1`
    (multi_device_trainer.py's comparison: losses, params, the evaluation
    of the average and its export) and their averages are `--gpus 1`'s
    within 1e-4; the --gpus 4 one as 2 processes under mpirun gives its
    one-process average, evaluation and export bit for bit; the CUDA
    trainers' averages on the emulated GPU are one device's (one device,
    and --gpus 2 --strategy=model, every param in two shards);
  - --data=npy:DIR reads the samples IDX files of the same images give
    (float32 arrays holding the IDX loader's normalized pixels): the same
    losses, params and evaluation logits bit for bit; uint8 (N, H, W)
    arrays with int32 labels as x.npy and y.npy give what float32 (N, 1,
    H, W) arrays of pixels / 255 with int64 labels give;
  - bad .npy files (Fortran order, float64, a shape the model does not take,
    truncated, a label out of range, no magic, a missing label file) stop
    the trainer with exit 1 and a message naming the file;
  - an MLP regression (--loss=mse, features (E, 8), float targets (E, 2) of
    a known linear function) reads --data=npy: and fits: its final eval mean
    squared error is below 1% of the targets' variance, and equals the
    exported model's error on the test split computed here; --gpus 2 data
    and model, --gpus 4 owt and the CUDA trainer on the emulated GPU take
    the one-device steps (losses 1e-5, params 1e-4), and the --gpus 2 one
    as 2 processes under mpirun the one-process steps bit for bit; a
    float64 model trains on '<f8' arrays; bad files (a target or feature
    shape, an integer target, files of different lengths, truncated, a
    missing target file) stop the trainer with exit 1 naming the file;
  - --tensorboard=DIR writes an event file that this test parses by hand
    (TFRecord framing with masked CRC-32C, Event and Summary protos): every
    record's CRCs hold, the first event is file_version brain.Event:2, and
    the scalars train/loss, train/lr, train/grad_norm per step and
    eval/accuracy, eval/top5, eval/loss are the JSONL log's values at the
    log's steps (as float32, within 2 ulp: the log prints 9 digits); and
    TensorBoard's own reader (EventAccumulator, from the tensorboard package
    that tools/setup.sh installs) finds every tag, with the same steps and
    values;
  - usage: --eval-ema without --ema, --ema=1 exit 2.
Ends with the line "N passed, M failed".

    python3 test/e2e/trainer_recipes.py [--no-emulated]
"""
import argparse
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import multi_device_trainer as md  # noqa: E402

K = 4
EMA_TOL = 1e-6


def report(ok, name, detail=""):
    md.report(ok, name, detail)


_built = {}


def build(model, flags, out_dir):
    """md.build, once per folder."""
    if out_dir not in _built:
        _built[out_dir] = md.build(model, flags, out_dir)
    return _built[out_dir]


def same_float32(got, want):
    """A float32 scalar against a logged value (9 significant digits): within 2 ulp."""
    return got is not None and want is not None and \
        abs(float(got) - float(np.float32(want))) <= 2.4e-7 * abs(float(want)) + 1e-30


def params_of(folder, prefix="param_"):
    """{param name: float32 values} of --dump's PREFIX<name>.bin files."""
    return {os.path.basename(p)[len(prefix):-len(".bin")]: np.fromfile(p, np.float32)
            for p in sorted(glob.glob(os.path.join(folder, prefix + "*.bin")))}


def raw_of(folder, prefix):
    return {os.path.basename(p)[len(prefix):]: open(p, "rb").read()
            for p in sorted(glob.glob(os.path.join(folder, prefix + "*.bin")))}


def train(exe, work, extra, devices=1):
    return md.train(exe, work, extra, devices)


def expect_ok(r, name):
    if r.returncode:
        report(False, name, (r.stdout + r.stderr)[-1500:])
        return False
    return True


def reference_ema(runs, names, decay, warmup):
    """The average of `names` after len(runs) - 1 steps from the params after 0..K steps."""
    ema = {k: runs[0][k].copy() for k in names}
    for s in range(1, len(runs)):
        d = min(decay, (1.0 + (s - 1)) / (10.0 + (s - 1))) if warmup else decay
        w = np.float32(1.0 - d)
        for k in ema:
            ema[k] = (ema[k] + w * (runs[s][k] - ema[k])).astype(np.float32)
    return ema


def worst(got, want):
    bad = []
    for k, v in want.items():
        if k not in got:
            bad.append(f"{k} missing")
            continue
        ok, err = harness.close(got[k], v, EMA_TOL)
        if not ok:
            bad.append(f"{k} off by {err}")
    return bad


# --- --ema -------------------------------------------------------------------------

def ema_cases(tmp, model, emulated):
    exe, err = build(model, [], os.path.join(tmp, "g1"))
    if not exe:
        report(False, "lenet --gpus 1: build", err)
        return
    import onnx
    from onnx import numpy_helper
    # The averaged params: the model's initializers (not the optimizer's state).
    names = sorted(t.name for t in onnx.load(model).graph.initializer)
    base = os.path.join(tmp, "ema")
    runs = []
    for j in range(K + 1):
        work = os.path.join(base, f"steps{j}")
        if not expect_ok(train(exe, work, [f"--steps={j}", "--dump=dump"]), f"{j} steps"):
            return
        runs.append(params_of(os.path.join(work, "dump")))
    for decay, warmup in ((0.9, True), (0.75, False)):
        flags = [f"--ema={decay}"] + (["--ema-warmup"] if warmup else [])
        work = os.path.join(base, f"ema{decay}")
        name = f"lenet {' '.join(flags)}"
        if not expect_ok(train(exe, work, [f"--steps={K}", "--dump=dump", *flags]), name):
            continue
        got = params_of(os.path.join(work, "dump"), "ema_param_")
        want = reference_ema(runs, names, decay, warmup)
        bad = worst(got, want)
        moved = any(not np.array_equal(got[k], runs[K][k]) for k in got)
        report(sorted(got) == names and not bad and moved,
               f"{name}: the average after {K} steps is the reference from the per-step params "
               f"within {EMA_TOL}", "; ".join(bad[:5]) or f"{len(got)} tensors, moved {moved}")
        same = raw_of(os.path.join(work, "dump"), "param_") == raw_of(
            os.path.join(base, f"steps{K}", "dump"), "param_")
        report(same, f"{name}: the params are a run's without --ema, bit for bit")

    # Resume: 2 steps with a checkpoint, then on to K.
    flags = ["--ema=0.9", "--ema-warmup"]
    straight = os.path.join(base, "ema0.9")
    work = os.path.join(base, "resumed")
    ck = os.path.join(work, "ck")
    if (expect_ok(train(exe, work, ["--steps=2", f"--checkpoint-dir={ck}", *flags]),
                  "--ema: 2 steps with a checkpoint") and
            expect_ok(train(exe, work, [f"--steps={K}", f"--checkpoint-dir={ck}", "--resume",
                                        "--dump=dump", *flags]), "--ema: resumed")):
        a = raw_of(os.path.join(work, "dump"), "ema_param_")
        b = raw_of(os.path.join(straight, "dump"), "ema_param_")
        p = raw_of(os.path.join(work, "dump"), "param_")
        q = raw_of(os.path.join(straight, "dump"), "param_")
        report(a and a == b and p == q,
               f"--ema: resumed at step 2, the average and params after {K} steps bit-identical "
               "to an uninterrupted run", f"{len(a)} vs {len(b)} tensors")

    # --eval-ema and --export-ema.
    plain = os.path.join(base, "eval")
    avg = os.path.join(base, "eval-ema")
    if (expect_ok(train(exe, plain, [f"--steps={K}", "--eval", "--dump=dump", *flags]),
                  "--eval") and
            expect_ok(train(exe, avg, [f"--steps={K}", "--eval", "--eval-ema", "--dump=dump",
                                       "--export=model.onnx", "--export-ema", *flags]),
                      "--eval-ema --export-ema")):
        a = md.read_floats(os.path.join(plain, "dump", "eval_logits.bin"))
        b = md.read_floats(os.path.join(avg, "dump", "eval_logits.bin"))
        report(a.shape == b.shape and not np.array_equal(a, b),
               "--eval-ema: the evaluation logits differ from --eval's")
        inits = {t.name: numpy_helper.to_array(t).ravel()
                 for t in onnx.load(os.path.join(avg, "model.onnx")).graph.initializer}
        ema = params_of(os.path.join(avg, "dump"), "ema_param_")
        same = [k for k in ema if k in inits and np.array_equal(inits[k], ema[k])]
        report(ema and len(same) == len(ema),
               "--export-ema: the export's initializers are the average, bit for bit",
               f"{len(same)} of {len(ema)}")

    # Several devices and the emulated GPU against one device.
    run_flags = ["--steps=5", "--eval", "--eval-ema", "--log=log.jsonl", "--dump=dump",
                 "--export=model.onnx", "--export-ema", *flags]
    ref = os.path.join(base, "g1")
    if not expect_ok(train(exe, ref, run_flags), "lenet --gpus 1 --ema"):
        return
    cases = [(2, "data"), (2, "model"), (4, "owt")]
    for gpus, strategy in cases:
        name = f"lenet --gpus {gpus} --strategy={strategy} --ema"
        mexe, err = build(model, [f"--gpus={gpus}", f"--strategy={strategy}"],
                             os.path.join(tmp, f"g{gpus}-{strategy}"))
        if not mexe:
            report(False, f"{name}: build", err)
            continue
        work = os.path.join(base, f"g{gpus}-{strategy}")
        if not expect_ok(train(mexe, work, run_flags + ["--check-replicas"], gpus), name):
            continue
        md.compare(name, ref, work)
        compare_average(name, ref, work)
        if gpus == 4:
            ema_under_mpirun(mexe, work, run_flags)
    if not emulated:
        return
    import emulated_gpu as eg
    for gpus, strategy in ((1, None), (2, "model")):
        flags = [f"--gpus={gpus}", f"--strategy={strategy}"] if strategy else []
        name = f"lenet {' '.join(flags + ['--ema'])} on the emulated GPU"
        gexe, err = eg.build_emulated(model, flags, os.path.join(tmp, f"emu{gpus}"))
        if not gexe:
            report(False, f"{name}: build", err)
            continue
        work = os.path.join(base, f"emu{gpus}")
        if expect_ok(eg.train(gexe, work, run_flags, True), name):
            compare_average(name, ref, work, md.PARAM_TOL)


def under_mpirun(exe, work, flags):
    """The trainer as 2 processes under mpirun in `work` (as root where need be)."""
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    args = ["mpirun", "--oversubscribe", "-np", "2", exe, f"--seed={md.SEED}", "--progress=off",
            "--data-threads=1", *flags]
    return subprocess.run(args, cwd=work, capture_output=True, text=True, timeout=600, env=env)


def ema_under_mpirun(exe, one, run_flags):
    """The --gpus 4 trainer as 2 processes: the average, its evaluation and its
    export bit-identical to the one-process run in `one`."""
    name = "lenet --gpus 4 --strategy=owt --ema under mpirun -np 2"
    if not shutil.which("mpirun"):
        report(False, name, "no mpirun")
        return
    work = one + "-mpi"
    r = under_mpirun(exe, work, ["--data=synthetic", md.threads(4), *run_flags,
                                 "--check-replicas"])
    if not expect_ok(r, name):
        return
    a, b = raw_of(os.path.join(one, "dump"), "ema_param_"), raw_of(os.path.join(work, "dump"),
                                                                    "ema_param_")
    same = a and a == b and all(
        open(os.path.join(one, f), "rb").read() == open(os.path.join(work, f), "rb").read()
        for f in ("dump/eval_logits.bin", "model.onnx"))
    report(same, f"{name}: the average, its evaluation and its export bit-identical to one "
           "process")


def compare_average(name, ref, work, tol=md.PARAM_TOL):
    want = params_of(os.path.join(ref, "dump"), "ema_param_")
    got = params_of(os.path.join(work, "dump"), "ema_param_")
    bad = []
    for k, v in want.items():
        ok, err = harness.close(got.get(k, np.zeros(0, np.float32)), v, tol)
        if not ok:
            bad.append(f"{k} off by {err}")
    report(want and not bad, f"{name}: {len(want)} averaged params within {tol} of one device's",
           "; ".join(bad[:5]))


# --- --data=npy:DIR ----------------------------------------------------------------

def write_idx(path, array):
    dims = array.shape
    with open(path, "wb") as f:
        f.write(struct.pack(">I", 0x800 + len(dims)))
        for d in dims:
            f.write(struct.pack(">I", d))
        f.write(array.astype(np.uint8).tobytes())


def bad_npy_files(exe, tmp, tag, good_x, good_y, cases, prefix):
    """Each case {name: (file, content, words)} writes the good pair with
    `file` replaced by `content` (None: truncated by 40 bytes, "": removed,
    bytes: written as they are), and the trainer must exit 1 with the
    file's path and `words` in its message."""
    for name, (file, content, words) in cases.items():
        d = os.path.join(tmp, f"{tag}-{name.replace(' ', '-')}")
        os.makedirs(d)
        np.save(os.path.join(d, "x_train.npy"), good_x)
        np.save(os.path.join(d, "y_train.npy"), good_y)
        path = os.path.join(d, file)
        if content is None:
            raw = open(path, "rb").read()
            open(path, "wb").write(raw[:len(raw) - 40])
        elif isinstance(content, str):
            os.remove(path)
        elif isinstance(content, bytes):
            open(path, "wb").write(content)
        else:
            np.save(path, content)
        r = train(exe, os.path.join(tmp, f"{tag}-run"), [f"--data=npy:{d}", "--steps=1"])
        report(r.returncode == 1 and path in r.stderr and words in r.stderr,
               f"{prefix} {name} ({file}): exit 1 naming the file ({words})",
               f"exit {r.returncode}: {r.stderr[-600:]}")


def npy_cases(tmp, model):
    exe, err = build(model, [], os.path.join(tmp, "g1"))
    if not exe:
        report(False, "lenet: build", err)
        return
    rng = np.random.default_rng(3)
    n_train, n_test = 48, 20
    pixels = {"train": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
              "test": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8)}
    labels = {"train": rng.integers(0, 10, n_train), "test": rng.integers(0, 10, n_test)}
    idx = os.path.join(tmp, "idx")
    npy = os.path.join(tmp, "npy")
    os.makedirs(idx)
    os.makedirs(npy)
    for split, stem in (("train", "train"), ("test", "t10k")):
        write_idx(os.path.join(idx, f"{stem}-images-idx3-ubyte"), pixels[split])
        write_idx(os.path.join(idx, f"{stem}-labels-idx1-ubyte"), labels[split])
        # The IDX loader's normalization, in float32 as it computes it.
        x = (pixels[split].astype(np.float32) / np.float32(255) - np.float32(0.2860)) / \
            np.float32(0.3530)
        np.save(os.path.join(npy, f"x_{split}.npy"), x[:, None, :, :].astype(np.float32))
        np.save(os.path.join(npy, f"y_{split}.npy"), labels[split].astype(np.int64))
    flags = ["--steps=8", "--eval", "--log=log.jsonl", "--dump=dump"]
    a, b = os.path.join(tmp, "run-idx"), os.path.join(tmp, "run-npy")
    if (expect_ok(train(exe, a, [f"--data=idx:{idx}", *flags]), "--data=idx") and
            expect_ok(train(exe, b, [f"--data=npy:{npy}", *flags]), "--data=npy")):
        same = (md.losses(os.path.join(a, "log.jsonl")) == md.losses(os.path.join(b, "log.jsonl"))
                and raw_of(os.path.join(a, "dump"), "param_") ==
                raw_of(os.path.join(b, "dump"), "param_") and
                open(os.path.join(a, "dump", "eval_logits.bin"), "rb").read() ==
                open(os.path.join(b, "dump", "eval_logits.bin"), "rb").read())
        evals = [json.loads(line) for line in open(os.path.join(b, "log.jsonl"))
                 if '"type":"eval"' in line]
        report(same and evals, "--data=npy: float32 arrays train and evaluate as the IDX files of "
               "the same images (losses, params, eval logits bit for bit)")

    # uint8 (N, H, W) + int32 as x.npy / y.npy against float32 (N, 1, H, W) / 255 + int64.
    u8, f32 = os.path.join(tmp, "npy-u8"), os.path.join(tmp, "npy-f32")
    os.makedirs(u8)
    os.makedirs(f32)
    np.save(os.path.join(u8, "x.npy"), pixels["train"])
    np.save(os.path.join(u8, "y.npy"), labels["train"].astype(np.int32))
    np.save(os.path.join(f32, "x_train.npy"),
            (pixels["train"].astype(np.float32) / np.float32(255))[:, None])
    np.save(os.path.join(f32, "y_train.npy"), labels["train"].astype(np.int64))
    a, b = os.path.join(tmp, "run-u8"), os.path.join(tmp, "run-f32")
    flags = ["--steps=6", "--log=log.jsonl", "--dump=dump"]
    if (expect_ok(train(exe, a, [f"--data=npy:{u8}", *flags]), "--data=npy uint8") and
            expect_ok(train(exe, b, [f"--data=npy:{f32}", *flags]), "--data=npy float32")):
        same = (md.losses(os.path.join(a, "log.jsonl")) == md.losses(os.path.join(b, "log.jsonl"))
                and raw_of(os.path.join(a, "dump"), "param_") ==
                raw_of(os.path.join(b, "dump"), "param_"))
        report(same, "--data=npy: uint8 (N, H, W) x.npy with int32 y.npy trains as float32 "
               "(N, 1, H, W) pixels / 255 with int64 labels, bit for bit")

    # Bad files: exit 1, the file named.
    good_x = (pixels["train"].astype(np.float32) / 255)[:, None]
    good_y = labels["train"].astype(np.int64)
    bad_cases = {
        "fortran": ("x_train.npy", np.asfortranarray(good_x), "Fortran"),
        "float64": ("x_train.npy", good_x.astype(np.float64), "'<f8'"),
        "shape": ("x_train.npy", good_x[:, :, :20, :], "shape"),
        "truncated": ("x_train.npy", None, "bytes"),
        "label": ("y_train.npy", np.where(np.arange(n_train) == 5, 10, good_y), "label 10"),
        "magic": ("y_train.npy", b"not a numpy file at all", "magic"),
        "missing": ("y_train.npy", "", "cannot open"),
    }
    bad_npy_files(exe, tmp, "bad", good_x, good_y, bad_cases, "--data=npy:")


# --- --data=npy:DIR for a regression (--loss=mse) ---------------------------------

FEATURES, HIDDEN, TARGETS, REG_BATCH = 8, 32, 2, 16
REG_FLAGS = ["--loss=mse", "--optimizer=adam", "--lr=0.01"]


def mlp_model(path, dtype=np.float32):
    """An MLP x [16, 8] -> Gemm 32 -> Relu -> Gemm 2 -> y, He-initialized (seed 5)."""
    import onnx
    from onnx import helper, numpy_helper, TensorProto
    rng = np.random.default_rng(5)
    w1 = rng.standard_normal((HIDDEN, FEATURES)) * np.sqrt(2 / FEATURES)
    w2 = rng.standard_normal((TARGETS, HIDDEN)) * np.sqrt(1 / HIDDEN)
    inits = [numpy_helper.from_array(a.astype(dtype), n) for a, n in
             ((w1, "fc1_w"), (np.zeros(HIDDEN), "fc1_b"), (w2, "fc2_w"),
              (np.zeros(TARGETS), "fc2_b"))]
    nodes = [helper.make_node("Gemm", ["x", "fc1_w", "fc1_b"], ["h"], transB=1, name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "fc2_w", "fc2_b"], ["y"], transB=1, name="fc2")]
    t = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", t, [REG_BATCH, FEATURES])],
                          [helper.make_tensor_value_info("y", t, [REG_BATCH, TARGETS])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def regression_data(folder, dtype=np.float32, train=1024, test=256):
    """x ~ N(0, 1) [E, 8] and y = x A + c [E, 2] (A, c fixed by seed 7): a fit an
    MLP can reach. Returns the test split (x, y)."""
    rng = np.random.default_rng(7)
    a, c = rng.standard_normal((FEATURES, TARGETS)), rng.standard_normal(TARGETS)
    os.makedirs(folder, exist_ok=True)
    out = None
    for split, count in (("train", train), ("test", test)):
        x = rng.standard_normal((count, FEATURES))
        y = x @ a + c
        np.save(os.path.join(folder, f"x_{split}.npy"), x.astype(dtype))
        np.save(os.path.join(folder, f"y_{split}.npy"), y.astype(dtype))
        out = (x.astype(dtype), y.astype(dtype))
    return out


def mlp_forward(onnx_path, x):
    """The exported MLP on x, in float64."""
    import onnx
    from onnx import numpy_helper
    w = {i.name: numpy_helper.to_array(i).astype(np.float64)
         for i in onnx.load(onnx_path).graph.initializer}
    h = np.maximum(x.astype(np.float64) @ w["fc1_w"].T + w["fc1_b"], 0)
    return h @ w["fc2_w"].T + w["fc2_b"]


def evals_of(log):
    return [json.loads(line) for line in open(log) if '"type":"eval"' in line]


def regression_cases(tmp, emulated):
    model = os.path.join(tmp, "mlp.onnx")
    mlp_model(model)
    data = os.path.join(tmp, "reg-data")
    x_test, y_test = regression_data(data)
    exe, err = build(model, REG_FLAGS, os.path.join(tmp, "reg-g1"))
    if not exe:
        report(False, "mlp --loss=mse: build", err)
        return
    name = "--data=npy: an MLP regression (--loss=mse)"
    one = os.path.join(tmp, "reg-run")
    r = train(exe, one, [f"--data=npy:{data}", "--epochs=12", "--eval", "--log=log.jsonl",
                         "--export=model.onnx"])
    if expect_ok(r, name):
        evals = evals_of(os.path.join(one, "log.jsonl"))
        variance = float(np.var(y_test))
        final = evals[-1].get("loss") if evals else None
        report(len(evals) == 12 and final is not None and final < 0.01 * variance and
               all("accuracy" not in e for e in evals),
               f"{name}: fits y = xA + c, the final eval mse below 1% of the targets' variance",
               f"evals {len(evals)}, final {final}, variance {variance}")
        want = float(np.mean((mlp_forward(os.path.join(one, "model.onnx"), x_test) -
                              y_test.astype(np.float64)) ** 2))
        report(final is not None and abs(final - want) <= 1e-4 * want,
               f"{name}: the eval loss is the exported model's mean squared error on the test "
               "split", f"logged {final}, numpy {want}")
        report("data: npy: 1024 training examples" in r.stdout and "256 test examples" in r.stdout,
               f"{name}: the trainer names its files and counts", r.stdout[:600])

    # Several devices and processes: the one-device steps.
    steps = ["--steps=8", "--log=log.jsonl", "--dump=dump"]
    base = os.path.join(tmp, "reg-steps")
    if not expect_ok(train(exe, base, [f"--data=npy:{data}", *steps]), f"{name}: 8 steps"):
        return
    want_losses = md.losses(os.path.join(base, "log.jsonl"))
    want_params = params_of(os.path.join(base, "dump"))
    for gpus, strategy in ((2, "data"), (2, "model"), (4, "owt")):
        case = f"{name} --gpus {gpus} --strategy={strategy}"
        mexe, err = build(model, [*REG_FLAGS, f"--gpus={gpus}", f"--strategy={strategy}"],
                          os.path.join(tmp, f"reg-g{gpus}-{strategy}"))
        if not mexe:
            report(False, f"{case}: build", err)
            continue
        work = os.path.join(tmp, f"reg-steps-g{gpus}-{strategy}")
        if not expect_ok(train(mexe, work, [f"--data=npy:{data}", *steps], gpus), case):
            continue
        got = md.losses(os.path.join(work, "log.jsonl"))
        ok = harness.losses_within(got, want_losses, 1e-5)
        params = params_of(os.path.join(work, "dump"))
        bad = [k for k, v in want_params.items()
               if not harness.close(params.get(k, np.zeros(0, np.float32)), v, 1e-4)[0]]
        report(ok and not bad and len(got) == 8,
               f"{case}: the one-device losses (1e-5) and params (1e-4)",
               f"losses {got} vs {want_losses}; params {bad[:4]}")
        if gpus == 2 and strategy == "data":
            regression_under_mpirun(mexe, work, data, steps, case)
    if emulated:
        import emulated_gpu as eg
        case = f"{name} on the emulated GPU"
        gexe, err = eg.build_emulated(model, REG_FLAGS, os.path.join(tmp, "reg-emu"))
        work = os.path.join(tmp, "reg-steps-emu")
        if not gexe:
            report(False, f"{case}: build", err)
        elif expect_ok(eg.train(gexe, work, [f"--data=npy:{data}", *steps], True), case):
            got = md.losses(os.path.join(work, "log.jsonl"))
            params = params_of(os.path.join(work, "dump"))
            bad = [k for k, v in want_params.items()
                   if not harness.close(params.get(k, np.zeros(0, np.float32)), v, 1e-4)[0]]
            report(harness.losses_within(got, want_losses, 1e-5) and not bad and len(got) == 8,
                   f"{case}: the CPU trainer's losses (1e-5) and params (1e-4)",
                   f"losses {got} vs {want_losses}; params {bad[:4]}")

    # A float64 model takes float64 arrays, and names the file of float32 ones.
    model64 = os.path.join(tmp, "mlp64.onnx")
    mlp_model(model64, np.float64)
    data64 = os.path.join(tmp, "reg-data64")
    regression_data(data64, np.float64)
    exe64, err = build(model64, REG_FLAGS, os.path.join(tmp, "reg-f64"))
    if not exe64:
        report(False, "mlp float64 --loss=mse: build", err)
    else:
        work = os.path.join(tmp, "reg-f64-run")
        if expect_ok(train(exe64, work, [f"--data=npy:{data64}", "--epochs=4", "--eval",
                                         "--log=log.jsonl"]), f"{name}: float64"):
            evals = evals_of(os.path.join(work, "log.jsonl"))
            report(len(evals) == 4 and evals[-1]["loss"] < evals[0]["loss"],
                   f"{name}: a float64 model trains on '<f8' arrays",
                   str([e.get("loss") for e in evals]))
        r = train(exe64, work, [f"--data=npy:{data}", "--steps=1"])
        report(r.returncode == 1 and os.path.join(data, "x_train.npy") in r.stderr and
               "'<f4'" in r.stderr and "float64" in r.stderr,
               f"{name}: float32 arrays for a float64 model: exit 1 naming the file",
               f"exit {r.returncode}: {r.stderr[-400:]}")

    # Bad files: exit 1, the file named.
    rng = np.random.default_rng(11)
    good_x = rng.standard_normal((64, FEATURES)).astype(np.float32)
    good_y = rng.standard_normal((64, TARGETS)).astype(np.float32)
    bad_cases = {
        "target shape": ("y_train.npy", good_y[:, :1], "shape"),
        "target dtype": ("y_train.npy", good_y.astype(np.int64), "'<i8'"),
        "feature shape": ("x_train.npy", good_x.reshape(64, 2, 4)[:, :, :3], "shape"),
        "lengths": ("y_train.npy", good_y[:60], "examples"),
        "truncated": ("x_train.npy", None, "bytes"),
        "missing": ("y_train.npy", "", "cannot open"),
    }
    bad_npy_files(exe, tmp, "reg-bad", good_x, good_y, bad_cases, f"{name}:")


def regression_under_mpirun(exe, one, data, steps, case):
    """The --gpus 2 trainer as 2 processes, each reading its device's rows:
    the one-process losses and params bit for bit."""
    name = f"{case} under mpirun -np 2"
    if not shutil.which("mpirun"):
        report(False, name, "no mpirun")
        return
    work = one + "-mpi"
    r = under_mpirun(exe, work, [f"--data=npy:{data}", md.threads(2), *steps])
    if not expect_ok(r, name):
        return
    same = (md.losses(os.path.join(one, "log.jsonl")) == md.losses(os.path.join(work, "log.jsonl"))
            and raw_of(os.path.join(one, "dump"), "param_") ==
            raw_of(os.path.join(work, "dump"), "param_"))
    report(same, f"{name}: the one-process losses and params bit for bit")


# --- --tensorboard=DIR -------------------------------------------------------------

def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_varint(buf, at):
    v, shift = 0, 0
    while True:
        b = buf[at]
        at += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, at


def fields(buf):
    """(field, wire type, value) of a protobuf message."""
    at, out = 0, []
    while at < len(buf):
        key, at = read_varint(buf, at)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, at = read_varint(buf, at)
        elif wire == 1:
            v, at = buf[at:at + 8], at + 8
        elif wire == 5:
            v, at = buf[at:at + 4], at + 4
        elif wire == 2:
            n, at = read_varint(buf, at)
            v, at = buf[at:at + n], at + n
        else:
            raise ValueError(f"wire type {wire}")
        out.append((field, wire, v))
    return out


def read_events(path):
    """[(step, file_version or None, {tag: value})], checking every CRC."""
    data = open(path, "rb").read()
    at, events = 0, []
    while at < len(data):
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        body = data[at + 12:at + 12 + length]
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        if masked(header) != length_crc or masked(body) != body_crc:
            raise AssertionError(f"bad CRC in the record at byte {at}")
        at += 16 + length
        step, version, scalars = 0, None, {}
        for field, wire, v in fields(body):
            if field == 2 and wire == 0:
                step = v
            elif field == 3 and wire == 2:
                version = v.decode()
            elif field == 5 and wire == 2:
                for f, _, value in fields(v):
                    if f != 1:
                        continue
                    tag, number = None, None
                    for vf, vw, vv in fields(value):
                        if vf == 1 and vw == 2:
                            tag = vv.decode()
                        elif vf == 2 and vw == 5:
                            (number,) = struct.unpack("<f", vv)
                    scalars[tag] = number
        events.append((step, version, scalars))
    return events


def tensorboard_cases(tmp, model):
    exe, err = build(model, ["--clip-grad-norm=1.0"], os.path.join(tmp, "clip"))
    if not exe:
        report(False, "lenet --clip-grad-norm: build", err)
        return
    work = os.path.join(tmp, "tb")
    r = train(exe, work, ["--steps=6", "--synthetic-batches=3", "--eval", "--log=log.jsonl",
                          "--tensorboard=tb", "--lr-schedule=cosine"])
    if not expect_ok(r, "--tensorboard"):
        return
    files = glob.glob(os.path.join(work, "tb", "events.out.tfevents.*"))
    if len(files) != 1:
        report(False, "--tensorboard: one event file", f"{files}")
        return
    try:
        events = read_events(files[0])
    except Exception as e:  # noqa: BLE001 - a malformed file fails the case
        report(False, "--tensorboard: the records' CRC-32C hold", str(e))
        return
    report(True, "--tensorboard: every record's masked CRC-32C holds")
    report(events and events[0][1] == "brain.Event:2",
           "--tensorboard: the first event is file_version brain.Event:2", f"{events[:1]}")
    log = [json.loads(line) for line in open(os.path.join(work, "log.jsonl"))]
    steps = {x["step"]: x for x in log if x["type"] == "step"}
    evals = {x["step"]: x for x in log if x["type"] == "eval"}
    tb_steps = {s: v for s, _, v in events[1:] if "train/loss" in v}
    tb_evals = {s: v for s, _, v in events[1:] if "eval/accuracy" in v}
    bad = []
    # (the log's records by step, the events' values by step, (event tag,
    # log key) pairs, how a mismatch names the step)
    for logged, tb, tags, at in (
            (steps, tb_steps, (("train/loss", "loss"), ("train/lr", "lr"),
                               ("train/grad_norm", "grad_norm")), "step"),
            (evals, tb_evals, (("eval/accuracy", "accuracy"), ("eval/top5", "top5"),
                               ("eval/loss", "loss")), "eval at")):
        for s, x in logged.items():
            v = tb.get(s, {})
            for tag, key in tags:
                if not same_float32(v.get(tag), x.get(key)):
                    bad.append(f"{at} {s} {tag}: {v.get(tag)} vs {x.get(key)}")
    report(len(tb_steps) == len(steps) == 6 and len(tb_evals) == len(evals) >= 2 and not bad,
           "--tensorboard: train/loss, train/lr, train/grad_norm and eval/accuracy, top5, loss "
           "are the JSONL log's values at its steps",
           "; ".join(bad[:5]) or f"{len(tb_steps)} step and {len(tb_evals)} eval events")
    tensorboard_reader_case(os.path.join(work, "tb"), steps, evals)


def tensorboard_reader_case(logdir, steps, evals):
    """TensorBoard's own reader (the `tensorboard` package, test tooling) on the
    trainer's event file: every tag, with the JSONL log's steps and values."""
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError as e:
        report(False, "--tensorboard: TensorBoard's EventAccumulator reads the file",
               f"the tensorboard package is not installed (tools/setup.sh installs it): {e}")
        return
    acc = event_accumulator.EventAccumulator(logdir, size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags().get("scalars", []))
    want = {"train/loss", "train/lr", "train/grad_norm", "train/img_per_s", "eval/accuracy",
            "eval/top5", "eval/loss"}
    bad = [f"missing tag {t}" for t in sorted(want - tags)]
    for tag, key, log in (("train/loss", "loss", steps), ("train/lr", "lr", steps),
                          ("train/grad_norm", "grad_norm", steps),
                          ("eval/accuracy", "accuracy", evals), ("eval/top5", "top5", evals),
                          ("eval/loss", "loss", evals)):
        if tag not in tags:
            continue
        read = {e.step: e.value for e in acc.Scalars(tag)}
        if sorted(read) != sorted(log):
            bad.append(f"{tag}: steps {sorted(read)} vs the log's {sorted(log)}")
            continue
        bad += [f"{tag} at {s}: {read[s]} vs {x[key]}" for s, x in log.items()
                if not same_float32(read[s], x[key])]
    report(not bad and len(steps) == 6,
           "--tensorboard: TensorBoard's EventAccumulator reads every tag, at the JSONL log's "
           "steps with its values", "; ".join(bad[:5]) or f"{sorted(tags)}")


def usage_cases(tmp, model):
    exe, _ = build(model, [], os.path.join(tmp, "g1"))
    if not exe:
        return
    for flags, what in ((["--eval-ema"], "--eval-ema without --ema"), (["--ema=1"], "--ema=1"),
                        (["--ema=0.9", "--eval-ema"], "--eval-ema without --eval")):
        r = train(exe, os.path.join(tmp, "usage"), flags + ["--steps=1"])
        report(r.returncode == 2, f"usage: {what} exits 2", f"exit {r.returncode}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-emulated", action="store_true",
                    help="leave out the CUDA trainer on the emulated GPU")
    ap.add_argument("--cases", default="ema,npy,regression,tensorboard,usage",
                    help="comma-separated: ema, npy, regression, tensorboard, usage")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="lwcc-trainer-recipes-")
    try:
        model = os.path.join(tmp, "lenet.onnx")
        r = harness.run([sys.executable, harness.GEN, "lenet", "--test-size", "--batch", "8", "-o", model])
        if r.returncode:
            report(False, "lenet: generate", r.stderr[-500:])
        else:
            cases = args.cases.split(",")
            if "usage" in cases:
                usage_cases(tmp, model)
            if "tensorboard" in cases:
                tensorboard_cases(tmp, model)
            if "npy" in cases:
                npy_cases(tmp, model)
            if "regression" in cases:
                regression_cases(tmp, not args.no_emulated)
            if "ema" in cases:
                ema_cases(tmp, model, not args.no_emulated)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
