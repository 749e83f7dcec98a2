#!/usr/bin/env python3
"""ONNX's own node tests on lwcc's reference interpreter.

Every node test (onnx/backend/test/data/node/test_*/: model.onnx and
test_data_set_N/{input_K,output_K}.pb) whose model uses only ops that lwcc
imports, and at least one, must appear in test/onnx-node/allowlist.txt:
enabled, or skipped with a reason. Each enabled test runs through
`lwcc MODEL --run-reference` (f32, or f64 when an output is double) on each of
its data sets, and every output must match the expected one: same element
type and shape, values within ONNX's backend-test tolerances (rtol 1e-3,
atol 1e-7, NaNs equal). lwcc compiles for static shapes, so inputs it needs
at compile time (Reshape's shape, Slice's starts, ...; COMPILE_TIME_INPUTS)
that a test gives as graph inputs are baked into a copy of the model as
initializers holding the data set's values.

The run fails when an enabled test fails, when a test that must be listed is
not, when the list names a test that does not exist or enables one with an
unsupported op, or when frontend/SUPPORTED_OPS.md is stale. It ends with
"onnx-node: N passed, M failed, K skipped" and then "N passed, M failed".

  run_node_tests.py [TEST...]          run the enabled tests (or only these)
  run_node_tests.py --run-skipped      also run the skipped ones, to see which pass now
  run_node_tests.py --generate-docs P  write the supported-ops table to P
  run_node_tests.py --check-docs P     fail if P differs from what would be written

The test data is read from --data-root, else $LWCC_ONNX_NODE_DATA, else
Debian's libonnx-testdata (/usr/share/libonnx-testdata/data/node).
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_DATA = "/usr/share/libonnx-testdata/data/node"
DEFAULT_ALLOWLIST = os.path.join(HERE, "allowlist.txt")
DEFAULT_DOCS = os.path.join(ROOT, "frontend", "SUPPORTED_OPS.md")
RTOL, ATOL = 1e-3, 1e-7
TIMEOUT_S = 60

# An allowlist line: a test name, optionally followed by "# skip: reason".
LINE_RE = re.compile(r"^(?P<name>test_\w+)\s*(?:#\s*skip:\s*(?P<reason>.*?))?\s*$")


class ListError(Exception):
    pass


# ---------------------------------------------------------------------------
# The allowlist.

class Entry:
    def __init__(self, name, reason, lineno):
        self.name = name
        self.reason = reason  # None when enabled
        self.lineno = lineno

    @property
    def enabled(self):
        return self.reason is None


def read_allowlist(path):
    """name -> Entry; raises ListError on a malformed line or a duplicate."""
    entries = {}
    errors = []
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            m = LINE_RE.match(line)
            if not m:
                errors.append(f"{path}:{lineno}: expected 'test_name' or "
                              f"'test_name  # skip: reason', got: {line}")
                continue
            name, reason = m.group("name"), m.group("reason")
            if reason is not None and not reason:
                errors.append(f"{path}:{lineno}: skipping {name} needs a reason")
                continue
            if name in entries:
                errors.append(f"{path}:{lineno}: {name} is listed twice "
                              f"(first on line {entries[name].lineno})")
                continue
            entries[name] = Entry(name, reason, lineno)
    if errors:
        raise ListError("\n".join(errors))
    return entries


# ---------------------------------------------------------------------------
# The node tests.

# Inputs that lwcc needs at compile time (it compiles for static shapes): where
# a node test gives one as a graph input, the runner bakes the data set's value
# into the model as an initializer, so that the op itself is what is tested.
COMPILE_TIME_INPUTS = {
    "Clip": (1, 2),                  # min, max
    "ConstantOfShape": (0,),         # shape
    "Dropout": (1, 2),               # ratio, training_mode
    "Expand": (1,),                  # shape
    "Pad": (1, 2, 3),                # pads, constant_value, axes
    "ReduceMean": (1,),              # axes
    "ReduceSum": (1,),               # axes
    "ReduceL1": (1,),                # axes
    "ReduceL2": (1,),                # axes
    "ReduceSumSquare": (1,),         # axes
    "CumSum": (1,),                  # axis
    "Tile": (1,),                    # repeats
    "Reshape": (1,),                 # shape
    "Slice": (1, 2, 3, 4),           # starts, ends, axes, steps
    "Split": (1,),                   # split
    "Squeeze": (1,),                 # axes
    "Unsqueeze": (1,),               # axes
    "Range": (0, 1, 2),              # start, limit, delta (folded)
    # Index arithmetic that lwcc folds at import (the exporters' window
    # computations), and Where's condition (a mask known at compile time).
    # (Min, Max, the comparisons and Where run at run time too: their
    # inputs stay inputs.)
    "Floor": (0,), "Ceil": (0,), "Sign": (0,), "Not": (0,),
    "Resize": (1, 2, 3),             # roi, scales, sizes
    "Upsample": (1,),                # scales
}


class NodeTest:
    def __init__(self, name, path, model):
        self.name = name
        self.path = path
        # Op types of the top-level graph; other domains as "domain:Op".
        self.ops = set()
        baked = set()
        for node in model.graph.node:
            default = node.domain in ("", "ai.onnx")
            self.ops.add(node.op_type if default else f"{node.domain}:{node.op_type}")
            for k in COMPILE_TIME_INPUTS.get(node.op_type, ()) if default else ():
                if k < len(node.input) and node.input[k]:
                    baked.add(node.input[k])
        initializers = {t.name for t in model.graph.initializer}
        # Graph inputs in the order of the data sets' input_K.pb files.
        inputs = [i for i in model.graph.input if i.name not in initializers]
        self.input_names = [i.name for i in inputs]
        self.input_types = [i.type.tensor_type.elem_type for i in inputs]
        self.baked = [k for k, i in enumerate(inputs) if i.name in baked]
        self.output_types = [o.type.tensor_type.elem_type for o in model.graph.output]
        self.outputs_double = onnx.TensorProto.DOUBLE in self.output_types

    def data_sets(self):
        return sorted((d for d in os.listdir(self.path) if d.startswith("test_data_set_")),
                      key=lambda d: int(d.rsplit("_", 1)[1]))


def find_tests(data_root):
    tests = {}
    for name in sorted(os.listdir(data_root)):
        path = os.path.join(data_root, name)
        model_path = os.path.join(path, "model.onnx")
        if not name.startswith("test_") or not os.path.isfile(model_path):
            continue
        model = onnx.load(model_path, load_external_data=False)
        tests[name] = NodeTest(name, path, model)
    return tests


def must_be_listed(test, supported):
    """Uses at least one op that lwcc imports, and nothing else."""
    return bool(test.ops) and test.ops <= supported


def check_list(tests, entries, supported):
    """Problems of the allowlist against the test data, one message each."""
    problems = []
    for name in sorted(set(entries) - set(tests)):
        problems.append(f"allowlist line {entries[name].lineno}: {name} is not a node test "
                        f"in the test data")
    for name, test in sorted(tests.items()):
        entry = entries.get(name)
        if must_be_listed(test, supported) and entry is None:
            problems.append(f"{name} (ops {', '.join(sorted(test.ops))}) uses only ops lwcc "
                            f"imports but is not in the allowlist: enable it, or skip it with "
                            f"a reason")
        elif entry is not None and entry.enabled and not test.ops <= supported:
            problems.append(f"allowlist line {entry.lineno}: {name} is enabled, but lwcc does "
                            f"not import {', '.join(sorted(test.ops - supported))}")
    return problems


# ---------------------------------------------------------------------------
# Running one test.

def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t


def type_name(elem_type):
    return onnx.TensorProto.DataType.Name(elem_type)


def compare(expected, got):
    """None when `got` matches `expected` (TensorProtos), else what differs."""
    if got.data_type != expected.data_type:
        return f"element type {type_name(got.data_type)}, expected {type_name(expected.data_type)}"
    if list(got.dims) != list(expected.dims):
        return f"shape {list(got.dims)}, expected {list(expected.dims)}"
    e, g = numpy_helper.to_array(expected), numpy_helper.to_array(got)
    if e.dtype.kind != "f" and e.dtype.name != "bfloat16":  # integers, bools: exact
        if e.dtype == object or g.dtype == object:
            same = e.tolist() == g.tolist()
        else:
            same = np.array_equal(e, g)
        if same:
            return None
        bad = np.flatnonzero(e.reshape(-1) != g.reshape(-1))
        k = int(bad[0]) if bad.size else 0
        return (f"{bad.size} of {e.size} elements differ; first at flat index {k}: "
                f"got {g.reshape(-1)[k]}, expected {e.reshape(-1)[k]}")
    e, g = e.astype(np.float64), g.astype(np.float64)
    both_nan = np.isnan(e) & np.isnan(g)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(both_nan, 0.0, np.abs(g - e))
        same_inf = (e == g)  # equal infinities give inf - inf = nan
        diff = np.where(same_inf, 0.0, diff)
        diff = np.where(np.isnan(diff), np.inf, diff)
        bad = diff > ATOL + RTOL * np.abs(e)
    if not bad.any():
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(e != 0, diff / np.abs(e), np.where(diff > 0, np.inf, 0.0))
    k = int(np.flatnonzero(bad.reshape(-1))[0])
    return (f"{int(bad.sum())} of {e.size} elements outside rtol={RTOL:g}, atol={ATOL:g}: "
            f"max abs error {diff.max():.3g}, max rel error {rel.max():.3g}; first at flat index "
            f"{k}: got {g.reshape(-1)[k]!r}, expected {e.reshape(-1)[k]!r}")


def as_declared(t, declared):
    """ONNX's older test data stores bfloat16 tensors as their uint16 bits: give
    such a tensor the element type its model declares."""
    if t.data_type == onnx.TensorProto.UINT16 and declared == onnx.TensorProto.BFLOAT16:
        t.data_type = onnx.TensorProto.BFLOAT16
    return t


def prepare(test, ds_path, work):
    """(model, inputs folder) for lwcc: the test's own when they need no change,
    else copies with the compile-time inputs baked in and the rest renumbered."""
    inputs = [load_pb(os.path.join(ds_path, f"input_{k}.pb"))
              if os.path.exists(os.path.join(ds_path, f"input_{k}.pb")) else None
              for k in range(len(test.input_names))]
    retag = any(t is not None and t.data_type == onnx.TensorProto.UINT16
                and test.input_types[k] == onnx.TensorProto.BFLOAT16
                for k, t in enumerate(inputs))
    model_path = os.path.join(test.path, "model.onnx")
    if not test.baked and not retag:
        return model_path, ds_path
    os.makedirs(work)
    if test.baked:
        model = onnx.load(model_path)
        for k in test.baked:
            if inputs[k] is None:
                raise RuntimeError(f"input_{k}.pb ('{test.input_names[k]}') is missing")
            init = as_declared(inputs[k], test.input_types[k])
            init.name = test.input_names[k]
            model.graph.initializer.append(init)
        model_path = os.path.join(work, "model.onnx")
        onnx.save(model, model_path)
    n = 0
    for k, t in enumerate(inputs):
        if k in test.baked or t is None:
            continue
        with open(os.path.join(work, f"input_{n}.pb"), "wb") as f:
            f.write(as_declared(t, test.input_types[k]).SerializeToString())
        n += 1
    return model_path, work


def run_test(lwcc, test):
    """(name, [failure messages]) for every data set of `test`."""
    failures = []
    precision = "f64" if test.outputs_double else "f32"
    sets = test.data_sets()
    if not sets:
        return test.name, ["no test_data_set_* folder"]
    with tempfile.TemporaryDirectory(prefix="lwcc-node-") as tmp:
        for ds in sets:
            ds_path = os.path.join(test.path, ds)
            out = os.path.join(tmp, ds, "out")
            try:
                model, inputs = prepare(test, ds_path, os.path.join(tmp, ds, "in"))
            except (OSError, RuntimeError) as e:
                failures.append(f"{ds}: cannot prepare the inputs: {e}")
                continue
            cmd = [lwcc, model, "--run-reference", "--inputs", inputs, "--outputs", out,
                   f"--precision={precision}"]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                failures.append(f"{ds}: lwcc took more than {TIMEOUT_S}s")
                continue
            if r.returncode != 0:
                msg = (r.stderr.strip() or r.stdout.strip()).replace("\n", " | ")
                if model != os.path.join(test.path, "model.onnx"):  # name the test's own
                    baked = ", ".join(test.input_names[k] for k in test.baked)
                    msg = msg.replace(model, f"model.onnx (with {baked} baked in)")
                failures.append(f"{ds}: lwcc exited {r.returncode}: {msg}")
                continue
            k = 0
            while os.path.exists(os.path.join(ds_path, f"output_{k}.pb")):
                got_path = os.path.join(out, f"output_{k}.pb")
                if not os.path.exists(got_path):
                    failures.append(f"{ds}: lwcc wrote no output_{k}.pb")
                    break
                declared = test.output_types[k] if k < len(test.output_types) else 0
                expected = as_declared(load_pb(os.path.join(ds_path, f"output_{k}.pb")), declared)
                diff = compare(expected, load_pb(got_path))
                if diff:
                    failures.append(f"{ds}: output_{k}: {diff}")
                k += 1
            if os.path.exists(os.path.join(out, f"output_{k}.pb")):
                failures.append(f"{ds}: lwcc wrote more outputs ({k + 1} or more) than the "
                                f"{k} expected")
    return test.name, failures


# ---------------------------------------------------------------------------
# The supported-ops document.

def generate_docs(tests, entries, supported):
    enabled = defaultdict(int)
    skipped = defaultdict(lambda: defaultdict(int))  # op -> reason -> count
    for name, entry in entries.items():
        test = tests.get(name)
        if test is None:
            continue
        for op in sorted(test.ops & supported):
            if entry.enabled:
                enabled[op] += 1
            else:  # the brief reason: up to the first ';'
                skipped[op][entry.reason.split(";")[0].strip()] += 1
    lines = [
        "# Supported ONNX operators",
        "",
        "<!-- Generated by `python3 test/onnx-node/run_node_tests.py --generate-docs "
        "frontend/SUPPORTED_OPS.md`",
        "     from test/onnx-node/allowlist.txt and `lwcc --list-onnx-ops`; do not edit. "
        "The test run fails when it is stale. -->",
        "",
        "The ONNX op types that lwcc imports (`lwcc --list-onnx-ops`), and how ONNX's own node",
        "tests (`onnx/backend/test/data/node`) cover them on lwcc's reference interpreter. A",
        "test counts for every op of its model. *Passing* tests are enabled in",
        "`test/onnx-node/allowlist.txt` and must pass on every run of `tools/dev.sh test`;",
        "*skipped* ones need what lwcc does not support, for the reasons given there (briefly",
        "below). Inputs that lwcc needs at compile time (Reshape's shape, Slice's starts, Pad's",
        "pads, ...) are given to it as initializers holding the test's values. Range, Floor,",
        "Ceil, Sign, Min, Max, Not and the comparisons are folded at import (PyTorch's",
        "exporters use them for index arithmetic on shapes), so their inputs must be known at",
        "compile time; Where needs a condition known at compile time.",
        "",
        "| Op | Node tests passing | Skipped | Why skipped (number of tests) |",
        "|----|-------------------:|--------:|-------------------------------|",
    ]
    untested = []
    for op in sorted(supported):
        n_skip = sum(skipped[op].values())
        if enabled[op] == 0 and n_skip == 0:
            untested.append(op)
        reasons = "; ".join(f"{r} ({n})" for r, n in sorted(skipped[op].items()))
        row = f"| {op} | {enabled[op]} | {n_skip} |"
        lines.append(row + (f" {reasons} |" if reasons else " |"))
    lines += ["", "## Supported ops without node tests", ""]
    if untested:
        lines.append("ONNX's node tests have no test that uses only ops lwcc imports for these:")
        lines.append("")
        lines += [f"- {op}" for op in untested]
    else:
        lines.append("None: every op that lwcc imports has node tests.")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tests", nargs="*", help="run only these tests (names from the allowlist)")
    ap.add_argument("--lwcc", default=os.path.join(ROOT, "build", "bin", "lwcc"))
    ap.add_argument("--data-root", default=os.environ.get("LWCC_ONNX_NODE_DATA", DEFAULT_DATA),
                    help="folder of the test_* node tests (default: $LWCC_ONNX_NODE_DATA, "
                         f"else {DEFAULT_DATA})")
    ap.add_argument("--allowlist", default=DEFAULT_ALLOWLIST)
    ap.add_argument("--jobs", "-j", type=int, default=2)
    ap.add_argument("--run-skipped", action="store_true",
                    help="also run the skipped tests (their results are reported, not counted)")
    ap.add_argument("--generate-docs", metavar="PATH",
                    help="write the supported-ops table and exit")
    ap.add_argument("--check-docs", metavar="PATH",
                    help="check the supported-ops table and exit (the normal run checks "
                         "frontend/SUPPORTED_OPS.md)")
    args = ap.parse_args()

    def fatal(msg):
        print(f"onnx-node: error: {msg}")
        print("onnx-node: 0 passed, 1 failed, 0 skipped")
        print("0 passed, 1 failed")
        return 1

    if not os.path.isdir(args.data_root):
        return fatal(f"no ONNX node test data at {args.data_root} (install libonnx-testdata, "
                     f"or give --data-root / $LWCC_ONNX_NODE_DATA)")
    try:
        r = subprocess.run([args.lwcc, "--list-onnx-ops"], capture_output=True, text=True,
                           check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        return fatal(f"cannot run {args.lwcc} --list-onnx-ops: {e}")
    supported = set(r.stdout.split())
    try:
        entries = read_allowlist(args.allowlist)
    except (OSError, ListError) as e:
        return fatal(str(e))
    tests = find_tests(args.data_root)

    if args.generate_docs:
        with open(args.generate_docs, "w", encoding="utf-8") as f:
            f.write(generate_docs(tests, entries, supported))
        print(f"onnx-node: wrote {args.generate_docs}")
        return 0

    def check_docs(path):
        want = generate_docs(tests, entries, supported)
        try:
            with open(path, encoding="utf-8") as f:
                have = f.read()
        except OSError as e:
            have = None
            why = f"cannot read it ({e.strerror})"
        else:
            why = "it differs from the allowlist and lwcc's op list"
        if have == want:
            return None
        return (f"{os.path.relpath(path)} is stale: {why}; regenerate it with "
                f"python3 {os.path.relpath(__file__)} --generate-docs {os.path.relpath(path)}")

    if args.check_docs:
        problem = check_docs(args.check_docs)
        print(f"onnx-node: {problem or args.check_docs + ' is up to date'}")
        return 1 if problem else 0

    start = time.monotonic()
    problems = check_list(tests, entries, supported)
    for p in problems:
        print(f"FAIL allowlist: {p}")
    failed = len(problems)
    doc_problem = check_docs(DEFAULT_DOCS)
    if doc_problem:
        print(f"FAIL docs: {doc_problem}")
        failed += 1

    selected = [e for e in entries.values() if e.name in tests]
    if args.tests:
        unknown = set(args.tests) - {e.name for e in selected}
        for name in sorted(unknown):
            print(f"FAIL {name}: not in the allowlist or not in the test data")
        failed += len(unknown)
        selected = [e for e in selected if e.name in args.tests]
    # An enabled test with an unsupported op is an allowlist problem, reported above.
    to_run = [e for e in selected
              if (e.enabled and tests[e.name].ops <= supported) or
              (not e.enabled and args.run_skipped)]
    skipped = sum(not e.enabled for e in selected)

    passed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_test, args.lwcc, tests[e.name]) for e in to_run]
        results = dict(f.result() for f in futures)
    for e in sorted(to_run, key=lambda e: e.name):
        fails = results[e.name]
        if not e.enabled:
            state = "passes" if not fails else "fails: " + fails[0]
            print(f"SKIPPED {e.name} ({e.reason}) {state}")
            continue
        if fails:
            failed += 1
            for msg in fails:
                print(f"FAIL {e.name}: {msg}")
        else:
            passed += 1
    print(f"onnx-node: ran {len(to_run)} tests in {time.monotonic() - start:.1f}s")
    print(f"onnx-node: {passed} passed, {failed} failed, {skipped} skipped")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
