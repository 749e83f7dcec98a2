#!/usr/bin/env python3
"""CUDA trainers on the emulated CUDA device against the CPU backend's trainers.

The emulated device (runtime/emu) runs lwcc's unchanged CUDA runtime and the
generated trainer.cu, compiled with the host compiler, on emulated GPUs: an
emulated CUDA runtime (streams as threads, events, graphs), kernels with a
block's threads as fibers, and cuBLAS, cuDNN (legacy API; the graph API
offers no engine, so convolutions take the runtime's documented fallback)
and NCCL computed from the libraries' documented semantics.

Each case builds the same model as a CUDA trainer for the emulated device
and as a CPU trainer, trains both 3 steps with the same seed on synthetic
data (--no-tf32: strict float32 on the CUDA side), evaluates and exports,
and compares (multi_device_trainer.compare): the losses within 1e-5
relative, every param within 1e-4 of its largest element, the evaluation
logits, and the export in onnxruntime. Cases:
  - every zoo model at test size on one GPU, float32;
  - bf16 and fp16 mixed precision (within their rounding: 2e-2);
  - --gpus 2 data, --gpus 4 layerwise and model, a --gpus 4 1F1B pipeline,
    ZeRO-1 (--shard=zero1: resnet18 on 2 GPUs, lenet with AdamW on 4),
    FSDP (--shard=fsdp: resnet18 on 2 GPUs) and ZeRO-2 (lenet with AdamW
    on 4),
    resnet18's gradient buckets issued between its sync batch norm's
    all-reduces (20 KB buckets: each device runs its NCCL calls in one
    order),
    --streams=4 on one GPU, --kernels=own, CUDA graphs off, cuDNN's legacy
    API asked for, algorithms chosen by timing (--cudnn-benchmark), the
    training recipes (label smoothing, frozen layers, parameter groups,
    gradient clipping) on one and two GPUs;
  - the autotune cache (alexnet): a second run and a resume take the first
    run's timed choices and end bit-identical to it; stale and malformed
    cache lines;
  - kill-and-resume on the emulated device: a run killed after its step-3
    checkpoint and resumed ends bit-identical to an uninterrupted one;
  - a max pooling whose windows hold their maximum twice routes the
    gradient as the CPU trainer does (to the first maximum);
  - a model of the ops the model sweep added (CumSum, Tile, Sin, Cos, Mod
    at run time on floats, ReduceL2, ReduceSumSquare) trains as on the CPU;
  - the trainer says on its first line that it runs on an emulated GPU;
  - convolutions with uneven pads on a GPU spec the plan fills: lwcc counts
    their padded copies, the trainer's algorithms take no more workspace
    than the plan left, and the emulated GPU holds no more than the spec.
Ends with the line "N passed, M failed".

    python3 test/e2e/emulated_gpu.py [--cases lenet,...] [--jobs 2]
"""
import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import multi_device_trainer as md  # noqa: E402
from harness import LWCC, PREFIX  # noqa: E402

STEPS = 3
SEED = 5
LOW_TOL = 2e-2  # bf16 and fp16: a value may land on the neighbouring 16-bit number
# Models whose float32 step at test size is too ill-conditioned for two
# summation orders to agree to 1e-5: inception_v3 (batch norms over 1x1 and
# 3x3 maps of 8 samples) puts the CPU trainer's own first-step gradients 5e-3
# from the float64 step. Both trainers are compared with the float64 step of
# the interpreter instead: one step, the emulated GPU no further from it than
# twice the CPU trainer's distance (or 1e-4).
ILL_CONDITIONED = {"inception_v3"}


def build_emulated(onnx_path, flags, out_dir, via_lwcc=False):
    """The CUDA trainer of onnx_path for the emulated device; (path or None, error).
    From `lwcc --emit=source`, compiled at -O0 as multi_device_trainer builds
    its CPU trainers (the kernels are in the runtime library, built once), or
    by `lwcc --emulate-gpu -o` as a user does."""
    exe = os.path.join(out_dir, "trainer")
    os.makedirs(out_dir, exist_ok=True)
    if via_lwcc:
        r = harness.run([LWCC, onnx_path, "--emulate-gpu", *flags, "-o", exe])
        return (exe, "") if r.returncode == 0 else (None, r.stderr[-1500:])
    r = harness.run([LWCC, onnx_path, "--target=cuda", *flags, "--emit=source", "-o", out_dir])
    if r.returncode:
        return None, r.stderr[-1500:]
    r = harness.build_emulated_trainer(out_dir, timeout=600)
    return (exe, "") if r.returncode == 0 else (None, r.stderr[-1500:])


def train(exe, work, extra, cuda, env=None):
    os.makedirs(work, exist_ok=True)
    args = [exe, "--data=synthetic", f"--seed={SEED}", "--progress=off", "--data-threads=1",
            *extra]
    if cuda:
        args.append("--no-tf32")
    else:
        args.append("--threads=2")
    return harness.run(args, cwd=work, env=None if env is None else {**os.environ, **env})


def peak_bytes(exe, work, extra):
    """Each emulated GPU's most bytes held at once while the trainer ran
    (the emulator's LWEMU_MEMORY_PEAKS), transients included; (run, {gpu:
    bytes})."""
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "peaks.txt")
    r = train(exe, work, extra, True, {"LWEMU_MEMORY_PEAKS": path})
    peaks = {}
    if r.returncode == 0 and os.path.exists(path):
        with open(path) as f:
            for line in f:
                d, b = line.split()
                peaks[int(d)] = int(b)
    return r, peaks


def run_args(steps=STEPS):
    return [f"--steps={steps}", "--eval", "--log=log.jsonl", "--dump=dump",
            "--export=model.onnx"]


