#!/usr/bin/env python3
"""Every zoo model at test size builds into a CUDA trainer with nvcc.

So does upnet (activations, prelu, max/min, resize), on one device and on
two (model), the
position-encoding pattern of exporter_patterns.py (CumSum, Sin, Cos, Tile,
the norm reductions), and
every zoo model with --mixed-precision=bf16 (LeNet in fp16 too, and 16-bit
trainers of two devices: data, OWT, a pipeline).
`lwcc MODEL -o trainer` (target cuda, the default; sm_90) must emit CUDA C++
and link it against the CUDA runtime library, cuDNN, cuBLAS and NCCL. So must
multi-device trainers (MULTI: --gpus 2 and 4, data-parallel and One Weird
Trick; dropnet, dropout after every layer, with model, owt, layerwise and
hypergraph), whose step calls the CUDA backend's group and communication
(cuda/Comm.cu). On a machine without a usable GPU the trainer must say so,
suggest --target=cpu and exit 1 (the CI machine has none; where one is
present the run must start instead: tools/gpu/ checks it); without the
NVIDIA driver, the trainer's preflight must name the missing driver.

Every trainer links cuDNN, cuBLAS (and, with several devices, NCCL) by their
versioned sonames, which is all pip's wheels have: `readelf -d` lists
libcudnn.so.9 and libcublas.so.13 (and libnccl.so.2 where the trainer calls
NCCL, as every data-parallel one does), never an unversioned name, and
neither libjpeg, libpng nor zlib (linked in statically).
The start-up preflight accepts a cuDNN 9 of an older minor version than the
build's when it has every function the runtime calls, and names the one it
lacks otherwise: checked with a stand-in libcudnn.so.9 (the soname and
symbol version of cuDNN 9, reporting 9.1.0) on LD_LIBRARY_PATH.

Every trainer links OpenMPI and a multi-device one NCCL (PROCESSES: the
--gpus 4 ResNet-18 needs libmpi.so.40 and libnccl.so.2), and runs under
mpirun: `mpirun -np 3` is a usage error (3 processes cannot share 4
devices, exit 2), `mpirun -np 2` starts MPI in both processes, which then
stop without a GPU as one process does (exit 1 with the hint; on a GPU
machine tools/gpu/check.sh runs it).

Also the GPU check's comparison (tools/gpu/compare.py, which check.sh runs on
a GPU machine) on CPU-made --gpus 2 dumps: it accepts a dump against itself
and the params against the single-device step's, and rejects a gradient off
by 5% and a missing file; with a bf16 step's --tol=2e-2 it accepts a
gradient 1% off (rejected at the default 1e-3) and still rejects 5%. Ends
with the line "N passed, M failed".
"""
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "models"))
import zoo  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import exporter_patterns as ep  # noqa: E402
import harness  # noqa: E402

LWCC = os.path.join(ROOT, "build", "bin", "lwcc")


def has_gpu():
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def has_driver():
    """Whether the NVIDIA driver's libcuda.so.1 loads here."""
    import ctypes
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


# Multi-device cases: (model, --gpus, --strategy).
MULTI = [("lenet", 2, "data"), ("resnet18", 4, "data"), ("alexnet_owt", 2, "owt"),
         ("alexnet_owt", 4, "owt")]
# Dropout masks split over channels and samples (the CPU trainers of
# test/e2e/multi_device_trainer.py train these against one device).
MULTI += [("dropnet", g, s) for g in (2, 4) for s in ("model", "owt", "layerwise", "hypergraph")]
# A pipeline: 2 stages, 2 micro-batches (1F1B), transfers on streams 2 and 3.
MULTI += [("lenet", 2, "pipeline")]
# The model-collection ops (activations, prelu, max/min, resize, stateless batch
# norm), on one device and with resize split over channels.
EXTRA = [("upnet", 1, None), ("upnet", 2, "model")]
# Four streams: inception's branches on streams 2 and 3 (--stream-policy=all).
EXTRA += [("inception", 1, "streams")]
# Fragments: alexnet's batch in two halves through its layers (slices and
# concats of rows, fragments on branch streams, per-fragment dropout masks).
EXTRA += [("alexnet", 1, "fragments")]
# Exporter patterns (exporter_patterns.py) by case label, built beside the
# zoo: the position encodings' CumSum, Sin, Cos, Tile and norm reductions.
PATTERNS = {"pos-encoding": "dyn20/pos-encoding CumSum Sin Cos Tile Mod ReduceL2"}
EXTRA += [("pos-encoding", 1, None)]
# Mixed precision: every zoo model in bf16 on one device (conv2d, gemm and
# their gradients in 16 bits on cuDNN and cuBLAS, the casts), LeNet in fp16
# (loss scaling: all_finite and the scale's update), and 16-bit collectives
# (NCCL's bf16 and fp16 sums, 16-bit slice gradients and partial sums).
MIXED = [(name, 1, None, "bf16") for name in zoo.REGISTRY]
MIXED += [("lenet", 1, None, "fp16"), ("lenet", 2, "data", "fp16"),
          ("alexnet_owt", 2, "owt", "bf16"), ("lenet", 2, "pipeline", "bf16")]

