#!/usr/bin/env python3
"""lwcc against PyTorch on Hugging Face language models (a development check, not CI).

For GPT-2 (GPT2LMHeadModel), Llama (LlamaForCausalLM) and BERT
(BertForMaskedLM) from `transformers`, each tiny (2 layers, width 64, 4
heads, vocabulary 256, sequence 32, batch 4; random weights, seed 0;
dropout off), exported by PyTorch's dynamo exporter two ways:

  loss     the model's own loss as the output, model(input_ids, labels=labels).loss:
           lwcc trains it with --loss=none
  logits   the plain [B, T, V] logits: lwcc appends its own loss,
           --loss=softmax-xent --ignore-index=-100, with --shift-labels for
           the causal models (their labels the ids, as Hugging Face takes
           them)

and for each export:

  import   lwcc MODEL --emit=train-ir
  forward  lwcc --run-reference against onnxruntime on the same batch
           (max|lwcc - ort| / max|ort| < 1e-5)
  f64      3 SGD steps (lr 0.01, momentum 0.9, weight decay 5e-4: lwcc's
           defaults) with lwcc --train-reference --precision=f64 against the
           model in float64 PyTorch: every step's loss within 1e-6 relative,
           the first step's gradients within 1e-6 of the largest gradient,
           the params after the third step within 1e-6 (relative to the
           tensor's largest element where that is above 1); the same against
           PyTorch in float32 is printed beside it (lwcc in float64 should be
           no further from PyTorch float64 than PyTorch float32 is)
  cpu      the CPU trainer (float32, 2 threads) 5 steps on the same batch
           against PyTorch float32's 5 steps: the last loss and every param
           within 1e-4 relative

and, with the CPU column, the same model's CPU trainers on several
emulated devices (two kernel threads a device; its log must say it ran on
that many), each 5 steps on that batch, every loss within 1e-5 relative of
the one-device trainer's (a cell: the
worst relative difference, FAIL where over it or where lwcc or the trainer
failed, the error in the note):

  data     --gpus 2 --strategy=data
  modelpar --gpus 2 --strategy=model
  gpus4    --gpus 4, the planner's choice
  pipe     --gpus 2 --strategy=pipeline --stages=2 --microbatches=2, against
           one device with --microbatches=2
  zero2    --gpus 2 --strategy=data --shard=zero2
  bf16     --mixed-precision=bf16 on one device against float32's losses
           within 2e-3 relative, bf16's unit roundoff (2^-9: 8 significant
           bits): the matrix products' operands and results and the
           activations between them are rounded to bf16, but the loss is a
           mean over every token of the batch, which averages those
           roundings out (lwcc's interpreter, --train-reference
           --mixed-precision=bf16, keeps these exports' 5 losses within 6e-5
           of float32's), while a wrong step (a gradient lost, a cast
           missing) moves a loss by more than one rounding of itself

`--strategies=data,pipe` runs only those columns, `--strategies=none`
none of them.

The exporter writes some values it computed from params at export time as
initializers of their own (its optimizer folds the position embeddings'
lookup of a fixed 0..T-1 into the rows themselves, for instance): PyTorch
trains the table they came from. Those are matched by value to the
PyTorch param they equal (a table's rows, a transpose) and reported.

Prints one row per export; exit status 1 if any failed.

    /work/torchenv/bin/python tools/torch_check/lm.py --lwcc build/bin/lwcc
        [--models gpt2,llama,bert] [--exports loss,logits] [--keep DIR]
        [--strategies data,modelpar,gpus4,pipe,zero2,bf16|none] [--no-cpu]
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check import first_error, lwcc, safe, table, write_tensor  # noqa: E402

B, T, V, D, LAYERS, HEADS = 4, 32, 256, 64, 2, 4
LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 5e-4
FORWARD_TOL, F64_TOL, CPU_TOL = 1e-5, 1e-6, 1e-4
F64_STEPS, CPU_STEPS = 3, 5
STRATEGY_TOL, BF16_TOL = 1e-5, 2e-3
# The strategies' columns: (name, lwcc flags, devices, the one-device
# reference's lwcc flags).
STRATEGIES = [("data", ["--gpus=2", "--strategy=data"], 2, []),
              ("modelpar", ["--gpus=2", "--strategy=model"], 2, []),
              ("gpus4", ["--gpus=4"], 4, []),
              ("pipe", ["--gpus=2", "--strategy=pipeline", "--stages=2", "--microbatches=2"], 2,
               ["--microbatches=2"]),
              ("zero2", ["--gpus=2", "--strategy=data", "--shard=zero2"], 2, []),
              ("bf16", ["--mixed-precision=bf16"], 1, [])]


def build(transformers, name):
    if name == "gpt2":
        cfg = transformers.GPT2Config(n_layer=LAYERS, n_embd=D, n_head=HEADS, vocab_size=V,
                                      n_positions=T, attn_pdrop=0.0, resid_pdrop=0.0,
                                      embd_pdrop=0.0)
        return transformers.GPT2LMHeadModel(cfg)
    if name == "llama":
        cfg = transformers.LlamaConfig(num_hidden_layers=LAYERS, hidden_size=D,
                                       intermediate_size=2 * D, num_attention_heads=HEADS,
                                       num_key_value_heads=HEADS, vocab_size=V,
                                       max_position_embeddings=T)
        return transformers.LlamaForCausalLM(cfg)
    cfg = transformers.BertConfig(num_hidden_layers=LAYERS, hidden_size=D, intermediate_size=2 * D,
                                  num_attention_heads=HEADS, vocab_size=V,
                                  max_position_embeddings=T, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    return transformers.BertForMaskedLM(cfg)


def batch(name):
    """(input_ids, the labels of the loss export, the labels lwcc's appended
    loss takes for the logits export): a causal model's labels are the ids
    (the model, and lwcc with --shift-labels, shift them), BERT's the ids at
    15% of the positions and -100 elsewhere."""
    rng = np.random.default_rng(1)
    ids = rng.integers(0, V, size=(B, T)).astype(np.int64)
    if name == "bert":
        labels = np.where(rng.random((B, T)) < 0.15, ids, -100).astype(np.int64)
        return ids, labels, labels
    return ids, ids.copy(), ids.copy()


class Wrapped:
    """The module exported: the model's loss, or its logits."""

    @staticmethod
    def make(torch, model, export):
        class Loss(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, ids, labels):
                return self.m(input_ids=ids, labels=labels).loss

        class Logits(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, ids):
                return self.m(input_ids=ids).logits

        return Loss(model) if export == "loss" else Logits(model)


