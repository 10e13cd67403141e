#!/usr/bin/env python3
"""Self time per operator of a LibTorch profiler trace (bench_potentials --profile).

    benchmarks/profile_summary.py TRACE.json [TOP]

Events nest (an operator calls others); self time is an event's duration minus that of the
events directly inside it. Prints the TOP (default 25) operators by self time.
"""
import json
import sys
from collections import defaultdict


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    with open(path) as f:
        text = f.read().rstrip().rstrip(',')
    if not text.endswith(']'):
        text += ']'
    events = [e for e in json.loads(text) if e.get('ph') == 'X']
    by_thread = defaultdict(list)
    for e in events:
        by_thread[e.get('tid')].append(e)
    self_time = defaultdict(float)
    calls = defaultdict(int)
    total = 0.0
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e['ts'], -e['dur']))
        stack = []  # [end, name, child time]
        def pop():
            end, name, child, dur = stack.pop()
            self_time[name] += dur - child
        for e in evs:
            while stack and e['ts'] >= stack[-1][0]:
                pop()
            if stack:
                stack[-1][2] += e['dur']
            else:
                total += e['dur']
            stack.append([e['ts'] + e['dur'], e['name'], 0.0, e['dur']])
            calls[e['name']] += 1
        while stack:
            pop()
    print(f"total (outermost events) {total / 1e3:.1f} ms")
    print(f"{'operator':40s} {'self ms':>10s} {'share':>7s} {'calls':>7s}")
    for name, t in sorted(self_time.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{name:40s} {t / 1e3:10.2f} {100 * t / total:6.1f}% {calls[name]:7d}")


if __name__ == '__main__':
    main()