# The training recipes: label smoothing, frozen layers, parameter groups, clipping.
RECIPES = ["--label-smoothing=0.1", "--freeze=conv1.*", "--no-decay=bias,norm",
           "--param-group=fc3.*:lr=0.5,wd=0.002", "--clip-grad-norm=0.5"]


# (name, model, lwcc flags, trainer flags of the emulated run, tolerance scale).
def cases(models):
    out = []
    for m in models:
        out.append((f"{m}", m, [], [], "f64" if m in ILL_CONDITIONED else 1))
    out += [
        ("lenet bf16", "lenet", ["--mixed-precision=bf16"], [], "low"),
        ("resnet18 bf16", "resnet18", ["--mixed-precision=bf16"], [], "low"),
        ("lenet fp16", "lenet", ["--mixed-precision=fp16"], [], "low"),
        ("lenet --gpus 2 data", "lenet", ["--gpus=2", "--strategy=data"], [], 1),
        ("resnet18 --gpus 2 data", "resnet18", ["--gpus=2", "--strategy=data"], [], 1),
        ("resnet18 --gpus 2 data, 20 KB buckets", "resnet18",
         ["--gpus=2", "--strategy=data", "--bucket-bytes=20000"], [], 1),
        ("resnet18 --gpus 2 data --shard=zero1", "resnet18",
         ["--gpus=2", "--strategy=data", "--shard=zero1"], [], 1),
        ("lenet --gpus 4 adamw --shard=zero1", "lenet",
         ["--gpus=4", "--strategy=data", "--shard=zero1", "--optimizer=adamw"], [], 1),
        ("resnet18 --gpus 2 data --shard=fsdp", "resnet18",
         ["--gpus=2", "--strategy=data", "--shard=fsdp"], [], 1),
        ("lenet --gpus 4 adamw --shard=zero2", "lenet",
         ["--gpus=4", "--strategy=data", "--shard=zero2", "--optimizer=adamw"], [], 1),
        ("lenet --gpus 4 layerwise", "lenet", ["--gpus=4", "--strategy=layerwise"], [], 1),
        ("alexnet --gpus 4 model", "alexnet", ["--gpus=4", "--strategy=model"], [], 1),
        ("lenet --gpus 4 1f1b pipeline", "lenet",
         ["--gpus=4", "--strategy=pipeline", "--microbatches=4", "--schedule=1f1b"], [], 1),
        ("inception --streams=4 on one GPU", "inception", ["--streams=4", "--stream-policy=all"],
         [], 1),
        ("lenet --streams=2 on one GPU", "lenet", ["--streams=2"], [], 1),
        ("lenet --gpus 2 --streams=2", "lenet", ["--gpus=2", "--strategy=data", "--streams=2"],
         [], 1),
        ("resnet18 --gpus 2 --streams=3", "resnet18",
         ["--gpus=2", "--strategy=data", "--streams=3", "--stream-policy=all"], [], 1),
        ("alexnet --cudnn-benchmark", "alexnet", [], ["--cudnn-benchmark"], 1),
        ("lenet recipes", "lenet", RECIPES, [], 1),
        ("lenet recipes --gpus 2 model", "lenet", [*RECIPES, "--gpus=2", "--strategy=model"], [],
         1),
        ("resnet18 --kernels=own", "resnet18", [], ["--kernels=own"], 1),
        ("resnet18 --no-cuda-graph", "resnet18", [], ["--no-cuda-graph"], 1),
        ("alexnet --cudnn-api=legacy", "alexnet", [], ["--cudnn-api=legacy"], 1),
        ("lenet adamw", "lenet", ["--optimizer=adamw"], [], 1),
        # The moving average leaves the trained params as they are.
        ("lenet --ema", "lenet", [], ["--ema=0.9"], 1),
        # Profiled steps run op by op, timed, outside the CUDA graph, and
        # train as the others do.
        ("alexnet --profile --profile-ops --trace", "alexnet", [],
         ["--profile=2", "--profile-ops=ops.json", "--trace=trace.json"], 1),
    ]
    return [c for c in out if c[1] in models]


