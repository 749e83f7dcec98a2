"""Compares the chosen strategy's row of an --emit=plan --plan-json file
(argv[1]) with what `lwcc-opt --simulate` printed (argv[2]) for the
scheduled IR of the same compile: the row's step against the simulated one
(printed to 3 decimals), its peak per device against the memory plan's
arena per device."""
import json
import re
import sys

plan = json.load(open(sys.argv[1]))
row = plan["strategies"][plan["chosen"]]
sim = re.search(r"simulate: step ([0-9.]+) ms", open(sys.argv[2]).read())
step = f"{row['step_s'] * 1e3:.3f}"
print("step:", "same" if sim and sim.group(1) == step else f"{step} ms vs {sim and sim.group(1)}")
arena = [d["arena_bytes"] for d in plan["memory"]]
peak = row["peak_bytes_per_device"]
print("peak:", "same" if peak == arena else f"{peak} vs {arena}")
