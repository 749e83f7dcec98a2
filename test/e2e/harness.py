#!/usr/bin/env python3
"""The e2e suites' shared harness: commands, comparisons and the result.

Every test/e2e suite records its cases here and ends with `finish()`:
  - `record(ok, name, detail, info)` prints "PASS: name  info" or
    "FAIL: name  info: detail"; `skip(name, why)` prints "SKIP: name: why";
    `case(fn)` runs fn as a case (an exception fails it), `check(name, fn)`
    one whose fn returns (ok, message);
  - `finish()` prints "N passed, M failed" (", K skipped" when some were)
    and, where the environment names a file in LWCC_TEST_RESULT (tools/dev.sh
    does), writes the suite's result there as JSON:
        {"suite": "train_step", "passed": 40, "failed": 1, "skipped": 0,
         "seconds": 81.2, "failing": ["case name", ...]}
    It returns the suite's exit status: 1 when a case failed or none ran.
A suite that dies before `finish()` writes no result, which tools/dev.sh
counts as a failure. LWCC_TEST_CASES=SUBSTR[,SUBSTR...] runs only the cases
of `case` and `check` whose names contain one of the substrings (a quick run
by hand).

`run` runs a command with a time limit (a command that outlives it comes
back with exit status 124 and says so on stderr); `check_output` raises
CommandError, naming the command, when the status is not the one expected.
Beside them what several suites do: work in a temporary folder (`scratch`),
generate a zoo model (`generate`), build a trainer from emitted source
(`build_cpu_trainer`, `build_emulated_trainer`), write a seeded batch
(`write_batch`), run the interpreter's steps (`reference_steps`), kill a
trainer at its first checkpoint; compare (`rel_error`, `close`,
`losses_within`, `step_problems`, `files_differ`); and record a command's
refusal (`exits_with`).

Run as a script, it writes the same JSON for tools/dev.sh's other suites
and reads a result back:
    harness.py gtest SUITE REPORT.json OUT    from GoogleTest's --gtest_output=json
    harness.py lit SUITE REPORT.json OUT      from lit's --output
    harness.py counts SUITE LOG OUT           from a log whose last "N passed, M failed"
                                              line counts the suite (", K skipped" on
                                              that line or on one before it with the
                                              same counts)
    harness.py write SUITE PASSED FAILED OUT [FAILING...]
    harness.py summary OUT                    "PASSED FAILED [K skipped]" on one line
"""
import contextlib
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("LWCC_BIN_DIR") or os.path.join(ROOT, "build", "bin")
LWCC = os.path.join(BIN, "lwcc")
PREFIX = os.path.dirname(BIN)  # the build tree: include/ and lib/
GEN = os.path.join(ROOT, "tools", "models", "gen.py")
RESULT_ENV = "LWCC_TEST_RESULT"
CASES_ENV = "LWCC_TEST_CASES"


# --- running commands ----------------------------------------------------------

class CommandError(RuntimeError):
    """A command that exited with another status than the one expected."""


def shown(cmd):
    """A command as one line, long paths and all."""
    return " ".join(str(c) for c in cmd)