def read_pb(path):
    from onnx import TensorProto, numpy_helper
    t = TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def against_float64(name, onnx_path, cuda, cpu, base):
    """One step of both trainers on one raw batch against the interpreter's float64 step."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    model = onnx.load(onnx_path)
    data = os.path.join(base, "raw")
    harness.write_batch(model, data, 11, raw=True)
    ref = os.path.join(base, "f64")
    r = harness.run([LWCC, onnx_path, "--train-reference", "--inputs", data, "--steps", "1",
                     "--dump", ref, "--precision=f64"])
    runs = {}
    for label, exe, cu in (("emulated GPU", cuda, True), ("CPU", cpu, False)):
        out = os.path.join(base, "f64-" + label.split()[0])
        rr = train(exe, out, ["--steps=1", f"--data=raw:{data}", "--dump=dump"], cu)
        if rr.returncode:
            r = rr
        runs[label] = os.path.join(out, "dump")
    if r.returncode:
        harness.record(False, f"{name}: one step against float64", (r.stdout + r.stderr)[-1500:])
        return
    worst = {label: 0.0 for label in runs}
    init = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in model.graph.initializer}
    for f in sorted(os.listdir(ref)):
        if not f.startswith("grad_"):
            continue
        p = f[len("grad_"):-len(".pb")]
        # SGD's first momentum is the gradient plus the weight decay's term.
        want = read_pb(os.path.join(ref, f)).astype(np.float64).ravel()
        scale = max(1e-3, float(np.max(np.abs(want))))
        for label, dump in runs.items():
            have = np.fromfile(os.path.join(dump, f"param_opt.momentum.{p}.bin"), np.float32)
            decayed = want + 5e-4 * init[p].ravel() if p in init else want
            if have.shape != decayed.shape:  # no decay on this param
                continue
            err = min(float(np.max(np.abs(have - decayed))), float(np.max(np.abs(have - want))))
            worst[label] = max(worst[label], err / scale)
    cpu_err, emu_err = worst["CPU"], worst["emulated GPU"]
    harness.record(emu_err <= max(2 * cpu_err, 1e-4),
                   f"{name}: first-step gradients from the float64 step: emulated GPU "
                   f"{emu_err:.2e}, CPU trainer {cpu_err:.2e} (at most twice)", "")


def memory_case(name, onnx_path, flags, work):
    """The CUDA trainer's report of each GPU's memory after training: its
    planned part is lwcc's plan for the logical devices on it, and the
    emulated GPU's measure (cudaMemGetInfo: what its cudaMalloc calls hold)
    is that, the trainer's other buffers (each device's rows of the batch,
    half of it)
    and the libraries': per stream a 32 MiB cuBLAS workspace, a cuDNN handle
    (8 MiB) and a cuBLAS handle (2 MiB: the runtime sizes cuBLAS's default
    workspace pool, 64 MiB on an H100, to nothing), 42 MiB as the GPU device
    specs count them, and the convolutions' workspaces (under 8 MiB here)."""
    import numpy as np
    import onnx
    records = md.memory_records(work)
    plan = md.planned_memory(onnx_path, ["--batch=8", *flags])
    # Each device's rows of the batch: half of the 8 images and labels
    # (data parallelism on 2), each packed at a 256-byte aligned offset.
    dims = [d.dim_value for d in onnx.load(onnx_path).graph.input[0].type.tensor_type.shape.dim]
    rows = (4 * 4 * int(np.prod(dims[1:])) + 255) // 256 * 256 + 256
    bad, extra = [], []
    for r in records:
        planned = r["arena_bytes"] + r["state_bytes"]
        want = sum((plan or {}).get(d, 0) for d in r["devices"])
        if planned != want:
            bad.append(f"devices {r['devices']}: planned {planned}, lwcc's plan {want}")
        if r["other_bytes"] != rows * len(r["devices"]):
            bad.append(f"devices {r['devices']}: other buffers {r['other_bytes']} bytes, not "
                       f"their {rows} bytes of the batch's rows each")
        libraries = r["measured_bytes"] - planned - r["other_bytes"]
        streams = 2 * len(r["devices"])  # backward on 0, gradient reduce-scatters on 1
        if not streams * (42 << 20) <= libraries < streams * (42 << 20) + (8 << 20):
            bad.append(f"devices {r['devices']}: {libraries} bytes beyond the planned and other")
        extra.append(f"GPU {r['physical']}: {r['measured_bytes']} bytes, of which libraries "
                     f"{libraries}")
    harness.record(records and plan and not bad,
                   f"{name}: each GPU's memory after training: lwcc's plan, the batch and the "
                   "libraries' workspaces", "; ".join(bad) or str(records), "; ".join(extra))


def compare(name, ref, got, tol):
    if tol == "low":
        saved = md.LOSS_TOL, md.PARAM_TOL, md.STEPS
        md.LOSS_TOL = md.PARAM_TOL = LOW_TOL
        md.STEPS = 1
        try:
            md.compare(name, ref, got)
        finally:
            md.LOSS_TOL, md.PARAM_TOL, md.STEPS = saved
    else:
        md.compare(name, ref, got)


def resume_case(exe, base, label):
    md.resumed_bit_identical(
        f"{label}: killed after step 3 on the emulated GPU, resumed, bit-identical at step 6",
        exe, base, 1, lambda work, args: train(exe, work, args, True), ["--no-tf32"])


