#!/usr/bin/env python3
"""The compiler's folders include one another in one direction only, and no
source file outgrows a reader.

    python3 tools/check_layers.py [REPO]

lwcc's C++ folders are layers, each allowed to include the folders below it
(and itself), never one above:

    ir <- interp <- cost <- passes <- plan <- frontend, codegen <- tools

`cost/` prices a step (device specs, cost model, simulator) for the passes
below the planner; `plan/` searches plans and runs passes to price them.
Prints each include that points up as FILE:LINE: includes HEADER (LAYER is
above LAYER), and each source file of more than 800 lines (tables, the .def
files, and tests excepted) as FILE: N lines; exits 1 if there is either.
"""

import os
import re
import subprocess
import sys

# Each layer and the layers it may include (besides itself).
BELOW = {
    "ir": set(),
    "interp": {"ir"},
    "cost": {"ir", "interp"},
    "passes": {"ir", "interp", "cost"},
    "plan": {"ir", "interp", "cost", "passes"},
    "frontend": {"ir", "interp", "cost", "passes", "plan"},
    "codegen": {"ir", "interp", "cost", "passes", "plan"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z]+)/[^"]+"')
SOURCE = (".cpp", ".h", ".cu", ".cc", ".py", ".sh")
MAX_LINES = 800


def tracked(repo):
    out = subprocess.run(["git", "-C", repo, "ls-files"], capture_output=True, text=True,
                         check=True).stdout
    return [f for f in out.splitlines() if f]


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    problems = []
    for path in tracked(repo):
        top = path.split("/")[0]
        full = os.path.join(repo, path)
        if not path.endswith(SOURCE) or not os.path.isfile(full):
            continue
        with open(full, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
        if top in BELOW:
            for n, line in enumerate(lines, 1):
                m = INCLUDE.match(line)
                if m and m.group(1) in BELOW and m.group(1) != top and \
                        m.group(1) not in BELOW[top]:
                    header = line.split('"')[1]
                    problems.append(f"{path}:{n}: includes {header} "
                                    f"({m.group(1)}/ is above {top}/)")
        if top != "test" and len(lines) > MAX_LINES:
            problems.append(f"{path}: {len(lines)} lines (at most {MAX_LINES} outside tables "
                            "and tests)")
    for p in problems:
        print(p)
    print(f"layers: {len(problems)} problem{'s' if len(problems) != 1 else ''}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
