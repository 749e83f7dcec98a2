#!/usr/bin/env python3
"""Calibrates a GPU's device spec: each kind of op's efficiency, fitted from
the trainers' measured op times (--profile-ops), written as a --device-spec
JSON file (cost/DeviceSpec.h's "efficiency" and "calibration").

    python3 tools/gpu/calibrate.py [prepare] [measure] [fit] [options]

Three phases (all three, in order, when none is named):
  prepare  where lwcc is built (build/bin): into DIR (--dir, default
           build/calibration) the CUDA runtime, its libraries and scripts
           (tools/gpu/prepare.sh with LWCC_GPU_RUNTIME_ONLY=1), and for each
           zoo model (--models), precision (--precisions) and shape a
           trainer's sources (src/NAME: `lwcc --step-ir` of the scheduled
           step, its weights separate) with the cost model's figures of each
           of its ops (costs/NAME-PRECISION.json: `lwcc-opt
           --print-costs=json=FILE` of that step, keyed as the profile
           keys its times). The shapes: each batch of --batches, the batch
           divided by each split of --splits (the shapes a data-parallel
           shard of a layer has on 2, 4, 8 devices), and the largest batch
           with every channel count divided by each split (the zoo's
           --width: a channel split's output channels; its input channels
           are divided too, which a model-parallel shard's are not). float32
           and TF32 share a trainer (its --no-tf32 and --tf32 runs); bf16 is
           one of its own (--mixed-precision=bf16).
  measure  on the GPU machine, in DIR (carry it there): builds the trainers
           (DIR/check.sh build: nvcc against that machine's libraries, or
           the host compiler on the emulated GPU with --emulate-gpu), makes
           their weights (DIR/models/gen.py, pack_weights.py) and runs each
           for --steps steps of synthetic data with --profile-ops
           (profiles/NAME-PRECISION.json; every step after the first).
  fit      anywhere with numpy (over one DIR, or several: --dir A --dir B,
           each call's folder): pairs each measured op with its figures,
           fits per kind of op and precision (and a "default" over all of
           them) the fractions of the peaks and the sizes at which half of
           them is reached (weighted least squares on relative error), and
           the launch overhead, and writes the spec (--out): the base spec's
           figures (--base-spec) with the fitted launch_seconds, efficiency
           and calibration: the date, the GPU, its driver, cuDNN and cuBLAS
           (as the trainers name them), the CUDA toolkit (nvcc), lwcc's
           commit, the models, precisions, batches and points.

What a point is (fit): one op of one run; ops that share one call are one
point: consecutive optimizer updates (or casts) of one multi-tensor call,
their FLOPs, bytes and times summed; and an op measured under --min-seconds
(a ReLU inside its convolution's cuDNN plan, a copy onto its own bytes) is
taken as done by the call before it: its time goes to the point before.

The emulated GPU (a test device: a host CPU's times): the trainers say they
ran on it ("emulated GPU (...)" in their profiles), and the fit is then
written flagged, "emulated": true and a name starting "emulated-", to a
file whose name says so (default DIR/emulated-BASE.json); an --out that
does not start "emulated" is refused (exit 1). lwcc warns when it plans on
such a spec.

Options: --models, --batches, --splits, --precisions (fp32 tf32 bf16),
--steps, --quick (the models at test size, batch 4, one split, 3 steps:
for the test), --emulate-gpu, --out, --dir, --base-spec (the preset whose
peaks the fractions are of: h100, h200, a100; default h100), --min-seconds,
--timeout. Exit status: 0 done, 1 a phase failed or the output was refused,
2 bad usage.

On a GPU machine without lwcc (the device tool): `calibrate.py prepare`
here, carry DIR (64 MiB at most: fewer models or shapes per call), then
`python3 DIR/calibrate.py measure fit --out $OUT/gpu.json` there.
"""
import argparse
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# In the repository (tools/gpu/) or as DIR/calibrate.py (prepare copies it).
IN_DIR = os.path.exists(os.path.join(HERE, "manifest.json"))
ROOT = None if IN_DIR else os.path.dirname(os.path.dirname(HERE))
PRECISIONS = ("fp32", "tf32", "bf16")
# Each precision: the trainer it runs in, the trainer's flags for the run,
# and the TF32 mode the cost model prices it with (print-costs' tf32=).
RUNS = {"fp32": ("fp32", ["--no-tf32"], "off"),
        "tf32": ("fp32", ["--tf32"], "all"),
        "bf16": ("bf16", [], "conv")}
