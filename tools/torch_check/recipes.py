#!/usr/bin/env python3
"""lwcc's training recipes against PyTorch's definitions (a development check, not CI).

For each case (a zoo model at test size, a batch, lwcc flags), 3 training
steps on the same batch:

  lwcc     `lwcc MODEL --train-reference --precision=f64 --steps=3` with the
           case's flags: the 3 losses, the first step's gradients, the params
           and batch norm running statistics after the last step
  PyTorch  the ONNX graph as float64 torch.nn modules (nn.Conv2d,
           nn.BatchNorm2d, nn.Linear, the rest functional), the initializers
           loaded, trained as a PyTorch user writes the recipe:
             --label-smoothing=E   CrossEntropyLoss(label_smoothing=E)
             --freeze=PATTERN      requires_grad_(False), left out of the optimizer
             --freeze-bn           .eval() on the batch norms whose weight and
                                   bias are frozen
             --no-decay=bias,norm  a param group with weight_decay 0 for the 1-D
                                   params: biases, batch norms' weight and bias
             --param-group=P:lr=X,wd=Y  a param group with lr X * lr and weight
                                   decay Y for the params matching glob P (the
                                   first group that matches; its wd over --no-decay)
             --clip-grad-norm=X    torch.nn.utils.clip_grad_norm_(params, X)
                                   between backward and step
           with torch.optim.SGD (momentum, nesterov), Adam or AdamW at lwcc's
           defaults (sgd: lr 0.01, momentum 0.9, weight decay 5e-4; adam: lr
           0.001, weight decay 0; adamw: lr 0.001, weight decay 0.01; betas
           0.9, 0.999, eps 1e-8)

and compares: every loss within 1e-9 relative; the first step's gradients
(the trained params exactly, before clipping) and every param and running
statistic after the last step within 1e-9 of the tensor's largest element;
frozen params and the running statistics of an eval-mode batch norm equal
bit for bit to the model's. Prints a table; exit status 1 if a case failed.

`--write` also writes, for each case, test/e2e/Inputs/torch_recipes/CASE.json:
the model's generator command, the batch's seed, the flags, PyTorch's losses
and a digest of its gradients and final params, and a perturbed variant of
the flags whose step must differ. test/e2e/torch_recipes_replay.py checks
lwcc against them without PyTorch.

    /work/venv-torch/bin/python tools/torch_check/recipes.py --lwcc build/bin/lwcc \\
        [--cases SUBSTR ...] [--write] [--keep DIR]
"""
import argparse
import fnmatch
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import torch_recipes_replay as replay  # noqa: E402  (the digest and the file format)
from check import table  # noqa: E402  (tools/torch_check/check.py: the result table)

GEN = os.path.join(ROOT, "tools", "models", "gen.py")
LOSS_TOL = GRAD_TOL = PARAM_TOL = 1e-9

# name: (model, flags, perturbed flags whose step must differ)
LENET_ALL = ["--nesterov", "--label-smoothing=0.2", "--freeze=conv1.*", "--no-decay=bias",
             "--param-group=fc3.*:lr=0.5,wd=0.002", "--clip-grad-norm=0.5"]
RESNET_FREEZE = "--freeze=conv1.*,bn1.*,layer1.*"
RESNET_ALL = ["--optimizer=adamw", "--label-smoothing=0.1", RESNET_FREEZE, "--freeze-bn",
              "--no-decay=bias,norm", "--param-group=fc.*:lr=10,wd=0",
              "--param-group=layer4.*:lr=0.5", "--clip-grad-norm=1"]