# The trainer checked as several processes under mpirun.
PROCESSES = ("resnet18", 4, "data")


def check_processes(exe, gpu):
    """The --gpus 4 trainer links MPI and NCCL and starts under mpirun."""
    r = subprocess.run(["readelf", "-d", exe], capture_output=True, text=True)
    needed = [lib for lib in ("libmpi.so.40", "libnccl.so.2") if lib not in r.stdout]
    if needed:
        return f"does not link {', '.join(needed)}"
    if not shutil.which("mpirun"):
        return "mpirun not found (Debian's openmpi-bin)"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    mpirun = ["mpirun", "--oversubscribe", "-np"]
    r = subprocess.run(mpirun + ["3", exe, "--steps=1", "--progress=off"], capture_output=True,
                       text=True, timeout=300, env=env)
    if r.returncode != 2 or "cannot share evenly" not in r.stderr:
        return f"mpirun -np 3: exit {r.returncode}, not 2: {r.stderr.strip()[-400:]!r}"
    if gpu:
        return None  # tools/gpu/check.sh runs it on the GPUs
    r = subprocess.run(mpirun + ["2", exe, "--steps=1", "--progress=off"], capture_output=True,
                       text=True, timeout=300, env=env)
    if r.returncode != 1 or "(rank " not in r.stderr or "--target=cpu" not in r.stderr:
        return f"mpirun -np 2 without a GPU: exit {r.returncode}: {r.stderr.strip()[-400:]!r}"
    return None


def needed(exe):
    """The NEEDED entries of an executable's dynamic section."""
    r = subprocess.run(["readelf", "-d", exe], capture_output=True, text=True, timeout=60)
    return [line.split("[", 1)[1].rstrip("]") for line in r.stdout.splitlines()
            if "(NEEDED)" in line and "[" in line]


def imports_nccl(exe):
    """Whether the executable calls NCCL (a plan with no collective does not)."""
    r = subprocess.run(["nm", "-D", "--undefined-only", exe], capture_output=True, text=True,
                       timeout=60)
    return any(line.split()[-1].startswith("nccl") for line in r.stdout.splitlines()
               if line.split())


def check_sonames(exe, strategy):
    """cuDNN, cuBLAS (NCCL where the trainer calls it) by versioned soname
    only; a data-parallel trainer always calls NCCL (its gradient sums)."""
    libs = needed(exe)
    nccl = imports_nccl(exe)
    if strategy == "data" and not nccl:
        return "a data-parallel trainer that calls no NCCL function"
    want = ["libcudnn.so.9", "libcublas.so.13"] + (["libnccl.so.2"] if nccl else [])
    missing = [w for w in want if w not in libs]
    unversioned = [n for n in libs if n.endswith(".so")]
    # libjpeg, libpng and zlib are linked in: a GPU machine may lack them.
    image = [n for n in libs if n.startswith(("libjpeg", "libpng", "libz."))]
    if missing or unversioned or image:
        return (f"readelf -d lists {libs}: missing {missing}, unversioned {unversioned}, "
                f"image libraries not linked in {image}")
    return None


def cuda_functions():
    """The cuDNN functions the CUDA runtime library calls (its undefined symbols)."""
    lib = os.path.join(ROOT, "build", "lib", "liblwcc_runtime_cuda.a")
    r = subprocess.run(["nm", "-u", lib], capture_output=True, text=True, timeout=120)
    return sorted({line.split()[-1] for line in r.stdout.splitlines()
                   if line.split() and line.split()[-1].startswith("cudnn")})