def autotune_cache(exe, base):
    """--autotune=cache on the emulated GPU (its default there is off: its
    timings measure the host): the first run times each convolution
    configuration and writes the cache file; a second run reads every
    choice, times none and ends bit-identical; a run resumed from the first
    one's checkpoint with the file gone takes the checkpoint's choices and
    ends bit-identical too; a choice the library does not offer is timed
    again and replaced; a malformed line is an error naming the file and
    line; without the flag nothing is timed or written."""
    import re
    cache = os.path.join(base, "autotune.tsv")

    def run(label, args, env=None):
        work = os.path.join(base, label)
        r = train(exe, work, ["--steps=4", "--dump=dump", "--profile=1", *args], True, env)
        notes = re.search(r"autotune cache \S+: (\d+) choices read, (\d+) timed", r.stdout)
        return r, work, (int(notes.group(1)), int(notes.group(2))) if notes else None

    def lines(path):
        with open(path) as f:
            return [line for line in f.read().splitlines() if line and line[0] != "#"]

    name = "alexnet --autotune=cache on the emulated GPU"
    first, fw, counts = run("first", [f"--autotune-cache={cache}", "--autotune=cache",
                                      "--checkpoint-dir=ck", "--checkpoint-every=2"])
    if first.returncode or not os.path.exists(cache):
        harness.record(False, f"{name}: the first run writes the cache",
                       (first.stdout + first.stderr)[-1500:])
        return
    n = len(lines(cache))
    harness.record(n >= 9 and counts == (0, n) and f"autotune: {n} choices" in first.stdout,
                   f"{name}: the first run times every configuration and keeps each choice",
                   first.stdout[-800:], f"{n} lines, (read, timed) {counts}")
    dumped = sorted(os.listdir(os.path.join(fw, "dump")))

    def same_bits(label, r, work, want, what):
        differ = harness.files_differ(os.path.join(fw, "dump"), os.path.join(work, "dump"),
                                      dumped) if r.returncode == 0 else ["(failed)"]
        harness.record(r.returncode == 0 and want and not differ, f"{name}: {what}",
                       (r.stdout + r.stderr)[-1500:], f"(read, timed) {want}; differ: {differ[:3]}")

    again, aw, counts = run("again", [f"--autotune-cache={cache}"],
                            {"LWCC_AUTOTUNE_CACHE": cache})
    # the emulated GPU's default is off; --autotune-cache alone does not turn it on
    harness.record(again.returncode == 0 and counts is None and
                   "cuDNN's heuristics (--autotune=off)" in again.stdout,
                   f"{name}: the emulated GPU's default is cuDNN's heuristics", again.stdout[-800:])
    again, aw, counts = run("again", [f"--autotune-cache={cache}", "--autotune=cache"])
    same_bits("again", again, aw, counts == (n, 0),
              "a second run reads every choice, times none, and is bit-identical")
    os.rename(cache, cache + ".first")
    resumed, rw, counts = run("resumed", [f"--autotune-cache={cache}", "--autotune=cache",
                                          f"--resume={os.path.join(fw, 'ck', 'ckpt-2.lwckpt')}"])
    same_bits("resumed", resumed, rw, counts == (n, 0) and not os.path.exists(cache),
              "a resume with the cache gone takes the checkpoint's choices, bit-identical")
    os.rename(cache + ".first", cache)
    kept = lines(cache)
    device, config, _ = kept[0].split("\t")
    with open(cache, "w") as f:
        f.write("\n".join([f"{device}\t{config}\tlegacy algo=99 math=0", *kept[1:]]) + "\n")
    stale, _, counts = run("stale", [f"--autotune-cache={cache}", "--autotune=cache"])
    redone = [line for line in lines(cache) if line.split("\t")[1] == config]
    harness.record(stale.returncode == 0 and counts == (n - 1, 1) and len(redone) == 1 and
                   "algo=99" not in redone[0],
                   f"{name}: a choice the library does not offer is timed again and replaced",
                   (stale.stdout + stale.stderr)[-1500:], f"(read, timed) {counts}; {redone}")
    with open(cache, "a") as f:
        f.write("not a choice\n")
    bad, _, _ = run("bad", [f"--autotune-cache={cache}", "--autotune=cache"])
    harness.record(bad.returncode == 1 and f"{cache}:{n + 2}:" in bad.stderr,
                   f"{name}: a malformed line is an error naming the file and line",
                   bad.stderr[-800:])
    wrong, _, _ = run("wrong", ["--autotune=fastest"])
    harness.record(wrong.returncode == 2 and "--autotune takes cache, timed or off" in wrong.stderr,
                   f"{name}: an unknown --autotune mode is a usage error", wrong.stderr[-500:])


def profiled_files(name, work):
    """--trace wrote a Chrome trace of the profiled steps' ops and
    --profile-ops their measured seconds."""
    import json
    try:
        with open(os.path.join(work, "trace.json")) as f:
            trace = json.load(f)
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        ops = [e for e in events if e.get("ph") == "X"]
        with open(os.path.join(work, "ops.json")) as f:
            measured = json.load(f)
        ok, info = len(ops) >= 10 and bool(measured), f"{len(ops)} timed ops in the trace"
    except (OSError, ValueError, KeyError, TypeError) as e:
        ok, info = False, str(e)
    harness.record(ok, f"{name}: the trace and the per-op seconds written", info)


