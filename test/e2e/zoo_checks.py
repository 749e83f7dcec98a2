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
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
sys.path.insert(0, os.path.join(harness.ROOT, "tools", "models"))
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
    with tempfile.TemporaryDirectory() as tmp:
        for name in list(zoo.REGISTRY) + ["upnet"]:
            path = os.path.join(tmp, name + ".onnx")
            onnx.save(zoo.build(name, test_size=True), path)
            for flag, summarize in CHECKS:
                start = time.time()
                r = harness.run([harness.LWCC, path, flag])
                summary = summarize(r.stdout)
                harness.record(r.returncode == 0 and summary is not None, f"{name} {flag}",
                               "\n" + r.stdout + r.stderr,
                               f"{summary} ({time.time() - start:.1f} s)")
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
