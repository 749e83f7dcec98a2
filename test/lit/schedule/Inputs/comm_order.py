"""Whether each device runs its communication ops one at a time in graph
order, by the scheduled IR's own ordering: stream order plus record and
wait events (a vector clock per stream of a device). Prints one line per
device: "device D: N communication ops, each after the one before", or the
first pair whose order nothing implies, and exits 1 then.

    comm_order.py SCHEDULED.lwir
"""
import re
import sys

COMM = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce_to",
        "device_copy", "shard", "unshard")


def main():
    lanes = {}    # (device, stream) -> clock: {(device, stream): last position}
    events = {}   # event -> clock recorded
    last = {}     # device -> (lane, position, line) of its latest communication op
    counts = {}
    bad = []
    for n, line in enumerate(open(sys.argv[1]), 1):
        m = re.search(r"= (\w+)\(|^\s+(record|wait)\(\)", line)
        if not m:
            continue
        kind = m.group(1) or m.group(2)
        stream = int((re.search(r"@stream\((\d+)\)", line) or [0, 0])[1])
        dev = re.search(r"@dev\((\d+)\)", line)
        if kind in COMM:
            devs = [int(d) for d in re.search(r"devices = \[([\d, ]+)\]", line)[1].split(",")]
        else:
            devs = [int(dev[1]) if dev else 0]
        for d in devs:
            lane = (d, stream)
            clock = lanes.setdefault(lane, {})
            if kind == "wait":
                for k, v in events[int(re.search(r"event = (\d+)", line)[1])].items():
                    clock[k] = max(clock.get(k, -1), v)
                continue
            clock[lane] = n
            if kind == "record":
                events[int(re.search(r"event = (\d+)", line)[1])] = dict(clock)
            if kind in COMM:
                counts[d] = counts.get(d, 0) + 1
                if d in last:
                    plane, pos, pline = last[d]
                    if clock.get(plane, -1) < pos and not bad:
                        bad.append(f"device {d}: line {n} (stream {stream}) may run before "
                                   f"line {pline} (stream {plane[1]})")
                last[d] = (lane, n, n)
    for d in sorted(counts):
        print(f"device {d}: {counts[d]} communication ops, each after the one before")
    if bad:
        print(bad[0])
        sys.exit(1)


if __name__ == "__main__":
    main()