def save_model(base, name, nodes, x_shape, inits, opset=17):
    """A model of `nodes` from input x (float32 `x_shape`) to y [batch, 3],
    saved as base/NAME.onnx at IR version 8 (which the export keeps and
    onnxruntime reads); its path."""
    import onnx
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [x_shape[0], 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path = os.path.join(base, name + ".onnx")
    onnx.save(model, path)
    return path


def model_case(name, path, work, flags=(), extra=(), tol=1, via_lwcc=True):
    """The CUDA trainer of the model at `path` (lwcc `flags`) on the emulated
    GPU, run with `extra`, against the CPU trainer: compare's checks, after
    one step for a 16-bit tolerance ("low"), else STEPS."""
    cuda, cerr = build_emulated(path, list(flags), os.path.join(work, "emu"), via_lwcc=via_lwcc)
    cpu, perr = md.build(path, list(flags), os.path.join(work, "cpu"), via_lwcc=via_lwcc)
    if not cuda or not cpu:
        harness.record(False, f"{name}: build", cerr or perr)
        return
    steps = 1 if tol == "low" else STEPS
    rc = train(cuda, os.path.join(work, "emu-run"), [*run_args(steps), *extra], True)
    rp = train(cpu, os.path.join(work, "cpu-run"), run_args(steps), False)
    if rc.returncode or rp.returncode:
        harness.record(False, f"{name}: train", (rc.stderr + rp.stderr)[-1500:])
        return
    compare(f"{name}: emulated CUDA trainer vs CPU trainer", os.path.join(work, "cpu-run"),
            os.path.join(work, "emu-run"), tol)


def tied_max_pool(tmp):
    """A max pooling whose windows hold their maximum several times (a
    constant input times constant weights): the gradient goes to the first
    maximum of each window on both backends, as PyTorch routes it."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    base = os.path.join(tmp, "tied-max-pool")
    os.makedirs(os.path.join(base, "raw"), exist_ok=True)
    n, c, hw = 2, 2, 4
    inits = [numpy_helper.from_array(np.full((1, c, hw, hw), 0.5, np.float32), "w"),
             numpy_helper.from_array(np.random.default_rng(0).standard_normal(
                 (3, c * 4)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"], name="scale"),
             helper.make_node("MaxPool", ["m"], ["p"], kernel_shape=[2, 2], strides=[2, 2],
                              name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "w2"], ["y"], transB=1, name="fc")]
    graph = helper.make_graph(
        nodes, "tied", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, 3])], inits)
    path = os.path.join(base, "tied.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    np.ones((n, c, hw, hw), np.float32).tofile(os.path.join(base, "raw", "input_0.bin"))
    np.array([0, 1], np.int64).tofile(os.path.join(base, "raw", "input_1.bin"))
    cuda, cerr = build_emulated(path, [], os.path.join(base, "emu"), via_lwcc=True)
    cpu, perr = md.build(path, [], os.path.join(base, "cpu"), via_lwcc=True)
    name = "max pooling with tied maxima: the same gradient on the emulated GPU as on the CPU"
    if not cuda or not cpu:
        harness.record(False, name, cerr or perr)
        return
    raw = "--data=raw:" + os.path.join(base, "raw")
    rc = train(cuda, os.path.join(base, "emu-run"), ["--steps=1", raw, "--dump=dump"], True)
    rp = train(cpu, os.path.join(base, "cpu-run"), ["--steps=1", raw, "--dump=dump"], False)
    if rc.returncode or rp.returncode:
        harness.record(False, name, (rc.stderr + rp.stderr)[-1500:])
        return
    got = np.fromfile(os.path.join(base, "emu-run", "dump", "param_w.bin"), np.float32)
    want = np.fromfile(os.path.join(base, "cpu-run", "dump", "param_w.bin"), np.float32)
    harness.record(got.shape == want.shape and float(np.max(np.abs(got - want))) <= 1e-6, name,
                   f"param w off by {float(np.max(np.abs(got - want)))}")


def new_ops(tmp):
    """A model of the ops the model sweep added (CumSum, Tile, Sin, Cos, Mod
    at run time on floats, ReduceL2, ReduceSumSquare), every one on the
    path of the loss and the divisor of Mod trained: the CUDA trainer on
    the emulated GPU against the CPU trainer (compare's checks)."""
    import numpy as np
    from onnx import helper, numpy_helper
    base = os.path.join(tmp, "new-ops")
    os.makedirs(base, exist_ok=True)
    n = 8
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 6)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(2, np.int64), "axis"),
             numpy_helper.from_array(np.array([1, 1, 2], np.int64), "reps"),
             numpy_helper.from_array(np.array(0.7, np.float32), "period"),
             numpy_helper.from_array(rng.standard_normal((3, 8)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Mul", ["x", "w"], ["h"], name="scale"),
             helper.make_node("CumSum", ["h", "axis"], ["c"], name="cumsum"),
             helper.make_node("Tile", ["c", "reps"], ["t"], name="tile"),
             helper.make_node("Sin", ["t"], ["s"], name="sin"),
             helper.make_node("Cos", ["t"], ["k"], name="cos"),
             helper.make_node("Add", ["s", "k"], ["a"], name="add"),
             helper.make_node("Mod", ["a", "period"], ["m"], name="mod", fmod=1),
             helper.make_node("ReduceL2", ["m"], ["r"], name="l2", axes=[2], keepdims=0),
             helper.make_node("ReduceSumSquare", ["t"], ["q"], name="sumsq", axes=[2],
                              keepdims=0),
             helper.make_node("Concat", ["r", "q"], ["rq"], name="cat", axis=1),
             helper.make_node("Gemm", ["rq", "w2"], ["y"], transB=1, name="fc")]
    path = save_model(base, "new_ops", nodes, [n, 4, 6], inits)
    name = "the sweep's ops (cumsum, tile, sin, cos, mod, reduce_l2, reduce_sum_square)"
    model_case(name, path, base)


def max_pools(tmp):
    """Max pooling's gradient kernels over the window geometries a zoo
    model may not reach, after a ReLU so that windows of zeros tie: pads
    (k3 s2 p1), a stride wider than the window (k2 s3: inputs in no
    window), ceil mode (k3 s2) and dilation (k3 d2 p2, the dilated loop);
    the CUDA trainer on the emulated GPU against the CPU trainer."""
    import numpy as np
    from onnx import helper, numpy_helper
    base = os.path.join(tmp, "max-pools")
    os.makedirs(base, exist_ok=True)
    n, c, hw = 8, 2, 11
    rng = np.random.default_rng(2)
    pools = [("pads", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), 6),
             ("gaps", dict(kernel_shape=[2, 2], strides=[3, 3]), 4),
             ("ceil", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), 5),
             ("dilated", dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 2, 2, 2]), 11)]
    width = sum(c * o * o for _, _, o in pools)
    inits = [numpy_helper.from_array(rng.standard_normal((1, c, hw, hw)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((3, width)).astype(np.float32) * 0.1,
                                     "w2")]
    nodes = [helper.make_node("Mul", ["x", "w"], ["h"], name="scale"),
             helper.make_node("Relu", ["h"], ["r"], name="relu")]
    for tag, attrs, _ in pools:
        nodes += [helper.make_node("MaxPool", ["r"], [f"p_{tag}"], name=f"pool_{tag}", **attrs),
                  helper.make_node("Flatten", [f"p_{tag}"], [f"f_{tag}"], name=f"flat_{tag}")]
    nodes += [helper.make_node("Concat", [f"f_{t}" for t, _, _ in pools], ["cat"], name="cat",
                               axis=1),
              helper.make_node("Gemm", ["cat", "w2"], ["y"], transB=1, name="fc")]
    path = save_model(base, "max_pools", nodes, [n, c, hw, hw], inits)
    name = "max pooling's gradient with pads, gaps, ceil mode and dilation after a ReLU"
    model_case(name, path, base)


def batch_norm_slices(tmp):
    """Batch norm on lwcc's own kernels where a channel spans several
    blocks' slices, the last one short: planes shorter than a block (x
    [130, 2, 16, 16]: 3 slices over the flat index) and longer (the same
    values as [65, 2, 32, 16]: 3 slices of whole planes); float32 with
    --kernels=own and bf16 (16-bit batch norm always runs on the own
    kernels) on the emulated GPU against the CPU trainer."""
    import numpy as np
    from onnx import helper, numpy_helper
    base = os.path.join(tmp, "bn-slices")
    os.makedirs(base, exist_ok=True)
    n, c = 130, 2
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((1, c, 16, 16)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([65, c, 32, 16], np.int64), "long"),
             numpy_helper.from_array(np.array([n, -1], np.int64), "rows"),
             numpy_helper.from_array(
                 rng.standard_normal((3, 2 * c * 256)).astype(np.float32) * 0.1, "w2")]
    for tag in ("a", "b"):
        inits += [numpy_helper.from_array(np.ones(c, np.float32), f"{tag}_scale"),
                  numpy_helper.from_array(np.zeros(c, np.float32), f"{tag}_bias"),
                  numpy_helper.from_array(np.zeros(c, np.float32), f"{tag}_mean"),
                  numpy_helper.from_array(np.ones(c, np.float32), f"{tag}_var")]
    bn = [f"{{}}_{k}" for k in ("scale", "bias", "mean", "var")]
    nodes = [helper.make_node("Mul", ["x", "w"], ["h"], name="scale"),
             helper.make_node("BatchNormalization", ["h", *[b.format("a") for b in bn]], ["na"],
                              name="bn_short"),
             helper.make_node("Reshape", ["h", "long"], ["hl"], name="long"),
             helper.make_node("BatchNormalization", ["hl", *[b.format("b") for b in bn]], ["nb"],
                              name="bn_long"),
             helper.make_node("Reshape", ["na", "rows"], ["fa"], name="flat_a"),
             helper.make_node("Reshape", ["nb", "rows"], ["fb"], name="flat_b"),
             helper.make_node("Concat", ["fa", "fb"], ["cat"], name="cat", axis=1),
             helper.make_node("Gemm", ["cat", "w2"], ["y"], transB=1, name="fc")]
    path = save_model(base, "bn_slices", nodes, [n, c, 16, 16], inits)
    for tag, flags, extra, tol in (("float32 --kernels=own", [], ["--kernels=own"], 1),
                                   ("bf16", ["--mixed-precision=bf16"], [], "low")):
        name = f"batch norm over several slices of a channel, {tag}"
        work = os.path.join(base, tag.split()[0])
        model_case(name, path, work, flags, extra, tol)