def run(cmd, *, timeout=600, cwd=None, env=None, stdin=None):
    """Runs cmd (stdin: text for its standard input), capturing its output as
    text. A command still running after `timeout` seconds is killed and comes
    back with exit status 124, its output so far and a line on stderr that
    says so."""
    try:
        return subprocess.run(cmd, cwd=cwd, env=env, input=stdin, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        return subprocess.CompletedProcess(
            cmd, 124, text(e.stdout),
            text(e.stderr) + f"\n{shown(cmd)}: killed after {timeout} s (the time limit)")


def check_output(cmd, *, expect=0, timeout=600, cwd=None, env=None, stdin=None, tail=2000):
    """run(cmd), raising CommandError with the command and the tails of its
    output when its exit status is not `expect` (None: any); returns the
    CompletedProcess."""
    r = run(cmd, timeout=timeout, cwd=cwd, env=env, stdin=stdin)
    if expect is not None and r.returncode != expect:
        raise CommandError(f"{shown(cmd)} exited {r.returncode} (expected {expect}):\n"
                           f"{r.stdout[-tail:]}\n{r.stderr[-tail:]}".rstrip())
    return r


def generate(model, path, *flags, batch=8):
    """tools/models/gen.py's `model` at test size into path; False, with a
    failing case "MODEL: generate" recorded, when it fails."""
    r = run([sys.executable, GEN, model, "--test-size", "--batch", str(batch), *flags,
             "-o", path])
    if r.returncode:
        record(False, f"{model}: generate", r.stderr[-500:])
    return r.returncode == 0


def zoo_models():
    """The models of tools/models/gen.py --list (the zoo's and the extra ones)."""
    r = run([sys.executable, GEN, "--list"])
    return [line.split()[0] for line in r.stdout.splitlines()
            if line and not line.startswith(" ")]


@contextlib.contextmanager
def scratch(prefix):
    """A new temporary folder (its name starting with `prefix`), removed with
    all in it when the block ends, however it ends."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build_all(cases, key, make, jobs=2):
    """make(case) for every case (building a trainer, say), `jobs` at a time:
    {key(case): what make returned}."""
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        return dict(zip(map(key, cases), pool.map(make, cases)))


def trainer_sources(out_dir, ext):
    """The files of the trainer lwcc wrote into out_dir: trainer.EXT, and
    trainer_1.EXT .. trainer_K.EXT when the step is split (--ops-per-file)."""
    parts = [f for f in os.listdir(out_dir) if re.fullmatch(r"trainer_\d+" + re.escape(ext), f)]
    return ["trainer" + ext] + sorted(parts, key=lambda f: int(f[len("trainer_"):-len(ext)]))


# Trainers compiled by the suites, by what they are compiled from: several
# suites build the same trainer (a one-device reference, say: about a sixth
# of the e2e suites' builds), and the second one copies the first's. The key
# is the compile command, every trainer* file lwcc wrote (the sources and
# the weights and export template they embed), the runtime archive and
# the prefix's headers; LWCC_TEST_TRAINER_CACHE=0 turns it off.
TRAINER_CACHE = os.path.join(PREFIX, "test-cache", "trainers")
_prefix_digests = {}


def _prefix_digest(prefix, archive):
    """The identity of a runtime: its headers' and archive's paths, sizes
    and modification times (a rebuild changes them)."""
    key = (prefix, archive)
    if key not in _prefix_digests:
        import hashlib
        h = hashlib.sha256()
        paths = [archive]
        for d, _, files in os.walk(os.path.join(prefix, "include")):
            paths += [os.path.join(d, f) for f in files]
        for path in sorted(paths):
            st = os.stat(path)
            h.update(f"{path} {st.st_size} {st.st_mtime_ns}\n".encode())
        _prefix_digests[key] = h.hexdigest()
    return _prefix_digests[key]


def cached_build(out_dir, prefix, archive, cmd, timeout):
    """Runs the compile command cmd (which writes out_dir/trainer) in
    out_dir, or copies the trainer an identical compile made before; the
    compiler's CompletedProcess (a copy's is empty)."""
    if os.environ.get("LWCC_TEST_TRAINER_CACHE") == "0":
        return run(cmd, cwd=out_dir, timeout=timeout)
    import hashlib
    h = hashlib.sha256(_prefix_digest(prefix, archive).encode())
    h.update("\0".join(cmd).encode())
    for name in sorted(os.listdir(out_dir)):
        path = os.path.join(out_dir, name)
        if name.startswith("trainer") and name != "trainer" and os.path.isfile(path):
            h.update(f"\0{name}\0".encode())
            with open(path, "rb") as f:
                h.update(f.read())
    cached = os.path.join(TRAINER_CACHE, h.hexdigest())
    exe = os.path.join(out_dir, "trainer")
    if os.path.isfile(cached):
        shutil.copy2(cached, exe)
        return subprocess.CompletedProcess(cmd, 0, "", "")
    r = run(cmd, cwd=out_dir, timeout=timeout)
    if r.returncode == 0 and os.path.isfile(exe):
        os.makedirs(TRAINER_CACHE, exist_ok=True)
        part = f"{cached}.{os.getpid()}.{threading.get_ident()}"
        shutil.copy2(exe, part)
        os.replace(part, cached)  # whole or absent for a suite beside this one
    return r


def build_cpu_trainer(out_dir, opt="-O0", timeout=600):
    """Compiles the trainer.cc (and its parts) that `lwcc --target=cpu
    --emit=source -o out_dir` wrote against the build tree's CPU runtime (the
    step is glue around the runtime's kernels, so -O0 does; without
    exception tables, as `lwcc -o` builds it: a tenth less compile time);
    (path or None, error)."""
    with open(os.path.join(PREFIX, "lib", "liblwcc_runtime_cpu.libs")) as f:
        libs = f.read().split()  # the system libraries the runtime needs
    lib = os.path.join(PREFIX, "lib", "liblwcc_runtime_cpu.a")
    r = cached_build(out_dir, PREFIX, lib,
                     ["c++", "-std=c++20", opt, "-fno-exceptions",
                      "-I" + os.path.join(PREFIX, "include"),
                      *trainer_sources(out_dir, ".cc"), lib, *libs, "-o", "trainer"],
                     timeout)
    exe = os.path.join(out_dir, "trainer")
    return (exe, "") if r.returncode == 0 else (None, r.stderr[-1500:])


def build_emulated_trainer(out_dir, flags=("-O0",), prefix=PREFIX, timeout=900):
    """Compiles the trainer.cu (and its parts) that `lwcc --target=cuda
    --emit=source -o out_dir` wrote for the emulated CUDA device with the host compiler (as
    `lwcc --emulate-gpu` builds one: the kernels are in the library), against
    prefix's emulated runtime; the compiler's CompletedProcess."""
    lib = os.path.join(prefix, "lib")
    with open(os.path.join(lib, "liblwcc_runtime_emu.cflags")) as f:
        cflags = f.read().split()
    with open(os.path.join(lib, "liblwcc_runtime_emu.libs")) as f:
        libs = f.read().split()
    archive = os.path.join(lib, "liblwcc_runtime_emu.a")
    return cached_build(out_dir, prefix, archive,
                        ["c++", "-std=c++20", *flags, "-x", "c++", "-include",
                         os.path.join(prefix, "include", "lwemu", "cuda_emu.h"),
                         "-I" + os.path.join(prefix, "include"), *cflags,
                         *trainer_sources(out_dir, ".cu"), "-x", "none", archive, *libs,
                         "-o", "trainer"],
                        timeout)


def kill_at_first_checkpoint(cmd, ck, seconds):
    """Starts cmd (a trainer writing checkpoints into folder ck) and SIGKILLs
    it as soon as one is on disk (or after `seconds`, or when it ends first);
    the names of the checkpoints in ck then, sorted."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + seconds
    while time.time() < deadline and p.poll() is None:
        if os.path.isdir(ck) and any(f.endswith(".lwckpt") for f in os.listdir(ck)):
            break
        time.sleep(0.002)
    p.send_signal(signal.SIGKILL)
    p.wait()
    return sorted(f for f in os.listdir(ck) if f.endswith(".lwckpt")) if os.path.isdir(ck) else []