CASES = {
    "lenet-sgd": ("lenet", [], ["--momentum=0.85"]),
    "lenet-sgd-nesterov": ("lenet", ["--nesterov", "--momentum=0.8", "--lr=0.02",
                                     "--weight-decay=1e-3"],
                           ["--momentum=0.8", "--lr=0.02", "--weight-decay=1e-3"]),
    "lenet-adam": ("lenet", ["--optimizer=adam", "--weight-decay=1e-3"],
                   ["--optimizer=adamw", "--weight-decay=1e-3"]),
    "lenet-adamw": ("lenet", ["--optimizer=adamw"], ["--optimizer=adamw", "--beta2=0.99"]),
    "lenet-label-smoothing": ("lenet", ["--label-smoothing=0.1"], ["--label-smoothing=0.11"]),
    "lenet-clip-grad-norm": ("lenet", ["--clip-grad-norm=0.5"], ["--clip-grad-norm=0.55"]),
    "lenet-freeze": ("lenet", ["--freeze=conv1.*,fc1.weight"], ["--freeze=conv1.*"]),
    "lenet-no-decay": ("lenet", ["--no-decay=bias", "--weight-decay=0.01"],
                       ["--weight-decay=0.01"]),
    "lenet-param-group": ("lenet", ["--param-group=fc3.*:lr=10,wd=0", "--param-group=conv*:lr=0.5"],
                          ["--param-group=fc3.*:lr=9,wd=0", "--param-group=conv*:lr=0.5"]),
    "lenet-param-group-adamw": ("lenet", ["--optimizer=adamw", "--no-decay=bias",
                                          "--param-group=fc*.weight:lr=2,wd=0.05"],
                                ["--optimizer=adamw", "--no-decay=bias",
                                 "--param-group=fc*.weight:lr=2"]),
    "lenet-all": ("lenet", LENET_ALL, [f for f in LENET_ALL if f != "--no-decay=bias"]),
    "resnet18-sgd": ("resnet18", [], ["--weight-decay=6e-4"]),
    "resnet18-adam": ("resnet18", ["--optimizer=adam"], ["--optimizer=adam", "--beta1=0.8"]),
    "resnet18-freeze": ("resnet18", [RESNET_FREEZE], [RESNET_FREEZE, "--freeze-bn"]),
    "resnet18-freeze-bn": ("resnet18", [RESNET_FREEZE, "--freeze-bn"], [RESNET_FREEZE]),
    "resnet18-no-decay": ("resnet18", ["--no-decay=norm", "--weight-decay=0.01"],
                          ["--no-decay=bias", "--weight-decay=0.01"]),
    "resnet18-label-smoothing-clip": ("resnet18", ["--label-smoothing=0.3", "--clip-grad-norm=0.3"],
                                      ["--label-smoothing=0.3", "--clip-grad-norm=0.33"]),
    "resnet18-all": ("resnet18", RESNET_ALL,
                     [f for f in RESNET_ALL if f != "--param-group=layer4.*:lr=0.5"]),
}


# --- the ONNX graph as PyTorch modules ----------------------------------------

def attrs(onnx_mod, node):
    """A node's attributes; floats as the decimal the writer meant (the
    shortest one that rounds to the stored float32), as lwcc reads them."""
    out = {}
    for a in node.attribute:
        v = onnx_mod.helper.get_attribute_value(a)
        if a.type == onnx_mod.AttributeProto.FLOAT:
            v = float(str(np.float32(v)))
        out[a.name] = v
    return out


def symmetric_pads(pads, what):
    half = len(pads) // 2
    if list(pads[:half]) != list(pads[half:]):
        raise ValueError(f"{what}: asymmetric pads {pads} are not supported here")
    return tuple(pads[:half])


