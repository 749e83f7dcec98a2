#!/usr/bin/env python3
"""Check the streams of a pipeline's transfers between stages in a
scheduled or parallel IR: on each device, for each direction (forward:
to a later device, backward: to an earlier one), what it receives from
each other device and what it sends go on different streams, so that no
receive waits in a queue behind a send or another stage's receive. Prints
each device's queues; exits 1 naming the first device and stream that
two of them share.

  python3 transfer_streams.py STEP.lwir
"""

import re
import sys
from collections import defaultdict

COPY = re.compile(r"device_copy\(.*\{src = (\d+), dst = (\d+)\}.*@stream\((\d+)\) @mb\(\d+\)")

queues = defaultdict(lambda: defaultdict(set))  # (device, direction) -> stream -> roles
for line in open(sys.argv[1]):
    m = COPY.search(line)
    if not m:
        continue
    src, dst, stream = (int(g) for g in m.groups())
    if src == dst:
        continue
    direction = "forward" if src < dst else "backward"
    queues[(src, direction)][stream].add("send")
    queues[(dst, direction)][stream].add(f"receive from {src}")
if not queues:
    sys.exit("transfer_streams: no transfers between devices in " + sys.argv[1])
bad = None
for (device, direction), streams in sorted(queues.items()):
    print(f"device {device} {direction}: " +
          "; ".join(f"stream {s}: {', '.join(sorted(r))}" for s, r in sorted(streams.items())))
    for s, roles in sorted(streams.items()):
        if len(roles) > 1 and bad is None:
            bad = f"device {device} {direction} stream {s} holds {' and '.join(sorted(roles))}"
if bad:
    sys.exit("transfer_streams: " + bad)
print("transfer_streams: every queue holds one sender's transfers")
