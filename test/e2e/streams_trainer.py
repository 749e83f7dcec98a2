#!/usr/bin/env python3
"""Streams inside a device: trainers on 2-4 streams train like one stream, and
every schedule lwcc makes is proven race-free.

1. Trainers. Every zoo model at test size (batch 8): CPU trainers with
   `--streams=2|3|4 --stream-policy=all` (3 only for the models with
   branches; weight gradients and updates on stream 1; from 3 on, every
   independent branch with compute-bound work on streams of its own:
   inception's branches, resnet18's shortcuts, and their gradients), on
   one device (and with 4 streams with `--gpus 2 --strategy=data`), run 5
   steps with the same seed on synthetic data, then evaluate; against
   `--streams=1` on as many devices: the 5 losses within 1e-5 relative,
   every param within 1e-4 of its largest element, the evaluation's logits
   and the export's (onnxruntime) within 1e-4. The CPU
   backend runs each stream on a thread of its own, so a missing event is a
   real race; with 3 and more streams resnet18's and inception's trainer
   sources have a step function for each branch stream of device 0. And
   fragments (`--fragments=K`, every run cut): lenet, resnet18 (4 streams,
   2 fragments), inception (3 streams, 2) and alexnet (4 streams, 3
   uneven fragments, its dropouts) train like one stream, their sources
   holding each fragment's values and branch streams; and splits along the
   channels (`--fragment-along=channels`, every heavy op as K ops on slices
   of its output channels): inception (4 streams, 2 pieces: its branches'
   convolutions, their concats) and alexnet (3 streams, 3 uneven pieces:
   convolutions, pools and the classifier's products) likewise.
2. Verifier sweep. For every zoo model at test size, every strategy on 2
   and 4 devices (data, model, owt, layerwise, hypergraph, a 1F1B pipeline
   of 2 or 4 stages) and on one device, with 1, 2, 3 and 4 streams (policy
   all; on 4 devices 1, 2 and 4), and on one device with 4 streams and the batch in 2 fragments,
   and with 4 streams and every heavy op in 2 pieces of its channels:
   `lwcc --emit=scheduled-ir` (which places the events and refuses a
   schedule the verifier cannot prove) succeeds, and `lwcc-opt
   --verify-schedule` accepts what it printed.
3. Every wait matters. In inception's one-device `--streams=4` schedule,
   each wait on a branch stream, removed one at a time (up to 12, spread over
   the step), makes `lwcc-opt --verify-schedule` fail naming the two ops
   left unordered: place-events puts no wait that is not needed.

Ends with the line "N passed, M failed".

    python3 test/e2e/streams_trainer.py [--skip-trainers] [--skip-sweep]
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import GEN, LWCC, run  # noqa: E402
import multi_device_trainer as md  # noqa: E402  (build, train, compare)

LWCC_OPT = os.path.join(harness.BIN, "lwcc-opt")
# The zoo models with independent branches (shortcuts, inception blocks).
BRANCHED = ("resnet18", "inception", "inception_v3")


def source_text(folder):
    """The trainer's source lwcc wrote into folder: trainer.cc and, for a long
    step, its parts (trainer_1.cc ...)."""
    text = ""
    for name in harness.trainer_sources(folder, ".cc"):
        with open(os.path.join(folder, name)) as f:
            text += f.read()
    return text


def pieces(s):
    """A case's streams: N, or "NfK" (K fragments of the batch) or "NcK" (K
    pieces of each heavy op's channels): (streams, along or None, K)."""
    m = re.fullmatch(r"(\d+)(?:([fc])(\d+))?", str(s))
    along = {"f": "samples", "c": "channels", None: None}[m.group(2)]
    return int(m.group(1)), along, int(m.group(3) or 1)