def shape_ops(tmp):
    """Ops no zoo model trains, each on the path of the loss: pad, LRN, transpose, split, softmax over the
    channels, gather along the width, slice; the CUDA trainer on the
    emulated GPU against the CPU trainer."""
    import numpy as np
    from onnx import helper, numpy_helper
    base = os.path.join(tmp, "shape-ops")
    os.makedirs(base, exist_ok=True)
    n = 8
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.standard_normal((1, 4, 6, 6)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([0, 0, 1, 2, 0, 0, 1, 2], np.int64), "pads"),
             numpy_helper.from_array(np.array([2, 2], np.int64), "halves"),
             numpy_helper.from_array(np.array([0, 3, 5, 3], np.int64), "cols"),
             numpy_helper.from_array(np.array([1], np.int64), "s0"),
             numpy_helper.from_array(np.array([7], np.int64), "s1"),
             numpy_helper.from_array(np.array([2], np.int64), "sax"),
             numpy_helper.from_array(rng.standard_normal((3, 4 * 6 * 4)).astype(np.float32) * 0.1,
                                     "w2")]
    nodes = [helper.make_node("Mul", ["x", "w"], ["h"], name="scale"),
             helper.make_node("Pad", ["h", "pads"], ["p"], name="pad", mode="constant"),
             helper.make_node("LRN", ["p"], ["l"], name="lrn", size=3),
             helper.make_node("Transpose", ["l"], ["t"], name="transpose", perm=[0, 1, 3, 2]),
             helper.make_node("Split", ["t", "halves"], ["a", "b"], name="split", axis=1),
             helper.make_node("Softmax", ["a"], ["sa"], name="softmax", axis=1),
             helper.make_node("Sigmoid", ["b"], ["sb"], name="sigmoid"),
             helper.make_node("Concat", ["sa", "sb"], ["c"], name="cat", axis=1),
             helper.make_node("Slice", ["c", "s0", "s1", "sax"], ["sl"], name="slice"),
             helper.make_node("Gather", ["sl", "cols"], ["g"], name="gather", axis=3),
             helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "w2"], ["y"], transB=1, name="fc")]
    path = save_model(base, "shape_ops", nodes, [n, 4, 6, 6], inits, opset=18)
    name = "pad, lrn, transpose, split, softmax, gather and slice"
    model_case(name, path, base)


# The dynamo exporter's patterns that bring layer norm, erf, gelu,
# gather_nd, reduce_mean and where (test/e2e/exporter_patterns.py), as
# tools/gpu/prepare.sh checks them on a GPU.
PATTERNS = ["dyn20/convnext Gelu", "dyn18/convnext Erf",
            "dyn20/alexnet@64 pool 1->6 GatherND+ReduceMean",
            "dyn20/vgg11@64 pool 2->7 GatherND+Where"]


