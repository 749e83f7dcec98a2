"""The benches' shared helpers: where lwcc and tools/models/gen.py are, `run`
(a command that must succeed), `parser` (the arguments the model benches
share) and `timed` (a command measured as a whole process: the benches'
timer)."""
import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("LWCC_BIN_DIR") or os.path.join(ROOT, "build", "bin")
LWCC = os.path.join(BIN, "lwcc")
GEN = os.path.join(ROOT, "tools", "models", "gen.py")


def run(cmd):
    """Runs `cmd`, capturing its output as text; exits with its stderr's tail
    when it fails."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr[-1500:]}")
    return r


def parser(models, steps):
    """An argument parser with --models (zoo names, comma-separated; default
    `models`) and --steps (default `steps`)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=models)
    ap.add_argument("--steps", type=int, default=steps)
    return ap


def timed(cmd, timeout):
    """Runs `cmd` with stdout discarded. Returns (seconds, or None when it ran past
    `timeout` and was killed; peak resident MiB of it and the children it waited
    for; exit code; stderr). stderr goes to a file: a pipe nobody reads would fill."""
    with tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > timeout:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                return None, usage.ru_maxrss / 1024, -9, ""
            time.sleep(0.02)
        seconds = time.monotonic() - start
        err.seek(0)
        return (seconds, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status),
                err.read().decode(errors="replace"))
