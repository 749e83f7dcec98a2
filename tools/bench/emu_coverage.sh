#!/usr/bin/env bash
# Line coverage of the CUDA runtime (runtime/cuda) by the emulated device's
# suites: the emulated runtime (liblwcc_runtime_emu.a: runtime/cuda's sources
# with their launches rewritten, whose #line directives name runtime/cuda/*)
# and its unit tests built with --coverage in build-cov/ (Debug, -O1), then
# lwemu-unittests, test/e2e/emulated_gpu.py and (when it is given no
# options) the test command's other suites with emulated CUDA trainers
# (gpu_check_emulated.py, trainer_recipes.py, split_sources.py) run against
# it, then gcov's
# counts summed over every object and process, per file of runtime/cuda.
#
#   bash tools/bench/emu_coverage.sh [--report-only] [emulated_gpu.py's options]
#
# --report-only skips the build and the runs and reports the counts already
# there. lwcc itself is the regular build's (build/bin/lwcc, which must be
# current), copied into build-cov/bin so that the trainers it builds find
# build-cov's runtime, as is the CPU runtime the suite's CPU trainers link;
# neither is measured. Writes build-cov/coverage/summary.txt (the table) and,
# per file, build-cov/coverage/FILE.uncovered (each function with lines
# never run: its name and those lines' numbers). On the 2-core machine (nice, -j2) the
# first build takes about 15 minutes, the runs about 4.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$(pwd)
COV=${LWCC_COV_DIR:-build-cov}
REPORT_ONLY=
if [[ ${1:-} == --report-only ]]; then
  REPORT_ONLY=1
  shift
fi
if [[ -z $REPORT_ONLY ]]; then
  nice cmake -S . -B "$COV" -G Ninja -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS=--coverage -O1" \
    >/dev/null
  nice cmake --build "$COV" -j 2 --target lwcc_runtime_emu lwemu-unittests
  # Trainers built against the runtime link gcov's library too (the .libs
  # file lists what a trainer links after the runtime).
  libs=$COV/lib/liblwcc_runtime_emu.libs
  grep -qx -- --coverage "$libs" || echo --coverage >>"$libs"
  mkdir -p "$COV/bin"
  cp build/bin/lwcc "$COV/bin/lwcc"
  # The CPU trainers the suite compares with: the regular build's runtime.
  cp build/lib/liblwcc_runtime_cpu.a build/lib/liblwcc_runtime_cpu.libs "$COV/lib/"
  find "$COV" -name '*.gcda' -delete
  echo "+ lwemu-unittests"
  nice "$COV/bin/lwemu-unittests" --gtest_brief=1 | tail -3
  echo "+ test/e2e/emulated_gpu.py $*"
  LWCC_BIN_DIR="$ROOT/$COV/bin" nice python3 test/e2e/emulated_gpu.py "$@" | tail -3
  # The test command's other suites that run CUDA trainers on the emulated
  # device (their CPU-only cases run too, and count nothing here).
  if [[ $# == 0 ]]; then
    for suite in gpu_check_emulated trainer_recipes split_sources; do
      echo "+ test/e2e/$suite.py"
      LWCC_BIN_DIR="$ROOT/$COV/bin" nice python3 "test/e2e/$suite.py" | tail -1
    done
  fi
fi
mkdir -p "$COV/coverage"
# gcov's JSON for every object (counts from its .gcda, zero without one), summed
# per line of runtime/cuda.
python3 - "$ROOT" "$COV" <<'PY'
import collections
import json
import os
import subprocess
import sys

root, cov = sys.argv[1], os.path.abspath(sys.argv[2])
out = os.path.join(cov, "coverage")
cuda = os.path.join(root, "runtime", "cuda") + os.sep
counts = collections.defaultdict(dict)  # file -> line -> count
funcs = collections.defaultdict(dict)  # file -> line -> function
for d, _, names in os.walk(cov):
    for gcno in (os.path.join(d, n) for n in names if n.endswith(".gcno")):
        r = subprocess.run(["gcov", "--json-format", "--stdout", gcno], capture_output=True,
                           text=True, cwd=d)
        for doc in r.stdout.splitlines():
            if not doc.startswith("{"):
                continue
            for f in json.loads(doc)["files"]:
                path = os.path.normpath(os.path.join(root, f["file"]))
                if not path.startswith(cuda):
                    continue
                rel = os.path.relpath(path, root)
                for ln in f["lines"]:
                    n = ln["line_number"]
                    counts[rel][n] = counts[rel].get(n, 0) + ln["count"]
                    if "function_name" in ln:
                        funcs[rel][n] = ln["function_name"]
names = {}


def demangle(sym):
    if sym not in names:
        r = subprocess.run(["c++filt", sym], capture_output=True, text=True)
        names[sym] = r.stdout.strip() or sym
    return names[sym]


rows = []
for rel in sorted(counts):
    lines = counts[rel]
    rows.append((rel, sum(1 for c in lines.values() if c > 0), len(lines)))
    missed = collections.OrderedDict()
    for n in sorted(lines):
        if lines[n] == 0:
            missed.setdefault(demangle(funcs[rel].get(n, "?")), []).append(n)
    with open(os.path.join(out, os.path.basename(rel) + ".uncovered"), "w") as u:
        for fn, ns in missed.items():
            u.write(f"{fn}: {len(ns)} lines: {ns}\n")


def row(label, ran, n):
    return f"{label:<42} {ran:>9} {n:>7} {100.0 * ran / max(n, 1):>6.1f}\n"


hit, total = sum(r[1] for r in rows), sum(r[2] for r in rows)
graph = [r for r in rows if r[0].endswith("ConvGraph.cu")]
table = f"{'file':<42} {'lines run':>9} {'of':>7} {'%':>6}\n"
table += "".join(row(*r) for r in rows)
table += row("all of runtime/cuda", hit, total)
table += row("runtime/cuda outside ConvGraph.cu", hit - sum(r[1] for r in graph),
             total - sum(r[2] for r in graph))
with open(os.path.join(out, "summary.txt"), "w") as f:
    f.write(table)
print(table, end="")
PY