def exporter_patterns(tmp):
    """Each of PATTERNS (static batch) as a CUDA trainer on the emulated GPU
    against the CPU trainer."""
    import onnx
    import exporter_patterns as ep
    by_label = {c["label"]: c for c in ep.CASES}
    for label in PATTERNS:
        slug = "".join(ch if ch.isalnum() else "-" for ch in label)
        base = os.path.join(tmp, "pattern-" + slug)
        os.makedirs(base, exist_ok=True)
        model = ep.build(dict(by_label[label], sym=False))
        model.ir_version = min(model.ir_version, 8)  # the export keeps it: one onnxruntime reads
        path = os.path.join(base, "model.onnx")
        onnx.save(model, path)
        model_case(f"exporter pattern {label}", path, base, via_lwcc=False)


def conv_workspace(tmp):
    """The convolutions' workspace on a device whose memory the plan fills:
    a model of convolutions with uneven pads (SAME_UPPER: the CUDA runtime
    copies each image padded, the third's larger than the first two's, so a
    stream's workspace grows during the first step) compiled for a GPU spec
    of the memory the plan needs with its padded copies and no more. lwcc
    counts the copies (one byte less memory: the compile fails naming them)
    and leaves the algorithms no workspace, which the trainer honours: it
    passes over the emulated cuDNN's first choice for the forward
    (IMPLICIT_PRECOMP_GEMM, which takes a table of filter offsets) for one
    that takes none, trains as the CPU trainer does, and holds no more than
    the spec's memory, the first step's transients included (the
    emulator's peak), also while --cudnn-benchmark times the algorithms
    (in the stream's own workspace, not in memory beside it). With 4 MiB
    more the algorithms get 4 MiB and the first choice is kept. On two GPUs
    (data parallelism: a device group, which keeps a workspace it replaces
    until the step's functions have all returned) each GPU holds no more
    than the spec's memory after training (the first step can hold a
    replaced workspace beside its successor: a device-wide wait mid-step
    could wait for a collective whose peer needs the waiting thread)."""
    import json
    import re
    import numpy as np
    from onnx import helper, numpy_helper
    base = os.path.join(tmp, "conv-workspace")
    os.makedirs(base, exist_ok=True)
    n = 8
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(0.3 * rng.standard_normal(shape).astype(np.float32), name)
             for name, shape in (("w1", (6, 3, 2, 2)), ("w2", (16, 6, 2, 2)),
                                 ("w3", (6, 16, 2, 2)), ("w4", (3, 6)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", auto_pad="SAME_UPPER"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", auto_pad="SAME_UPPER"),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3"], ["c3"], name="conv3", auto_pad="SAME_UPPER"),
             helper.make_node("GlobalAveragePool", ["c3"], ["g"], name="pool"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "w4"], ["y"], transB=1, name="fc")]
    path = save_model(base, "uneven_pads", nodes, [n, 3, 64, 64], inits)

    def spec(memory):
        f = os.path.join(base, f"gpu-{memory}.json")
        with open(f, "w") as out:
            json.dump({"name": "tight-gpu", "fp32_flops": 6e13, "mem_bandwidth": 3e12,
                       "launch_seconds": 5e-6, "memory_bytes": memory,
                       "intra_bandwidth": 4e11, "intra_latency": 1e-5,
                       "inter_bandwidth": 5e10, "inter_latency": 1e-5,
                       "workspace_bytes_per_stream": 42 << 20, "inputs_on_device": True,
                       "devices_per_node": 8}, out)
        return f

    def needed(flags, label):
        """What the plan needs per device, from the error of a device of one byte."""
        r = harness.run([LWCC, path, "--target=cuda", f"--device-spec={spec(1)}", *flags,
                         "--emit=plan", "-o", os.devnull])
        m = re.search(r"device 0: (\d+) bytes \(.*\+ (\d+) padded convolution inputs", r.stderr)
        harness.record(r.returncode == 1 and m is not None and int(m.group(2)) > 0,
                       f"uneven pads{label}: the memory check counts the padded copies of the images",
                       r.stderr[-800:])
        return int(m.group(1)) if m else None

    need = needed([], "")
    if need is None:
        return
    r = harness.run([LWCC, path, "--target=cuda", f"--device-spec={spec(need - 1)}",
                     "--emit=plan", "-o", os.devnull])
    harness.record(r.returncode == 1 and "padded convolution inputs" in r.stderr,
                   "uneven pads: one byte less than the plan and its padded copies need fails",
                   r.stderr[-800:])
    cpu, perr = md.build(path, [], os.path.join(base, "cpu"))
    rp = train(cpu, os.path.join(base, "cpu-run"), run_args(), False) if cpu else None
    for extra, label in ((0, "no memory left"), (4 << 20, "4 MiB left")):
        flags = [f"--device-spec={spec(need + extra)}"]
        work = os.path.join(base, f"emu-{extra}")
        cuda, cerr = build_emulated(path, flags, work)
        if not cuda or not cpu:
            harness.record(False, f"uneven pads, {label}: build", cerr or perr)
            continue
        run = os.path.join(work, "run")
        rc = train(cuda, run, [*run_args(), "--profile=1"], True)
        if rc.returncode or rp.returncode:
            harness.record(False, f"uneven pads, {label}: train",
                           (rc.stdout + rc.stderr)[-1500:] + rp.stderr[-500:])
            continue
        got = re.search(r"algorithm workspaces up to (\d+) bytes \(allowed: (\d+)\)", rc.stdout)
        most, allowed = (int(got.group(1)), int(got.group(2))) if got else (-1, -1)
        ok = allowed == extra and (most == 0 if extra == 0 else 0 < most <= allowed)
        harness.record(ok, f"uneven pads, {label}: the trainer's convolution algorithms take "
                       f"at most what the plan left ({extra} bytes)",
                       got.group(0) if got else rc.stdout[-800:])
        compare(f"uneven pads, {label}: emulated CUDA trainer vs CPU trainer",
                os.path.join(base, "cpu-run"), run, 1)
        # Training alone (the evaluation's arena is the trainer's, not the
        # plan's), with cuDNN's heuristics and with --cudnn-benchmark: the
        # most the GPU held at any moment.
        for timed in ([], ["--cudnn-benchmark"]):
            what = " ".join(["training", *timed])
            rm, peaks = peak_bytes(cuda, os.path.join(work, "peak" + "".join(timed)),
                                   [f"--steps={STEPS}", *timed])
            harness.record(rm.returncode == 0 and 0 in peaks and peaks[0] <= need + extra,
                           f"uneven pads, {label}, {what}: the emulated GPU never holds more "
                           f"than the spec's {need + extra} bytes",
                           f"peak {peaks}" if rm.returncode == 0 else rm.stderr[-800:])
    # Two GPUs: the workspaces a device group replaced are freed after the step.
    need2 = needed(["--gpus=2", "--strategy=data"], " on 2 GPUs")
    if need2 is None:
        return
    for extra in (0, 4 << 20):
        flags = [f"--device-spec={spec(need2 + extra)}", "--gpus=2", "--strategy=data"]
        work = os.path.join(base, f"emu2-{extra}")
        cuda, cerr = build_emulated(path, flags, work)
        if not cuda:
            harness.record(False, f"uneven pads on 2 GPUs, {extra} bytes left: build", cerr)
            continue
        for timed in ([], ["--cudnn-benchmark"]):
            alone = os.path.join(work, "memory" + "".join(timed))
            rm = train(cuda, alone, [f"--steps={STEPS}", "--log=log.jsonl", *timed], True)
            records = md.memory_records(alone) if rm.returncode == 0 else []
            devices = {d for r in records for d in r["devices"]}
            measured = max((r["measured_bytes"] for r in records), default=None)
            harness.record(devices == {0, 1} and measured <= need2 + extra,
                           f"uneven pads on 2 GPUs, {extra} bytes left, "
                           f"{' '.join(['training', *timed])}: each GPU holds no more than the "
                           f"spec's {need2 + extra} bytes after training",
                           f"measured {[(r['devices'], r['measured_bytes']) for r in records]}"
                           if rm.returncode == 0 else rm.stderr[-800:])


