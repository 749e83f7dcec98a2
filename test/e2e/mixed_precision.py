#!/usr/bin/env python3
"""bf16 mixed precision (`lwcc --mixed-precision=bf16`) in CPU trainers.

- For zoo models at test size, one step of the bf16 CPU trainer against the
  reference interpreter's bf16 step (`lwcc --train-reference` with the same
  flag): loss, gradients and updated params within a relative 1e-2 (the two
  round the same float32 values to bf16; a sum in another order may land one
  bf16 step away). The bf16 step must differ from the float32 reference: the
  flag changes the arithmetic.
- LeNet trained one epoch on Fashion-MNIST: bf16 top-1 within 0.01 of
  float32's (the same seed and batches).
- Data parallelism: a `--gpus 2 --strategy=data` bf16 trainer's losses
  within 1e-2 of the one-device bf16 trainer's (each device rounds its half
  batch's weight gradient to bf16 before the float32 all-reduce).
- Usage errors exit 2 with the reason: fp16, a CUDA trainer, model
  parallelism, --precision=f64.
Ends with the line "N passed, M failed".
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "models"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trainer_vs_reference as tvr  # noqa: E402
import zoo  # noqa: E402

LWCC = os.path.join(ROOT, "build", "bin", "lwcc")
GEN = os.path.join(ROOT, "tools", "models", "gen.py")
FASHION = "/usr/share/datasets/fashion-mnist"
BF16 = "--mixed-precision=bf16"


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}... exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def with_flags(flags):
    """trainer_vs_reference's run, with `flags` added to every lwcc command."""
    def wrapped(cmd):
        if cmd[0] == LWCC:
            cmd = cmd + flags
        return run(cmd)
    return wrapped


def losses(log):
    with open(log) as f:
        return [r["loss"] for r in map(json.loads, f) if r.get("type") == "step"]


def accuracy(log):
    with open(log) as f:
        return [r["accuracy"] for r in map(json.loads, f) if r.get("type") == "eval"][-1]


def check_reference(name, tmp):
    model = zoo.build(name, test_size=True)
    tvr.run = with_flags([BF16])
    worst, checked, nparams, ngrads = tvr.check_model(model, name, tmp)
    ok = worst < 1e-2 and checked == ngrads and checked > 0
    # The float32 reference of the same step: the bf16 loss differs from it.
    ref32 = os.path.join(tmp, name + "_ref32")
    data = os.path.join(tmp, name + "_data")
    run([LWCC, os.path.join(tmp, name + ".onnx"), "--train-reference", "--inputs", data,
         "--steps", "1", "--dump", ref32])
    loss16 = np.fromfile(os.path.join(tmp, name + "_got", "output_0.bin"), np.float32)[0]
    loss32 = float(onnx.numpy_helper.to_array(
        onnx.load_tensor(os.path.join(ref32, "loss_0.pb"))).ravel()[0])
    differs = loss16 != np.float32(loss32)
    return ok and differs, (f"bf16 trainer vs bf16 reference: worst relative error {worst:.2e} "
                            f"over the loss, {checked} gradients, {nparams} params; loss "
                            f"{loss16:.6f} (float32 {loss32:.6f})")


def check_lenet_epoch(tmp):
    onnx_path = os.path.join(tmp, "lenet64.onnx")
    run([sys.executable, GEN, "lenet", "--batch", "64", "-o", onnx_path])
    procs, acc = [], {}
    for mode in ("off", "bf16"):
        exe = os.path.join(tmp, f"lenet_{mode}")
        run([LWCC, onnx_path, "--target=cpu", f"--mixed-precision={mode}", "-o", exe])
    for mode in ("off", "bf16"):  # both at once: one thread each
        log = os.path.join(tmp, f"lenet_{mode}.jsonl")
        procs.append((mode, log, subprocess.Popen(
            [os.path.join(tmp, f"lenet_{mode}"), f"--data=idx:{FASHION}", "--epochs=1",
             "--eval", "--seed=1", "--threads=1", "--progress=off", f"--log={log}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)))
    for mode, log, p in procs:
        _, err = p.communicate(timeout=900)
        if p.returncode != 0:
            raise RuntimeError(f"lenet_{mode} exited {p.returncode}: {err.strip()}")
        acc[mode] = accuracy(log)
    ok = abs(acc["bf16"] - acc["off"]) <= 0.01 and acc["off"] > 0.8
    return ok, f"one Fashion-MNIST epoch: top-1 bf16 {acc['bf16']:.4f}, float32 {acc['off']:.4f}"


def check_data_parallel(tmp):
    path = os.path.join(tmp, "lenet8.onnx")
    onnx.save(zoo.build("lenet", test_size=True), path)
    got = {}
    for gpus in (1, 2):
        exe = os.path.join(tmp, f"lenet_bf16_g{gpus}")
        extra = ["--gpus", "2", "--strategy=data"] if gpus == 2 else []
        run([LWCC, path, "--target=cpu", BF16, "-o", exe] + extra)
        log = os.path.join(tmp, f"dp{gpus}.jsonl")
        run([exe, "--steps=5", "--data=synthetic", "--seed=3", "--progress=off", f"--log={log}"])
        got[gpus] = losses(log)
    worst = max(abs(a - b) / abs(b) for a, b in zip(got[2], got[1]))
    ok = len(got[2]) == 5 and worst < 1e-2 and all(np.isfinite(got[2]))
    return ok, f"--gpus 2 data vs one device, bf16: 5 losses, worst relative difference {worst:.2e}"


def check_usage(tmp):
    path = os.path.join(tmp, "lenet8.onnx")
    if not os.path.exists(path):
        onnx.save(zoo.build("lenet", test_size=True), path)
    cases = [
        (["--mixed-precision=fp16", "--target=cpu"], "loss scaling"),
        (["--mixed-precision=half", "--target=cpu"], "not one of"),
        ([BF16], "CPU trainers only"),
        ([BF16, "--target=cpu", "--gpus", "2", "--strategy=model"], "--strategy=data"),
        ([BF16, "--target=cpu", "--precision=f64"], "f64"),
    ]
    bad = []
    for flags, says in cases:
        r = subprocess.run([LWCC, path, "-o", os.path.join(tmp, "never")] + flags,
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 2 or says not in r.stderr:
            bad.append(f"{' '.join(flags)}: exit {r.returncode}, {r.stderr.strip()[:120]}")
    return not bad, "; ".join(bad) or f"{len(cases)} bad flag sets refused with exit 2"


def main():
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        checks = [(f"{name} reference", lambda n=name: check_reference(n, tmp))
                  for name in ("lenet", "alexnet", "resnet18", "inception")]
        checks += [("lenet epoch", lambda: check_lenet_epoch(tmp)),
                   ("data parallel", lambda: check_data_parallel(tmp)),
                   ("usage", lambda: check_usage(tmp))]
        for label, fn in checks:
            try:
                ok, msg = fn()
            except Exception as e:  # noqa: BLE001 - report and count it
                ok, msg = False, str(e)
            print(f"{'PASS' if ok else 'FAIL'}: {label:18s} {msg}", flush=True)
            passed += ok
            failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
