#!/usr/bin/env python3
"""lwcc's CPU trainer beside PyTorch's CPU training, on the same ONNX file.

For each model the bench writes one ONNX file and trains it twice over:
  lwcc     `lwcc MODEL.onnx --target=cpu -o trainer`, run with `--threads=N`
           on one fixed batch (`--data=raw:DIR`);
  PyTorch  the same file as an eager torch.nn.Module (its graph replayed
           node by node with torch.nn.functional, the initializers as
           parameters, batch norm and dropout in training mode), and that
           module's whole step under torch.compile;
with the same step: softmax cross-entropy, SGD (lr 0.01, momentum 0.9,
weight decay 5e-4: lwcc's defaults), the same batch, N threads
(torch.set_num_threads). Each round runs lwcc, eager and compile one after
the other (each PyTorch mode in a worker process of its own that keeps its
model, and its compiled step, between rounds); a measurement is the median
step time over ~2 s after warm-up, the figure the median over the rounds.
A last row trains LeNet at 2 threads with one competing busy process (a
spinning Python loop) beside it. Prints a markdown table, the geometric
means of lwcc/eager and lwcc/compile per thread count, and the machine.

Models: LeNet (28 px, batch 64), AlexNet (64 px, half width, batch 32),
ResNet-18 (64 px, batch 16), VGG-11 (32 px, quarter width, batch 32),
MobileNet-v2 (torchvision's, 64 px, batch 16, exported with
tools/torch_check's TorchScript settings) and a two-block inception net
(the zoo's stem and inception blocks 3a and 3b at half width, 64 px,
batch 16).

Needs PyTorch (/work/venv-torch); not part of CI.

    /work/venv-torch/bin/python tools/bench/cpu_vs_torch.py [--models lenet,alexnet]
        [--threads 1,2] [--rounds 3] [--seconds 2] [--no-compile] [--no-busy]

--cpu-time (for development on a busy machine, one thread only) times each
step by the CPU time the process used instead of the clock: lwcc's as the
difference between a run of S steps and one of S/2.
"""
import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("LWCC_BIN_DIR") or os.path.join(ROOT, "build", "bin")
LWCC = os.path.join(BIN, "lwcc")
sys.path.insert(0, os.path.join(ROOT, "tools", "models"))

LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 5e-4
MODELS = ["lenet", "alexnet", "resnet18", "vgg11", "mobilenet_v2", "inception2"]


# --------------------------------------------------------------- the models
def write_model(name, path):
    """Writes model `name` to `path`; returns its batch size."""
    import onnx
    if name == "mobilenet_v2":
        return export_mobilenet(path)
    import zoo
    if name == "inception2":
        model, batch = inception2()
    else:
        spec = {"lenet": dict(batch=64),
                "alexnet": dict(size=64, width=0.5, classes=10, batch=32),
                "resnet18": dict(size=64, classes=10, batch=16),
                "vgg11": dict(size=32, width=0.25, classes=10, batch=32)}[name]
        model, batch = zoo.build(name, **spec), spec["batch"]
    onnx.save(model, path)
    return batch


def inception2():
    """The zoo's inception stem and its first two blocks (3a, 3b), half width."""
    import zoo
    from layers import NetBuilder
    width, batch = 0.5, 16
    b = NetBuilder("inception2", size=64, channels=3, batch=batch, opset=17, seed=0)
    c = lambda n: max(1, round(n * width))  # noqa: E731
    x = zoo._conv_bn_relu(b, b.input, c(64), 7, stride=2, pad=3, name="conv1")
    x = b.maxpool(x, 3, 2, 1, name="maxpool1")
    x = zoo._conv_bn_relu(b, x, c(192), 3, pad=1, name="conv3")
    for block in zoo.INCEPTION_BLOCKS[:2]:
        x = zoo._inception_block(b, x, block[1], width, block[0])
    x = b.flatten(b.global_avgpool(x, name="avgpool"), name="flatten")
    x = b.gemm(x, 10, name="fc", gain=1.0)
    return b.model(x), batch


def export_mobilenet(path, batch=16, size=64):
    import torch
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2(num_classes=10).eval()
    x = torch.randn(batch, 3, size, size)
    torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False,
                      input_names=["input"], output_names=["logits"])
    return batch