# --- comparing -----------------------------------------------------------------

def rel_error(a, b, floor=1e-30):
    """max |a - b| / max |b| (at least floor) over the finite elements of b.
    A non-finite element of b (a frozen mask's -inf) must be matched exactly,
    and a NaN of a where b is finite is an infinite error, so that a NaN is
    never lost in a max."""
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    finite = np.isfinite(b)
    if not np.array_equal(a[~finite], b[~finite], equal_nan=True):
        return float("inf")
    if not finite.any():
        return 0.0
    diff = np.abs(a[finite] - b[finite])
    if np.isnan(diff).any():
        return float("inf")
    return float(np.max(diff) / max(float(np.max(np.abs(b[finite]))), floor))


def close(got, want, tol):
    """Within tol of the largest element of want (at least 1); (ok, worst
    error or why not)."""
    if got.shape != want.shape:
        return False, f"shape {got.shape} vs {want.shape}"
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    err = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
    return err <= tol * scale, err


def losses_within(got, want, tol):
    """Every loss within tol relative of want's (and as many)."""
    return len(got) == len(want) and all(
        abs(a - b) <= tol * max(abs(b), 1e-12) for a, b in zip(got, want))


def step_problems(base, other, loss_tol, tensor_tol):
    """Two runs of the same steps, each (losses, {name: tensor}): what differs
    beyond the tolerances (losses relative, tensors relative to their largest
    element); [] when they agree."""
    (l0, t0), (l1, t1) = base, other
    problems = []
    for s, (a, b) in enumerate(zip(l0, l1)):
        if abs(a - b) > loss_tol * max(abs(a), 1e-12):
            problems.append(f"loss of step {s + 1}: {b!r} vs {a!r}")
    if sorted(t0) != sorted(t1):
        problems.append(f"different dumps: {sorted(set(t0) ^ set(t1))[:4]}")
    for name in sorted(set(t0) & set(t1)):
        a, b = t0[name], t1[name]
        scale = max(float(np.max(np.abs(a))) if a.size else 0.0, 1e-12)
        err = float(np.max(np.abs(a - b))) / scale if a.size else 0.0
        if err > tensor_tol:
            problems.append(f"{name}: relative error {err:.2e}")
    return problems