def torch_steps(torch, model, export, ids, labels, appended, steps, dtype, causal):
    """`steps` SGD steps of `model` in `dtype`: (losses, the first step's
    gradients, the params after the last step), by the names lwcc's
    initializers have ("m." and the module's own)."""
    m = copy.deepcopy(model).to(dtype)
    m.train()
    w = Wrapped.make(torch, m, export)
    opt = torch.optim.SGD(w.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    tid, tlab, tapp = (torch.from_numpy(a) for a in (ids, labels, appended))
    losses, grads = [], {}
    for s in range(steps):
        opt.zero_grad()
        if export == "loss":
            loss = w(tid, tlab)
        else:
            logits, target = w(tid), tapp
            if causal:  # Hugging Face's shift
                logits, target = logits[:, :-1], target[:, 1:]
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), target.reshape(-1),
                                                     ignore_index=-100)
        loss.backward()
        losses.append(float(loss))
        if s == 0:
            grads = {n: p.grad.detach().double().numpy().copy() for n, p in w.named_parameters()}
        opt.step()
    params = {n: p.detach().double().numpy().copy() for n, p in w.named_parameters()}
    return losses, grads, params


def match_folded(initial, torch_params):
    """lwcc initializers that are no PyTorch param's name, matched by their
    starting values: {initializer: [(param, how), ...]}, every param it
    equals (how: "equal"), is the transpose of ("transpose") or the first
    rows of ("rows"). Several where the exporter deduplicated equal params
    (a norm's scale of ones): lwcc trains one copy per reader, each to be
    matched by the closest."""
    out = {}
    for name, v in initial.items():
        if name in torch_params or v.ndim == 0:
            continue
        for pname, p in torch_params.items():
            how = None
            if p.shape == v.shape and np.array_equal(p, v):
                how = "equal"
            elif v.ndim == 2 and p.shape == v.shape[::-1] and np.array_equal(p.T, v):
                how = "transpose"
            elif (v.ndim == p.ndim and v.shape[1:] == p.shape[1:] and v.shape[0] < p.shape[0]
                  and np.array_equal(p[:v.shape[0]], v)):
                how = "rows"
            if how:
                out.setdefault(name, []).append((pname, how))
    return out


