#!/usr/bin/env python3
"""bf16 and fp16 mixed precision (`lwcc --mixed-precision=bf16|fp16`) in CPU trainers.

- For zoo models at test size (and an alexnet whose linear layers are
  MatMul + Add, as the dynamo exporter writes them), one step of the bf16
  CPU trainer against the
  reference interpreter's bf16 step (`lwcc --train-reference` with the same
  flag): loss, gradients and updated params within a relative 1e-2 (the two
  round the same float32 values to bf16; a sum in another order may land one
  bf16 step away). The bf16 step must differ from the float32 reference: the
  flag changes the arithmetic. The same for an Inception-v3 block, whose
  pool branch's average pool and its gradient must run in bf16.
- LeNet trained one epoch on Fashion-MNIST: bf16's and fp16's top-1 within
  0.01 of float32's (the same seed and batches).
- Every strategy (data, model, owt, layerwise, hypergraph, a 2-stage
  pipeline): the `--gpus 2` bf16 and fp16 trainers' 3 losses, and params
  and momenta after a step, within 1e-2 and 2e-2 of the one-device
  trainer's (each device rounds
  its pieces and partial sums, and the collectives carry 16-bit values).
- ResNet-18 in bf16 (16-bit batch norms, residual adds) model and data
  parallel on 2 devices: the first loss equals one device's.
- fp16 with dynamic loss scaling: the trainer's step against the
  interpreter's (lenet, alexnet); a LeNet trainer started at a loss scale
  of 2^24 (one device, two with data and with model parallelism) skips the
  steps
  whose fp16 gradients overflow, says so on stderr, in its log and in its
  summary, halves the scale at each and doubles it after
  `--loss-scale-interval` finite steps; a skipped step leaves every param
  (every replica) bit for bit as it was.
- Usage errors exit 2 with the reason: an unknown type, a CUDA trainer,
  --precision=f64, a loss scale that is not a power of
  two or without fp16.
Ends with the line "N passed, M failed".
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import GEN, LWCC, ROOT  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "tools", "models"))
import exporter_graphs as eg  # noqa: E402
import torchvision_graphs as tv  # noqa: E402
import trainer_vs_reference as tvr  # noqa: E402
import zoo  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist"
BF16 = "--mixed-precision=bf16"
FP16 = "--mixed-precision=fp16"


def run(cmd, **kw):
    return harness.check_output(cmd, timeout=900, **kw).stdout


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


def check_reference(name, tmp, flags=(BF16,), model=None):
    model = model or zoo.build(name, test_size=True)
    tvr.run = with_flags(list(flags))
    worst, checked, nparams, ngrads = tvr.check_model(model, name, tmp)
    # A NaN would slip through the comparison: every output must be finite.
    got = os.path.join(tmp, name + "_got")
    finite = all(np.all(np.isfinite(np.fromfile(os.path.join(got, f), np.float32)))
                 for f in os.listdir(got) if f.startswith("output_"))
    ok = worst < 1e-2 and checked == ngrads and checked > 0 and finite
    # The float32 reference of the same step: the bf16 loss differs from it.
    ref32 = os.path.join(tmp, name + "_ref32")
    data = os.path.join(tmp, name + "_data")
    run([LWCC, os.path.join(tmp, name + ".onnx"), "--train-reference", "--inputs", data,
         "--steps", "1", "--dump", ref32])
    loss16 = np.fromfile(os.path.join(tmp, name + "_got", "output_0.bin"), np.float32)[0]
    loss32 = float(onnx.numpy_helper.to_array(
        onnx.load_tensor(os.path.join(ref32, "loss_0.pb"))).ravel()[0])
    differs = loss16 != np.float32(loss32)
    kind = flags[0].split("=")[1]
    return ok and differs, (f"{kind} trainer vs {kind} reference: worst relative error "
                            f"{worst:.2e} over the loss, {checked} gradients, {nparams} params; "
                            f"loss {loss16:.6f} (float32 {loss32:.6f})")


def check_lenet_epoch(tmp):
    onnx_path = os.path.join(tmp, "lenet64.onnx")
    run([sys.executable, GEN, "lenet", "--batch", "64", "-o", onnx_path])
    procs, acc = [], {}
    modes = ("off", "bf16", "fp16")
    for mode in modes:
        exe = os.path.join(tmp, f"lenet_{mode}")
        run([LWCC, onnx_path, "--target=cpu", f"--mixed-precision={mode}", "-o", exe])
    for mode in modes:  # all at once: one thread each
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
    ok = (abs(acc["bf16"] - acc["off"]) <= 0.01 and abs(acc["fp16"] - acc["off"]) <= 0.01 and
          acc["off"] > 0.8)
    return ok, (f"one Fashion-MNIST epoch: top-1 bf16 {acc['bf16']:.4f}, fp16 {acc['fp16']:.4f}, "
                f"float32 {acc['off']:.4f}")


def check_matmul(tmp):
    """Linear layers as the dynamo exporter writes them (MatMul + Add) run in
    bf16 too: the step against the interpreter's."""
    model = tv.alexnet(eg.Builder("mm", "dyn", (3, 99, 99), batch=2, sym_batch=False, seed=5),
                       lin="matmul")
    ok, msg = check_reference("alexnet_mm", tmp, model=model)
    ir = run([LWCC, os.path.join(tmp, "alexnet_mm.onnx"), BF16, "--emit=train-ir"])
    mm = [line for line in ir.splitlines() if "= matmul(" in line]
    low = [line for line in mm if ": bf16[" in line]
    ok = ok and len(mm) > 0 and len(low) == len(mm)
    return ok, f"{msg}; {len(low)} of {len(mm)} matmuls in bf16"


