"""Runs a command as a whole process and measures it: the benches' timer."""
import os
import subprocess
import tempfile
import time


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
