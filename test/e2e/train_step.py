#!/usr/bin/env python3
"""`lwcc MODEL --train-reference` against an independent numpy training step.

Builds two small ONNX models with onnx.helper (an MLP: Gemm+Relu+Gemm, and a
CNN: Conv 3x3 pad 1+Relu+MaxPool 2x2+Flatten+Gemm), trains them with lwcc's
reference interpreter and compares, for every run, the loss of every step,
every first-step gradient, every param after the last step, and the
parameter change (param - initial param), against a float64 numpy
implementation of the forward pass, mean softmax cross-entropy, the
backward pass, the optimizers (SGD with momentum / Nesterov and weight decay,
Adam, AdamW), the LR schedules (linear warm-up, step, cosine) and the
recipes (label smoothing as PyTorch's CrossEntropyLoss(label_smoothing=E),
frozen params: no gradient, unchanged bit for bit; gradients clipped by their
global L2 norm as torch.nn.utils.clip_grad_norm_, active and inactive).

Errors are normwise: max|lwcc - numpy| / max|numpy| over a tensor.
  * float64 models (TensorProto.DOUBLE) with --precision=f64: < 1e-9
    (a float32 model is dumped as float32, so its files cannot show more);
  * float32 models with --precision=f32: < 1e-4 (loss, gradients, params).
Also checks that 50 steps of SGD with momentum (all lwcc's defaults) bring the MLP's loss on one fixed batch down at least 10x.

Prints one line per check and ends with "N passed, M failed"; exits 1 on
any failure. Seeded; runs in a few seconds.
"""
import fnmatch
import math
import os
import re
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

LWCC = os.environ.get("LWCC", harness.LWCC)

TOL_F64 = 1e-9
TOL_F32 = 1e-4
NUM_CLASSES = 5


# ---------------------------------------------------------------------------
# Models: ONNX graph + numpy forward/backward (float64).

class Mlp:
    """x[N,D] -> Gemm(transB=1)+b -> Relu -> Gemm(transB=1)+b -> logits[N,C]."""
    name = "mlp"

    def __init__(self, rng, n=6, d=8, h=16, c=NUM_CLASSES):
        self.n, self.d, self.h, self.c = n, d, h, c
        self.init = {
            "fc1.weight": rng.standard_normal((h, d)) * (1.0 / math.sqrt(d)),
            "fc1.bias": rng.standard_normal(h) * 0.1,
            "fc2.weight": rng.standard_normal((c, h)) * (1.0 / math.sqrt(h)),
            "fc2.bias": rng.standard_normal(c) * 0.1,
        }
        self.x = rng.standard_normal((n, d))
        self.labels = rng.integers(0, c, n).astype(np.int64)

    def graph(self, elem):
        nodes = [
            helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["logits"], transB=1),
        ]
        return nodes, [helper.make_tensor_value_info("x", elem, [self.n, self.d])], \
            [helper.make_tensor_value_info("logits", elem, [self.n, self.c])]

    def loss_grad(self, p, x, labels, smoothing=0.0):
        h = x @ p["fc1.weight"].T + p["fc1.bias"]
        r = np.maximum(h, 0.0)
        y = r @ p["fc2.weight"].T + p["fc2.bias"]
        loss, dy = softmax_xent(y, labels, smoothing)
        g = {"fc2.weight": dy.T @ r, "fc2.bias": dy.sum(0)}
        dh = (dy @ p["fc2.weight"]) * (h > 0)
        g["fc1.weight"] = dh.T @ x
        g["fc1.bias"] = dh.sum(0)
        return loss, g


