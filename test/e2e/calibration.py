#!/usr/bin/env python3
"""The GPU calibration (tools/gpu/calibrate.py) end to end on the emulated CUDA device,
and device specs with an efficiency table in lwcc.

  1. `calibrate.py --emulate-gpu --quick`: LeNet at test size (batch 4, its
     data-parallel half and its channels halved) in float32, TF32 and bf16:
     prepared, built for the emulated GPU (check.sh build), profiled
     (--profile-ops) and fitted. The trainers say they ran on the emulated
     GPU, so the spec is written flagged: "emulated": true, a name starting
     "emulated-", the GPU and library versions the trainers named, an
     efficiency table with a "default" entry; lwcc plans on it with a
     warning; and `calibrate.py fit --out` to a file not named emulated*
     is refused (exit 1, no file).
  2. Pricing: the h100 preset's JSON form (what print-costs writes) predicts
     the preset's step; efficiency fractions of 1 change nothing; a
     compute fraction of 0.5 for the convolutions makes the predicted step
     longer on a spec where they are compute-bound, and a bandwidth fraction
     of 0.5 for every kind ("default") longer still.
  3. Bad efficiency and calibration fields: exit 1 naming the file and the
     field.
  4. `tools/bench/sim_vs_measured.py --logical --emulate-gpu`: LeNet's
     one-device, data- and model-parallel CUDA trainers on two logical
     devices of one (emulated) GPU, each measured beside the simulator's
     step for two logical devices of an H100, with the ranking's Kendall's
     tau: the GPU check of the planner's multi-device prices runs end to
     end (the emulated device's times are no GPU's).

Ends with the line "N passed, M failed".

    python3 test/e2e/calibration.py [--keep DIR]
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import LWCC, ROOT  # noqa: E402

CALIBRATE = os.path.join(ROOT, "tools", "gpu", "calibrate.py")
SIM_VS_MEASURED = os.path.join(ROOT, "tools", "bench", "sim_vs_measured.py")
STEP = re.compile(r"predicted step on (\S+): ([0-9.]+) ms")


def predicted_step(model, spec, *flags):
    """lwcc --emit=plan's predicted step (ms) of `model` on `spec`; its stderr."""
    r = harness.check_output([LWCC, model, "--target=cuda", f"--device-spec={spec}",
                              "--emit=plan", "-o", "-", *flags])
    m = STEP.search(r.stdout)
    if not m:
        raise harness.CommandError(f"no predicted step in: {r.stdout[-500:]}")
    return float(m.group(2)), r.stderr