# ------------------------------------------------- the ONNX file as a module
class OnnxModule:
    """Builds a torch.nn.Module that runs an ONNX graph node by node."""

    @staticmethod
    def build(path):
        import onnx
        import torch
        from onnx import numpy_helper

        model = onnx.load(path)
        graph = model.graph
        inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
        # Float initializers become params, the rest (shapes) constants; each
        # batch norm gets running statistics of its own (buffers), since the
        # TorchScript exporter may share one initializer between layers.
        alias = {}
        for n in graph.node:
            if n.op_type == "Identity":
                alias[n.output[0]] = alias.get(n.input[0], n.input[0])
        stats = {}
        for k, n in enumerate(graph.node):
            if n.op_type == "BatchNormalization":
                for i in (3, 4):
                    stats[(k, i)] = inits[alias.get(n.input[i], n.input[i])]

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.params = torch.nn.ParameterDict()
                self.consts = {}
                self.key = {}
                used = {alias.get(i, i) for k, n in enumerate(graph.node)
                        for j, i in enumerate(n.input)
                        if n.op_type != "Identity" and (k, j) not in stats}
                for k, (name, arr) in enumerate(inits.items()):
                    t = torch.from_numpy(arr.copy())
                    self.key[name] = f"t{k}"
                    if t.is_floating_point() and name in used:
                        self.params[f"t{k}"] = torch.nn.Parameter(t)
                    else:
                        self.consts[name] = t
                for (k, i), arr in stats.items():
                    self.register_buffer(f"bn{k}_{i}", torch.from_numpy(arr.copy()))

            def value(self, env, name):
                if name in env:
                    return env[name]
                name = alias.get(name, name)
                if name in self.consts:
                    return self.consts[name]
                k = self.key[name]
                return self.params[k] if k in self.params else getattr(self, k)

            def forward(self, x):
                F = torch.nn.functional
                env = {graph.input[0].name: x}
                for k, n in enumerate(graph.node):
                    a = {at.name: onnx.helper.get_attribute_value(at) for at in n.attribute}
                    op = n.op_type
                    ins = [getattr(self, f"bn{k}_{j}") if (k, j) in stats else
                           self.value(env, i) if i else None for j, i in enumerate(n.input)]
                    if op == "Conv":
                        p = a.get("pads", [0, 0, 0, 0])
                        assert p[0] == p[2] and p[1] == p[3], "asymmetric pads"
                        y = F.conv2d(ins[0], ins[1], ins[2] if len(ins) > 2 else None,
                                     a.get("strides", [1, 1]), p[:2], a.get("dilations", [1, 1]),
                                     a.get("group", 1))
                    elif op == "Relu":
                        y = F.relu(ins[0])
                    elif op == "Clip":
                        lo = float(ins[1]) if len(ins) > 1 and ins[1] is not None else None
                        hi = float(ins[2]) if len(ins) > 2 and ins[2] is not None else None
                        y = torch.clamp(ins[0], lo, hi)
                    elif op in ("MaxPool", "AveragePool"):
                        p = a.get("pads", [0, 0, 0, 0])
                        assert p[0] == p[2] and p[1] == p[3], "asymmetric pads"
                        if op == "MaxPool":
                            y = F.max_pool2d(ins[0], a["kernel_shape"], a.get("strides", 1), p[:2],
                                             ceil_mode=bool(a.get("ceil_mode", 0)))
                        else:
                            y = F.avg_pool2d(ins[0], a["kernel_shape"], a.get("strides", 1), p[:2],
                                             ceil_mode=bool(a.get("ceil_mode", 0)),
                                             count_include_pad=bool(a.get("count_include_pad", 0)))
                    elif op == "GlobalAveragePool":
                        y = F.adaptive_avg_pool2d(ins[0], 1)
                    elif op == "LRN":
                        y = F.local_response_norm(ins[0], a["size"], a.get("alpha", 1e-4),
                                                  a.get("beta", 0.75), a.get("bias", 1.0))
                    elif op == "BatchNormalization":
                        y = F.batch_norm(ins[0], ins[3], ins[4], ins[1], ins[2], training=True,
                                         momentum=1 - a.get("momentum", 0.9),
                                         eps=a.get("epsilon", 1e-5))
                    elif op == "Dropout":
                        ratio = float(ins[1]) if len(ins) > 1 and ins[1] is not None else 0.5
                        y = F.dropout(ins[0], ratio, training=True)
                    elif op == "Flatten":
                        y = torch.flatten(ins[0], a.get("axis", 1))
                    elif op == "Reshape":
                        y = torch.reshape(ins[0], [int(v) for v in ins[1]])
                    elif op == "Gemm":
                        w = ins[1].t() if a.get("transB", 0) else ins[1]
                        xa = ins[0].t() if a.get("transA", 0) else ins[0]
                        y = torch.addmm(ins[2], xa, w) if len(ins) > 2 else xa @ w
                    elif op == "MatMul":
                        y = ins[0] @ ins[1]
                    elif op == "Add":
                        y = ins[0] + ins[1]
                    elif op == "Concat":
                        y = torch.cat(ins, a["axis"])
                    elif op == "Identity":
                        y = ins[0]
                    elif op == "Constant":
                        y = torch.from_numpy(numpy_helper.to_array(a["value"]).copy())
                    else:
                        raise NotImplementedError(f"{op} (node {n.name})")
                    env[n.output[0]] = y
                return env[graph.output[0].name]

        return Net()