def main():
    # multi_device_trainer.compare counts the losses of this many steps. Set
    # here, not on import: trainer_recipes.py borrows this file's builders.
    md.STEPS = STEPS
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", help="comma-separated models to run (default: all)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(PREFIX, "lib", "liblwcc_runtime_emu.a")):
        harness.record(False, "the emulated CUDA runtime is built",
                       "no liblwcc_runtime_emu.a (the CUDA headers were not found)")
        return harness.finish()
    models = harness.zoo_models()
    if args.cases:
        models = [m for m in models if m in args.cases.split(",")]
    tmp = tempfile.mkdtemp(prefix="lwcc-emu-")
    try:
        for m in models:
            harness.generate(m, os.path.join(tmp, f"{m}.onnx"), batch=args.batch)
        planned = cases(models)
        slug = {c[0]: c[0].replace(" ", "_").replace("=", "-").replace("/", "_") for c in planned}

        def make(c):
            name, m, flags, _, _ = c
            onnx_path = os.path.join(tmp, f"{m}.onnx")
            base = os.path.join(tmp, slug[name])
            cuda = build_emulated(onnx_path, flags, os.path.join(base, "emu"),
                                  via_lwcc=(name == "lenet"))
            cpu = md.build(onnx_path, flags, os.path.join(base, "cpu"))
            return cuda, cpu

        built = harness.build_all(planned, lambda c: c[0], make, args.jobs)
        for c in planned:
            name, m, flags, extra, tol = c
            (cuda, cerr), (cpu, perr) = built[name]
            if not cuda or not cpu:
                harness.record(False, f"{name}: build", cerr or perr)
                continue
            base = os.path.join(tmp, slug[name])
            if tol == "f64":
                against_float64(name, os.path.join(tmp, f"{m}.onnx"), cuda, cpu, base)
                continue
            # 16-bit steps: one step (a rounding that flips to the neighbouring
            # bf16 value compounds: resnet18's momentum is 1e-3 off after one
            # step, 1e-2 after two, 0.25 after three).
            steps = 1 if tol == "low" else STEPS
            rc = train(cuda, os.path.join(base, "emu-run"), [*run_args(steps), *extra], True)
            rp = train(cpu, os.path.join(base, "cpu-run"), run_args(steps), False)
            if rc.returncode or rp.returncode:
                harness.record(False, f"{name}: train",
                               (rc.stdout + rc.stderr)[-2500:] + (rp.stderr)[-500:])
                continue
            if name == models[0]:
                first = (rc.stdout.splitlines() or [""])[0]
                harness.record("emulated GPU" in first,
                               f"{name}: the trainer's first line says it runs on an emulated GPU",
                               first)
            compare(f"{name}: emulated CUDA trainer vs CPU trainer", os.path.join(base, "cpu-run"),
                    os.path.join(base, "emu-run"), tol)
            if name == "lenet --gpus 2 data":
                resume_case(cuda, os.path.join(base, "resume"), name)
            if "--shard=fsdp" in flags:
                memory_case(name, os.path.join(tmp, f"{m}.onnx"), flags,
                            os.path.join(base, "emu-run"))
            if name == "alexnet --cudnn-benchmark":
                autotune_cache(cuda, os.path.join(base, "autotune"))
            if "--trace=trace.json" in extra:
                profiled_files(name, os.path.join(base, "emu-run"))
        tied_max_pool(tmp)
        new_ops(tmp)
        max_pools(tmp)
        batch_norm_slices(tmp)
        exporter_patterns(tmp)
        shape_ops(tmp)
        conv_workspace(tmp)
    finally:
        if args.keep:
            print(f"work folder: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