class OnnxNet:
    """The ONNX graph run with torch: nn.Conv2d, nn.BatchNorm2d and nn.Linear
    modules holding the initializers (in float64), functional ops between.
    `params` maps each float initializer that is no running statistic to its
    nn.Parameter, `stats` each running statistic to its buffer, `bns` each
    batch norm module to its (weight, bias, running mean, running var)
    initializer names."""

    def __init__(self, torch, onnx_mod, numpy_helper, model):
        self.torch, self.F = torch, torch.nn.functional
        nn = torch.nn
        g = model.graph
        self.graph, self.onnx = g, onnx_mod
        init = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        self.modules = {}  # node index -> module
        self.params, self.stats, self.bns = {}, {}, {}
        owned = set()

        def take(name):
            if name in owned:
                raise ValueError(f"initializer {name} read by two layers (tied) is not "
                                 "supported here")
            owned.add(name)
            return torch.from_numpy(init[name].astype(np.float64))

        def weighted(m, w, ins):
            """m (an nn.Conv2d or nn.Linear) holding the weight w (initializer
            ins[1]) and, where m has a bias, initializer ins[2]: both params."""
            with torch.no_grad():
                m.weight.copy_(w)
                self.params[ins[1]] = m.weight
                if m.bias is not None:
                    m.bias.copy_(take(ins[2]))
                    self.params[ins[2]] = m.bias
            return m

        for i, node in enumerate(g.node):
            a = attrs(onnx_mod, node)
            ins = list(node.input)
            if node.op_type == "Conv" and ins[1] in init and init[ins[1]].ndim == 4:
                w = take(ins[1])
                pads = symmetric_pads(a.get("pads", [0] * 4), node.name)
                m = nn.Conv2d(w.shape[1] * a.get("group", 1), w.shape[0], tuple(w.shape[2:]),
                              stride=tuple(a.get("strides", [1, 1])), padding=pads,
                              dilation=tuple(a.get("dilations", [1, 1])),
                              groups=a.get("group", 1), bias=len(ins) > 2 and bool(ins[2]),
                              dtype=torch.float64)
                self.modules[i] = weighted(m, w, ins)
            elif node.op_type == "BatchNormalization":
                scale = take(ins[1])
                m = nn.BatchNorm2d(scale.shape[0], eps=a.get("epsilon", 1e-5),
                                   momentum=1.0 - a.get("momentum", 0.9), dtype=torch.float64)
                with torch.no_grad():
                    m.weight.copy_(scale)
                    m.bias.copy_(take(ins[2]))
                    m.running_mean.copy_(take(ins[3]))
                    m.running_var.copy_(take(ins[4]))
                self.params[ins[1]], self.params[ins[2]] = m.weight, m.bias
                self.stats[ins[3]], self.stats[ins[4]] = m.running_mean, m.running_var
                self.bns[m] = tuple(ins[1:5])
                self.modules[i] = m
            elif node.op_type == "Gemm" and ins[1] in init:
                if a.get("transA", 0) or not a.get("transB", 0) or \
                        a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
                    raise ValueError(f"{node.name}: only Gemm(transB=1) is supported here")
                w = take(ins[1])
                m = nn.Linear(w.shape[1], w.shape[0], bias=len(ins) > 2 and bool(ins[2]),
                              dtype=torch.float64)
                self.modules[i] = weighted(m, w, ins)
            elif any(n in init for n in ins):
                raise ValueError(f"{node.op_type} {node.name}: an initializer outside Conv, "
                                 "BatchNormalization and Gemm is not supported here")

    def forward(self, x):
        torch, F = self.torch, self.F
        env = {self.graph.input[0].name: x}
        for i, node in enumerate(self.graph.node):
            a = attrs(self.onnx, node)
            xs = [env[n] for n in node.input if n and n in env]
            op = node.op_type
            if i in self.modules:
                y = self.modules[i](xs[0])
            elif op == "Relu":
                y = torch.relu(xs[0])
            elif op == "Add":
                y = xs[0] + xs[1]
            elif op == "MaxPool":
                k = tuple(a["kernel_shape"])
                y = F.max_pool2d(xs[0], k, stride=tuple(a.get("strides", [1] * len(k))),
                                 padding=symmetric_pads(a.get("pads", [0] * 2 * len(k)), node.name),
                                 dilation=tuple(a.get("dilations", [1] * len(k))),
                                 ceil_mode=bool(a.get("ceil_mode", 0)))
            elif op == "GlobalAveragePool":
                y = xs[0].mean(dim=tuple(range(2, xs[0].dim())), keepdim=True)
            elif op == "Flatten":
                y = torch.flatten(xs[0], a.get("axis", 1))
            elif op == "Concat":
                y = torch.cat(xs, dim=a["axis"])
            else:
                raise ValueError(f"{op} ({node.name}) is not supported here")
            env[node.output[0]] = y
        return env[self.graph.output[0].name]