def rel(a, b, scale=None):
    s = scale if scale is not None else max(float(np.max(np.abs(b))), 1.0)
    return float(np.max(np.abs(a - b))) / s if a.shape == b.shape else np.inf


def compare(load, names, losses, grads, params, folded):
    """The worst (loss, gradient, param) errors of lwcc's dump (load(file))
    against PyTorch's steps; `names`: lwcc's trained params."""
    loss_err = max(abs(float(load(f"loss_{s}.pb")) - want) / max(abs(want), 1e-300)
                   for s, want in enumerate(losses))
    gmax = max(float(np.max(np.abs(g))) for g in grads.values())
    grad_err = param_err = 0.0
    worst = ("", "")
    for n in names:
        base = n.rsplit(".", 1)[0] if n.rsplit(".", 1)[-1].isdigit() else n
        candidates = ([(n, "equal")] if n in params else
                      folded.get(n) or folded.get(base) or
                      ([(base, "equal")] if base in params else []))
        if not candidates:
            continue
        got_grad, got_param = load(f"grad_{safe(n)}.pb"), load(f"param_{safe(n)}.pb")

        def view(t, how):
            return t.T if how == "transpose" else t[:got_param.shape[0]] if how == "rows" else t
        e_grad, e_param = min((rel(got_grad, view(grads[p], h), gmax),
                               rel(got_param, view(params[p], h))) for p, h in candidates)
        if e_grad > grad_err:
            grad_err, worst = e_grad, (n, worst[1])
        if e_param > param_err:
            param_err, worst = e_param, (worst[0], n)
    return loss_err, grad_err, param_err, worst


