"""Checks lwcc --plan-json's account of --strategy=layerwise's simulator check.

    python3 check_search.py PLAN.json [--kept NAME]

The search's plan, data, owt and model parallelism and the pipeline plans
(pipeline/S/M) were each simulated ("search_check": {"kept", "candidates":
{name: step_s}}) or left out with a reason (a bound from a sibling, a
compact price: "left_out": {name: why}); the kept one is the fastest that fits the devices' memory
(a tie keeps the search's plan), and the layerwise row of the strategies
table is the kept plan's step, no slower than data, model or owt.
"""
import json
import sys

plan = json.load(open(sys.argv[1]))
check = plan["search_check"]
cands = check["candidates"]
uniform = sorted(k for k in cands if not k.startswith("pipeline/"))
assert uniform == ["data", "layerwise", "model", "owt"], cands
left = check["left_out"]
assert any(k.startswith("pipeline/") for k in list(cands) + list(left)), (cands, left)
assert not set(cands) & set(left), (cands, left)
best = min(cands.values())
assert cands[check["kept"]] == best, (check["kept"], cands)
if cands["layerwise"] == best:
    assert check["kept"] == "layerwise", "a tie keeps the search's plan"
steps = {k: v["step_s"] for k, v in plan["strategies"].items() if "step_s" in v}
assert steps["layerwise"] == best, (steps, cands)
for other in ("data", "model", "owt"):
    assert steps["layerwise"] <= steps[other], (other, steps)
    assert steps[other] == cands[other], (other, steps, cands)
if len(sys.argv) > 3 and sys.argv[2] == "--kept":
    assert check["kept"] == sys.argv[3], (check["kept"], cands)
print("kept", check["kept"])
