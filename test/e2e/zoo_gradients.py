#!/usr/bin/env python3
"""`lwcc MODEL --check-gradients` on every zoo model at test size.

Builds each network's test-size preset, runs lwcc's whole-model gradient
check (float64 reference interpreter against five-point finite differences,
tolerance 1e-6 per param) and counts a model as passed when lwcc exits 0.
Ends with the line "N passed, M failed".
"""
import os
import subprocess
import sys
import tempfile
import time

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
            start = time.time()
            r = subprocess.run([lwcc, path, "--check-gradients"], capture_output=True, text=True,
                               timeout=600)
            last = (r.stdout.strip().splitlines() or [""])[-1]
            ok = r.returncode == 0
            print(f"{'PASS' if ok else 'FAIL'}: {name:12s} {last} ({time.time() - start:.1f} s)")
            if not ok:
                print(r.stdout + r.stderr)
            passed += ok
            failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
