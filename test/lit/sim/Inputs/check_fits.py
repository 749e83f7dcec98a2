"""The planner's fit of each candidate against the candidate built alone.

For each device memory size given, `lwcc MODEL -v --emit=plan` on a copy of
SPEC with that memory lists the layerwise selection's candidates, each
marked "(over memory)" or not, and the one kept (--shard=auto and
--recompute=auto add each candidate over memory that would be faster than
the fastest that fits again with its optimizer state sharded, with
recomputation and with both: NAME+zero1, NAME+recompute,
NAME+zero1+recompute; then NAME+zero2, NAME+fsdp>=N (the params of N bytes
and more sharded), NAME+fsdp and each with +recompute; and, for one that
fits with +recompute, +recompute(K): only the K layers with the most bytes;
for one that fits with +fsdp, +fsdp>=T for larger T, found by bisection).
This checks, for every
candidate, that the mark is what the candidate's own compile says (built
with its strategy, stages, micro-batches, sharding and recomputation fixed
up to its scheduled IR, the memory plan checked against the spec: exit 1
over memory), and that the kept plan is the
fastest one not over memory (the first candidate when none fits; one that
shards more than the fastest before it must be faster by more than 1%). It
prints one line per size: "MEM: N fit, kept PLAN". A size "data/K" is the
memory data parallelism's step needs per device (--strategy=data
--shard=none --recompute=none: params, state and arena) divided by K. Flags
after "--" go to every lwcc run (say, --optimizer=adamw).

    check_fits.py LWCC MODEL SPEC GPUS BATCH MEM [MEM ...] [-- LWCC_FLAGS]
"""
import json
import os
import re
import subprocess
import sys
import tempfile


def rank(name):
    """How much candidate NAME shards: none, zero1, zero2, fsdp."""
    extras = [x.split(">=")[0] for x in name.split("+")[1:]]
    return next((r for r, s in enumerate(("zero1", "zero2", "fsdp"), 1) if s in extras), 0)


def main():
    lwcc, model, spec_path, gpus, batch = sys.argv[1:6]
    args = sys.argv[6:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    sizes = args[:args.index("--")] if "--" in args else args
    base = json.load(open(spec_path))
    common = [model, f"--gpus={gpus}", f"--batch={batch}", "--emit=plan", "-o", os.devnull,
              *extra]
    alone_common = ["--emit=scheduled-ir" if a == "--emit=plan" else a for a in common]
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            label = size
            if size.startswith("data/"):
                out = os.path.join(tmp, "data.json")
                subprocess.run([lwcc] + common + [f"--device-spec={spec_path}", "--strategy=data",
                                                  "--shard=none", "--recompute=none",
                                                  f"--plan-json={out}"], check=True,
                               capture_output=True)
                need = max(d["params_bytes"] + d["state_bytes"] + d["arena_bytes"]
                           for d in json.load(open(out))["memory"])
                mem = need // int(size[5:])
                label = f"{size} of {need}: {mem}"
            else:
                mem = int(float(size))
                label = str(mem)
            spec = dict(base, memory_bytes=mem)
            path = os.path.join(tmp, f"spec-{mem}.json")
            json.dump(spec, open(path, "w"))
            r = subprocess.run([lwcc] + common + [f"--device-spec={path}", "-v"],
                               capture_output=True, text=True)
            line = next((x for x in r.stderr.splitlines()
                         if x.startswith("lwcc: layerwise: simulated step:")), None)
            if line is None:
                sys.exit(f"{mem}: no selection line in:\n{r.stderr[-2000:]}")
            body, kept = line.split(": simulated step:")[1].rsplit("; kept ", 1)
            cands = re.findall(r"(\S+) ([0-9.]+) ms( \(over memory\))?", body)
            for name, _, over in cands:
                plan, *extras = name.split("+")
                # +recompute: every layer's values; +recompute(K): the K
                # layers' with the most bytes (--recompute=K).
                again = next((x[len("recompute"):].strip("()") or "all" for x in extras
                              if x.startswith("recompute")), None)
                shard = next((x for x in extras if x.split(">=")[0] in ("zero1", "zero2", "fsdp")),
                             "none")
                if plan.startswith("pipeline/"):
                    _, s, m = plan.split("/")
                    fixed = ["--strategy=pipeline", f"--stages={s}", f"--microbatches={m}"]
                else:
                    fixed = [f"--strategy={plan}", "--check-search=false"]
                fixed.append(f"--recompute={again or 'none'}")
                shard, *least = shard.split(">=")
                fixed.append(f"--shard={shard}")
                fixed += [f"--shard-min-bytes={n}" for n in least]
                # Up to the trainer's schedule (its memory plan checked against
                # the spec as --emit=plan's is), without the plan report's
                # pricing of every other strategy: a tenth of the time.
                alone = subprocess.run([lwcc] + alone_common + [f"--device-spec={path}"] + fixed,
                                       capture_output=True, text=True)
                alone_over = alone.returncode != 0 and "more memory than" in alone.stderr
                if alone.returncode != 0 and not alone_over:
                    sys.exit(f"{mem} {name}: built alone: {alone.stderr[-1500:]}")
                if alone_over != bool(over):
                    sys.exit(f"{mem} {name}: the planner says {'over' if over else 'fits'}, "
                             f"the candidate alone {'over' if alone_over else 'fits'}")
            fitting = [(float(ms), i, n) for i, (n, ms, over) in enumerate(cands) if not over]
            # In order, a candidate is kept over the fastest so far when
            # faster, by more than 1% where it shards more (Planner.cpp).
            want = None
            for ms, _, n in fitting:
                if want is None or ms < want[0] * (0.99 if rank(n) > rank(want[1]) else 1.0):
                    want = (ms, n)
            want = want[1] if want else cands[0][0]
            if kept != want:
                sys.exit(f"{label}: kept {kept}, the fastest that fits is {want}: {line}")
            print(f"{label}: {len(fitting)} fit, kept {kept}")


if __name__ == "__main__":
    main()