def trainers(tmp):
    # (model, gpus, streams); streams 1 is each (model, gpus)'s reference.
    cases = []
    for m in harness.zoo_models():
        # One device with 2, 3 and 4 streams; two devices with 4 (the test
        # command's time: 2 and 3 streams on two devices add no schedule kind
        # that one device and 4 streams do not have).
        # 3 streams only where a model has branches (3 streams give them
        # one branch stream, 4 two): on a chain, 4 streams place what 3
        # place, on one more stream.
        one = (1, 2, 3, 4) if m in BRANCHED else (1, 2, 4)
        cases += [(m, 1, s) for s in one] + [(m, 2, s) for s in (1, 4)]
    # Fragments (--fragments=K, every run cut): K pieces of the batch through
    # runs of layers on the branch streams; alexnet's dropouts draw each
    # fragment's rows of the whole mask, and 3 fragments of 8 samples are
    # uneven (3, 3, 2).
    cases += [("lenet", 1, "4f2"), ("resnet18", 1, "4f2"), ("inception", 1, "3f2"),
              ("alexnet", 1, "4f3")]
    # Splits along the channels (--fragment-along=channels): each heavy op as
    # K ops on slices of its output channels, on the branch streams.
    cases += [("inception", 1, "4c2"), ("alexnet", 1, "3c3")]
    for m in sorted({c[0] for c in cases}):
        if not harness.generate(m, os.path.join(tmp, f"{m}.onnx")):
            return

    def key(c):
        return f"{c[0]}-g{c[1]}-s{c[2]}"

    def make(c):
        m, g, s = c
        streams, along, k = pieces(s)
        flags = [f"--streams={streams}", "--stream-policy=all"]
        if along:
            flags += [f"--fragments={k}", f"--fragment-along={along}"]
        if g > 1:
            flags += [f"--gpus={g}", "--strategy=data"]
        return md.build(os.path.join(tmp, f"{m}.onnx"), flags, os.path.join(tmp, key(c)))

    built = harness.build_all(cases, key, make)
    runs = {}
    for c in cases:
        work = os.path.join(tmp, key(c), "run")
        if not md.train_built(key(c), built[key(c)], work, c[1]):
            continue
        if isinstance(c[2], int) and c[2] >= 3 and c[0] in ("resnet18", "inception"):
            # Shortcuts and inception branches: a step function per branch stream.
            text = source_text(os.path.join(tmp, key(c)))
            branch = [int(s) for s in set(re.findall(r"bool step_d0_s(\d+)\(", text)) if int(s) > 1]
            harness.record(len(branch) >= 1,
                           f"{key(c)}: device 0 runs branch streams {sorted(branch)}",
                           "no step function for a stream above 1")
        _, along, k = pieces(c[2])
        if along:
            # The pieces of the batch (or of the channels): values of each
            # piece, on branch streams.
            text = source_text(os.path.join(tmp, key(c)))
            tag = "fr" if along == "samples" else "ch"
            named = all(f"_{tag}{i}" in text for i in range(k))
            branch = [int(s) for s in set(re.findall(r"bool step_d0_s(\d+)\(", text)) if int(s) > 1]
            harness.record(named and branch,
                           f"{key(c)}: {k} pieces along the {along}, on branch streams "
                           f"{sorted(branch)}",
                           f"piece values named: {named}; branch streams: {branch}")
        runs[c] = work
    for c, work in runs.items():
        ref = runs.get((c[0], c[1], 1))
        if c[2] != 1 and ref:
            where = f" --gpus {c[1]} --strategy=data" if c[1] > 1 else ""
            streams, along, k = pieces(c[2])
            what = f"--streams={streams}" + (
                f" --fragments={k} --fragment-along={along}" if along else "")
            md.compare(f"{c[0]}{where} {what} vs --streams=1", ref, work)