def torch_worker(args):
    """A PyTorch trainer that measures a round on each line read from stdin."""
    import numpy as np
    import torch
    torch.set_num_threads(args.threads)
    net = OnnxModule.build(args.model)
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    x = torch.from_numpy(np.fromfile(os.path.join(args.batch_dir, "input_0.bin"), np.float32)
                         .reshape(args.shape))
    y = torch.from_numpy(np.fromfile(os.path.join(args.batch_dir, "input_1.bin"), np.int64))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        return loss

    if args.mode == "compile":
        step = torch.compile(step)
    for _ in range(3):  # warm-up (and compile)
        step()
    print("ready", flush=True)
    clock = time.process_time if args.cpu_time else time.perf_counter
    for line in sys.stdin:
        seconds = float(line)
        for _ in range(2):
            step()
        times, start = [], clock()
        while clock() - start < seconds or len(times) < 5:
            t0 = clock()
            step()
            times.append(clock() - t0)
        step_s = (clock() - start) / len(times) if args.cpu_time else statistics.median(times)
        print(json.dumps({"step_s": step_s, "steps": len(times)}), flush=True)


# ------------------------------------------------------------- the parent
class Worker:
    def __init__(self, mode, model, batch_dir, shape, threads, cpu_time):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), TORCHINDUCTOR_COMPILE_THREADS="1")
        self.p = subprocess.Popen(
            [sys.executable, __file__, "--worker", mode, "--model-file", model, "--batch-dir",
             batch_dir, "--shape", ",".join(map(str, shape)), "--worker-threads", str(threads)] +
            (["--cpu-time"] if cpu_time else []),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        line = self.p.stdout.readline()
        if line.strip() != "ready":
            sys.exit(f"the PyTorch {mode} worker for {model} did not start")

    def measure(self, seconds):
        self.p.stdin.write(f"{seconds}\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())["step_s"]

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def lwcc_run(trainer, batch_dir, threads, steps, log):
    """Runs the trainer; returns the CPU seconds it used."""
    if os.path.exists(log):
        os.remove(log)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([trainer, f"--data=raw:{batch_dir}", f"--steps={steps}",
                        f"--threads={threads}", "--progress=off", f"--log={log}"],
                       capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"{trainer} exited {r.returncode}: {r.stderr[-1500:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def lwcc_measure(trainer, batch_dir, threads, steps, log, cpu_time=False):
    """The median step time of a trainer run (its log's step_ms, after the
    first five steps; the last step's figure is cut short and left out),
    or with cpu_time the CPU seconds of a step."""
    if cpu_time:
        half = lwcc_run(trainer, batch_dir, threads, steps // 2, log)
        full = lwcc_run(trainer, batch_dir, threads, steps, log)
        return max(full - half, 1e-9) / (steps - steps // 2)
    lwcc_run(trainer, batch_dir, threads, steps, log)
    ms = [json.loads(line)["step_ms"] for line in open(log)
          if '"type":"step"' in line.replace(" ", "")]
    return statistics.median(ms[5:-1]) / 1000.0


def busy_process():
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def machine():
    name = platform.processor() or "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch
    return (f"{name}, {os.cpu_count()} cores, Linux {platform.release()}; PyTorch "
            f"{torch.__version__}; load average {os.getloadavg()[0]:.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-busy", action="store_true")
    ap.add_argument("--keep", help="keep the models and trainers in this folder")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time steps by CPU time (one thread, a busy machine)")
    # A PyTorch worker (internal).
    ap.add_argument("--worker", choices=["eager", "compile"])
    ap.add_argument("--model-file")
    ap.add_argument("--batch-dir")
    ap.add_argument("--shape")
    ap.add_argument("--worker-threads", type=int)
    args = ap.parse_args()
    if args.cpu_time and not args.worker and args.threads != "1":
        sys.exit("--cpu-time measures one thread: use --threads 1")
    if args.worker:
        args.mode, args.model, args.threads = args.worker, args.model_file, args.worker_threads
        args.shape = [int(v) for v in args.shape.split(",")]
        return torch_worker(args)

    import numpy as np
    import onnx
    models = args.models.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    modes = ["eager"] + ([] if args.no_compile else ["compile"])
    work = args.keep or tempfile.mkdtemp(prefix="lwcc-cpu-vs-torch-")
    os.makedirs(work, exist_ok=True)
    print(f"machine: {machine()}", flush=True)
    rows = []  # (model, threads, busy, {lwcc, eager, compile: img/s})
    plan = [(m, t, False) for m in models for t in threads]
    if not args.no_busy and "lenet" in models:
        plan.append(("lenet", 2, True))
    built = {}
    for model, nthreads, busy in plan:
        if model not in built:
            path = os.path.join(work, f"{model}.onnx")
            batch = write_model(model, path)
            g = onnx.load(path).graph
            dims = [d.dim_value for d in g.input[0].type.tensor_type.shape.dim]
            classes = g.output[0].type.tensor_type.shape.dim[1].dim_value
            batch_dir = os.path.join(work, f"{model}-batch")
            os.makedirs(batch_dir, exist_ok=True)
            rng = np.random.default_rng(0)
            rng.standard_normal(dims, dtype=np.float32).tofile(os.path.join(batch_dir,
                                                                            "input_0.bin"))
            rng.integers(0, classes, dims[0], dtype=np.int64).tofile(
                os.path.join(batch_dir, "input_1.bin"))
            trainer = os.path.join(work, f"{model}-trainer")
            r = subprocess.run([LWCC, path, "--target=cpu", "-o", trainer],
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"lwcc {path} exited {r.returncode}: {r.stderr[-1500:]}")
            built[model] = (path, batch_dir, dims, trainer)
        path, batch_dir, dims, trainer = built[model]
        competitor = busy_process() if busy else None
        try:
            workers = {m: Worker(m, path, batch_dir, dims, nthreads, args.cpu_time)
                       for m in (["eager"] if busy else modes)}
            # Steps for ~args.seconds of lwcc, from a short first run.
            log = os.path.join(work, f"{model}.jsonl")
            guess = (lwcc_run(trainer, batch_dir, nthreads, 12, log) / 12 if args.cpu_time else
                     lwcc_measure(trainer, batch_dir, nthreads, 12, log))
            steps = int(min(2000, max(20, args.seconds / guess))) + 6
            samples = {m: [] for m in ["lwcc", *workers]}
            for _ in range(args.rounds):
                samples["lwcc"].append(lwcc_measure(trainer, batch_dir, nthreads, steps, log,
                                                    args.cpu_time))
                for m, w in workers.items():
                    samples[m].append(w.measure(args.seconds))
            for w in workers.values():
                w.close()
        finally:
            if competitor:
                competitor.kill()
                competitor.wait()
        rate = {m: dims[0] / statistics.median(s) for m, s in samples.items()}
        rows.append((model, nthreads, busy, rate))
        note = " (one busy process beside it)" if busy else ""
        print(f"  {model} {nthreads} threads{note}: " +
              ", ".join(f"{m} {v:.1f} img/s" for m, v in rate.items()), flush=True)

    print()
    head = "| model | threads | lwcc img/s | PyTorch eager | lwcc/eager |"
    sep = "|---|---|---|---|---|"
    if "compile" in modes:
        head += " torch.compile | lwcc/compile |"
        sep += "---|---|"
    print(head)
    print(sep)
    for model, nthreads, busy, rate in rows:
        name = model + (", one busy process" if busy else "")
        line = (f"| {name} | {nthreads} | {rate['lwcc']:.1f} | {rate['eager']:.1f} | "
                f"{rate['lwcc'] / rate['eager']:.2f} |")
        if "compile" in modes:
            c = rate.get("compile")
            line += f" {c:.1f} | {rate['lwcc'] / c:.2f} |" if c else " | |"
        print(line)
    for nthreads in threads:
        quiet = [r for m, t, b, r in rows if t == nthreads and not b]
        text = f"geomean at {nthreads} thread{'s' if nthreads > 1 else ''}: lwcc/eager " \
               f"{geomean([r['lwcc'] / r['eager'] for r in quiet]):.2f} (lowest " \
               f"{min(r['lwcc'] / r['eager'] for r in quiet):.2f})"
        if "compile" in modes:
            text += f", lwcc/compile {geomean([r['lwcc'] / r['compile'] for r in quiet]):.2f}"
        print(text)
    print(f"machine at the end: {machine()}")


if __name__ == "__main__":
    main()
