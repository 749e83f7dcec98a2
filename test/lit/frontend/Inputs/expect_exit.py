#!/usr/bin/env python3
"""expect_exit.py CODES CMD [ARGS...]

Runs CMD (its stdout and stderr pass through) and succeeds only when it exits
with one of CODES, comma-separated ("1"; "0,1" for "finishes without
crashing"). Stricter than `not`, which also takes 2 for 1; a guard against
hangs too (it gives up after 120 s). A crash (a signal) never matches.
"""
import subprocess
import sys


def main(argv):
    if len(argv) < 3:
        print("usage: expect_exit.py CODES CMD [ARGS...]", file=sys.stderr)
        return 2
    want = [int(c) for c in argv[1].split(",")]
    try:
        rc = subprocess.run(argv[2:], timeout=120).returncode
    except subprocess.TimeoutExpired:
        print("expect_exit: %s did not finish within 120 s" % argv[2], file=sys.stderr)
        return 1
    if rc not in want:
        what = "was killed by signal %d" % -rc if rc < 0 else "exited with %d" % rc
        print("expect_exit: %s %s, expected exit %s" % (argv[2], what, argv[1]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