# --- a recipe in PyTorch -------------------------------------------------------

def parse_flags(flags):
    """The lwcc flags of a case as settings (lwcc's defaults filled in)."""
    r = {"optimizer": "sgd", "nesterov": False, "label_smoothing": 0.0, "freeze": [],
         "freeze_bn": False, "no_decay": [], "groups": [], "clip": None, "beta1": 0.9,
         "beta2": 0.999, "momentum": 0.9}
    for f in flags:
        key, _, value = f[2:].partition("=")
        if key == "optimizer":
            r["optimizer"] = value
        elif key in ("lr", "momentum", "weight-decay", "beta1", "beta2", "label-smoothing"):
            r[key.replace("-", "_")] = float(value)
        elif key == "nesterov":
            r["nesterov"] = True
        elif key == "freeze":
            r["freeze"] = value.split(",")
        elif key == "freeze-bn":
            r["freeze_bn"] = True
        elif key == "no-decay":
            r["no_decay"] = value.split(",")
        elif key == "param-group":
            pattern, _, items = value.partition(":")
            group = {"pattern": pattern, "lr": 1.0, "wd": None}
            for item in items.split(","):
                k, _, v = item.partition("=")
                group[k] = float(v)
            r["groups"].append(group)
        elif key == "clip-grad-norm":
            r["clip"] = float(value)
        else:
            raise ValueError(f"flag {f} is not modelled here")
    defaults = {"sgd": (0.01, 5e-4), "adam": (0.001, 0.0), "adamw": (0.001, 0.01)}
    r.setdefault("lr", defaults[r["optimizer"]][0])
    r.setdefault("weight_decay", defaults[r["optimizer"]][1])
    return r


def matches(name, pattern):
    return fnmatch.fnmatchcase(name, pattern)


def torch_steps(torch, net, x, y, r, steps):
    """`steps` training steps of `net` on (x, y) with the recipe r: (losses,
    first-step gradients, params and running statistics after the last step,
    the gradients' global norm before clipping at each step)."""
    frozen = {n for n in net.params if any(matches(n, p) for p in r["freeze"])}
    for n in frozen:
        net.params[n].requires_grad_(False)
    for m in net.bns:
        m.train()
        if r["freeze_bn"] and all(n in frozen for n in net.bns[m][:2]):
            m.eval()
    norm_params = {n for names in net.bns.values() for n in names[:2]}

    # One param group per (lr, weight decay).
    groups = {}
    for n, p in net.params.items():
        if n in frozen:
            continue
        lr, wd = r["lr"], None
        group = next((g for g in r["groups"] if matches(n, g["pattern"])), None)
        if group:
            lr, wd = r["lr"] * group["lr"], group["wd"]
        if wd is None:
            no_decay = p.dim() <= 1 and ("norm" if n in norm_params else "bias") in r["no_decay"]
            wd = 0.0 if no_decay else r["weight_decay"]
        groups.setdefault((lr, wd), []).append(p)
    param_groups = [{"params": ps, "lr": lr, "weight_decay": wd}
                    for (lr, wd), ps in groups.items()]
    trained = [p for ps in groups.values() for p in ps]
    if r["optimizer"] == "sgd":
        opt = torch.optim.SGD(param_groups, lr=r["lr"], momentum=r["momentum"],
                              nesterov=r["nesterov"])
    else:
        cls = torch.optim.Adam if r["optimizer"] == "adam" else torch.optim.AdamW
        opt = cls(param_groups, lr=r["lr"], betas=(r["beta1"], r["beta2"]), eps=1e-8)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=r["label_smoothing"])

    losses, norms, grads = [], [], {}
    for s in range(steps):
        opt.zero_grad()
        loss = loss_fn(net.forward(x), y)
        loss.backward()
        losses.append(float(loss.detach()))
        if s == 0:
            grads = {n: p.grad.detach().numpy().copy() for n, p in net.params.items()
                     if n not in frozen}
        if r["clip"] is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(trained, r["clip"])))
        opt.step()
    final = {n: t.detach().numpy().copy() for n, t in {**net.params, **net.stats}.items()}
    return losses, grads, final, norms, frozen