# The trainers' flags at compile time.
TRAINER_FLAGS = {"fp32": ["--no-tf32"], "bf16": ["--mixed-precision=bf16"]}
# "NAME (sm_90, driver CUDA 13.0, cuDNN 9.19.0, cuBLAS 13.1.0)": the
# trainer's device, as its profile and first line name it.
DEVICE_RE = re.compile(r"^(?P<gpu>.*) \((?P<sm>sm_\d+), driver CUDA (?P<driver>[\d.]+), "
                       r"cuDNN (?P<cudnn>[\d.]+), cuBLAS (?P<cublas>[\d.]+)\)$")
EMULATED = "emulated GPU"


class Failure(Exception):
    """A phase that cannot go on: its message, exit status 1."""


def log(msg):
    print(f"calibrate.py: {msg}", flush=True)


def run(cmd, timeout=1800, env=None, cwd=None):
    """Runs cmd; raises Failure naming it and its output's tail when it fails."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise Failure(f"{' '.join(cmd)}: still running after {timeout} s")
    if r.returncode:
        raise Failure(f"{' '.join(cmd)} exited {r.returncode}:\n{(r.stdout + r.stderr)[-1500:]}")
    return r.stdout


# --- prepare ------------------------------------------------------------------

def shapes(args, width):
    """(batch, width, what) of every trainer of one model: the batches, their
    data-parallel shards, and the largest batch's channel splits."""
    out = {}
    for b in args.batches:
        out.setdefault((b, width), "batch")
        for k in args.splits:
            if b % k == 0:
                out.setdefault((b // k, width), f"batch/{k} of {b}")
    top = max(args.batches)
    for k in args.splits:
        out.setdefault((top, width / k), f"channels/{k}")
    order = sorted(out, key=lambda bw: (-bw[1], bw[0]))
    return [(b, w, out[(b, w)]) for b, w in order]


def prepare(args, d):
    lwcc = os.path.join(args.bin, "lwcc")
    opt = os.path.join(args.bin, "lwcc-opt")
    for tool in (lwcc, opt):
        if not os.access(tool, os.X_OK):
            raise Failure(f"{tool}: not built (bash tools/dev.sh build)")
    env = dict(os.environ, LWCC_GPU_OUT=d, LWCC_GPU_RUNTIME_ONLY="1",
               LWCC_BIN_DIR=os.path.abspath(args.bin))
    if args.emulate_gpu:
        env["LWCC_EMULATE_GPU"] = "1"
    log(f"prepare: the runtime and scripts into {d}")
    run(["bash", os.path.join(ROOT, "tools", "gpu", "prepare.sh")], env=env, cwd=ROOT)
    sys.path.insert(0, os.path.join(ROOT, "tools", "models"))
    import zoo  # noqa: E402 - tools/models, found above
    for sub in ("src", "costs", "ir"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    trainers = []
    for model in args.models:
        preset = (zoo.TEST_PRESETS if args.quick else zoo.DEFAULTS)[model]
        for mixed in sorted({RUNS[p][0] for p in args.precisions}):
            for batch, width, what in shapes(args, preset["width"]):
                name = f"{model}-b{batch}-w{width:g}-{mixed}".replace("/", "_")
                gen = [model, "--batch", str(batch), "--width", repr(width)]
                if args.quick:
                    gen.append("--test-size")
                trainers.append(prepare_trainer(args, d, lwcc, opt, name, gen, mixed))
                trainers[-1].update(model=model, batch=batch, width=width, shape=what)
    manifest = {"base_spec": args.base_spec, "emulated": bool(args.emulate_gpu),
                "quick": bool(args.quick), "lwcc": commit, "models": args.models,
                "batches": sorted({t["batch"] for t in trainers}), "precisions": args.precisions,
                "trainers": trainers}
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    log(f"prepare: {len(trainers)} trainers in {d} "
        f"({sum(len(t['runs']) for t in trainers)} runs)")


def prepare_trainer(args, d, lwcc, opt, name, gen, mixed):
    """One trainer's sources and its runs' cost figures."""
    onnx_path = os.path.join(d, "ir", name + ".onnx")
    run([sys.executable, os.path.join(ROOT, "tools", "models", "gen.py"), *gen, "-o", onnx_path])
    flags = [f"--device-spec={args.base_spec}", *TRAINER_FLAGS[mixed]]
    if args.emulate_gpu:
        flags.append("--emulate-gpu")
    step = os.path.join(d, "ir", name + ".lwir")
    run([lwcc, onnx_path, "--target=cuda", *flags, "--emit=scheduled-ir", "-o", step])
    src = os.path.join(d, "src", name)
    run([lwcc, onnx_path, "--target=cuda", *flags, f"--step-ir={step}", "--weights=separate",
         "--emit=source", "-o", src])
    # The weights are made again where the trainer runs (measure): the
    # full-size models' are hundreds of MB.
    os.remove(os.path.join(src, "trainer.weights"))
    runs = []
    for precision in args.precisions:
        trainer, run_flags, tf32 = RUNS[precision]
        if trainer != mixed:
            continue
        costs = os.path.join("costs", f"{name}-{precision}.json")
        run([opt, f"--print-costs=spec={args.base_spec},tf32={tf32},json={os.path.join(d, costs)}",
             step, "-o", os.devnull])
        runs.append({"precision": precision, "flags": run_flags, "costs": costs,
                     "profile": os.path.join("profiles", f"{name}-{precision}.json")})
    os.remove(onnx_path)
    return {"name": name, "gen": gen, "runs": runs}


# --- measure ------------------------------------------------------------------

def measure(args, d, manifest):
    logs = os.path.join(d, "logs")
    os.makedirs(logs, exist_ok=True)
    os.makedirs(os.path.join(d, "profiles"), exist_ok=True)
    env = dict(os.environ, OUT=logs)
    if manifest["emulated"] or args.emulate_gpu:
        env["LWCC_EMULATE_GPU"] = "1"
    log("measure: building the trainers (check.sh build)")
    rows = run(["bash", os.path.join(d, "check.sh"), "build"], env=env, timeout=3600)
    with open(os.path.join(logs, "build.txt"), "w") as f:
        f.write(rows)
    failed = 0
    for t in manifest["trainers"]:
        exe = os.path.join(d, t["name"] + "-cuda")
        if not os.access(exe, os.X_OK):
            log(f"measure: {t['name']}: not built (see {logs}/build-{t['name']}-cuda.log)")
            failed += 1
            continue
        if not os.path.exists(exe + ".weights"):
            make_weights(d, t, exe)
        for r in t["runs"]:
            profile = os.path.join(d, r["profile"])
            cmd = [exe, "--data=synthetic", f"--steps={args.steps}", f"--profile-ops={profile}",
                   "--progress=off", *r["flags"]]
            try:
                run(cmd, timeout=args.timeout)
                log(f"measure: {t['name']} {r['precision']}: {r['profile']}")
            except Failure as e:  # one shape too large for the GPU, say: the rest still count
                log(f"measure: {t['name']} {r['precision']}: FAILED: {e}")
                failed += 1
    nvcc = re.search(r"release ([\d.]+)", rows)
    with open(os.path.join(d, "profiles", "toolkit.json"), "w") as f:
        json.dump({"cuda": nvcc.group(1) if nvcc else ""}, f)
    if failed:
        log(f"measure: {failed} trainers or runs failed; the fit takes the rest")


def make_weights(d, t, exe):
    """The trainer's initial weights from its model, generated again here."""
    onnx_path = exe + ".onnx"
    params = exe + ".params"
    run([sys.executable, os.path.join(d, "models", "gen.py"), *t["gen"], "-o", onnx_path])
    with open(params, "w") as f:
        f.write(run([exe, "--list-params"]))
    run([sys.executable, os.path.join(d, "pack_weights.py"), onnx_path, params, exe + ".weights"])
    os.remove(onnx_path)
    os.remove(params)


# --- fit ----------------------------------------------------------------------

def points_of(costs, profile, min_seconds):
    """The points of one run: its profile's entries paired with the cost
    figures of the same (op, loc, device) in the same order, merged as the
    calls ran them (the module's doc). Each point a dict of kind,
    precision, flops, bytes, peak, fill, seconds, and the number of ops."""
    figures = {}
    for c in costs["ops"]:
        figures.setdefault((c["op"], c["loc"], c["device"]), []).append(c)
    seen = {}
    points = []
    for e in profile["ops"]:
        key = (e["op"], e["loc"], e.get("device", 0))
        k = seen.get(key, 0)
        seen[key] = k + 1
        if k >= len(figures.get(key, [])):
            continue  # not a kernel the cost model prices
        c = figures[key][k]
        last = points[-1] if points else None
        if last and c["multi_tensor"] and last["multi_tensor"] and last["kind"] == c["op"]:
            for f in ("flops", "bytes", "seconds"):
                last[f] += c[f] if f != "seconds" else e["seconds"]
            last["ops"] += 1
            continue
        if last and e["seconds"] < min_seconds:
            last["seconds"] += e["seconds"]
            continue
        points.append({"kind": c["op"], "precision": c["precision"], "flops": c["flops"],
                       "bytes": c["bytes"], "peak": c["peak_flops"], "fill": max(c["fill"], 1e-6),
                       "seconds": e["seconds"], "multi_tensor": c["multi_tensor"], "ops": 1})
    return points


def fit_side(x, u, y, w):
    """min sum (w (a x + b u - y))^2 over a >= 1 (a fraction of at most 1),
    b >= 0: (fraction 1/a, half size b/a, clamped: whether a bound held).
    b is fitted only where the sizes span a factor of 2 or more."""
    import numpy as np
    A = np.stack([x * w, u * w], axis=1)
    r = y * w
    spans = len(x) >= 3 and x.max() >= 2 * max(x.min(), 1e-300)
    candidates = []
    if spans:
        (a, b), *_ = np.linalg.lstsq(A, r, rcond=None)
        if a >= 1 and b >= 0:
            candidates.append((a, b, False))
        bb = max(0.0, float(A[:, 1] @ (r - A[:, 0])) / float(A[:, 1] @ A[:, 1]))
        candidates.append((1.0, bb, True))
    a0 = float(A[:, 0] @ r) / float(A[:, 0] @ A[:, 0])
    candidates.append((max(1.0, a0), 0.0, a0 < 1))
    best = min(candidates, key=lambda c: float(np.sum((A @ np.array(c[:2]) - r) ** 2)))
    a, b, clamped = best
    return 1.0 / a, b / a, clamped


# The two sides of the model (cost/DeviceSpec.h): a kernel's FLOPs against
# its peak (times its fill), its bytes against the bandwidth.
SIDES = (("compute", "compute_fraction", "compute_half_flops"),
         ("bandwidth", "bandwidth_fraction", "bandwidth_half_bytes"))


def fit_group(points, bandwidth, launch):
    """The efficiency of one kind (or of all): which side bounds each point,
    refitted until that settles; the entry (the sides fitted), its relative
    error and notes."""
    import numpy as np
    size = {"compute": np.array([p["flops"] for p in points], float),
            "bandwidth": np.array([p["bytes"] for p in points], float)}
    rate = {"compute": np.array([p["peak"] * p["fill"] for p in points], float),
            "bandwidth": np.full(len(points), float(bandwidth))}
    t = np.array([p["seconds"] for p in points], float)
    e = {"compute_fraction": 1.0, "compute_half_flops": 0.0,
         "bandwidth_fraction": 1.0, "bandwidth_half_bytes": 0.0}

    def times(side, fraction, half):  # each point's time on one side
        x = size[side]
        return np.where(x > 0, (x + e[half]) / (e[fraction] * rate[side]), 0.0)

    bound, fitted, notes = None, set(), []
    for _ in range(10):
        now = times(*SIDES[0]) >= times(*SIDES[1])
        if bound is not None and (now == bound).all():
            break
        bound, fitted, notes = now, set(), []
        for (side, fraction, half), mask in zip(SIDES, (bound, ~bound)):
            mask = mask & (size[side] > 0)
            if not mask.any():
                continue
            x, r = size[side][mask], rate[side][mask]
            e[fraction], e[half], clamped = fit_side(x / r, 1 / r, t[mask] - launch,
                                                     1 / t[mask])
            fitted.add(side)
            if clamped:
                notes.append(f"{side} at the peak or without a half size (a bound reached)")
    predicted = np.maximum(times(*SIDES[0]), times(*SIDES[1])) + launch
    error = float(np.sqrt(np.mean(((predicted - t) / t) ** 2)))
    entry = {k: float(e[k]) for side, *keys in SIDES if side in fitted for k in keys}
    return entry, error, notes


def launch_candidates(points, bandwidth):
    """Launch overheads to try: percentiles of what the points take beyond
    their work at the peaks (the smallest kernels' time is mostly launch)."""
    import numpy as np
    beyond = [p["seconds"] - max(p["flops"] / (p["peak"] * p["fill"]), p["bytes"] / bandwidth)
              for p in points]
    return sorted({max(0.0, float(np.percentile(beyond, q))) for q in (0, 5, 10, 20, 30, 40, 50)})


def fit_all(points, bandwidth, launch, min_points):
    """Every group's entry (kind@precision with min_points or more, and
    "default" over all) at this launch overhead: (efficiency, table rows,
    the points' root-mean-square relative error as the entries price them)."""
    import numpy as np
    groups = {}
    for p in points:
        groups.setdefault(f"{p['kind']}@{p['precision']}", []).append(p)
    efficiency, rows = {}, []
    for key in sorted(groups) + ["default"]:
        pts = groups.get(key, points)
        if len(pts) < min_points:
            rows.append(f"  {key:<28} {len(pts):>5} points: too few, priced by 'default'")
            continue
        entry, error, notes = fit_group(pts, bandwidth, launch)
        if not entry:
            continue
        efficiency[key] = entry
        rows.append(f"  {key:<28} {len(pts):>5} points  " +
                    "  ".join(f"{k} {v:.3g}" for k, v in entry.items()) +
                    f"  (relative error {error:.2f})" + (f"; {'; '.join(notes)}" if notes else ""))
    rel = [(price(p, efficiency, bandwidth, launch) - p["seconds"]) / p["seconds"] for p in points]
    return efficiency, rows, float(np.sqrt(np.mean(np.square(rel))))


def device_of(profiles):
    """The GPU the profiles were measured on: (description fields, emulated)."""
    names = {p["device"] for p in profiles}
    if len(names) != 1:
        raise Failure(f"the profiles name several devices: {sorted(names)}")
    name = names.pop()
    m = DEVICE_RE.match(name)
    info = m.groupdict() if m else {"gpu": name}
    return info, name.startswith(EMULATED)


def slug(text):
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def load_folders(dirs):
    """The prepared folders' manifests merged (one base spec, one device
    kind), and their measured runs: (manifest, [(trainer, run, costs,
    profile)], the CUDA toolkit the measure phase found)."""
    manifests, runs, cuda = [], [], ""
    for d in dirs:
        with open(os.path.join(d, "manifest.json")) as f:
            manifests.append(json.load(f))
        for t in manifests[-1]["trainers"]:
            for r in t["runs"]:
                path = os.path.join(d, r["profile"])
                if not os.path.exists(path):
                    continue
                with open(path) as f:
                    profile = json.load(f)
                with open(os.path.join(d, r["costs"])) as f:
                    costs = json.load(f)
                runs.append((t, r, costs, profile))
        toolkit = os.path.join(d, "profiles", "toolkit.json")
        if os.path.exists(toolkit):
            with open(toolkit) as f:
                cuda = cuda or json.load(f).get("cuda", "")
    for key in ("base_spec", "emulated"):
        if len({json.dumps(m[key]) for m in manifests}) > 1:
            raise Failure(f"the folders were prepared with different {key}: "
                          f"{[m[key] for m in manifests]}")
    merged = dict(manifests[0])
    for key in ("models", "precisions", "batches"):  # in the order the folders name them
        merged[key] = list(dict.fromkeys(v for m in manifests for v in m[key]))
    merged["batches"].sort()
    merged["quick"] = any(m["quick"] for m in manifests)
    merged["lwcc"] = " ".join(sorted({m["lwcc"] for m in manifests if m.get("lwcc")}))
    if not runs:
        raise Failure(f"no profile in {', '.join(dirs)}: run the measure phase first")
    return merged, runs, cuda


def fit(args, dirs):
    import numpy as np
    manifest, runs, cuda = load_folders(dirs)
    profiles = [profile for _, _, _, profile in runs]
    info, emulated = device_of(profiles)
    base = dict(runs[0][2]["spec"])
    bandwidth = base["mem_bandwidth"]
    points = []
    for t, r, costs, profile in runs:
        for p in points_of(costs, profile, args.min_seconds):
            p["run"] = f"{t['name']} {r['precision']}"
            points.append(p)
    # The launch overhead: of the candidates, the one whose fit prices the
    # points best.
    launch, (efficiency, rows, error) = min(
        ((L, fit_all(points, bandwidth, L, args.min_points))
         for L in launch_candidates(points, bandwidth)), key=lambda c: c[1][2])
    log(f"fit: {len(points)} points of {len(runs)} runs; launch {launch * 1e6:.2f} us; "
        f"the points' relative error {error:.2f} (root mean square)")
    print("\n".join(rows))
    # Each run's ops summed: measured, and predicted by the base spec and the fit.
    for name, fitted in (("base spec", {}), ("fitted", efficiency)):
        ratios = []
        for t, r, costs, profile in runs:
            pts = [p for p in points if p["run"] == f"{t['name']} {r['precision']}"]
            measured = sum(p["seconds"] for p in pts)
            overhead = launch if fitted else base["launch_seconds"]
            predicted = sum(price(p, fitted, bandwidth, overhead) for p in pts)
            ratios.append(measured / predicted if predicted > 0 else float("nan"))
        log(f"fit: measured / predicted ops of a step, {name}: " +
            f"median {np.median(ratios):.2f}, {min(ratios):.2f} to {max(ratios):.2f}")
    write_spec(args, dirs[0], manifest, base, info, emulated, launch, efficiency, len(points),
               cuda)


def price(p, efficiency, bandwidth, launch):
    """A point's time as lwcc's cost model prices it (CostModel::computeSeconds)."""
    e = None
    for key in (f"{p['kind']}@{p['precision']}", p["kind"], f"default@{p['precision']}", "default"):
        if key in efficiency:
            e = efficiency[key]
            break
    e = e or {}
    c = ((p["flops"] + e.get("compute_half_flops", 0)) /
         (e.get("compute_fraction", 1) * p["peak"] * p["fill"])) if p["flops"] > 0 else 0
    m = ((p["bytes"] + e.get("bandwidth_half_bytes", 0)) /
         (e.get("bandwidth_fraction", 1) * bandwidth)) if p["bytes"] > 0 else 0
    return max(c, m) + launch


def write_spec(args, d, manifest, base, info, emulated, launch, efficiency, points, cuda):
    gpu = info["gpu"]
    if emulated and not manifest["emulated"] and not args.emulate_gpu:
        raise Failure(f"the trainers ran on the {gpu}, yet were prepared for a GPU")
    if not emulated and manifest["emulated"]:
        raise Failure(f"the trainers were prepared for the emulated GPU, yet ran on {gpu}")
    spec = dict(base)
    spec["name"] = f"emulated-{manifest['base_spec']}" if emulated else slug(gpu)
    spec["launch_seconds"] = launch
    spec["efficiency"] = efficiency
    cal = {"date": datetime.date.today().isoformat(), "gpu": gpu, "emulated": emulated}
    for key in ("driver", "cudnn", "cublas"):
        if info.get(key):
            cal[key] = info[key]
    if cuda:
        cal["cuda"] = cuda
    if manifest.get("lwcc"):
        cal["lwcc"] = manifest["lwcc"]
    cal.update(models=manifest["models"], precisions=manifest["precisions"],
               batches=manifest["batches"], points=points)
    cal["notes"] = (f"fitted by tools/gpu/calibrate.py{' --quick' if manifest['quick'] else ''} "
                    f"against the {manifest['base_spec']} preset's peaks")
    if emulated:
        cal["notes"] += ("; measured on the emulated CUDA device (a host CPU's times): "
                         "a test of the calibration, not a GPU's figures")
    spec["calibration"] = cal
    out = args.out or os.path.join(d, f"{spec['name']}.json")
    if emulated and not os.path.basename(out).startswith("emulated"):
        raise Failure(f"refusing to write {out}: the trainers ran on the {gpu}, whose times are "
                      "a host CPU's, not a GPU's; its fit goes only to a file named "
                      "emulated*.json, flagged \"emulated\": true")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(spec, f, indent=1)
        f.write("\n")
    if emulated:
        log(f"fit: the trainers ran on the {gpu}, not a GPU: wrote {out} flagged "
            f"\"emulated\": true, named {spec['name']} (a test of the calibration; lwcc warns "
            "when it plans on it)")
    else:
        log(f"fit: wrote {out}: {gpu}'s spec (lwcc --device-spec={out})")
    if manifest["base_spec"] not in slug(gpu) and not emulated:
        log(f"fit: warning: the fractions are of the {manifest['base_spec']} preset's peaks, "
            f"measured on {gpu}: prepare with --base-spec naming its preset where lwcc has one")
    check_spec(args, d, out)


def check_spec(args, d, out):
    """Where lwcc is built: the spec loads (lwcc-opt prices a step on it)."""
    opt = os.path.join(args.bin, "lwcc-opt") if args.bin else ""
    steps = sorted(glob.glob(os.path.join(d, "ir", "*.lwir")))
    if not (opt and os.access(opt, os.X_OK) and steps):
        return
    run([opt, f"--print-costs=spec={out}", steps[0], "-o", os.devnull])
    log(f"fit: lwcc reads {out}")


# --- driver -------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[2:]))
    ap.add_argument("phases", nargs="*", help="prepare, measure, fit (default: all three)")
    ap.add_argument("--models", help="zoo models (default: alexnet resnet18 vgg16 inception; "
                    "--quick: lenet)")
    ap.add_argument("--batches", help="batch sizes (default 32 64 128; --quick: 4)")
    ap.add_argument("--splits", help="device counts a layer is split over (default 2 4 8; "
                    "--quick: 2)")
    ap.add_argument("--precisions", default="fp32 tf32 bf16", help="of fp32, tf32, bf16")
    ap.add_argument("--steps", type=int, help="steps a run (the first not profiled; default 6, "
                    "--quick: 3)")
    ap.add_argument("--quick", action="store_true",
                    help="the models at test size, tiny batches (the test's run)")
    ap.add_argument("--emulate-gpu", action="store_true",
                    help="trainers for the emulated CUDA device (a test: the fit is flagged)")
    ap.add_argument("--out", help="the spec file (default DIR/NAME.json, NAME the GPU's)")
    ap.add_argument("--dir", action="append",
                    help="the trainers' folder (default build/calibration, or the folder this "
                    "script was copied into); fit takes several, each a --dir")
    ap.add_argument("--base-spec", default="h100", choices=("h100", "h200", "a100"),
                    help="the preset whose figures and peaks the spec starts from")
    ap.add_argument("--bin", help="lwcc's build/bin (prepare; default build/bin)")
    ap.add_argument("--min-seconds", type=float, default=1e-6,
                    help="an op measured under this is done by the call before it")
    ap.add_argument("--min-points", type=int, default=3,
                    help="points a kind needs for an entry of its own")
    ap.add_argument("--timeout", type=int, default=600, help="seconds a trainer's run may take")
    args = ap.parse_args(argv)
    bad = [p for p in args.phases if p not in ("prepare", "measure", "fit")]
    if bad:
        ap.error(f"unknown phase {bad[0]!r} (expected prepare, measure or fit)")
    args.phases = args.phases or ["prepare", "measure", "fit"]
    q = args.quick

    def words(text, default, kind=str):
        try:
            return [kind(w) for w in (text or default).replace(",", " ").split()]
        except ValueError:
            ap.error(f"not a list of {kind.__name__}: {text!r}")
    args.models = words(args.models, "lenet" if q else "alexnet resnet18 vgg16 inception")
    args.batches = words(args.batches, "4" if q else "32 64 128", int)
    args.splits = words(args.splits, "2" if q else "2 4 8", int)
    args.precisions = words(args.precisions, "")
    args.steps = args.steps or (3 if q else 6)
    for p in args.precisions:
        if p not in PRECISIONS:
            ap.error(f"unknown precision {p!r} (expected fp32, tf32 or bf16)")
    if min(args.batches) < 1 or min(args.splits) < 2 or args.steps < 2:
        ap.error("batches must be positive, splits at least 2 and steps at least 2")
    if ROOT:
        sys.path.insert(0, os.path.join(ROOT, "tools", "models"))
        import zoo  # noqa: E402 - tools/models, found above
        unknown = [m for m in args.models if m not in zoo.REGISTRY]
        if unknown:
            ap.error(f"unknown model {unknown[0]!r} (the zoo's: {', '.join(zoo.REGISTRY)})")
    args.bin = args.bin or (os.path.join(ROOT, "build", "bin") if ROOT else "")
    args.dir = [os.path.abspath(d) for d in args.dir or [
        HERE if IN_DIR else os.path.join(ROOT, "build", "calibration")]]
    if len(args.dir) > 1 and args.phases != ["fit"]:
        ap.error("several --dir go with the fit phase alone")
    if "prepare" in args.phases and not ROOT:
        ap.error("prepare runs from the repository's tools/gpu/calibrate.py")
    return args


def main(argv=None):
    args = parse_args(argv)
    d = args.dir[0]
    try:
        if "prepare" in args.phases:
            if os.path.exists(d):
                shutil.rmtree(d)
            prepare(args, d)
        if "measure" in args.phases:
            with open(os.path.join(d, "manifest.json")) as f:
                measure(args, d, json.load(f))
        if "fit" in args.phases:
            fit(args, args.dir)
    except Failure as e:
        print(f"calibrate.py: error: {e}", file=sys.stderr)
        return 1
    except FileNotFoundError as e:
        print(f"calibrate.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
