#!/usr/bin/env python3
"""Real exports on several CPU devices train like on one (a development check).

For each ONNX file (e.g. check.py's exports, kept with --keep DIR): a CPU
trainer with `--gpus 1` and one with `--gpus N --strategy=S` (default 4,
layerwise), both built as test/e2e/multi_device_trainer.py builds its
trainers (`lwcc --target=cpu --emit=source`, compiled at -O0), run 5 steps
with the same seed on synthetic data (two kernel threads per device); the 5
losses of the JSONL logs must agree within 1e-5 relative.

    python3 tools/torch_check/multidev.py [--gpus 4] [--strategy layerwise]
        [--lwcc-flag=--microbatches=1] MODEL.onnx ...

Needs no PyTorch (only the build's lwcc and runtime).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "test", "e2e"))
import multi_device_trainer as mdt  # noqa: E402


def check(path, gpus, strategy, extra, tmp):
    name = os.path.splitext(os.path.basename(path))[0]
    runs = {}
    for g in (1, gpus):
        flags = [f"--gpus={g}", f"--strategy={strategy}", *extra] if g > 1 else []
        out = os.path.join(tmp, f"{name}-{g}")
        t0 = time.time()
        exe, err = mdt.build(os.path.abspath(path), flags, out)
        if not exe:
            return False, f"--gpus {g}: build failed: {err.strip().splitlines()[-1:]}"
        work = os.path.join(out, "work")
        r = mdt.train(exe, work, [f"--steps={mdt.STEPS}", "--log=log.jsonl"], g)
        if r.returncode:
            return False, f"--gpus {g}: run failed: {r.stderr.strip().splitlines()[-1:]}"
        runs[g] = mdt.losses(os.path.join(work, "log.jsonl"))
        print(f"  [{time.time() - t0:6.1f} s] {name} --gpus {g}: losses {runs[g]}", flush=True)
    ref, got = runs[1], runs[gpus]
    worst = max((abs(a - b) / max(abs(a), 1e-12) for a, b in zip(ref, got)), default=0.0)
    ok = len(ref) == len(got) == mdt.STEPS and worst <= mdt.LOSS_TOL
    return ok, f"worst relative loss difference {worst:.1e} over {len(got)} steps"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", metavar="MODEL.onnx")
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--strategy", default="layerwise")
    ap.add_argument("--lwcc-flag", action="append", default=[], metavar="FLAG",
                    help="another lwcc flag for the multi-device trainer (e.g. "
                    "--lwcc-flag=--microbatches=1), repeatable")
    args = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.models:
            try:
                ok, msg = check(path, args.gpus, args.strategy, args.lwcc_flag, tmp)
            except subprocess.TimeoutExpired as e:
                ok, msg = False, f"{os.path.basename(e.cmd[0])} ran past {e.timeout:.0f} s"
            failed += not ok
            print(f"{'PASS' if ok else 'FAIL'} {os.path.basename(path)} --gpus {args.gpus} "
                  f"--strategy={args.strategy} {' '.join(args.lwcc_flag)}: {msg}", flush=True)
    print(f"{len(args.models) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