# --- lwcc ----------------------------------------------------------------------

def lwcc_steps(onnx_mod, numpy_helper, binary, model, data, dump, flags, steps):
    """lwcc --train-reference --precision=f64: (losses, {grad name: tensor},
    {param name: tensor}) or raises RuntimeError with lwcc's message."""
    r = subprocess.run([binary, model, "--train-reference", "--precision=f64", "--inputs", data,
                        "--dump", dump, "--steps", str(steps), *flags], capture_output=True,
                       text=True, timeout=600)
    if r.returncode:
        raise RuntimeError(f"lwcc exited {r.returncode}: {r.stderr.strip()[-300:]}")

    def load(f):
        return numpy_helper.to_array(onnx_mod.load_tensor(os.path.join(dump, f)))
    losses = [float(load(f"loss_{s}.pb")) for s in range(steps)]
    files = os.listdir(dump)
    grads = {f[len("grad_"):-len(".pb")]: load(f) for f in files if f.startswith("grad_")}
    params = {onnx_mod.load_tensor(os.path.join(dump, f)).name: load(f)
              for f in files if f.startswith("param_")}
    return losses, grads, params


def safe(name):
    """A name as lwcc spells it in a dump's file names."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def worst(got, want, exact=()):
    """(largest relative difference, its name, problems): max|got - want| over
    the largest |want| of each tensor; `exact` names must be equal."""
    err, at, problems = 0.0, "", []
    for n in sorted(set(got) | set(want)):
        if n not in got or n not in want:
            problems.append(f"{n} {'missing in lwcc' if n not in got else 'not in PyTorch'}")
            continue
        a, b = got[n].astype(np.float64), want[n]
        if a.shape != b.shape:
            problems.append(f"{n}: shape {a.shape} vs {b.shape}")
            continue
        if n in exact and not np.array_equal(a, b):
            problems.append(f"{n} moved (should stay the model's)")
        e = float(np.max(np.abs(a - b))) / max(float(np.max(np.abs(b))), 1e-300)
        if e > err:
            err, at = e, n
    return err, at, problems


def check_case(mods, args, name, work, batches):
    torch, onnx_mod, numpy_helper = mods
    model_name, flags, perturbed = CASES[name]
    model_path, data, x, y, hashes = batches[model_name]
    row = {"case": name, "flags": " ".join(flags) or "(lwcc's defaults)", "loss": "-",
           "grad": "-", "param": "-", "ok": False, "note": ""}
    dump = os.path.join(work, name + "-dump")
    try:
        got_losses, got_grads, got_params = lwcc_steps(onnx_mod, numpy_helper, args.lwcc,
                                                       model_path, data, dump, flags, args.steps)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        row["note"] = str(e)
        return row, None
    net = OnnxNet(torch, onnx_mod, numpy_helper, onnx_mod.load(model_path))
    initial = {n: t.detach().numpy().copy() for n, t in {**net.params, **net.stats}.items()}
    recipe = parse_flags(flags)
    losses, grads, final, norms, frozen = torch_steps(
        torch, net, torch.from_numpy(x.astype(np.float64)), torch.from_numpy(y.copy()), recipe,
        args.steps)
    eval_stats = {n for m, names in net.bns.items() if not m.training for n in names[2:]}
    loss_err = max(abs(a - b) / abs(b) for a, b in zip(got_losses, losses))
    grad_err, grad_at, grad_problems = worst(got_grads, {safe(n): g for n, g in grads.items()})
    unchanged = frozen | eval_stats
    param_err, param_at, param_problems = worst(got_params, final, exact=unchanged)
    for n in unchanged:
        if not np.array_equal(final[n], initial[n]):
            param_problems.append(f"PyTorch moved {n}")
    notes = grad_problems + param_problems
    if loss_err > LOSS_TOL:
        notes.append(f"losses {got_losses} vs PyTorch's {losses}")
    if grad_err > GRAD_TOL:
        notes.append(f"worst grad {grad_at}")
    if param_err > PARAM_TOL:
        notes.append(f"worst param {param_at}")
    if norms:
        notes.append("grad norms " + ", ".join(f"{v:.3g}" for v in norms) +
                     f" (clip at {recipe['clip']:g})")
    if frozen:
        notes.append(f"{len(frozen)} frozen" + (f", {len(eval_stats) // 2} batch norms in eval "
                                                "mode" if eval_stats else ""))
    row.update(loss=f"{loss_err:.1e}", grad=f"{grad_err:.1e}", param=f"{param_err:.1e}",
               note="; ".join(notes),
               ok=loss_err <= LOSS_TOL and grad_err <= GRAD_TOL and param_err <= PARAM_TOL
               and not grad_problems and not param_problems)
    record = {"case": name, "model": model_name, "gen": MODEL_GEN[model_name],
              "model_sha256": hashes[0], "data_seed": DATA_SEED, "batch_sha256": hashes[1],
              "steps": args.steps, "flags": flags,
              "perturbed": perturbed, "torch": torch.__version__, "losses": losses,
              "unchanged": sorted(unchanged),
              "grads": {n: replay.digest(g, samples=False) for n, g in sorted(grads.items())},
              "params": {n: replay.digest(p) for n, p in sorted(final.items())}}
    return row, record


MODEL_GEN = {"lenet": ["lenet", "--test-size", "--batch", "4"],
             "resnet18": ["resnet18", "--test-size", "--batch", "4"]}
DATA_SEED = 1


def make_batches(onnx_mod, work, models):
    """Each model generated at test size, and a seeded batch for it."""
    out = {}
    for name in models:
        path = os.path.join(work, name + ".onnx")
        subprocess.run([sys.executable, GEN, *MODEL_GEN[name], "-o", path], check=True,
                       capture_output=True)
        data = os.path.join(work, name + "-data")
        model = onnx_mod.load(path)
        x, y, batch_hash = replay.batch(model, data, DATA_SEED)
        out[name] = (path, data, x, y, (replay.initializers_sha256(model), batch_hash))
    return out


def print_table(rows):
    """One row per case: its errors, result and flags, its note on a line below."""
    width = max(len(r["case"]) for r in rows)
    cols = [("case", width), ("loss", 8), ("grad", 8), ("param", 8), ("result", 6)]
    table(rows, cols, "flags", below="note", clip=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lwcc", default=os.path.join(ROOT, "build", "bin", "lwcc"))
    ap.add_argument("--cases", nargs="+", metavar="SUBSTR",
                    help="only the cases whose names contain one of these (" +
                    ", ".join(CASES) + ")")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--write", action="store_true",
                    help="write each case's PyTorch result into " +
                    os.path.relpath(replay.INPUTS, ROOT))
    ap.add_argument("--keep", metavar="DIR", help="leave the models, batches and dumps in DIR")
    args = ap.parse_args()
    args.lwcc = os.path.abspath(args.lwcc)
    if not os.path.isfile(args.lwcc):
        print(f"recipes.py: no lwcc at {args.lwcc} (build first, or give --lwcc)",
              file=sys.stderr)
        return 2
    try:
        import onnx as onnx_mod
        import torch
        from onnx import numpy_helper
    except ImportError as e:
        print(f"recipes.py: {e}; run it with the PyTorch venv (see tools/torch_check/README.md)",
              file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    names = [n for n in CASES if not args.cases or any(s in n for s in args.cases)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or tmp
        os.makedirs(work, exist_ok=True)
        batches = make_batches(onnx_mod, work, sorted({CASES[n][0] for n in names}))
        for name in names:
            t0 = time.time()
            row, record = check_case((torch, onnx_mod, numpy_helper), args, name, work, batches)
            rows.append(row)
            print(f"[{time.time() - t0:5.1f} s] {name}: {'PASS' if row['ok'] else 'FAIL'} "
                  f"{row['note']}", flush=True)
            if args.write and record:
                replay.write_case(record)
    print()
    print_table(rows)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
