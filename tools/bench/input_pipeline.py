#!/usr/bin/env python3
"""Throughput of the trainer's input pipeline, on a model that does almost nothing.

Builds a tiny classifier (GlobalAveragePool + one Gemm, input 128x3x224x224,
10 classes), compiles it with `lwcc --target=cpu`, and prints img/s of:
  - training with --data=synthetic and with --data=idx:DIR (Fashion-MNIST,
    28x28 gray resized to 224x224, replicated to 3 channels), a fixed number
    of steps each;
  - the input pipeline alone (--data-only: batches prepared, nothing trained)
    for both sources.
The step itself costs one pass over the batch, so the numbers measure how
fast batches reach the step.

With --folder (Pillow writes --images 400x300 quality-90 JPEGs, photo-like:
smooth color fields with grain, into a temporary image folder):
  - the loader alone (--data=folder:DIR --data-only, random resized crops to
    224x224 and flips, batch 128) at --threads threads, against PyTorch's
    DataLoader with as many workers over the same files (ImageFolder,
    RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize), in
    one run, alternating (--rounds); PyTorch's time leaves out its first
    batch (the workers' start). Also the CPU time each spends per image
    (user and system, every thread and worker process), which a loaded
    machine changes less than the rates;
  - one thread's rates (build/bin/lwcc-images rate): libjpeg-turbo decoding
    each file whole (the physical limit of this path), the loader decoding
    only the crop, and the loader's decode and transform.
PyTorch is needed only for its row: --torch-python names a Python that has
torch and torchvision (default: this one; the row is skipped without it).

  python3 tools/bench/input_pipeline.py [--lwcc build/bin/lwcc] [--steps 60]
      [--data /usr/share/datasets/fashion-mnist] [--batch 128] [--size 224]
      [--data-only | --no-data-only] [--folder [--images 1024] [--threads 2]
      [--rounds 3] [--torch-python PY]] [-- EXTRA TRAINER FLAGS]

--lwcc may name another build's lwcc (an older one, to compare); a trainer
without --data-only gets its loader rows skipped.
"""
import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

import onnx
from onnx import TensorProto, helper, numpy_helper
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tiny_model(path, batch, size, classes):
    """image [batch,3,size,size] -> GlobalAveragePool -> Flatten -> Gemm -> logits."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((classes, 3)) * 0.1).astype(np.float32), "fc.weight")
    b = numpy_helper.from_array(np.zeros(classes, np.float32), "fc.bias")
    nodes = [
        helper.make_node("GlobalAveragePool", ["image"], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny_gap_gemm",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])],
        initializer=[w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)


def run(cmd):
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout, time.time() - t


def rate(out, pattern):
    m = re.search(pattern, out)
    return float(m.group(1)) if m else None


def make_jpegs(root, count, seed=0):
    """`count` 400x300 quality-90 JPEGs in 4 class folders: smooth color
    fields with grain, which compress about as photos do (~40 KB)."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    for k in range(count):
        folder = os.path.join(root, "train", f"class{k % 4}")
        os.makedirs(folder, exist_ok=True)
        small = rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)
        im = np.asarray(Image.fromarray(small).resize((400, 300), Image.BICUBIC), np.int16)
        im = np.clip(im + rng.integers(-12, 12, im.shape), 0, 255).astype(np.uint8)
        Image.fromarray(im).save(os.path.join(folder, f"{k:05d}.jpg"), quality=90)


TORCH_LOADER = r"""
import resource, sys, time, torch, torchvision
from torchvision import transforms as T
root, batch, size, workers, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(1)
tf = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
data = torchvision.datasets.ImageFolder(root, transform=tf)
loader = torch.utils.data.DataLoader(data, batch_size=batch, shuffle=True, num_workers=workers,
                                     drop_last=True)
def cpu():
    return sum(getattr(resource.getrusage(who), f) for who in
               (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))
seen, first, started, cpu0 = 0, None, time.time(), cpu()
it = iter(loader)
while seen < batches + 1:
    try:
        images, labels = next(it)
    except StopIteration:
        it = iter(loader)
        continue
    seen += 1
    if first is None:
        first = time.time()
rate = batches * batch / (time.time() - first)
del it  # the workers exit, and their CPU time is counted
time.sleep(0.5)
print(f"torch {rate:.1f} {(cpu() - cpu0) / ((batches + 1) * batch) * 1000:.3f}")
"""