def check_avgpool(tmp):
    """Average pooling of bf16 activations (an Inception-v3 block: its pool
    branch averages 3x3 windows counting the padding, then a 1x1 conv): the
    pool and its gradient run in bf16, and the step equals the
    interpreter's."""
    import zoo  # noqa: E402  (tools/models)
    b = zoo.NetBuilder("v3_block", size=12, channels=3, batch=4, opset=17, seed=3,
                       symbolic_batch=False, min_size=1)
    c = lambda n: max(2, n // 8)  # noqa: E731
    x = zoo._v3_conv(b, b.input, 8, 3, pad=1, name="stem")
    x = zoo._v3_a(b, x, 16, c, "Mixed_5b")
    x = b.flatten(b.global_avgpool(x, name="avgpool"), name="flatten")
    model = b.model(b.gemm(x, 10, name="fc", gain=1.0), doc="an Inception-v3 block")
    ok, msg = check_reference("v3_block", tmp, model=model)
    ir = run([LWCC, os.path.join(tmp, "v3_block.onnx"), BF16, "--emit=train-ir"])
    pools = [line for line in ir.splitlines() if "avg_pool2d" in line]
    low = [line for line in pools if ": bf16[" in line]
    ok = ok and len(pools) == 2 and len(low) == 2
    return ok, f"{msg}; {len(low)} of {len(pools)} avg_pool2d and gradient in bf16"


def step_records(log):
    with open(log) as f:
        return [r for r in map(json.loads, f) if r.get("type") == "step"]


def check_fp16_skips(tmp, gpus, strategy="data"):
    """A loss scale of 2^24 overflows LeNet's fp16 gradients: those steps are
    skipped, reported, and change no param (on every device); the scale
    follows the rule."""
    path = os.path.join(tmp, "lenet8.onnx")
    model = zoo.build("lenet", test_size=True)
    onnx.save(model, path)
    exe = os.path.join(tmp, f"lenet_fp16_g{gpus}")
    extra = ["--gpus", str(gpus), f"--strategy={strategy}"] if gpus > 1 else []
    run([LWCC, path, "--target=cpu", FP16, "--loss-scale=16777216", "--loss-scale-interval=2",
         "-o", exe] + extra)
    log = os.path.join(tmp, "fp16.jsonl")
    r = harness.check_output([exe, "--steps=24", "--data=synthetic", "--seed=3", "--progress=off",
                              f"--log={log}"])
    recs = step_records(log)
    skipped = [rec.get("skipped", False) for rec in recs]
    # The rule, replayed from the flags: halve on a skip, double after 2
    # finite steps in a row.
    scale, good, bad = 16777216.0, 0, []
    for rec, skip in zip(recs, skipped):
        if skip:
            scale, good = scale / 2, 0
        else:
            good += 1
            if good == 2:
                scale, good = scale * 2, 0
        if rec.get("loss_scale") != scale:
            bad.append(f"step {rec['step']}: scale {rec.get('loss_scale')}, rule {scale}")
    said = r.stderr.count("fp16 gradients overflowed")
    summary = f"fp16: {sum(skipped)} of 24 steps skipped"
    ok = (len(recs) == 24 and skipped[0] and not all(skipped) and not bad and
          said == sum(skipped) and summary in r.stdout)
    # The first step is skipped: one step changes no param (bit for bit).
    dump = os.path.join(tmp, f"fp16_dump_g{gpus}_{strategy}")
    replicas = ["--check-replicas"] if gpus > 1 else []
    run([exe, "--steps=1", "--data=synthetic", "--seed=3", "--progress=off",
         f"--dump={dump}"] + replicas)
    changed = []
    for init in model.graph.initializer:
        want = onnx.numpy_helper.to_array(init).astype(np.float32)
        have = np.fromfile(os.path.join(dump, f"param_{tvr.safe(init.name)}.bin"), np.float32)
        if have.tobytes() != want.ravel().tobytes():
            changed.append(init.name)
    scale1 = np.fromfile(os.path.join(dump, "param_loss_scale.bin"), np.float32)
    ok = ok and not changed and scale1.tolist() == [8388608.0]
    return ok, (f"24 steps from 2^24: {sum(skipped)} skipped and said so ({said} lines), "
                f"scale {recs[-1].get('loss_scale') if recs else None} by the rule"
                f"{'; ' + '; '.join(bad[:3]) if bad else ''}; a skipped step changed "
                f"{len(changed)} params, scale after it {scale1.tolist()}")


def check_fp16_adam(tmp):
    """Adam under fp16 loss scaling counts its updates, not the steps: after
    the skipped steps from 2^24, the first update made is Adam's first
    (bias-corrected to lr * g / (|g| + eps), so each tensor's largest change
    is lr), as PyTorch's Adam behind GradScaler; the lr schedule's counter
    still counts every step."""
    path = os.path.join(tmp, "lenet8.onnx")
    model = zoo.build("lenet", test_size=True)
    onnx.save(model, path)
    exe = os.path.join(tmp, "lenet_fp16_adam")
    lr = 0.001
    run([LWCC, path, "--target=cpu", FP16, "--loss-scale=16777216", "--optimizer=adam",
         f"--lr={lr}", "-o", exe])
    log = os.path.join(tmp, "fp16_adam.jsonl")
    run([exe, "--steps=12", "--data=synthetic", "--seed=3", "--progress=off", f"--log={log}"])
    skipped = [rec.get("skipped", False) for rec in step_records(log)]
    first = skipped.index(False) if False in skipped else None
    if not first:
        return False, f"no skipped step before a finite one: {skipped}"
    dump = os.path.join(tmp, "fp16_adam_dump")
    run([exe, f"--steps={first + 1}", "--data=synthetic", "--seed=3", "--progress=off",
         f"--dump={dump}"])
    changes = {}
    for init in model.graph.initializer:
        want = onnx.numpy_helper.to_array(init).astype(np.float32).ravel()
        have = np.fromfile(os.path.join(dump, f"param_{tvr.safe(init.name)}.bin"), np.float32)
        changes[init.name] = float(np.max(np.abs(have.astype(np.float64) - want)))
    counters = {}
    for name in ("opt.adam_step", "train.step"):
        f = os.path.join(dump, f"param_{tvr.safe(name)}.bin")
        counters[name] = np.fromfile(f, np.int64).tolist() if os.path.exists(f) else None
    worst = max(abs(c / lr - 1) for c in changes.values())
    ok = (worst < 1e-2 and counters["opt.adam_step"] == [1] and
          counters["train.step"] == [first + 1])
    return ok, (f"{first} steps skipped, then the first update: each tensor's largest change "
                f"within {worst:.1e} of lr; counters {counters}")


STRATEGIES = {
    "data": ["--strategy=data"],
    "model": ["--strategy=model"],
    "owt": ["--strategy=owt"],
    "layerwise": ["--strategy=layerwise"],
    "hypergraph": ["--strategy=hypergraph"],
    "pipeline": ["--strategy=pipeline", "--stages=2", "--microbatches=2"],
}


def run_lenet(tmp, flags, extra, name, model="lenet"):
    """LeNet (or another zoo model, test size) trained 3 steps: its losses
    and skips; and its params and optimizer state after one step."""
    path = os.path.join(tmp, "lenet8.onnx" if model == "lenet" else model + ".onnx")
    if not os.path.exists(path):
        onnx.save(zoo.build(model, test_size=True), path)
    exe = os.path.join(tmp, name)
    run([LWCC, path, "--target=cpu", "-o", exe] + flags + extra)
    log, dump = os.path.join(tmp, name + ".jsonl"), os.path.join(tmp, name + "_dump")
    run([exe, "--steps=3", "--data=synthetic", "--seed=3", "--progress=off", f"--log={log}"])
    run([exe, "--steps=1", "--data=synthetic", "--seed=3", "--progress=off", f"--dump={dump}"])
    params = {f: np.fromfile(os.path.join(dump, f), np.float32)
              for f in os.listdir(dump) if f.startswith("param_")}
    return losses(log), [r.get("skipped", False) for r in step_records(log)], params


def check_strategy(tmp, strategy, flags, one):
    """The 2-device trainer of `strategy` against the one-device trainer,
    both in 16 bits: 3 losses, and every param and momentum (the first
    step's gradient) after one step, within 1e-2 and 2e-2 (relative to the
    tensor's largest entry). Each strategy rounds its pieces, partial sums and
    exchanged values to 16 bits where one device rounds the whole: one bf16
    step is 2^-8 of a value (later steps' momenta, sums of tiny gradients,
    part by more as training goes on). fp16 at a scale
    where no step overflows: a device's fp16 gradients are those of its
    piece of the work, so where overflow starts differs from one device's
    (as in any parallel fp16 training)."""
    kind = flags[0].split("=")[1]
    if kind not in one:
        one[kind] = run_lenet(tmp, flags, [], f"lenet_{kind}_one")
    want_loss, want_skips, want = one[kind]
    got_loss, got_skips, got = run_lenet(tmp, flags, ["--gpus", "2"] + STRATEGIES[strategy],
                                         f"lenet_{kind}_{strategy}")
    worst = max(abs(a - b) / abs(b) for a, b in zip(got_loss, want_loss))
    worst_param = max(float(np.max(np.abs(got[f] - want[f]))) / float(np.max(np.abs(want[f])))
                      for f in want)
    ok = (len(got_loss) == 3 and worst < 1e-2 and all(np.isfinite(got_loss)) and
          worst_param < 2e-2 and set(got) == set(want) and not any(got_skips) and
          not any(want_skips))
    return ok, (f"--gpus 2 vs one device, {kind}: 3 losses within {worst:.2e}, "
                f"{len(got)} params and momenta after a step within {worst_param:.2e}")


def check_resnet(tmp, strategy, one):
    """ResNet-18 (test size) in bf16 on 2 devices, model or data parallel:
    its 16-bit batch norms split over samples (statistics summed across
    devices in float32; data parallel: one device's batch norm kernels, with
    their fused ReLUs, and all-reduces of the statistics and of the two
    gradient sums), residual adds and relus run; the first loss equals the
    one-device trainer's within 1e-3 and every loss is finite. Later steps
    drift further apart: the test size's last batch norms see two values per
    channel and magnify each device's own bf16 rounding."""
    if "resnet18" not in one:
        one["resnet18"] = run_lenet(tmp, [BF16], [], "resnet18_bf16_one", "resnet18")[0]
    want = one["resnet18"]
    two, _, params = run_lenet(tmp, [BF16], ["--gpus", "2", f"--strategy={strategy}"],
                               f"resnet18_bf16_{strategy}", "resnet18")
    first = abs(two[0] - want[0]) / abs(want[0])
    finite = all(np.isfinite(two)) and all(np.all(np.isfinite(v)) for v in params.values())
    ok = len(two) == 3 and first < 1e-3 and finite
    return ok, (f"--gpus 2 --strategy={strategy} vs one device: first loss {two[0]:.6f} vs "
                f"{want[0]:.6f} ({first:.1e}), losses {', '.join(f'{v:.4f}' for v in two)}")


def check_usage(tmp):
    path = os.path.join(tmp, "lenet8.onnx")
    if not os.path.exists(path):
        onnx.save(zoo.build("lenet", test_size=True), path)
    cases = [
        (["--mixed-precision=half", "--target=cpu"], "not one of"),
        ([FP16, "--target=cpu", "--loss-scale=1000"], "power of two"),
        ([BF16, "--target=cpu", "--loss-scale=1024"], "go with --mixed-precision=fp16"),
        ([FP16, "--target=cpu", "--loss-scale-interval=0"], ">= 1"),
        ([BF16, "--target=cpu", "--precision=f64"], "f64"),
    ]
    bad = []
    for flags, says in cases:
        r = harness.run([LWCC, path, "-o", os.path.join(tmp, "never")] + flags, timeout=120)
        if r.returncode != 2 or says not in r.stderr:
            bad.append(f"{' '.join(flags)}: exit {r.returncode}, {r.stderr.strip()[:120]}")
    return not bad, "; ".join(bad) or f"{len(cases)} bad flag sets refused with exit 2"


def main():
    with tempfile.TemporaryDirectory() as tmp:
        checks = [(f"{name} reference", lambda n=name: check_reference(n, tmp))
                  for name in ("lenet", "alexnet", "resnet18", "inception")]
        # A scale at which the step's fp16 gradients stay finite.
        # At a scale where the step's fp16 gradients stay finite. Not the
        # test-size resnet18: its last batch norms see two values per
        # channel, whose backward magnifies a sum that rounds to the
        # neighbouring fp16 value (a float32 sum in another order) into
        # percents.
        checks += [(f"{name} fp16 reference",
                    lambda n=name: check_reference(n, tmp, (FP16, "--loss-scale=256")))
                   for name in ("lenet", "alexnet")]
        checks += [("alexnet MatMul bf16", lambda: check_matmul(tmp))]
        checks += [("avg pool bf16", lambda: check_avgpool(tmp))]
        checks += [("fp16 skips", lambda: check_fp16_skips(tmp, 1)),
                   ("fp16 skips, data", lambda: check_fp16_skips(tmp, 2)),
                   ("fp16 skips, model", lambda: check_fp16_skips(tmp, 2, "model")),
                   ("fp16 adam", lambda: check_fp16_adam(tmp)),
                   ("lenet epoch", lambda: check_lenet_epoch(tmp))]
        one = {}  # the one-device runs, shared
        checks += [(f"{strategy} {kind}",
                    lambda s=strategy, f=flags: check_strategy(tmp, s, f, one))
                   for strategy in STRATEGIES
                   for kind, flags in (("bf16", [BF16]), ("fp16", [FP16, "--loss-scale=256"]))]
        checks += [(f"resnet18 bf16 {st}", lambda st=st: check_resnet(tmp, st, one))
                   for st in ("model", "data")]
        checks += [("usage", lambda: check_usage(tmp))]
        for label, fn in checks:
            harness.check(label, fn)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