class Cnn:
    """x[N,Ci,S,S] -> Conv 3x3 pad 1 + b -> Relu -> MaxPool 2x2/2 -> Flatten -> Gemm(transB=1)+b."""
    name = "cnn"

    def __init__(self, rng, n=4, ci=2, s=6, co=3, c=NUM_CLASSES):
        self.n, self.ci, self.s, self.co, self.c = n, ci, s, co, c
        self.f = co * (s // 2) * (s // 2)
        self.init = {
            "conv.weight": rng.standard_normal((co, ci, 3, 3)) * (1.0 / math.sqrt(ci * 9)),
            "conv.bias": rng.standard_normal(co) * 0.1,
            "fc.weight": rng.standard_normal((c, self.f)) * (1.0 / math.sqrt(self.f)),
            "fc.bias": rng.standard_normal(c) * 0.1,
        }
        self.x = rng.standard_normal((n, ci, s, s))
        self.labels = rng.integers(0, c, n).astype(np.int64)

    def graph(self, elem):
        nodes = [
            helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["conv"],
                             kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
            helper.make_node("Relu", ["conv"], ["r"]),
            helper.make_node("MaxPool", ["r"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("Flatten", ["pool"], ["flat"], axis=1),
            helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], transB=1),
        ]
        return nodes, [helper.make_tensor_value_info("x", elem, [self.n, self.ci, self.s, self.s])], \
            [helper.make_tensor_value_info("logits", elem, [self.n, self.c])]

    def im2col(self, x):
        """[N,Ci,S,S] -> [N, S*S, Ci*9] (pad 1, stride 1), column order (ci, kh, kw)."""
        n, ci, s = x.shape[0], self.ci, self.s
        xp = np.zeros((n, ci, s + 2, s + 2))
        xp[:, :, 1:-1, 1:-1] = x
        cols = np.empty((n, s, s, ci, 3, 3))
        for i in range(s):
            for j in range(s):
                cols[:, i, j] = xp[:, :, i:i + 3, j:j + 3]
        return cols.reshape(n, s * s, ci * 9)

    def loss_grad(self, p, x, labels, smoothing=0.0):
        n, co, s, h2 = x.shape[0], self.co, self.s, self.s // 2
        cols = self.im2col(x)                                  # [N, S*S, Ci*9]
        wmat = p["conv.weight"].reshape(co, -1)                # [Co, Ci*9]
        conv = cols @ wmat.T + p["conv.bias"]                  # [N, S*S, Co]
        conv = conv.transpose(0, 2, 1).reshape(n, co, s, s)    # NCHW
        r = np.maximum(conv, 0.0)
        win = r.reshape(n, co, h2, 2, h2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, co, h2, h2, 4)
        arg = win.argmax(-1)
        pool = np.take_along_axis(win, arg[..., None], -1)[..., 0]
        flat = pool.reshape(n, -1)
        y = flat @ p["fc.weight"].T + p["fc.bias"]
        loss, dy = softmax_xent(y, labels, smoothing)
        g = {"fc.weight": dy.T @ flat, "fc.bias": dy.sum(0)}
        dpool = (dy @ p["fc.weight"]).reshape(n, co, h2, h2)
        dwin = np.zeros((n, co, h2, h2, 4))
        np.put_along_axis(dwin, arg[..., None], dpool[..., None], -1)
        dr = dwin.reshape(n, co, h2, h2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, co, s, s)
        dconv = dr * (conv > 0)
        dconv_cols = dconv.reshape(n, co, s * s)               # [N, Co, S*S]
        g["conv.weight"] = np.einsum("nop,npk->ok", dconv_cols, cols).reshape(p["conv.weight"].shape)
        g["conv.bias"] = dconv_cols.sum((0, 2))
        return loss, g


def softmax_xent(y, labels, smoothing=0.0):
    """Mean over the batch of PyTorch's CrossEntropyLoss(label_smoothing=E):
    (1-E)·(-log softmax(y)[label]) + E·mean_k(-log softmax(y)[k]); returns
    (loss, dloss/dy)."""
    n, k = y.shape
    z = y - y.max(1, keepdims=True)
    lse = np.log(np.exp(z).sum(1))
    logp = z - lse[:, None]
    nll = -logp[np.arange(n), labels]
    loss = float(np.mean((1.0 - smoothing) * nll + smoothing * (-logp).mean(1)))
    target = np.full((n, k), smoothing / k)
    target[np.arange(n), labels] += 1.0 - smoothing
    return loss, (np.exp(logp) - target) / n


# ---------------------------------------------------------------------------
# Optimizers and LR schedules (numpy replay of what the flags ask for).

DEFAULTS = {
    "sgd": dict(lr=0.01, momentum=0.9, wd=5e-4),
    "adam": dict(lr=1e-3, wd=0.0),
    "adamw": dict(lr=1e-3, wd=0.01),
}


class Optimizer:
    def __init__(self, kind="sgd", lr=None, momentum=None, wd=None, nesterov=False, beta1=None,
                 beta2=None, schedule="constant", warmup=0, total=0, step_size=0, gamma=None,
                 smoothing=0.0, freeze=(), no_decay=False, groups=(), clip=None):
        d = DEFAULTS[kind]
        self.kind = kind
        self.lr = d["lr"] if lr is None else lr
        self.momentum = d.get("momentum", 0.0) if momentum is None else momentum
        self.wd = d["wd"] if wd is None else wd
        self.nesterov = nesterov
        self.b1 = 0.9 if beta1 is None else beta1
        self.b2 = 0.999 if beta2 is None else beta2
        self.eps = 1e-8
        self.schedule, self.warmup, self.total, self.step_size = schedule, warmup, total, step_size
        self.gamma = 0.1 if gamma is None else gamma
        # The flags that ask lwcc for exactly this (only non-defaults are passed).
        self.flags = ["--optimizer=" + kind]
        for flag, val in (("--lr", lr), ("--momentum", momentum), ("--weight-decay", wd),
                          ("--beta1", beta1), ("--beta2", beta2), ("--gamma", gamma)):
            if val is not None:
                self.flags.append(f"{flag}={val!r}")
        if nesterov:
            self.flags.append("--nesterov")
        if schedule != "constant":
            self.flags.append("--lr-schedule=" + schedule)
        if warmup:
            self.flags.append(f"--warmup-steps={warmup}")
        if total:
            self.flags.append(f"--total-steps={total}")
        if step_size:
            self.flags.append(f"--step-size={step_size}")
        # Recipes: label smoothing, frozen params (globs), no decay on 1-D
        # params (these models have no norms: their biases), parameter groups
        # (glob, lr multiplier, weight decay or None; the first match wins).
        self.smoothing, self.freeze = smoothing, list(freeze)
        self.no_decay, self.groups = no_decay, list(groups)
        self.clip = clip
        if clip is not None:
            self.flags.append(f"--clip-grad-norm={clip!r}")
        if smoothing:
            self.flags.append(f"--label-smoothing={smoothing!r}")
        if self.freeze:
            self.flags.append("--freeze=" + ",".join(self.freeze))
        if no_decay:
            self.flags.append("--no-decay=bias,norm")
        for pat, mult, gwd in self.groups:
            items = [f"lr={mult!r}"] + ([f"wd={gwd!r}"] if gwd is not None else [])
            self.flags.append(f"--param-group={pat}:" + ",".join(items))

    def group(self, name, ndim):
        """(lr multiplier, weight decay) of a param."""
        for pat, mult, gwd in self.groups:
            if fnmatch.fnmatchcase(name, pat):
                if gwd is not None:
                    return mult, gwd
                break
        else:
            mult = 1.0
        return mult, 0.0 if self.no_decay and ndim <= 1 else self.wd

    def clipped(self, g):
        """torch.nn.utils.clip_grad_norm_(trained params, clip): the gradients
        times min(clip / (total norm + 1e-6), 1), and the total norm."""
        trained = [k for k in g if not self.frozen(k)]
        total = math.sqrt(sum(float(np.sum(g[k] ** 2)) for k in trained))
        if self.clip is None:
            return g, total
        coef = min(self.clip / (total + 1e-6), 1.0)
        return {k: (v * coef if k in trained else v) for k, v in g.items()}, total

    def frozen(self, name):
        return any(fnmatch.fnmatchcase(name, pat) for pat in self.freeze)

    def lr_at(self, s):
        """PyTorch-style: linear warm-up, then constant / StepLR / cosine annealing (min 0)."""
        if s < self.warmup:
            return self.lr * (s + 1) / self.warmup
        t = s - self.warmup
        if self.schedule == "step":
            return self.lr * self.gamma ** (t // self.step_size)
        if self.schedule == "cosine":
            frac = min(1.0, t / max(1, self.total - self.warmup))
            return 0.5 * self.lr * (1.0 + math.cos(math.pi * frac))
        return self.lr

    def update(self, p, g, state, s):
        """One step (step counter s, 0-based) of every param; returns the new params."""
        out = {}
        for k, w in p.items():
            if self.frozen(k):
                out[k] = w
                continue
            mult, wd = self.group(k, w.ndim)
            lr = self.lr_at(s) * mult
            gk = g[k]
            if self.kind == "sgd":
                # torch.optim.SGD (dampening 0): buf = momentum*buf + (g + wd*w).
                gk = gk + wd * w
                m = self.momentum * state.get(("m", k), 0.0) + gk
                state[("m", k)] = m
                out[k] = w - lr * (gk + self.momentum * m if self.nesterov else m)
            else:
                # torch.optim.Adam (L2 in the gradient) / AdamW (decoupled decay).
                if self.kind == "adamw":
                    w = w * (1.0 - lr * wd)
                else:
                    gk = gk + wd * w
                m = self.b1 * state.get(("m", k), 0.0) + (1.0 - self.b1) * gk
                v = self.b2 * state.get(("v", k), 0.0) + (1.0 - self.b2) * gk * gk
                state[("m", k)], state[("v", k)] = m, v
                t = s + 1
                mhat = m / (1.0 - self.b1 ** t)
                vhat = v / (1.0 - self.b2 ** t)
                out[k] = w - lr * mhat / (np.sqrt(vhat) + self.eps)
        return out


def reference(model, params, x, labels, opt, steps):
    """Replays `steps` training steps; returns (losses, first-step grads, final params)."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    state, losses, grads0 = {}, [], None
    for s in range(steps):
        loss, g = model.loss_grad(p, x, labels, opt.smoothing)
        losses.append(loss)
        if grads0 is None:
            grads0 = g
        g, _ = opt.clipped(g)
        p = opt.update(p, g, state, s)
    return losses, grads0, p


# ---------------------------------------------------------------------------
# lwcc runs.

def safe(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def write_model(model, dtype, path):
    elem = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    nodes, inputs, outputs = model.graph(elem)
    inits = [numpy_helper.from_array(v.astype(dtype), k) for k, v in model.init.items()]
    g = helper.make_graph(nodes, model.name, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)


def write_inputs(model, dtype, d):
    os.makedirs(d, exist_ok=True)
    onnx.save_tensor(numpy_helper.from_array(model.x.astype(dtype), "x"),
                     os.path.join(d, "input_0.pb"))
    onnx.save_tensor(numpy_helper.from_array(model.labels, "labels"),
                     os.path.join(d, "input_1.pb"))


def load(path):
    return numpy_helper.to_array(onnx.load_tensor(path)).astype(np.float64)


def run_lwcc(model_path, inputs_dir, out_dir, precision, steps, flags, names, trained=None):
    """`trained`: the params that get a gradient (default: all of `names`)."""
    trained = names if trained is None else trained
    cmd = [LWCC, model_path, "--train-reference", "--inputs", inputs_dir, "--steps", str(steps),
           "--dump", out_dir, "--precision=" + precision] + flags
    harness.check_output(cmd, timeout=120, tail=100000)
    losses = [float(load(os.path.join(out_dir, f"loss_{s}.pb"))) for s in range(steps)]
    files = set(os.listdir(out_dir))
    want = {f"grad_{safe(n)}.pb" for n in trained} | {f"param_{safe(n)}.pb" for n in names}
    missing = sorted(want - files)
    extra = sorted(f for f in files if f.startswith(("grad_", "param_")) and f not in want)
    if missing or extra:
        raise RuntimeError(f"dump files: missing {missing}, unexpected {extra}")
    grads = {n: load(os.path.join(out_dir, f"grad_{safe(n)}.pb")) for n in trained}
    params = {n: load(os.path.join(out_dir, f"param_{safe(n)}.pb")) for n in names}
    return losses, grads, params


def relerr(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return math.inf
    scale = np.max(np.abs(want)) if want.size else 0.0
    diff = np.max(np.abs(got - want)) if want.size else 0.0
    return float(diff / scale) if scale > 0 else float(diff)


class Results:
    """The worst error of each (precision, category) over the checks; the
    cases themselves are the harness's."""

    def __init__(self):
        self.worst = {}  # (precision, category) -> max error over all checks

    def record(self, ok, name, detail=""):
        harness.record(ok, name, info=detail)


def compare(res, tmp, model, dtype, opt, steps, label):
    precision = "f64" if dtype == np.float64 else "f32"
    tol = TOL_F64 if dtype == np.float64 else TOL_F32
    tag = f"{model.name}/{precision}"
    model_path = os.path.join(tmp, f"{tag.replace('/', '-')}.onnx")
    inputs_dir = os.path.join(tmp, f"{tag.replace('/', '-')}-inputs")
    if not os.path.exists(model_path):
        write_model(model, dtype, model_path)
        write_inputs(model, dtype, inputs_dir)
    out_dir = tempfile.mkdtemp(dir=tmp)
    name = f"{tag} {label}, {steps} step{'s' if steps > 1 else ''} [{' '.join(opt.flags)}]"
    names = list(model.init)
    trained = [n for n in names if not opt.frozen(n)]
    try:
        got_l, got_g, got_p = run_lwcc(model_path, inputs_dir, out_dir, precision, steps,
                                       opt.flags, names, trained)
    except RuntimeError as e:
        res.record(False, name, str(e))
        return
    # The reference starts from exactly the values lwcc read (rounded to dtype).
    init = {k: v.astype(dtype).astype(np.float64) for k, v in model.init.items()}
    x = model.x.astype(dtype).astype(np.float64)
    want_l, want_g, want_p = reference(model, init, x, model.labels, opt, steps)
    errs = {
        "loss": max(relerr(a, b) for a, b in zip(got_l, want_l)),
        "grad": max(relerr(got_g[n], want_g[n]) for n in trained),
        "param": max(relerr(got_p[n], want_p[n]) for n in names),
    }
    worst_at = {
        "grad": max(trained, key=lambda n: relerr(got_g[n], want_g[n])),
        "param": max(names, key=lambda n: relerr(got_p[n], want_p[n])),
    }
    if dtype == np.float64:
        # The change of each param: not hidden behind the param's own magnitude.
        errs["update"] = max(relerr(got_p[n] - init[n], want_p[n] - init[n]) for n in trained)
        # Frozen params: bit for bit what they started as.
        errs["frozen"] = max([float(np.max(np.abs(got_p[n] - init[n])))
                              for n in names if n not in trained] or [0.0])
        worst_at["update"] = max(names, key=lambda n: relerr(got_p[n] - init[n],
                                                             want_p[n] - init[n]))
    for k, e in errs.items():
        res.worst[(precision, k)] = max(res.worst.get((precision, k), 0.0), e)
    ok = all(e < tol for e in errs.values())
    detail = " ".join(f"{k} {e:.1e}" for k, e in errs.items())
    line = f"{detail} (tol {tol:.0e}); loss_0 {got_l[0]:.6f}"
    if steps > 1:
        line += f" loss_{steps - 1} {got_l[-1]:.6f}"
    if not ok:
        bad = [k for k, e in errs.items() if e >= tol]
        for k in bad:
            if k == "loss":
                line += f"\n    losses lwcc {got_l} numpy {want_l}"
            else:
                n = worst_at[k]
                got, want = (got_g[n], want_g[n]) if k == "grad" else (got_p[n], want_p[n])
                i = np.unravel_index(np.argmax(np.abs(got - want)), want.shape)
                line += (f"\n    {k} {n}{list(i)}: lwcc {got[i]!r} numpy {want[i]!r}")
    res.record(ok, name, line)


def main():
    if not os.path.exists(LWCC):
        harness.record(False, "lwcc is built", f"no {LWCC}")
        return harness.finish()
    res = Results()
    rng = np.random.default_rng(20240607)
    models = [Mlp(rng), Cnn(rng)]
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            for dtype in (np.float64, np.float32):
                # 2. SGD with momentum and weight decay, lwcc's defaults.
                compare(res, tmp, model, dtype, Optimizer("sgd"), 1, "sgd defaults")
                compare(res, tmp, model, dtype, Optimizer("sgd"), 3, "sgd defaults")
                # 3. Nesterov, Adam and AdamW, one and three steps.
                compare(res, tmp, model, dtype,
                        Optimizer("sgd", lr=0.05, momentum=0.8, wd=1e-3, nesterov=True), 1,
                        "nesterov")
                compare(res, tmp, model, dtype,
                        Optimizer("sgd", lr=0.05, momentum=0.8, wd=1e-3, nesterov=True), 3,
                        "nesterov")
                for steps in (1, 3):
                    compare(res, tmp, model, dtype, Optimizer("adam"), steps, "adam defaults")
                    compare(res, tmp, model, dtype, Optimizer("adamw"), steps, "adamw defaults")
                compare(res, tmp, model, dtype,
                        Optimizer("adam", lr=0.01, wd=0.02, beta1=0.8, beta2=0.99), 3,
                        "adam + L2")
                compare(res, tmp, model, dtype,
                        Optimizer("adamw", lr=0.01, wd=0.1, beta1=0.85, beta2=0.95), 3,
                        "adamw")
                # 4. LR schedules: warm-up 2, then step / cosine, 6 steps.
                compare(res, tmp, model, dtype,
                        Optimizer("sgd", lr=0.05, schedule="step", warmup=2, step_size=2,
                                  gamma=0.5), 6, "warmup+step")
                compare(res, tmp, model, dtype,
                        Optimizer("sgd", lr=0.05, schedule="cosine", warmup=2, total=5), 6,
                        "warmup+cosine")
                compare(res, tmp, model, dtype,
                        Optimizer("adamw", lr=0.01, schedule="cosine", warmup=2, total=8), 6,
                        "warmup+cosine")
                compare(res, tmp, model, dtype,
                        Optimizer("adam", lr=0.01, schedule="step", warmup=2, step_size=1,
                                  gamma=0.7), 6, "warmup+step")
                # 5. Recipes: label smoothing, frozen params.
                compare(res, tmp, model, dtype, Optimizer("sgd", smoothing=0.1), 3,
                        "label smoothing")
                compare(res, tmp, model, dtype, Optimizer("adamw", smoothing=0.25), 3,
                        "label smoothing")
                first = list(model.init)[0].split(".")[0]
                compare(res, tmp, model, dtype, Optimizer("sgd", freeze=[first + ".*"]), 3,
                        "frozen " + first)
                compare(res, tmp, model, dtype,
                        Optimizer("adam", smoothing=0.1, freeze=["*.b?as"]), 3,
                        "frozen biases + smoothing")
                compare(res, tmp, model, dtype, Optimizer("sgd", wd=0.05, no_decay=True), 3,
                        "no decay on biases")
                last = list(model.init)[-1].split(".")[0]
                compare(res, tmp, model, dtype,
                        Optimizer("sgd", wd=0.01, no_decay=True,
                                  groups=[(last + ".*", 0.1, None), ("*", 2.0, 0.03)]), 3,
                        "param groups")
                compare(res, tmp, model, dtype,
                        Optimizer("adamw", groups=[(last + ".weight", 3.0, 0.2)]), 3,
                        "param groups")
                # Clipping by the global norm: active (every step's norm is
                # above 0.05: the gradients shrink), inactive (never above 100:
                # the step of no clipping), and with frozen params (not counted).
                compare(res, tmp, model, dtype, Optimizer("sgd", lr=0.1, clip=0.05), 3,
                        "clip-grad-norm active")
                compare(res, tmp, model, dtype, Optimizer("sgd", clip=100.0), 3,
                        "clip-grad-norm inactive")
                compare(res, tmp, model, dtype,
                        Optimizer("adamw", freeze=[first + ".*"], clip=0.1), 3,
                        "clip-grad-norm frozen " + first)

        # 6. 50 steps of SGD with momentum on one batch, all of lwcc's defaults
        # (lr 0.01, momentum 0.9, weight decay 5e-4): the loss falls >= 10x.
        mlp = models[0]
        out_dir = tempfile.mkdtemp(dir=tmp)
        name = "mlp/f32 converges: 50 steps sgd defaults (lr 0.01, momentum 0.9, wd 5e-4)"
        try:
            losses, _, _ = run_lwcc(os.path.join(tmp, "mlp-f32.onnx"),
                                    os.path.join(tmp, "mlp-f32-inputs"), out_dir, "f32", 50,
                                    ["--optimizer=sgd"], list(mlp.init))
            init = {k: v.astype(np.float32).astype(np.float64) for k, v in mlp.init.items()}
            want, _, _ = reference(mlp, init, mlp.x.astype(np.float32).astype(np.float64),
                                   mlp.labels, Optimizer("sgd"), 50)
            ok = all(math.isfinite(v) for v in losses) and losses[49] <= losses[0] / 10
            res.record(ok, name, f"loss_0 {losses[0]:.6f} loss_49 {losses[49]:.6f} "
                                 f"(down {losses[0] / losses[49]:.1f}x, need >= 10x; "
                                 f"numpy loss_49 {want[49]:.6f})")
        except RuntimeError as e:
            res.record(False, name, str(e))

    for (precision, k), e in sorted(res.worst.items()):
        print(f"max {k} error, {precision}: {e:.2e}")
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