def write_batch(model, data, seed, raw=False):
    """A seeded batch for `model` (a zoo classifier: input, then int64 labels
    of its classes) as data/input_K.pb (and .bin when raw), as lwcc
    --train-reference and a trainer's --data=raw: read them."""
    from onnx import numpy_helper
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    classes = model.graph.output[0].type.tensor_type.shape.dim[1].dim_value
    rng = np.random.default_rng(seed)
    os.makedirs(data, exist_ok=True)
    x = rng.standard_normal(dims).astype(np.float32)
    y = rng.integers(0, classes, size=dims[0]).astype(np.int64)
    for k, arr in enumerate([x, y]):
        with open(os.path.join(data, f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(arr).SerializeToString())
        if raw:
            arr.tofile(os.path.join(data, f"input_{k}.bin"))


def reference_steps(model_path, data, dump, steps, flags, timeout=1800):
    """`lwcc --train-reference` for `steps` steps on the batch in data:
    (losses, {param_*/grad_* file: float64 tensor}), as step_problems compares."""
    import onnx
    from onnx import numpy_helper

    def load(path):
        return numpy_helper.to_array(onnx.load_tensor(path)).astype(np.float64)
    check_output([LWCC, model_path, "--train-reference", "--inputs", data, "--dump", dump,
                  "--steps", str(steps), *flags], timeout=timeout)
    losses = [float(load(os.path.join(dump, f"loss_{s}.pb"))) for s in range(steps)]
    tensors = {f: load(os.path.join(dump, f)) for f in os.listdir(dump)
               if f.startswith(("param_", "grad_"))}
    return losses, tensors


def log_losses(path):
    """The losses of the step records of a trainer's --log (JSON lines)."""
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f if '"type":"step"' in line]


def trainer_outputs(work):
    """A trainer run's results in `work` as bytes, for comparing runs bit for
    bit: the losses of its --log=log.jsonl as written, and each file of its
    --dump=dump (params, evaluation logits)."""
    with open(os.path.join(work, "log.jsonl")) as f:
        losses = [line.split('"loss":')[1].split(",")[0] for line in f if '"type":"step"' in line]
    dumped = {}
    for p in sorted(glob.glob(os.path.join(work, "dump", "*.bin"))):
        with open(p, "rb") as f:
            dumped[os.path.basename(p)] = f.read()
    return losses, dumped