def trainer_losses(args, path, flags, ins, work, tag, devices=1, dump=None):
    """Builds the CPU trainer of `path` with lwcc `flags` and trains it
    CPU_STEPS steps on the batch in `ins` (two kernel threads a device):
    (its losses, "") or (None, the first error of lwcc or the trainer)."""
    exe = os.path.join(work, f"{tag}-trainer")
    rc, out = lwcc(args.lwcc, [path, *flags, "--target=cpu", "-o", exe], args.timeout)
    if rc != 0:
        return None, "lwcc: " + first_error(out)
    log = os.path.join(work, f"{tag}.jsonl")
    if os.path.exists(log):
        os.remove(log)
    cmd = [exe, f"--steps={CPU_STEPS}", f"--data=raw:{ins}", f"--threads={2 * devices}",
           "--progress=off", f"--log={log}"] + ([f"--dump={dump}"] if dump else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if r.returncode != 0:
        return None, f"trainer exit {r.returncode}: " + first_error(
            (r.stderr or r.stdout).splitlines())
    steps = [r for r in map(json.loads, open(log)) if r.get("type") == "step"]
    losses = [r["loss"] for r in steps]
    if len(losses) != CPU_STEPS or any(v is None for v in losses):
        return None, f"trainer logged losses {losses}"
    ran = {r.get("devices", 1) for r in steps}
    if ran != {devices}:
        return None, f"trainer ran on {sorted(ran)} devices, not {devices}"
    return losses, ""


def strategy_cells(args, path, flags, ins, work, tag, one, row, notes):
    """The strategies' columns of `row` (STRATEGIES, those of
    args.strategies), against the one-device trainer's losses `one`."""
    refs = {(): one}
    for col, extra, devices, ref_flags in STRATEGIES:
        if col not in args.strategies:
            continue
        if tuple(ref_flags) not in refs:
            refs[tuple(ref_flags)], err = trainer_losses(args, path, [*flags, *ref_flags], ins,
                                                         work, f"{tag}-one{''.join(ref_flags)}")
            if err:
                notes.append(f"{col} reference ({' '.join(ref_flags)}): {err}")
        ref = refs[tuple(ref_flags)]
        if ref is None:
            row[col] = "FAIL"
            row["ok"] = False
            continue
        got, err = trainer_losses(args, path, [*flags, *extra], ins, work, f"{tag}-{col}",
                                  devices)
        if got is None:
            row[col] = "FAIL"
            row["ok"] = False
            notes.append(f"{col} ({' '.join(extra)}): {err}")
            continue
        worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
        tol = BF16_TOL if col == "bf16" else STRATEGY_TOL
        row[col] = f"{'ok' if worst <= tol else 'FAIL'} {worst:.0e}"
        if worst > tol:
            row["ok"] = False
            notes.append(f"{col} ({' '.join(extra)}): losses {['%.6g' % v for v in got]} "
                         f"against {['%.6g' % v for v in ref]}")


def check_one(args, mods, name, export, work):
    torch, transformers, onnx_mod, numpy_helper, ort = mods
    row = {"model": name, "export": export, "import": "-", "forward": "-", "f64": "-",
           "f32 torch": "-", "cpu": "-", "ok": False, "note": ""}
    row.update({col: "-" for col, *_ in STRATEGIES})
    torch.manual_seed(0)
    model = build(transformers, name)
    model.eval()
    ids, labels, appended = batch(name)
    path = os.path.join(work, f"{name}-{export}.onnx")
    w = Wrapped.make(torch, model, export)
    feeds = (torch.from_numpy(ids), torch.from_numpy(labels))[:2 if export == "loss" else 1]
    names = ["input_ids", "labels"][:len(feeds)]
    try:
        torch.onnx.export(w, feeds, path, dynamo=True, input_names=names,
                          output_names=["loss" if export == "loss" else "logits"],
                          optimize=not args.no_optimize)
    except Exception as e:  # noqa: BLE001 - the exporter's own failure is a row
        row["note"] = f"export failed: {type(e).__name__}: {str(e).splitlines()[0][:150]}"
        return row
    causal = name != "bert"
    flags = (["--loss=none"] if export == "loss" else
             ["--loss=softmax-xent", "--ignore-index=-100"] +
             (["--shift-labels"] if causal else []))
    ins = os.path.join(work, f"{name}-{export}-in")
    os.makedirs(ins, exist_ok=True)
    given = [ids, labels] if export == "loss" else [ids, appended]
    for k, a in enumerate(given):
        write_tensor(onnx_mod, numpy_helper, a, os.path.join(ins, f"input_{k}.pb"))
        a.tofile(os.path.join(ins, f"input_{k}.bin"))

    rc, out = lwcc(args.lwcc, [path, *flags, "--emit=train-ir", "-o", os.devnull], args.timeout)
    row["import"] = "ok" if rc == 0 else "FAIL"
    if rc != 0:
        row["note"] = first_error(out)
        return row

    outs = os.path.join(work, f"{name}-{export}-out")
    fwd_ins = os.path.join(work, f"{name}-{export}-fwd")
    os.makedirs(fwd_ins, exist_ok=True)
    for k, a in enumerate([ids, labels][:len(feeds)]):
        write_tensor(onnx_mod, numpy_helper, a, os.path.join(fwd_ins, f"input_{k}.pb"))
    rc, out = lwcc(args.lwcc, [path, "--run-reference", "--inputs", fwd_ins, "--outputs", outs],
                   args.timeout)
    if rc != 0:
        row["forward"] = "FAIL"
        row["note"] = first_error(out)
        return row
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    want = sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), [ids, labels])})[0]
    got = numpy_helper.to_array(onnx_mod.load_tensor(os.path.join(outs, "output_0.pb")))
    fwd = rel(got.astype(np.float64), want.astype(np.float64),
              max(float(np.max(np.abs(want))), 1e-30))
    row["forward"] = f"{fwd:.1e}"

    graph = onnx_mod.load(path, load_external_data=True).graph
    initial = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in graph.initializer}
    losses, grads, params = torch_steps(torch, model, export, ids, labels, appended, F64_STEPS,
                                        torch.float64, causal)
    start = {n: p.detach().double().numpy()
             for n, p in Wrapped.make(torch, model, export).named_parameters()}
    folded = match_folded(initial, start)
    dump = os.path.join(work, f"{name}-{export}-dump")
    rc, out = lwcc(args.lwcc, [path, *flags, "--train-reference", "--inputs", ins, "--steps",
                               str(F64_STEPS), "--dump", dump, "--precision=f64"], args.timeout)
    if rc != 0:
        row["f64"] = "FAIL"
        row["note"] = first_error(out)
        return row

    def load(f):
        return numpy_helper.to_array(onnx_mod.load_tensor(os.path.join(dump, f))).astype(
            np.float64)
    trained = [n for n in initial if os.path.exists(os.path.join(dump, f"grad_{safe(n)}.pb"))]
    errs = compare(load, trained, losses, grads, params, folded)
    def base(n):
        return n.rsplit(".", 1)[0] if n.rsplit(".", 1)[-1].isdigit() else n
    untracked = [n for n in trained if n not in params and n not in folded and
                 base(n) not in folded and base(n) not in params]
    matched = {p for c in folded.values() for p, _ in c}
    missing = [n for n in params if n not in trained and n not in matched]
    l32, g32, p32 = torch_steps(torch, model, export, ids, labels, appended, F64_STEPS,
                                torch.float32, causal)
    f32 = (max(abs(a - b) / abs(b) for a, b in zip(l32, losses)),
           max(rel(g32[n], grads[n], max(float(np.max(np.abs(g))) for g in grads.values()))
               for n in grads),
           max(rel(p32[n], params[n]) for n in params))
    row["f64"] = "/".join(f"{e:.0e}" for e in errs[:3])
    row["f32 torch"] = "/".join(f"{e:.0e}" for e in f32)
    ok64 = max(errs[:3]) <= F64_TOL and not untracked and not missing
    notes = []
    if folded:
        notes.append("folded: " + ", ".join(f"{k}={c[0][0]}({c[0][1]})" +
                                            (f" or {len(c) - 1} more" if len(c) > 1 else "")
                                            for k, c in folded.items()))
    if untracked:
        notes.append(f"{len(untracked)} lwcc params PyTorch lacks, e.g. {untracked[0]}")
    if missing:
        notes.append(f"{len(missing)} PyTorch params lwcc does not train, e.g. {missing[0]}")
    if max(errs[:3]) > F64_TOL:
        notes.append(f"worst grad {errs[3][0]}, param {errs[3][1]}")

    one = None
    if not args.no_cpu:
        got_dir = os.path.join(work, f"{name}-{export}-cpu")
        os.makedirs(got_dir, exist_ok=True)
        one, err = trainer_losses(args, path, flags, ins, work, f"{name}-{export}",
                                  dump=got_dir)
        if one is None:
            row["cpu"] = "FAIL"
            notes.append("cpu: " + err)
        else:
            l5, _, p5 = torch_steps(torch, model, export, ids, labels, appended, CPU_STEPS,
                                    torch.float32, causal)
            loss = float(np.fromfile(os.path.join(got_dir, "output_0.bin"), np.float32)[0])
            worst = abs(loss - l5[-1]) / abs(l5[-1])
            compared = 0
            for n in trained:
                candidates = ([(n, "equal")] if n in p5 else folded.get(n) or
                              folded.get(base(n)) or
                              ([(base(n), "equal")] if base(n) in p5 else []))
                f = os.path.join(got_dir, f"param_{safe(n)}.bin")
                if not candidates or not os.path.exists(f):
                    continue
                have = np.fromfile(f, np.float32).astype(np.float64)
                errs = []
                for pname, how in candidates:
                    want = p5[pname].T if how == "transpose" else p5[pname]
                    if how == "rows":
                        want = want[:have.size // int(np.prod(want.shape[1:]))]
                    errs.append(rel(have.reshape(want.shape), want) if have.size == want.size
                                else np.inf)
                worst = max(worst, min(errs))
                compared += 1
            if compared == 0:
                notes.append("cpu: no param compared")
            row["cpu"] = f"{worst:.1e}"
            if worst > CPU_TOL:
                notes.append("cpu trainer differs")
            ok64 = ok64 and worst <= CPU_TOL
    row["ok"] = ok64 and fwd < FORWARD_TOL
    if one is not None:
        strategy_cells(args, path, flags, ins, work, f"{name}-{export}", one, row, notes)
    elif args.strategies and not args.no_cpu:
        row.update({col: "FAIL" for col, *_ in STRATEGIES if col in args.strategies})
        row["ok"] = False
    row["note"] = "; ".join(notes)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lwcc", default=os.path.join(os.path.dirname(__file__), "..", "..", "build",
                                                   "bin", "lwcc"))
    ap.add_argument("--models", default="gpt2,llama,bert")
    ap.add_argument("--exports", default="loss,logits")
    ap.add_argument("--keep", help="work in this folder and keep it")
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--no-cpu", action="store_true", help="leave out the CPU trainer's column")
    ap.add_argument("--no-optimize", action="store_true",
                    help="export with optimize=False (the exporter's optimizer off: every "
                    "param an initializer of its own)")
    ap.add_argument("--strategies", default=",".join(c for c, *_ in STRATEGIES),
                    help="the columns of several devices and bf16 against the one-device "
                    "trainer (comma-separated, of " + ", ".join(c for c, *_ in STRATEGIES) +
                    "; none: leave them out; they need the CPU column)")
    args = ap.parse_args()
    args.strategies = [] if args.strategies == "none" else args.strategies.split(",")
    unknown = set(args.strategies) - {c for c, *_ in STRATEGIES}
    if unknown:
        ap.error(f"--strategies: unknown {', '.join(sorted(unknown))}")
    shown = [c for c, *_ in STRATEGIES if c in args.strategies and not args.no_cpu]
    import onnx
    import onnxruntime as ort
    import torch
    import transformers
    from onnx import numpy_helper
    torch.set_num_threads(2)
    mods = (torch, transformers, onnx, numpy_helper, ort)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or tmp
        os.makedirs(work, exist_ok=True)
        for name in args.models.split(","):
            for export in args.exports.split(","):
                row = check_one(args, mods, name, export, work)
                rows.append(row)
                print(f"{row['model']:6} {row['export']:7} {row['import']:6} {row['forward']:8} "
                      f"{row['f64']:18} {row['f32 torch']:18} {row['cpu']:8} " +
                      "".join(f"{row[c]:10} " for c in shown) +
                      f"{'ok' if row['ok'] else 'FAIL'}  {row['note']}", flush=True)
    print()
    table(rows, [("model", 6), ("export", 7), ("import", 6), ("forward", 8), ("f64", 18),
                 ("f32 torch", 18), ("cpu", 8), *[(c, 10) for c in shown], ("result", 6)],
          "note")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
