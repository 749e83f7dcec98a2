#!/usr/bin/env python3
"""lwcc's training recipes against PyTorch's steps, replayed without PyTorch.

tools/torch_check/recipes.py (a development check that needs PyTorch) trains
zoo models with each recipe flag (--label-smoothing, --freeze, --freeze-bn,
--no-decay, --param-group, --clip-grad-norm; SGD with momentum or Nesterov,
Adam, AdamW) in float64 PyTorch and with `--write` records, per case,
Inputs/torch_recipes/CASE.json:

    case, model, gen        the case, tools/models/gen.py's arguments
    model_sha256            a hash of the generated model's initializers
    data_seed, batch_sha256 harness.write_batch's seed and a hash of the batch
    steps, flags            the steps trained, lwcc's flags
    perturbed               the flags with one value changed (whose step differs)
    losses                  PyTorch's loss at each step
    unchanged               frozen params and eval-mode running statistics
    grads                   per trained param, a digest of the first step's
                            gradient: {shape, sum, abs (sum of |x|), max (|x|)}
    params                  per param and running statistic after the last step,
                            the same digest and "at": [[flat index, value], ...]
                            (the first, middle and last element and the
                            largest); numbers to 13 significant digits

For each file this suite regenerates the model, writes the batch, runs
`lwcc --train-reference --precision=f64` with the flags and checks:
  - every loss within 1e-9 relative of PyTorch's;
  - a gradient file for exactly the trained params (none for frozen ones),
    each digest within 1e-9 (sums of the tensor's |x| sum, elements of its
    largest |x|);
  - every param's digest likewise, and the `unchanged` ones bit for bit the
    model's initializers;
and, as a case of its own, that the perturbed flags' step does not pass
those checks (so a changed semantics of the option would fail).

Ends with "N passed, M failed". Seconds; needs no PyTorch.

    python3 test/e2e/torch_recipes_replay.py
"""
import hashlib
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

INPUTS = os.path.join(harness.HERE, "Inputs", "torch_recipes")
TOL = 1e-9


# --- the file format (tools/torch_check/recipes.py writes it) -------------------

