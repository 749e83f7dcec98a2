#!/usr/bin/env python3
"""A --gpus 4 CPU trainer run as several processes under mpirun.

For lenet and resnet18 at test size (batch 8), the --gpus 4 CPU trainers of
STRATEGIES (data, owt, layerwise, and pipeline: the planner's stages, their
transfers between processes) run 5 steps as one process, then under
`mpirun --oversubscribe -np 2` and `-np 4`: the 5 losses (--log), every
param and output after the last step (--dump) and the --export must be bit-identical to the one-process run's.

Then, on lenet's owt trainer:
  - killed: rank 1 of a 2-process run is SIGKILLed once the step-3
    checkpoint is on disk; mpirun and every process end within 60 s,
    non-zero, and the output names rank 1; the latest checkpoint left is
    whole; resumed from step 3 as 2 processes, the run is bit-identical at
    step 6 to an uninterrupted 2-process run, and so are the same checkpoint
    resumed as 1 and as 4 processes;
  - hung: rank 1 stopped (SIGSTOP) under --peer-timeout=5: the job ends
    within 60 s, non-zero, rank 0 saying that rank 1 is lost;
  - diverging: a learning rate that makes the loss non-finite stops every
    process, non-zero, within 60 s;
  - refused at start-up, exit 1: ranks given different flags, ranks running
    different trainers; a usage error, exit 2: 3 processes for 4 devices;
  - deadlocked: a --gpus 2 lenet whose device 1 skips its gradient
    all-reduce (the call deleted from the source), as 2 processes: the
    processes wait for each other, and the job ends within 60 s reporting
    the deadlock (LWRT_DEADLOCK_SECONDS=3).

Every trainer runs with OPENBLAS_NUM_THREADS=1 (the products' rounding
depends on the thread count; one thread keeps the 4 processes on 2 cores
from oversubscribing further). As root, OpenMPI needs
OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, set here.
Ends with the line "N passed, M failed".

    python3 test/e2e/mpi_trainer.py [--models lenet] [--strategies owt]
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import LWCC, files_differ as same_files, log_losses as losses  # noqa: E402

STRATEGIES = ["data", "owt", "layerwise", "pipeline"]
PROCESSES = [2, 4]
STEPS = 5
SEED = 5
BOUND = 60  # seconds within which a failed job must have ended

report = harness.record


def environment():
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


def command(np, exe, args):
    """The trainer as one process (np 1: no mpirun) or under mpirun."""
    base = [exe] if np == 1 else ["mpirun", "--oversubscribe", "-np", str(np), exe]
    return base + ["--data=synthetic", f"--seed={SEED}", "--progress=off", "--data-threads=1",
                   *args]


def run(np, exe, work, args, timeout=600):
    os.makedirs(work, exist_ok=True)
    return harness.run(command(np, exe, args), cwd=work, timeout=timeout, env=environment())


def build(onnx_path, flags, out_dir):
    """A CPU trainer of onnx_path from `lwcc --emit=source`, at -O0 (the step
    is glue around the runtime's kernels); (path or None, error)."""
    r = harness.run([LWCC, onnx_path, "--target=cpu", *flags, "--emit=source", "-o", out_dir])
    if r.returncode:
        return None, r.stderr[-1500:]
    return harness.build_cpu_trainer(out_dir)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def trainer_pids(exe):
    """{rank: pid} of the processes running `exe` (a path unique to this test)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = read(f"/proc/{pid}/cmdline").split(b"\0")
            if not cmd or cmd[0].decode(errors="replace") != exe:
                continue
            env = read(f"/proc/{pid}/environ").split(b"\0")
        except OSError:
            continue
        for item in env:
            if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                found[int(item.split(b"=", 1)[1])] = int(pid)
    return found


def start_long_run(exe, work, extra):
    """A 2-process run checkpointing every 3 steps, its output in work/out.txt."""
    os.makedirs(work, exist_ok=True)
    out = open(os.path.join(work, "out.txt"), "w")
    p = subprocess.Popen(command(2, exe, ["--steps=1000000", "--checkpoint-dir=ck",
                                          "--checkpoint-every=3", "--keep-checkpoints=1000000",
                                          *extra]),
                         cwd=work, stdout=out, stderr=subprocess.STDOUT, env=environment())
    return p, out


def wait_for(path, p, seconds=300):
    deadline = time.time() + seconds
    while time.time() < deadline and p.poll() is None and not os.path.exists(path):
        time.sleep(0.01)
    return os.path.exists(path)


def end_within(p, exe, seconds):
    """Waits for mpirun and every trainer process; (rc or None, seconds taken)."""
    t0 = time.time()
    try:
        rc = p.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        rc = None
    while time.time() - t0 < seconds and trainer_pids(exe):
        time.sleep(0.1)
    if trainer_pids(exe):
        rc = None
    return rc, time.time() - t0


def cleanup(p, exe):
    if p.poll() is None:
        p.kill()
        p.wait()
    for pid in trainer_pids(exe).values():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def signal_rank_1(exe, work, extra, sig, keep=None):
    """A 2-process run (start_long_run) whose rank 1 gets signal `sig` once the
    step-3 checkpoint is on disk, copied to `keep` first when given; then
    waits up to BOUND seconds for every process. Returns ((rc or None,
    seconds), output), or (None, output) when no step-3 checkpoint came."""
    p, out = start_long_run(exe, work, extra)
    ended = None
    try:
        if wait_for(os.path.join(work, "ck", "ckpt-3.lwckpt"), p):
            if keep:
                shutil.copyfile(os.path.join(work, "ck", "ckpt-3.lwckpt"), keep)
            ranks = trainer_pids(exe)
            if 1 in ranks:
                os.kill(ranks[1], sig)
            ended = end_within(p, exe, BOUND)
    finally:
        cleanup(p, exe)
        out.close()
    with open(os.path.join(work, "out.txt")) as f:
        return ended, f.read()


def compare(name, ref, got):
    lr, lg = losses(os.path.join(ref, "log.jsonl")), losses(os.path.join(got, "log.jsonl"))
    report(len(lr) == STEPS and lr == lg, f"{name}: {STEPS} losses bit-identical", f"{lg} vs {lr}")
    names = sorted(os.listdir(os.path.join(ref, "dump")))
    params = [n for n in names if n.startswith("param_")]
    bad = same_files(os.path.join(ref, "dump"), os.path.join(got, "dump"), names)
    report(params and not bad, f"{name}: {len(params)} params and {len(names) - len(params)} "
           "outputs after the last step bit-identical", f"differ: {bad[:5]}")
    report(read(os.path.join(ref, "model.onnx")) == read(os.path.join(got, "model.onnx")),
           f"{name}: --export bit-identical", "the exports differ")


def ended_nonzero(ended, text, words, name):
    """Records the case `name` (the seconds taken after it): the job ended
    (`ended`: (rc or None, seconds), as end_within gives) with a non-zero
    status, `words` in its output `text`."""
    rc, took = ended
    report(rc not in (None, 0) and words in text, f"{name} ({took:.1f} s)",
           f"rc {rc}: {text[-800:]}")


def faults(exe, tmp):
    """The killed, hung, diverging and refused runs of one trainer (lenet owt)."""
    base = os.path.join(tmp, "faults")
    ref = os.path.join(base, "uninterrupted")
    r = run(2, exe, ref, ["--steps=6", "--dump=dump"])
    report(r.returncode == 0, "2 processes, 6 steps (the reference of the resumed runs)",
           r.stderr[-800:])

    # Killed: SIGKILL to rank 1 once the step-3 checkpoint is on disk.
    work = os.path.join(base, "killed")
    kept = os.path.join(work, "kept.lwckpt")
    ended, text = signal_rank_1(exe, work, [], signal.SIGKILL, kept)
    if ended:
        ended_nonzero(ended, text, "rank 1", f"rank 1 killed: every process ends non-zero "
                      f"within {BOUND} s and the output names rank 1")
    else:
        report(False, "rank 1 killed", "no step-3 checkpoint: " + text[-800:])
    ck = os.path.join(work, "ck")
    steps = sorted(int(f[5:-7]) for f in os.listdir(ck) if f.startswith("ckpt-") and
                   f.endswith(".lwckpt")) if os.path.isdir(ck) else []
    if steps:  # the latest checkpoint is whole: it resumes (running no step)
        r = run(1, exe, os.path.join(base, "latest"),
                [f"--resume={os.path.join(ck, f'ckpt-{steps[-1]}.lwckpt')}",
                 f"--steps={steps[-1]}"])
        report(r.returncode == 0, f"the latest checkpoint of the killed run (step {steps[-1]}) "
               "is whole", r.stderr[-800:])
    if os.path.exists(kept):
        for np in (2, 1, 4):
            got = os.path.join(base, f"resumed-{np}")
            r = run(np, exe, got, ["--steps=6", f"--resume={kept}", "--dump=dump"])
            bad = same_files(os.path.join(ref, "dump"), os.path.join(got, "dump"),
                             sorted(os.listdir(os.path.join(ref, "dump")))) \
                if r.returncode == 0 and os.path.isdir(os.path.join(ref, "dump")) else ["run"]
            report(not bad, f"the 2-process step-3 checkpoint resumed as {np} process"
                   f"{'es' if np > 1 else ''}: bit-identical at step 6 to the uninterrupted run",
                   f"differ: {bad[:5]} {r.stderr[-800:]}")

    # Hung: rank 1 stopped; rank 0 hears nothing from it for --peer-timeout.
    ended, text = signal_rank_1(exe, os.path.join(base, "hung"), ["--peer-timeout=5"],
                                signal.SIGSTOP)
    if ended:
        ended_nonzero(ended, text, "rank 1 is lost", "rank 1 stopped (--peer-timeout=5): the job "
                      f"ends non-zero within {BOUND} s, naming rank 1")
    else:
        report(False, "rank 1 stopped", text[-800:])

    # Diverging: the loss (on rank 0's device) turns non-finite; rank 0
    # stops on it; rank 1 too (it learns of it with the loss) or by MPI_Abort.
    work = os.path.join(base, "diverging")
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "out.txt"), "w") as out:
        p = subprocess.Popen(command(2, exe, ["--steps=100", "--lr=1e30"]), cwd=work,
                             stdout=out, stderr=subprocess.STDOUT, env=environment())
        try:
            ended = end_within(p, exe, BOUND)
            text = open(os.path.join(work, "out.txt")).read()
            ended_nonzero(ended, text, "not a finite number",
                          f"a non-finite loss stops every process, non-zero, within {BOUND} s")
        finally:
            cleanup(p, exe)

    # Refused at start-up.
    env = environment()
    args = ["--progress=off", "--steps=2"]
    r = harness.run(["mpirun", "--oversubscribe", "-np", "1", exe, *args, ":", "-np", "1", exe,
                     *args, "--lr=0.5"], cwd=base, env=env, timeout=BOUND)
    report(r.returncode == 1 and "refused to start" in r.stderr and "flags" in r.stderr,
           "ranks with different flags: refused, exit 1", f"rc {r.returncode}: {r.stderr[-800:]}")
    other = os.path.join(tmp, "lenet-data", "trainer")
    if os.path.exists(other):
        r = harness.run(["mpirun", "--oversubscribe", "-np", "1", exe, *args, ":", "-np", "1",
                         other, *args], cwd=base, env=env, timeout=BOUND)
        report(r.returncode == 1 and "refused to start" in r.stderr and "trainer" in r.stderr,
               "ranks running different trainers: refused, exit 1",
               f"rc {r.returncode}: {r.stderr[-800:]}")
    r = harness.run(["mpirun", "--oversubscribe", "-np", "3", exe, *args], cwd=base, env=env,
                    timeout=BOUND)
    report(r.returncode == 2 and "cannot share evenly" in r.stderr,
           "3 processes for 4 logical devices: a usage error, exit 2",
           f"rc {r.returncode}: {r.stderr[-800:]}")


def deadlock(onnx_path, tmp):
    """A trainer whose device 1 skips an all-reduce: a deadlock across processes."""
    out = os.path.join(tmp, "deadlock")
    r = harness.run([LWCC, onnx_path, "--target=cpu", "--gpus=2", "--strategy=data",
                     "--emit=source", "-o", out])
    if r.returncode:
        report(False, "deadlock: emit", r.stderr[-800:])
        return
    path = os.path.join(out, "trainer.cc")
    lines = open(path).read().split("\n")
    device1 = [k for k, line in enumerate(lines) if "bool step_d1_s" in line][0]
    calls = [k for k, line in enumerate(lines) if k > device1 and "RUN_OP(allReduce(b," in line]
    if not calls:
        report(False, "deadlock", "no all-reduce on device 1")
        return
    lines[calls[0]] = "  // (this all-reduce left out)"
    open(path, "w").write("\n".join(lines))
    exe, error = harness.build_cpu_trainer(out)
    if not exe:
        report(False, "deadlock: build", error)
        return
    env = dict(environment(), LWRT_DEADLOCK_SECONDS="3")
    t0 = time.time()
    r = harness.run(command(2, exe, ["--steps=3"]), cwd=out, env=env, timeout=BOUND + 60)
    took = time.time() - t0
    report(r.returncode != 0 and "deadlocked" in r.stderr and "every process" in r.stderr and
           took < BOUND and not trainer_pids(exe),
           f"a deadlock across 2 processes is reported, non-zero, within {BOUND} s ({took:.1f} s)",
           f"rc {r.returncode}: {r.stderr[-800:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="lenet,resnet18")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    args = ap.parse_args()
    if not shutil.which("mpirun"):
        report(False, "mpirun", "not found (Debian's openmpi-bin)")
        return harness.finish()
    models, strategies = args.models.split(","), args.strategies.split(",")
    tmp = tempfile.mkdtemp(prefix="lwcc-mpi-")
    try:
        for m in models:
            if not harness.generate(m, os.path.join(tmp, f"{m}.onnx")):
                return harness.finish()
        cases = [(m, s) for m in models for s in strategies]
        if "lenet" in models and "data" not in strategies:
            cases.append(("lenet", "data"))  # the other trainer of the refusal check

        def make(c):
            return build(os.path.join(tmp, f"{c[0]}.onnx"), ["--gpus=4", f"--strategy={c[1]}"],
                         os.path.join(tmp, f"{c[0]}-{c[1]}"))

        built = harness.build_all(cases, lambda c: c, make)
        for c in cases:
            exe, error = built[c]
            if not exe:
                report(False, f"{c[0]} --gpus 4 --strategy={c[1]}: build", error)
                continue
            if c[1] not in strategies:
                continue
            work = os.path.join(tmp, f"{c[0]}-{c[1]}", "run")
            flags = [f"--steps={STEPS}", "--log=log.jsonl", "--dump=dump", "--export=model.onnx"]
            runs = {}
            for np in [1] + PROCESSES:
                t0 = time.time()
                r = run(np, exe, f"{work}-{np}", flags)
                name = f"{c[0]} --gpus 4 --strategy={c[1]} as {np} process{'es' if np > 1 else ''}"
                if r.returncode:
                    report(False, name, (r.stdout + r.stderr)[-1500:])
                    continue
                runs[np] = f"{work}-{np}"
                if np > 1:
                    header = r.stdout.splitlines()[0] if r.stdout else ""
                    report(f"in each of {np} processes" in header and r.stdout.count("\n") == 3,
                           f"{name}: rank 0 alone prints ({time.time() - t0:.1f} s)",
                           r.stdout[-800:])
            for np in PROCESSES:
                if 1 in runs and np in runs:
                    compare(f"{c[0]} --gpus 4 --strategy={c[1]}, {np} processes vs 1", runs[1],
                            runs[np])
        exe = built.get(("lenet", "owt"), (None,))[0]
        if exe:
            faults(exe, tmp)
            deadlock(os.path.join(tmp, "lenet.onnx"), tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