def write(path, spec):
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def calibrate_emulated(tmp):
    d = os.path.join(tmp, "cal")
    out = os.path.join(tmp, "emulated-h100.json")
    r = harness.run([sys.executable, CALIBRATE, "--emulate-gpu", "--quick", "--dir", d,
                     "--out", out], timeout=600)
    ok = harness.record(r.returncode == 0 and os.path.exists(out),
                        "calibrate.py --emulate-gpu --quick: prepared, built, profiled, fitted",
                        f"exit {r.returncode}: {(r.stdout + r.stderr)[-1500:]}")
    if not ok:
        return None, d
    harness.record("not a GPU" in r.stdout and "flagged" in r.stdout,
                   "calibrate.py says the trainers ran on the emulated GPU and flags the spec",
                   r.stdout[-800:])
    with open(out) as f:
        spec = json.load(f)
    cal = spec.get("calibration", {})
    eff = spec.get("efficiency", {})
    problems = []
    if cal.get("emulated") is not True or not spec.get("name", "").startswith("emulated-"):
        problems.append(f"not flagged: name {spec.get('name')!r}, emulated {cal.get('emulated')!r}")
    if not cal.get("gpu", "").startswith("emulated GPU"):
        problems.append(f"gpu {cal.get('gpu')!r}")
    for key in ("driver", "cudnn", "cublas", "lwcc"):
        if not cal.get(key):
            problems.append(f"no calibration.{key}")
    if not re.fullmatch(r"\d{4}-\d\d-\d\d", cal.get("date", "")):
        problems.append(f"date {cal.get('date')!r}")
    if cal.get("models") != ["lenet"] or sorted(cal.get("precisions", [])) != ["bf16", "fp32",
                                                                                "tf32"]:
        problems.append(f"models {cal.get('models')}, precisions {cal.get('precisions')}")
    if cal.get("batches") != [2, 4] or not cal.get("points", 0) > 0:
        problems.append(f"batches {cal.get('batches')}, points {cal.get('points')}")
    if "default" not in eff or not any(k.startswith("conv2d@") for k in eff):
        problems.append(f"efficiency keys {sorted(eff)}")
    if not spec.get("launch_seconds", -1) >= 0:
        problems.append(f"launch_seconds {spec.get('launch_seconds')}")
    harness.record(not problems, "the emulated fit's spec: flagged, the versions the trainers "
                   "named, an efficiency table", "; ".join(problems),
                   f"{len(eff)} entries, {cal.get('points')} points")
    return out, d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keep", help="work in this folder and keep it (default: a temporary one)")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(os.path.dirname(harness.BIN), "lib",
                                       "liblwcc_runtime_emu.a")):
        harness.record(False, "the emulated CUDA runtime is built",
                       "build/lib/liblwcc_runtime_emu.a is missing (CUDA headers not found?)")
        return harness.finish()
    with harness.scratch("lwcc-calibration-") as scratch:
        tmp = args.keep or scratch
        os.makedirs(tmp, exist_ok=True)
        model = os.path.join(tmp, "lenet.onnx")
        if not harness.generate("lenet", model, batch=4):
            return harness.finish()
        out, d = calibrate_emulated(tmp)

        if out:
            def plans_with_warning():
                ms, err = predicted_step(model, out)
                ok = ms > 0 and "fitted on the emulated GPU" in err
                return ok, f"predicted step {ms:.3f} ms; {err.strip()[:160]}"
            harness.check("lwcc --device-spec=the emulated fit: plans, with a warning",
                          plans_with_warning)

            def refused():
                gpu_like = os.path.join(tmp, "h100.json")
                r = harness.run([sys.executable, CALIBRATE, "fit", "--dir", d,
                                 "--out", gpu_like])
                ok = (r.returncode == 1 and "refusing to write" in r.stderr and
                      "emulated" in r.stderr and not os.path.exists(gpu_like))
                return ok, f"exit {r.returncode}: {r.stderr.strip()[-300:]}"
            harness.check("calibrate.py fit --out h100.json on the emulated GPU's profiles: "
                          "refused, exit 1, no file", refused)

        # A base spec in the JSON form lwcc writes (print-costs' json=).
        lwir = os.path.join(tmp, "lenet.lwir")
        costs = os.path.join(tmp, "costs.json")
        harness.check_output([LWCC, model, "--target=cuda", "--emit=scheduled-ir", "-o", lwir])
        harness.check_output([os.path.join(harness.BIN, "lwcc-opt"),
                              f"--print-costs=spec=h100,json={costs}", lwir, "-o", os.devnull])
        with open(costs) as f:
            h100 = json.load(f)["spec"]

        def unchanged():
            preset, _ = predicted_step(model, "h100")
            form, _ = predicted_step(model, write(os.path.join(tmp, "form.json"), h100))
            ones = dict(h100, efficiency={"default": {"compute_fraction": 1,
                                                      "bandwidth_fraction": 1}})
            one, _ = predicted_step(model, write(os.path.join(tmp, "ones.json"), ones))
            return preset == form == one, (f"h100 {preset} ms, its JSON form {form}, "
                                           f"fractions 1 {one}")
        harness.check("the h100 preset, its JSON form and fractions of 1 predict the same step",
                      unchanged)

        def slower():
            # 10 GFLOP/s and 1 GB/s, every kernel filling the device, no
            # launch: LeNet's convolutions are compute-bound, its other
            # kernels mostly memory-bound, each of them visible in the step.
            slow = dict(h100, fp32_flops=1e10, tf32_flops=1e10, bf16_flops=1e10,
                        fp16_flops=1e10, mem_bandwidth=1e9, concurrency=0, launch_seconds=0)
            half = {k: {"compute_fraction": 0.5}
                    for k in ("conv2d", "conv2d_grad_input", "conv2d_grad_filter")}
            base, _ = predicted_step(model, write(os.path.join(tmp, "slow.json"), slow))
            conv, _ = predicted_step(model, write(os.path.join(tmp, "conv.json"),
                                                  dict(slow, efficiency=half)))
            both, _ = predicted_step(model, write(
                os.path.join(tmp, "both.json"),
                dict(slow, efficiency=dict(half, default={"bandwidth_fraction": 0.5}))))
            return base < conv < both, (f"{base} ms; convolutions at half the peak {conv} ms; "
                                        f"and every kind at half the bandwidth {both} ms")
        harness.check("a compute fraction of 0.5 for the convolutions lengthens the predicted "
                      "step, half the bandwidth more", slower)

        for name, efficiency, calibration, text in (
                ("fraction", {"conv2d": {"compute_fraction": 1.5}}, None,
                 "field 'efficiency.conv2d.compute_fraction' must be in (0, 1], got 1.5"),
                ("kind", {"conv": {"compute_fraction": 0.5}}, None,
                 "field 'efficiency.conv': unknown op kind 'conv'"),
                ("half", {"default": {"bandwidth_half_bytes": -4}}, None,
                 "field 'efficiency.default.bandwidth_half_bytes' must be non-negative"),
                ("calibration", None, {"date": "2026-12-01", "emulated": False},
                 "missing field 'calibration.gpu'")):
            spec = dict(h100)
            if efficiency:
                spec["efficiency"] = efficiency
            if calibration:
                spec["calibration"] = calibration
            path = write(os.path.join(tmp, f"bad-{name}.json"), spec)
            r = harness.run([LWCC, model, f"--device-spec={path}", "--emit=plan", "-o",
                             os.devnull])
            harness.exits_with(r, 1, f"a bad {name} field: exit 1 naming the file and the field",
                               f"bad-{name}.json: {text}")

        def logical():
            r = harness.run([sys.executable, SIM_VS_MEASURED, "--logical", "--gpus=2",
                             "--emulate-gpu", "--models=lenet", "--strategies=data,model,owt",
                             "--steps=3"])
            rows = re.findall(r"^lenet\s+(\S+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s", r.stdout,
                              re.M)
            ok = (r.returncode == 0 and [(s, d) for s, d, _, _ in rows] ==
                  [("-", "1"), ("data", "2"), ("model", "2"), ("owt", "2")] and
                  all(float(m) > 0 and float(p) > 0 for _, _, m, p in rows) and
                  "Kendall's tau" in r.stdout)
            return ok, f"exit {r.returncode}: {(r.stdout + r.stderr).strip()[-400:]}"
        harness.check("sim_vs_measured.py --logical --emulate-gpu: each plan measured on two "
                      "logical devices of one GPU beside its prediction", logical)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