def folder_bench(args, exe, tmp):
    data = os.path.join(tmp, "jpegs")
    t = time.time()
    make_jpegs(data, args.images)
    print(f"wrote {args.images} 400x300 quality-90 JPEGs ({sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(data) for f in fs) / args.images / 1024:.1f} KB each) "
          f"in {time.time() - t:.1f} s")
    has_torch = subprocess.run([args.torch_python, "-c", "import torch, torchvision"],
                               capture_output=True).returncode == 0
    lw, pt, lw_cpu, pt_cpu = [], [], [], []
    for _ in range(args.rounds):  # alternating, so that both see the same load
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out, _ = run([exe, f"--data=folder:{data}", "--data-only", f"--steps={args.steps}",
                      f"--data-threads={args.threads}", "--progress=off", *args.extra])
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        lw.append(rate(out, r"batches in [0-9.]+ s \(([0-9.]+) img/s\)"))
        lw_cpu.append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
                      / (args.steps * args.batch) * 1000)
        if has_torch:
            out, _ = run([args.torch_python, "-c", TORCH_LOADER, os.path.join(data, "train"),
                          str(args.batch), str(args.size), str(args.threads), str(args.steps)])
            pt.append(float(out.split()[1]))
            pt_cpu.append(float(out.split()[2]))
    print(f"folder of JPEGs, random resized crops to {args.size}x{args.size} and flips, batch "
          f"{args.batch}, {args.steps} batches, {args.threads} threads / workers, "
          f"best of {args.rounds}:")
    print(f"  lwcc loader (--data-only)        {max(lw):>10.1f} img/s   (runs: {', '.join(f'{x:.0f}' for x in lw)}); "
          f"CPU {min(lw_cpu):.2f} ms/img (the whole trainer)")
    if pt:
        print(f"  PyTorch DataLoader + torchvision {max(pt):>10.1f} img/s   (runs: {', '.join(f'{x:.0f}' for x in pt)}); "
              f"CPU {min(pt_cpu):.2f} ms/img (loader and workers)")
        print(f"  lwcc / PyTorch                   {max(lw) / max(pt):>10.2f}x img/s, "
              f"{min(pt_cpu) / min(lw_cpu):.2f}x less CPU per image")
    else:
        print(f"  PyTorch: no torch and torchvision in {args.torch_python}: row skipped")
    tool = os.path.join(os.path.dirname(args.lwcc), "lwcc-images")
    out, _ = run([tool, "rate", data, f"--size={args.size}"])
    print("one thread (lwcc-images rate):")
    for line in out.strip().splitlines():
        print("  " + line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lwcc", default=os.path.join(ROOT, "build", "bin", "lwcc"))
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--data-only", action=argparse.BooleanOptionalAction, default=True,
                    help="also time the loader alone (trainers with --data-only)")
    ap.add_argument("--folder", action="store_true",
                    help="only the image-folder rows (JPEGs against PyTorch's DataLoader)")
    ap.add_argument("--images", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--torch-python", default=sys.executable)
    ap.add_argument("extra", nargs="*", help="flags passed to every trainer run")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="lwcc-bench-input-") as tmp:
        model = os.path.join(tmp, "tiny.onnx")
        exe = os.path.join(tmp, "tiny-trainer")
        tiny_model(model, args.batch, args.size, 10)
        run([args.lwcc, model, "--target=cpu", "-o", exe])
        print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at the start")
        if args.folder:
            folder_bench(args, exe, tmp)
            return 0
        common = [f"--steps={args.steps}", "--progress=off", *args.extra]
        rows = []
        for name, data in (("synthetic", "--data=synthetic"), ("idx", f"--data=idx:{args.data}")):
            out, wall = run([exe, data, *common])
            rows.append((f"train, {name}", rate(out, r"\(([0-9.]+) img/s\)"), wall))
            if args.data_only:
                out, wall = run([exe, data, "--data-only", *common])
                drawn = rate(out, r"drew [0-9]+ batches up front in [0-9.]+ s \(([0-9.]+) img/s\)")
                if drawn is not None:  # a pool of batches: the drawing is the work
                    rows.append((f"loader alone, {name} (draw)", drawn, wall))
                else:
                    rows.append((f"loader alone, {name}", rate(out, r"batches in [0-9.]+ s \(([0-9.]+) img/s\)"), wall))
        print(f"tiny model (GlobalAveragePool + Gemm), input {args.batch}x3x{args.size}x{args.size}, "
              f"{args.steps} steps, CPU target, {os.cpu_count()} cores; lwcc: {args.lwcc}")
        print(f"  {'run':<26} {'img/s':>10} {'wall s':>8}")
        for name, r, wall in rows:
            print(f"  {name:<26} {r if r is not None else float('nan'):>10.1f} {wall:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
