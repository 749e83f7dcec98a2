#!/usr/bin/env python3
"""Round-trips every .lwir file under a directory through lwcc-opt.

    roundtrip_all.py TEST_DIR [--lwcc-opt PATH]

For each *.lwir file below TEST_DIR (sorted, every subdirectory included):
  * lwcc-opt FILE exits 0: its output must parse again (lwcc-opt - exits 0)
    and print identically, i.e. print(parse(print(parse(FILE)))) is a fixed
    point of the text form;
  * lwcc-opt FILE exits 1: stderr must start with "FILE:LINE:COL: error: ";
  * anything else (another exit code, a signal, a hang) is a failure.
Prints one FAIL line per failure and a summary line, and exits 1 on any
failure.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

TIMEOUT_S = 60


def run(cmd, stdin_text=None):
    try:
        p = subprocess.run(cmd, input=stdin_text, capture_output=True, text=True,
                           errors="replace", timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, "", "timed out after %ds" % TIMEOUT_S
    return p.returncode, p.stdout, p.stderr


def describe_rc(rc):
    if rc is None:
        return "a timeout"
    if rc < 0:
        return "signal %d" % -rc
    return "exit code %d" % rc


def first_diff(a, b):
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return "line %d: %r != %r" % (i + 1, x, y)
    return "line %d: one output is longer (%d vs %d lines)" % (
        min(len(la), len(lb)) + 1, len(la), len(lb))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--lwcc-opt", default=shutil.which("lwcc-opt") or "lwcc-opt")
    args = ap.parse_args()
    root = os.path.abspath(args.root)

    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        files += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".lwir")]
    if not files:
        print("FAIL: no .lwir files under %s" % root)
        return 1

    valid = invalid = 0
    failures = []
    for path in files:
        rel = os.path.relpath(path, root)
        rc, out1, err = run([args.lwcc_opt, path])
        if rc == 0:
            rc2, out2, err2 = run([args.lwcc_opt, "-"], out1)
            if rc2 != 0:
                failures.append("%s: printed form is rejected (%s): %s"
                                % (rel, describe_rc(rc2), err2.strip().splitlines()[:1]))
            elif out1 != out2:
                failures.append("%s: print(parse(print)) differs from print, %s"
                                % (rel, first_diff(out1, out2)))
            else:
                valid += 1
        elif rc == 1:
            pattern = r"%s:\d+:\d+: error: \S" % re.escape(path)
            if re.match(pattern, err):
                invalid += 1
            else:
                failures.append("%s: rejected without a FILE:LINE:COL: error: message: %r"
                                % (rel, err[:200]))
        else:
            failures.append("%s: lwcc-opt ended with %s: %r" % (rel, describe_rc(rc), err[-300:]))

    for f in failures:
        print("FAIL: " + f)
    print("roundtrip: %d valid files fixed-point, %d invalid files rejected cleanly%s"
          % (valid, invalid, ", %d FAILED" % len(failures) if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