def sample_indices(t):
    """The first, middle and last flat index and that of the largest |x|."""
    n = t.size
    return sorted({0, n // 2, n - 1, int(np.argmax(np.abs(t.ravel())))})


def short(v):
    """v to 13 significant digits: far below TOL, and a shorter file."""
    return float(f"{v:.13g}")


def digest(t, samples=True):
    """{shape, sum, abs: sum of |x|, max: largest |x|} and with samples
    "at": [[flat index, value], ...] at sample_indices."""
    t = np.asarray(t, dtype=np.float64)
    flat = t.ravel()
    d = {"shape": list(t.shape), "sum": short(flat.sum()), "abs": short(np.abs(flat).sum()),
         "max": short(np.abs(flat).max()) if flat.size else 0.0}
    if samples and flat.size:
        d["at"] = [[i, short(flat[i])] for i in sample_indices(t)]
    return d


def initializers_sha256(model):
    from onnx import numpy_helper
    h = hashlib.sha256()
    for t in sorted(model.graph.initializer, key=lambda t: t.name):
        h.update(t.name.encode())
        h.update(np.ascontiguousarray(numpy_helper.to_array(t)).tobytes())
    return h.hexdigest()


def batch(model, data, seed):
    """harness.write_batch's batch in data: (x, labels, sha256 of both)."""
    import onnx
    from onnx import numpy_helper
    harness.write_batch(model, data, seed)
    x, y = (numpy_helper.to_array(onnx.load_tensor(os.path.join(data, f"input_{k}.pb")))
            for k in range(2))
    return x, y, hashlib.sha256(x.tobytes() + y.tobytes()).hexdigest()


def write_case(record):
    """Inputs/torch_recipes/CASE.json, one line per key and per tensor."""
    os.makedirs(INPUTS, exist_ok=True)
    lines = []
    for key, value in record.items():
        if isinstance(value, dict):
            inner = [f"  {json.dumps(n)}: {json.dumps(d)}" for n, d in value.items()]
            lines.append(f" {json.dumps(key)}: {{\n" + ",\n".join(inner) + "\n }")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}")
    path = os.path.join(INPUTS, record["case"] + ".json")
    with open(path + ".tmp", "w") as f:
        f.write("{\n" + ",\n".join(lines) + "\n}\n")
    os.replace(path + ".tmp", path)


# --- comparing -------------------------------------------------------------------

def digest_problems(name, got, want, tol):
    """What differs between a tensor and PyTorch's digest of it; [] if nothing."""
    got = got.astype(np.float64)
    if list(got.shape) != want["shape"]:
        return [f"{name}: shape {list(got.shape)} vs {want['shape']}"]
    scale = max(want["max"], 1e-300)
    have = digest(got, samples=False)
    out = []
    for key, ref in (("sum", want["abs"]), ("abs", want["abs"]), ("max", scale)):
        if abs(have[key] - want[key]) > tol * max(ref, 1e-300):
            out.append(f"{name}: {key} {have[key]!r} vs {want[key]!r}")
    flat = got.ravel()
    for i, v in want.get("at", []):
        if abs(flat[i] - v) > tol * scale:
            out.append(f"{name}[{i}]: {flat[i]!r} vs {v!r}")
    return out


def step_problems(case, model, losses, dump):
    """Where lwcc's run (its losses and dump) differs from PyTorch's; [] if nowhere."""
    import onnx
    from onnx import numpy_helper

    def tensors(prefix):
        out = {}
        for f in os.listdir(dump):
            if f.startswith(prefix):
                t = onnx.load_tensor(os.path.join(dump, f))
                out[t.name if prefix == "param_" else f[len(prefix):-len(".pb")]] = \
                    numpy_helper.to_array(t)
        return out
    tol = TOL
    problems = [f"loss of step {s + 1}: {a!r} vs PyTorch's {b!r}"
                for s, (a, b) in enumerate(zip(losses, case["losses"]))
                if abs(a - b) > tol * abs(b)]
    for kind, want in (("grad_", case["grads"]), ("param_", case["params"])):
        got = tensors(kind)
        names = set(got)
        if kind == "grad_":  # the dump's file names: lwcc's file-safe spelling
            want = {"".join(c if c.isalnum() or c in "._-" else "_" for c in n): d
                    for n, d in want.items()}
        for n in sorted(names ^ set(want)):
            problems.append(f"{kind}{n}: {'not in PyTorch' if n in names else 'missing'}")
        for n in sorted(names & set(want)):
            problems += digest_problems(kind + n, got[n], want[n], tol)
    initial = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    params = tensors("param_")
    for n in case["unchanged"]:
        if n in params and not np.array_equal(params[n].astype(np.float64),
                                              initial[n].astype(np.float64)):
            problems.append(f"{n} moved (frozen, or an eval-mode statistic)")
    return problems


def lwcc_run(model_path, data, dump, steps, flags):
    """lwcc --train-reference --precision=f64 with flags: its losses."""
    import onnx
    from onnx import numpy_helper
    harness.check_output([harness.LWCC, model_path, "--train-reference", "--precision=f64",
                          "--inputs", data, "--dump", dump, "--steps", str(steps), *flags],
                         timeout=300)
    return [float(numpy_helper.to_array(onnx.load_tensor(os.path.join(dump, f"loss_{s}.pb"))))
            for s in range(steps)]


def replay(case, model_path, model, data, tmp):
    """The case's two cases: its flags agree with PyTorch, its perturbed
    flags do not."""
    name = case["case"]

    def problems(flags, dump):
        losses = lwcc_run(model_path, data, dump, case["steps"], flags)
        return step_problems(case, model, losses, dump)

    def same():
        found = problems(case["flags"], os.path.join(tmp, name + "-dump"))
        if found:
            raise AssertionError(f"{len(found)} differences from PyTorch: " +
                                 "; ".join(found[:4]))
        return " ".join(case["flags"]) or "(lwcc's defaults)"

    def perturbed():
        found = problems(case["perturbed"], os.path.join(tmp, name + "-perturbed"))
        if not found:
            raise AssertionError("the step with the perturbed flags passes the checks too: "
                                 "they cannot tell the option's semantics")
        return f"{len(found)} differences, e.g. {found[0]}"

    harness.case(same, name)
    harness.case(perturbed, f"{name}: {' '.join(case['perturbed']) or 'defaults'} differs")


def main():
    import onnx
    files = sorted(f for f in os.listdir(INPUTS) if f.endswith(".json"))
    if not files:
        harness.record(False, "recorded cases", f"no .json in {INPUTS}")
        return harness.finish()
    with tempfile.TemporaryDirectory(prefix="lwcc-torch-recipes-") as tmp:
        models = {}  # gen.py's arguments -> (path, model), or None when it failed
        for f in files:
            with open(os.path.join(INPUTS, f)) as fh:
                case = json.load(fh)
            name = case["case"]
            if not harness.results.selected(name):
                continue
            key = " ".join(case["gen"])
            if key not in models:
                path = os.path.join(tmp, f"model{len(models)}.onnx")
                ok = harness.generate(case["gen"][0], path, *case["gen"][1:])
                models[key] = (path, onnx.load(path)) if ok else None
            if not models[key]:
                harness.record(False, name, "the model could not be generated")
                continue
            path, model = models[key]
            if initializers_sha256(model) != case["model_sha256"]:
                harness.record(False, name, "tools/models/gen.py's model is not the one PyTorch "
                               "trained: rerun tools/torch_check/recipes.py --write")
                continue
            data = os.path.join(tmp, name + "-data")
            if batch(model, data, case["data_seed"])[2] != case["batch_sha256"]:
                harness.record(False, name, "harness.write_batch's batch is not the one PyTorch "
                               "trained on: rerun tools/torch_check/recipes.py --write")
                continue
            replay(case, path, model, data, tmp)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
