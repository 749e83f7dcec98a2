#!/usr/bin/env python3
"""`lwcc MODEL --check-memory-plan` on every zoo model at test size.

For each network's test-size preset, lwcc builds the training step, plans
its memory (one arena per device, liveness-based reuse, in-place updates,
views), checks that no two live values share bytes, runs one step with every
value stored at its planned offset, and requires the outputs to equal the
interpreter's exactly. Prints each model's arena size against the unshared
total and ends with the line "N passed, M failed".
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "models"))
import onnx  # noqa: E402
import zoo  # noqa: E402


def main():
    lwcc = os.path.join(ROOT, "build", "bin", "lwcc")
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in zoo.REGISTRY:
            path = os.path.join(tmp, name + ".onnx")
            onnx.save(zoo.build(name, test_size=True), path)
            r = subprocess.run([lwcc, path, "--check-memory-plan"], capture_output=True,
                               text=True, timeout=600)
            arena = re.search(r"arena (\d+) bytes", r.stdout)
            total = re.search(r"(\d+) bytes without sharing", r.stdout)
            ok = r.returncode == 0 and arena is not None and total is not None
            summary = (f"arena {int(arena.group(1)) / 1024:.0f} KiB of "
                       f"{int(total.group(1)) / 1024:.0f} KiB unshared" if ok else
                       (r.stdout + r.stderr).strip())
            print(f"{'PASS' if ok else 'FAIL'}: {name:12s} {summary}")
            passed += ok
            failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
