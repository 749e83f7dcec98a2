#!/usr/bin/env python3
"""lwcc's CPU trainer beside PyTorch eager training, on Hugging Face language models.

For GPT-2 (GPT2LMHeadModel), Llama (LlamaForCausalLM) and BERT
(BertForMaskedLM) from `transformers`, each at one size (default: 4
layers, width 128, 4 heads, feed-forward 4x the width, vocabulary 1024,
sequence 128, batch 8: about a million params, 1024 tokens a step; random
weights, seed 0; dropout off), the bench exports the model's own loss,
model(input_ids, labels=labels).loss, with PyTorch's dynamo exporter (as
tools/torch_check/lm.py's `loss` export) and trains it twice over on one
fixed batch (a causal model's labels its ids, BERT's the ids at 15% of the
positions and -100 elsewhere):

  lwcc     `lwcc MODEL.onnx --loss=none --target=cpu -o trainer`, run with
           `--threads=N --data=raw:DIR`; a step's time is the median of its
           JSONL log's step_ms after the first five steps (the last left
           out), as tools/bench/cpu_vs_torch.py times it
  PyTorch  the very model that was exported (its weights saved and loaded
           in a worker process of its own, which keeps it between rounds),
           in train mode, its attention as transformers chooses it (SDPA),
           torch.set_num_threads(N); a step is zero_grad, the model's loss,
           backward and the optimizer's step, timed by the clock; the
           median over ~--seconds after two warm-up steps

with the same step: SGD (lr 0.01, momentum 0.9, weight decay 5e-4: lwcc's
defaults) in float32. Each round runs lwcc, then PyTorch; a figure is the
median over the rounds. Prints a markdown table (step time, tokens/s =
batch x sequence / step, lwcc/PyTorch, and each side's first loss on the
batch: the two train the same model), the machine, and where the lwcc
trainer's step goes (its --profile=2: the kernels of the largest shares).

Where lwcc fails to compile a model or its trainer fails to train it, the
row says so with the error, and the command is printed.

Needs PyTorch and transformers (/work/torchenv); not part of CI.

    /work/torchenv/bin/python tools/bench/lm_vs_torch.py [--models gpt2,llama,bert]
        [--threads 2] [--rounds 3] [--seconds 3] [--layers 4] [--width 128]
        [--heads 4] [--vocab 1024] [--seq 128] [--batch 8] [--keep DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("LWCC_BIN_DIR") or os.path.join(ROOT, "build", "bin")
LWCC = os.path.join(BIN, "lwcc")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_vs_torch import machine  # noqa: E402

LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 5e-4
MODELS = ["gpt2", "llama", "bert"]


def build(transformers, name, a):
    """The model `name` at the sizes of args `a`, dropout off."""
    if name == "gpt2":
        cfg = transformers.GPT2Config(n_layer=a.layers, n_embd=a.width, n_head=a.heads,
                                      n_inner=4 * a.width, vocab_size=a.vocab, n_positions=a.seq,
                                      attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0,
                                      bos_token_id=0, eos_token_id=0)
        return transformers.GPT2LMHeadModel(cfg)
    if name == "llama":
        cfg = transformers.LlamaConfig(num_hidden_layers=a.layers, hidden_size=a.width,
                                       intermediate_size=4 * a.width, num_attention_heads=a.heads,
                                       num_key_value_heads=a.heads, vocab_size=a.vocab,
                                       max_position_embeddings=a.seq)
        return transformers.LlamaForCausalLM(cfg)
    cfg = transformers.BertConfig(num_hidden_layers=a.layers, hidden_size=a.width,
                                  intermediate_size=4 * a.width, num_attention_heads=a.heads,
                                  vocab_size=a.vocab, max_position_embeddings=a.seq,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.BertForMaskedLM(cfg)


def batch(name, a):
    """(input_ids, labels) as int64 arrays [batch, seq]."""
    import numpy as np
    rng = np.random.default_rng(1)
    ids = rng.integers(0, a.vocab, size=(a.batch, a.seq)).astype(np.int64)
    if name == "bert":
        return ids, np.where(rng.random(ids.shape) < 0.15, ids, -100).astype(np.int64)
    return ids, ids.copy()


def loss_module(torch, model):
    class Loss(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids, labels):
            return self.m(input_ids=ids, labels=labels).loss

    return Loss(model)


def torch_worker(a):
    """PyTorch's training of the saved model: measures a round on each line
    read from stdin (its seconds), answering with a JSON line."""
    import numpy as np
    import torch
    import transformers
    torch.set_num_threads(a.threads)
    model = build(transformers, a.worker, a)
    model.load_state_dict(torch.load(a.state, weights_only=True))
    model.train()
    ids = torch.from_numpy(np.fromfile(os.path.join(a.batch_dir, "input_0.bin"), np.int64)
                           .reshape(a.batch, a.seq))
    labels = torch.from_numpy(np.fromfile(os.path.join(a.batch_dir, "input_1.bin"), np.int64)
                              .reshape(a.batch, a.seq))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM,
                          weight_decay=WEIGHT_DECAY)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        return float(loss.detach())

    first = step()
    step()
    print(json.dumps({"ready": True, "first_loss": first,
                      "attention": model.config._attn_implementation}), flush=True)
    for line in sys.stdin:
        seconds = float(line)
        for _ in range(2):
            step()
        times, start = [], time.perf_counter()
        while time.perf_counter() - start < seconds or len(times) < 5:
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        print(json.dumps({"step_s": statistics.median(times), "steps": len(times)}), flush=True)


class Worker:
    def __init__(self, name, state, batch_dir, a):
        env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
        sizes = [f"--{k}={getattr(a, k)}" for k in ("layers", "width", "heads", "vocab", "seq",
                                                   "batch", "threads")]
        self.p = subprocess.Popen([sys.executable, __file__, "--worker", name, "--state", state,
                                   "--batch-dir", batch_dir, *sizes],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=env)
        line = self.p.stdout.readline()
        if not line.startswith("{"):
            sys.exit(f"the PyTorch worker for {name} did not start")
        self.info = json.loads(line)

    def measure(self, seconds):
        self.p.stdin.write(f"{seconds}\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())["step_s"]

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def lwcc_run(trainer, batch_dir, threads, steps, log):
    """Trains `steps` steps; (the step records of its log, "") or (None, the error)."""
    if os.path.exists(log):
        os.remove(log)
    cmd = [trainer, f"--data=raw:{batch_dir}", f"--steps={steps}", f"--threads={threads}",
           "--progress=off", f"--log={log}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, f"`{' '.join(cmd)}` exited {r.returncode}: {r.stderr.strip()[-800:]}"
    rows = [json.loads(line) for line in open(log)]
    return [r for r in rows if r.get("type") == "step"], ""


def lwcc_measure(trainer, batch_dir, threads, steps, log):
    """The median step_ms after the first five steps, the last left out (s)."""
    rows, err = lwcc_run(trainer, batch_dir, threads, steps, log)
    if rows is None:
        return None, err
    return statistics.median(r["step_ms"] for r in rows[5:-1]) / 1000.0, ""


def profile_shares(text, top=5):
    """The `top` kernels of a trainer's --profile table, "kind share, ...";
    "" where it printed none."""
    out, inside = [], False
    for line in text.splitlines():
        words = line.split()
        if words[:2] == ["kernel", "ms/step"]:
            inside = True
        elif inside and len(words) == 3 and words[2].endswith("%"):
            out.append(f"{words[0]} {words[2]}")
        elif inside:
            break
    return ", ".join(out[:top])


def export(torch, model, ids, labels, path, optimize):
    torch.onnx.export(loss_module(torch, model), (torch.from_numpy(ids), torch.from_numpy(labels)),
                      path, dynamo=True, input_names=["input_ids", "labels"],
                      output_names=["loss"], optimize=optimize)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0,
                    help="the time of each measurement (each side, each round)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--no-optimize", action="store_true",
                    help="export with optimize=False (the exporter's optimizer off)")
    ap.add_argument("--keep", help="keep the exports and trainers in this folder")
    # A PyTorch worker (internal).
    ap.add_argument("--worker", choices=MODELS)
    ap.add_argument("--state")
    ap.add_argument("--batch-dir")
    a = ap.parse_args()
    if a.worker:
        return torch_worker(a)

    import torch
    import transformers
    torch.set_num_threads(a.threads)
    work = a.keep or tempfile.mkdtemp(prefix="lwcc-lm-vs-torch-")
    os.makedirs(work, exist_ok=True)
    tokens = a.batch * a.seq
    print(f"machine: {machine()}", flush=True)
    print(f"sizes: {a.layers} layers, width {a.width}, {a.heads} heads, feed-forward "
          f"{4 * a.width}, vocabulary {a.vocab}, sequence {a.seq}, batch {a.batch} "
          f"({tokens} tokens a step); {a.threads} threads; transformers "
          f"{transformers.__version__}", flush=True)
    rows = []
    for name in a.models.split(","):
        row = {"model": name, "params": "-", "lwcc": None, "torch": None, "note": "",
               "lwcc_loss": None, "torch_loss": None, "build_s": None}
        rows.append(row)
        torch.manual_seed(0)
        model = build(transformers, name, a)
        row["params"] = sum(p.numel() for p in model.parameters())
        model.eval()
        ids, labels = batch(name, a)
        path = os.path.join(work, f"{name}.onnx")
        try:
            export(torch, model, ids, labels, path, not a.no_optimize)
        except Exception as e:  # noqa: BLE001 - the exporter's own failure is a row
            row["note"] = f"export failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
            print(f"  {name}: {row['note']}", flush=True)
            continue
        state = os.path.join(work, f"{name}.pt")
        torch.save(model.state_dict(), state)
        batch_dir = os.path.join(work, f"{name}-batch")
        os.makedirs(batch_dir, exist_ok=True)
        ids.tofile(os.path.join(batch_dir, "input_0.bin"))
        labels.tofile(os.path.join(batch_dir, "input_1.bin"))
        trainer = os.path.join(work, f"{name}-trainer")
        cmd = [LWCC, path, "--loss=none", "--target=cpu", "-o", trainer]
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True)
        row["build_s"] = time.monotonic() - t0
        if r.returncode != 0:
            row["note"] = (f"`{' '.join(cmd)}` exited {r.returncode}: "
                           f"{r.stderr.strip()[-800:]}")
            print(f"  {name}: {row['note']}", flush=True)
            continue
        log = os.path.join(work, f"{name}.jsonl")
        worker = Worker(name, state, batch_dir, a)
        row["torch_loss"] = worker.info["first_loss"]
        row["attention"] = worker.info["attention"]
        try:
            # Steps for ~a.seconds of lwcc, from a short first run.
            first, err = lwcc_run(trainer, batch_dir, a.threads, 8, log)
            if first is None:
                row["note"] = err
                print(f"  {name}: {err}", flush=True)
                continue
            row["lwcc_loss"] = first[0]["loss"]
            guess = statistics.median(r["step_ms"] for r in first[1:-1]) / 1000.0
            steps = int(min(2000, max(12, a.seconds / guess))) + 6
            samples = {"lwcc": [], "torch": []}
            for _ in range(a.rounds):
                s, err = lwcc_measure(trainer, batch_dir, a.threads, steps, log)
                if s is None:
                    row["note"] = err
                    break
                samples["lwcc"].append(s)
                samples["torch"].append(worker.measure(a.seconds))
        finally:
            worker.close()
        if row["note"]:
            print(f"  {name}: {row['note']}", flush=True)
            continue
        r = subprocess.run([trainer, f"--data=raw:{batch_dir}", "--steps=3",
                            f"--threads={a.threads}", "--progress=off", "--profile=2"],
                           capture_output=True, text=True)
        row["profile"] = profile_shares(r.stdout + r.stderr)
        row["lwcc"] = statistics.median(samples["lwcc"])
        row["torch"] = statistics.median(samples["torch"])
        print(f"  {name}: lwcc {row['lwcc'] * 1e3:.1f} ms/step "
              f"({', '.join(f'{s * 1e3:.1f}' for s in samples['lwcc'])}), PyTorch "
              f"{row['torch'] * 1e3:.1f} ms/step "
              f"({', '.join(f'{s * 1e3:.1f}' for s in samples['torch'])}); first loss lwcc "
              f"{row['lwcc_loss']:.6f}, PyTorch {row['torch_loss']:.6f}; trainer built in "
              f"{row['build_s']:.1f} s", flush=True)

    print()
    print("| model | params | lwcc ms/step | lwcc tokens/s | PyTorch ms/step | PyTorch tokens/s "
          "| lwcc/PyTorch | first loss lwcc / PyTorch |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["lwcc"] is None:
            print(f"| {r['model']} | {r['params']} | failed | | | | | |")
            continue
        print(f"| {r['model']} | {r['params'] / 1e6:.2f} M | {r['lwcc'] * 1e3:.1f} | "
              f"{tokens / r['lwcc']:.0f} | {r['torch'] * 1e3:.1f} | {tokens / r['torch']:.0f} | "
              f"{r['torch'] / r['lwcc']:.2f} | {r['lwcc_loss']:.5f} / {r['torch_loss']:.5f} |")
    for r in rows:
        if r["lwcc"] is None:
            print(f"{r['model']}: {r['note']}")
        elif r.get("profile"):
            print(f"{r['model']}: the lwcc step's largest kernels (--profile=2): "
                  f"{r['profile']}")
    print(f"machine at the end: {machine()}")
    return 0 if all(r["lwcc"] is not None for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