def sweep(tmp):
    strategies = [("1 device", [])]
    for g in (2, 4):
        strategies += [(f"--gpus {g} --strategy={s}", [f"--gpus={g}", f"--strategy={s}"])
                       for s in ("data", "model", "owt", "layerwise", "hypergraph")]
        strategies.append((f"--gpus {g} {g}-stage pipeline",
                           [f"--gpus={g}", "--strategy=pipeline", f"--stages={g}",
                            f"--microbatches={g}", "--schedule=1f1b"]))
    for m in harness.zoo_models():
        path = os.path.join(tmp, f"sweep-{m}.onnx")
        if not harness.generate(m, path):
            continue
        bad = []
        count = 0
        for name, flags in strategies:
            # 3 streams on 4 devices add no schedule kind that 2 devices lack.
            for s in (1, 2, 4) if "--gpus 4" in name else (1, 2, 3, 4):
                count += 1
                r = run([LWCC, path, "--target=cpu", *flags, f"--streams={s}",
                         "--stream-policy=all", "--emit=scheduled-ir"])
                if r.returncode:
                    bad.append(f"{name} --streams={s}: lwcc: {r.stderr[-400:]}")
                    continue
                v = run([LWCC_OPT, "--verify-schedule", "-"], stdin=r.stdout)
                if v.returncode:
                    bad.append(f"{name} --streams={s}: lwcc-opt: {v.stderr[-400:]}")
        # One device, the batch in 2 fragments through every run; every heavy
        # op in 2 pieces of its channels.
        for along, piece in (("samples", ".fr1"), ("channels", ".ch1")):
            count += 1
            what = f"--fragments=2 --fragment-along={along}"
            r = run([LWCC, path, "--target=cpu", "--streams=4", "--fragments=2",
                     f"--fragment-along={along}", "--stream-policy=all", "--emit=scheduled-ir"])
            if r.returncode or piece not in r.stdout:
                bad.append(f"{what}: lwcc: exit {r.returncode}, {r.stderr[-400:]}")
                continue
            v = run([LWCC_OPT, "--verify-schedule", "-"], stdin=r.stdout)
            if v.returncode:
                bad.append(f"{what}: lwcc-opt: {v.stderr[-400:]}")
        harness.record(not bad, f"{m}: {count} schedules (devices x strategies x streams 1-4, 2 "
                       "fragments, 2 channel pieces) verify", "; ".join(bad[:3]))


def waits_matter(tmp):
    path = os.path.join(tmp, "inception.onnx")
    if not os.path.exists(path):
        run([sys.executable, GEN, "inception", "--test-size", "--batch", "8", "-o", path])
    r = run([LWCC, path, "--target=cpu", "--streams=4", "--stream-policy=all",
             "--emit=scheduled-ir"])
    if r.returncode:
        harness.record(False, "inception --streams=4: scheduled IR", r.stderr[-500:])
        return
    lines = r.stdout.split("\n")
    waits = [i for i, line in enumerate(lines)
             if re.search(r"\bwait\(\)", line) and re.search(r"@stream\([23]\)", line)
             and "step start" not in line]
    if not waits:
        harness.record(False, "inception --streams=4: waits on branch streams", "none found")
        return
    picked = waits[::max(1, len(waits) // 12)][:12]
    missed = []
    for i in picked:
        cut = "\n".join(lines[:i] + lines[i + 1:])
        v = run([LWCC_OPT, "--verify-schedule", "-"], stdin=cut)
        named = v.returncode != 0 and "nothing orders" in v.stderr
        if not named:
            missed.append(f"line {i + 1}: {lines[i].strip()[:120]} (exit {v.returncode}: "
                          f"{v.stderr[-200:]})")
    harness.record(not missed, f"inception --streams=4: each of {len(picked)} of {len(waits)} "
                   "branch waits, removed, is a verifier error", "; ".join(missed[:3]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--skip-trainers", action="store_true")
    ap.add_argument("--skip-sweep", action="store_true")
    args = ap.parse_args()
    with harness.scratch("lwcc-streams-") as tmp:
        if not args.skip_trainers:
            trainers(tmp)
        if not args.skip_sweep:
            sweep(tmp)
        waits_matter(tmp)
    return harness.finish()


if __name__ == "__main__":
    sys.exit(main())
