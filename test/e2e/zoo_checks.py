#!/usr/bin/env python3
"""lwcc's own checks on every zoo model at test size.

For each network's test-size preset (tools/models/zoo.py), and upnet's (the
model-collection ops: activations, prelu, max/min, resize, stateless batch norm):
  --check-gradients    every param's gradient of the training step against
                       five-point finite differences in float64 (tolerance
                       1e-6 per param);
  --check-memory-plan  the training step's memory plan: no two live values
                       share bytes, and a step run with every value at its
                       planned offset equals the interpreter's exactly.
A check passes when lwcc exits 0. Ends with the line "N passed, M failed".
"""
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "models"))
import onnx  # noqa: E402
import zoo  # noqa: E402


def gradients_summary(out):
    return (out.strip().splitlines() or [""])[-1]


def memory_summary(out):
    arena = re.search(r"arena (\d+) bytes", out)
    total = re.search(r"(\d+) bytes without sharing", out)
    if not arena or not total:
        return None
    return f"arena {int(arena.group(1)) / 1024:.0f} KiB of {int(total.group(1)) / 1024:.0f} KiB unshared"


CHECKS = [("--check-gradients", gradients_summary), ("--check-memory-plan", memory_summary)]


def main():
    lwcc = os.path.join(ROOT, "build", "bin", "lwcc")
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in list(zoo.REGISTRY) + ["upnet"]:
            path = os.path.join(tmp, name + ".onnx")
            onnx.save(zoo.build(name, test_size=True), path)
            for flag, summarize in CHECKS:
                start = time.time()
                r = subprocess.run([lwcc, path, flag], capture_output=True, text=True,
                                   timeout=600)
                summary = summarize(r.stdout)
                ok = r.returncode == 0 and summary is not None
                print(f"{'PASS' if ok else 'FAIL'}: {name:12s} {flag:20s} {summary} "
                      f"({time.time() - start:.1f} s)")
                if not ok:
                    print(r.stdout + r.stderr)
                passed += ok
                failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