def files_differ(ref, got, names):
    """The names whose bytes differ (or are missing) between two folders."""
    def read(path):
        with open(path, "rb") as f:
            return f.read()
    return [n for n in names
            if not os.path.exists(os.path.join(got, n)) or
            read(os.path.join(ref, n)) != read(os.path.join(got, n))]


# --- recording cases -----------------------------------------------------------

class Results:
    """The cases of one suite run: name and status in order."""

    def __init__(self):
        self.cases = []  # (name, "pass" | "fail" | "skip")
        self.started = time.time()
        self.only = [s for s in os.environ.get(CASES_ENV, "").split(",") if s]

    def selected(self, name):
        """Whether LWCC_TEST_CASES (when set) selects the case `name`."""
        return not self.only or any(s in name for s in self.only)

    def count(self, status):
        return sum(1 for _, s in self.cases if s == status)

    @property
    def passed(self):
        return self.count("pass")

    @property
    def failed(self):
        return self.count("fail")

    @property
    def skipped(self):
        return self.count("skip")

    def record(self, ok, name, detail="", info=""):
        """One case: PASS (with info) or FAIL (with info and detail). Returns ok."""
        ok = bool(ok)
        self.cases.append((name, "pass" if ok else "fail"))
        line = f"{'PASS' if ok else 'FAIL'}: {name}" + (f"  {info}" if info else "")
        if not ok and detail:
            line += f": {detail}"
        print(line, flush=True)
        return ok

    def skip(self, name, why=""):
        self.cases.append((name, "skip"))
        print(f"SKIP: {name}" + (f": {why}" if why else ""), flush=True)

    def case(self, fn, name=None, timed=False):
        """Runs fn() as the case `name` (default: fn's name); an exception fails
        it with its message. What fn returns, if text, is shown beside PASS
        (timed: and the seconds it took)."""
        name = name or fn.__name__
        if not self.selected(name):
            return True
        started = time.time()
        try:
            info = fn()
        except Exception as e:  # noqa: BLE001 - any failure fails the case
            return self.record(False, name, str(e) or type(e).__name__)
        info = info if isinstance(info, str) else ""
        if timed:
            info += f"{' ' if info else ''}({time.time() - started:.1f} s)"
        return self.record(True, name, info=info)

    def check(self, name, fn):
        """Runs fn() -> (ok, message) as the case `name`; an exception fails it."""
        if not self.selected(name):
            return True
        try:
            ok, msg = fn()
        except Exception as e:  # noqa: BLE001 - any failure fails the case
            ok, msg = False, str(e) or type(e).__name__
        return self.record(ok, name, info=msg)

    def result(self, suite):
        return {"suite": suite, "passed": self.passed, "failed": self.failed,
                "skipped": self.skipped, "seconds": round(time.time() - self.started, 1),
                "failing": [n for n, s in self.cases if s == "fail"]}

    def finish(self, suite=None):
        """Prints the counts, writes the result where LWCC_TEST_RESULT names a
        file; the exit status (1 when a case failed or none ran)."""
        suite = suite or os.path.splitext(os.path.basename(sys.argv[0]))[0]
        skipped = f", {self.skipped} skipped" if self.skipped else ""
        print(f"{self.passed} passed, {self.failed} failed{skipped}", flush=True)
        write_result(self.result(suite))
        return 1 if self.failed or not self.passed + self.failed else 0


def write_result(result, path=None):
    path = path or os.environ.get(RESULT_ENV)
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)


# One suite per process: the cases of the suite being run (modules that
# several suites share record into it too).
results = Results()
record = results.record
skip = results.skip
case = results.case
check = results.check
finish = results.finish