def check_preflight_stub(exe, tmp):
    """A stand-in cuDNN 9.1.0: accepted with every function the runtime calls,
    named when it lacks one."""
    functions = cuda_functions()
    if "cudnnBackendExecute" not in functions or "cudnnGetVersion" not in functions:
        return f"nm -u on the runtime lists no cuDNN graph API: {functions[:5]}"
    for label, drop in (("complete", None), ("lacking", "cudnnBackendExecute")):
        d = os.path.join(tmp, "stub-cudnn-" + label)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "stub.c"), "w") as f:
            f.write("#include <stddef.h>\n"
                    "size_t cudnnGetVersion(void) { return 90100; }\n"
                    "size_t cudnnGetCudartVersion(void) { return 13000; }\n")
            for fn in functions:
                if fn not in ("cudnnGetVersion", "cudnnGetCudartVersion", drop):
                    f.write(f"int {fn}(void) {{ return 0; }}\n")
        with open(os.path.join(d, "stub.map"), "w") as f:
            f.write("libcudnn.so.9 { global: *; };\n")
        r = subprocess.run(["cc", "-shared", "-fPIC", "-o", os.path.join(d, "libcudnn.so.9"),
                            "-Wl,-soname,libcudnn.so.9", "-Wl,--version-script=" +
                            os.path.join(d, "stub.map"), os.path.join(d, "stub.c")],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            return f"building the stand-in cuDNN: {r.stderr[-500:]}"
        env = dict(os.environ, LD_LIBRARY_PATH=d)
        r = subprocess.run([exe, "--steps=1", "--progress=off"], capture_output=True, text=True,
                           timeout=300, env=env)
        if "cuDNN 9.1.0" not in r.stderr:
            return f"{label} stand-in: the preflight did not find it: {r.stderr[-600:]!r}"
        lacks = "the cuDNN found (9.1.0) lacks cudnnBackendExecute, which this trainer calls"
        if drop and (r.returncode != 1 or lacks not in r.stderr):
            return f"lacking stand-in: exit {r.returncode}, no {lacks!r} in {r.stderr[-600:]!r}"
        if not drop and "lacks" in r.stderr:
            return f"complete stand-in refused: {r.stderr[-600:]!r}"
    return None


def check(name, tmp, gpu, gpus=1, strategy=None, mixed=None):
    path = os.path.join(tmp, name + ".onnx")  # main() saved it
    flags = [f"--gpus={gpus}", f"--strategy={strategy}"] if gpus > 1 else []
    if strategy == "pipeline":
        flags += ["--stages=2", "--microbatches=2"]
    if strategy == "streams":
        flags = ["--streams=4", "--stream-policy=all"]
    if strategy == "fragments":
        flags = ["--streams=4", "--stream-policy=all", "--fragments=2"]
    if mixed:
        flags += [f"--mixed-precision={mixed}"]
    exe = os.path.join(tmp, name + (f"-g{gpus}-{strategy}" if gpus > 1 or strategy else "") +
                       (f"-{mixed}" if mixed else "") + "-cuda")
    r = subprocess.run([LWCC, path, "-o", exe] + flags, capture_output=True, text=True,
                       timeout=900)
    if r.returncode != 0:
        return f"lwcc exited {r.returncode}: {r.stderr.strip()[-1500:]}"
    if not os.access(exe, os.X_OK):
        return "no executable"
    if (problem := check_sonames(exe, strategy)) is not None:
        return problem
    if name == "lenet" and gpus == 1 and not gpu and not mixed:
        if (problem := check_preflight_stub(exe, tmp)) is not None:
            return problem
    r = subprocess.run([exe, "--steps=1", "--progress=off"], capture_output=True, text=True,
                       timeout=600)
    if gpu and r.returncode != 0:
        return f"trainer exited {r.returncode}: {r.stderr[-800:]}"
    if gpu:
        return check_processes(exe, gpu) if (name, gpus, strategy) == PROCESSES else None
    if r.returncode != 1 or "--target=cpu" not in r.stderr or "GPU" not in r.stderr:
        return f"without a GPU: exit {r.returncode}, stderr {r.stderr.strip()[:400]!r}"
    # Without a driver the start-up preflight says so, and what to install.
    if not has_driver() and "CUDA preflight: no NVIDIA driver found" not in r.stderr:
        return f"without a driver: no preflight message in {r.stderr.strip()[:400]!r}"
    if (name, gpus, strategy) == PROCESSES:
        return check_processes(exe, gpu)
    return None


def check_compare(tmp):
    """tools/gpu/compare.py on CPU dumps of LeNet's first step, --gpus 2 and 1."""
    import shutil
    import numpy as np
    compare = os.path.join(ROOT, "tools", "gpu", "compare.py")
    path = os.path.join(tmp, "lenet.onnx")
    data = os.path.join(tmp, "compare-data")
    os.makedirs(data, exist_ok=True)
    rng = np.random.default_rng(11)
    rng.standard_normal([2, 1, 28, 28]).astype(np.float32).tofile(os.path.join(data, "input_0.bin"))
    rng.integers(0, 10, size=2).astype(np.int64).tofile(os.path.join(data, "input_1.bin"))
    dumps = {}
    for gpus in (1, 2):
        exe = os.path.join(tmp, f"lenet-cpu-g{gpus}")
        flags = [f"--gpus={gpus}", "--strategy=data"] if gpus > 1 else []
        r = subprocess.run([LWCC, path, "--target=cpu", "-o", exe] + flags, capture_output=True,
                           text=True, timeout=900)
        if r.returncode != 0:
            return f"lwcc --target=cpu --gpus={gpus} exited {r.returncode}: {r.stderr[-800:]}"
        dumps[gpus] = os.path.join(tmp, f"compare-g{gpus}")
        r = subprocess.run([exe, "--steps=1", f"--data=raw:{data}", f"--dump={dumps[gpus]}",
                            "--progress=off"], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            return f"the CPU --gpus {gpus} trainer exited {r.returncode}: {r.stderr[-800:]}"

    def run(*args):
        return subprocess.run([sys.executable, compare, *args], capture_output=True, text=True)
    off = os.path.join(tmp, "compare-off")
    shutil.copytree(dumps[2], off)
    grad = os.path.join(off, "output_1.bin")
    g = np.fromfile(grad, np.float32)
    g[0] += 0.05 * float(np.max(np.abs(g)))
    g.tofile(grad)
    gone = os.path.join(tmp, "compare-gone")
    shutil.copytree(dumps[2], gone)
    os.remove(os.path.join(gone, "param_fc1.weight.bin"))
    # A bf16 step's tolerance (check.sh: --tol=2e-2) takes a gradient 1% off.
    near = os.path.join(tmp, "compare-near")
    shutil.copytree(dumps[2], near)
    g = np.fromfile(os.path.join(near, "output_1.bin"), np.float32)
    g[0] += 0.01 * float(np.max(np.abs(g)))
    g.tofile(os.path.join(near, "output_1.bin"))
    for args, want in (((dumps[2], dumps[2]), 0), (("--params-only", dumps[1], dumps[2]), 0),
                       ((dumps[2], off), 1), ((dumps[2], gone), 1), ((dumps[2], near), 1),
                       (("--tol=2e-2", dumps[2], near), 0), (("--tol=2e-2", dumps[2], off), 1)):
        r = run(*args)
        if r.returncode != want:
            return f"compare.py {' '.join(args)}: exit {r.returncode}, not {want}: {r.stdout}"
    return None


def build_pattern(label):
    """The exporter pattern of this label, with a static batch."""
    case = next(c for c in ep.CASES if c["label"] == label)
    return ep.build(dict(case, sym=False))


def main():
    gpu = has_gpu()
    cases = [(name, 1, None) for name in zoo.REGISTRY] + MULTI + EXTRA + MIXED
    with tempfile.TemporaryDirectory(prefix="lwcc-cuda-build-") as tmp:
        # The ONNX files first: a model's cases share one.
        for name in {c[0] for c in cases}:
            model = (build_pattern(PATTERNS[name]) if name in PATTERNS else
                     zoo.build(name, test_size=True))
            onnx.save(model, os.path.join(tmp, name + ".onnx"))
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as ex:
            futures = {c: ex.submit(check, c[0], tmp, gpu, *c[1:]) for c in cases}
            compared = ex.submit(check_compare, tmp)
            for c in cases:
                name = c[0] + (f" --gpus {c[1]} --strategy={c[2]}" if c[1] > 1 else
                               " --streams=4" if c[2] == "streams" else
                               " --streams=4 --fragments=2" if c[2] == "fragments" else "")
                name += f" --mixed-precision={c[3]}" if len(c) > 3 else ""
                try:
                    problem = futures[c].result()
                except Exception as e:  # noqa: BLE001 - any failure fails the case
                    problem = str(e)
                harness.record(problem is None, name, problem,
                               "" if problem else "(built with nvcc; " +
                               ("ran one step" if gpu else "no GPU here: exit 1 with the hint") +
                               ")")
            try:
                problem = compared.result()
            except Exception as e:  # noqa: BLE001 - any failure fails the case
                problem = str(e)
            harness.record(problem is None, "the GPU check's comparison on CPU --gpus 2 dumps",
                           problem)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