def exits_with(r, code, name, *texts, tail=500):
    """Records the case `name`: the finished command `r` exited with `code`,
    each of `texts` in its stderr (else its exit status and the last `tail`
    characters of its stderr). Returns whether it passed."""
    return record(r.returncode == code and all(t in r.stderr for t in texts), name,
                  f"exit {r.returncode}: {r.stderr[-tail:]}")


def lwcc_refuses(args, name, *texts):
    """Records the case `name`: lwcc with `args` (planning only) is a usage
    error, exit 2, naming each of `texts`."""
    r = run([LWCC, *args, "--emit=plan", "-o", os.devnull])
    return exits_with(r, 2, name, *texts, tail=300)


# --- other tools' results, for tools/dev.sh ------------------------------------

def from_gtest(report, suite):
    with open(report) as f:
        data = json.load(f)
    cases = [(f"{s['name']}.{t['name']}", t) for s in data.get("testsuites", [])
             for t in s.get("testsuite", [])]
    failing = [n for n, t in cases if t.get("failures")]
    skipped = [n for n, t in cases if not t.get("failures") and
               (t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN")]
    return {"suite": suite, "passed": len(cases) - len(failing) - len(skipped),
            "failed": len(failing), "skipped": len(skipped),
            "seconds": float(str(data.get("time", "0")).rstrip("s") or 0), "failing": failing}


LIT_PASS = {"PASS", "XFAIL", "FLAKYPASS"}
LIT_SKIP = {"UNSUPPORTED", "SKIPPED", "EXCLUDED"}


def from_lit(report, suite):
    with open(report) as f:
        data = json.load(f)
    tests = data.get("tests", [])
    failing = [t["name"] for t in tests if t["code"] not in LIT_PASS | LIT_SKIP]
    skipped = sum(1 for t in tests if t["code"] in LIT_SKIP)
    return {"suite": suite, "passed": len(tests) - len(failing) - skipped,
            "failed": len(failing), "skipped": skipped,
            "seconds": round(float(data.get("elapsed", 0)), 1), "failing": failing}


def from_counts(log, suite):
    """The counts of a log's last "N passed, M failed" line; None if none."""
    found, skipped = None, {}
    with open(log, errors="replace") as f:
        for line in f:
            m = re.match(r"(?:[\w-]+: )?(\d+) passed, (\d+) failed(?:, (\d+) skipped)?\s*$", line)
            if m:
                found = (int(m.group(1)), int(m.group(2)))
                if m.group(3):
                    skipped[found] = int(m.group(3))
    if not found:
        return None
    return {"suite": suite, "passed": found[0], "failed": found[1],
            "skipped": skipped.get(found, 0), "seconds": None, "failing": []}


def summary(path):
    """'PASSED FAILED [K skipped]' of a result file."""
    with open(path) as f:
        r = json.load(f)
    note = f" {r['skipped']} skipped" if r.get("skipped") else ""
    return f"{int(r['passed'])} {int(r['failed'])}{note}"


def main(argv):
    usage = ("usage: harness.py gtest|lit SUITE REPORT OUT | counts SUITE LOG OUT | "
             "write SUITE PASSED FAILED OUT [FAILING...] | summary OUT")
    if len(argv) == 4 and argv[0] in ("gtest", "lit"):
        convert = from_gtest if argv[0] == "gtest" else from_lit
        write_result(convert(argv[2], argv[1]), argv[3])
    elif len(argv) == 4 and argv[0] == "counts":
        r = from_counts(argv[2], argv[1])
        if r is None:
            return 1
        write_result(r, argv[3])
    elif len(argv) >= 5 and argv[0] == "write":
        write_result({"suite": argv[1], "passed": int(argv[2]), "failed": int(argv[3]),
                      "skipped": 0, "seconds": None, "failing": argv[5:]}, argv[4])
    elif len(argv) == 2 and argv[0] == "summary":
        print(summary(argv[1]))
    else:
        print(usage, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
